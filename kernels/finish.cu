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
// launch's host cost grows with the parameter bytes: ~4.6 us up to ~8 KiB on an
// H200 VM, ~6.4 us at 11 KiB).
constexpr int32_t kInlineTiers[] = {256, 512, 1024, 1280, 1536, 2048, 3072, 4096, 5120, 7168};
constexpr int32_t kNumTiers = sizeof(kInlineTiers) / sizeof(kInlineTiers[0]);
static_assert(sizeof(FinishParams) + sizeof(int32_t) * kInlineTiers[kNumTiers - 1] <= 32764,
              "kernel parameters are limited to 32764 bytes");

__global__ void __launch_bounds__(kFinishThreads)
    finish_kernel(const __grid_constant__ FinishParams p) {
  run_block_element(p, p.arena, static_cast<int32_t>(blockIdx.x),
                    static_cast<int32_t>(threadIdx.x));
}

template <int32_t Words>
__global__ void __launch_bounds__(kFinishThreads)
    finish_inline_kernel(const __grid_constant__ FinishParams p,
                         const __grid_constant__ InlineArena<Words> a) {
  run_block_element(p, a.words, static_cast<int32_t>(blockIdx.x),
                    static_cast<int32_t>(threadIdx.x));
}

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw Error(std::string("linmeta: ") + what + " launch failed: " + cudaGetErrorString(err));
}

template <int32_t Words>
void launch_tier(const FinishParams& p, const int32_t* arena, int32_t words, cudaStream_t stream) {
  InlineArena<Words> a;
  std::memcpy(a.words, arena, sizeof(int32_t) * static_cast<size_t>(words));
  std::memset(a.words + words, 0, sizeof(int32_t) * static_cast<size_t>(Words - words));
  finish_inline_kernel<Words><<<p.num_blocks, kFinishThreads, 0, stream>>>(p, a);
  check_launch("finish kernel (inline arena)");
}

/// Launches the first tier (from `Tier` on) that holds `words`.
template <int32_t Tier = 0>
void launch_smallest_tier(const FinishParams& p, const int32_t* arena, int32_t words,
                          cudaStream_t stream) {
  if constexpr (Tier == kNumTiers) {
    throw Error("linmeta: internal error: arena too large for the kernel parameters");
  } else if (words <= kInlineTiers[Tier]) {
    launch_tier<kInlineTiers[Tier]>(p, arena, words, stream);
  } else {
    launch_smallest_tier<Tier + 1>(p, arena, words, stream);
  }
}

}  // namespace

int32_t max_inline_arena_words() { return kInlineTiers[kNumTiers - 1]; }

void launch_finish_inline(const FinishParams& p, const int32_t* arena, int32_t words,
                          cudaStream_t stream) {
  if (p.num_blocks == 0) return;
  launch_smallest_tier(p, arena, words, stream);
}

void launch_finish(const FinishParams& p, cudaStream_t stream) {
  if (p.num_blocks == 0) return;
  finish_kernel<<<p.num_blocks, kFinishThreads, 0, stream>>>(p);
  check_launch("finish kernel");
}

}  // namespace linmeta::detail
