// Linear attention (vLLM 0.34's LinearAttentionMetadataBuilder, linear_attn.py; MiniMax):
// the split of docs/semantics.md L1 at one token and every row's state slot. Its capture
// build is a plain build.
#include "../plan_context.hpp"
#include "kind_rules.hpp"
#include "linear_family.hpp"

namespace linmeta::detail {

namespace {

void plan(Ctx& x) { plan_linear_split(x, 1); }

}  // namespace

extern constinit const KindRules kLinearRules = [] {
  KindRules r = linear_family_row(BuilderKind::Linear);
  r.aligned_spec_slots = false;
  r.plan = plan;
  return r;
}();

}  // namespace linmeta::detail
