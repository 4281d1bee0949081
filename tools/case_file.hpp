// Case files (docs/case-format.md, docs/replay.md): JSON steps in, metadata JSON out. Shared by the
// tests, linmeta-replay and linmeta-bench --cases. A case file is untrusted input: every
// field is checked (type, range, length) before anything is read through a pointer.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "linmeta/linmeta.hpp"

namespace linmeta::cases {

using nlohmann::json;

/// A malformed case file or case: names the field (e.g. `step.block_table[2]`) and what is wrong.
class CaseError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// What the reference builder raised instead of producing metadata (`"error"` cases).
struct ReferenceError {
  std::string type;  ///< Python exception class, e.g. "ValueError"
  std::string message;
  /// Whether the reference rejected the input (ValueError, TypeError, AssertionError):
  /// linmeta must then throw linmeta::Error. Other classes are reference bugs on valid steps
  /// (SPEC §8: linmeta answers).
  [[nodiscard]] bool rejects_input() const;
};

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
  std::vector<std::vector<int32_t>> tables;  ///< one flattened [rows >= num_reqs, width] per group
  int32_t width = 0;
  bool multi_group = false;
  json expected;  ///< expected (single group); null for an error case or a step alone
  std::vector<json> expected_groups;
  std::optional<ReferenceError> error;  ///< set instead of `expected` when the reference raised
};

/// The deepest nesting of arrays and objects a case-file line may have (case files need 6).
/// Deeper lines are rejected before they are parsed: nlohmann's dump, comparison, copy and
/// destruction recurse once per level, and a few ten thousand levels overflow the stack.
inline constexpr int kMaxJsonDepth = 64;

/// One line of a .jsonl file: its number (from 1) and its JSON, or why it is not JSON.
struct Line {
  int number = 0;
  json value;
  std::string error;  ///< non-empty: the line is not valid JSON or nests deeper than kMaxJsonDepth
};

/// Parses one line of a .jsonl file (`number` is only recorded). Never throws a JSON error:
/// a line that is not JSON, or that nests arrays and objects deeper than kMaxJsonDepth (checked
/// before parsing, so no deep value is ever built), comes back with `error` set.
Line parse_line(std::string_view text, int number = 0);
/// Every non-blank line of a .jsonl file; malformed lines are returned with their error
/// (parse_line). Throws CaseError when the file cannot be read.
std::vector<Line> read_lines(const std::string& path);
/// Every line as JSON; throws CaseError "PATH:LINE: ..." at the first malformed line.
std::vector<json> read_jsonl(const std::string& path);

/// Checks and converts one case; throws CaseError naming the field, or the key that the case,
/// its config, step or error has but the format does not (docs/case-format.md).
Case parse_case(const json& j);
/// The case-file "config" object of a configuration (parse_case's inverse; case files
/// carry max_num_batched_tokens only where a builder reads it, and chunk_metadata follows the
/// builder).
json config_json(const Config& config);

/// Runs a case through the public API on `target` and returns each group's metadata as
/// to_json() gives it. `independent`: one builder per group (as the reference runner does)
/// instead of one multi-group builder. Throws linmeta::Error when linmeta rejects the step.
std::vector<json> run_case(const Case& c, Target target, bool independent = false);

/// The metadata as JSON under vLLM's field names (`nums_dict`, `batch_ptr`,
/// `token_chunk_offset_ptr` as vLLM's GDNAttentionMetadata holds them); reads device
/// memory on the cuda target.
json to_json(const Metadata& m, BuilderKind kind);

struct Mismatch {
  std::string field;
  std::string expected;
  std::string got;
};
/// Every field of `expected` (case-file form, docs/semantics.md §10) that differs from `got`
/// (to_json form), and every field of `got` absent from `expected` that is not None (fields
/// of the vllm-0.34 profile are recorded only when set). flashinfer_prefill_seq_order is
/// compared up to the order of equal lengths, which vLLM leaves undefined. `expected` is
/// untrusted (any JSON value); whatever its shape, differences come back as mismatches, never
/// as an exception.
std::vector<Mismatch> compare(const json& expected, const json& got);

/// Whether a CUDA device is usable here.
bool cuda_available();

}  // namespace linmeta::cases
