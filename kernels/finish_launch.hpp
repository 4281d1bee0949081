// Launcher of the finish kernel (kernels/finish.cu).
#pragma once

#include <cuda_runtime_api.h>

#include "finish_job.cuh"

namespace linmeta::detail {

/// One launch of params.num_blocks blocks on `stream`; throws linmeta::Error on failure.
void launch_finish(const FinishParams& params, cudaStream_t stream);

}  // namespace linmeta::detail
