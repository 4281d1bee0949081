// docs/semantics.md P1–P3: vLLM 0.34's PleShortConvAttentionMetadataBuilder
// (short_conv_attn.py): the ShortConv builder's metadata plus its own fields when no row
// drafts, else a speculative split of its own (spec rows by draft mask, then the other rows
// as decodes of one token and prefills of more).
#include <algorithm>
#include <cstdint>

#include "plan_context.hpp"
#include "validate.hpp"

namespace linmeta::detail {

namespace {

/// PLE's graph limit on tokens: max_num_seqs * (1 + k), capped by the capture size.
int32_t graph_tokens(const Config& c) {
  int64_t t = static_cast<int64_t>(c.max_num_seqs) * (c.num_spec + 1);
  if (c.max_cudagraph_capture_size > 0) t = std::min<int64_t>(t, c.max_cudagraph_capture_size);
  return static_cast<int32_t>(t);
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
  p.max_prefill_query_len = longest;
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
    p.stage_spec = x.c.full_cuda_graph && nsd <= x.cap.graph_bs && nsdt <= graph_tokens(x.c);
    return;
  }
  p.path = Path::Mixed;
  fill_cumsum(p, p.sp_rows, p.sp_qsl);
  fill_cumsum(p, p.ns_rows, p.ns_qsl);
  p.tokens = StepPlan::Tokens::Partition;
  p.checkpoint.rows = p.ns_rows;
  plan_checkpoints(x);
}

}  // namespace

void plan_ple_short_conv(Ctx& x) {
  StepPlan& p = x.p;
  const int32_t n = p.num_reqs;
  p.drafts_given = !x.capture && !x.s.num_decode_draft_tokens.empty();
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
    p.max_prefill_query_len = std::max(p.max_prefill_query_len, p.ql(r));
  p.checkpoint.rows = RowList{.idx = {}, .n = n, .identity = true};
  plan_checkpoints(x);
}

}  // namespace linmeta::detail
