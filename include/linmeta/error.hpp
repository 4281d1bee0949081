// The exceptions the library throws.
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

/// A broken invariant of linmeta itself (a write past the step arena, a job past its
/// buffer): never the caller's input. Tests, the fuzzer and linmeta-replay treat one as a
/// finding. A subclass of Error, so that engines that catch Error still catch it.
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& what) : Error("linmeta: internal error: " + what) {}
};

}  // namespace linmeta
