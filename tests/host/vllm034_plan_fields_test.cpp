// The vllm-0.34 outputs that the metadata does not carry yet (GDN checkpoint and
// flashinfer_checkpoint_plan; KDA spec_token_start, non_spec_token_start and the FlashInfer
// prefill fields), checked on the planner's data against the real wheel's answers in
// tests/data/vllm034.jsonl (or the file named by $LINMETA_VLLM034_CASES, which
// scripts/vllm-diff.sh points at its random steps). Everything else of those cases is
// checked through the public API by linmeta-replay (ctest replay_check_vllm034_host).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "case_file.hpp"
#include "src/step_plan.hpp"
#include "test_data.hpp"

namespace linmeta {
namespace {

using cases::json;

const char* const kGdnFields[] = {"checkpoint", "flashinfer_checkpoint_plan"};
const char* const kKdaFields[] = {"spec_token_start", "non_spec_token_start",
                                  "flashinfer_prefill_query_start_loc",
                                  "flashinfer_prefill_seq_order"};

std::string cases_path() {
  const char* env = std::getenv("LINMETA_VLLM034_CASES");
  return env != nullptr ? std::string(env) : testing::data_path("vllm034.jsonl");
}

json ints(const std::vector<int32_t>& v, int32_t n) {
  return json(std::vector<int32_t>(v.begin(), v.begin() + n));
}

/// The new fields of group `g` from the plan, null when absent.
json plan_fields(const cases::Case& c, const detail::StepPlan& p, size_t g) {
  json j;
  if (c.kind == BuilderKind::Gdn) {
    j["checkpoint"] = nullptr;
    if (p.checkpoint) {
      json state = json::array();
      for (int32_t i = 0; i < p.ns_rows.n; ++i) {
        const int32_t col = p.cp_cols[static_cast<size_t>(i)];
        const auto at = static_cast<size_t>(p.ns_rows[i]) * static_cast<size_t>(c.width);
        state.push_back(col >= 0 ? c.tables[g][at + static_cast<size_t>(col)] : kNullBlockId);
      }
      j["checkpoint"] = {{"checkpoint_offsets", ints(p.cp_offsets, p.ns_rows.n)},
                         {"state_indices", state}};
    }
    j["flashinfer_checkpoint_plan"] = nullptr;
    if (p.fi_checkpoint_plan)
      j["flashinfer_checkpoint_plan"] = {
          {"every_n_tokens", p.fi_every_n},
          {"num_checkpoints", p.fi_cu_starts[static_cast<size_t>(p.fi_prefill_rows)]},
          {"cu_starts", ints(p.fi_cu_starts, p.fi_prefill_rows + 1)},
          {"rows", ints(p.fi_rows, p.ns_rows.n)}};
    return j;
  }
  j["spec_token_start"] = p.spec_token_start >= 0 ? json(p.spec_token_start) : json(nullptr);
  j["non_spec_token_start"] =
      p.non_spec_token_start >= 0 ? json(p.non_spec_token_start) : json(nullptr);
  j["flashinfer_prefill_query_start_loc"] = nullptr;
  j["flashinfer_prefill_seq_order"] = nullptr;
  if (p.fi_prefill_qsl) {
    const auto& cu = p.ns_qsl.is_qsl ? p.qsl : p.ns_qsl.v;
    j["flashinfer_prefill_query_start_loc"] = ints(cu, p.ns_qsl.n + 1);
  }
  if (p.fi_seq_order) j["flashinfer_prefill_seq_order"] = ints(p.fi_order, p.ns_qsl.n);
  return j;
}

/// Returns the mismatches of one case (the planner's error message if it rejects it).
std::vector<std::string> check_case(const json& line) {
  const cases::Case c = cases::parse_case(line);
  if (!c.error.is_null()) return {};
  Step s;
  s.num_reqs = c.num_reqs;
  s.num_actual_tokens = c.num_actual_tokens;
  s.query_start_loc_cpu = c.qsl;
  s.seq_lens_cpu_upper_bound = c.seq_lens_ub;
  if (!c.is_prefilling.empty())
    s.is_prefilling = {reinterpret_cast<const bool*>(c.is_prefilling.data()),
                       c.is_prefilling.size()};
  if (c.has_drafts) s.num_decode_draft_tokens = c.drafts;
  s.query_start_loc = c.qsl.data();
  s.seq_lens = c.seq_lens.data();
  s.num_accepted_tokens = c.has_accepted ? c.accepted.data() : nullptr;
  std::vector<BlockTable> tables;
  for (const auto& t : c.tables) tables.push_back({t.data(), c.width, c.width});
  s.block_table = tables[0];
  detail::StepPlan p;
  detail::reserve_plan(p, c.config);
  try {
    validate_config(c.config, c.kind);
    detail::plan_step(c.config, c.kind, s, c.capture, tables, p);
  } catch (const Error& e) {
    return {c.name + ": planner rejected the step: " + e.what()};
  }
  std::vector<std::string> out;
  for (size_t g = 0; g < c.tables.size(); ++g) {
    const json got = plan_fields(c, p, g);
    json expected = json::object();
    for (const auto& [key, value] : c.expected_groups[g].items())
      if (got.contains(key)) expected[key] = value;
    for (const auto& m : cases::compare(expected, got))
      out.push_back(c.name + " group " + std::to_string(g) + ": " + m.field + ": expected " +
                    m.expected + ", got " + m.got);
  }
  return out;
}

TEST(Vllm034PlanFields, NewOutputsMatchTheWheel) {
  const auto lines = cases::read_jsonl(cases_path());
  ASSERT_FALSE(lines.empty());
  size_t bad = 0, with_fields = 0;
  for (const auto& line : lines) {
    const json& e = line.contains("expected") ? line.at("expected") : json::object();
    for (const char* f : kGdnFields) with_fields += e.contains(f) ? 1 : 0;
    for (const char* f : kKdaFields) with_fields += e.contains(f) ? 1 : 0;
    const auto mismatches = check_case(line);
    bad += mismatches.empty() ? 0 : 1;
    for (const auto& m : mismatches) ADD_FAILURE() << m;
  }
  std::printf("vllm-0.34 plan fields: %zu cases, %zu mismatching, %zu recorded new fields\n",
              lines.size(), bad, with_fields);
  EXPECT_GT(with_fields, 0u) << "the case file records none of the new fields";
}

}  // namespace
}  // namespace linmeta
