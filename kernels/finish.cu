// The finish kernels: block b runs the job whose block range holds b. All logic
// is in finish_job.cuh; this file only maps threads to elements and launches.
//
// Small step arenas travel inside the kernel parameters (sm_70+ and CUDA 12.1+
// allow 32 KiB of them): the launch itself uploads the step, with no copy-engine
// transfer and no cross-engine wait, and a captured graph keeps the step in its
// kernel node. Larger arenas are copied to device memory first.
#include <cstring>
#include <string>

#include "finish_launch.hpp"
#include "linmeta/error.hpp"

namespace linmeta::detail {

namespace {

template <int32_t Words>
struct alignas(16) InlineArena {
  int32_t words[Words];
};

// Arena sizes with a kernel each; the launch sends the smallest that fits (the
// launch's host cost grows with the parameter bytes).
constexpr int32_t kInlineTiers[] = {64,   128,  192,  256,  384,  512,  768,
                                    1024, 1536, 2048, 3072, 4096, 6144, 8064};
constexpr int32_t kNumTiers = sizeof(kInlineTiers) / sizeof(kInlineTiers[0]);
static_assert(sizeof(LaunchHeader) + sizeof(int32_t) * kInlineTiers[kNumTiers - 1] <= 32764,
              "kernel parameters are limited to 32764 bytes");

/// PDL: the preceding kernel in the stream may still run; wait for it before
/// reading its outputs (seq_lens, accepted counts, block tables) or writing buffers
/// it may read. A no-op when the launch was not programmatic.
__device__ __forceinline__ void wait_on_dependency(const LaunchHeader& h) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (h.wait_on_dependency) asm volatile("griddepcontrol.wait;" ::: "memory");
#else
  static_cast<void>(h);
#endif
}

__global__ void __launch_bounds__(kFinishThreads)
    finish_kernel(const __grid_constant__ LaunchHeader h) {
  wait_on_dependency(h);
  run_block_element(h, h.arena, static_cast<int32_t>(blockIdx.x),
                    static_cast<int32_t>(threadIdx.x));
}

template <int32_t Words>
__global__ void __launch_bounds__(kFinishThreads)
    finish_inline_kernel(const __grid_constant__ LaunchHeader h,
                         const __grid_constant__ InlineArena<Words> a) {
  wait_on_dependency(h);
  run_block_element(h, a.words, static_cast<int32_t>(blockIdx.x),
                    static_cast<int32_t>(threadIdx.x));
}

template <class... Params, class... Args>
void launch(void (*kernel)(Params...), const LaunchHeader& h, bool pdl, cudaStream_t stream,
            const char* what, const Args&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(h.num_blocks));
  config.blockDim = dim3(kFinishThreads);
  config.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  if (pdl) {
    config.attrs = &attr;
    config.numAttrs = 1;
  }
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, args...);
  if (err != cudaSuccess)
    throw Error(std::string("linmeta: ") + what + " launch failed: " + cudaGetErrorString(err));
}

template <int32_t Words>
int32_t launch_tier(const LaunchHeader& h, const int32_t* arena, int32_t words, bool pdl,
                    cudaStream_t stream) {
  InlineArena<Words> a;
  std::memcpy(a.words, arena, sizeof(int32_t) * static_cast<size_t>(words));
  std::memset(a.words + words, 0, sizeof(int32_t) * static_cast<size_t>(Words - words));
  launch(finish_inline_kernel<Words>, h, pdl, stream, "finish kernel (inline arena)", h, a);
  return static_cast<int32_t>(sizeof(LaunchHeader) + sizeof(a));
}

/// Launches the first tier (from `Tier` on) that holds `words`.
template <int32_t Tier = 0>
int32_t launch_smallest_tier(const LaunchHeader& h, const int32_t* arena, int32_t words, bool pdl,
                             cudaStream_t stream) {
  if constexpr (Tier == kNumTiers) {
    throw Error("linmeta: internal error: arena too large for the kernel parameters");
  } else {
    if (words <= kInlineTiers[Tier])
      return launch_tier<kInlineTiers[Tier]>(h, arena, words, pdl, stream);
    return launch_smallest_tier<Tier + 1>(h, arena, words, pdl, stream);
  }
}

}  // namespace

int32_t max_inline_arena_words() { return kInlineTiers[kNumTiers - 1]; }

cudaFuncAttributes finish_kernel_attributes() {
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, finish_kernel);
  if (err != cudaSuccess)
    throw Error(std::string("linmeta: cudaFuncGetAttributes(finish kernel) failed: ") +
                cudaGetErrorString(err));
  return attr;
}

bool programmatic_launch_waits(int device) {
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  // No early launch before sm_90; on sm_90+ the code that runs must have the wait.
  return major >= 9 && finish_kernel_attributes().ptxVersion >= 90;
}

int32_t launch_finish_inline(const LaunchHeader& h, const int32_t* arena, int32_t words, bool pdl,
                             cudaStream_t stream) {
  if (h.num_blocks == 0) return 0;
  return launch_smallest_tier(h, arena, words, pdl, stream);
}

int32_t launch_finish(const LaunchHeader& h, bool pdl, cudaStream_t stream) {
  if (h.num_blocks == 0) return 0;
  launch(finish_kernel, h, pdl, stream, "finish kernel", h);
  return static_cast<int32_t>(sizeof(LaunchHeader));
}

}  // namespace linmeta::detail
