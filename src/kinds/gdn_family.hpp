// The rules GDN and KDA share (vLLM's gdn_attn.py builder and its Kimi-K3 subclass): their
// rows in gdn.cpp and kda.cpp point here.
#pragma once

#include "kind_rules.hpp"
#include "linmeta/config.hpp"
#include "linmeta/step.hpp"

namespace linmeta::detail {

/// SPEC §4–8, R1–R5, K1–K6: classification and prefill metadata (gdn_family.cpp).
void plan_gdn_family(Ctx& x);
/// The state gathers (gdn_family_pack.cpp).
void pack_gdn_gathers(Packer& k);
/// Masks, token indices, cumulative lengths, accepted counts, prefill and FlashInfer fields.
void pack_gdn_fields(Packer& k);
/// vLLM's build_for_cudagraph_capture: decode-only FULL graphs of at most D rows and tokens.
void check_gdn_capture(const Config& c, BuilderKind kind, const Step& s);

/// A row of the family (GDN and KDA: both profiles, prefill checkpoints, spec rows of their own); a
/// kind's row sets what differs.
constexpr KindRules gdn_family_row(BuilderKind kind) {
  KindRules r{.kind = kind,
              .seed_profile = true,
              .checkpoints = true,
              .check_capture = check_gdn_capture,
              .plan = plan_gdn_family,
              .pack_gathers = pack_gdn_gathers,
              .pack_fields = pack_gdn_fields,
              .spec_path = true};
  return r;
}

}  // namespace linmeta::detail
