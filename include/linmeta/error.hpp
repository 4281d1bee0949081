// linmeta::Error — the one exception type the library throws.
#pragma once

#include <stdexcept>
#include <string>

namespace linmeta {

/// Thrown for invalid configuration, malformed step input and CUDA failures.
/// Messages name the field, the row and the offending values.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace linmeta
