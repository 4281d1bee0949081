// docs/semantics.md M1–M5 and L1: the Mamba family's classification and prefill metadata,
// as vLLM 0.34's BaseMambaAttentionMetadataBuilder (mamba_attn.py) and its Mamba2 / Mamba1 /
// ShortConv builders compute them, and LinearAttentionMetadataBuilder (linear_attn.py).
#include <algorithm>
#include <cstdint>

#include "checkpoint_rule.hpp"
#include "linmeta/error.hpp"
#include "plan_context.hpp"
#include "split.hpp"

namespace linmeta::detail {

namespace {

/// M5 (Mamba2): vLLM's _compute_chunk_metadata over the prefill rows. Each row's query is
/// cut into chunks that never cross a sequence or a multiple of chunk_size in the row's
/// absolute token positions; a checkpoint splits the row into two segments so that a chunk
/// ends exactly on it. Python's integer semantics throughout (a host upper bound below the
/// query length gives a negative computed count, as in vLLM).
void plan_chunks(Ctx& x) {
  StepPlan& p = x.p;
  const int64_t C = x.c.chunk_size;
  const int32_t first = p.num_decodes;
  int64_t pos = 0;
  int32_t chunks = 0;
  const auto capacity = static_cast<int32_t>(p.seq_idx.size());
  auto chunk = [&](int32_t seq, int64_t len) {
    if (chunks == capacity) throw InternalError("Mamba2 chunk metadata exceeds its capacity");
    p.seq_idx[chunks] = seq;
    p.cu_chunk[chunks] = static_cast<int32_t>(pos);
    ++chunks;
    pos += len;
  };
  // One segment: `tokens` tokens after `computed` ones; returns its last chunk.
  auto segment = [&](int32_t seq, int64_t computed, int64_t tokens) {
    if (py_mod(computed, C) != 0) {  // finish the chunk the computed tokens left open
      const int64_t len = std::min(ceil_div(computed, C) * C - computed, tokens);
      chunk(seq, len);
      tokens -= len;
    }
    for (int64_t i = ceil_div(tokens, C); i > 0; --i) {
      const int64_t len = std::min(C, tokens);
      chunk(seq, len);
      tokens -= len;
    }
    return chunks - 1;
  };
  bool any_checkpoint = false;
  for (int32_t i = 0; i < p.num_prefills; ++i) {
    const int32_t r = first + i;
    const int64_t q = p.ql(r);
    const int64_t computed = static_cast<int64_t>(x.s.seq_lens_cpu_upper_bound[r]) - q;
    const int64_t ckpt = p.checkpoint.present ? p.checkpoint.offsets[i] : 0;
    p.ckpt_chunk[i] = 0;  // vLLM's max(idx, 0): 0 where the row has no checkpoint
    if (ckpt != 0) {
      p.ckpt_chunk[i] = segment(i, computed, ckpt);
      any_checkpoint = true;
    }
    p.last_chunk[i] = segment(i, computed + ckpt, q - ckpt);
  }
  p.cu_chunk[chunks] = static_cast<int32_t>(pos);
  p.num_chunks = chunks;
  p.mamba_chunks = true;
  p.checkpoint_chunks = any_checkpoint;
}

}  // namespace

void plan_mamba(Ctx& x) {
  StepPlan& p = x.p;
  const Config& c = x.c;
  const int32_t n = p.num_reqs;
  const bool spec = c.num_spec > 0;
  // M1: what vLLM 0.34's runner hands build(): Mamba2 and ShortConv the step's accepted and
  // draft counts, Mamba1 neither (its build() drops them); a capture build passes accepted =
  // the query lengths when k > 0 and no drafts. P2: PLE's non-speculative path hands neither.
  const bool none = x.kind == BuilderKind::Mamba1 || x.kind == BuilderKind::PleShortConv;
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
    p.mamba_accepted = MambaAccepted::DecodeRows;
    p.accepted_from_query_lens = !accepted || x.capture;
  } else if (accepted) {
    p.mamba_accepted = MambaAccepted::Passthrough;
    p.accepted_from_query_lens = x.capture;
  }
  // M3: FULL graphs stage decode-only steps into the persistent [D, 1 + k] buffers.
  p.stage_decode = c.full_cuda_graph && np == 0 && nd <= x.cap.graph_bs;
  if (p.stage_decode && c.mamba_cache_mode != CacheMode::Align)
    p.width.need(p.spec_state_cols, 0, "the staged decode state gather");

  if (np == 0) return;
  // M4: the prefill rows' metadata.
  p.has_initial_state = true;
  if (x.kind == BuilderKind::PleShortConv) return;  // no causal-conv1d metadata (P2)
  plan_conv1d(p, p.qsl.data() + nd, np);
  if (x.kind != BuilderKind::Mamba2) return;
  for (int32_t r = nd; r < n; ++r) p.prep_initial_states = p.prep_initial_states || ub[r] > p.ql(r);
  p.checkpoint.rows = p.ns_rows;
  plan_checkpoints(x);
  plan_chunks(x);
}

void plan_linear(Ctx& x) {
  StepPlan& p = x.p;
  const Config& c = x.c;
  const bool bailing = x.kind == BuilderKind::BailingLinear;
  // L2: Bailing decodes speculatively when k > 0 and build() is handed accepted counts (a
  // capture build hands it the query lengths; vLLM 0.34's runner hands it none).
  const bool spec = bailing && c.num_spec > 0 && (x.capture || x.s.num_accepted_tokens != nullptr);
  // L1: split_decodes_and_prefills with short extends as decodes (is_prefilling is not
  // read), threshold 1 (L2: 1 + k when decoding speculatively).
  const Split sp = split_decodes_and_prefills({p.qsl.data(), static_cast<size_t>(p.num_reqs) + 1},
                                              p.num_actual_tokens, spec ? 1 + c.num_spec : 1, true,
                                              [](int32_t) { return false; });
  p.num_decodes = sp.num_decodes;
  p.num_prefills = sp.num_prefills;
  p.num_decode_tokens = sp.num_decode_tokens;
  p.num_prefill_tokens = sp.num_prefill_tokens;
  if (!bailing) return;
  p.ns_rows.n = p.num_prefills;  // the prefill rows (state_indices_tensor_p)
  for (int32_t i = 0; i < p.num_prefills; ++i) p.ns_rows.idx[i] = p.num_decodes + i;
  // L2: the decode rows' accepted counts and query_start_loc_d when decoding
  // speculatively; FULL graphs stage a decode-only step into the persistent buffers.
  if (spec) {
    p.mamba_accepted = MambaAccepted::DecodeRows;
    p.accepted_from_query_lens = x.capture;
  }
  p.stage_decode = c.full_cuda_graph && p.num_prefills == 0 && p.num_decodes <= x.cap.graph_bs;
  if (spec && p.stage_decode && c.mamba_cache_mode != CacheMode::Align)
    p.width.need(p.spec_state_cols, 0, "the staged decode state gather");
}

}  // namespace linmeta::detail
