// Where the test data lives: $LINMETA_TEST_DATA, else the source tree's tests/data.
#pragma once

#include <cstdlib>
#include <string>

namespace linmeta::testing {

inline std::string data_path(const std::string& file) {
  const char* env = std::getenv("LINMETA_TEST_DATA");
  return std::string(env != nullptr ? env : LINMETA_TEST_DATA) + "/" + file;
}

}  // namespace linmeta::testing
