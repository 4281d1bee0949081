// linmeta/version.hpp (generated from cmake/version.hpp.in) carries CMakeLists.txt's
// project version, which tests/CMakeLists.txt hands this test as LINMETA_TEST_PROJECT_VERSION;
// the Python side (linmeta.__version__, the wheel) is checked against the same line by
// tests/python/test_version.py.
#include <gtest/gtest.h>

#include <string>

#include "linmeta/linmeta.hpp"

namespace linmeta {
namespace {

TEST(Version, HeaderIsTheCMakeProjectVersion) {
  EXPECT_EQ(std::string(LINMETA_VERSION), LINMETA_TEST_PROJECT_VERSION);
  EXPECT_EQ(std::to_string(LINMETA_VERSION_MAJOR) + "." + std::to_string(LINMETA_VERSION_MINOR) +
                "." + std::to_string(LINMETA_VERSION_PATCH),
            LINMETA_VERSION);
}

}  // namespace
}  // namespace linmeta
