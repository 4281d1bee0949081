// The metadata a build produces (SPEC §9): counts plus views of builder-owned arrays.
// Every array field is described once in linmeta/outputs.hpp (name, dtype, buffer).
#pragma once

#include <cstdint>
#include <optional>

#include "linmeta/array.hpp"
#include "linmeta/config.hpp"
#include "linmeta/step.hpp"

namespace linmeta {

struct Conv1dMetadata {
  int32_t tot = 0;               ///< number of programs
  Array nums;                    ///< host memory, int32: programs per sequence
  Array batch_ptr;               ///< int32 [capacity], PAD_SLOT_ID past tot
  Array token_chunk_offset_ptr;  ///< int32 [capacity], PAD_SLOT_ID past tot

  bool operator==(const Conv1dMetadata&) const = default;
};

struct RecoverSsmAlign {
  BlockTable block_table;     ///< the step's raw block table (caller memory)
  Array num_computed_tokens;  ///< int32 [num_reqs]
  int32_t block_size = 0;

  bool operator==(const RecoverSsmAlign&) const = default;
};

struct RecoverSsmCommit {
  Array state_indices;                   ///< = spec_state_indices_tensor
  Array query_start_loc;                 ///< = spec_query_start_loc
  Array request_indices;                 ///< int32, mixed path only
  std::optional<RecoverSsmAlign> align;  ///< align mode only

  bool operator==(const RecoverSsmCommit&) const = default;
};

struct Checkpoint {
  Array checkpoint_offsets;  ///< int32 [non-spec rows]
  Array state_indices;       ///< int32 [non-spec rows]

  bool operator==(const Checkpoint&) const = default;
};

/// vllm-0.34, GDN with the FlashInfer prefill backend: where its prefill kernel emits
/// the checkpoint states (docs/semantics.md R5).
struct FlashInferCheckpointPlan {
  int32_t every_n_tokens = 0;
  int32_t num_checkpoints = 0;
  Array cu_starts;  ///< int64 [prefill sequences + 1]
  Array rows;       ///< int64 [checkpoint rows]

  bool operator==(const FlashInferCheckpointPlan&) const = default;
};

/// The counts of a step (SPEC §9).
struct StepCounts {
  int32_t num_prefills = 0;
  int32_t num_prefill_tokens = 0;
  int32_t num_decodes = 0;
  int32_t num_decode_tokens = 0;
  int32_t num_spec_decodes = 0;
  int32_t num_spec_decode_tokens = 0;
  int32_t num_actual_tokens = 0;  ///< padded token count of the step

  bool operator==(const StepCounts&) const = default;
};

/// GDN and KDA metadata; KDA-only fields stay absent for GDN and vice versa.
/// Element types follow vLLM (see linmeta/outputs.hpp): int32 unless noted.
struct Metadata : StepCounts {
  Array has_initial_state;  ///< bool
  Array chunk_indices;      ///< [n, 2]
  Array chunk_offsets;      ///< int64
  Array prefill_query_start_loc;
  Array prefill_state_indices;
  Array prefill_has_initial_state;  ///< bool
  Array spec_query_start_loc;
  Array non_spec_query_start_loc;
  Array spec_state_indices_tensor;  ///< [rows, S]
  Array non_spec_state_indices_tensor;
  Array spec_sequence_masks;  ///< bool
  Array spec_token_indx;      ///< int64 (stable partition) or int32 (GDN pure-spec arange)
  Array non_spec_token_indx;  ///< as spec_token_indx
  Array num_accepted_tokens;
  std::optional<int32_t> uniform_spec_sequence_length;
  std::optional<Conv1dMetadata> conv1d;

  /// Prefill checkpoints: KDA (both profiles), GDN (vllm-0.34).
  std::optional<Checkpoint> checkpoint;

  // KDA only.
  std::optional<RecoverSsmCommit> recoverssm_commit;

  // vllm-0.34 profile only (docs/semantics.md R5, K5, K6).
  std::optional<FlashInferCheckpointPlan> flashinfer_checkpoint_plan;  ///< GDN
  std::optional<int32_t> spec_token_start;      ///< KDA: first spec token when contiguous
  std::optional<int32_t> non_spec_token_start;  ///< KDA: first non-spec token when contiguous
  Array flashinfer_prefill_query_start_loc;     ///< KDA, int64 [non-spec rows + 1]
  Array flashinfer_prefill_seq_order;           ///< KDA, int32 [non-spec rows]

  /// Memory the array views point to.
  Target target = Target::Host;

  /// Equal counts and the same views (memory, shape, dtype): not the arrays' contents.
  bool operator==(const Metadata&) const = default;
};

using GdnMetadata = Metadata;
using KdaMetadata = Metadata;

}  // namespace linmeta
