// ShortConv (vLLM 0.34's ShortConvAttentionMetadataBuilder, short_conv_attn.py): the Mamba
// family's rules as they are, accepted and draft counts included (M1).
#include "kind_rules.hpp"
#include "mamba_family.hpp"

namespace linmeta::detail {

extern constinit const KindRules kShortConvRules = [] {
  KindRules r = mamba_family_row(BuilderKind::ShortConv);
  r.mamba_counts = true;
  return r;
}();

}  // namespace linmeta::detail
