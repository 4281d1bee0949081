// Every public case (tests/data/public.jsonl) through the public API on the cuda
// target; multi-group cases also with one builder per group.
#include <cctype>

#include "gpu_support.hpp"
#include "test_data.hpp"

namespace linmeta::gputest {
namespace {

std::vector<json> public_cases() {
  return cases::read_jsonl(linmeta::testing::data_path("public.jsonl"));
}

std::vector<json> multi_group_cases() {
  std::vector<json> out;
  for (auto& j : public_cases())
    if (j.at("step").contains("groups")) out.push_back(j);
  return out;
}

void expect_case(const cases::Case& c, bool independent) {
  const auto got = cases::run_case(c, Target::Cuda, independent);
  ASSERT_EQ(got.size(), c.expected_groups.size()) << c.name;
  for (size_t g = 0; g < got.size(); ++g)
    for (const auto& m : cases::compare(c.expected_groups[g], got[g]))
      ADD_FAILURE() << c.name << " group " << g << ": " << m.field << ": expected " << m.expected
                    << ", got " << m.got;
}

std::string case_name(const ::testing::TestParamInfo<json>& info) {
  std::string s = std::to_string(info.index) + "_";
  for (char ch : info.param.at("name").get<std::string>())
    s += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return s;
}

class PublicCaseGpu : public GpuParamTest<json> {};

TEST_P(PublicCaseGpu, CudaTargetMatchesReference) {
  expect_case(cases::parse_case(GetParam()), /*independent=*/false);
}

INSTANTIATE_TEST_SUITE_P(Public, PublicCaseGpu, ::testing::ValuesIn(public_cases()), case_name);

class PublicMultiGroupCaseGpu : public GpuParamTest<json> {};

TEST_P(PublicMultiGroupCaseGpu, CudaTargetIndependentBuildersPerGroup) {
  const auto c = cases::parse_case(GetParam());
  ASSERT_TRUE(c.multi_group);
  expect_case(c, /*independent=*/true);
}

INSTANTIATE_TEST_SUITE_P(Public, PublicMultiGroupCaseGpu, ::testing::ValuesIn(multi_group_cases()),
                         case_name);

// The file holds multi-group cases (else the suite above would test nothing).
class PublicCasesFileGpu : public GpuTest {};

TEST_F(PublicCasesFileGpu, HoldsMultiGroupAndCaptureCases) {
  EXPECT_FALSE(multi_group_cases().empty());
  int capture = 0;
  for (const auto& j : public_cases())
    capture += j.value("mode", std::string("build")) == "capture" ? 1 : 0;
  EXPECT_GT(capture, 0);
}

}  // namespace
}  // namespace linmeta::gputest
