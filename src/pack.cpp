#include "pack.hpp"

#include <algorithm>
#include <cstring>

#include "linmeta/error.hpp"

namespace linmeta::detail {

namespace {

class Packer {
 public:
  Packer(const StepPlan& p, const Config& c, BuilderKind kind, const BufferLayout& l,
         int32_t* arena, PackedStep& out)
      : p_(p), c_(c), kda_(kind == BuilderKind::Kda), l_(l), arena_(arena), out_(out) {}

  void run(int32_t num_groups);

 private:
  /// Copies n words into the arena; returns their offset.
  int32_t put(const int32_t* data, int32_t n) {
    const int32_t at = words_;
    std::memcpy(arena_ + at, data, sizeof(int32_t) * static_cast<size_t>(n));
    words_ += n;
    return at;
  }
  int32_t put_rows(const RowList& rows) {
    return rows.identity ? -1 : put(rows.idx.data(), rows.n);
  }
  int32_t put_cumsum(const Cumsum& c) { return c.is_qsl ? qsl_ : put(c.v.data(), c.n + 1); }

  /// Adds a job writing `count` elements of `buf` and returns the view of them.
  FieldView emit(JobKind kind, Buf buf, int32_t count, Job job = {}) {
    const int64_t elems = static_cast<int64_t>(count) * (kind == JobKind::ChunkIndices ? 2 : 1);
    if (elems > l_.capacity[static_cast<int32_t>(buf)])
      throw Error("linmeta: internal error: output exceeds its buffer capacity");
    job.kind = kind;
    job.count = count;
    job.per_group = per_group(buf) ? 1 : 0;
    job.dst = l_.dst(buf);
    if (count > 0) {
      FinishParams& fp = out_.params;
      if (fp.num_jobs == kMaxJobs) throw Error("linmeta: internal job table overflow");
      fp.jobs[fp.num_jobs++] = job;
    }
    FieldView v;
    v.buf = buf;
    v.rows = count;
    v.present = true;
    return v;
  }
  static Job with(int32_t n_real, int32_t rows = -1, int32_t src = 0, int32_t src2 = 0,
                  int32_t cols = 1, int32_t add = 0) {
    Job j;
    j.n_real = n_real;
    j.rows = rows;
    j.src = src;
    j.src2 = src2;
    j.cols = cols;
    j.add = add;
    return j;
  }
  static FieldView slice(FieldView v, int32_t skip) {
    v.offset += skip;
    v.rows -= skip;
    return v;
  }

  void state_indices();
  void masks_and_tokens();
  void cumsums_and_accepted();
  void prefill();
  void kda_extras();

  const StepPlan& p_;
  const Config& c_;
  bool kda_;
  const BufferLayout& l_;
  int32_t* arena_;
  PackedStep& out_;
  int32_t words_ = 0;
  int32_t qsl_ = 0, mask_ = 0, ns_rows_ = -1, sp_rows_ = -1, ns_qsl_ = 0, sp_qsl_ = 0;
};

void Packer::run(int32_t num_groups) {
  out_.params.num_jobs = 0;
  out_.views = StepViews{};
  const int32_t n = p_.num_reqs;
  qsl_ = put(p_.qsl.data(), n + 1);
  if (p_.path != Path::NoSpec) mask_ = put(p_.mask.data(), n);
  ns_rows_ = put_rows(p_.ns_rows);
  sp_rows_ = p_.path != Path::NoSpec ? put_rows(p_.sp_rows) : -1;
  if (p_.ns_qsl.present) ns_qsl_ = put_cumsum(p_.ns_qsl);
  if (p_.sp_qsl.present) sp_qsl_ = put_cumsum(p_.sp_qsl);

  state_indices();
  masks_and_tokens();
  cumsums_and_accepted();
  prefill();
  if (kda_) kda_extras();

  FinishParams& fp = out_.params;
  fp.qsl = qsl_;
  fp.accepted_from = (kda_ && c_.use_recoverssm) ? AcceptedFrom::Ones
                     : p_.capture                ? AcceptedFrom::QueryLens
                                                 : AcceptedFrom::Input;
  fp.align = c_.mamba_cache_mode == CacheMode::Align ? 1 : 0;
  fp.block_size = c_.block_size;
  fp.group_stride = l_.group_bytes;
  fp.group_begin = 0;
  fp.group_count = num_groups;
  assign_blocks(fp);
  out_.arena_words = words_;
}

// Rows staged into the persistent buffers: the request count, cut to the buffer
// (the reference slices a [D]-sized tensor with [:num_reqs]).
void Packer::state_indices() {
  StepViews& v = out_.views;
  const int32_t B = p_.num_reqs;
  const int32_t D = c_.decode_cudagraph_max_bs();
  const int32_t S = p_.spec_state_cols;
  const int32_t N = p_.num_spec_decodes;
  if (p_.path != Path::NoSpec) {
    const int32_t rows = p_.stage_spec ? (kda_ ? B : std::min(B, D)) : N;
    const Buf buf = p_.stage_spec ? Buf::GraphSpecState : Buf::SpecState;
    // cols 0: each group's own spec columns (a table narrower than S gives fewer).
    v.spec_state = emit(JobKind::GatherState, buf, rows * S, with(N, sp_rows_, rows, 0, 0));
    v.spec_state.rows = rows;
    v.spec_state.cols = S;
    v.spec_state.ndim = 2;
  }
  if (p_.ns_state) {
    if (p_.stage_decode)
      v.ns_state = emit(JobKind::GatherState, Buf::GraphNonSpecState, std::min(B, D),
                        with(p_.num_decodes, ns_rows_, std::min(B, D)));
    else
      v.ns_state = emit(JobKind::GatherState, Buf::NonSpecState, p_.ns_rows.n,
                        with(p_.ns_rows.n, ns_rows_, p_.ns_rows.n));
  }
}

void Packer::masks_and_tokens() {
  StepViews& v = out_.views;
  const int32_t B = p_.num_reqs;
  const int32_t D = c_.decode_cudagraph_max_bs();
  if (p_.mask_output) {
    if (p_.stage_spec)
      v.masks = emit(JobKind::CopyMask, Buf::GraphMasks, std::min(B, D),
                     with(p_.num_spec_decodes, -1, mask_));
    else
      v.masks = emit(JobKind::CopyMask, Buf::Masks, B, with(B, -1, mask_));
  }
  if (p_.tokens == StepPlan::Tokens::Arange) {
    v.spec_tok =
        emit(JobKind::Arange, p_.stage_spec ? Buf::GraphSpecTok : Buf::SpecTok, p_.arange_len);
    v.ns_tok = emit(JobKind::Arange, p_.stage_spec ? Buf::GraphNonSpecTok : Buf::NonSpecTok, 0);
  } else if (p_.tokens == StepPlan::Tokens::Partition) {
    const int32_t ns_tokens = p_.ns_qsl.v[p_.ns_qsl.n];
    v.ns_tok = emit(JobKind::TokenPartition, Buf::NonSpecTok, ns_tokens,
                    with(p_.ns_rows.n, ns_rows_, 0, ns_qsl_));
    v.spec_tok = emit(JobKind::TokenPartition, Buf::SpecTok, p_.total_tokens - ns_tokens,
                      with(p_.sp_rows.n, sp_rows_, 0, sp_qsl_));
  }
}

void Packer::cumsums_and_accepted() {
  StepViews& v = out_.views;
  const int32_t B = p_.num_reqs;
  const int32_t D = c_.decode_cudagraph_max_bs();
  const int32_t N = p_.num_spec_decodes;
  if (p_.path != Path::NoSpec) {
    const int32_t rows = kda_ ? B : std::min(B, D);
    if (p_.stage_spec) {
      v.spec_qsl = emit(JobKind::CopyI32, Buf::GraphSpecQsl, rows + 1, with(N + 1, -1, sp_qsl_));
      v.accepted = emit(JobKind::Accepted, Buf::GraphAccepted, rows, with(N, sp_rows_));
    } else {
      v.spec_qsl = emit(JobKind::CopyI32, Buf::SpecQsl, N + 1, with(N + 1, -1, sp_qsl_));
      v.accepted = emit(JobKind::Accepted, Buf::Accepted, N, with(N, sp_rows_));
    }
  }
  if (p_.ns_qsl_output) {
    const int32_t ns = p_.ns_qsl.n;
    if (p_.stage_decode && !kda_)
      v.ns_qsl = emit(JobKind::CopyI32, Buf::GraphNonSpecQsl, std::min(B, D) + 1,
                      with(p_.num_decodes + 1, -1, ns_qsl_));
    else
      v.ns_qsl = emit(JobKind::CopyI32, Buf::NonSpecQsl, ns + 1, with(ns + 1, -1, ns_qsl_));
  }
}

void Packer::prefill() {
  StepViews& v = out_.views;
  const int32_t ns = p_.ns_rows.n;
  if (p_.has_initial_state)
    v.has_initial_state =
        emit(JobKind::HasInitialState, Buf::HasInitialState, ns, with(ns, ns_rows_));
  if (p_.conv) {
    const int32_t offsets = put(p_.conv_offsets.data(), p_.conv_seqs + 1);
    const auto cap = static_cast<int32_t>(l_.capacity[static_cast<int32_t>(Buf::ConvBatch)]);
    v.conv_batch =
        emit(JobKind::ConvBatch, Buf::ConvBatch, cap, with(p_.conv_seqs, -1, 0, offsets));
    v.conv_chunk =
        emit(JobKind::ConvChunk, Buf::ConvChunk, cap, with(p_.conv_seqs, -1, 0, offsets));
  }
  if (!p_.prefill_fields) return;
  // Decodes peeled off the front in a mixed non-spec batch (SPEC §7 C).
  const int32_t peel = p_.peel_rows;
  v.prefill_state = slice(v.ns_state, peel);
  v.prefill_has_initial_state = slice(v.has_initial_state, peel);
  if (peel > 0)
    v.prefill_qsl = emit(JobKind::CopyI32, Buf::PrefillQsl, ns - peel + 1,
                         with(ns - peel + 1, -1, ns_qsl_ + peel, 0, 1, -p_.peel_tokens));
  else
    v.prefill_qsl = v.ns_qsl;
  if (p_.chunks) {
    const int32_t offsets = put(p_.chunk_offsets.data(), p_.chunk_seqs + 1);
    const int32_t starts = put(p_.chunk_starts.data(), p_.chunk_nonempty + 1);
    const int32_t chunks = p_.chunk_offsets[p_.chunk_seqs];
    v.chunk_indices = emit(JobKind::ChunkIndices, Buf::ChunkIndices, chunks,
                           with(p_.chunk_nonempty, -1, 0, starts));
    v.chunk_indices.cols = 2;
    v.chunk_indices.ndim = 2;
    v.chunk_offsets = emit(JobKind::CopyI32, Buf::ChunkOffsets, p_.chunk_seqs + 1,
                           with(p_.chunk_seqs + 1, -1, offsets));
  }
}

void Packer::kda_extras() {
  StepViews& v = out_.views;
  const int32_t ns = p_.ns_rows.n;
  if (p_.checkpoint) {
    const int32_t offsets = put(p_.cp_offsets.data(), ns);
    const int32_t cols = put(p_.cp_cols.data(), ns);
    v.cp_offsets = emit(JobKind::CopyI32, Buf::CheckpointOffsets, ns, with(ns, -1, offsets));
    v.cp_state =
        emit(JobKind::CheckpointState, Buf::CheckpointState, ns, with(ns, ns_rows_, 0, cols));
  }
  if (p_.request_indices)
    v.request_indices =
        emit(JobKind::CopyI32, Buf::RequestIndices, p_.sp_rows.n, with(p_.sp_rows.n, -1, sp_rows_));
  if (p_.commit_align)
    v.num_computed = emit(JobKind::NumComputed, Buf::NumComputed, p_.num_reqs, with(p_.num_reqs));
}

template <class T>
Array<T> view(const FieldView& f, const BufferLayout& l, const char* base, int32_t group) {
  Array<T> a;
  if (!f.present) return a;
  a.data = reinterpret_cast<const T*>(base + l.at(f.buf, group)) + f.offset * f.cols;
  a.rows = f.rows;
  a.cols = f.cols;
  a.ndim = f.ndim;
  a.present = true;
  return a;
}

}  // namespace

int32_t spec_columns(const Config& c, const StepPlan& p, const BlockTable& table) {
  // Unaligned tables are sliced [:, :S]: a narrower table gives fewer columns.
  return c.mamba_cache_mode == CacheMode::Align ? p.spec_state_cols
                                                : std::min(p.spec_state_cols, table.width);
}

int32_t arena_capacity_words(const Config& c) {
  // qsl, mask, two row lists, two cumsums, chunk offsets and starts, conv
  // offsets, checkpoint offsets and columns: at most 11 arrays of max_num_seqs + 1 words.
  return 11 * (c.max_num_seqs + 1) + 16;
}

void pack_step(const StepPlan& plan, const Config& config, BuilderKind kind,
               const BufferLayout& layout, int32_t num_groups, int32_t* arena, PackedStep& out) {
  Packer(plan, config, kind, layout, arena, out).run(num_groups);
}

void assign_blocks(FinishParams& fp) {
  int32_t blocks = 0;
  for (int32_t j = 0; j < fp.num_jobs; ++j) {
    fp.job_block_start[j] = blocks;
    const Job& job = fp.jobs[j];
    const int32_t per = (job.count + kFinishThreads - 1) / kFinishThreads;
    blocks += per * (job.per_group ? fp.group_count : 1);
  }
  fp.job_block_start[fp.num_jobs] = blocks;
  fp.num_blocks = blocks;
}

void keep_gathers_only(FinishParams& fp) {
  int32_t kept = 0;
  for (int32_t j = 0; j < fp.num_jobs; ++j) {
    const JobKind k = fp.jobs[j].kind;
    if (k == JobKind::GatherState || k == JobKind::CheckpointState) fp.jobs[kept++] = fp.jobs[j];
  }
  fp.num_jobs = kept;
}

Metadata materialize(const StepPlan& p, const StepViews& v, const BufferLayout& l, const char* base,
                     int32_t g, Target target, const BlockTable& raw_table, const Config& c) {
  Metadata m;
  m.target = target;
  static_cast<StepCounts&>(m) = p;
  m.has_initial_state = view<bool>(v.has_initial_state, l, base, g);
  m.chunk_indices = view<int32_t>(v.chunk_indices, l, base, g);
  m.chunk_offsets = view<int32_t>(v.chunk_offsets, l, base, g);
  m.prefill_query_start_loc = view<int32_t>(v.prefill_qsl, l, base, g);
  m.prefill_state_indices = view<int32_t>(v.prefill_state, l, base, g);
  m.prefill_has_initial_state = view<bool>(v.prefill_has_initial_state, l, base, g);
  m.spec_query_start_loc = view<int32_t>(v.spec_qsl, l, base, g);
  m.non_spec_query_start_loc = view<int32_t>(v.ns_qsl, l, base, g);
  m.spec_state_indices_tensor = view<int32_t>(v.spec_state, l, base, g);
  if (m.spec_state_indices_tensor) m.spec_state_indices_tensor.cols = spec_columns(c, p, raw_table);
  m.non_spec_state_indices_tensor = view<int32_t>(v.ns_state, l, base, g);
  m.spec_sequence_masks = view<bool>(v.masks, l, base, g);
  m.spec_token_indx = view<int32_t>(v.spec_tok, l, base, g);
  m.non_spec_token_indx = view<int32_t>(v.ns_tok, l, base, g);
  m.num_accepted_tokens = view<int32_t>(v.accepted, l, base, g);
  if (p.uniform_spec_len >= 0) m.uniform_spec_sequence_length = p.uniform_spec_len;
  if (p.conv) {
    Conv1dMetadata conv;
    conv.tot = p.conv_offsets[p.conv_seqs];
    conv.nums.data = p.conv_nums.data();
    conv.nums.rows = p.conv_seqs;
    conv.nums.present = true;
    conv.batch_ptr = view<int32_t>(v.conv_batch, l, base, g);
    conv.token_chunk_offset_ptr = view<int32_t>(v.conv_chunk, l, base, g);
    m.conv1d = conv;
  }
  if (p.recoverssm_commit) {
    RecoverSsmCommit commit;
    commit.state_indices = m.spec_state_indices_tensor;
    commit.query_start_loc = m.spec_query_start_loc;
    commit.request_indices = view<int32_t>(v.request_indices, l, base, g);
    if (p.commit_align)
      commit.align =
          RecoverSsmAlign{raw_table, view<int32_t>(v.num_computed, l, base, g), c.block_size};
    m.recoverssm_commit = commit;
  }
  if (p.checkpoint)
    m.checkpoint =
        Checkpoint{view<int32_t>(v.cp_offsets, l, base, g), view<int32_t>(v.cp_state, l, base, g)};
  return m;
}

}  // namespace linmeta::detail
