// The metadata a build produces (SPEC §9): counts plus views of builder-owned arrays.
// Every field is a row of the output table (linmeta/outputs.hpp): its vLLM name, which
// builders fill it, element type, shape, buffer and scope are listed there, once.
#pragma once

#include <cstdint>
#include <optional>

#include "linmeta/array.hpp"
#include "linmeta/config.hpp"
#include "linmeta/sglang.hpp"
#include "linmeta/step.hpp"

namespace linmeta {

/// vLLM's causal-conv1d metadata (compute_causal_conv1d_metadata), its `nums_dict[8]`.
struct Conv1dMetadata {
  Array nums;             ///< host memory, int32 [sequences]: programs per sequence
  int32_t tot = 0;        ///< number of programs
  Array mlist;            ///< host memory, int64 [tot]: the sequence of each program
  int32_t mlist_len = 0;  ///< = tot
  Array offsetlist;  ///< host memory, int32 [tot]: each program's 8-token chunk in its sequence
  Array batch_ptr;   ///< = Metadata::batch_ptr
  Array token_chunk_offset_ptr;  ///< = Metadata::token_chunk_offset_ptr

  bool operator==(const Conv1dMetadata&) const = default;
};

struct RecoverSsmAlign {
  BlockTable block_table;     ///< the step's raw block table of this group (caller memory)
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

/// Prefill checkpoints over the checkpoint rows (vLLM 0.34's MambaPrefillCheckpointMetadata;
/// the seed profile's KDACheckpointMetadata has the first two fields).
struct Checkpoint {
  Array checkpoint_offsets;  ///< int32 [rows]: into each row's query; 0: none
  Array state_indices;       ///< int32 [rows]: the block-table entry the state goes to
  Array offsets;             ///< host memory, int32 [rows]: = checkpoint_offsets
  Array query_lens;          ///< host memory, int32 [rows]
  Array request_rows;        ///< int64 [rows]: each checkpoint row's row in the batch
  Array block_cols;          ///< int64 [rows]: block-table column of the state; -1: none

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

/// The metadata of every builder kind; a field a kind does not fill stays absent (see the
/// output table for which kind fills what). Element types follow vLLM: int32 unless noted.
struct Metadata : StepCounts {
  // GDN and KDA (gdn_attn.py's GDNAttentionMetadata).
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
  Array spec_sequence_masks;      ///< bool
  Array spec_sequence_masks_cpu;  ///< host memory, bool [num_reqs] (GDN)
  Array spec_token_indx;          ///< int64 (stable partition) or int32 (GDN pure-spec arange)
  Array non_spec_token_indx;      ///< as spec_token_indx
  std::optional<int32_t> uniform_spec_sequence_length;

  // GDN, KDA and the Mamba base builders.
  Array num_accepted_tokens;
  Array batch_ptr;                       ///< int32 [capacity], PAD_SLOT_ID past the programs
  Array token_chunk_offset_ptr;          ///< int32 [capacity], PAD_SLOT_ID past the programs
  std::optional<Conv1dMetadata> conv1d;  ///< vLLM's nums_dict

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

  // The Mamba base builders (mamba_attn.py's BaseMambaAttentionMetadata; docs/semantics.md M*);
  // Bailing linear attention has the four arrays below and num_accepted_tokens too.
  int32_t num_reqs = 0;
  Array has_initial_states_p;    ///< bool [prefills]
  Array query_start_loc_p;       ///< [prefills + 1]
  Array state_indices_tensor_p;  ///< [prefills]
  Array state_indices_tensor_d;  ///< [decodes, slots]; Bailing without spec decoding: [decodes]
  Array query_start_loc_d;       ///< [decodes + 1]
  /// The Mamba family and linear attention: the step's own device seq_lens (caller memory).
  Array seq_lens;

  // Mamba2 (mamba2_attn.py's Mamba2AttentionMetadata).
  bool prep_initial_states = false;
  int32_t chunk_size = 0;
  Array cu_chunk_seqlen_p;     ///< [chunks + 1]
  Array last_chunk_indices_p;  ///< [prefills]
  Array seq_idx_p;             ///< [chunks]
  Array checkpoint_chunk_idx;  ///< int64 [prefills]
  std::optional<Checkpoint> checkpoint_meta;

  // Linear attention (linear_attn.py's LinearAttentionMetadata and Bailing's subclass);
  // PLE ShortConv has these two too.
  Array query_start_loc;       ///< the step's own device query_start_loc (caller memory)
  Array state_indices_tensor;  ///< [rows]: column 0 of each (non-spec) row's state slots

  // PLE ShortConv (short_conv_attn.py's PleShortConvAttentionMetadata), besides the Mamba
  // base fields and the spec-decode fields above.
  int32_t spec_query_len = 0;         ///< num_spec + 1
  int32_t max_prefill_query_len = 0;  ///< the longest prefill query; 0 without prefills
  Array has_initial_states_d;         ///< bool [decodes]

  // ReplaySSM's Triton path (config.use_replayssm; docs/semantics.md M6), the Mamba base builders.
  /// Rows of vLLM's write_pos_d / is_flush_d / bc_pre_scratch, views of persistent scratch the
  /// caller owns (the vLLM adapter: its buffers' first rows); None where vLLM's are None.
  std::optional<int32_t> replayssm_rows;
  Array replayssm_seq_lens_d;              ///< align mode: seq_lens[:num_reqs] (caller memory)
  int32_t replayssm_align_block_size = 0;  ///< align mode: block_size; else 0
  /// The step's own host num_decode_draft_tokens (caller memory; a capture build's:
  /// query lengths - 1, host memory of the plan).
  Array num_decode_draft_tokens_cpu;

  // Inkling (models/inkling/*/sconv_swa_attn.py's InklingSconvMetadata; docs/semantics.md I1),
  // over the step's padded tokens; vLLM's slot_mapping is the caller's own (not a field here).
  BlockTable block_table;  ///< the step's block table of this group (caller memory)
  Array seq_idx;           ///< [padded tokens]: each token's request; 0 past the real tokens
  Array query_start;       ///< [padded tokens]: its request's first token; 0 past them

  /// The SGLang kinds' metadata (linmeta/sglang.hpp).
  std::optional<SglangMetadata> sglang;

  /// The spec-decode rows' arrays are the persistent FULL-graph buffers (vLLM copies them
  /// into its own int32 buffers then: its num_accepted_tokens is int32 whatever the caller's
  /// counts were).
  bool spec_rows_staged = false;
  /// The decode rows' arrays are the persistent FULL-graph buffers (the Mamba family's M3):
  /// vLLM's update_block_table then re-points its ReplaySSM scratch views at its own builder's.
  bool decode_rows_staged = false;

  /// Memory the array views point to.
  Target target = Target::Host;
  /// Which build of its builder made this metadata (update_block_table checks it): unique
  /// in the process, increasing.
  uint64_t step_id = 0;

  bool operator==(const Metadata&) const = default;
};

using GdnMetadata = Metadata;
using KdaMetadata = Metadata;

}  // namespace linmeta
