#include "pack.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "capacity.hpp"
#include "linmeta/error.hpp"

namespace linmeta::detail {

namespace {

// Typed job description -> job kind and arguments (one overload per flavour of the list).
#define LINMETA_JOB_ENCODE(S, m)                            \
  [[maybe_unused]] JobKind encode(JobArgs& a, const S& x) { \
    a.m = x;                                                \
    return JobKind::S;                                      \
  }
LINMETA_JOB_KINDS(LINMETA_JOB_ENCODE)
#undef LINMETA_JOB_ENCODE

/// Largest step arena (int32 words): offsets stay far from int32 overflow.
constexpr int64_t kMaxArenaWords = int64_t{1} << 28;

/// The rows of one prefill-checkpoint composite (LINMETA_CHECKPOINT_ROWS).
struct CheckpointRows {
  Out parent, offsets, state_indices, host_offsets, query_lens, request_rows, block_cols;
};
constexpr CheckpointRows kCheckpoint{Out::Checkpoint,
                                     Out::CheckpointOffsets,
                                     Out::CheckpointStateIndices,
                                     Out::CheckpointHostOffsets,
                                     Out::CheckpointQueryLens,
                                     Out::CheckpointRequestRows,
                                     Out::CheckpointBlockCols};
constexpr CheckpointRows kCheckpointMeta{Out::CheckpointMeta,
                                         Out::CheckpointMetaOffsets,
                                         Out::CheckpointMetaStateIndices,
                                         Out::CheckpointMetaHostOffsets,
                                         Out::CheckpointMetaQueryLens,
                                         Out::CheckpointMetaRequestRows,
                                         Out::CheckpointMetaBlockCols};

class Packer {
 public:
  Packer(const StepPlan& p, const Config& c, BuilderKind kind, const BufferLayout& l,
         ArenaSpan arena, PackedStep& out)
      : p_(p), c_(c), kind_(kind), l_(l), arena_(arena), out_(out) {}

  /// `tables` holds group_count references (count mode: none are read).
  void run(PackMode mode, std::span<const TableRef> tables, int32_t group_begin,
           int32_t group_count);

 private:
  [[nodiscard]] bool counting() const { return arena_.data == nullptr; }
  [[nodiscard]] bool kda() const { return kind_ == BuilderKind::Kda; }

  /// Reserves n words (written by `fill` unless counting); returns their offset.
  template <class Fill>
  int32_t reserve(int64_t n, Fill&& fill) {
    const auto at = static_cast<int32_t>(words_);
    if (!counting()) {
      if (words_ + n > arena_.capacity)
        throw InternalError(fmt::format("step arena overflow: {} words past the {} counted",
                                        words_ + n - arena_.capacity, arena_.capacity));
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
  /// The rows as values (an identity list written out).
  int32_t put_row_values(const RowList& rows) {
    if (!rows.identity) return put(rows.idx.data(), rows.n);
    return reserve(rows.n, [&](int32_t* dst) {
      for (int32_t i = 0; i < rows.n; ++i) dst[i] = i;
    });
  }
  int32_t put_cumsum(const Cumsum& c) { return c.is_qsl ? qsl_ : put(c.v.data(), c.n + 1); }

  /// Adds the job writing `count` elements of output `out` (its staged buffer when
  /// `staged`) and returns the view of them (`count` rows; Slots rows set their own).
  template <class Args>
  FieldView& emit(Out out, bool staged, int32_t count, const Args& args,
                  DType dtype = DType::Int32) {
    const Buf buf{out, staged};
    const bool pairs = std::is_same_v<Args, ChunkIndexPairs>;
    const int64_t elems = static_cast<int64_t>(count) * (pairs ? 2 : 1);
    if (!counting() && elems > l_.capacity_of(buf))
      throw InternalError(fmt::format("{} elements of {}{} exceed its buffer of {}", elems,
                                      output_spec(out).name, staged ? " (staged)" : "",
                                      l_.capacity_of(buf)));
    if (dtype_size(dtype) > dtype_size(output_spec(out).dtype))
      throw InternalError(
          fmt::format("{} written wider than its buffer's element type", output_spec(out).name));
    if (count > 0 || counting()) {  // count mode: sizes are not known, every job may run
      if (num_jobs_ == static_cast<int32_t>(jobs_.size()))
        throw InternalError("job table overflow");
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
  /// A scalar (count, set optional, flag) or a present composite.
  void set(Out out, int64_t value = 0) {
    FieldView& v = view(out);
    v = FieldView{};
    v.present = true;
    v.value = value;
  }
  /// An array in the plan's host memory.
  template <class T>
  void host(Out out, std::span<T> data, int32_t rows) {
    FieldView& v = view(out);
    v = FieldView{};
    v.present = true;
    v.source = Source::Plan;
    v.host = data.data();
    v.rows = rows;
    v.dtype = dtype_of<T>();
  }
  /// One of the step's own arrays.
  void input(Out out, StepInput which, int32_t rows) {
    FieldView& v = view(out);
    v = FieldView{};
    v.present = true;
    v.source = Source::Input;
    v.input = which;
    v.rows = rows;
  }
  static FieldView slice(FieldView v, int32_t skip) {
    v.offset += skip;
    v.rows -= skip;
    return v;
  }

  void counts();
  // GDN and KDA.
  void gdn_gathers();
  void masks_and_tokens();
  void cumsums_and_accepted();
  void prefill();
  void kda_extras();
  void flashinfer_extras();
  // The Mamba base builders and linear attention.
  void mamba_gathers();
  void mamba_fields();
  // PLE ShortConv.
  void ple_gathers();
  void ple_fields();
  // Shared.
  void token_partition();
  // Shared.
  void conv1d();
  void checkpoint_gather(const CheckpointRows& rows, int32_t cols);
  void checkpoints(const CheckpointRows& rows);
  [[nodiscard]] AcceptedFrom accepted_from() const;
  void finish(std::span<const TableRef> tables, int32_t group_begin);

  const StepPlan& p_;
  const Config& c_;
  BuilderKind kind_;
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
  const bool gdn = is_gdn_family(kind_);
  const bool ple = kind_ == BuilderKind::PleShortConv;
  const CheckpointRows& cp = kind_ == BuilderKind::Mamba2 ? kCheckpointMeta : kCheckpoint;
  if (gdn)
    gdn_gathers();
  else if (ple)
    ple_gathers();
  else
    mamba_gathers();
  if (mode == PackMode::GathersOnly) {
    if (p_.checkpoint.present)
      checkpoint_gather(cp, put(p_.checkpoint.cols.data(), p_.checkpoint.rows.n));
  } else {
    counts();
    if (p_.path != Path::NoSpec) mask_ = put(p_.mask.data(), n);
    if (p_.ns_qsl.present) ns_qsl_ = put_cumsum(p_.ns_qsl);
    if (p_.sp_qsl.present) sp_qsl_ = put_cumsum(p_.sp_qsl);
    if (gdn) {
      masks_and_tokens();
      cumsums_and_accepted();
      prefill();
      if (kda()) kda_extras();
      flashinfer_extras();
    } else if (ple) {
      ple_fields();
    } else {
      mamba_fields();
    }
    conv1d();
    checkpoints(cp);
    // What update_block_table re-gathers from, instead of the caller's seq_lens.
    if (regather_reads_seq_lens(c_, kind_)) emit(Out::KeptSeqLens, false, n, KeepSeqLens{});
  }
  finish(tables, group_begin);
}

void Packer::counts() {
  set(Out::NumPrefills, p_.num_prefills);
  set(Out::NumPrefillTokens, p_.num_prefill_tokens);
  set(Out::NumDecodes, p_.num_decodes);
  set(Out::NumDecodeTokens, p_.num_decode_tokens);
  set(Out::NumSpecDecodes, p_.num_spec_decodes);
  set(Out::NumSpecDecodeTokens, p_.num_spec_decode_tokens);
  set(Out::NumActualTokens, p_.num_actual_tokens);
  set(Out::NumReqs, p_.num_reqs);
  if (p_.uniform_spec_len >= 0) set(Out::UniformSpecSequenceLength, p_.uniform_spec_len);
  if (p_.spec_token_start >= 0) set(Out::SpecTokenStart, p_.spec_token_start);
  if (p_.non_spec_token_start >= 0) set(Out::NonSpecTokenStart, p_.non_spec_token_start);
}

// Rows staged into the persistent buffers: the request count, cut to the buffer
// (the reference slices a [D]-sized tensor with [:num_reqs]).
void Packer::gdn_gathers() {
  const int32_t B = p_.num_reqs;
  const int32_t D = c_.decode_cudagraph_max_bs(kind_);
  const int32_t S = p_.spec_state_cols;
  const int32_t N = p_.num_spec_decodes;
  if (p_.path != Path::NoSpec) {
    const int32_t rows = p_.stage_spec ? (kda() ? B : std::min(B, D)) : N;
    // cols 0: each group's own spec columns (a table narrower than S gives fewer).
    emit(Out::SpecStateIndices, p_.stage_spec, rows * S,
         GatherState{
             .rows = sp_rows_, .n_real = N, .n_rows = rows, .cols = 0, .pad = StatePad::Null})
        .rows = rows;
  }
  if (p_.ns_state) {
    const int32_t rows = p_.stage_decode ? std::min(B, D) : p_.ns_rows.n;
    const int32_t real = p_.stage_decode ? p_.num_decodes : p_.ns_rows.n;
    emit(Out::NonSpecStateIndices, p_.stage_decode, rows,
         GatherState{
             .rows = ns_rows_, .n_real = real, .n_rows = rows, .cols = 1, .pad = StatePad::Null});
    // Decodes peeled off the front in a mixed non-spec batch (SPEC §7 C).
    if (p_.prefill_fields)
      view(Out::PrefillStateIndices) = slice(view(Out::NonSpecStateIndices), p_.peel_rows);
  }
  // The reference hands the spec fields themselves to the RecoverSSM commit metadata.
  if (p_.recoverssm_commit) {
    set(Out::RecoverSsmCommit);
    view(Out::RecoverSsmStateIndices) = view(Out::SpecStateIndices);
    if (p_.commit_align) {
      set(Out::RecoverSsmAlign);
      input(Out::RecoverSsmBlockTable, StepInput::BlockTable, B);
    }
  }
}

void Packer::masks_and_tokens() {
  const int32_t B = p_.num_reqs;
  const int32_t D = c_.decode_cudagraph_max_bs(kind_);
  if (p_.mask_output) {
    host(Out::SpecSequenceMasksCpu, p_.mask_host, B);
    if (p_.stage_spec)
      emit(Out::SpecSequenceMasks, true, std::min(B, D),
           CopyMask{.src = mask_, .n_real = p_.num_spec_decodes}, DType::Bool);
    else
      emit(Out::SpecSequenceMasks, false, B, CopyMask{.src = mask_, .n_real = B}, DType::Bool);
  }
  if (p_.tokens == StepPlan::Tokens::Arange) {  // int32, as the reference's torch.arange
    emit(Out::SpecTokenIndx, p_.stage_spec, p_.arange_len, Arange{});
    emit(Out::NonSpecTokenIndx, p_.stage_spec, 0, Arange{});
  } else if (p_.tokens == StepPlan::Tokens::Partition) {
    token_partition();
  }
}

/// The token ids of the non-spec rows and of the spec rows, each in their rows' order:
/// int64, as the reference's stable argsort.
void Packer::token_partition() {
  const int32_t ns_tokens = p_.ns_qsl.v[static_cast<size_t>(p_.ns_qsl.n)];
  emit(Out::NonSpecTokenIndx, false, ns_tokens,
       TokenPartition{.rows = ns_rows_, .n_seqs = p_.ns_rows.n, .cumsum = ns_qsl_}, DType::Int64);
  emit(Out::SpecTokenIndx, false, p_.total_tokens - ns_tokens,
       TokenPartition{.rows = sp_rows_, .n_seqs = p_.sp_rows.n, .cumsum = sp_qsl_}, DType::Int64);
}

void Packer::cumsums_and_accepted() {
  const int32_t B = p_.num_reqs;
  const int32_t D = c_.decode_cudagraph_max_bs(kind_);
  const int32_t N = p_.num_spec_decodes;
  if (p_.path != Path::NoSpec) {
    const bool st = p_.stage_spec;
    // Staged: the reference slices [:B + 1] / [:B] of [D + 1] / [D] buffers, also where KDA
    // RecoverSSM stages more than D rows of state indices (N <= D: every spec row has tokens).
    const int32_t rows = st ? std::min(B, D) : N;
    emit(Out::SpecQueryStartLoc, st, rows + 1,
         CopyValues{.src = sp_qsl_, .n_real = N + 1, .add = 0});
    emit(Out::NumAcceptedTokens, st, rows, AcceptedCounts{.rows = sp_rows_, .n_real = N});
    if (p_.recoverssm_commit) view(Out::RecoverSsmQueryStartLoc) = view(Out::SpecQueryStartLoc);
  }
  if (p_.ns_qsl_output) {
    const int32_t ns = p_.ns_qsl.n;
    const bool st = p_.stage_decode && !kda();
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
    emit(Out::ChunkIndices, false, chunks,
         ChunkIndexPairs{.n_nonempty = p_.chunk_nonempty, .starts = starts});
    emit(Out::ChunkOffsets, false, p_.chunk_seqs + 1,
         CopyValues{.src = offsets, .n_real = p_.chunk_seqs + 1, .add = 0}, DType::Int64);
  }
}

/// vllm-0.34 FlashInfer prefill fields (docs/semantics.md R5, K6), int64 as vLLM's.
void Packer::flashinfer_extras() {
  if (p_.fi_checkpoint_plan) {
    const int32_t n = p_.fi_prefill_rows + 1;
    set(Out::FlashInferCheckpointPlan);
    set(Out::FlashInferCheckpointEveryN, p_.fi_every_n);
    set(Out::FlashInferCheckpointCount, p_.fi_cu_starts[static_cast<size_t>(p_.fi_prefill_rows)]);
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
  if (p_.commit_align) {
    emit(Out::RecoverSsmNumComputed, false, p_.num_reqs, ComputedTokens{});
    set(Out::RecoverSsmBlockSize, c_.block_size);
  }
}

/// M3 / L1 / L2: the state indices of the Mamba family and linear attention.
void Packer::mamba_gathers() {
  const int32_t n = p_.num_reqs;
  const int32_t nd = p_.num_decodes, np = p_.num_prefills;
  const int32_t S = p_.spec_state_cols;
  if (is_linear_attention(kind_)) {
    // L2: FULL graphs stage a decode-only step (every row a decode) into persistent
    // buffers, PAD_SLOT_ID on the padding rows (device seq_len 0).
    const bool st = p_.stage_decode;
    const StatePad pad = st ? StatePad::Empty : StatePad::Null;
    emit(Out::StateIndicesTensor, st, n,
         GatherState{.rows = kIdentity, .n_real = n, .n_rows = n, .cols = 1, .pad = pad});
    if (kind_ == BuilderKind::Linear) return;
    emit(Out::StateIndicesTensorP, false, np,
         GatherState{.rows = ns_rows_, .n_real = np, .n_rows = np, .cols = 1, .pad = pad});
    if (p_.mamba_accepted == MambaAccepted::DecodeRows) {  // spec decoding: [decodes, S]
      emit(Out::StateIndicesTensorD, st, nd * S,
           GatherState{.rows = kIdentity, .n_real = nd, .n_rows = nd, .cols = 0, .pad = pad})
          .rows = nd;
    } else if (st) {  // vLLM hands out the staged state_indices_tensor itself
      FieldView& d = view(Out::StateIndicesTensorD);
      d = view(Out::StateIndicesTensor);
      d.column = true;
    } else {  // column 0 of the decode rows, 1-D
      emit(Out::StateIndicesTensorD, false, nd,
           GatherState{.rows = kIdentity, .n_real = nd, .n_rows = nd, .cols = 1, .pad = pad})
          .column = true;
    }
    return;
  }
  // Staged: the persistent [D, S] buffer's first num_reqs rows (= the decode rows: a step
  // with no prefills has only decode rows).
  const int32_t rows = p_.stage_decode ? n : nd;
  emit(Out::StateIndicesTensorD, p_.stage_decode, rows * S,
       GatherState{
           .rows = kIdentity, .n_real = nd, .n_rows = rows, .cols = 0, .pad = StatePad::Null})
      .rows = rows;
  emit(Out::StateIndicesTensorP, false, np,
       GatherState{.rows = ns_rows_, .n_real = np, .n_rows = np, .cols = 1, .pad = StatePad::Null});
}

/// M3–M5: every other field of the Mamba family and linear attention.
void Packer::mamba_fields() {
  const int32_t n = p_.num_reqs;
  const int32_t nd = p_.num_decodes, np = p_.num_prefills;
  input(Out::SeqLens, StepInput::SeqLens, n);
  if (is_linear_attention(kind_)) input(Out::QueryStartLoc, StepInput::QueryStartLoc, n + 1);
  if (kind_ == BuilderKind::Linear) return;
  switch (p_.mamba_accepted) {
    case MambaAccepted::None:
      break;
    case MambaAccepted::Passthrough:  // a capture build's are the query lengths
      if (p_.accepted_from_query_lens)
        emit(Out::NumAcceptedTokens, false, n, AcceptedCounts{.rows = kIdentity, .n_real = n});
      else
        input(Out::NumAcceptedTokens, StepInput::Accepted, n);
      break;
    case MambaAccepted::DecodeRows:
      emit(Out::NumAcceptedTokens, p_.stage_decode, p_.stage_decode ? n : nd,
           AcceptedCounts{.rows = kIdentity, .n_real = nd});
      // L2: Bailing stages query_start_loc_d too (its staged steps have only decode rows).
      emit(Out::QueryStartLocD, p_.stage_decode && kind_ == BuilderKind::BailingLinear, nd + 1,
           CopyValues{.src = qsl_, .n_real = nd + 1, .add = 0});
      break;
  }
  if (kind_ == BuilderKind::BailingLinear) return;
  if (np > 0) {
    emit(Out::HasInitialStatesP, false, np, InitialState{.rows = ns_rows_}, DType::Bool);
    emit(Out::QueryStartLocP, false, np + 1,
         CopyValues{.src = qsl_ + nd, .n_real = np + 1, .add = -p_.num_decode_tokens});
  }
  if (kind_ != BuilderKind::Mamba2) return;
  set(Out::PrepInitialStates, p_.prep_initial_states ? 1 : 0);
  set(Out::ChunkSize, c_.chunk_size);
  if (!p_.mamba_chunks) return;
  const int32_t chunks = p_.num_chunks;
  emit(Out::CuChunkSeqlenP, false, chunks + 1,
       CopyValues{.src = put(p_.cu_chunk.data(), chunks + 1), .n_real = chunks + 1, .add = 0});
  emit(Out::SeqIdxP, false, chunks,
       CopyValues{.src = put(p_.seq_idx.data(), chunks), .n_real = chunks, .add = 0});
  emit(Out::LastChunkIndicesP, false, np,
       CopyValues{.src = put(p_.last_chunk.data(), np), .n_real = np, .add = 0});
  if (p_.checkpoint_chunks)
    emit(Out::CheckpointChunkIdx, false, np,
         CopyValues{.src = put(p_.ckpt_chunk.data(), np), .n_real = np, .add = 0}, DType::Int64);
}

/// P2 / P3: PLE ShortConv's state indices. Without drafting rows the base builder's
/// (M3) and column 0 of every row; else column 0 of the spec rows (1-D, staged on a
/// spec-only step) and of the non-spec rows, whose decode and prefill parts are arrays of
/// their own (vLLM's are distinct tensors).
void Packer::ple_gathers() {
  const int32_t n = p_.num_reqs;
  const int32_t nd = p_.num_decodes, np = p_.num_prefills, N = p_.num_spec_decodes;
  auto column0 = [](int32_t rows, int32_t real, int32_t count) {
    return GatherState{
        .rows = rows, .n_real = real, .n_rows = count, .cols = 1, .pad = StatePad::Null};
  };
  if (p_.path == Path::NoSpec) {
    mamba_gathers();
    // vLLM's is column 0 of the decode then the prefill state indices: of every row (a
    // staged step has only decode rows).
    emit(Out::StateIndicesTensor, false, n, column0(kIdentity, n, n));
    return;
  }
  const int32_t rows = p_.stage_spec ? n : N;
  emit(Out::SpecStateIndices, p_.stage_spec, rows, column0(sp_rows_, N, rows)).column = true;
  if (p_.path == Path::PureSpec) {
    emit(Out::StateIndicesTensor, false, 0, column0(kIdentity, 0, 0));
    return;
  }
  emit(Out::StateIndicesTensor, false, nd + np, column0(ns_rows_, nd + np, nd + np));
  emit(Out::StateIndicesTensorD, false, nd, column0(ns_rows_, nd, nd)).column = true;
  emit(Out::StateIndicesTensorP, false, np, column0(ns_rows_ + nd, np, np));
}

/// P1–P3: every other field of PLE ShortConv.
void Packer::ple_fields() {
  const int32_t n = p_.num_reqs;
  const int32_t nd = p_.num_decodes, np = p_.num_prefills, N = p_.num_spec_decodes;
  set(Out::SpecQueryLen, c_.num_spec + 1);
  set(Out::MaxPrefillQueryLen, p_.max_prefill_query_len);
  input(Out::QueryStartLoc, StepInput::QueryStartLoc, n + 1);
  if (p_.drafts_given)
    input(Out::NumDecodeDraftTokensCpu, StepInput::Drafts, n);
  else if (p_.capture && c_.num_spec > 0)
    host(Out::NumDecodeDraftTokensCpu, p_.capture_drafts, n);
  if (p_.path == Path::NoSpec) {
    mamba_fields();
    input(Out::NonSpecQueryStartLoc, StepInput::QueryStartLoc, n + 1);
    if (nd > 0)
      emit(Out::HasInitialStatesD, p_.stage_decode, nd, InitialState{.rows = kIdentity},
           DType::Bool);
    return;
  }
  input(Out::SeqLens, StepInput::SeqLens, n);
  const bool st = p_.stage_spec;
  const int32_t rows = st ? n : N;
  emit(Out::SpecSequenceMasks, st, n, CopyMask{.src = mask_, .n_real = n}, DType::Bool);
  emit(Out::SpecQueryStartLoc, st, rows + 1, CopyValues{.src = sp_qsl_, .n_real = N + 1, .add = 0});
  emit(Out::NumAcceptedTokens, st, rows, AcceptedCounts{.rows = sp_rows_, .n_real = N});
  if (p_.path == Path::PureSpec) return;
  const int32_t ns = nd + np;
  emit(Out::NonSpecQueryStartLoc, false, ns + 1,
       CopyValues{.src = ns_qsl_, .n_real = ns + 1, .add = 0});
  token_partition();
  if (nd > 0) {
    emit(Out::HasInitialStatesD, false, nd, InitialState{.rows = ns_rows_}, DType::Bool);
    emit(Out::QueryStartLocD, false, nd + 1,
         CopyValues{.src = ns_qsl_, .n_real = nd + 1, .add = 0});
  }
  if (np > 0) {
    emit(Out::HasInitialStatesP, false, np, InitialState{.rows = ns_rows_ + nd}, DType::Bool);
    emit(Out::QueryStartLocP, false, np + 1,
         CopyValues{.src = ns_qsl_ + nd, .n_real = np + 1, .add = -nd});
  }
}

/// vLLM's causal-conv1d metadata (SPEC §6): the padded program arrays on the target, the
/// per-sequence counts and the program lists in the plan's host memory.
void Packer::conv1d() {
  if (!p_.conv) return;
  const int32_t seqs = p_.conv_seqs;
  const int32_t tot = p_.conv_offsets[static_cast<size_t>(seqs)];
  const int32_t offsets = put(p_.conv_offsets.data(), seqs + 1);
  // vLLM's arrays hold MAX_NUM_PROGRAMS = 2 * max(1024, tot) entries, PAD_SLOT_ID past tot.
  const int32_t len = 2 * std::max(1024, tot);
  emit(Out::BatchPtr, false, len, ConvPrograms{.n_seqs = seqs, .offsets = offsets, .chunk = 0});
  emit(Out::TokenChunkOffsetPtr, false, len,
       ConvPrograms{.n_seqs = seqs, .offsets = offsets, .chunk = 1});
  set(Out::NumsDict);
  host(Out::NumsDictNums, p_.conv_nums, seqs);
  set(Out::NumsDictTot, tot);
  host(Out::NumsDictMlist, p_.conv_mlist, tot);
  set(Out::NumsDictMlistLen, tot);
  host(Out::NumsDictOffsetlist, p_.conv_offsetlist, tot);
  view(Out::NumsDictBatchPtr) = view(Out::BatchPtr);
  view(Out::NumsDictTokenChunkOffsetPtr) = view(Out::TokenChunkOffsetPtr);
}

void Packer::checkpoint_gather(const CheckpointRows& rows, int32_t cols) {
  emit(rows.state_indices, false, p_.checkpoint.rows.n,
       CheckpointGather{.rows = put_rows(p_.checkpoint.rows), .cols = cols});
}

/// Prefill checkpoints (SPEC §8, R5, K4, M4) over the checkpoint rows.
void Packer::checkpoints(const CheckpointRows& rows) {
  const CheckpointPlan& cp = p_.checkpoint;
  if (!cp.present) return;
  const int32_t n = cp.rows.n;
  set(rows.parent);
  const int32_t offsets = put(cp.offsets.data(), n);
  const int32_t cols = put(cp.cols.data(), n);
  emit(rows.offsets, false, n, CopyValues{.src = offsets, .n_real = n, .add = 0});
  checkpoint_gather(rows, cols);
  host(rows.host_offsets, cp.offsets, n);
  host(rows.query_lens, cp.query_lens, n);
  emit(rows.request_rows, false, n,
       CopyValues{.src = put_row_values(cp.rows), .n_real = n, .add = 0}, DType::Int64);
  emit(rows.block_cols, false, n, CopyValues{.src = cols, .n_real = n, .add = 0}, DType::Int64);
}

/// The one rule of where accepted counts come from (validate.cpp: reads_accepted; M3).
AcceptedFrom Packer::accepted_from() const {
  if (kda() && c_.use_recoverssm) return AcceptedFrom::Ones;
  if (p_.capture || p_.accepted_from_query_lens) return AcceptedFrom::QueryLens;
  return AcceptedFrom::Input;
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
  h.accepted_from = accepted_from();
  out_.arena_words = static_cast<int32_t>(words_);
}

/// A plan with every array of the packer at its largest (for count mode).
StepPlan largest_plan(const Config& c, BuilderKind kind, PlanStorage& storage) {
  StepPlan p(storage);
  const int32_t R = c.max_num_seqs;
  p.num_reqs = R;
  p.num_decodes = p.num_prefills = R;
  p.path = is_gdn_family(kind) || kind == BuilderKind::PleShortConv ? Path::Mixed : Path::NoSpec;
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
  p.checkpoint.present = true;
  p.checkpoint.rows = p.ns_rows;
  p.fi_checkpoint_plan = p.fi_prefill_qsl = p.fi_seq_order = true;
  p.fi_prefill_rows = R;
  if (kind == BuilderKind::Kda) p.request_indices = p.commit_align = p.recoverssm_commit = true;
  p.mamba_accepted = MambaAccepted::DecodeRows;
  p.mamba_chunks = p.checkpoint_chunks = kind == BuilderKind::Mamba2;
  p.num_chunks = static_cast<int32_t>(p.seq_idx.size());
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
  PlanStorage storage(c, kind);
  const StepPlan plan = largest_plan(c, kind, storage);
  const BufferLayout layout = BufferLayout::of(Capacity::of(c, kind), kind, c.full_cuda_graph, 1);
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

namespace {

Array array_of(const OutputSpec& spec, const FieldView& f, const BufferLayout& l, const char* base,
               int32_t group, const StepArrays& in, const Config& c, const StepPlan& p) {
  Array a;
  if (!f.present) return a;
  a.dtype = f.dtype;
  a.rows = f.rows;
  a.present = true;
  a.ndim = (spec.shape == Shape::Pairs || spec.shape == Shape::Slots) && !f.column ? 2 : 1;
  a.cols = spec.shape == Shape::Pairs                ? 2
           : spec.shape == Shape::Slots && !f.column ? spec_columns(c, p, in.table)
                                                     : 1;
  switch (f.source) {
    case Source::Buffer:
      a.data = base + l.at(f.buf, group) + f.offset * a.cols * dtype_size(f.dtype);
      break;
    case Source::Plan:
      a.data = f.host;
      break;
    case Source::Input:
      a.data = f.input == StepInput::SeqLens    ? in.seq_lens
               : f.input == StepInput::Accepted ? in.accepted
               : f.input == StepInput::Drafts   ? in.drafts
                                                : in.query_start_loc;
      break;
  }
  return a;
}

}  // namespace

void materialize(Metadata& m, BuilderKind kind, const StepPlan& p, const StepViews& views,
                 const BufferLayout& l, const char* base, int32_t group, const StepArrays& in,
                 const Config& c, Rows which) {
  for (const OutputSpec& spec : kOutputs) {
    if (!spec.is_output() || !spec.has(kind)) continue;
    if (which == Rows::GroupScoped && spec.scope != Scope::Group) continue;
    const FieldRef r = spec.field(m);  // after its parent's row: null when that is absent
    if (!r) continue;
    const FieldView& f = views[static_cast<size_t>(spec.id)];
    switch (r.type) {
      case FieldType::Count:
        r.count() = static_cast<int32_t>(f.value);
        break;
      case FieldType::OptionalInt:
        r.optional_int() =
            f.present ? std::optional<int32_t>(static_cast<int32_t>(f.value)) : std::nullopt;
        break;
      case FieldType::Flag:
        r.flag() = f.value != 0;
        break;
      case FieldType::Composite:
        r.composite_set(r.ptr, f.present);
        break;
      case FieldType::Table:
        r.table() = f.present ? in.table : BlockTable{};
        break;
      case FieldType::Array:
        r.array() = array_of(spec, f, l, base, group, in, c, p);
        break;
    }
  }
}

}  // namespace linmeta::detail
