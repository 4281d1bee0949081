// SGLang 0.5.23's GDNAttnBackend (attention/linear/gdn_backend.py), docs/sglang.md "GDN": the
// common part's ForwardMetadata as it is (per-sequence chunk grids for tracking; the
// logical token count, track_chunk_idx and track_ssm_h_batch_src kept), the tracked rows
// and their destinations whenever a row is tracked, and the prefill conv block table of a
// ragged extend. Multi-item scoring and FlashInfer's checkpoint plan are not served (the
// plugin leaves such steps to SGLang); the target-verify kernel routing is the backend's.
#include <algorithm>
#include <cstdint>

#include "../cumsum.hpp"
#include "kind_rules.hpp"
#include "linmeta/sglang.hpp"
#include "sglang_family.hpp"

namespace linmeta::detail {

namespace {

/// _init_prefill_conv_block_table: EXTEND / MIXED (not TBO), the extend lengths of every
/// row, each cut into 8-token blocks (CAUSAL_CONV1D_FWD_BLOCK_M); only when the rectangular
/// grid would be more than 4x the blocks (a ragged batch).
void plan_conv_table(SglangPlan& g, const SglangStep& s) {
  if (!s.conv_block_table || s.tbo ||
      (s.forward_mode != SglangMode::Extend && s.forward_mode != SglangMode::Mixed) ||
      s.extend_seq_lens.empty() || g.qsl_len != g.bs + 1)
    return;
  int32_t most = 0;
  ceil_cumsum(g.qsl.data(), g.bs, kConvBlock, g.conv_starts.data(), nullptr);
  for (int32_t r = 0; r < g.bs; ++r) most = std::max(most, g.conv_starts[r + 1] - g.conv_starts[r]);
  const int32_t total = g.conv_starts[g.bs];
  if (g.bs == 0 || static_cast<int64_t>(g.bs) * most <= 4 * static_cast<int64_t>(total)) return;
  g.conv_table = true;
  g.n_conv_blocks = total;
}

void plan(Ctx& x) {
  plan_sglang_common(x);
  SglangPlan& g = x.p.sgl;
  if (g.plain || g.graph) return;
  plan_track_mask_indices(g, *g.step);
  plan_conv_table(g, *g.step);
}

void pack_gathers(Packer&) {}

void pack_fields(Packer& k) {
  pack_sglang_common(k);
  const SglangPlan& g = k.p.sgl;
  if (g.mask_indices || k.counting()) pack_track_mask_indices(k);
  if (g.conv_table || k.counting()) {
    const int32_t starts = k.put(g.conv_starts.data(), g.bs + 1);
    k.emit(Out::SglConvBlockTable, false, g.n_conv_blocks,
           ChunkIndexPairs{.n_nonempty = g.bs, .starts = starts});
  }
}

}  // namespace

extern constinit const KindRules kSglangGdnRules = [] {
  KindRules r = sglang_family_row(BuilderKind::SglangGdn);
  r.plan = plan;
  r.pack_gathers = pack_gathers;
  r.pack_fields = pack_fields;
  return r;
}();

}  // namespace linmeta::detail
