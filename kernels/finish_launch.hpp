// Launchers of the finish kernel (kernels/finish.cu).
#pragma once

#include <cuda_runtime_api.h>

#include "finish_job.cuh"

namespace linmeta::detail {

/// Largest step arena (int32 words) that travels inside the kernel parameters.
int32_t max_inline_arena_words();

/// The finish kernel's attributes on the current device: ptxVersion is the virtual
/// architecture of the code that runs (80 where the driver JIT-compiled the compute_80 PTX),
/// binaryVersion the machine code's.
cudaFuncAttributes finish_kernel_attributes();

/// Whether a programmatic dependent launch of the finish kernel on `device` both may start
/// early and waits for its producer: an sm_90+ GPU running code compiled for sm_90+, which
/// executes griddepcontrol.wait. Not so on a GPU before sm_90 (no early launch there), nor on
/// an sm_90+ GPU running the compute_80 PTX that the driver JIT-compiled (a GPU this build has
/// no machine code for, or CUDA_FORCE_PTX_JIT=1): that code has no wait. Where it is false,
/// the cuda executor launches without the PDL attribute: plain stream order, same results.
bool programmatic_launch_waits(int device);

/// One launch whose parameters carry the header and the arena itself (words <=
/// max_inline_arena_words()): no copy, nothing for the host to keep alive after the
/// call. Returns the launch's parameter bytes. `pdl`: programmatic dependent launch.
int32_t launch_finish_inline(const LaunchHeader& header, const int32_t* arena, int32_t words,
                             bool pdl, cudaStream_t stream);

/// One launch reading the arena from device memory (header.arena), after a copy.
int32_t launch_finish(const LaunchHeader& header, bool pdl, cudaStream_t stream);

}  // namespace linmeta::detail
