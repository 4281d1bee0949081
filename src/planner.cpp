// SPEC §4–8: classification of a step into decode / spec-decode / prefill rows,
// for both builders. The GDN and KDA rules differ only where a `kind` test says so.
#include <algorithm>

#include "capacity.hpp"
#include "cumsum.hpp"
#include "split.hpp"
#include "step_plan.hpp"
#include "validate.hpp"

namespace linmeta::detail {

namespace {

// vLLM's split_decodes_and_prefills default, used by the KDA no-spec path.
constexpr bool kKdaTreatShortExtendsAsDecodes = true;

struct Ctx {
  const Config& c;
  BuilderKind kind;
  const Step& s;
  bool capture;
  std::span<const BlockTable> tables;
  Capacity cap;
  StepPlan& p;

  [[nodiscard]] bool kda() const { return kind == BuilderKind::Kda; }
  [[nodiscard]] bool have_drafts() const { return capture || !s.num_decode_draft_tokens.empty(); }
  [[nodiscard]] int32_t draft(int32_t r) const {
    return capture ? p.ql(r) - 1 : s.num_decode_draft_tokens[r];
  }
  [[nodiscard]] bool prefilling(int32_t r) const {
    return !s.is_prefilling.empty() && s.is_prefilling[r];
  }
};

void reset(StepPlan& p) {
  static_cast<StepCounts&>(p) = StepCounts{};
  p.path = Path::NoSpec;
  p.uniform_spec_len = -1;
  p.mask_output = false;
  p.ns_rows.n = p.sp_rows.n = 0;
  p.ns_rows.identity = p.sp_rows.identity = false;
  p.ns_state = false;
  p.ns_qsl.present = p.sp_qsl.present = false;
  p.ns_qsl_output = false;
  p.ns_qsl.is_qsl = p.sp_qsl.is_qsl = false;
  p.ns_qsl.n = p.sp_qsl.n = 0;
  p.tokens = StepPlan::Tokens::None;
  p.arange_len = 0;
  p.prefill_fields = p.has_initial_state = p.chunks = p.conv = false;
  p.peel_rows = p.peel_tokens = p.chunk_seqs = p.conv_seqs = 0;
  p.checkpoint = p.recoverssm_commit = p.request_indices = p.commit_align = false;
  p.stage_spec = p.stage_decode = false;
}

/// SPEC §7 A / §8: fills p.mask and returns the number of spec rows (0: no spec path).
int32_t detect_spec(Ctx& x) {
  StepPlan& p = x.p;
  if (x.c.num_spec == 0 || !x.have_drafts()) return 0;
  const bool recover = x.kda() && x.c.use_recoverssm;
  if (recover) require_is_prefilling(x.s, "by KDA RecoverSSM spec detection");
  int32_t count = 0;
  int64_t drafts = 0;
  for (int32_t r = 0; r < p.num_reqs; ++r) {
    const bool spec = x.draft(r) >= 0 || (recover && !x.prefilling(r) && p.ql(r) > 0);
    p.mask[r] = spec ? 1 : 0;
    if (spec) {
      ++count;
      drafts += x.draft(r);
    }
  }
  // GDN: no spec rows or no draft at all -> regular path. KDA: only without RecoverSSM,
  // which must keep its extended conv window even for draftless rows.
  if (drafts == 0 && !recover) return 0;
  return count;
}

void plan_no_spec(Ctx& x) {
  StepPlan& p = x.p;
  const int32_t n = p.num_reqs;
  const std::span<const int32_t> qsl(p.qsl.data(), n + 1);
  Split sp;
  if (x.kda()) {
    sp = split_decodes_and_prefills(qsl, p.num_actual_tokens, kKdaTreatShortExtendsAsDecodes,
                                    [&](int32_t r) { return x.prefilling(r); });
  } else {
    // Fresh-prompt rule: a first chunk is a prefill even at one token, so that
    // recycled state is masked. Capture batches also have seq_len == ql but no
    // is_prefilling, so they stay decodes.
    auto no_prior = [&](int32_t r) {
      return x.prefilling(r) && p.ql(r) > 0 && x.s.seq_lens_cpu_upper_bound[r] <= p.ql(r);
    };
    sp = split_decodes_and_prefills(qsl, p.num_actual_tokens, false, no_prior);
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

void fill_cumsum(const StepPlan& p, const RowList& rows, Cumsum& out) {
  out.v[0] = 0;
  for (int32_t i = 0; i < rows.n; ++i) out.v[i + 1] = out.v[i] + p.ql(rows[i]);
  out.n = rows.n;
  out.is_qsl = false;
  out.present = true;
}

void plan_spec(Ctx& x) {
  StepPlan& p = x.p;
  const int32_t n = p.num_reqs;
  const int32_t S = x.cap.spec_cols;
  if (!x.capture) require_accepted(x.s);

  // Spec rows and non-spec rows (GDN keeps zero-length padding, KDA drops it).
  int32_t ns = 0, sp = 0;
  int64_t ns_tokens = 0;
  bool any_prefilling = false, any_not_one = false;
  int32_t ones = 0, zeros = 0;
  for (int32_t r = 0; r < n; ++r) {
    const int32_t q = p.ql(r);
    if (p.mask[r]) {
      check_spec_row_length(x.c, x.kind, r, q);
      p.sp_rows.idx[sp++] = r;
    } else if (!x.kda() || q > 0) {
      p.ns_rows.idx[ns++] = r;
      ns_tokens += q;
      ones += q == 1 ? 1 : 0;
      zeros += q == 0 ? 1 : 0;
      any_prefilling = any_prefilling || x.prefilling(r);
      any_not_one = any_not_one || q != 1;
    }
  }
  p.sp_rows.n = sp;
  p.ns_rows.n = ns;
  p.num_spec_decodes = sp;

  if (x.kda()) {
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
    p.mask_output = true;
    const int32_t first = p.ql(p.sp_rows.idx[0]);
    bool uniform = first > 0;
    for (int32_t j = 1; j < sp && uniform; ++j) uniform = p.ql(p.sp_rows.idx[j]) == first;
    p.uniform_spec_len = uniform ? first : -1;
  }
  p.num_spec_decode_tokens = p.total_tokens - p.num_prefill_tokens - p.num_decode_tokens;

  if (p.num_prefills == 0 && p.num_decodes == 0) {
    p.path = Path::PureSpec;
    // Spec rows precede padding: the query_start_loc prefix is their cumsum.
    p.sp_qsl.n = sp;
    p.sp_qsl.is_qsl = true;
    p.sp_qsl.present = true;
    if (x.kda()) {
      p.sp_rows.identity = true;  // the seed takes the first N rows
    } else {
      p.tokens = StepPlan::Tokens::Arange;
      p.arange_len = std::min(sp * S, p.total_tokens);
    }
    return;
  }
  p.path = Path::Mixed;
  p.tokens = StepPlan::Tokens::Partition;
  p.ns_state = true;
  fill_cumsum(p, p.sp_rows, p.sp_qsl);
  fill_cumsum(p, p.ns_rows, p.ns_qsl);
  // KDA packed decode consumes one row per request: no non-spec cumsum output.
  p.ns_qsl_output = !x.kda() || p.num_prefills > 0;
  p.request_indices = x.kda() && x.c.use_recoverssm;
}

const int32_t* cumsum_data(const StepPlan& p, const Cumsum& c) {
  return c.is_qsl ? p.qsl.data() : c.v.data();
}

void plan_prefill(Ctx& x) {
  StepPlan& p = x.p;
  if (p.num_prefills == 0) return;
  p.has_initial_state = true;
  p.conv = true;
  p.conv_seqs = p.ns_qsl.n;
  ceil_cumsum(cumsum_data(p, p.ns_qsl), p.conv_seqs, kConvBlock, p.conv_offsets.data(),
              p.conv_nums.data());
  if (x.kda()) return;
  p.prefill_fields = true;
  if (p.path == Path::NoSpec && p.num_decodes > 0) {
    p.peel_rows = p.num_decodes;
    p.peel_tokens = p.num_decode_tokens;
  }
  if (x.c.chunk_metadata) {
    p.chunks = true;
    p.chunk_seqs = p.ns_qsl.n - p.peel_rows;
    ceil_cumsum(cumsum_data(p, p.ns_qsl) + p.peel_rows, p.chunk_seqs, kFlaChunkSize,
                p.chunk_offsets.data());
    int32_t k = 0;
    for (int32_t i = 0; i < p.chunk_seqs; ++i)
      if (p.chunk_offsets[i + 1] > p.chunk_offsets[i]) p.chunk_starts[k++] = p.chunk_offsets[i];
    p.chunk_starts[k] = p.chunk_offsets[p.chunk_seqs];
    p.chunk_nonempty = k;
  }
}

/// SPEC §8 prefill checkpoints (KDA, align mode).
void plan_checkpoints(Ctx& x) {
  StepPlan& p = x.p;
  if (p.num_prefills == 0 || x.c.num_prefill_checkpoint_blocks <= 0 ||
      x.c.mamba_cache_mode != CacheMode::Align)
    return;
  const int32_t B = x.c.block_size;
  bool any_tail = false;
  for (int32_t i = 0; i < p.ns_rows.n; ++i) {
    const int32_t r = p.ns_rows[i];
    const int32_t seq = x.s.seq_lens_cpu_upper_bound[r];
    const int32_t q = p.ql(r);
    const int32_t offset = (seq / B) * B - (seq - q);
    const bool valid =
        seq % B != 0 && offset > 0 && offset < q && offset % kKdaCheckpointAlign == 0;
    const int32_t first = valid ? offset : q;
    const bool tail = q - first > 0;
    p.cp_offsets[i] = tail ? first : 0;
    p.cp_cols[i] = valid ? seq / B - 1 : -1;
    any_tail = any_tail || tail;
  }
  if (!any_tail) return;
  for (int32_t i = 0; i < p.ns_rows.n; ++i)
    p.width.need(p.cp_cols[i] + 1, p.ns_rows[i], "the prefill checkpoint gather");
  p.checkpoint = true;
}

void plan_staging(Ctx& x) {
  StepPlan& p = x.p;
  if (!x.c.full_cuda_graph || p.num_prefills > 0) return;
  const int32_t D = x.cap.graph_bs;
  if (p.path == Path::PureSpec) {
    const bool rows_fit = x.kda() ? p.num_reqs <= (x.c.use_recoverssm ? x.cap.rows : D)
                                  : p.num_spec_decodes <= D;
    p.stage_spec = rows_fit && p.num_spec_decode_tokens <= D;
    // The persistent [D, S] buffer takes whole spec rows: unaligned tables need S columns.
    if (p.stage_spec && x.c.mamba_cache_mode != CacheMode::Align)
      p.width.need(p.spec_state_cols, p.sp_rows[0], "the staged spec state gather");
  } else if (p.path == Path::NoSpec) {
    p.stage_decode = p.num_decodes <= D;
  }
}

}  // namespace

void reserve_plan(StepPlan& p, const Config& c) {
  const auto R = static_cast<size_t>(c.max_num_seqs);
  p.qsl.assign(R + 1, 0);
  p.mask.assign(R, 0);
  p.ns_rows.idx.assign(R, 0);
  p.sp_rows.idx.assign(R, 0);
  p.ns_qsl.v.assign(R + 1, 0);
  p.sp_qsl.v.assign(R + 1, 0);
  p.chunk_offsets.assign(R + 1, 0);
  p.chunk_starts.assign(R + 1, 0);
  p.conv_nums.assign(R, 0);
  p.conv_offsets.assign(R + 1, 0);
  p.cp_offsets.assign(R, 0);
  p.cp_cols.assign(R, 0);
}

void plan_step(const Config& c, BuilderKind kind, const Step& s, bool capture,
               std::span<const BlockTable> tables, StepPlan& p) {
  validate_step(c, kind, s, capture, tables);
  reset(p);
  Ctx x{c, kind, s, capture, tables, Capacity::of(c, kind), p};
  p.num_reqs = s.num_reqs;
  p.num_actual_tokens = s.num_actual_tokens;  // after reset()
  p.capture = capture;
  std::copy(s.query_start_loc_cpu.begin(), s.query_start_loc_cpu.end(), p.qsl.begin());
  p.total_tokens = p.qsl[p.num_reqs];
  p.spec_state_cols = x.cap.spec_cols;

  // The aligned state gather reads num_speculative_blocks + 1 columns of every row
  // from the block of its last token; the host upper bound bounds the device seq_len.
  p.width = WidthNeed{};
  if (c.mamba_cache_mode == CacheMode::Align) {
    for (int32_t r = 0; r < p.num_reqs; ++r) {
      const int32_t seq = s.seq_lens_cpu_upper_bound[r];
      const int32_t start = seq > 0 ? (seq - 1) / c.block_size : 0;
      p.width.need(start + c.num_speculative_blocks + 1, r, "the aligned state gather");
    }
  }

  const int32_t spec_rows = detect_spec(x);
  if (spec_rows == 0)
    plan_no_spec(x);
  else
    plan_spec(x);
  plan_prefill(x);
  if (x.kda()) {
    plan_checkpoints(x);
    p.recoverssm_commit = c.use_recoverssm && p.num_spec_decodes > 0;
    p.commit_align = p.recoverssm_commit && c.mamba_cache_mode == CacheMode::Align;
  }
  plan_staging(x);
  check_table_widths(tables, p.width);
}

}  // namespace linmeta::detail
