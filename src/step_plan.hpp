// StepPlan: everything about a step that does not depend on a block table, derived on the
// host once per step (SPEC §4–8, docs/semantics.md M*). Group-independent.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "linmeta/config.hpp"
#include "linmeta/metadata.hpp"
#include "linmeta/sglang.hpp"
#include "linmeta/step.hpp"
#include "validate.hpp"

namespace linmeta::detail {

/// The memory behind a StepPlan's arrays, sized once from the configuration so that
/// planning never allocates. Its int32 words are carved by one function (carve_plan in
/// planner.cpp) that also counts them: the size is what the carving takes.
struct PlanStorage {
  PlanStorage(const Config& config, BuilderKind kind);
  size_t rows = 0;                     ///< R
  size_t conv_total = 0;               ///< conv1d programs of a step (0: the builder has no conv1d)
  size_t mamba_chunks = 0;             ///< Mamba2 SSD chunks of a step
  size_t sglang_rows = 0;              ///< R for the SGLang kinds, else 0 (no SglangPlan arrays)
  size_t sglang_prefill_words = 0;     ///< KDA's largest prefill-graph table (SGLang kinds)
  std::vector<int32_t> words;          ///< every int32 array, back to back
  std::vector<int64_t> mlist;          ///< the conv1d program -> sequence list (vLLM's int64)
  std::vector<uint8_t> no_prefilling;  ///< [R] zeros: is_prefilling when absent
  std::vector<uint8_t> mask_host;      ///< [R] the spec mask as bool (spec_sequence_masks_cpu)
};

enum class Path : int32_t { NoSpec, PureSpec, Mixed };

/// A list of batch rows; `identity` means rows 0..n-1 (nothing stored).
struct RowList {
  std::span<int32_t> idx;
  int32_t n = 0;
  bool identity = false;
  [[nodiscard]] int32_t operator[](int32_t i) const { return identity ? i : idx[i]; }
};

/// A cumulative-length array [n + 1] that may alias the step's query_start_loc.
struct Cumsum {
  std::span<int32_t> v;
  int32_t n = 0;         ///< sequences (n + 1 entries)
  bool is_qsl = false;   ///< the first n + 1 entries of query_start_loc
  bool present = false;  ///< computed (the output may still be absent)
};

/// Where the Mamba base builders' num_accepted_tokens comes from (docs/semantics.md M3).
enum class MambaAccepted : int32_t {
  None,         ///< absent
  Passthrough,  ///< the caller's array, whole (speculative decoding off or no decode rows)
  DecodeRows,   ///< the decode rows' counts: the caller's, or their query lengths
};

/// Prefill checkpoints over `rows` (vLLM's MambaPrefillCheckpointBuilder): KDA, GDN, Mamba2.
struct CheckpointPlan {
  bool present = false;
  RowList rows;                   ///< the checkpoint rows (batch rows)
  std::span<int32_t> offsets;     ///< [rows.n]; 0: none
  std::span<int32_t> cols;        ///< [rows.n]; -1: none
  std::span<int32_t> query_lens;  ///< [rows.n]
};

/// What only GDN and KDA plan (src/kinds/gdn_family.cpp; SPEC §4–8, R1–R5, K1–K6).
struct GdnPlan {
  int32_t uniform_spec_len = -1;  ///< -1: absent
  bool mask_output = false;       ///< spec_sequence_masks is an output (GDN spec path)
  std::span<uint8_t> mask_host;   ///< [num_reqs] the mask as bool, with mask_output

  // Prefill extras (num_prefills > 0).
  bool prefill_fields = false;  ///< GDN prefill_* views
  int32_t peel_rows = 0;        ///< decodes peeled off the non-spec rows
  int32_t peel_tokens = 0;
  bool chunks = false;
  std::span<int32_t> chunk_offsets;  ///< [chunk_seqs + 1]
  int32_t chunk_seqs = 0;
  /// chunk_indices numbers sequences as the reference does: by count of non-empty
  /// sequences so far (cumsum(chunk == 0) - 1). Offsets of the non-empty ones:
  std::span<int32_t> chunk_starts;  ///< [chunk_nonempty + 1]
  int32_t chunk_nonempty = 0;

  /// vllm-0.34 GDN + FlashInfer: flashinfer_checkpoint_plan (int64 in vLLM).
  bool fi_checkpoint_plan = false;
  int32_t fi_every_n = 0;           ///< every_n_tokens; num_checkpoints = fi_cu_starts[last]
  int32_t fi_prefill_rows = 0;      ///< sequences of the prefill kernel
  std::span<int32_t> fi_cu_starts;  ///< [fi_prefill_rows + 1]
  std::span<int32_t> fi_rows;       ///< [checkpoint rows]

  // vllm-0.34 KDA.
  /// spec_token_start / non_spec_token_start; -1: None.
  int32_t spec_token_start = -1;
  int32_t non_spec_token_start = -1;
  /// flashinfer_prefill_query_start_loc = the non-spec query_start_loc (ns_qsl), as int64.
  bool fi_prefill_qsl = false;
  /// flashinfer_prefill_seq_order: non-spec sequences longest first (ties by row).
  bool fi_seq_order = false;
  std::span<int32_t> fi_order;  ///< [ns_qsl.n]

  // KDA.
  bool recoverssm_commit = false;
  bool request_indices = false;  ///< = sp_rows, mixed RecoverSSM path
  bool commit_align = false;
};

/// What only the Mamba family (docs/semantics.md M1–M5, P1–P3) and Bailing (L2) plan
/// (src/kinds/mamba_family.cpp, mamba2.cpp, ple_short_conv.cpp, bailing_linear.cpp).
struct MambaPlan {
  MambaAccepted accepted = MambaAccepted::None;
  bool accepted_from_query_lens = false;  ///< DecodeRows without the caller's counts
  // Mamba2.
  bool prep_initial_states = false;
  bool chunks = false;  ///< the SSD chunk arrays are present
  int32_t num_chunks = 0;
  std::span<int32_t> cu_chunk;     ///< [num_chunks + 1]
  std::span<int32_t> seq_idx;      ///< [num_chunks]
  std::span<int32_t> last_chunk;   ///< [num_prefills]
  bool checkpoint_chunks = false;  ///< checkpoint_chunk_idx present
  std::span<int32_t> ckpt_chunk;   ///< [num_prefills]
  // PLE ShortConv (P1–P3): path NoSpec is the base builder's split.
  int32_t max_prefill_query_len = 0;
  bool drafts_given = false;  ///< num_decode_draft_tokens_cpu is the caller's array
};

/// What the SGLang kinds plan (src/kinds/sglang_family.cpp, sglang_mamba2.cpp; docs/sglang.md).
struct SglangPlan {
  const SglangStep* step = nullptr;
  int32_t bs = 0;
  bool graph = false;          ///< a graph entry: the arrays are the step's graph buffers
  bool plain = false;          ///< a plain ForwardMetadata (CPU-graph capture), else the kind's own
  int32_t n_real = 0;          ///< rows with a state slot (graph replay: bs - num_padding)
  int32_t qsl_len = 0;         ///< query_start_loc entries (0: None)
  std::span<int32_t> qsl;      ///< [qsl_len]
  bool track_indices = false;  ///< mamba_track_indices present
  bool retrieve_next_token = false, retrieve_next_sibling = false, retrieve_parent_token = false;
  bool is_target_verify = false;
  int32_t draft_token_num = 1;
  bool has_track_mask = false;
  /// SGLang's _has_cpu_prefill_track_metadata: an extend (not verify) with the scheduler's
  /// four host lists; the common part then hands out the tracked rows.
  bool cpu_track = false;
  // Prefix-cache tracking of an extend (docs/sglang.md: _init_track_*_indices).
  bool track_extend = false;
  int32_t n_tracked = 0, n_final = 0, n_h = 0, n_re = 0;
  std::span<int32_t> tracked;     ///< [n_tracked] the tracked rows
  std::span<int32_t> conv;        ///< [n_tracked * W] track_conv_indices
  std::span<int32_t> final_rows;  ///< [n_final] chunk-aligned tracked rows
  std::span<int32_t> h_rows;      ///< [n_h] rows whose state is a chunk state of `h`
  std::span<int32_t> h_src;       ///< [n_h] its chunk
  std::span<int32_t> re_rows;     ///< [n_re] Mamba2: rows whose state is recomputed
  std::span<int32_t> re_end;      ///< [n_re] their end token
  int32_t n_unaligned = 0;
  std::span<int32_t> unaligned;     ///< [n_unaligned] tracked rows off the chunk grid, in order
  std::span<int32_t> chunk_idx;     ///< [bs] their chunk, -1 on every other row
  std::span<int32_t> conv_start;    ///< [n_tracked] the conv window's first token, unclamped
  int32_t logical_num_tokens = -1;  ///< an extend's token count; -1: None
  // GDN's prefill conv block table: (sequence, 8-token block) pairs.
  bool conv_table = false;
  int32_t n_conv_blocks = 0;
  std::span<int32_t> conv_starts;  ///< [bs + 1] ceil-cumsum of the extend lengths / 8
  // Mamba2Metadata.
  bool decode_counts = false;  ///< prepare_decode (num_decodes = bs)
  bool mixed = false;          ///< mixed_metadata present (prepare_mixed's extend path)
  bool mask_indices = false;   ///< mamba_track_mask_indices / conv_states_mask_indices
  int32_t num_prefills = 0, num_prefill_tokens = 0, num_decodes = 0;
  std::span<int32_t> initial;      ///< [bs] extend_prefix_lens > 0
  std::span<int32_t> extend_lens;  ///< [bs] extend_seq_lens_cpu
  bool prep_initial_states = false;
  int32_t n_chunks = 0;
  std::span<int32_t> chunk_indices;  ///< [n_chunks]
  std::span<int32_t> chunk_offsets;  ///< [n_chunks]
  // KDA's prefill-graph tables (the PrefillGraph entry, src/kinds/sglang_kda.cpp).
  bool prefill_graph = false;
  int32_t pg_len = 0;           ///< words of the packed table
  int32_t pg_slots = 0;         ///< rows with a slot (the others of the bucket: -1)
  int32_t pg_rows = 0;          ///< the bucket's max_seqs
  bool pg_track_dst = false;    ///< track_dst[:bs] is written (a row is tracked)
  std::span<int32_t> pg_table;  ///< [pg_len] KDAPrefillGraphMetadata.packed's contents
  // ShortConv.
  bool cache_buf = false;      ///< cache_indices written into the step's _cache_indices_buf
  bool initial_state = false;  ///< has_initial_state present (eager EXTEND / MIXED)
  std::span<bool> prefix_cpu;  ///< [bs] has_prefix_cpu (host memory of the metadata)
};

/// One step's plan: what every kind plans, and each family's own part. Every value has its
/// default here, and a plan is reset by assigning StepPlan(storage): nothing is reset by
/// hand. The spans point into a PlanStorage.
struct StepPlan : StepCounts {
  StepPlan() = default;
  explicit StepPlan(PlanStorage& storage);

  int32_t num_reqs = 0;
  int32_t total_tokens = 0;  ///< query_start_loc[num_reqs]
  bool capture = false;

  Path path = Path::NoSpec;

  std::span<int32_t> qsl;                  ///< [num_reqs + 1] host copy
  std::span<int32_t> mask;                 ///< [num_reqs] spec mask (0/1), valid on the spec path
  std::span<int32_t> capture_drafts;       ///< [num_reqs] ql - 1 of a capture build
  std::span<const uint8_t> no_prefilling;  ///< [R] zeros: is_prefilling when absent

  RowList ns_rows;        ///< rows behind non_spec_* arrays (Mamba: the prefill rows)
  RowList sp_rows;        ///< rows behind spec_* arrays
  bool ns_state = false;  ///< non_spec_state_indices present
  Cumsum ns_qsl;
  bool ns_qsl_output = false;  ///< non_spec_query_start_loc present
  Cumsum sp_qsl;
  int32_t spec_state_cols = 1;  ///< S

  /// Token index outputs: none, arange (pure GDN spec) or the stable partition.
  enum class Tokens : int32_t { None, Arange, Partition } tokens = Tokens::None;
  int32_t arange_len = 0;

  bool has_initial_state = false;  ///< the prefill rows' has_initial_state(s)

  // Causal-conv1d metadata over the prefill sequences (vLLM's nums_dict).
  bool conv = false;
  std::span<int32_t> conv_nums;        ///< [conv_seqs]
  std::span<int32_t> conv_offsets;     ///< [conv_seqs + 1]
  std::span<int64_t> conv_mlist;       ///< [tot] sequence of each program
  std::span<int32_t> conv_offsetlist;  ///< [tot] chunk of each program in its sequence
  int32_t conv_seqs = 0;

  CheckpointPlan checkpoint;

  GdnPlan gdn;
  MambaPlan mamba;
  SglangPlan sgl;

  /// The widest block-table read (checked for every table, also by update_block_table).
  WidthNeed width;

  // FULL-graph staging (SPEC §7 D, §8; M3 for the Mamba base builders).
  bool stage_spec = false;
  bool stage_decode = false;

  /// Which build planned this step (Metadata::step_id).
  uint64_t step_id = 0;

  [[nodiscard]] int32_t ql(int32_t r) const { return qsl[r + 1] - qsl[r]; }
};

/// SPEC §4–8 and docs/semantics.md M1–M5: classifies the step and fills `plan` (which must
/// be StepPlan(storage) of a storage for this configuration). Throws linmeta::Error on
/// invalid input (validation happens before anything else is derived).
void plan_step(const Config& config, BuilderKind kind, const Step& step, bool capture,
               std::span<const BlockTable> tables, StepPlan& plan);

}  // namespace linmeta::detail
