// PLE ShortConv (vLLM 0.34's PleShortConvAttentionMetadataBuilder, short_conv_attn.py;
// LFM2's PLE variant), docs/semantics.md P1–P3: the ShortConv builder's metadata plus its own
// fields when no row drafts, else a speculative split of its own (spec rows by draft mask,
// then the other rows as decodes of one token and prefills of more).
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "../packer.hpp"
#include "../plan_context.hpp"
#include "../validate.hpp"
#include "kind_rules.hpp"
#include "mamba_family.hpp"

namespace linmeta::detail {

namespace {

void check_config(const Config& c) {
  if (c.num_prefill_checkpoint_blocks > 0 && c.prefill_checkpoint_alignment <= 0)
    reject(
        "config.num_prefill_checkpoint_blocks > 0 needs prefill_checkpoint_alignment for "
        "ple_short_conv (vLLM's default None declines every checkpoint: leave both unset)");
}

/// P3: the speculative split. Spec rows are the rows that draft (drafts >= 0), wherever they
/// are; the other rows are decodes (one token) then prefills (more), in row order; rows of
/// no tokens that do not draft are neither.
void plan_spec(Ctx& x) {
  StepPlan& p = x.p;
  const int32_t n = p.num_reqs;
  require_accepted(x.c, x.kind, x.s, x.capture);  // vLLM asserts them
  int32_t nsd = 0, nsdt = 0, nd = 0, np = 0, npt = 0, longest = 0;
  for (int32_t r = 0; r < n; ++r) {
    const int32_t q = p.ql(r);
    p.mask[r] = x.drafts[r] >= 0 ? 1 : 0;
    if (p.mask[r]) {
      p.sp_rows.idx[nsd++] = r;
      nsdt += q;
    } else if (q == 1) {
      p.ns_rows.idx[nd++] = r;
    }
  }
  for (int32_t r = 0; r < n; ++r)
    if (!p.mask[r] && p.ql(r) > 1) {
      p.ns_rows.idx[nd + np++] = r;
      npt += p.ql(r);
      longest = std::max(longest, p.ql(r));
    }
  p.num_spec_decodes = nsd;
  p.num_spec_decode_tokens = nsdt;
  p.num_decodes = p.num_decode_tokens = nd;
  p.num_prefills = np;
  p.num_prefill_tokens = npt;
  p.mamba.max_prefill_query_len = longest;
  p.sp_rows.n = nsd;
  p.ns_rows.n = nd + np;
  if (nd == 0 && np == 0) {
    // Every row with tokens drafts: vLLM takes the first nsd rows and query_start_loc
    // [: nsd + 1] (padding trails), and FULL graphs stage the step when it fits.
    p.path = Path::PureSpec;
    p.sp_rows.identity = true;
    p.sp_qsl.n = nsd;
    p.sp_qsl.is_qsl = true;
    p.sp_qsl.present = true;
    p.stage_spec =
        x.c.full_cuda_graph && nsd <= x.cap.graph_bs && nsdt <= x.c.decode_cudagraph_max_tokens();
    return;
  }
  p.path = Path::Mixed;
  fill_cumsum(p, p.sp_rows, p.sp_qsl);
  fill_cumsum(p, p.ns_rows, p.ns_qsl);
  p.tokens = StepPlan::Tokens::Partition;
  p.checkpoint.rows = p.ns_rows;
  plan_checkpoints(x);
}

/// P1: a capture build's rows and tokens within its graph limits.
void check_capture(const Config& c, BuilderKind kind, const Step& s) {
  const int32_t n = s.num_reqs;
  const int32_t d = c.decode_cudagraph_max_bs(kind);
  const int32_t tokens = c.decode_cudagraph_max_tokens();
  if (n > d || s.num_actual_tokens > tokens)
    reject(
        fmt::format("capture build supports decode-only FULL graphs: num_reqs = {} must be <= "
                    "decode_cudagraph_max_bs = {} and num_actual_tokens = {} <= {}",
                    n, d, s.num_actual_tokens, tokens));
}

void plan(Ctx& x) {
  StepPlan& p = x.p;
  const int32_t n = p.num_reqs;
  p.mamba.drafts_given = !x.capture && !x.s.num_decode_draft_tokens.empty();
  // P1: the speculative path when k > 0 and some row drafts (a capture build's drafts are
  // the query lengths - 1).
  bool spec = false;
  if (x.c.num_spec > 0 && x.drafts != nullptr)
    for (int32_t r = 0; r < n; ++r) spec = spec || x.drafts[r] >= 0;
  if (spec) {
    plan_spec(x);
    return;
  }
  // P2: the ShortConv builder handed neither accepted nor draft counts, then every row's
  // state slot, has_initial_states_d, and checkpoints over all rows.
  plan_mamba(x);
  for (int32_t r = p.num_decodes; r < p.num_decodes + p.num_prefills; ++r)
    p.mamba.max_prefill_query_len = std::max(p.mamba.max_prefill_query_len, p.ql(r));
  p.checkpoint.rows = RowList{.idx = {}, .n = n, .identity = true};
  plan_checkpoints(x);
}

/// P2 / P3: PLE ShortConv's state indices. Without drafting rows the base builder's
/// (M3) and column 0 of every row; else column 0 of the spec rows (1-D, staged on a
/// spec-only step) and of the non-spec rows, whose decode and prefill parts are arrays of
/// their own (vLLM's are distinct tensors).
void pack_gathers(Packer& k) {
  const int32_t n = k.p.num_reqs;
  const int32_t nd = k.p.num_decodes, np = k.p.num_prefills, N = k.p.num_spec_decodes;
  auto column0 = [](int32_t rows, int32_t real, int32_t count) {
    return GatherState{
        .rows = rows, .n_real = real, .n_rows = count, .cols = 1, .pad = StatePad::Null};
  };
  if (k.p.path == Path::NoSpec) {
    pack_mamba_gathers(k);
    // vLLM's is column 0 of the decode then the prefill state indices: of every row (a
    // staged step has only decode rows).
    k.emit(Out::StateIndicesTensor, false, n, column0(kIdentity, n, n));
    return;
  }
  const int32_t rows = k.p.stage_spec ? n : N;
  k.emit(Out::SpecStateIndices, k.p.stage_spec, rows, column0(k.sp_rows_at, N, rows)).column = true;
  if (k.p.path == Path::PureSpec) {
    k.emit(Out::StateIndicesTensor, false, 0, column0(kIdentity, 0, 0));
    return;
  }
  k.emit(Out::StateIndicesTensor, false, nd + np, column0(k.ns_rows_at, nd + np, nd + np));
  k.emit(Out::StateIndicesTensorD, false, nd, column0(k.ns_rows_at, nd, nd)).column = true;
  k.emit(Out::StateIndicesTensorP, false, np, column0(k.ns_rows_at + nd, np, np));
}

/// P1–P3: every other field of PLE ShortConv.
void pack_fields(Packer& k) {
  const int32_t n = k.p.num_reqs;
  const int32_t nd = k.p.num_decodes, np = k.p.num_prefills, N = k.p.num_spec_decodes;
  k.set(Out::SpecQueryLen, k.c.num_spec + 1);
  k.set(Out::MaxPrefillQueryLen, k.p.mamba.max_prefill_query_len);
  k.input(Out::QueryStartLoc, StepInput::QueryStartLoc, n + 1);
  if (k.p.mamba.drafts_given)
    k.input(Out::NumDecodeDraftTokensCpu, StepInput::Drafts, n);
  else if (k.p.capture && k.c.num_spec > 0)
    k.host(Out::NumDecodeDraftTokensCpu, k.p.capture_drafts, n);
  if (k.p.path == Path::NoSpec) {
    pack_mamba_fields(k);
    k.input(Out::NonSpecQueryStartLoc, StepInput::QueryStartLoc, n + 1);
    if (nd > 0)
      k.emit(Out::HasInitialStatesD, k.p.stage_decode, nd, InitialState{.rows = kIdentity},
             DType::Bool);
    return;
  }
  k.input(Out::SeqLens, StepInput::SeqLens, n);
  const bool st = k.p.stage_spec;
  const int32_t rows = st ? n : N;
  k.emit(Out::SpecSequenceMasks, st, n, CopyMask{.src = k.mask_at, .n_real = n}, DType::Bool);
  k.emit(Out::SpecQueryStartLoc, st, rows + 1,
         CopyValues{.src = k.sp_qsl_at, .n_real = N + 1, .add = 0});
  k.emit(Out::NumAcceptedTokens, st, rows, AcceptedCounts{.rows = k.sp_rows_at, .n_real = N});
  if (k.p.path == Path::PureSpec) return;
  const int32_t ns = nd + np;
  k.emit(Out::NonSpecQueryStartLoc, false, ns + 1,
         CopyValues{.src = k.ns_qsl_at, .n_real = ns + 1, .add = 0});
  k.token_partition();
  if (nd > 0) {
    k.emit(Out::HasInitialStatesD, false, nd, InitialState{.rows = k.ns_rows_at}, DType::Bool);
    k.emit(Out::QueryStartLocD, false, nd + 1,
           CopyValues{.src = k.ns_qsl_at, .n_real = nd + 1, .add = 0});
  }
  if (np > 0) {
    k.emit(Out::HasInitialStatesP, false, np, InitialState{.rows = k.ns_rows_at + nd}, DType::Bool);
    k.emit(Out::QueryStartLocP, false, np + 1,
           CopyValues{.src = k.ns_qsl_at + nd, .n_real = np + 1, .add = -nd});
  }
}

}  // namespace

extern constinit const KindRules kPleShortConvRules = [] {
  KindRules r = mamba_family_row(BuilderKind::PleShortConv);
  r.checkpoints = true;
  r.check_config = check_config;
  r.check_capture = check_capture;
  r.device_query_start_loc = true;
  r.plan = plan;
  r.pack_gathers = pack_gathers;
  r.pack_fields = pack_fields;
  r.spec_path = true;
  r.mamba_conv1d = false;  // P2: no causal-conv1d metadata
  return r;
}();

}  // namespace linmeta::detail
