// KDA (Kimi-K3's KimiK3KDAMetadataBuilder, a subclass of vLLM's GDN builder): the GDN family's
// rules where KDA differs (the family's `kda()` tests), RecoverSSM speculative decoding, and
// prefill checkpoints on FlashKDA's 16-token chunks.
#include <fmt/format.h>

#include "../step_plan.hpp"
#include "../validate.hpp"
#include "gdn_family.hpp"
#include "kind_rules.hpp"
#include "linmeta/names.hpp"

namespace linmeta::detail {

namespace {

void check_config_v034(const Config& c) {
  // Only KDA layers whose prefill kernel exports mid-prefill states have checkpoint blocks.
  if (c.num_prefill_checkpoint_blocks > 0 && c.prefill_backend != PrefillBackend::FlashKda)
    reject(fmt::format(
        "config.num_prefill_checkpoint_blocks = {} needs prefill_backend = flashkda for KDA "
        "(prefill_backend = {} exports no checkpoints)",
        c.num_prefill_checkpoint_blocks, names::prefill_backend_name(c.prefill_backend)));
}

/// The RecoverSSM commit fields.
void largest(StepPlan& p) {
  p.gdn.request_indices = p.gdn.commit_align = p.gdn.recoverssm_commit = true;
}

}  // namespace

extern constinit const KindRules kKdaRules = [] {
  KindRules r = gdn_family_row(BuilderKind::Kda);
  r.recoverssm = true;
  r.checkpoint_alignment = kKdaCheckpointAlign;
  r.check_config_v034 = check_config_v034;
  r.largest = largest;
  return r;
}();

}  // namespace linmeta::detail
