// docs/semantics.md L1: what vLLM 0.34's LinearAttentionMetadataBuilder (linear_attn.py)
// computes, shared by its Bailing subclass.
#include "linear_family.hpp"

#include <cstdint>

#include "../packer.hpp"
#include "../plan_context.hpp"
#include "../split.hpp"

namespace linmeta::detail {

void plan_linear_split(Ctx& x, int32_t decode_threshold) {
  StepPlan& p = x.p;
  const Split sp = split_decodes_and_prefills({p.qsl.data(), static_cast<size_t>(p.num_reqs) + 1},
                                              p.num_actual_tokens, decode_threshold, true,
                                              [](int32_t) { return false; });
  p.num_decodes = sp.num_decodes;
  p.num_prefills = sp.num_prefills;
  p.num_decode_tokens = sp.num_decode_tokens;
  p.num_prefill_tokens = sp.num_prefill_tokens;
}

void pack_linear_state(Packer& k) {
  const int32_t n = k.p.num_reqs;
  const bool st = k.p.stage_decode;
  const StatePad pad = st ? StatePad::Empty : StatePad::Null;
  k.emit(Out::StateIndicesTensor, st, n,
         GatherState{.rows = kIdentity, .n_real = n, .n_rows = n, .cols = 1, .pad = pad});
}

void pack_linear_fields(Packer& k) {
  const int32_t n = k.p.num_reqs;
  k.input(Out::SeqLens, StepInput::SeqLens, n);
  k.input(Out::QueryStartLoc, StepInput::QueryStartLoc, n + 1);
}

}  // namespace linmeta::detail
