// Bailing (vLLM 0.34's BailingLinearAttentionMetadataBuilder, linear_attn.py; Bailing / Ling
// hybrids), docs/semantics.md L2: linear attention plus speculative decode rows, the prefill
// rows' state slots and FULL-graph staging of a decode step.
#include <fmt/format.h>

#include <cstdint>

#include "../packer.hpp"
#include "../plan_context.hpp"
#include "../validate.hpp"
#include "kind_rules.hpp"
#include "linear_family.hpp"
#include "mamba_family.hpp"

namespace linmeta::detail {

namespace {

/// L2: a plain build whose spec rows carry at most 1 + k tokens.
void check_capture(const Config& c, BuilderKind, const Step& s) {
  const int32_t longest = longest_query(s);
  if (c.num_spec > 0 && longest > c.num_spec + 1)
    reject(fmt::format(
        "capture build with speculative decoding: the longest query {} exceeds num_spec + 1 = {}",
        longest, c.num_spec + 1));
}

void plan(Ctx& x) {
  StepPlan& p = x.p;
  const Config& c = x.c;
  // L2: Bailing decodes speculatively when k > 0 and build() is handed accepted counts (a
  // capture build hands it the query lengths; vLLM 0.34's runner hands it none).
  const bool spec = c.num_spec > 0 && (x.capture || x.s.num_accepted_tokens != nullptr);
  // L1 at threshold 1 + k when decoding speculatively.
  plan_linear_split(x, spec ? 1 + c.num_spec : 1);
  p.ns_rows.n = p.num_prefills;  // the prefill rows (state_indices_tensor_p)
  for (int32_t i = 0; i < p.num_prefills; ++i) p.ns_rows.idx[i] = p.num_decodes + i;
  // L2: the decode rows' accepted counts and query_start_loc_d when decoding
  // speculatively; FULL graphs stage a decode-only step into the persistent buffers.
  if (spec) {
    p.mamba.accepted = MambaAccepted::DecodeRows;
    p.mamba.accepted_from_query_lens = x.capture;
  }
  p.stage_decode = c.full_cuda_graph && p.num_prefills == 0 && p.num_decodes <= x.cap.graph_bs;
  if (spec && p.stage_decode && c.mamba_cache_mode != CacheMode::Align)
    p.width.need(p.spec_state_cols, 0, "the staged decode state gather");
}

/// L2: state_indices_tensor, then _p of the prefill rows and _d of the decode rows.
void pack_gathers(Packer& k) {
  pack_linear_state(k);
  const int32_t nd = k.p.num_decodes, np = k.p.num_prefills;
  const int32_t S = k.p.spec_state_cols;
  const bool st = k.p.stage_decode;
  const StatePad pad = st ? StatePad::Empty : StatePad::Null;
  k.emit(Out::StateIndicesTensorP, false, np,
         GatherState{.rows = k.ns_rows_at, .n_real = np, .n_rows = np, .cols = 1, .pad = pad});
  if (k.p.mamba.accepted == MambaAccepted::DecodeRows) {  // spec decoding: [decodes, S]
    k.emit(Out::StateIndicesTensorD, st, nd * S,
           GatherState{.rows = kIdentity, .n_real = nd, .n_rows = nd, .cols = 0, .pad = pad})
        .rows = nd;
  } else if (st) {  // vLLM hands out the staged state_indices_tensor itself
    FieldView& d = k.view(Out::StateIndicesTensorD);
    d = k.view(Out::StateIndicesTensor);
    d.column = true;
  } else {  // column 0 of the decode rows, 1-D
    k.emit(Out::StateIndicesTensorD, false, nd,
           GatherState{.rows = kIdentity, .n_real = nd, .n_rows = nd, .cols = 1, .pad = pad})
        .column = true;
  }
}

/// L2: linear attention's fields, the accepted counts and query_start_loc_d (staged with the
/// decode rows: its staged steps have only decode rows).
void pack_fields(Packer& k) {
  pack_linear_fields(k);
  pack_mamba_accepted(k, true);
}

}  // namespace

extern constinit const KindRules kBailingLinearRules = [] {
  KindRules r = linear_family_row(BuilderKind::BailingLinear);
  r.check_capture = check_capture;
  r.plan = plan;
  r.pack_gathers = pack_gathers;
  r.pack_fields = pack_fields;
  r.staged_pads_empty_rows = true;
  return r;
}();

}  // namespace linmeta::detail
