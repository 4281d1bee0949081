// The finish kernel: block b runs the job whose block range holds b. All logic
// is in finish_job.cuh; this file only maps threads to elements and launches.
#include <string>

#include "finish_launch.hpp"
#include "linmeta/error.hpp"

namespace linmeta::detail {

static_assert(sizeof(FinishParams) <= 4096, "FinishParams must fit the classic kernel parameter limit");

__global__ void __launch_bounds__(kFinishThreads) finish_kernel(const __grid_constant__ FinishParams p) {
  const int32_t b = static_cast<int32_t>(blockIdx.x);
  int32_t j = 0;
  while (j + 1 < p.num_jobs && p.job_block_start[j + 1] <= b) ++j;
  const Job& job = p.jobs[j];
  const int32_t per_group = (job.count + kFinishThreads - 1) / kFinishThreads;
  const int32_t local = b - p.job_block_start[j];
  const int32_t group = job.per_group ? p.group_begin + local / per_group : 0;
  const int32_t e = (local % per_group) * kFinishThreads + static_cast<int32_t>(threadIdx.x);
  if (e < job.count) run_element(p, job, group, e);
}

void launch_finish(const FinishParams& params, cudaStream_t stream) {
  if (params.num_blocks == 0) return;
  finish_kernel<<<params.num_blocks, kFinishThreads, 0, stream>>>(params);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw Error(std::string("linmeta: finish kernel launch failed: ") + cudaGetErrorString(err));
}

}  // namespace linmeta::detail
