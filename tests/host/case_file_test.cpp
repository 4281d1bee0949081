// Every public case (tests/data/public.jsonl) through the public API, host target.
#include "case_file.hpp"

#include <gtest/gtest.h>

#include "test_data.hpp"

namespace linmeta {
namespace {

using cases::json;

std::vector<json> public_cases() { return cases::read_jsonl(testing::data_path("public.jsonl")); }

std::vector<json> multi_group_cases() {
  std::vector<json> out;
  for (const auto& j : public_cases())
    if (j.at("step").contains("groups")) out.push_back(j);
  return out;
}

class PublicCase : public ::testing::TestWithParam<json> {};
class PublicMultiGroupCase : public ::testing::TestWithParam<json> {};

void expect_case(const cases::Case& c, Target target, bool independent) {
  const auto got = cases::run_case(c, target, independent);
  ASSERT_EQ(got.size(), c.expected_groups.size());
  for (size_t g = 0; g < got.size(); ++g)
    for (const auto& m : cases::compare(c.expected_groups[g], got[g]))
      ADD_FAILURE() << c.name << " group " << g << ": " << m.field << ": expected " << m.expected
                    << ", got " << m.got;
}

TEST_P(PublicCase, HostTargetMatchesReference) {
  expect_case(cases::parse_case(GetParam()), Target::Host, false);
}

TEST_P(PublicMultiGroupCase, HostTargetIndependentBuildersPerGroup) {
  expect_case(cases::parse_case(GetParam()), Target::Host, true);
}

std::string case_name(const ::testing::TestParamInfo<json>& info) {
  std::string s = std::to_string(info.index) + "_";
  for (char ch : info.param.at("name").get<std::string>())
    s += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Public, PublicCase, ::testing::ValuesIn(public_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Public, PublicMultiGroupCase, ::testing::ValuesIn(multi_group_cases()),
                         case_name);

}  // namespace
}  // namespace linmeta
