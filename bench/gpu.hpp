// The bench's kernels (compiled by nvcc as C++17). Every launch is checked with the tools'
// cuda_check (linmeta::Error on failure).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda_check.hpp"

namespace linmeta::bench {

using tools::cuda_check;

/// `blocks` x 128 threads spin until *open != 0 (when `open` is given) or for `ns` nanoseconds
/// of GPU time; a timeout sets *timed_out (when given). One thread on a flag in mapped pinned
/// memory is the stream gate; every SM without a flag keeps the device busy.
void launch_spin(cudaStream_t stream, const int32_t* open, int32_t* timed_out, uint64_t ns,
                 int blocks);
/// One launch of an empty kernel (1 block of 1 thread).
void launch_empty_kernel(cudaStream_t stream);

/// The gather floor (docs/bench.md): one thread per row r, group g and slot s reads seq_lens[r]
/// and writes entry min((seq_len - 1) / block_size + s, width - 1) of row r of table g to
/// out[(g * rows + r) * slots + s]: a build's dependent loads seq_lens -> block table -> state
/// index, and nothing else.
struct GatherArgs {
  static constexpr int32_t kMaxGroups = 64;  ///< = linmeta::kMaxNumGroups
  const int32_t* seq_lens = nullptr;
  const int32_t* tables[kMaxGroups] = {};
  int32_t* out = nullptr;
  int64_t row_stride = 0;
  int32_t rows = 0, slots = 1, groups = 1, width = 1, block_size = 1;
};
void launch_gather(cudaStream_t stream, const GatherArgs& args);

/// An engine's input preparation: copies n_seq seq_lens and n_acc accepted counts from `src_*`
/// into the step's arrays right before a build reads them; on sm_90 it lets a PDL launch start
/// early (griddepcontrol.launch_dependents), whose griddepcontrol.wait orders the reads.
void launch_step_producer(cudaStream_t stream, const int32_t* src_seq_lens, int32_t* seq_lens,
                          const int32_t* src_accepted, int32_t* accepted, int32_t n_seq,
                          int32_t n_acc);

}  // namespace linmeta::bench
