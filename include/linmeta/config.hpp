// Builder configuration (SPEC §2).
#pragma once

#include <cstdint>

namespace linmeta {

/// NULL_BLOCK_ID: state index meaning "no state / skip".
inline constexpr int32_t kNullBlockId = 0;
/// PAD_SLOT_ID: padding of the causal-conv1d program arrays.
inline constexpr int32_t kPadSlotId = -1;
/// FLA chunk size of the chunk metadata (SPEC §5).
inline constexpr int32_t kFlaChunkSize = 64;
/// Tokens per causal-conv1d program (SPEC §6).
inline constexpr int32_t kConvBlock = 8;
/// FlashKDA chunk size that prefill checkpoints align to (SPEC §8).
inline constexpr int32_t kKdaCheckpointAlign = 16;

/// Upper bounds of the configuration: validate_config() rejects larger values. They keep
/// every size and index the builders derive from a configuration within int32, and bound
/// the memory a builder allocates (at the bounds: ~90 MB of persistent FULL-graph buffers
/// per KV-cache group and ~170 MB of step-level arrays). `block_size`,
/// `max_cudagraph_capture_size` and `num_speculative_blocks` need none: any int32 is
/// safe (a block larger than every sequence gathers from column 0; the capture size only
/// lowers D; a gather window wider than the block table is rejected at build time).
inline constexpr int32_t kMaxNumSpec = 32;
inline constexpr int32_t kMaxNumSeqs = 16384;
inline constexpr int32_t kMaxNumBatchedTokens = 1 << 24;

enum class CacheMode : int32_t { None, All, Align };
/// Which reference's rules the builders follow (docs/semantics.md).
///  Seed:     the seed builders (vLLM's GDN builder as patched for GLM-5.3, the Kimi-K3 KDA
///            builder); the default.
///  Vllm034:  upstream vLLM 0.34.0's gdn_attn.py and kimi_k3/nvidia/kda_metadata.py.
enum class Profile : int32_t { Seed, Vllm034 };
/// The prefill kernel backend, where it changes the metadata (vllm-0.34 profile only):
/// GDN: Triton builds FLA chunk metadata, FlashInfer does not and exports prefill
/// checkpoints; KDA: FlashKda exports prefill checkpoints, FlashInfer gets its own
/// prefill query_start_loc and sequence order.
enum class PrefillBackend : int32_t { Triton, FlashInfer, FlashKda };
enum class BuilderKind : int32_t { Gdn, Kda };
/// Where the builder runs and where its arrays live.
enum class Target : int32_t { Host, Cuda };

/// Every field is checked by validate_config() (each builder's constructor calls it);
/// an invalid configuration throws linmeta::Error naming the field.
struct Config {
  /// Speculative tokens k per spec-decode row (0 = speculative decoding off), <= kMaxNumSpec.
  int32_t num_spec = 0;
  /// Scheduler limit on rows per step (padding rows included), in [1, kMaxNumSeqs].
  int32_t max_num_seqs = 256;
  /// Scheduler limit on (padded) tokens per step, in [1, kMaxNumBatchedTokens].
  int32_t max_num_batched_tokens = 8192;
  /// FULL CUDA graphs enabled: decode-only steps are staged into persistent buffers.
  bool full_cuda_graph = false;
  /// Optional cap of the graph batch size; <= 0 means unset.
  int32_t max_cudagraph_capture_size = 0;
  /// One of the three enumerators (a cast from another value is rejected).
  CacheMode mamba_cache_mode = CacheMode::None;
  /// Tokens per block (> 0).
  int32_t block_size = 16;
  /// Extra aligned state slots gathered in align mode (= k, or 0 under RecoverSSM).
  int32_t num_speculative_blocks = 0;
  /// GDN, seed profile: emit FLA chunk metadata (the triton / flashinfer prefill backends
  /// use it). The vllm-0.34 profile derives it from prefill_backend and needs it true.
  bool chunk_metadata = true;
  /// KDA only: RecoverSSM speculative decoding.
  bool use_recoverssm = false;
  /// Prefill checkpoints (align mode) when > 0: KDA in both profiles, GDN in vllm-0.34
  /// (which needs prefill_backend = FlashInfer).
  int32_t num_prefill_checkpoint_blocks = 0;
  /// Rule set; see Profile.
  Profile profile = Profile::Seed;
  /// vllm-0.34 only (the seed profile takes Triton / FlashKda, whose rules it has).
  PrefillBackend prefill_backend = PrefillBackend::Triton;

  /// D: rows (and tokens) the persistent FULL-graph buffers hold. Computed in 64 bits
  /// and saturated to [0, INT32_MAX], so that it is defined for any field values (a
  /// valid configuration never saturates).
  [[nodiscard]] int32_t decode_cudagraph_max_bs() const {
    int64_t d = static_cast<int64_t>(max_num_seqs) * (static_cast<int64_t>(num_spec) + 1);
    if (max_cudagraph_capture_size > 0 && max_cudagraph_capture_size < d)
      d = max_cudagraph_capture_size;
    return d < 0 ? 0 : (d > INT32_MAX ? INT32_MAX : static_cast<int32_t>(d));
  }
};

/// Throws linmeta::Error naming the field when the configuration is unusable: a
/// field outside its range above, an enum value that is none of its enumerators,
/// or an option the builder kind does not have.
void validate_config(const Config& config, BuilderKind kind);

}  // namespace linmeta
