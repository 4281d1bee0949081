// Case files (SPEC §10): JSON steps in, metadata JSON out. Shared by the tests,
// linmeta-replay and the Python package tests.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "linmeta/linmeta.hpp"

namespace linmeta::cases {

using nlohmann::json;

/// One case, with host copies of every step array.
struct Case {
  std::string name;
  BuilderKind kind = BuilderKind::Gdn;
  bool capture = false;
  Config config;
  int32_t num_reqs = 0;
  int32_t num_actual_tokens = 0;
  std::vector<int32_t> qsl, seq_lens, seq_lens_ub, drafts, accepted;
  std::vector<char> is_prefilling;  ///< empty = absent
  bool has_drafts = false, has_accepted = false;
  std::vector<std::vector<int32_t>> tables;  ///< one flattened [num_reqs, width] per group
  int32_t width = 0;
  bool multi_group = false;
  json expected;  ///< expected (single group)
  std::vector<json> expected_groups;
  /// The reference raised instead ({type, message, where}); expected is then empty.
  json error;
};

Case parse_case(const json& j);
/// The case-file "config" object of a configuration (parse_case's inverse; case files
/// carry no max_num_batched_tokens, and chunk_metadata follows the builder).
json config_json(const Config& config);
std::vector<json> read_jsonl(const std::string& path);

/// Runs a case through the public API on `target` and returns each group's
/// metadata as JSON with the case-file field names. `independent`: one builder per
/// group (as the reference runner does) instead of one multi-group builder.
std::vector<json> run_case(const Case& c, Target target, bool independent = false);

/// The metadata as JSON (reads device memory on the cuda target).
json to_json(const Metadata& m, BuilderKind kind);

struct Mismatch {
  std::string field;
  std::string expected;
  std::string got;
  /// An expected field linmeta's metadata does not have yet (not a wrong value).
  bool not_emitted = false;
};
/// Every expected field that differs from `got`, and every field of `got` absent from
/// `expected` that is not None (fields of the vllm-0.34 profile are recorded only when
/// set). flashinfer_prefill_seq_order is compared up to the order of equal lengths,
/// which vLLM leaves undefined (an unstable sort).
std::vector<Mismatch> compare(const json& expected, const json& got);

/// Whether a CUDA device is usable here.
bool cuda_available();

}  // namespace linmeta::cases
