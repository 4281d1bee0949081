#include "pack.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "capacity.hpp"
#include "linmeta/error.hpp"

namespace linmeta::detail {

namespace {

// Typed job description -> job kind and arguments.
JobKind encode(JobArgs& a, const GatherState& x) {
  a.gather = x;
  return JobKind::GatherState;
}
JobKind encode(JobArgs& a, const CopyValues& x) {
  a.copy = x;
  return JobKind::CopyValues;
}
JobKind encode(JobArgs& a, const CopyMask& x) {
  a.mask = x;
  return JobKind::CopyMask;
}
JobKind encode(JobArgs& a, const AcceptedCounts& x) {
  a.accepted = x;
  return JobKind::AcceptedCounts;
}
JobKind encode(JobArgs& a, const InitialState& x) {
  a.initial = x;
  return JobKind::InitialState;
}
JobKind encode(JobArgs&, const ComputedTokens&) { return JobKind::ComputedTokens; }
JobKind encode(JobArgs&, const Arange&) { return JobKind::Arange; }
JobKind encode(JobArgs& a, const TokenPartition& x) {
  a.partition = x;
  return JobKind::TokenPartition;
}
JobKind encode(JobArgs& a, const ChunkIndexPairs& x) {
  a.chunks = x;
  return JobKind::ChunkIndexPairs;
}
JobKind encode(JobArgs& a, const ConvPrograms& x) {
  a.conv = x;
  return JobKind::ConvPrograms;
}
JobKind encode(JobArgs& a, const CheckpointGather& x) {
  a.checkpoint = x;
  return JobKind::CheckpointGather;
}
JobKind encode(JobArgs&, const AlignedStarts&) { return JobKind::AlignedStarts; }

/// Largest step arena (int32 words): offsets stay far from int32 overflow.
constexpr int64_t kMaxArenaWords = int64_t{1} << 28;

[[noreturn]] void internal(const char* what) {
  throw Error(std::string("linmeta: internal error: ") + what);
}

class Packer {
 public:
  Packer(const StepPlan& p, const Config& c, BuilderKind kind, const BufferLayout& l,
         ArenaSpan arena, PackedStep& out)
      : p_(p), c_(c), kda_(kind == BuilderKind::Kda), l_(l), arena_(arena), out_(out) {}

  /// `tables` holds group_count references (count mode: none are read).
  void run(PackMode mode, std::span<const TableRef> tables, int32_t group_begin,
           int32_t group_count);

 private:
  [[nodiscard]] bool counting() const { return arena_.data == nullptr; }

  /// Reserves n words (written by `fill` unless counting); returns their offset.
  template <class Fill>
  int32_t reserve(int64_t n, Fill&& fill) {
    const auto at = static_cast<int32_t>(words_);
    if (!counting()) {
      if (words_ + n > arena_.capacity) internal("step arena overflow");
      fill(arena_.data + at);
    }
    words_ += n;
    if (words_ > kMaxArenaWords)
      throw Error(fmt::format(
          "linmeta: this configuration cannot fit: its step arena needs more than {} words "
          "(max_num_seqs = {}, num_groups = {})",
          kMaxArenaWords, c_.max_num_seqs, num_groups_));
    return at;
  }
  int32_t put(const int32_t* data, int32_t n) {
    return reserve(
        n, [&](int32_t* dst) { std::memcpy(dst, data, sizeof(int32_t) * static_cast<size_t>(n)); });
  }
  void align_even() {
    if (words_ % 2 != 0) reserve(1, [](int32_t* dst) { *dst = 0; });
  }
  int32_t put_rows(const RowList& rows) {
    return rows.identity ? kIdentity : put(rows.idx.data(), rows.n);
  }
  int32_t put_cumsum(const Cumsum& c) { return c.is_qsl ? qsl_ : put(c.v.data(), c.n + 1); }

  /// Adds the job writing `count` elements of output `out` (its staged buffer when
  /// `staged`) and returns the view of them.
  template <class Args>
  FieldView& emit(Out out, bool staged, int32_t count, const Args& args,
                  DType dtype = DType::Int32) {
    const Buf buf{out, staged};
    const bool pairs = std::is_same_v<Args, ChunkIndexPairs>;
    const int64_t elems = static_cast<int64_t>(count) * (pairs ? 2 : 1);
    if (!counting() && elems > l_.capacity_of(buf)) internal("output exceeds its buffer capacity");
    if (dtype_size(dtype) > dtype_size(output_spec(out).dtype))
      internal("output wider than its buffer's element type");
    if (count > 0 || counting()) {  // count mode: sizes are not known, every job may run
      if (num_jobs_ == static_cast<int32_t>(jobs_.size())) internal("job table overflow");
      Job& job = jobs_[static_cast<size_t>(num_jobs_++)];
      job = Job{};
      job.kind = encode(job.args, args);
      job.count = count;
      job.dtype = dtype;
      job.per_group = BufferLayout::per_group(buf) ? 1 : 0;
      job.dst = l_.dst(buf);
    }
    FieldView& v = view(out);
    v = FieldView{};
    v.buf = buf;
    v.rows = count;
    v.dtype = dtype;
    v.present = true;
    return v;
  }
  FieldView& view(Out out) { return out_.views[static_cast<size_t>(out)]; }
  static FieldView slice(FieldView v, int32_t skip) {
    v.offset += skip;
    v.rows -= skip;
    return v;
  }

  void state_indices();
  void masks_and_tokens();
  void cumsums_and_accepted();
  void prefill();
  void checkpoints();
  void kda_extras();
  void flashinfer_extras();
  void checkpoint_gather(int32_t cols);
  void finish(std::span<const TableRef> tables, int32_t group_begin);

  const StepPlan& p_;
  const Config& c_;
  bool kda_;
  const BufferLayout& l_;
  ArenaSpan arena_;
  PackedStep& out_;
  // At most one job per output row.
  std::array<Job, kNumOutputs> jobs_{};
  int32_t num_jobs_ = 0;
  int64_t words_ = 0;
  int32_t num_groups_ = 0;
  int32_t qsl_ = 0, mask_ = 0, ns_rows_ = kIdentity, sp_rows_ = kIdentity, ns_qsl_ = 0, sp_qsl_ = 0;
};

void Packer::run(PackMode mode, std::span<const TableRef> tables, int32_t group_begin,
                 int32_t group_count) {
  num_groups_ = group_count;
  out_.views = StepViews{};
  const int32_t n = p_.num_reqs;
  qsl_ = put(p_.qsl.data(), n + 1);
  ns_rows_ = put_rows(p_.ns_rows);
  sp_rows_ = p_.path != Path::NoSpec ? put_rows(p_.sp_rows) : kIdentity;
  state_indices();
  if (mode == PackMode::GathersOnly) {
    if (p_.checkpoint) checkpoint_gather(put(p_.cp_cols.data(), p_.ns_rows.n));
  } else {
    if (p_.path != Path::NoSpec) mask_ = put(p_.mask.data(), n);
    if (p_.ns_qsl.present) ns_qsl_ = put_cumsum(p_.ns_qsl);
    if (p_.sp_qsl.present) sp_qsl_ = put_cumsum(p_.sp_qsl);
    masks_and_tokens();
    cumsums_and_accepted();
    prefill();
    checkpoints();
    if (kda_) kda_extras();
    flashinfer_extras();
    // What update_block_table re-gathers from, instead of the caller's seq_lens.
    if (c_.mamba_cache_mode == CacheMode::Align) emit(Out::AlignedStart, false, n, AlignedStarts{});
  }
  finish(tables, group_begin);
}

// Rows staged into the persistent buffers: the request count, cut to the buffer
// (the reference slices a [D]-sized tensor with [:num_reqs]).
void Packer::state_indices() {
  const int32_t B = p_.num_reqs;
  const int32_t D = c_.decode_cudagraph_max_bs();
  const int32_t S = p_.spec_state_cols;
  const int32_t N = p_.num_spec_decodes;
  if (p_.path != Path::NoSpec) {
    const int32_t rows = p_.stage_spec ? (kda_ ? B : std::min(B, D)) : N;
    // cols 0: each group's own spec columns (a table narrower than S gives fewer).
    FieldView& v = emit(Out::SpecStateIndices, p_.stage_spec, rows * S,
                        GatherState{.rows = sp_rows_, .n_real = N, .n_rows = rows, .cols = 0});
    v.rows = rows;
    v.cols = S;
    v.ndim = 2;
  }
  if (!p_.ns_state) return;
  const int32_t rows = p_.stage_decode ? std::min(B, D) : p_.ns_rows.n;
  const int32_t real = p_.stage_decode ? p_.num_decodes : p_.ns_rows.n;
  emit(Out::NonSpecStateIndices, p_.stage_decode, rows,
       GatherState{.rows = ns_rows_, .n_real = real, .n_rows = rows, .cols = 1});
  // Decodes peeled off the front in a mixed non-spec batch (SPEC §7 C).
  if (p_.prefill_fields)
    view(Out::PrefillStateIndices) = slice(view(Out::NonSpecStateIndices), p_.peel_rows);
}

void Packer::masks_and_tokens() {
  const int32_t B = p_.num_reqs;
  const int32_t D = c_.decode_cudagraph_max_bs();
  if (p_.mask_output) {
    if (p_.stage_spec)
      emit(Out::SpecSequenceMasks, true, std::min(B, D),
           CopyMask{.src = mask_, .n_real = p_.num_spec_decodes}, DType::Bool);
    else
      emit(Out::SpecSequenceMasks, false, B, CopyMask{.src = mask_, .n_real = B}, DType::Bool);
  }
  if (p_.tokens == StepPlan::Tokens::Arange) {  // int32, as the reference's torch.arange
    emit(Out::SpecTokenIndx, p_.stage_spec, p_.arange_len, Arange{});
    emit(Out::NonSpecTokenIndx, p_.stage_spec, 0, Arange{});
  } else if (p_.tokens == StepPlan::Tokens::Partition) {  // int64, as its stable argsort
    const int32_t ns_tokens = p_.ns_qsl.v[static_cast<size_t>(p_.ns_qsl.n)];
    emit(Out::NonSpecTokenIndx, false, ns_tokens,
         TokenPartition{.rows = ns_rows_, .n_seqs = p_.ns_rows.n, .cumsum = ns_qsl_}, DType::Int64);
    emit(Out::SpecTokenIndx, false, p_.total_tokens - ns_tokens,
         TokenPartition{.rows = sp_rows_, .n_seqs = p_.sp_rows.n, .cumsum = sp_qsl_}, DType::Int64);
  }
}

void Packer::cumsums_and_accepted() {
  const int32_t B = p_.num_reqs;
  const int32_t D = c_.decode_cudagraph_max_bs();
  const int32_t N = p_.num_spec_decodes;
  if (p_.path != Path::NoSpec) {
    const bool st = p_.stage_spec;
    // Staged: the reference slices [:B + 1] / [:B] of [D + 1] / [D] buffers, also where KDA
    // RecoverSSM stages more than D rows of state indices (N <= D: every spec row has tokens).
    const int32_t rows = st ? std::min(B, D) : N;
    emit(Out::SpecQueryStartLoc, st, rows + 1,
         CopyValues{.src = sp_qsl_, .n_real = N + 1, .add = 0});
    emit(Out::NumAcceptedTokens, st, rows, AcceptedCounts{.rows = sp_rows_, .n_real = N});
  }
  if (p_.ns_qsl_output) {
    const int32_t ns = p_.ns_qsl.n;
    const bool st = p_.stage_decode && !kda_;
    const int32_t rows = st ? std::min(B, D) : ns;
    const int32_t real = st ? p_.num_decodes : ns;
    emit(Out::NonSpecQueryStartLoc, st, rows + 1,
         CopyValues{.src = ns_qsl_, .n_real = real + 1, .add = 0});
  }
}

void Packer::prefill() {
  const int32_t ns = p_.ns_rows.n;
  if (p_.has_initial_state)
    emit(Out::HasInitialState, false, ns, InitialState{.rows = ns_rows_}, DType::Bool);
  if (p_.conv) {
    const int32_t offsets = put(p_.conv_offsets.data(), p_.conv_seqs + 1);
    const auto cap = static_cast<int32_t>(l_.capacity_of(Buf{Out::BatchPtr, false}));
    emit(Out::BatchPtr, false, cap,
         ConvPrograms{.n_seqs = p_.conv_seqs, .offsets = offsets, .chunk = 0});
    emit(Out::TokenChunkOffsetPtr, false, cap,
         ConvPrograms{.n_seqs = p_.conv_seqs, .offsets = offsets, .chunk = 1});
  }
  if (!p_.prefill_fields) return;
  // Decodes peeled off the front in a mixed non-spec batch (SPEC §7 C).
  const int32_t peel = p_.peel_rows;
  view(Out::PrefillHasInitialState) = slice(view(Out::HasInitialState), peel);
  if (peel > 0)
    emit(Out::PrefillQueryStartLoc, false, ns - peel + 1,
         CopyValues{.src = ns_qsl_ + peel, .n_real = ns - peel + 1, .add = -p_.peel_tokens});
  else
    view(Out::PrefillQueryStartLoc) = view(Out::NonSpecQueryStartLoc);
  if (p_.chunks) {
    const int32_t offsets = put(p_.chunk_offsets.data(), p_.chunk_seqs + 1);
    const int32_t starts = put(p_.chunk_starts.data(), p_.chunk_nonempty + 1);
    const int32_t chunks = p_.chunk_offsets[static_cast<size_t>(p_.chunk_seqs)];
    FieldView& v = emit(Out::ChunkIndices, false, chunks,
                        ChunkIndexPairs{.n_nonempty = p_.chunk_nonempty, .starts = starts});
    v.cols = 2;
    v.ndim = 2;
    emit(Out::ChunkOffsets, false, p_.chunk_seqs + 1,
         CopyValues{.src = offsets, .n_real = p_.chunk_seqs + 1, .add = 0}, DType::Int64);
  }
}

void Packer::checkpoint_gather(int32_t cols) {
  emit(Out::CheckpointStateIndices, false, p_.ns_rows.n,
       CheckpointGather{.rows = ns_rows_, .cols = cols});
}

/// Prefill checkpoints (KDA; GDN in vllm-0.34), over the non-spec rows.
void Packer::checkpoints() {
  if (!p_.checkpoint) return;
  const int32_t ns = p_.ns_rows.n;
  const int32_t offsets = put(p_.cp_offsets.data(), ns);
  emit(Out::CheckpointOffsets, false, ns, CopyValues{.src = offsets, .n_real = ns, .add = 0});
  checkpoint_gather(put(p_.cp_cols.data(), ns));
}

/// vllm-0.34 FlashInfer prefill fields (docs/semantics.md R5, K6), int64 as vLLM's.
void Packer::flashinfer_extras() {
  if (p_.fi_checkpoint_plan) {
    const int32_t n = p_.fi_prefill_rows + 1;
    emit(Out::FlashInferCheckpointCuStarts, false, n,
         CopyValues{.src = put(p_.fi_cu_starts.data(), n), .n_real = n, .add = 0}, DType::Int64);
    const int32_t rows = p_.ns_rows.n;
    emit(Out::FlashInferCheckpointRows, false, rows,
         CopyValues{.src = put(p_.fi_rows.data(), rows), .n_real = rows, .add = 0}, DType::Int64);
  }
  if (p_.fi_prefill_qsl) {
    const int32_t n = p_.ns_qsl.n + 1;
    emit(Out::FlashInferPrefillQueryStartLoc, false, n,
         CopyValues{.src = ns_qsl_, .n_real = n, .add = 0}, DType::Int64);
  }
  if (p_.fi_seq_order) {
    const int32_t n = p_.ns_qsl.n;
    emit(Out::FlashInferPrefillSeqOrder, false, n,
         CopyValues{.src = put(p_.fi_order.data(), n), .n_real = n, .add = 0});
  }
}

void Packer::kda_extras() {
  if (p_.request_indices)
    emit(Out::RecoverSsmRequestIndices, false, p_.sp_rows.n,
         CopyValues{.src = sp_rows_, .n_real = p_.sp_rows.n, .add = 0});
  if (p_.commit_align) emit(Out::RecoverSsmNumComputed, false, p_.num_reqs, ComputedTokens{});
}

/// Block ranges, jobs and table references after the data; the header points at them.
void Packer::finish(std::span<const TableRef> tables, int32_t group_begin) {
  LaunchHeader& h = out_.header;
  h.num_jobs = num_jobs_;
  h.group_stride = l_.group_bytes;
  h.group_begin = group_begin;
  h.group_count = num_groups_;
  h.qsl_at = qsl_;
  h.blocks_at = reserve(num_jobs_ + 1, [&](int32_t* starts) {
    int32_t blocks = 0;
    for (int32_t j = 0; j < num_jobs_; ++j) {
      starts[j] = blocks;
      const Job& job = jobs_[static_cast<size_t>(j)];
      const int32_t per = (job.count + kFinishThreads - 1) / kFinishThreads;
      blocks += per * (job.per_group ? h.group_count : 1);
    }
    starts[num_jobs_] = blocks;
    h.num_blocks = blocks;
  });
  align_even();
  h.jobs_at = reserve(static_cast<int64_t>(num_jobs_) * kJobWords, [&](int32_t* dst) {
    std::memcpy(dst, jobs_.data(), sizeof(Job) * static_cast<size_t>(num_jobs_));
  });
  h.tables_at = reserve(static_cast<int64_t>(num_groups_) * kTableWords, [&](int32_t* dst) {
    std::memcpy(dst, tables.data(), sizeof(TableRef) * tables.size());
  });
  h.align = c_.mamba_cache_mode == CacheMode::Align ? 1 : 0;
  h.block_size = c_.block_size;
  // The one rule of where accepted counts come from (validate.cpp: reads_accepted).
  h.accepted_from = (kda_ && c_.use_recoverssm) ? AcceptedFrom::Ones
                    : p_.capture                ? AcceptedFrom::QueryLens
                                                : AcceptedFrom::Input;
  out_.arena_words = static_cast<int32_t>(words_);
}

Array view_of(const FieldView& f, const BufferLayout& l, const char* base, int32_t group) {
  Array a;
  if (!f.present) return a;
  a.data = base + l.at(f.buf, group) + f.offset * f.cols * dtype_size(f.dtype);
  a.dtype = f.dtype;
  a.rows = f.rows;
  a.cols = f.cols;
  a.ndim = f.ndim;
  a.present = true;
  return a;
}

/// A plan with every array of the packer at its largest (for count mode).
StepPlan largest_plan(const Config& c, BuilderKind kind) {
  StepPlan p;
  reserve_plan(p, c);
  const int32_t R = c.max_num_seqs;
  p.num_reqs = R;
  p.path = Path::Mixed;
  p.tokens = StepPlan::Tokens::Partition;
  p.mask_output = p.ns_state = p.ns_qsl_output = true;
  for (RowList* rows : {&p.ns_rows, &p.sp_rows}) {
    rows->n = R;
    rows->identity = false;
  }
  for (Cumsum* cs : {&p.ns_qsl, &p.sp_qsl}) {
    cs->n = R;
    cs->present = true;
    cs->is_qsl = false;
  }
  p.has_initial_state = p.conv = p.prefill_fields = p.chunks = true;
  p.peel_rows = 1;
  p.conv_seqs = p.chunk_seqs = p.chunk_nonempty = R;
  p.checkpoint = p.fi_checkpoint_plan = p.fi_prefill_qsl = p.fi_seq_order = true;
  p.fi_prefill_rows = R;
  if (kind == BuilderKind::Kda) p.request_indices = p.commit_align = true;
  p.spec_state_cols = Capacity::of(c, kind).spec_cols;
  return p;
}

}  // namespace

int32_t spec_columns(const Config& c, const StepPlan& p, const BlockTable& table) {
  // Unaligned tables are sliced [:, :S]: a narrower table gives fewer columns.
  return c.mamba_cache_mode == CacheMode::Align ? p.spec_state_cols
                                                : std::min(p.spec_state_cols, table.width);
}

int32_t arena_capacity_words(const Config& c, BuilderKind kind, int32_t num_groups) {
  const StepPlan plan = largest_plan(c, kind);
  const BufferLayout layout = BufferLayout::of(Capacity::of(c, kind), c.full_cuda_graph, 1);
  PackedStep out;
  Packer(plan, c, kind, layout, ArenaSpan{}, out).run(PackMode::Build, {}, 0, num_groups);
  return out.arena_words;
}

void pack_step(const StepPlan& plan, const Config& config, BuilderKind kind,
               const BufferLayout& layout, std::span<const TableRef> tables, int32_t group_begin,
               PackMode mode, ArenaSpan arena, PackedStep& out) {
  Packer(plan, config, kind, layout, arena, out)
      .run(mode, tables, group_begin, static_cast<int32_t>(tables.size()));
}

Metadata materialize(const StepPlan& p, const StepViews& v, const BufferLayout& l, const char* base,
                     int32_t g, Target target, const BlockTable& raw_table, const Config& c) {
  Metadata m;
  m.target = target;
  static_cast<StepCounts&>(m) = p;
  // Parents of nested fields first, then every output of the table.
  if (p.conv) {
    m.conv1d.emplace();
    m.conv1d->tot = p.conv_offsets[static_cast<size_t>(p.conv_seqs)];
    m.conv1d->nums = Array{p.conv_nums.data(), DType::Int32, p.conv_seqs, 1, 1, true};
  }
  if (p.recoverssm_commit) {
    m.recoverssm_commit.emplace();
    if (p.commit_align)
      m.recoverssm_commit->align = RecoverSsmAlign{raw_table, Array{}, c.block_size};
  }
  if (p.checkpoint) m.checkpoint.emplace();
  if (p.fi_checkpoint_plan)
    m.flashinfer_checkpoint_plan = FlashInferCheckpointPlan{
        p.fi_every_n, p.fi_cu_starts[static_cast<size_t>(p.fi_prefill_rows)], Array{}, Array{}};
  if (p.spec_token_start >= 0) m.spec_token_start = p.spec_token_start;
  if (p.non_spec_token_start >= 0) m.non_spec_token_start = p.non_spec_token_start;
  for (const OutputSpec& spec : kOutputs)
    if (Array* a = spec.field(m)) *a = view_of(v[static_cast<size_t>(spec.id)], l, base, g);
  if (m.spec_state_indices_tensor) m.spec_state_indices_tensor.cols = spec_columns(c, p, raw_table);
  if (p.uniform_spec_len >= 0) m.uniform_spec_sequence_length = p.uniform_spec_len;
  if (m.recoverssm_commit) {
    m.recoverssm_commit->state_indices = m.spec_state_indices_tensor;
    m.recoverssm_commit->query_start_loc = m.spec_query_start_loc;
  }
  return m;
}

}  // namespace linmeta::detail
