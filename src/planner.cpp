// Planning a step (SPEC §4–8, docs/semantics.md): validation, the inputs every builder
// reads, then the kind's own planning (its KindRules::plan, src/kinds/) and the steps the
// kinds share: causal-conv1d metadata and prefill checkpoints.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "capacity.hpp"
#include "checkpoint_rule.hpp"
#include "cumsum.hpp"
#include "kinds/kind_rules.hpp"
#include "linmeta/error.hpp"
#include "plan_context.hpp"
#include "step_plan.hpp"
#include "validate.hpp"

namespace linmeta::detail {

namespace {

/// Takes consecutive int32 arrays from PlanStorage::words, or only counts them
/// (`base == nullptr`). An array past the end is an InternalError naming it.
class Carver {
 public:
  Carver(int32_t* base, size_t capacity) : base_(base), capacity_(capacity) {}
  std::span<int32_t> take(size_t n, const char* what) {
    if (base_ == nullptr) {
      used_ += n;
      return {};
    }
    if (n > capacity_ - used_)
      throw InternalError(
          fmt::format("plan storage overflow: {} ({} words) ends past the {} words "
                      "counted ({} taken before it)",
                      what, n, capacity_, used_));
    const std::span<int32_t> s(base_ + used_, n);
    used_ += n;
    return s;
  }
  [[nodiscard]] size_t used() const { return used_; }

 private:
  int32_t* base_;
  size_t capacity_;
  size_t used_ = 0;
};

/// Every int32 array of a plan, in storage order: the one list that sizes PlanStorage
/// (count mode) and points a StepPlan into it.
void carve_plan(const PlanStorage& storage, Carver& c, StepPlan& p) {
  const size_t R = storage.rows;
  p.qsl = c.take(R + 1, "qsl");
  p.mask = c.take(R, "mask");
  p.capture_drafts = c.take(R, "capture_drafts");
  p.ns_rows.idx = c.take(R, "ns_rows");
  p.sp_rows.idx = c.take(R, "sp_rows");
  p.ns_qsl.v = c.take(R + 1, "ns_qsl");
  p.sp_qsl.v = c.take(R + 1, "sp_qsl");
  p.gdn.chunk_offsets = c.take(R + 1, "chunk_offsets");
  p.gdn.chunk_starts = c.take(R + 1, "chunk_starts");
  p.conv_nums = c.take(R, "conv_nums");
  p.conv_offsets = c.take(R + 1, "conv_offsets");
  p.conv_offsetlist = c.take(storage.conv_total, "conv_offsetlist");
  p.checkpoint.offsets = c.take(R, "checkpoint.offsets");
  p.checkpoint.cols = c.take(R, "checkpoint.cols");
  p.checkpoint.query_lens = c.take(R, "checkpoint.query_lens");
  p.gdn.fi_cu_starts = c.take(R + 1, "fi_cu_starts");
  p.gdn.fi_rows = c.take(R, "fi_rows");
  p.gdn.fi_order = c.take(R, "fi_order");
  p.mamba.cu_chunk = c.take(storage.mamba_chunks + 1, "cu_chunk");
  p.mamba.seq_idx = c.take(storage.mamba_chunks, "seq_idx");
  p.mamba.last_chunk = c.take(R, "last_chunk");
  p.mamba.ckpt_chunk = c.take(R, "ckpt_chunk");
  // The SGLang kinds (none for the others).
  const size_t SR = storage.sglang_rows;
  p.sgl.qsl = c.take(SR > 0 ? SR + 1 : 0, "sgl.qsl");
  p.sgl.tracked = c.take(SR, "sgl.tracked");
  p.sgl.conv = c.take(SR * kSglangMaxConvWindow, "sgl.conv");
  p.sgl.final_rows = c.take(SR, "sgl.final_rows");
  p.sgl.h_rows = c.take(SR, "sgl.h_rows");
  p.sgl.h_src = c.take(SR, "sgl.h_src");
  p.sgl.re_rows = c.take(SR, "sgl.re_rows");
  p.sgl.re_end = c.take(SR, "sgl.re_end");
  p.sgl.initial = c.take(SR, "sgl.initial");
  p.sgl.extend_lens = c.take(SR, "sgl.extend_lens");
  const std::span<int32_t> flags = c.take(SR, "sgl.prefix_cpu");  // holds SR bools
  p.sgl.prefix_cpu = {reinterpret_cast<bool*>(flags.data()), SR};
  p.sgl.unaligned = c.take(SR, "sgl.unaligned");
  p.sgl.chunk_idx = c.take(SR, "sgl.chunk_idx");
  p.sgl.conv_start = c.take(SR, "sgl.conv_start");
  p.sgl.pg_table = c.take(storage.sglang_prefill_words, "sgl.pg_table");
  p.sgl.conv_starts = c.take(SR > 0 ? SR + 1 : 0, "sgl.conv_starts");
  p.sgl.chunk_indices = c.take(SR > 0 ? storage.mamba_chunks : 0, "sgl.chunk_indices");
  p.sgl.chunk_offsets = c.take(SR > 0 ? storage.mamba_chunks : 0, "sgl.chunk_offsets");
}

}  // namespace

PlanStorage::PlanStorage(const Config& c, BuilderKind kind) {
  const Capacity cap = Capacity::of(c, kind);
  rows = static_cast<size_t>(cap.rows);
  // Causal-conv1d metadata: the GDN and Mamba families only.
  conv_total = is_gdn_family(kind) || is_mamba_base(kind) ? static_cast<size_t>(cap.conv_total) : 0;
  mamba_chunks = static_cast<size_t>(cap.mamba_chunks);
  sglang_rows = is_sglang(kind) ? rows : 0;
  // KDA's prefill-graph table of the largest bucket: max_num_batched_tokens, max_seqs = R.
  sglang_prefill_words =
      is_sglang(kind) ? static_cast<size_t>(
                            SglangPrefillGraphLayout::of(c.max_num_batched_tokens, cap.rows).total)
                      : 0;
  Carver count(nullptr, 0);
  StepPlan scratch;
  carve_plan(*this, count, scratch);
  words.assign(count.used(), 0);
  mlist.assign(conv_total, 0);
  no_prefilling.assign(rows, 0);
  mask_host.assign(rows, 0);
}

StepPlan::StepPlan(PlanStorage& storage) {
  Carver carver(storage.words.data(), storage.words.size());
  carve_plan(storage, carver, *this);
  no_prefilling = storage.no_prefilling;
  gdn.mask_host = storage.mask_host;
  conv_mlist = std::span<int64_t>(storage.mlist);
}

void plan_conv1d(StepPlan& p, const int32_t* cu, int32_t n) {
  p.conv = true;
  p.conv_seqs = n;
  ceil_cumsum(cu, n, kConvBlock, p.conv_offsets.data(), p.conv_nums.data());
  // vLLM's host lists: np.repeat(arange(n), nums) and the concatenated range(nums[i]).
  int64_t* mlist = p.conv_mlist.data();
  int32_t* offsetlist = p.conv_offsetlist.data();
  for (int32_t i = 0; i < n; ++i) {
    const int32_t m = p.conv_nums[i];  // a local: the stores below could alias the span
    std::fill_n(mlist, m, int64_t{i});
    std::iota(offsetlist, offsetlist + m, 0);
    mlist += m;
    offsetlist += m;
  }
}

void fill_cumsum(const StepPlan& p, const RowList& rows, Cumsum& out) {
  out.v[0] = 0;
  for (int32_t i = 0; i < rows.n; ++i) out.v[i + 1] = out.v[i] + p.ql(rows[i]);
  out.n = rows.n;
  out.is_qsl = false;
  out.present = true;
}

int32_t checkpoint_alignment(const Config& c, BuilderKind kind) {
  if (c.prefill_checkpoint_alignment > 0) return c.prefill_checkpoint_alignment;
  const int32_t own = kind_rules(kind).checkpoint_alignment;
  return own > 0 ? own : c.block_size;
}

/// Prefill checkpoints, align mode: SPEC §8 (seed, KDA); R5 / K4 / M4 (vllm-0.34): the shared
/// hash-block rule of src/checkpoint_rule.hpp (vLLM's MambaPrefillCheckpointBuilder).
void plan_checkpoints(Ctx& x) {
  StepPlan& p = x.p;
  CheckpointPlan& cp = p.checkpoint;
  if (p.num_prefills == 0 || x.c.num_prefill_checkpoint_blocks <= 0 ||
      x.c.mamba_cache_mode != CacheMode::Align)
    return;
  const int32_t B = x.c.block_size;
  const int32_t alignment = checkpoint_alignment(x.c, x.kind);
  bool any = false;
  for (int32_t i = 0; i < cp.rows.n; ++i) {
    const int32_t r = cp.rows[i];
    const int32_t seq = x.s.seq_lens_cpu_upper_bound[r];
    const int32_t q = p.ql(r);
    cp.query_lens[i] = q;
    if (x.v034()) {
      const CheckpointSite site = hash_block_checkpoint(seq, q, B, alignment);
      cp.offsets[i] = site.offset;
      cp.cols[i] = site.col;
      any = any || site.offset > 0;
      continue;
    }
    // The seed's FlashKDA rule (KDA).
    const int64_t offset = static_cast<int64_t>(seq / B) * B - (static_cast<int64_t>(seq) - q);
    const bool valid =
        seq % B != 0 && offset > 0 && offset < q && offset % kKdaCheckpointAlign == 0;
    const int32_t first = valid ? static_cast<int32_t>(offset) : q;
    const bool tail = q - first > 0;
    cp.offsets[i] = tail ? first : 0;
    cp.cols[i] = valid ? seq / B - 1 : -1;
    any = any || tail;
  }
  if (!any) return;
  for (int32_t i = 0; i < cp.rows.n; ++i)
    p.width.need(static_cast<int64_t>(cp.cols[i]) + 1, cp.rows[i], "the prefill checkpoint gather");
  cp.present = true;
}

void plan_step(const Config& c, BuilderKind kind, const Step& s, bool capture,
               std::span<const BlockTable> tables, StepPlan& p) {
  const KindRules& rules = kind_rules(kind);
  Ctx x{c, kind, rules, s, capture, tables, Capacity::of(c, kind), p};
  if (rules.own_step) return rules.plan(x);
  validate_step(c, kind, s, capture, tables);
  p.num_reqs = s.num_reqs;
  p.num_actual_tokens = s.num_actual_tokens;
  p.capture = capture;
  std::copy(s.query_start_loc_cpu.begin(), s.query_start_loc_cpu.end(), p.qsl.begin());
  p.total_tokens = p.qsl[p.num_reqs];
  p.spec_state_cols = x.cap.spec_cols;

  // The aligned state gather reads num_speculative_blocks + 1 columns of every row
  // from the block of its last token; the host upper bound bounds the device seq_len,
  // and the longest sequence needs the widest table.
  if (c.mamba_cache_mode == CacheMode::Align) {
    const auto& seq = s.seq_lens_cpu_upper_bound;
    int32_t longest = 0;
    for (const int32_t v : seq) longest = std::max(longest, v);
    const int64_t start = longest > 0 ? (longest - 1) / c.block_size : 0;
    const int64_t cols = start + c.num_speculative_blocks + 1;  // 64-bit: cannot wrap
    // The row only names the failure: look for it when some table is too narrow.
    int32_t row = 0;
    for (const BlockTable& t : tables)
      if (t.width < cols)
        row = static_cast<int32_t>(std::find(seq.begin(), seq.end(), longest) - seq.begin());
    p.width.need(cols, row, "the aligned state gather");
  }
  // Drafts (a capture build derives them) and is_prefilling, as plain arrays.
  x.prefilling = s.is_prefilling.empty() ? reinterpret_cast<const bool*>(p.no_prefilling.data())
                                         : s.is_prefilling.data();
  if (capture) {
    for (int32_t r = 0; r < p.num_reqs; ++r) p.capture_drafts[r] = p.ql(r) - 1;
    x.drafts = p.capture_drafts.data();
  } else if (!s.num_decode_draft_tokens.empty()) {
    x.drafts = s.num_decode_draft_tokens.data();
  }

  rules.plan(x);
  check_table_widths(tables, p.width);
}

}  // namespace linmeta::detail
