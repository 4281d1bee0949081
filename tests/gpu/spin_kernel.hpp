// A one-thread kernel that keeps a stream busy: it spins until the host writes a
// non-zero release flag (mapped pinned memory) or `max_ns` of GPU time pass.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>

namespace linmeta::gputest {

/// state[0] becomes 1 once the kernel runs; state[1] becomes 1 when it ended on
/// the release flag, 2 when it timed out. `release` and `state` are device
/// addresses of mapped host memory (state: 2 ints). Throws on a launch error.
void launch_spin(cudaStream_t stream, const int* release, int* state, long long max_ns);

/// Sets the flag a spin kernel waits on when it goes out of scope (early exits too).
struct Release {
  volatile int* flag;
  ~Release() {
    *flag = 1;
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
};

}  // namespace linmeta::gputest

namespace linmeta::gputest {

/// A producer kernel: after `delay_ns` of GPU time, copies n int32 from `src` to
/// `dst` (device memory). Stands for the sampler writing accepted counts / seq_lens
/// right before a build.
void launch_delayed_copy(cudaStream_t stream, int* dst, const int* src, int n, long long delay_ns);

}  // namespace linmeta::gputest
