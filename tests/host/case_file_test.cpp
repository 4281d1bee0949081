// Every public case (tests/data/public.jsonl) through the public API, host target; hostile
// case-file input (deep nesting, out-of-range indices, values of the wrong kind).
#include "case_file.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

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

// --- Hostile input (docs/replay.md, "Untrusted input").

std::string nested(char open, char close, size_t depth, const std::string& inner = "1") {
  return std::string(depth, open) + inner + std::string(depth, close);
}

std::string nested_objects(size_t depth) {
  std::string s;
  for (size_t i = 0; i < depth; ++i) s += "{\"a\":";
  return s + "1" + std::string(depth, '}');
}

bool says_too_deep(const cases::Line& line) {
  return line.error.find("nested deeper than " + std::to_string(cases::kMaxJsonDepth) +
                         " levels") != std::string::npos;
}

TEST(HostileCaseFile, DeepNestingIsRejectedBeforeParsing) {
  constexpr size_t kDeep = 100'000;  // 200 KB: overflows the stack of any recursive walk
  for (const std::string& text :
       {nested('[', ']', kDeep), nested_objects(kDeep), std::string(kDeep, '['),
        "{\"name\":\"x\",\"step\":" + nested('[', ']', kDeep) + "}"}) {
    const auto line = cases::parse_line(text, 7);
    EXPECT_EQ(line.number, 7);
    EXPECT_TRUE(says_too_deep(line)) << line.error;
    EXPECT_TRUE(line.value.is_null());
  }
}

TEST(HostileCaseFile, DepthLimitIsExact) {
  const auto depth = static_cast<size_t>(cases::kMaxJsonDepth);
  for (const std::string& text : {nested('[', ']', depth), nested_objects(depth)}) {
    const auto line = cases::parse_line(text);
    EXPECT_TRUE(line.error.empty()) << line.error;
  }
  const auto line = cases::parse_line(nested('[', ']', depth + 1));
  EXPECT_TRUE(says_too_deep(line)) << line.error;
  EXPECT_NE(line.error.find("(column " + std::to_string(depth + 1) + ")"), std::string::npos)
      << line.error;
}

TEST(HostileCaseFile, BracketsInsideStringsDoNotNest) {
  const std::string brackets(1000, '[');
  const std::string text =
      R"({"a":")" + brackets + R"(\"\\)" + brackets + R"(","b":[")" + brackets + R"("]})";
  const auto line = cases::parse_line(text);
  ASSERT_TRUE(line.error.empty()) << line.error;
  EXPECT_EQ(line.value.at("a").get<std::string>(), brackets + "\"\\" + brackets);
}

TEST(HostileCaseFile, NumberOverflowIsALineError) {
  const auto line = cases::parse_line(R"({"a":1e999})");
  EXPECT_NE(line.error.find("not valid JSON"), std::string::npos) << line.error;
  EXPECT_TRUE(line.value.is_null());
}

/// A 200 KB deeply nested line, an overflowing number, then a valid case: the valid case is
/// still read, and passes.
TEST(HostileCaseFile, LinesAfterADeepLineStillRun) {
  const auto path = std::filesystem::path(::testing::TempDir()) /
                    ("linmeta_deep_" + std::to_string(::getpid()) + ".jsonl");
  {
    std::ofstream out(path);
    out << nested('[', ']', 100'000) << "\n"
        << nested_objects(100'000) << "\n"
        << R"({"a":1e999})"
        << "\n"
        << public_cases().at(0).dump() << "\n";
  }
  const auto lines = cases::read_lines(path.string());
  std::filesystem::remove(path);
  ASSERT_EQ(lines.size(), 4U);
  EXPECT_TRUE(says_too_deep(lines[0])) << lines[0].error;
  EXPECT_TRUE(says_too_deep(lines[1])) << lines[1].error;
  EXPECT_FALSE(lines[2].error.empty());
  ASSERT_TRUE(lines[3].error.empty()) << lines[3].error;
  EXPECT_EQ(lines[3].number, 4);
  expect_case(cases::parse_case(lines[3].value), Target::Host, false);
}

/// The vllm-0.34 case whose FlashInfer prefill order has a tie ([0, 1, 2], lengths 699, 0, 0).
json tie_case() {
  for (const auto& j : cases::read_jsonl(testing::data_path("vllm034.jsonl")))
    if (j.at("name").get<std::string>().starts_with("vllm034/kda/0148:")) return j;
  ADD_FAILURE() << "vllm034/kda/0148 not found";
  return {};
}

TEST(HostileCaseFile, SeqOrderOfAnyShapeIsAMismatch) {
  const json j = tie_case();
  ASSERT_TRUE(j.is_object());
  const auto c = cases::parse_case(j);
  const auto got = cases::run_case(c, Target::Host);
  ASSERT_EQ(got.size(), 1U);
  ASSERT_EQ(got[0].at("flashinfer_prefill_seq_order"), json({0, 1, 2}));
  const json qsl = c.expected.at("flashinfer_prefill_query_start_loc");
  ASSERT_EQ(qsl, json({0, 699, 699, 699}));

  auto mismatches = [&](const json& order, const json& q) {
    json e = c.expected;
    e["flashinfer_prefill_seq_order"] = order;
    e["flashinfer_prefill_query_start_loc"] = q;
    std::vector<std::string> fields;
    for (const auto& m : cases::compare(e, got[0])) fields.push_back(m.field);
    return fields;
  };
  const std::vector<std::string> order_only = {"flashinfer_prefill_seq_order"};
  EXPECT_TRUE(mismatches({0, 2, 1}, qsl).empty());  // a tie: either order is right
  const json huge_unsigned = std::numeric_limits<uint64_t>::max();
  for (const json& order :
       {json{0, 1, int64_t{1} << 40}, json{0, 1, 3}, json{0, 1, -1}, json{0, 2, "1"},
        json{0, 2, 1.0}, json{0, 2, 1.5}, json{0, 2, nullptr}, json{0, 2, json::array()},
        json{0, 1, huge_unsigned}, json{0, 1, std::numeric_limits<int64_t>::min()}, json{0, 1, 1},
        json{0, 2, 2}, json{0, 2}, json{0, 2, 1, 3}, json("012"), json(3), json(nullptr),
        json::object()})
    EXPECT_EQ(mismatches(order, qsl), order_only) << order.dump();

  // Start locations of any shape: that field mismatches, and the order is not excused by ties.
  const std::vector<std::string> both = {"flashinfer_prefill_query_start_loc",
                                         "flashinfer_prefill_seq_order"};
  for (const json& q :
       {json{0, 699, "699", 699}, json{0, 699, 699.5, 699}, json{0, 699, 699},
        json{0, 699, 699, 699, 699}, json{0, INT64_MAX, INT64_MIN, 699},
        json{0, huge_unsigned, 0, 699}, json("0,699"), json(nullptr), json::object()})
    EXPECT_EQ(mismatches({0, 2, 1}, q), both) << q.dump();
}

TEST(HostileCaseFile, CompareNeverThrows) {
  const auto c = cases::parse_case(public_cases().at(0));
  const auto got = cases::run_case(c, Target::Host);
  ASSERT_FALSE(got.empty());
  for (const json& expected :
       {json(5), json("x"), json(nullptr), json::array({1, 2}), json(true)}) {
    std::vector<cases::Mismatch> m;
    EXPECT_NO_THROW(m = cases::compare(expected, got[0])) << expected.dump();
    EXPECT_EQ(m.size(), 1U) << expected.dump();
  }
  // `got` not of to_json()'s shape (compare is public): a mismatch, not an exception.
  const json conv = c.expected.at("conv1d");
  for (const json& bad_got :
       {json{{"nums_dict", 5}}, json{{"nums_dict", {{"8", {{"tot", -5}}}}}},
        json{{"nums_dict", {{"8", {{"tot", "3"}}}}}, {"batch_ptr", 1}},
        json{{"nums_dict",
              {{"8", {{"tot", 3}, {"nums", {1}}, {"mlist", {1}}, {"offsetlist", {0}}}}}},
             {"batch_ptr", 1},
             {"token_chunk_offset_ptr", 2}},
        json(7)}) {
    std::vector<cases::Mismatch> m;
    EXPECT_NO_THROW(m = cases::compare(json{{"conv1d", conv}}, bad_got)) << bad_got.dump();
    EXPECT_FALSE(m.empty()) << bad_got.dump();
  }
}

TEST(HostileCaseFile, ExpectedGroupsEntriesMustBeObjects) {
  const auto multi = multi_group_cases();
  ASSERT_FALSE(multi.empty());
  for (const json& entry : {json(5), json("x"), json(nullptr), json::array({1, 2})}) {
    json j = multi.at(0);
    j["expected_groups"][1] = entry;
    try {
      (void)cases::parse_case(j);
      ADD_FAILURE() << "expected_groups[1] = " << entry.dump() << " accepted";
    } catch (const cases::CaseError& e) {
      EXPECT_NE(std::string(e.what()).find("expected_groups[1]: expected an object"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(HostileCaseFile, ErrorMessagesAreValidUtf8) {
  json j = public_cases().at(0);
  // shown() cuts values at 40 bytes: here inside a two-byte sequence.
  j["step"]["num_actual_tokens"] =
      "a\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9"
      "\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9";
  try {
    (void)cases::parse_case(j);
    ADD_FAILURE() << "a string num_actual_tokens accepted";
  } catch (const cases::CaseError& e) {
    EXPECT_NO_THROW((void)json(e.what()).dump()) << e.what();  // linmeta-replay run dumps it
  }
}

// --- Strict keys (docs/case-format.md): a key the reader does not know is an error naming it.

/// The CaseError message of parse_case(j), "" when it parses.
std::string case_error(const json& j) {
  try {
    (void)cases::parse_case(j);
    return {};
  } catch (const cases::CaseError& e) {
    return e.what();
  }
}

TEST(StrictCaseFile, UnknownKeysAreErrorsNamingThem) {
  const json base = public_cases().at(0);
  struct Edit {
    json::json_pointer at;
    std::string message;  ///< the start of the error
  };
  for (const Edit& e : {
           Edit{json::json_pointer("/notes"), R"(unknown key "notes" (a case has name, )"},
           Edit{json::json_pointer("/config/checkpoint_alignment"),
                R"(config: unknown key "checkpoint_alignment" (config has num_spec, )"},
           Edit{json::json_pointer("/config/chunk_metadata"),
                R"(config: unknown key "chunk_metadata")"},
           Edit{json::json_pointer("/step/seq_len"),
                R"(step: unknown key "seq_len" (step has query_start_loc, )"},
       }) {
    json j = base;
    j[e.at] = 1;
    EXPECT_TRUE(case_error(j).starts_with(e.message)) << e.at << ": " << case_error(j);
  }
  json err = base;
  err.erase("expected");
  err["error"] = {{"type", "ValueError"}, {"message", "m"}, {"raised_at", "x"}};
  EXPECT_TRUE(case_error(err).starts_with(R"(error: unknown key "raised_at" (error has type, )"))
      << case_error(err);
  err["error"].erase("raised_at");
  err["error"]["where"] = "builder.py:12 in build";
  err["error"]["line"] = "raise ValueError(m)";
  EXPECT_EQ(case_error(err), "");
  err["error"]["line"] = 12;
  EXPECT_EQ(case_error(err), "error.line: expected a string, got 12");
}

TEST(StrictCaseFile, EveryConfigFieldButTheDerivedOnesIsAKey) {
  const json base = public_cases().at(0);
  const Config config;
  for_each_config_field(config, [&](const char* key, const auto&) {
    const std::string k = key;
    if (k == "chunk_metadata") return;
    json j = base;
    if (!j["config"].contains(k)) j["config"][k] = nullptr;  // null reads as the default here
    const std::string e = case_error(j);
    EXPECT_EQ(e.find("unknown key"), std::string::npos) << k << ": " << e;
  });
}

TEST(StrictCaseFile, CommentTakesAnyValue) {
  for (const json& v : {json("why"), json{{"a", {1, 2}}}, json(nullptr)}) {
    json j = public_cases().at(0);
    j["comment"] = v;
    EXPECT_EQ(case_error(j), "") << v.dump();
  }
}

TEST(StrictCaseFile, GroupKeysMustAgree) {
  const json multi = multi_group_cases().at(0);
  ASSERT_NE(multi["step"]["groups"][0], multi["step"]["groups"][1]);
  json j = multi;
  j["step"]["block_table"] = j["step"]["groups"][1];
  EXPECT_EQ(case_error(j), "step.block_table: differs from step.groups[0]");
  j = multi;
  j["step"].erase("block_table");  // optional beside the groups
  EXPECT_EQ(case_error(j), "");
  j = multi;
  j["expected"] = j["expected_groups"][1];
  EXPECT_EQ(case_error(j), "expected: differs from expected_groups[0]");
  j = public_cases().at(0);
  j["expected_groups"] = json::array({j["expected"]});
  EXPECT_EQ(case_error(j), "expected_groups: only with step.groups and 'expected'");
}

/// Every case file of tests/data uses only keys the reader knows (the replay tests check
/// their outcomes; this names a stray key directly).
TEST(StrictCaseFile, EveryDataFileParses) {
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(testing::data_path(""))) {
    if (entry.path().extension() != ".jsonl") continue;
    ++files;
    for (const auto& line : cases::read_lines(entry.path().string())) {
      ASSERT_TRUE(line.error.empty()) << entry.path() << ":" << line.number << ": " << line.error;
      EXPECT_EQ(case_error(line.value), "") << entry.path() << ":" << line.number;
    }
  }
  EXPECT_GE(files, 6U);
}

}  // namespace
}  // namespace linmeta
