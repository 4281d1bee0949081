// SGLang 0.5.23's KDAAttnBackend (attention/linear/kda_backend.py), docs/sglang.md "KDA": the
// common part's ForwardMetadata as GDN's (per-sequence chunk grids, the tracked rows and
// their destinations on a tracked step), without GDN's conv block table; its graph entries
// and CPU-graph capture are the common part's. The breakable prefill-graph tables
// (init_prefill_graph_metadata / refresh_prefill_graph_metadata) and FlashInfer's checkpoint
// plan are not served: the plugin leaves them to SGLang.
#include "kind_rules.hpp"
#include "sglang_family.hpp"

namespace linmeta::detail {

namespace {

void plan(Ctx& x) {
  plan_sglang_common(x);
  SglangPlan& g = x.p.sgl;
  if (g.plain || g.graph) return;
  plan_track_mask_indices(g, *g.step);
}

void pack_gathers(Packer&) {}

void pack_fields(Packer& k) {
  pack_sglang_common(k);
  if (k.p.sgl.mask_indices || k.counting()) pack_track_mask_indices(k);
}

}  // namespace

extern constinit const KindRules kSglangKdaRules = [] {
  KindRules r = sglang_family_row(BuilderKind::SglangKda);
  r.plan = plan;
  r.pack_gathers = pack_gathers;
  r.pack_fields = pack_fields;
  return r;
}();

}  // namespace linmeta::detail
