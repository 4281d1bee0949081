// StepPlan: everything about a step that does not depend on a block table,
// derived on the host once per step (SPEC §4–8). Group-independent.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "linmeta/config.hpp"
#include "linmeta/metadata.hpp"
#include "linmeta/step.hpp"
#include "validate.hpp"

namespace linmeta::detail {

enum class Path : int32_t { NoSpec, PureSpec, Mixed };

/// A list of batch rows; `identity` means rows 0..n-1 (nothing stored).
struct RowList {
  std::vector<int32_t> idx;
  int32_t n = 0;
  bool identity = false;
  [[nodiscard]] int32_t operator[](int32_t i) const { return identity ? i : idx[i]; }
};

/// A cumulative-length array [n + 1] that may alias the step's query_start_loc.
struct Cumsum {
  std::vector<int32_t> v;
  int32_t n = 0;         ///< sequences (n + 1 entries)
  bool is_qsl = false;   ///< the first n + 1 entries of query_start_loc
  bool present = false;  ///< computed (the output may still be absent)
};

struct StepPlan : StepCounts {
  int32_t num_reqs = 0;
  int32_t total_tokens = 0;  ///< query_start_loc[num_reqs]
  bool capture = false;

  Path path = Path::NoSpec;
  int32_t uniform_spec_len = -1;  ///< -1: absent

  std::vector<int32_t> qsl;             ///< [num_reqs + 1] host copy
  std::vector<int32_t> mask;            ///< [num_reqs] spec mask (0/1), valid on the spec path
  std::vector<int32_t> capture_drafts;  ///< [num_reqs] ql - 1 of a capture build
  std::vector<uint8_t> no_prefilling;   ///< [max_num_seqs] zeros: is_prefilling when absent
  bool mask_output = false;             ///< spec_sequence_masks is an output (GDN spec path)

  RowList ns_rows;        ///< rows behind non_spec_* arrays
  RowList sp_rows;        ///< rows behind spec_* arrays
  bool ns_state = false;  ///< non_spec_state_indices present
  Cumsum ns_qsl;
  bool ns_qsl_output = false;  ///< non_spec_query_start_loc present
  Cumsum sp_qsl;
  int32_t spec_state_cols = 1;  ///< S

  /// Token index outputs: none, arange (pure GDN spec) or the stable partition.
  enum class Tokens : int32_t { None, Arange, Partition } tokens = Tokens::None;
  int32_t arange_len = 0;

  // Prefill extras (num_prefills > 0).
  bool prefill_fields = false;  ///< GDN prefill_* views
  int32_t peel_rows = 0;        ///< decodes peeled off the non-spec rows
  int32_t peel_tokens = 0;
  bool has_initial_state = false;
  bool chunks = false;
  std::vector<int32_t> chunk_offsets;  ///< [chunk_seqs + 1]
  int32_t chunk_seqs = 0;
  /// chunk_indices numbers sequences as the reference does: by count of non-empty
  /// sequences so far (cumsum(chunk == 0) - 1). Offsets of the non-empty ones:
  std::vector<int32_t> chunk_starts;  ///< [chunk_nonempty + 1]
  int32_t chunk_nonempty = 0;
  bool conv = false;
  std::vector<int32_t> conv_nums;     ///< [conv_seqs]
  std::vector<int32_t> conv_offsets;  ///< [conv_seqs + 1]
  int32_t conv_seqs = 0;

  // Prefill checkpoints (KDA; GDN in vllm-0.34), over the non-spec rows.
  bool checkpoint = false;
  std::vector<int32_t> cp_offsets;  ///< [ns_rows.n]
  std::vector<int32_t> cp_cols;     ///< [ns_rows.n]
  /// vllm-0.34 GDN + FlashInfer: flashinfer_checkpoint_plan (int64 in vLLM).
  bool fi_checkpoint_plan = false;
  int32_t fi_every_n = 0;             ///< every_n_tokens; num_checkpoints = fi_cu_starts[last]
  int32_t fi_prefill_rows = 0;        ///< sequences of the prefill kernel
  std::vector<int32_t> fi_cu_starts;  ///< [fi_prefill_rows + 1]
  std::vector<int32_t> fi_rows;       ///< [ns_rows.n]

  // vllm-0.34 KDA.
  /// spec_token_start / non_spec_token_start; -1: None.
  int32_t spec_token_start = -1;
  int32_t non_spec_token_start = -1;
  /// flashinfer_prefill_query_start_loc = the non-spec query_start_loc (ns_qsl), as int64.
  bool fi_prefill_qsl = false;
  /// flashinfer_prefill_seq_order: non-spec sequences longest first (ties by row).
  bool fi_seq_order = false;
  std::vector<int32_t> fi_order;  ///< [ns_qsl.n]

  // KDA.
  bool recoverssm_commit = false;
  bool request_indices = false;  ///< = sp_rows, mixed RecoverSSM path
  bool commit_align = false;

  /// The widest block-table read (checked for every table, also by update_block_table).
  WidthNeed width;

  // FULL-graph staging (SPEC §7 D, §8).
  bool stage_spec = false;
  bool stage_decode = false;

  [[nodiscard]] int32_t ql(int32_t r) const { return qsl[r + 1] - qsl[r]; }
};

/// Sizes every vector of `plan` for the configuration's capacities, so that
/// planning never allocates.
void reserve_plan(StepPlan& plan, const Config& config);

/// SPEC §4–8: classifies the step and fills `plan`. Throws linmeta::Error on
/// invalid input (validation happens before anything else is derived).
void plan_step(const Config& config, BuilderKind kind, const Step& step, bool capture,
               std::span<const BlockTable> tables, StepPlan& plan);

}  // namespace linmeta::detail
