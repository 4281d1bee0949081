// The finish step of a build: a list of jobs, each filling one output array
// element by element. The per-element logic lives here, once, and runs on the
// CPU (host target) and in one kernel launch (cuda target).
#pragma once

#include <cstdint>

#include "hd.cuh"

namespace linmeta::detail {

enum class JobKind : int32_t {
  GatherState,  ///< i32 [src rows, cols]: aligned block-table gather, NULL past n_real rows;
                ///< cols == 0: the group's spec columns (count covers the widest)
  CopyI32,      ///< i32 [count]: arena[src + e] + add; past n_real: arena[src + n_real - 1] + add
  CopyMask,     ///< bool [count]: arena[src + e] != 0; past n_real: false
  Accepted,     ///< i32 [count]: accepted count of row rows[e]; past n_real: 1
  HasInitialState,  ///< bool [count]: num_computed(rows[e]) > 0
  NumComputed,      ///< i32 [count]: num_computed(e) = seq_lens[e] - ql(e)
  Arange,           ///< i32 [count]: e
  TokenPartition,   ///< i32 [count]: token ids of the rows rows[i], in order (cumsum at src2)
  ChunkIndices,     ///< i32 [count, 2]: (sequence, chunk within it); src2: starts of the
                    ///< n_real non-empty sequences (the reference numbers only those)
  ConvBatch,        ///< i32 [count]: sequence of program e; PAD_SLOT_ID past n_real
  ConvChunk,  ///< i32 [count]: 8-token chunk of program e in its sequence; PAD_SLOT_ID past n_real
  CheckpointState,  ///< i32 [count]: raw_block_table[rows[e], arena[src2 + e]] or NULL when col < 0
};

enum class AcceptedFrom : int32_t { Input, QueryLens, Ones };

/// One output array to fill. Arena offsets are in int32 words; `rows < 0` means
/// the identity row list.
struct Job {
  JobKind kind = JobKind::Arange;
  int32_t count = 0;      ///< elements (ChunkIndices: chunks)
  int32_t n_real = 0;     ///< real rows / elements before the fill
  int32_t cols = 1;       ///< GatherState: columns per row
  int32_t rows = -1;      ///< arena offset of the row list, -1 = identity
  int32_t src = 0;        ///< arena offset of the source array
  int32_t src2 = 0;       ///< arena offset of a second array (cumsums, columns)
  int32_t add = 0;        ///< CopyI32: added to every value
  int32_t per_group = 0;  ///< 1: run once per group, into that group's buffers
  int32_t pad = 0;
  int64_t dst = 0;  ///< byte offset of the output in the buffer block
};

/// A group's block table as the finish step reads it.
struct TableRef {
  const int32_t* data = nullptr;
  int64_t row_stride = 0;
  int32_t width = 0;
  int32_t spec_cols = 1;  ///< columns of a spec state row for this table (SPEC §3)
};

inline constexpr int kMaxJobs = 24;
inline constexpr int kMaxGroups = 64;
inline constexpr int kFinishThreads = 256;

/// Everything the finish step reads besides the arena. Passed by value as the
/// kernel parameter (under 4 KiB).
struct FinishParams {
  const int32_t* arena = nullptr;  ///< the step arena in device memory (copy path) or host memory
  const int32_t* seq_lens = nullptr;  ///< device seq_lens [num_reqs]
  const int32_t* accepted = nullptr;  ///< device accepted counts [num_reqs] or null
  char* buffers = nullptr;            ///< base of the builder's output block
  int64_t group_stride = 0;           ///< bytes between two groups' buffers
  int32_t qsl = 0;                    ///< arena offset of the host query_start_loc
  int32_t align = 0;                  ///< cache mode align: gather from the aligned start
  int32_t block_size = 1;
  AcceptedFrom accepted_from = AcceptedFrom::Input;
  int32_t group_begin = 0;
  int32_t group_count = 1;
  int32_t num_jobs = 0;
  int32_t num_blocks = 0;  ///< grid size of the cuda launch
  Job jobs[kMaxJobs];
  int32_t job_block_start[kMaxJobs + 1] = {};
  TableRef tables[kMaxGroups];
};

// ---- per-element logic --------------------------------------------------------

// `a` is the step arena: host memory, device memory, or the kernel's parameter space.

LINMETA_HD inline int32_t query_len(const FinishParams& p, const int32_t* a, int32_t row) {
  return a[p.qsl + row + 1] - a[p.qsl + row];
}

LINMETA_HD inline int32_t row_of(const int32_t* a, const Job& j, int32_t i) {
  return j.rows < 0 ? i : a[j.rows + i];
}

LINMETA_HD inline int32_t num_computed(const FinishParams& p, const int32_t* a, int32_t row) {
  return p.seq_lens[row] - query_len(p, a, row);
}

/// SPEC §3: column `col` of row `row` of the (aligned) state table.
LINMETA_HD inline int32_t gather_state(const FinishParams& p, const TableRef& t, int32_t row,
                                       int32_t col) {
  int32_t start = 0;
  if (p.align) {
    const int32_t s = p.seq_lens[row] - 1;
    // Floor division, clamped at 0 (seq_len 0 gives 0).
    start = s > 0 ? s / p.block_size : 0;
    // Validation bounds the host upper bound; keep a device seq_len that breaks
    // the contract inside the row.
    if (start + col >= t.width) start = t.width - 1 - col;
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

LINMETA_HD inline void run_element(const FinishParams& p, const int32_t* a, const Job& j,
                                   int32_t group, int32_t e) {
  char* base = p.buffers + j.dst + (j.per_group ? group * p.group_stride : 0);
  auto* out = reinterpret_cast<int32_t*>(base);
  auto* out_bool = reinterpret_cast<bool*>(base);
  switch (j.kind) {
    case JobKind::GatherState: {
      const TableRef& t = p.tables[group];
      const int32_t cols = j.cols > 0 ? j.cols : t.spec_cols;
      if (e >= j.src * cols) break;
      const int32_t i = e / cols;
      out[e] = i < j.n_real ? gather_state(p, t, row_of(a, j, i), e % cols) : 0;
      break;
    }
    case JobKind::CopyI32:
      out[e] = a[j.src + (e < j.n_real ? e : j.n_real - 1)] + j.add;
      break;
    case JobKind::CopyMask:
      out_bool[e] = e < j.n_real && a[j.src + e] != 0;
      break;
    case JobKind::Accepted: {
      int32_t v = 1;
      if (e < j.n_real) {
        const int32_t row = row_of(a, j, e);
        if (p.accepted_from == AcceptedFrom::Input)
          v = p.accepted[row];
        else if (p.accepted_from == AcceptedFrom::QueryLens)
          v = query_len(p, a, row);
      }
      out[e] = v;
      break;
    }
    case JobKind::HasInitialState:
      out_bool[e] = num_computed(p, a, row_of(a, j, e)) > 0;
      break;
    case JobKind::NumComputed:
      out[e] = num_computed(p, a, e);
      break;
    case JobKind::Arange:
      out[e] = e;
      break;
    case JobKind::TokenPartition: {
      const int32_t i = owner(a + j.src2, j.n_real, e);
      out[e] = a[p.qsl + row_of(a, j, i)] + (e - a[j.src2 + i]);
      break;
    }
    case JobKind::ChunkIndices: {
      const int32_t i = owner(a + j.src2, j.n_real, e);
      out[2 * e] = i;
      out[2 * e + 1] = e - a[j.src2 + i];
      break;
    }
    case JobKind::ConvBatch:
    case JobKind::ConvChunk: {
      const int32_t tot = a[j.src2 + j.n_real];
      int32_t v = -1;  // PAD_SLOT_ID
      if (e < tot) {
        const int32_t i = owner(a + j.src2, j.n_real, e);
        v = j.kind == JobKind::ConvBatch ? i : e - a[j.src2 + i];
      }
      out[e] = v;
      break;
    }
    case JobKind::CheckpointState: {
      const int32_t col = a[j.src2 + e];
      const TableRef& t = p.tables[group];
      out[e] = col >= 0 ? t.data[row_of(a, j, e) * t.row_stride + col] : 0;
      break;
    }
  }
}

/// Block `b` of a launch: the job whose block range holds b, one element per thread.
LINMETA_HD inline void run_block_element(const FinishParams& p, const int32_t* a, int32_t b,
                                         int32_t thread) {
  int32_t j = 0;
  while (j + 1 < p.num_jobs && p.job_block_start[j + 1] <= b) ++j;
  const Job& job = p.jobs[j];
  const int32_t per_group = (job.count + kFinishThreads - 1) / kFinishThreads;
  const int32_t local = b - p.job_block_start[j];
  const int32_t group = job.per_group ? p.group_begin + local / per_group : 0;
  const int32_t e = (local % per_group) * kFinishThreads + thread;
  if (e < job.count) run_element(p, a, job, group, e);
}

}  // namespace linmeta::detail
