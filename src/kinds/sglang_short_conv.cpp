// SGLang 0.5.23's ShortConvAttnBackend (attention/linear/short_conv_backend.py), docs/sglang.md
// "ShortConv": the common part's plain ForwardMetadata, then what conv_state_metadata() hands
// out per step: cache_indices (mamba_cache_indices as int64, written into the backend's
// _cache_indices_buf when it holds the batch: the address a captured graph reads), on an eager
// EXTEND / MIXED has_initial_state (extend_prefix_lens > 0) and, with the backend's
// needs_extend_host_mirrors, its host copy has_prefix_cpu. The slots as a host list
// (slot_ids_cpu) need the slots on the host: the plugin copies cache_indices there (SGLang's
// own .tolist(), docs/sglang.md "Costs").
#include <cstdint>

#include "../validate.hpp"
#include "kind_rules.hpp"
#include "linmeta/sglang.hpp"
#include "sglang_family.hpp"

namespace linmeta::detail {

namespace {

void plan(Ctx& x) {
  plan_sglang_common(x);
  SglangPlan& g = x.p.sgl;
  const SglangStep& s = *g.step;
  // _refresh_cache_indices: into the buffer when it holds the batch, else a fresh cast.
  g.cache_buf = s.cache_indices_buf != nullptr && g.bs <= s.cache_indices_buf_len;
  // The common part's tracked rows (from the scheduler's host lists only; ShortConv adds no
  // mask.nonzero() and no destinations).
  if (!g.graph && g.cpu_track && g.has_track_mask) {
    g.mask_indices = true;
    plan_tracked_rows(g, s);
  }
  if (g.graph || (s.forward_mode != SglangMode::Extend && s.forward_mode != SglangMode::Mixed))
    return;
  if (s.extend_prefix_lens.empty())
    reject(
        "sglang: ShortConv's extend reads extend_prefix_lens (extend_prefix_lens_cpu, a host "
        "list)");
  g.initial_state = true;
  plan_initial_states(g, s, g.bs);
  for (int32_t r = 0; r < g.bs; ++r) g.prefix_cpu[r] = g.initial[r] != 0;
}

void pack_gathers(Packer&) {}

void pack_fields(Packer& k) {
  pack_sglang_common(k);
  const SglangPlan& g = k.p.sgl;
  if (g.mask_indices || k.counting()) pack_track_mask_indices(k, false);
  const SglangSlots slots{.refs = k.sglang_refs_at, .rows = kIdentity, .n_real = g.n_real};
  if (g.cache_buf && !k.counting()) {
    k.emit_to(g.step->cache_indices_buf, g.bs, slots, DType::Int64);
    k.external(Out::SglCacheIndices, g.step->cache_indices_buf, g.bs, DType::Int64);
  } else {
    k.emit(Out::SglCacheIndices, false, g.bs, slots, DType::Int64);
  }
  if (!g.initial_state && !k.counting()) return;
  k.emit(Out::SglHasInitialState, false, g.bs,
         CopyMask{.src = k.put(g.initial.data(), g.bs), .n_real = g.bs}, DType::Bool);
  if (k.counting() || g.step->host_mirrors) k.host(Out::SglHasPrefixCpu, g.prefix_cpu, g.bs);
}

}  // namespace

extern constinit const KindRules kSglangShortConvRules = [] {
  KindRules r = sglang_family_row(BuilderKind::SglangShortConv);
  r.plan = plan;
  r.pack_gathers = pack_gathers;
  r.pack_fields = pack_fields;
  return r;
}();

}  // namespace linmeta::detail
