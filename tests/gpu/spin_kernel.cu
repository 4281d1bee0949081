#include <stdexcept>
#include <string>

#include "spin_kernel.hpp"

namespace linmeta::gputest {

namespace {

__device__ unsigned long long global_ns() {
  unsigned long long t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_kernel(const volatile int* release, volatile int* state, long long max_ns) {
  const unsigned long long start = global_ns();
  state[0] = 1;
  __threadfence_system();
  unsigned long long now = start;
  while (release[0] == 0 && static_cast<long long>(now - start) < max_ns) {
    __nanosleep(20000);
    now = global_ns();
  }
  state[1] = release[0] != 0 ? 1 : 2;
  __threadfence_system();
}

__global__ void delayed_copy_kernel(int* dst, const int* src, int n, long long delay_ns) {
  if (threadIdx.x == 0) {
    const unsigned long long start = global_ns();
    while (static_cast<long long>(global_ns() - start) < delay_ns) __nanosleep(5000);
  }
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x))
    dst[i] = src[i];
}

}  // namespace

void launch_delayed_copy(cudaStream_t stream, int* dst, const int* src, int n, long long delay_ns) {
  delayed_copy_kernel<<<1, 256, 0, stream>>>(dst, src, n, delay_ns);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("delayed copy launch: ") + cudaGetErrorString(e));
}

void launch_spin(cudaStream_t stream, const int* release, int* state, long long max_ns) {
  spin_kernel<<<1, 1, 0, stream>>>(release, state, max_ns);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("spin kernel launch: ") + cudaGetErrorString(e));
}

}  // namespace linmeta::gputest
