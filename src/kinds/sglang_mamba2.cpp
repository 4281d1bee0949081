// SGLang 0.5.23's Mamba2AttnBackend (hybrid_linear_attn_backend.py) and its Mamba2Metadata
// (mamba/mamba2_metadata.py), docs/sglang.md "Mamba2": the common part, then prepare_decode
// (graph entries, decode, verify, a DP-relabelled decode) or prepare_mixed (extend, MIXED,
// draft extend: every row counts as a prefill), with the per-token seq_idx and, when a row
// has an initial state, the logical-chunk chunk_indices / chunk_offsets. The CPU-graph
// capture is SGLang's plain ForwardMetadata (not overridden).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "../validate.hpp"
#include "kind_rules.hpp"
#include "linmeta/sglang.hpp"
#include "sglang_family.hpp"

namespace linmeta::detail {

namespace {

/// Mamba2Metadata._query_start_loc_to_chunk_indices_offsets over qsl[0..n] (n sequences,
/// `total` tokens), its Python loop's semantics: slices clamp, an index past the end raises.
void plan_logical_chunks(SglangPlan& g, int32_t n, int64_t C, int32_t total) {
  const std::span<const int32_t> cu(g.qsl.data() + 1, static_cast<size_t>(n));
  int64_t N = static_cast<int64_t>(std::ceil(static_cast<double>(total) / static_cast<double>(C)));
  for (int32_t i = 0; i + 1 < n; ++i) N += cu[i] % C > 0;
  if (N > static_cast<int64_t>(g.chunk_indices.size()))
    reject(fmt::format("sglang: {} logical chunks exceed their capacity {}", N,
                       g.chunk_indices.size()));
  g.n_chunks = static_cast<int32_t>(N);
  for (int32_t j = 0; j < g.n_chunks; ++j) {
    g.chunk_indices[j] = j;
    g.chunk_offsets[j] = 0;
  }
  int64_t p = 0;
  for (int32_t i = 0; i + 1 < n; ++i) {
    const int64_t s = cu[i], e = cu[i + 1];
    p += s % C > 0;
    const int64_t lo = s / C + p, hi = e / C + p + (e % C > 0);
    for (int64_t j = lo; j < std::min(hi, N); ++j) g.chunk_indices[j] -= static_cast<int32_t>(p);
    if (lo >= N)
      reject(
          fmt::format("sglang: sequence {} starts past the last logical chunk (SGLang's "
                      "_query_start_loc_to_chunk_indices_offsets raises IndexError)",
                      i + 1));
    g.chunk_offsets[lo] = static_cast<int32_t>(s % C);
  }
}

/// prepare_mixed's extend path: every row a prefill.
void plan_mixed(Ctx& x, SglangPlan& g, const SglangStep& s) {
  if (s.extend_seq_lens.empty() || s.extend_prefix_lens.empty())
    reject(
        "sglang: Mamba2's extend metadata needs extend_seq_lens_cpu and extend_prefix_lens "
        "(host lists)");
  const int32_t n = g.bs;
  g.mixed = true;
  g.num_prefills = n;
  int32_t tokens = 0;
  for (int32_t r = 0; r < n; ++r) tokens += s.extend_seq_lens[r];
  g.num_prefill_tokens = tokens;
  g.num_decodes = 0;
  if (g.qsl_len < n + 1 || g.qsl[n] - g.qsl[0] != tokens)
    reject(
        fmt::format("sglang: query_start_loc[:{}] does not cover the {} extend tokens (SGLang's "
                    "repeat_interleave fails)",
                    n + 1, tokens));
  std::copy(g.qsl.begin(), g.qsl.begin() + n + 1, x.p.qsl.begin());  // seq_idx's owners
  std::copy_n(s.extend_seq_lens.begin(), n, g.extend_lens.begin());
  g.prep_initial_states = plan_initial_states(g, s, n);
  if (g.prep_initial_states) plan_logical_chunks(g, n, x.c.chunk_size, tokens);
  if (g.has_track_mask) {
    if (s.track_indices == nullptr) reject("sglang.track_indices (device) is null");
    g.mask_indices = true;
    plan_tracked_rows(g, s);  // prepare_mixed's mask.nonzero()
  }
}

void plan(Ctx& x) {
  plan_sglang_common(x);
  SglangPlan& g = x.p.sgl;
  if (g.plain) return;
  const SglangStep& s = *g.step;
  g.is_target_verify = s.forward_mode == SglangMode::TargetVerify;
  g.draft_token_num = s.has_spec_info ? s.draft_token_num : 1;
  if (g.graph || s.extend_num_tokens < 0 || s.logical_mode == SglangMode::Decode) {
    g.decode_counts = true;  // prepare_decode
    g.num_decodes = g.bs;
    return;
  }
  plan_mixed(x, g, s);
}

void pack_gathers(Packer&) {}

void pack_fields(Packer& k) {
  pack_sglang_common(k);
  const SglangPlan& g = k.p.sgl;
  if (g.plain && !k.counting()) return;
  if (g.mask_indices || k.counting()) pack_track_mask_indices(k);
  if (!g.mixed && !k.counting()) return;
  const int32_t n = g.bs;
  k.set(Out::SglMixed);
  k.set(Out::SglPrepInitialStates, g.prep_initial_states ? 1 : 0);
  k.set(Out::SglChunkSize, k.c.chunk_size);
  k.emit(Out::SglHasInitialStates, false, n,
         CopyMask{.src = k.put(g.initial.data(), n), .n_real = n}, DType::Bool);
  FieldView& seq = k.emit(Out::SglSeqIdx, false, g.num_prefill_tokens,
                          TokenOwner{.n_rows = n, .n_real = g.num_prefill_tokens, .first = 0});
  seq.rows = 1;
  seq.cols = g.num_prefill_tokens;
  k.host(Out::SglExtendSeqLensCpu, g.extend_lens, n);
  if (g.prep_initial_states || k.counting()) {
    const int32_t N = g.n_chunks;
    k.emit(Out::SglChunkIndices, false, N,
           CopyValues{.src = k.put(g.chunk_indices.data(), N), .n_real = N, .add = 0});
    k.emit(Out::SglChunkOffsets, false, N,
           CopyValues{.src = k.put(g.chunk_offsets.data(), N), .n_real = N, .add = 0});
  }
}

}  // namespace

extern constinit const KindRules kSglangMamba2Rules = [] {
  KindRules r = sglang_family_row(BuilderKind::SglangMamba2);
  r.plan = plan;
  r.pack_gathers = pack_gathers;
  r.pack_fields = pack_fields;
  r.sglang_flat_chunk_grid = true;
  return r;
}();

}  // namespace linmeta::detail
