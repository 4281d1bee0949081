// The finish step of a build: a list of typed jobs, each filling one output array
// element by element. The per-element logic lives here, once, and runs on the CPU
// (host target) and in one kernel launch (cuda target).
//
// The step arena (int32 words) describes itself: the data arrays the host planned,
// then the block ranges, the job list and the block-table references. The launch
// carries only a LaunchHeader (pointers, counts and offsets) besides the arena.
#pragma once

#include <cstdint>

#include "hd.cuh"
#include "linmeta/array.hpp"

namespace linmeta::detail {

/// Row list offset meaning "rows 0..n-1" (nothing stored).
inline constexpr int32_t kIdentity = -1;

// ---- typed job descriptions (arena offsets in int32 words) ---------------------

/// What a state gather writes for a padding row.
enum class StatePad : int16_t {
  Null,   ///< rows past n_real: NULL_BLOCK_ID (0)
  Empty,  ///< rows past n_real and rows whose device seq_len is 0: PAD_SLOT_ID (-1)
};
/// State indices of n_rows rows: row rows[i] of the (aligned) block table, `cols`
/// columns (0: the group's spec columns); padding rows as `pad` says.
struct GatherState {
  int32_t rows, n_real, n_rows;
  int16_t cols;
  StatePad pad;
};
/// arena[src + e] + add; past n_real the last value (arena[src + n_real - 1] + add).
struct CopyValues {
  int32_t src, n_real, add;
};
/// arena[src + e] != 0; false past n_real.
struct CopyMask {
  int32_t src, n_real;
};
/// Accepted count of row rows[e]; 1 past n_real (source: LaunchHeader::accepted_from).
struct AcceptedCounts {
  int32_t rows, n_real;
};
/// num_computed(rows[e]) > 0.
struct InitialState {
  int32_t rows;
};
/// num_computed(e) = seq_lens[e] - query_len(e).
struct ComputedTokens {};
/// e.
struct Arange {};
/// Token ids of the rows rows[i] in order; cumsum: their cumulative lengths [n_seqs + 1].
struct TokenPartition {
  int32_t rows, n_seqs, cumsum;
};
/// [count, 2]: (sequence, chunk within it) over the n_nonempty sequences whose chunk
/// starts are at `starts` (the reference numbers only non-empty sequences).
struct ChunkIndexPairs {
  int32_t n_nonempty, starts;
};
/// Causal-conv1d programs of the n_seqs sequences (ceil-cumsum at `offsets`):
/// sequence (or 8-token chunk within it) of program e; PAD_SLOT_ID past the total.
struct ConvPrograms {
  int32_t n_seqs, offsets, chunk;
};
/// raw_block_table[rows[e], arena[cols + e]], NULL_BLOCK_ID where the column is < 0.
struct CheckpointGather {
  int32_t rows, cols;
};
/// The request owning token e (largest row r < n_rows with query_start_loc[r] <= e), or with
/// `first` that request's first token, for the n_real real tokens; 0 past them.
struct TokenOwner {
  int32_t n_rows, n_real, first;
};
/// seq_lens[e], kept for update_block_table (which does not read the caller's again).
struct KeepSeqLens {};

/// The device arrays of an SGLang step (linmeta/sglang.hpp), stored in the arena (`refs`
/// is its offset; 8-byte aligned).
struct SglangRefs {
  const int32_t* mamba_map;  ///< request-pool row -> state slot
  int64_t mamba_map_len;
  int64_t* req_pool_indices;
  const int64_t* sources[3];  ///< SglangSource
};
enum class SglangSource : int32_t { TrackIndices, RetrieveNextToken, RetrieveNextSibling };
inline constexpr int32_t kSglangRefsWords = sizeof(SglangRefs) / 4;
/// SGLang's state slot of batch row rows[e] (mamba_map[req_pool_indices[row]]; -1 for a
/// request-pool row outside the map) for e < n_real, -1 (PAD_SLOT_ID) past it.
struct SglangSlots {
  int32_t refs, rows, n_real;
};
/// sources[src][rows[e]] (an int64 device array of the step).
struct SglangCopy {
  int32_t refs, rows, src;
};
/// Side effect, writes no output: req_pool_indices[begin + e] = 0 (graph replay's padded
/// rows).
struct SglangZeroRows {
  int32_t refs, begin;
};

/// The one list of job flavours: X(description, union member). It generates the JobKind
/// enumerators, the JobArgs members, run_element's cases, the packer's encoder
/// (src/pack.cpp) and the host executor's dispatch (src/host_executor.cpp). A new flavour
/// is its description above, its `element` function below and one line here.
#define LINMETA_JOB_KINDS(X)      \
  X(GatherState, gather)          \
  X(CopyValues, copy)             \
  X(CopyMask, mask)               \
  X(AcceptedCounts, accepted)     \
  X(InitialState, initial)        \
  X(ComputedTokens, computed)     \
  X(Arange, arange)               \
  X(TokenPartition, partition)    \
  X(ChunkIndexPairs, chunks)      \
  X(ConvPrograms, conv)           \
  X(CheckpointGather, checkpoint) \
  X(TokenOwner, token_owner)      \
  X(KeepSeqLens, keep)            \
  X(SglangSlots, sgl_slots)       \
  X(SglangCopy, sgl_copy)         \
  X(SglangZeroRows, sgl_zero)

enum class JobKind : int32_t {
#define LINMETA_JOB_ENUM(S, m) S,
  LINMETA_JOB_KINDS(LINMETA_JOB_ENUM)
#undef LINMETA_JOB_ENUM
};

union JobArgs {
#define LINMETA_JOB_MEMBER(S, m) S m;
  LINMETA_JOB_KINDS(LINMETA_JOB_MEMBER)
#undef LINMETA_JOB_MEMBER
  int32_t words[4];
};
static_assert(sizeof(JobArgs) == 16, "four words of arguments per job (docs/gpu.md)");

/// Job::per_group of a job writing caller memory: `dst` is the address itself.
inline constexpr int32_t kExternalDst = 2;

/// One output array to fill: `count` elements of type `dtype` at byte `dst` of the
/// output block (of each group's region when per_group is 1; at address `dst` when it is
/// kExternalDst).
struct Job {
  JobKind kind;
  int32_t count;
  DType dtype;
  int32_t per_group;
  int64_t dst;
  JobArgs args;
};
static_assert(sizeof(Job) == 40 && alignof(Job) == 8, "10 words per job (docs/gpu.md)");
inline constexpr int32_t kJobWords = sizeof(Job) / 4;

/// A group's block table as the finish step reads it.
struct TableRef {
  const int32_t* data;
  int64_t row_stride;
  int32_t width;
  int32_t spec_cols;  ///< columns of a spec state row for this table (SPEC §3)
};
inline constexpr int32_t kTableWords = sizeof(TableRef) / 4;

enum class AcceptedFrom : int32_t { Input, QueryLens, Ones };

inline constexpr int kFinishThreads = 256;

/// The kernel parameters besides the arena (at most 128 bytes).
struct LaunchHeader {
  const int32_t* arena;  ///< the step arena in device memory (copy path), else null
  const int32_t*
      seq_lens;  ///< device seq_lens [num_reqs]: the caller's, or a re-gather's kept copy
  const int32_t* accepted;  ///< device accepted counts [num_reqs] or null
  char* buffers;            ///< base of the builder's output block
  int64_t group_stride;     ///< bytes between two groups' buffers
  int32_t num_jobs;
  int32_t num_blocks;  ///< grid size of the cuda launch
  int32_t blocks_at;   ///< arena offset of the block starts [num_jobs + 1]
  int32_t jobs_at;     ///< arena offset of the jobs (8-byte aligned)
  int32_t tables_at;   ///< arena offset of the TableRefs of groups [group_begin, +count)
  int32_t qsl_at;      ///< arena offset of the host query_start_loc
  int32_t align;       ///< cache mode align: gather from the aligned start
  int32_t block_size;
  AcceptedFrom accepted_from;
  int32_t group_begin;
  int32_t group_count;
  int32_t wait_on_dependency;  ///< PDL: wait for the preceding kernel before any access
};
static_assert(sizeof(LaunchHeader) == 88, "the launch header must stay small (docs/gpu.md)");

// ---- per-element logic ---------------------------------------------------------

// `a` is the step arena: host memory, device memory, or the kernel's parameter space.

LINMETA_HD inline const Job& job_at(const LaunchHeader& h, const int32_t* a, int32_t j) {
  return *reinterpret_cast<const Job*>(a + h.jobs_at + j * kJobWords);
}

LINMETA_HD inline const TableRef& table_of(const LaunchHeader& h, const int32_t* a, int32_t group) {
  return *reinterpret_cast<const TableRef*>(a + h.tables_at +
                                            (group - h.group_begin) * kTableWords);
}

LINMETA_HD inline int32_t query_len(const LaunchHeader& h, const int32_t* a, int32_t row) {
  return a[h.qsl_at + row + 1] - a[h.qsl_at + row];
}

LINMETA_HD inline int32_t row_of(const int32_t* a, int32_t rows, int32_t i) {
  return rows == kIdentity ? i : a[rows + i];
}

/// seq_lens - query_len, in 64 bits (any device value is defined).
LINMETA_HD inline int64_t num_computed(const LaunchHeader& h, const int32_t* a, int32_t row) {
  return static_cast<int64_t>(h.seq_lens[row]) - query_len(h, a, row);
}

/// SPEC §3: first column of the aligned window, floor((seq_len - 1) / block_size),
/// 0 for seq_len <= 1.
LINMETA_HD inline int32_t aligned_start(const LaunchHeader& h, int32_t row) {
  const int64_t s = static_cast<int64_t>(h.seq_lens[row]) - 1;
  return s > 0 ? static_cast<int32_t>(s / h.block_size) : 0;
}

/// Column `col` of a `window`-column state row of row `row` (SPEC §3). A device
/// seq_len beyond the host upper bound (a broken contract) keeps the whole window
/// inside the row: the window ends at the table's last column.
LINMETA_HD inline int32_t gather_state(const LaunchHeader& h, const TableRef& t, int32_t row,
                                       int32_t col, int32_t window) {
  int64_t start = 0;
  if (h.align) {
    start = aligned_start(h, row);
    const int64_t last = static_cast<int64_t>(t.width) - window;
    if (start > last) start = last;
    if (start < 0) start = 0;
  }
  return t.data[row * t.row_stride + start + col];
}

/// Largest i in [0, n) with off[i] <= e (off non-decreasing, off[0] <= e).
LINMETA_HD inline int32_t owner(const int32_t* off, int32_t n, int32_t e) {
  int32_t lo = 0, hi = n - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if (off[mid] <= e)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

LINMETA_HD inline void store(char* base, DType t, int64_t e, int64_t v) {
  switch (t) {
    case DType::Bool:
      reinterpret_cast<bool*>(base)[e] = v != 0;
      break;
    case DType::Int32:
      reinterpret_cast<int32_t*>(base)[e] = static_cast<int32_t>(v);
      break;
    case DType::Int64:
      reinterpret_cast<int64_t*>(base)[e] = v;
      break;
  }
}

/// Where job `j` writes the elements of `group`.
LINMETA_HD inline char* job_base(const LaunchHeader& h, const Job& j, int32_t group) {
  if (j.per_group == kExternalDst)
    return reinterpret_cast<char*>(
        static_cast<uintptr_t>(j.dst));  // NOLINT(performance-no-int-to-ptr)
  return h.buffers + j.dst + (j.per_group == 1 ? group * h.group_stride : 0);
}

/// vLLM's PAD_SLOT_ID.
inline constexpr int32_t kPadSlotId = -1;

/// Causal-conv1d program e of sequence i (off[i] <= e < off[i + 1]): the sequence, or the
/// 8-token chunk within it.
LINMETA_HD inline int32_t conv_program(const ConvPrograms& x, const int32_t* off, int32_t i,
                                       int32_t e) {
  return x.chunk ? e - off[i] : i;
}

// One element e of a job of each flavour (`base`: where the job writes for `group`).

LINMETA_HD inline void element(const GatherState& x, const LaunchHeader& h, const int32_t* a,
                               const Job& j, char* base, int32_t group, int32_t e) {
  const TableRef& t = table_of(h, a, group);
  const int32_t cols = x.cols > 0 ? x.cols : t.spec_cols;
  if (e >= x.n_rows * cols) return;  // a narrower table's spec rows end earlier
  const int32_t i = e / cols;
  const int32_t row = i < x.n_real ? row_of(a, x.rows, i) : -1;
  int64_t v = 0;
  if (x.pad == StatePad::Empty) {
    v = row >= 0 && h.seq_lens[row] != 0 ? gather_state(h, t, row, e % cols, cols) : -1;
  } else {
    v = row >= 0 ? gather_state(h, t, row, e % cols, cols) : 0;
  }
  store(base, j.dtype, e, v);
}
LINMETA_HD inline void element(const CopyValues& x, const LaunchHeader&, const int32_t* a,
                               const Job& j, char* base, int32_t, int32_t e) {
  store(base, j.dtype, e,
        static_cast<int64_t>(a[x.src + (e < x.n_real ? e : x.n_real - 1)]) + x.add);
}
LINMETA_HD inline void element(const CopyMask& x, const LaunchHeader&, const int32_t* a,
                               const Job& j, char* base, int32_t, int32_t e) {
  store(base, j.dtype, e, e < x.n_real && a[x.src + e] != 0);
}
LINMETA_HD inline void element(const AcceptedCounts& x, const LaunchHeader& h, const int32_t* a,
                               const Job& j, char* base, int32_t, int32_t e) {
  int64_t v = 1;
  if (e < x.n_real) {
    const int32_t row = row_of(a, x.rows, e);
    if (h.accepted_from == AcceptedFrom::Input)
      v = h.accepted[row];
    else if (h.accepted_from == AcceptedFrom::QueryLens)
      v = query_len(h, a, row);
  }
  store(base, j.dtype, e, v);
}
LINMETA_HD inline void element(const InitialState& x, const LaunchHeader& h, const int32_t* a,
                               const Job& j, char* base, int32_t, int32_t e) {
  store(base, j.dtype, e, num_computed(h, a, row_of(a, x.rows, e)) > 0);
}
LINMETA_HD inline void element(const ComputedTokens&, const LaunchHeader& h, const int32_t* a,
                               const Job& j, char* base, int32_t, int32_t e) {
  store(base, j.dtype, e, num_computed(h, a, e));  // stored as int32 (wraps like the reference)
}
LINMETA_HD inline void element(const Arange&, const LaunchHeader&, const int32_t*, const Job& j,
                               char* base, int32_t, int32_t e) {
  store(base, j.dtype, e, e);
}
LINMETA_HD inline void element(const TokenPartition& x, const LaunchHeader& h, const int32_t* a,
                               const Job& j, char* base, int32_t, int32_t e) {
  const int32_t i = owner(a + x.cumsum, x.n_seqs, e);
  store(base, j.dtype, e, a[h.qsl_at + row_of(a, x.rows, i)] + (e - a[x.cumsum + i]));
}
LINMETA_HD inline void element(const ChunkIndexPairs& x, const LaunchHeader&, const int32_t* a,
                               const Job& j, char* base, int32_t, int32_t e) {
  const int32_t i = owner(a + x.starts, x.n_nonempty, e);
  store(base, j.dtype, 2 * static_cast<int64_t>(e), i);
  store(base, j.dtype, 2 * static_cast<int64_t>(e) + 1, e - a[x.starts + i]);
}
LINMETA_HD inline void element(const ConvPrograms& x, const LaunchHeader&, const int32_t* a,
                               const Job& j, char* base, int32_t, int32_t e) {
  const int32_t* off = a + x.offsets;
  int64_t v = kPadSlotId;
  if (e < off[x.n_seqs]) v = conv_program(x, off, owner(off, x.n_seqs, e), e);
  store(base, j.dtype, e, v);
}
LINMETA_HD inline void element(const CheckpointGather& x, const LaunchHeader& h, const int32_t* a,
                               const Job& j, char* base, int32_t group, int32_t e) {
  const int32_t col = a[x.cols + e];
  const TableRef& t = table_of(h, a, group);
  store(base, j.dtype, e, col >= 0 ? t.data[row_of(a, x.rows, e) * t.row_stride + col] : 0);
}
LINMETA_HD inline void element(const TokenOwner& x, const LaunchHeader& h, const int32_t* a,
                               const Job& j, char* base, int32_t, int32_t e) {
  int64_t v = 0;
  if (e < x.n_real) {
    const int32_t r = owner(a + h.qsl_at, x.n_rows, e);
    v = x.first ? a[h.qsl_at + r] : r;
  }
  store(base, j.dtype, e, v);
}
LINMETA_HD inline void element(const KeepSeqLens&, const LaunchHeader& h, const int32_t*,
                               const Job& j, char* base, int32_t, int32_t e) {
  store(base, j.dtype, e, h.seq_lens[e]);
}

LINMETA_HD inline const SglangRefs& sglang_refs(const int32_t* a, int32_t at) {
  return *reinterpret_cast<const SglangRefs*>(a + at);
}
LINMETA_HD inline void element(const SglangSlots& x, const LaunchHeader&, const int32_t* a,
                               const Job& j, char* base, int32_t, int32_t e) {
  int64_t v = kPadSlotId;
  if (e < x.n_real) {
    const SglangRefs& r = sglang_refs(a, x.refs);
    const int64_t req = r.req_pool_indices[row_of(a, x.rows, e)];
    if (req >= 0 && req < r.mamba_map_len) v = r.mamba_map[req];
  }
  store(base, j.dtype, e, v);
}
LINMETA_HD inline void element(const SglangCopy& x, const LaunchHeader&, const int32_t* a,
                               const Job& j, char* base, int32_t, int32_t e) {
  store(base, j.dtype, e, sglang_refs(a, x.refs).sources[x.src][row_of(a, x.rows, e)]);
}
LINMETA_HD inline void element(const SglangZeroRows& x, const LaunchHeader&, const int32_t* a,
                               const Job&, char*, int32_t, int32_t e) {
  sglang_refs(a, x.refs).req_pool_indices[x.begin + e] = 0;
}

LINMETA_HD inline void run_element(const LaunchHeader& h, const int32_t* a, const Job& j,
                                   int32_t group, int32_t e) {
  char* base = job_base(h, j, group);
  switch (j.kind) {
#define LINMETA_JOB_CASE(S, m) \
  case JobKind::S:             \
    return element(j.args.m, h, a, j, base, group, e);
    LINMETA_JOB_KINDS(LINMETA_JOB_CASE)
#undef LINMETA_JOB_CASE
  }
}

/// Block `b` of a launch: the job whose block range holds b, one element per thread.
LINMETA_HD inline void run_block_element(const LaunchHeader& h, const int32_t* a, int32_t b,
                                         int32_t thread) {
  const int32_t* starts = a + h.blocks_at;
  int32_t j = 0;
  while (j + 1 < h.num_jobs && starts[j + 1] <= b) ++j;
  const Job& job = job_at(h, a, j);
  const int32_t per_group = (job.count + kFinishThreads - 1) / kFinishThreads;
  const int32_t local = b - starts[j];
  const int32_t group = job.per_group == 1 ? h.group_begin + local / per_group : 0;
  const int32_t e = (local % per_group) * kFinishThreads + thread;
  if (e < job.count) run_element(h, a, job, group, e);
}

}  // namespace linmeta::detail
