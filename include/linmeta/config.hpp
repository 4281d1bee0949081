// Builder configuration (SPEC §2) and its field table.
#pragma once

#include <cstdint>
#include <type_traits>

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
/// the memory a builder allocates. At the bounds (k = 32, FULL graphs; host target, measured
/// from the capacity formulas' allocations) a GDN or KDA builder holds ~430 MiB with one
/// KV-cache group (~290 MiB of batch-level buffers, ~90 MiB of buffers per group, ~50 MiB
/// of plans and step arena), PLE ShortConv ~350 MiB, the other kinds at most ~100 MiB, except
/// Mamba2 with chunk_size = 1 (one SSD chunk per token, 2^24 of them): ~600 MiB, its chunk
/// arrays held by both plans, the step arena and the buffers; on the CUDA target its
/// ~130 MiB step arena is also pinned once per staging and capture slot (~1.5 GiB with the
/// default 4 + 8). `block_size`, `max_cudagraph_capture_size`, `num_speculative_blocks`,
/// `chunk_size` and `prefill_checkpoint_alignment` need no bound: any positive int32 is safe
/// (a block larger than every sequence gathers from column 0; the capture size only lowers
/// D; a gather window wider than the block table is rejected at build time; a chunk larger
/// than every prefill gives one chunk per sequence; a small chunk only costs memory).
inline constexpr int32_t kMaxNumSpec = 32;
inline constexpr int32_t kMaxNumSeqs = 16384;
inline constexpr int32_t kMaxNumBatchedTokens = 1 << 24;

enum class CacheMode : int32_t { None, All, Align };
/// Which reference's rules the builders follow (docs/semantics.md).
///  Seed:     the seed builders (vLLM's GDN builder as patched for GLM-5.3, the Kimi-K3 KDA
///            builder); the default. GDN and KDA only.
///  Vllm034:  upstream vLLM 0.34.0's builders (gdn_attn.py, kimi_k3/nvidia/kda_metadata.py,
///            mamba_attn.py, mamba2_attn.py, mamba1_attn.py, short_conv_attn.py,
///            linear_attn.py). The only profile of the Mamba family.
enum class Profile : int32_t { Seed, Vllm034 };
/// The prefill kernel backend, where it changes the metadata (vllm-0.34 profile only):
/// GDN: Triton builds FLA chunk metadata, FlashInfer does not and gets a checkpoint plan;
/// KDA: FlashKda exports prefill checkpoints, FlashInfer gets its own prefill
/// query_start_loc and sequence order. The Mamba family has none (Triton).
enum class PrefillBackend : int32_t { Triton, FlashInfer, FlashKda };
/// vLLM's builder class hierarchies, which share rules within a family.
enum class BuilderFamily : int32_t {
  Gdn,     ///< gdn_attn.py's GDN builder and its Kimi-K3 subclass (spec decoding of their own)
  Mamba,   ///< the builders on mamba_attn.py's BaseMambaAttentionMetadataBuilder
  Linear,  ///< linear_attn.py's builders (no causal-conv1d metadata)
  /// A model's own builder on vLLM's plain AttentionMetadataBuilder: per-token metadata, no
  /// state slots, no decode / prefill split
  Attention,
  /// SGLang 0.5.23's MambaAttnBackendBase subclasses (linmeta/sglang.hpp, docs/sglang.md):
  /// the step is Step::sglang, the metadata Metadata::sglang
  Sglang,
};

/// The one list of builder kinds, X(Enumerator, "name", family), each vLLM's class of that
/// name:
///  Gdn        GDNAttentionMetadataBuilder            (Qwen3-Next, Qwen3.5, GLM-5-Next ...)
///  Kda        KimiK3KDAMetadataBuilder               (Kimi-K3)
///  Mamba2     Mamba2AttentionMetadataBuilder         (Nemotron-H, Granite 4.0, Falcon-H1,
///                                                     Zamba2, Bamba, Mamba2)
///  Mamba1     Mamba1AttentionMetadataBuilder         (Jamba, Falcon-Mamba, Mamba)
///  ShortConv  ShortConvAttentionMetadataBuilder      (LFM2)
///  Linear     LinearAttentionMetadataBuilder         (MiniMax-Text-01 / M1)
///  BailingLinear  BailingLinearAttentionMetadataBuilder  (Bailing / Ling hybrids)
///  PleShortConv   PleShortConvAttentionMetadataBuilder   (LFM2's PLE variant)
///  Inkling    InklingSconvMetadataBuilder            (Inkling's short-conv streams)
///  SglangMamba2   SGLang's Mamba2AttnBackend             (SGLang: Nemotron-H, Falcon-H1, ...)
///  SglangGdn      SGLang's GDNAttnBackend                (SGLang: Qwen3-Next, Qwen3.5, ...)
///  SglangLightning  SGLang's LightningAttentionBackend   (SGLang: Bailing / Ling, MiniCPM)
///  SglangKda      SGLang's KDAAttnBackend                (SGLang: Kimi Linear, GLM-5-Next)
///  SglangShortConv  SGLang's ShortConvAttnBackend       (SGLang: LFM2, ZAYA1)
/// It generates BuilderKind, kNumBuilderKinds, the family predicates below,
/// names::kBuilderKinds (the name case files, the bench and Python use), the
/// <Enumerator>MetadataBuilder aliases (builder.hpp) and the kind table of the library
/// (each kind's rules are the row k<Enumerator>Rules in its file under src/kinds/:
/// docs/ARCHITECTURE.md, "Adding a builder kind").
#define LINMETA_BUILDER_KINDS(X)                 \
  X(Gdn, "gdn", Gdn)                             \
  X(Kda, "kda", Gdn)                             \
  X(Mamba2, "mamba2", Mamba)                     \
  X(Mamba1, "mamba1", Mamba)                     \
  X(ShortConv, "short_conv", Mamba)              \
  X(Linear, "linear", Linear)                    \
  X(BailingLinear, "bailing_linear", Linear)     \
  X(PleShortConv, "ple_short_conv", Mamba)       \
  X(Inkling, "inkling", Attention)               \
  X(SglangMamba2, "sglang_mamba2", Sglang)       \
  X(SglangGdn, "sglang_gdn", Sglang)             \
  X(SglangLightning, "sglang_lightning", Sglang) \
  X(SglangKda, "sglang_kda", Sglang)             \
  X(SglangShortConv, "sglang_short_conv", Sglang)

enum class BuilderKind : int32_t {
#define LINMETA_KIND_ENUMERATOR(K, name, family) K,
  LINMETA_BUILDER_KINDS(LINMETA_KIND_ENUMERATOR)
#undef LINMETA_KIND_ENUMERATOR
};
#define LINMETA_KIND_ONE(K, name, family) +1
inline constexpr int32_t kNumBuilderKinds = 0 LINMETA_BUILDER_KINDS(LINMETA_KIND_ONE);
#undef LINMETA_KIND_ONE

/// Whether `k` is a kind of `family` (false for a value that is no kind).
[[nodiscard]] constexpr bool in_family(BuilderKind k, BuilderFamily family) {
  constexpr BuilderFamily kFamilies[] = {
#define LINMETA_KIND_FAMILY(K, name, family) BuilderFamily::family,
      LINMETA_BUILDER_KINDS(LINMETA_KIND_FAMILY)
#undef LINMETA_KIND_FAMILY
  };
  const auto i = static_cast<int32_t>(k);
  return i >= 0 && i < kNumBuilderKinds && kFamilies[i] == family;
}
/// GDN and KDA: the speculative-decoding builders of gdn_attn.py and its Kimi-K3 subclass.
[[nodiscard]] constexpr bool is_gdn_family(BuilderKind k) {
  return in_family(k, BuilderFamily::Gdn);
}
/// The builders on vLLM's BaseMambaAttentionMetadataBuilder (mamba_attn.py).
[[nodiscard]] constexpr bool is_mamba_base(BuilderKind k) {
  return in_family(k, BuilderFamily::Mamba);
}
/// The linear-attention builders of linear_attn.py (no causal-conv1d metadata).
[[nodiscard]] constexpr bool is_linear_attention(BuilderKind k) {
  return in_family(k, BuilderFamily::Linear);
}

/// SGLang's backends (linmeta/sglang.hpp): the step is Step::sglang.
[[nodiscard]] constexpr bool is_sglang(BuilderKind k) {
  return in_family(k, BuilderFamily::Sglang);
}

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
  /// The Mamba base builders only (vllm-0.34, num_spec = 0): vLLM's cache_config.use_replayssm
  /// on its Triton path (docs/semantics.md M6).
  bool use_replayssm = false;
  /// Prefill checkpoints (align mode) when > 0: KDA in both profiles, GDN and Mamba2 in
  /// vllm-0.34.
  int32_t num_prefill_checkpoint_blocks = 0;
  /// vllm-0.34: the grid checkpoint offsets lie on (vLLM's
  /// MambaSpec.prefill_checkpoint_alignment) when > 0; 0 (unset): the builder's default,
  /// GDN the block size (the prefix-cache grid of a vLLM 0.34 engine), KDA 16 (FlashKDA's
  /// chunk), Mamba2 1 (vLLM's Mamba2 layer). The seed profile takes its fixed rules.
  int32_t prefill_checkpoint_alignment = 0;
  /// Mamba2 only: the SSD chunk size (vLLM's model_config.get_mamba_chunk_size()), > 0;
  /// 0 (unset) for every other builder.
  int32_t chunk_size = 0;
  /// Rule set; see Profile.
  Profile profile = Profile::Seed;
  /// vllm-0.34 GDN / KDA only (the seed profile takes Triton / FlashKda, whose rules it has).
  PrefillBackend prefill_backend = PrefillBackend::Triton;

  /// D: rows the persistent FULL-graph buffers hold, vLLM's decode_cudagraph_max_bs of
  /// that builder: GDN / KDA max_num_seqs * (num_spec + 1), the Mamba family max_num_seqs,
  /// each capped by max_cudagraph_capture_size. Computed in 64 bits and saturated to
  /// [0, INT32_MAX], so that it is defined for any field values (a valid configuration
  /// never saturates).
  [[nodiscard]] int32_t decode_cudagraph_max_bs(BuilderKind kind) const {
    return graph_limit(is_gdn_family(kind) ? static_cast<int64_t>(num_spec) + 1 : 1);
  }
  /// PLE ShortConv's FULL-graph token limit (vLLM's decode_cudagraph_max_tokens):
  /// max_num_seqs * (num_spec + 1), capped and saturated as D.
  [[nodiscard]] int32_t decode_cudagraph_max_tokens() const {
    return graph_limit(static_cast<int64_t>(num_spec) + 1);
  }

 private:
  [[nodiscard]] int32_t graph_limit(int64_t per_row) const {
    int64_t d = static_cast<int64_t>(max_num_seqs) * per_row;
    if (max_cudagraph_capture_size > 0 && max_cudagraph_capture_size < d)
      d = max_cudagraph_capture_size;
    return d < 0 ? 0 : (d > INT32_MAX ? INT32_MAX : static_cast<int32_t>(d));
  }
};

/// Throws linmeta::Error naming the field when the configuration is unusable: a
/// field outside its range above, an enum value that is none of its enumerators,
/// or an option the builder kind does not have.
void validate_config(const Config& config, BuilderKind kind);

/// A Config field whose unset value is <= 0: None in Python, null in case files.
template <class Int>
struct Unsettable {
  Int& value;
};

/// The configuration's field table: calls f(name, member) for every field of `c` (a Config
/// or a const Config), in declaration order; `member` is a reference to an int32_t, a bool,
/// an enum (CacheMode, Profile, PrefillBackend) or an Unsettable. Every serialiser (the
/// Python keyword arguments and `config` dict, case files, the bench's JSON) iterates it.
template <class C, class F>
void for_each_config_field(C& c, F&& f) {
  using Int = decltype((c.num_spec));
  using U = Unsettable<std::remove_reference_t<Int>>;
  f("num_spec", c.num_spec);
  f("max_num_seqs", c.max_num_seqs);
  f("max_num_batched_tokens", c.max_num_batched_tokens);
  f("full_cuda_graph", c.full_cuda_graph);
  f("max_cudagraph_capture_size", U{c.max_cudagraph_capture_size});
  f("mamba_cache_mode", c.mamba_cache_mode);
  f("block_size", c.block_size);
  f("num_speculative_blocks", c.num_speculative_blocks);
  f("chunk_metadata", c.chunk_metadata);
  f("use_recoverssm", c.use_recoverssm);
  f("use_replayssm", c.use_replayssm);
  f("num_prefill_checkpoint_blocks", c.num_prefill_checkpoint_blocks);
  f("prefill_checkpoint_alignment", U{c.prefill_checkpoint_alignment});
  f("chunk_size", c.chunk_size);
  f("profile", c.profile);
  f("prefill_backend", c.prefill_backend);
}

}  // namespace linmeta
