// SGLang 0.5.23's LightningAttentionBackend (attention/linear/lightning_backend.py) and its
// BailingLinearMetadata (linear/linear_metadata.py), docs/sglang.md "Lightning": the common
// part, then prepare_decode (graph entries, and an eager step without extend_num_tokens:
// has_initial_states int64 ones) or prepare_mixed (every row a prefill; it does not read the
// logical mode, so a DP-relabelled decode takes it), q_lengths = query_start_loc.diff(); of
// the tracking fields only the state sources, destinations and the mask flag. The backend
// refuses tree drafts (topk > 1) at construction; the CPU-graph capture is SGLang's plain
// ForwardMetadata.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "../validate.hpp"
#include "kind_rules.hpp"
#include "linmeta/sglang.hpp"
#include "sglang_family.hpp"

namespace linmeta::detail {

namespace {

void plan(Ctx& x) {
  if (x.s.sglang != nullptr && x.s.sglang->topk > 1)
    reject(fmt::format(
        "sglang.topk = {}: SGLang's Lightning backend does not support speculative decoding with "
        "topk > 1 (its constructor raises)",
        x.s.sglang->topk));
  plan_sglang_common(x);
  SglangPlan& g = x.p.sgl;
  if (g.plain) return;
  const SglangStep& s = *g.step;
  if (g.qsl_len == 0)
    reject(
        "sglang: a draft extend without extend metadata has no query_start_loc (SGLang's "
        "prepare_mixed fails on it)");
  if (g.graph || s.extend_num_tokens < 0) {  // prepare_decode
    g.decode_counts = true;
    g.num_decodes = g.bs;
    return;
  }
  if (s.extend_seq_lens.empty() || s.extend_prefix_lens.empty())
    reject(
        "sglang: Lightning's extend metadata needs extend_seq_lens_cpu and extend_prefix_lens "
        "(host lists)");
  g.mixed = true;
  g.num_prefills = g.bs;
  g.num_prefill_tokens = s.extend_num_tokens;
  g.num_decodes = 0;
  g.qsl_len = std::min(g.qsl_len, g.bs + 1);
  plan_initial_states(g, s, g.bs);
}

void pack_gathers(Packer&) {}

void pack_fields(Packer& k) {
  pack_sglang_common(k);
  const SglangPlan& g = k.p.sgl;
  if (g.plain && !k.counting()) return;
  k.set(Out::SglBatchSize, g.bs);
  const int32_t n = g.bs;
  if (g.mixed) {
    k.emit(Out::SglHasInitialStatesLt, false, n,
           CopyMask{.src = k.put(g.initial.data(), n), .n_real = n}, DType::Bool);
  } else {
    const int32_t one = 1;
    k.emit(Out::SglHasInitialStatesLt, false, n,
           CopyValues{.src = k.put(&one, 1), .n_real = 1, .add = 0}, DType::Int64);
  }
  // q_lengths: the query lengths of query_start_loc's rows.
  const int32_t rows = std::max(g.qsl_len - 1, 0);
  int32_t at = 0;
  if (k.counting()) {
    at = k.reserve(rows, [](int32_t*) {});
  } else {
    at = k.reserve(rows, [&](int32_t* dst) {
      for (int32_t r = 0; r < rows; ++r) dst[r] = g.qsl[r + 1] - g.qsl[r];
    });
  }
  k.emit(Out::SglQLengths, false, rows, CopyValues{.src = at, .n_real = rows, .add = 0});
  // query_start_loc: prepare_mixed's qsl[:num_prefills + 1] (a view of the same buffer).
  if (g.mixed && !g.graph) k.view(Out::SglQueryStartLoc).rows = g.qsl_len;
}

}  // namespace

extern constinit const KindRules kSglangLightningRules = [] {
  KindRules r = sglang_family_row(BuilderKind::SglangLightning);
  r.plan = plan;
  r.pack_gathers = pack_gathers;
  r.pack_fields = pack_fields;
  return r;
}();

}  // namespace linmeta::detail
