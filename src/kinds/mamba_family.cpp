// docs/semantics.md M1–M4: the Mamba family's classification and prefill rows, as vLLM 0.34's
// BaseMambaAttentionMetadataBuilder (mamba_attn.py) computes them for its Mamba2, Mamba1,
// ShortConv and PLE ShortConv builders; what differs comes from the kind's row.
#include "mamba_family.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "../plan_context.hpp"
#include "../split.hpp"
#include "../validate.hpp"

namespace linmeta::detail {

void plan_mamba(Ctx& x) {
  StepPlan& p = x.p;
  const Config& c = x.c;
  const int32_t n = p.num_reqs;
  const bool spec = c.num_spec > 0;
  // M1: what vLLM 0.34's runner hands build(): Mamba2 and ShortConv the step's accepted and
  // draft counts, Mamba1 neither (its build() drops them); a capture build passes accepted =
  // the query lengths when k > 0 and no drafts. P2: PLE's non-speculative path hands neither.
  const bool none = !x.rules.mamba_counts;
  const bool accepted = !none && (x.capture ? spec : x.s.num_accepted_tokens != nullptr);
  const int32_t* drafts = none || x.capture || x.s.num_decode_draft_tokens.empty()
                              ? nullptr
                              : x.s.num_decode_draft_tokens.data();
  require_is_prefilling(x.s, "by the Mamba builders");
  const bool* pre = x.s.is_prefilling.data();
  const int32_t* ub = x.s.seq_lens_cpu_upper_bound.data();
  // M2: a one-token prefill chunk with prior state, and a prompt tail padded with
  // placeholder drafts (query length = drafts + 1), take the decode path.
  auto prefilling = [&](int32_t r) {
    if (!pre[r]) return false;
    const int32_t q = p.ql(r);
    const bool prior = ub[r] > q;
    // 64-bit: drafts are range-checked only with k > 0, and any int32 must not overflow.
    const bool tail = drafts != nullptr && drafts[r] >= 0 && q == int64_t{drafts[r]} + 1;
    return !(prior && (q == 1 || tail));
  };
  // M1: decodes are rows of at most reorder_batch_threshold = 1 + k tokens when the
  // accepted counts are given (the spec-decode rows), else of one token.
  const int32_t threshold = accepted ? 1 + c.num_spec : 1;
  const Split sp = split_decodes_and_prefills({p.qsl.data(), static_cast<size_t>(n) + 1},
                                              p.num_actual_tokens, threshold, false, prefilling);
  p.num_decodes = sp.num_decodes;
  p.num_prefills = sp.num_prefills;
  p.num_decode_tokens = sp.num_decode_tokens;
  p.num_prefill_tokens = sp.num_prefill_tokens;
  const int32_t nd = p.num_decodes, np = p.num_prefills;
  // The prefill rows (state_indices_tensor_p, has_initial_states_p, conv1d, checkpoints).
  p.ns_rows.n = np;
  for (int32_t i = 0; i < np; ++i) p.ns_rows.idx[i] = nd + i;

  // M3: num_accepted_tokens. With k > 0 and decode rows: the decode rows' counts (their
  // query lengths when none were given); otherwise whatever build() was handed.
  if (spec && nd > 0) {
    p.mamba.accepted = MambaAccepted::DecodeRows;
    p.mamba.accepted_from_query_lens = !accepted || x.capture;
  } else if (accepted) {
    p.mamba.accepted = MambaAccepted::Passthrough;
    p.mamba.accepted_from_query_lens = x.capture;
  }
  // M3: FULL graphs stage decode-only steps into the persistent [D, 1 + k] buffers.
  p.stage_decode = c.full_cuda_graph && np == 0 && nd <= x.cap.graph_bs;
  if (p.stage_decode && c.mamba_cache_mode != CacheMode::Align)
    p.width.need(p.spec_state_cols, 0, "the staged decode state gather");

  if (np == 0) return;
  // M4: the prefill rows' metadata.
  p.has_initial_state = true;
  if (x.rules.mamba_conv1d) plan_conv1d(p, p.qsl.data() + nd, np);
  if (x.rules.plan_prefill != nullptr) x.rules.plan_prefill(x);
}

void check_mamba_capture(const Config& c, BuilderKind kind, const Step& s) {
  const int32_t n = s.num_reqs;
  const int32_t d = c.decode_cudagraph_max_bs(kind);
  const int32_t longest = longest_query(s);
  if (n > d || longest != c.num_spec + 1)
    reject(fmt::format(
        "capture build supports decode-only FULL graphs: num_reqs = {} must be <= "
        "decode_cudagraph_max_bs = {} and the longest query {} must be num_spec + 1 = {}",
        n, d, longest, c.num_spec + 1));
}

}  // namespace linmeta::detail
