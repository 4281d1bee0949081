// Launchers of the finish kernel (kernels/finish.cu).
#pragma once

#include <cuda_runtime_api.h>

#include "finish_job.cuh"

namespace linmeta::detail {

/// Largest step arena (int32 words) that travels inside the kernel parameters.
int32_t max_inline_arena_words();

/// Throws linmeta::Error when PDL cannot be honoured on `device`: an sm_90+ GPU running a
/// finish kernel compiled for an older architecture (JIT from older PTX), whose code has no
/// griddepcontrol.wait and would read inputs before the producer finished.
void check_pdl_supported(int device);

/// One launch whose parameters carry the header and the arena itself (words <=
/// max_inline_arena_words()): no copy, nothing for the host to keep alive after the
/// call. Returns the launch's parameter bytes. `pdl`: programmatic dependent launch.
int32_t launch_finish_inline(const LaunchHeader& header, const int32_t* arena, int32_t words,
                             bool pdl, cudaStream_t stream);

/// One launch reading the arena from device memory (header.arena), after a copy.
int32_t launch_finish(const LaunchHeader& header, bool pdl, cudaStream_t stream);

}  // namespace linmeta::detail
