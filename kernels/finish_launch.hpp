// Launchers of the finish kernel (kernels/finish.cu).
#pragma once

#include <cuda_runtime_api.h>

#include "finish_job.cuh"

namespace linmeta::detail {

/// Largest step arena (int32 words) that travels inside the kernel parameters.
int32_t max_inline_arena_words();

/// One launch whose parameters carry the arena itself (words <= max_inline_arena_words()):
/// no copy, nothing for the host to keep alive after the call.
void launch_finish_inline(const FinishParams& params, const int32_t* arena, int32_t words,
                          cudaStream_t stream);

/// One launch reading the arena from device memory (params.arena), after a copy.
void launch_finish(const FinishParams& params, cudaStream_t stream);

}  // namespace linmeta::detail
