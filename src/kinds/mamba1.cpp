// Mamba1 (vLLM 0.34's Mamba1AttentionMetadataBuilder, mamba1_attn.py): the Mamba family's
// rules; its build() drops the accepted and draft counts it is handed (M1).
#include "kind_rules.hpp"
#include "mamba_family.hpp"

namespace linmeta::detail {

extern constinit const KindRules kMamba1Rules = mamba_family_row(BuilderKind::Mamba1);

}  // namespace linmeta::detail
