// SGLang's linear-attention metadata (docs/sglang.md): the step one of SGLang 0.5.23's
// MambaAttnBackendBase entry points sees (SglangStep, Step::sglang) and what it computes
// (SglangMetadata, Metadata::sglang). The kinds of the Sglang family (config.hpp) take it.
//
// SGLang's batches differ from vLLM's: rows are never reordered (a MIXED step is the
// prefills, then the running decodes as 1-token extends), state slots come from a
// request -> slot map indexed by each row's request-pool row (not a block table), and the
// CUDA-graph entries write into the backend's own static buffers, which the metadata then
// is.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "linmeta/array.hpp"

namespace linmeta {

/// SGLang's ForwardMode members the linear-attention backends serve.
enum class SglangMode : int32_t { Extend, Decode, Mixed, Idle, TargetVerify, DraftExtendV2 };

/// Which backend entry point runs the step.
enum class SglangEntry : int32_t {
  Eager,            ///< init_forward_metadata
  GraphCapture,     ///< init_forward_metadata_out_graph(fb, in_capture=True)
  GraphReplay,      ///< init_forward_metadata_out_graph(fb)
  CpuGraphCapture,  ///< init_forward_metadata_capture_cpu_graph
  /// KDA's breakable prefill graphs: init_prefill_graph_metadata /
  /// refresh_prefill_graph_metadata (KDAPrefillGraphMetadata.fill), sglang_kda only
  PrefillGraph,
};

/// The backend's static graph buffers of the step's batch size bs (the graph entries write
/// into them and the metadata's arrays are views of them). Target memory.
struct SglangGraphBuffers {
  int32_t* state_indices = nullptr;    ///< state_indices_list[bs - 1], int32 [bs]
  int32_t* query_start_loc = nullptr;  ///< query_start_loc_list[bs - 1], int32 [bs + 1]
  /// mamba_track_indices_buf, int64 [>= bs] (graph entries of a tracked batch)
  int64_t* track_indices = nullptr;
  /// retrieve_{next_token,next_sibling,parent_token}_list[bs - 1], int32 [bs, k]
  /// (tree verify: topk > 1)
  int32_t* retrieve_next_token = nullptr;
  int32_t* retrieve_next_sibling = nullptr;
  int32_t* retrieve_parent_token = nullptr;
};

/// KDA's prefill-graph tables (SGLang's KDAPrefillGraphMetadata, kda_prefill_graph.py): one
/// bucket's static buffers, allocated by SGLang once per bucket, which the PrefillGraph entry
/// fills. `packed` is one int32 buffer of the tables below, in this order
/// (SglangPrefillGraphLayout says where each starts).
struct SglangPrefillGraph {
  int32_t num_tokens = 0;             ///< the bucket's token count (meta.num_tokens)
  int32_t max_seqs = 0;               ///< the bucket's sequence bound (meta.max_seqs)
  bool track = false;                 ///< the bucket has prefix-cache track tables (meta.track)
  int32_t* packed = nullptr;          ///< meta.packed, int32 [packed_len] (target memory)
  int64_t packed_len = 0;             ///< its elements (SglangPrefillGraphLayout::total)
  int32_t* host = nullptr;            ///< meta.host, int32 [packed_len] host staging, or null
  int32_t* cache_indices = nullptr;   ///< meta.cache_indices, int32 [max_seqs] (target)
  bool* has_initial_state = nullptr;  ///< meta.has_initial_state, bool [max_seqs] (target)
  int64_t* track_dst = nullptr;       ///< meta.track_dst, int64 [max_seqs] (target), or null
};

/// KDA's delta-rule chunk (kda_prefill_graph.KDA_CHUNK_SIZE) and causal-conv1d block
/// (CAUSAL_CONV1D_FWD_BLOCK_M); the chunk index of a padded chunk_indices row (_PAD_CHUNK);
/// track_mode's values (kda_prefill_track.TRACK_FINAL_STATE / TRACK_CHUNK_STATE).
inline constexpr int32_t kSglangKdaChunk = 64;
inline constexpr int32_t kSglangConvBlock = 8;
inline constexpr int32_t kSglangPadChunk = 1 << 20;
inline constexpr int32_t kSglangTrackFinalState = 1;
inline constexpr int32_t kSglangTrackChunkState = 2;

/// Where each table of KDAPrefillGraphMetadata.packed starts (KDAPrefillGraphMetadata.allocate):
/// cu_seqlens [max_seqs + 1], chunk_indices [max_chunks, 2], chunk_offsets [max_seqs + 1],
/// conv_block_table [max_conv_blocks, 2], track_chunk_idx, track_mode, track_conv_start
/// [max_seqs] each, num_logical_tokens [1].
struct SglangPrefillGraphLayout {
  int64_t max_chunks = 0, max_conv_blocks = 0;
  int64_t cu_seqlens = 0, chunk_indices = 0, chunk_offsets = 0, conv_block_table = 0;
  int64_t track_chunk_idx = 0, track_mode = 0, track_conv_start = 0, num_logical_tokens = 0;
  int64_t total = 0;

  [[nodiscard]] static constexpr SglangPrefillGraphLayout of(int64_t num_tokens, int64_t max_seqs) {
    SglangPrefillGraphLayout l;
    l.max_chunks = (num_tokens + kSglangKdaChunk - 1) / kSglangKdaChunk + max_seqs;
    l.max_conv_blocks = (num_tokens + kSglangConvBlock - 1) / kSglangConvBlock + max_seqs;
    l.chunk_indices = l.cu_seqlens + max_seqs + 1;
    l.chunk_offsets = l.chunk_indices + 2 * l.max_chunks;
    l.conv_block_table = l.chunk_offsets + max_seqs + 1;
    l.track_chunk_idx = l.conv_block_table + 2 * l.max_conv_blocks;
    l.track_mode = l.track_chunk_idx + max_seqs;
    l.track_conv_start = l.track_mode + max_seqs;
    l.num_logical_tokens = l.track_conv_start + max_seqs;
    l.total = l.num_logical_tokens + 1;
    return l;
  }
};

/// Upper bound of SglangStep::conv_window (the conv state's window, kernel width - 1).
inline constexpr int32_t kSglangMaxConvWindow = 16;

/// One SGLang step as its ForwardBatch holds it. Host spans are read during build() only;
/// device pointers (target memory) are read, and req_pool_indices written, by the work
/// build() enqueues.
struct SglangStep {
  SglangEntry entry = SglangEntry::Eager;
  SglangMode forward_mode = SglangMode::Decode;
  /// ForwardBatch.logical_forward_mode: Decode for a decode batch relabelled Extend under
  /// DP attention, else forward_mode.
  SglangMode logical_mode = SglangMode::Decode;
  int32_t batch_size = 0;
  /// input_ids.shape[0] (target verify's query_start_loc steps up to it).
  int32_t num_tokens = 0;
  /// forward_batch.extend_num_tokens; -1: None.
  int32_t extend_num_tokens = -1;

  // Engine constants (the backend's, fixed at construction).
  int32_t cache_chunk_size = 0;  ///< mamba_cache_chunk_size(): the tracking grid G
  int32_t conv_window = 0;       ///< conv_states_shape[-1]: W in [1, kSglangMaxConvWindow]
  int32_t topk = 0;              ///< speculative_eagle_topk (0: off)
  /// GDN: the backend builds its prefill conv block table (SGLang builds it under is_cuda()).
  bool conv_block_table = false;
  /// forward_batch.tbo_parent_token_range is set (a two-batch-overlap child).
  bool tbo = false;

  // Speculative input (spec_info).
  bool has_spec_info = false;
  int32_t draft_token_num = 1;  ///< spec_info.draft_token_num

  // Host arrays.
  std::span<const int32_t> extend_seq_lens;     ///< extend_seq_lens_cpu [bs] or empty (None)
  std::span<const int32_t> extend_prefix_lens;  ///< extend_prefix_lens_cpu [bs] or empty
  std::span<const int64_t> seq_lens;            ///< seq_lens_cpu [bs] (replay counts padding)
  /// Replay: forward_batch.num_padding; -1: absent (counted as seq_lens == 1).
  int32_t num_padding = -1;

  // Prefix-cache tracking: mamba_track_mask as host memory (the scheduler's
  // mamba_prefill_track_mask_cpu, or one explicit copy of the device mask).
  bool track = false;                      ///< mamba_track_mask is set
  std::span<const bool> track_mask;        ///< [bs]
  std::span<const int64_t> track_seqlens;  ///< mamba_track_seqlens [bs], or empty (None)
  /// The scheduler's host lists mamba_prefill_track_mask_cpu and mamba_track_seqlens_cpu
  /// were given, batch_size entries each (track_mask and track_seqlens are their values).
  bool track_lists = false;

  // Device arrays.
  const int32_t* mamba_map = nullptr;  ///< req_index_to_mamba_index_mapping
  int64_t mamba_map_len = 0;
  int64_t* req_pool_indices = nullptr;     ///< [bs]; replay zeroes the padded rows
  const int64_t* track_indices = nullptr;  ///< mamba_track_indices [bs] (track)
  /// Tree verify: spec_info.retrieve_next_{token,sibling}, int64 [retrieve_rows, k]; null: None.
  const int64_t* retrieve_next_token = nullptr;
  const int64_t* retrieve_next_sibling = nullptr;
  int32_t retrieve_rows = 0;

  /// Graph entries: the backend's static buffers of this batch size.
  SglangGraphBuffers graph;

  /// forward_batch._original_batch_size (DP padding: the rows past it get slot -1 in the
  /// prefill-graph tables); -1: None.
  int32_t original_batch_size = -1;
  /// The PrefillGraph entry: the bucket's tables.
  SglangPrefillGraph prefill_graph;
  // ShortConv (SGLang's ShortConvAttnBackend).
  /// needs_extend_host_mirrors: an eager extend hands out has_prefix_cpu (and the plugin
  /// the slots as a host list, slot_ids_cpu).
  bool host_mirrors = false;
  /// _cache_indices_buf (int64 [cache_indices_buf_len], made by init_cuda_graph_state /
  /// init_cpu_graph_state; null before): any entry writes the slots into it when the batch
  /// fits, else cache_indices is an array of the builder's. Target memory.
  int64_t* cache_indices_buf = nullptr;
  int64_t cache_indices_buf_len = 0;
};

/// Mamba2Metadata.MixedMetadata (SGLang's mamba2_metadata.py).
struct SglangMixedMetadata {
  Array has_initial_states;  ///< bool [bs]
  bool prep_initial_states = false;
  int32_t chunk_size = 0;
  Array seq_idx;              ///< int32 [1, tokens]
  Array chunk_indices;        ///< int32 [logical chunks], with prep_initial_states
  Array chunk_offsets;        ///< int32 [logical chunks], with prep_initial_states
  Array extend_seq_lens_cpu;  ///< host memory, int32 [bs] (SGLang's list)

  bool operator==(const SglangMixedMetadata&) const = default;
};

/// SGLang's ForwardMetadata and Mamba2Metadata fields (mamba2_metadata.py); those absent are
/// None (or their dataclass default) in SGLang's object.
struct SglangMetadata {
  /// The object is the kind's own dataclass, Mamba2Metadata or BailingLinearMetadata
  /// (else a plain ForwardMetadata: GDN's, and the CPU-graph capture, which SGLang's
  /// subclasses do not override).
  bool kind_metadata = false;
  Array query_start_loc;      ///< int32
  Array mamba_cache_indices;  ///< int32 [bs]
  Array mamba_track_indices;  ///< int64 [bs]: the step's (eager) or the graph buffer
  Array conv_block_table;     ///< GDN: int32 [blocks, 2] (sequence, 8-token block)
  std::optional<int32_t> logical_num_tokens;  ///< GDN: an extend's token count
  Array retrieve_next_token;  ///< [rows, k]: int64 (eager: the step's), int32 (graph buffers)
  Array retrieve_next_sibling;
  Array retrieve_parent_token;    ///< eager: int64 [rows, k], contents undefined (the kernel's)
  Array track_conv_indices;       ///< int64 [tracked rows, W]
  Array track_ssm_h_src;          ///< int64
  Array track_ssm_h_dst;          ///< int64
  Array track_ssm_final_src;      ///< int32
  Array track_ssm_final_dst;      ///< int64
  Array track_chunk_idx;          ///< GDN: int32 [bs], the unaligned tracked rows' chunk, else -1
  Array track_ssm_h_batch_src;    ///< GDN: int64, the unaligned tracked rows
  Array track_ssm_seq_idx;        ///< int64 (Mamba2)
  Array track_ssm_end_locs;       ///< int64 (Mamba2)
  Array track_ssm_recompute_dst;  ///< int64 (Mamba2)
  bool is_target_verify = false;
  int32_t draft_token_num = 1;
  bool has_mamba_track_mask = false;
  Array mamba_track_mask_indices;  ///< int64
  Array conv_states_mask_indices;  ///< int64
  int32_t num_prefills = 0;
  int32_t num_prefill_tokens = 0;
  int32_t num_decodes = 0;
  std::optional<SglangMixedMetadata> mixed_metadata;  ///< Mamba2
  // Lightning (BailingLinearMetadata).
  int32_t batch_size = 0;
  Array has_initial_states;  ///< bool [bs] (extend), int64 ones [bs] (decode)
  Array q_lengths;           ///< int32: query_start_loc.diff()
  // ShortConv (ShortConvMetadata, what conv_state_metadata() hands out).
  Array cache_indices;      ///< int64 [bs]: mamba_cache_indices (the step's _cache_indices_buf)
  Array has_initial_state;  ///< bool [bs]: eager EXTEND / MIXED, extend_prefix_lens > 0
  Array has_prefix_cpu;     ///< host memory, bool [bs]: the same, with host_mirrors

  bool operator==(const SglangMetadata&) const = default;
};

}  // namespace linmeta
