// SPEC §4–8: classification of a GDN or KDA step into decode / spec-decode / prefill rows.
// The GDN and KDA rules differ only where a `kda(x)` test says so; the vllm-0.34 profile
// differs from the seed only where a `v034()` test says so, each such branch named by its
// rule in docs/semantics.md (R1..R5 GDN, K1..K6 KDA; R6 is not modelled, K7 answers in both
// profiles).
#include "gdn_family.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "../checkpoint_rule.hpp"
#include "../cumsum.hpp"
#include "../plan_context.hpp"
#include "../split.hpp"
#include "../validate.hpp"

namespace linmeta::detail {

namespace {

/// Where KDA's rules differ from GDN's.
bool kda(const Ctx& x) { return x.kind == BuilderKind::Kda; }

// vLLM's split_decodes_and_prefills default, used by the KDA no-spec path.
constexpr bool kKdaTreatShortExtendsAsDecodes = true;

int32_t detect_spec(Ctx& x) {
  StepPlan& p = x.p;
  if (x.c.num_spec == 0 || x.drafts == nullptr) return 0;
  const bool recover = kda(x) && x.c.use_recoverssm;
  if (recover) require_is_prefilling(x.s, "by KDA RecoverSSM spec detection");
  int32_t count = 0, drafted = 0;  // drafted: some spec row carries a draft
  const int32_t* d = x.drafts;
  int32_t* mask = p.mask.data();
  for (int32_t r = 0; r < p.num_reqs; ++r) mask[r] = static_cast<int32_t>(d[r] >= 0);
  if (recover)  // draftless active decodes go through the spec path too
    for (int32_t r = 0; r < p.num_reqs; ++r)
      mask[r] |= static_cast<int32_t>(!x.prefilling[r] && p.ql(r) > 0);
  // K2 (vllm-0.34): a RecoverSSM row wider than num_spec + 1 is no verify; it takes the
  // non-spec path (the seed profile rejects it in plan_spec).
  if (recover && x.v034())
    for (int32_t r = 0; r < p.num_reqs; ++r)
      mask[r] &= static_cast<int32_t>(p.ql(r) <= x.c.num_spec + 1);
  for (int32_t r = 0; r < p.num_reqs; ++r) {
    count += mask[r];
    drafted |= mask[r] & static_cast<int32_t>(d[r] > 0);
  }
  // R1 / K1 (vllm-0.34): no zero-draft fallback; spec rows whose drafts are all 0 still
  // take the spec path, the only one that applies the accepted-token offsets.
  if (x.v034()) return count;
  // Seed: GDN: no spec rows or no draft at all -> regular path. KDA: only without
  // RecoverSSM, which must keep its extended conv window even for draftless rows. (The
  // reference sums the drafts of the spec rows, each >= 0: the sum is 0 iff none is positive.)
  if (drafted == 0 && !recover) return 0;
  return count;
}

void plan_no_spec(Ctx& x) {
  StepPlan& p = x.p;
  const int32_t n = p.num_reqs;
  const std::span<const int32_t> qsl(p.qsl.data(), n + 1);
  Split sp;
  // K3 (vllm-0.34): KDA takes GDN's fresh-prompt split and padding drop below.
  if (kda(x) && !x.v034()) {
    sp = split_decodes_and_prefills(qsl, p.num_actual_tokens, 1, kKdaTreatShortExtendsAsDecodes,
                                    [&](int32_t r) { return x.prefilling[r]; });
  } else {
    // Fresh-prompt rule: a first chunk is a prefill even at one token, so that
    // recycled state is masked. Capture batches also have seq_len == ql but no
    // is_prefilling, so they stay decodes.
    auto no_prior = [&](int32_t r) {
      return x.prefilling[r] && p.ql(r) > 0 && x.s.seq_lens_cpu_upper_bound[r] <= p.ql(r);
    };
    sp = split_decodes_and_prefills(qsl, p.num_actual_tokens, 1, false, no_prior);
    if (sp.num_prefills > 0) {  // drop trailing padding from the prefill counts
      int32_t zeros = 0;
      for (int32_t r = sp.num_decodes; r < n; ++r) zeros += p.ql(r) == 0 ? 1 : 0;
      sp.num_prefills -= zeros;
      sp.num_prefill_tokens = p.qsl[sp.num_decodes + sp.num_prefills] - sp.num_decode_tokens;
    }
  }
  p.num_decodes = sp.num_decodes;
  p.num_prefills = sp.num_prefills;
  p.num_decode_tokens = sp.num_decode_tokens;
  p.num_prefill_tokens = sp.num_prefill_tokens;
  p.path = Path::NoSpec;
  p.ns_rows.n = n;
  p.ns_rows.identity = true;
  p.ns_state = true;
  p.ns_qsl.n = n;
  p.ns_qsl.is_qsl = true;
  p.ns_qsl.present = true;
  p.ns_qsl_output = true;
}

struct RowStats {
  int32_t spec = 0, non_spec = 0, ones = 0, zeros = 0, not_one = 0, prefilling = 0;
  int32_t longest = 0;           ///< longest spec row
  int32_t shortest = INT32_MAX;  ///< shortest spec row
  int32_t spec_prefix = 0;       ///< spec rows among the first `spec` rows (computed after)
  int32_t ns_tokens = 0;         ///< fits: tokens <= max_num_batched_tokens
};

/// Counts over the spec mask. Branch-free loops of at most three reductions each,
/// so that the compiler vectorises them (one pass of everything does not).
RowStats row_stats(const StepPlan& p, const bool* prefilling, bool keep_padding) {
  const int32_t n = p.num_reqs;
  const int32_t* qsl = p.qsl.data();
  const int32_t* mask = p.mask.data();
  const auto* pf = reinterpret_cast<const uint8_t*>(prefilling);
  const int32_t keep = keep_padding ? 1 : 0;
  auto non_spec = [&](int32_t r, int32_t q) {
    return (1 - mask[r]) & (keep | static_cast<int32_t>(q > 0));
  };
  RowStats st;
  for (int32_t r = 0; r < n; ++r) {
    const int32_t q = qsl[r + 1] - qsl[r];
    const int32_t ns = non_spec(r, q);
    st.spec += mask[r];
    st.non_spec += ns;
    st.ns_tokens += ns * q;
  }
  for (int32_t r = 0; r < n; ++r) {
    const int32_t q = qsl[r + 1] - qsl[r];
    const int32_t ns = non_spec(r, q);
    st.ones += ns & static_cast<int32_t>(q == 1);
    st.zeros += ns & static_cast<int32_t>(q == 0);
  }
  st.not_one = st.non_spec - st.ones;
  int32_t longest = 0, shortest = INT32_MAX;
  for (int32_t r = 0; r < n; ++r) {
    const int32_t q = qsl[r + 1] - qsl[r];
    longest = std::max(longest, mask[r] * q);
    shortest = std::min(shortest, q | ((mask[r] - 1) & INT32_MAX));  // INT32_MAX off the mask
  }
  st.longest = longest;
  st.shortest = shortest;
  int32_t pref = 0;
  for (int32_t r = 0; r < n; ++r)
    pref += non_spec(r, qsl[r + 1] - qsl[r]) & static_cast<int32_t>(pf[r]);
  st.prefilling = pref;
  int32_t prefix = 0;
  for (int32_t r = 0; r < st.spec; ++r) prefix += mask[r];
  st.spec_prefix = prefix;
  return st;
}

/// The spec rows and the non-spec rows (padding kept or dropped), in order.
void fill_row_lists(StepPlan& p, bool keep_padding) {
  int32_t sp = 0, ns = 0;
  for (int32_t r = 0; r < p.num_reqs; ++r) {
    const bool spec = p.mask[r] != 0;
    p.sp_rows.idx[sp] = r;
    p.ns_rows.idx[ns] = r;
    sp += spec;
    ns += !spec && (keep_padding || p.ql(r) > 0);
  }
  p.sp_rows.n = sp;
  p.sp_rows.identity = false;
  p.ns_rows.n = ns;
  p.ns_rows.identity = false;
}

/// K5 (vllm-0.34, KDA mixed path): where each token set starts when the spec and the
/// non-spec tokens are two contiguous runs (one switch between active rows).
void plan_token_starts(Ctx& x) {
  StepPlan& p = x.p;
  int32_t switches = 0, first = -1, prev = -1;
  for (int32_t r = 0; r < p.num_reqs; ++r) {
    if (p.ql(r) == 0) continue;
    const int32_t m = p.mask[r];
    if (first < 0) first = m;
    if (prev >= 0 && m != prev) ++switches;
    prev = m;
  }
  if (switches != 1) return;
  const int32_t ns_tokens = p.num_prefill_tokens + p.num_decode_tokens;
  p.gdn.spec_token_start = first == 1 ? 0 : ns_tokens;
  p.gdn.non_spec_token_start = first == 1 ? p.num_spec_decode_tokens : 0;
}

void plan_spec(Ctx& x) {
  StepPlan& p = x.p;
  const int32_t n = p.num_reqs;
  const int32_t S = x.cap.spec_cols;
  require_accepted(x.c, x.kind, x.s, x.capture);

  // Row statistics in one vectorisable pass (GDN keeps zero-length padding as
  // non-spec rows, KDA drops it); row lists are written only when they are needed.
  const RowStats st = row_stats(p, x.prefilling, !kda(x));
  const int32_t sp = st.spec, ns = st.non_spec;
  const int32_t ns_tokens = st.ns_tokens;
  const int32_t ones = st.ones, zeros = st.zeros;
  const bool any_prefilling = st.prefilling > 0, any_not_one = st.not_one > 0;
  if (st.longest > x.c.num_spec + 1)
    for (int32_t r = 0; r < n; ++r)
      if (p.mask[r]) check_spec_row_length(x.c, x.kind, r, p.ql(r));
  p.num_spec_decodes = sp;

  if (kda(x)) {
    // Packed decode only when every active non-spec row is a true one-token decode.
    if (ns > 0) require_is_prefilling(x.s, "by the KDA spec path with non-spec rows");
    if (any_prefilling || any_not_one) {
      p.num_prefills = ns;
      p.num_prefill_tokens = static_cast<int32_t>(ns_tokens);
    } else {
      p.num_decodes = ns;
      p.num_decode_tokens = static_cast<int32_t>(ns_tokens);
    }
  } else {
    p.num_decodes = ones;
    p.num_decode_tokens = ones;
    p.num_prefills = ns - ones - zeros;
    p.num_prefill_tokens = static_cast<int32_t>(ns_tokens) - ones;
    // Never mix decodes and spec decodes: one-token rows go to the prefill kernel.
    if (p.num_decodes > 0) {
      p.num_prefills += p.num_decodes;
      p.num_prefill_tokens += p.num_decode_tokens;
      p.num_decodes = p.num_decode_tokens = 0;
    }
    p.gdn.mask_output = true;
    for (int32_t r = 0; r < n; ++r) p.gdn.mask_host[r] = static_cast<uint8_t>(p.mask[r]);
    // The common length of every spec row, if positive.
    p.gdn.uniform_spec_len = st.shortest == st.longest && st.shortest > 0 ? st.shortest : -1;
  }
  p.num_spec_decode_tokens = p.total_tokens - p.num_prefill_tokens - p.num_decode_tokens;

  if (p.num_prefills == 0 && p.num_decodes == 0) {
    p.path = Path::PureSpec;
    // Spec rows precede padding: the query_start_loc prefix is their cumsum.
    p.sp_qsl.n = sp;
    p.sp_qsl.is_qsl = true;
    p.sp_qsl.present = true;
    // KDA takes the first N rows; GDN the masked rows, which are those unless a
    // zero-length row precedes a spec row. R2 (vllm-0.34): GDN takes the first N rows too.
    p.sp_rows.n = sp;
    p.sp_rows.identity = kda(x) || x.v034() || st.spec_prefix == sp;
    if (!p.sp_rows.identity) fill_row_lists(p, !kda(x));
    if (!kda(x)) {
      p.tokens = StepPlan::Tokens::Arange;
      p.arange_len = std::min(sp * S, p.total_tokens);
    }
    return;
  }
  p.path = Path::Mixed;
  p.tokens = StepPlan::Tokens::Partition;
  p.ns_state = true;
  fill_row_lists(p, !kda(x));
  fill_cumsum(p, p.sp_rows, p.sp_qsl);
  fill_cumsum(p, p.ns_rows, p.ns_qsl);
  // KDA packed decode consumes one row per request: no non-spec cumsum output.
  p.ns_qsl_output = !kda(x) || p.num_prefills > 0;
  p.gdn.request_indices = kda(x) && x.c.use_recoverssm;
  if (kda(x) && x.v034()) plan_token_starts(x);
}

const int32_t* cumsum_data(const StepPlan& p, const Cumsum& c) {
  return c.is_qsl ? p.qsl.data() : c.v.data();
}

void plan_prefill(Ctx& x) {
  StepPlan& p = x.p;
  if (p.num_prefills == 0) return;
  p.has_initial_state = true;
  plan_conv1d(p, cumsum_data(p, p.ns_qsl), p.ns_qsl.n);
  if (kda(x)) return;
  p.gdn.prefill_fields = true;
  if (p.path == Path::NoSpec && p.num_decodes > 0) {
    p.gdn.peel_rows = p.num_decodes;
    p.gdn.peel_tokens = p.num_decode_tokens;
  }
  // R4 (vllm-0.34): FlashInfer's chunk kernel takes cu_seqlens; no FLA chunk metadata.
  const bool chunks =
      x.v034() ? x.c.prefill_backend != PrefillBackend::FlashInfer : x.c.chunk_metadata;
  if (chunks) {
    p.gdn.chunks = true;
    p.gdn.chunk_seqs = p.ns_qsl.n - p.gdn.peel_rows;
    ceil_cumsum(cumsum_data(p, p.ns_qsl) + p.gdn.peel_rows, p.gdn.chunk_seqs, kFlaChunkSize,
                p.gdn.chunk_offsets.data());
    int32_t k = 0;
    for (int32_t i = 0; i < p.gdn.chunk_seqs; ++i)
      if (p.gdn.chunk_offsets[i + 1] > p.gdn.chunk_offsets[i])
        p.gdn.chunk_starts[k++] = p.gdn.chunk_offsets[i];
    p.gdn.chunk_starts[k] = p.gdn.chunk_offsets[p.gdn.chunk_seqs];
    p.gdn.chunk_nonempty = k;
  }
}

/// R5 (vllm-0.34, GDN + FlashInfer on a 64-multiple grid): where FlashInfer's prefill emits
/// the checkpoint states. It emits one every `every_n` tokens of each prefill sequence (the
/// trailing prefill rows of the checkpoint rows), every_n = gcd of the offsets.
void plan_flashinfer_checkpoints(Ctx& x) {
  StepPlan& p = x.p;
  const int32_t rows = p.ns_rows.n;
  const int32_t prefill_rows = p.ns_qsl.n - p.gdn.peel_rows;
  int32_t every = 0;
  for (int32_t i = 0; i < rows; ++i) every = std::gcd(every, p.checkpoint.offsets[i]);
  p.gdn.fi_every_n = every;
  p.gdn.fi_cu_starts[0] = 0;
  const int32_t first = rows - prefill_rows;
  for (int32_t i = 0; i < prefill_rows; ++i)
    p.gdn.fi_cu_starts[i + 1] = p.gdn.fi_cu_starts[i] + p.ql(p.ns_rows[first + i]) / every;
  p.gdn.fi_prefill_rows = prefill_rows;
  for (int32_t i = 0; i < rows; ++i) {
    const int32_t offset = p.checkpoint.offsets[i];
    p.gdn.fi_rows[i] =
        i >= first && offset > 0 ? p.gdn.fi_cu_starts[i - first] + offset / every - 1 : 0;
  }
  p.gdn.fi_checkpoint_plan = true;
}

/// K6 (vllm-0.34, KDA + FlashInfer prefill): the non-spec query_start_loc as int64, and
/// the non-spec sequences longest first when some has more than one token. vLLM sorts
/// without stability (ties in no defined order); linmeta breaks ties by row.
void plan_flashinfer_prefill(Ctx& x) {
  StepPlan& p = x.p;
  if (!kda(x) || x.c.prefill_backend != PrefillBackend::FlashInfer || p.num_prefills == 0) return;
  p.gdn.fi_prefill_qsl = true;
  const int32_t n = p.ns_qsl.n;
  const int32_t* cu = cumsum_data(p, p.ns_qsl);
  if (p.num_prefill_tokens + p.num_decode_tokens <= n) return;
  for (int32_t i = 0; i < n; ++i) p.gdn.fi_order[i] = i;
  std::sort(p.gdn.fi_order.begin(), p.gdn.fi_order.begin() + n, [cu](int32_t a, int32_t b) {
    const int32_t la = cu[a + 1] - cu[a], lb = cu[b + 1] - cu[b];
    return la != lb ? la > lb : a < b;
  });
  p.gdn.fi_seq_order = true;
}

void plan_staging(Ctx& x) {
  StepPlan& p = x.p;
  if (!x.c.full_cuda_graph || p.num_prefills > 0) return;
  const int32_t D = x.cap.graph_bs;
  if (p.path == Path::PureSpec) {
    const bool rows_fit =
        kda(x) ? p.num_reqs <= (x.c.use_recoverssm ? x.cap.rows : D) : p.num_spec_decodes <= D;
    p.stage_spec = rows_fit && p.num_spec_decode_tokens <= D;
    // The persistent [D, S] buffer takes whole spec rows: unaligned tables need S columns.
    if (p.stage_spec && x.c.mamba_cache_mode != CacheMode::Align)
      p.width.need(p.spec_state_cols, p.sp_rows[0], "the staged spec state gather");
  } else if (p.path == Path::NoSpec) {
    p.stage_decode = p.num_decodes <= D;
  }
}

}  // namespace

void plan_gdn_family(Ctx& x) {
  StepPlan& p = x.p;
  if (detect_spec(x) == 0)
    plan_no_spec(x);
  else
    plan_spec(x);
  plan_prefill(x);
  // R5 / K4: prefill checkpoints over the non-spec rows (KDA; GDN in vllm-0.34).
  if (kda(x) || x.v034()) {
    p.checkpoint.rows = p.ns_rows;
    plan_checkpoints(x);
    if (p.checkpoint.present && !kda(x) && x.c.prefill_backend == PrefillBackend::FlashInfer &&
        checkpoint_alignment(x.c, x.kind) % kFlashInferCheckpointAlign == 0)
      plan_flashinfer_checkpoints(x);
  }
  plan_flashinfer_prefill(x);
  if (kda(x)) {
    p.gdn.recoverssm_commit = x.c.use_recoverssm && p.num_spec_decodes > 0;
    p.gdn.commit_align = p.gdn.recoverssm_commit && x.c.mamba_cache_mode == CacheMode::Align;
  }
  plan_staging(x);
}

void check_gdn_capture(const Config& c, BuilderKind kind, const Step& s) {
  const int32_t n = s.num_reqs;
  const int32_t d = c.decode_cudagraph_max_bs(kind);
  if (n > d || s.num_actual_tokens > d)
    reject(fmt::format(
        "capture build supports decode-only FULL graphs: num_reqs = {} and num_actual_tokens = "
        "{} must both be <= decode_cudagraph_max_bs = {}",
        n, s.num_actual_tokens, d));
}

}  // namespace linmeta::detail
