#include "pack.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "capacity.hpp"
#include "kinds/kind_rules.hpp"
#include "linmeta/error.hpp"
#include "packer.hpp"

namespace linmeta::detail {

namespace {

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

}  // namespace

void Packer::run(PackMode mode, std::span<const TableRef> tables, int32_t group_begin,
                 int32_t group_count) {
  num_groups_ = group_count;
  out_.views = StepViews{};
  const KindRules& rules = kind_rules(kind);
  const int32_t n = p.num_reqs;
  qsl_at = put(p.qsl.data(), n + 1);
  ns_rows_at = put_rows(p.ns_rows);
  sp_rows_at = p.path != Path::NoSpec ? put_rows(p.sp_rows) : kIdentity;
  rules.pack_gathers(*this);
  if (mode == PackMode::GathersOnly) {
    if (p.checkpoint.present)
      checkpoint_gather(
          rules.checkpoint_meta ? Out::CheckpointMetaStateIndices : Out::CheckpointStateIndices,
          put(p.checkpoint.cols.data(), p.checkpoint.rows.n));
  } else {
    counts();
    if (p.path != Path::NoSpec) mask_at = put(p.mask.data(), n);
    if (p.ns_qsl.present) ns_qsl_at = put_cumsum(p.ns_qsl);
    if (p.sp_qsl.present) sp_qsl_at = put_cumsum(p.sp_qsl);
    rules.pack_fields(*this);
    conv1d();
    checkpoints(rules.checkpoint_meta);
    // What update_block_table re-gathers from, instead of the caller's seq_lens.
    if (regather_reads_seq_lens(c, kind)) emit(Out::KeptSeqLens, false, n, KeepSeqLens{});
  }
  finish(tables, group_begin);
}

void Packer::counts() {
  set(Out::NumPrefills, p.num_prefills);
  set(Out::NumPrefillTokens, p.num_prefill_tokens);
  set(Out::NumDecodes, p.num_decodes);
  set(Out::NumDecodeTokens, p.num_decode_tokens);
  set(Out::NumSpecDecodes, p.num_spec_decodes);
  set(Out::NumSpecDecodeTokens, p.num_spec_decode_tokens);
  set(Out::NumActualTokens, p.num_actual_tokens);
  set(Out::NumReqs, p.num_reqs);
  if (p.gdn.uniform_spec_len >= 0) set(Out::UniformSpecSequenceLength, p.gdn.uniform_spec_len);
  if (p.gdn.spec_token_start >= 0) set(Out::SpecTokenStart, p.gdn.spec_token_start);
  if (p.gdn.non_spec_token_start >= 0) set(Out::NonSpecTokenStart, p.gdn.non_spec_token_start);
}

/// The token ids of the non-spec rows and of the spec rows, each in their rows' order:
/// int64, as the reference's stable argsort.
void Packer::token_partition() {
  const int32_t ns_tokens = p.ns_qsl.v[static_cast<size_t>(p.ns_qsl.n)];
  emit(Out::NonSpecTokenIndx, false, ns_tokens,
       TokenPartition{.rows = ns_rows_at, .n_seqs = p.ns_rows.n, .cumsum = ns_qsl_at},
       DType::Int64);
  emit(Out::SpecTokenIndx, false, p.total_tokens - ns_tokens,
       TokenPartition{.rows = sp_rows_at, .n_seqs = p.sp_rows.n, .cumsum = sp_qsl_at},
       DType::Int64);
}

/// vLLM's causal-conv1d metadata (SPEC §6): the padded program arrays on the target, the
/// per-sequence counts and the program lists in the plan's host memory.
void Packer::conv1d() {
  if (!p.conv) return;
  const int32_t seqs = p.conv_seqs;
  const int32_t tot = p.conv_offsets[static_cast<size_t>(seqs)];
  const int32_t offsets = put(p.conv_offsets.data(), seqs + 1);
  // vLLM's arrays hold MAX_NUM_PROGRAMS = 2 * max(1024, tot) entries, PAD_SLOT_ID past tot.
  const int32_t len = 2 * std::max(1024, tot);
  emit(Out::BatchPtr, false, len, ConvPrograms{.n_seqs = seqs, .offsets = offsets, .chunk = 0});
  emit(Out::TokenChunkOffsetPtr, false, len,
       ConvPrograms{.n_seqs = seqs, .offsets = offsets, .chunk = 1});
  set(Out::NumsDict);
  host(Out::NumsDictNums, p.conv_nums, seqs);
  set(Out::NumsDictTot, tot);
  host(Out::NumsDictMlist, p.conv_mlist, tot);
  set(Out::NumsDictMlistLen, tot);
  host(Out::NumsDictOffsetlist, p.conv_offsetlist, tot);
  view(Out::NumsDictBatchPtr) = view(Out::BatchPtr);
  view(Out::NumsDictTokenChunkOffsetPtr) = view(Out::TokenChunkOffsetPtr);
}

void Packer::checkpoint_gather(Out state_indices, int32_t cols) {
  emit(state_indices, false, p.checkpoint.rows.n,
       CheckpointGather{.rows = put_rows(p.checkpoint.rows), .cols = cols});
}

/// Prefill checkpoints (SPEC §8, R5, K4, M4) over the checkpoint rows.
void Packer::checkpoints(bool meta) {
  const CheckpointPlan& cp = p.checkpoint;
  if (!cp.present) return;
  const CheckpointRows& rows = meta ? kCheckpointMeta : kCheckpoint;
  const int32_t n = cp.rows.n;
  set(rows.parent);
  const int32_t offsets = put(cp.offsets.data(), n);
  const int32_t cols = put(cp.cols.data(), n);
  emit(rows.offsets, false, n, CopyValues{.src = offsets, .n_real = n, .add = 0});
  checkpoint_gather(rows.state_indices, cols);
  host(rows.host_offsets, cp.offsets, n);
  host(rows.query_lens, cp.query_lens, n);
  emit(rows.request_rows, false, n,
       CopyValues{.src = put_row_values(cp.rows), .n_real = n, .add = 0}, DType::Int64);
  emit(rows.block_cols, false, n, CopyValues{.src = cols, .n_real = n, .add = 0}, DType::Int64);
}

/// The one rule of where accepted counts come from (validate.cpp: reads_accepted; M3).
AcceptedFrom Packer::accepted_from() const {
  if (recoverssm_on(c, kind_rules(kind))) return AcceptedFrom::Ones;
  if (p.capture || p.mamba.accepted_from_query_lens) return AcceptedFrom::QueryLens;
  return AcceptedFrom::Input;
}

/// Block ranges, jobs and table references after the data; the header points at them.
void Packer::finish(std::span<const TableRef> tables, int32_t group_begin) {
  LaunchHeader& h = out_.header;
  h.num_jobs = num_jobs_;
  h.group_stride = l_.group_bytes;
  h.group_begin = group_begin;
  h.group_count = num_groups_;
  h.qsl_at = qsl_at;
  h.blocks_at = reserve(num_jobs_ + 1, [&](int32_t* starts) {
    int32_t blocks = 0;
    for (int32_t j = 0; j < num_jobs_; ++j) {
      starts[j] = blocks;
      const Job& job = jobs_[static_cast<size_t>(j)];
      const int32_t per = (job.count + kFinishThreads - 1) / kFinishThreads;
      blocks += per * (job.per_group == 1 ? h.group_count : 1);
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
  h.align = c.mamba_cache_mode == CacheMode::Align ? 1 : 0;
  h.block_size = c.block_size;
  h.accepted_from = accepted_from();
  out_.arena_words = static_cast<int32_t>(words_);
}

namespace {

/// A plan with every array of the packer at its largest (for count mode).
StepPlan largest_plan(const Config& c, BuilderKind kind, PlanStorage& storage) {
  const KindRules& rules = kind_rules(kind);
  StepPlan p(storage);
  const int32_t R = c.max_num_seqs;
  p.num_reqs = R;
  p.num_decodes = p.num_prefills = R;
  p.path = rules.spec_path ? Path::Mixed : Path::NoSpec;
  p.tokens = StepPlan::Tokens::Partition;
  p.gdn.mask_output = p.ns_state = p.ns_qsl_output = true;
  for (RowList* rows : {&p.ns_rows, &p.sp_rows}) {
    rows->n = R;
    rows->identity = false;
  }
  for (Cumsum* cs : {&p.ns_qsl, &p.sp_qsl}) {
    cs->n = R;
    cs->present = true;
    cs->is_qsl = false;
  }
  p.has_initial_state = p.conv = p.gdn.prefill_fields = p.gdn.chunks = true;
  p.gdn.peel_rows = 1;
  p.conv_seqs = p.gdn.chunk_seqs = p.gdn.chunk_nonempty = R;
  p.checkpoint.present = true;
  p.checkpoint.rows = p.ns_rows;
  p.gdn.fi_checkpoint_plan = p.gdn.fi_prefill_qsl = p.gdn.fi_seq_order = true;
  p.gdn.fi_prefill_rows = R;
  p.mamba.accepted = MambaAccepted::DecodeRows;
  p.spec_state_cols = Capacity::of(c, kind).spec_cols;
  if (rules.largest != nullptr) rules.largest(p);
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
  if (f.cols > 0) {  // a 2-D array of a kind's own width
    a.ndim = 2;
    a.cols = f.cols;
  }
  switch (f.source) {
    case Source::Buffer:
      a.data = base + l.at(f.buf, group) + f.offset * a.cols * dtype_size(f.dtype);
      break;
    case Source::Plan:
      a.data = f.host;
      break;
    case Source::External:
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
