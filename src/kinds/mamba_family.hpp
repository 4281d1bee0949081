// The rules vLLM 0.34's BaseMambaAttentionMetadataBuilder (mamba_attn.py) gives its builders
// (docs/semantics.md M1–M5): the rows of mamba2.cpp, mamba1.cpp, short_conv.cpp and
// ple_short_conv.cpp point here, and tell it what differs (KindRules' Mamba fields).
#pragma once

#include "kind_rules.hpp"
#include "linmeta/config.hpp"
#include "linmeta/step.hpp"

namespace linmeta::detail {

/// M1–M4: the split, accepted counts, staging and prefill rows; then the kind's own prefill
/// metadata (KindRules::plan_prefill).
void plan_mamba(Ctx& x);
/// M3: state_indices_tensor_d ([decodes, S], staged on FULL graphs) and _p.
void pack_mamba_gathers(Packer& k);
/// M3–M5: seq_lens, accepted counts, the prefill rows' fields, then the kind's own
/// (KindRules::pack_extra).
void pack_mamba_fields(Packer& k);
/// M3 (and Bailing's L2): num_accepted_tokens as planned, and query_start_loc_d of the
/// decode rows with speculative decoding (staged with them when `stage_qsl_d`).
void pack_mamba_accepted(Packer& k, bool stage_qsl_d);
/// vLLM's build_for_cudagraph_capture: decode-only FULL graphs, at most D rows of 1 + k
/// tokens.
void check_mamba_capture(const Config& c, BuilderKind kind, const Step& s);

/// A row of the family (the base builder's planning, packing and capture limits, with causal-conv1d
/// metadata); a kind's row sets what differs.
constexpr KindRules mamba_family_row(BuilderKind kind) {
  KindRules r{.kind = kind,
              .replayssm = true,
              .check_capture = check_mamba_capture,
              .plan = plan_mamba,
              .pack_gathers = pack_mamba_gathers,
              .pack_fields = pack_mamba_fields,
              .mamba_conv1d = true};
  return r;
}

}  // namespace linmeta::detail
