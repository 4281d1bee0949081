#include <algorithm>

#include "gpu.hpp"

namespace linmeta::bench {

namespace {

__global__ void spin_kernel(const volatile int32_t* open, volatile int32_t* timed_out,
                            unsigned long long ns) {
  auto now = [] {
    unsigned long long t = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
  };
  const unsigned long long t0 = now();
  while (open == nullptr || *open == 0) {
    if (now() - t0 > ns) {
      if (timed_out != nullptr) *timed_out = 1;
      return;
    }
    if (open != nullptr) __nanosleep(500);
  }
}

__global__ void empty_kernel() {}

__global__ void gather_kernel(GatherArgs a) {
  const int64_t n = static_cast<int64_t>(a.rows) * a.slots * a.groups;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const auto slot = static_cast<int32_t>(i % a.slots);
    const auto r = static_cast<int32_t>(i / a.slots % a.rows);
    const int32_t seq_len = a.seq_lens[r];
    const int32_t col = min((seq_len > 0 ? (seq_len - 1) / a.block_size : 0) + slot, a.width - 1);
    a.out[i] = a.tables[i / a.slots / a.rows][r * a.row_stride + col];
  }
}

__global__ void producer_kernel(const int32_t* src_seq_lens, int32_t* seq_lens,
                                const int32_t* src_accepted, int32_t* accepted, int32_t n_seq,
                                int32_t n_acc) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  for (int32_t i = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
       i < max(n_seq, n_acc); i += static_cast<int32_t>(gridDim.x * blockDim.x)) {
    if (i < n_seq) seq_lens[i] = src_seq_lens[i];
    if (i < n_acc) accepted[i] = src_accepted[i];
  }
}

unsigned blocks(int64_t threads, int64_t most) {
  return static_cast<unsigned>(std::clamp<int64_t>((threads + 255) / 256, 1, most));
}

}  // namespace

void launch_spin(cudaStream_t stream, const int32_t* open, int32_t* timed_out, uint64_t ns,
                 int blocks) {
  spin_kernel<<<blocks, open == nullptr ? 128 : 1, 0, stream>>>(open, timed_out, ns);
  cuda_check(cudaGetLastError(), "spin kernel launch");
}

void launch_empty_kernel(cudaStream_t stream) {
  empty_kernel<<<1, 1, 0, stream>>>();
  cuda_check(cudaGetLastError(), "empty kernel launch");
}

void launch_gather(cudaStream_t stream, const GatherArgs& args) {
  gather_kernel<<<blocks(int64_t{args.rows} * args.slots * args.groups, 1024), 256, 0, stream>>>(
      args);
  cuda_check(cudaGetLastError(), "gather kernel launch");
}

void launch_step_producer(cudaStream_t stream, const int32_t* src_seq_lens, int32_t* seq_lens,
                          const int32_t* src_accepted, int32_t* accepted, int32_t n_seq,
                          int32_t n_acc) {
  producer_kernel<<<blocks(std::max(n_seq, n_acc), 64), 256, 0, stream>>>(
      src_seq_lens, seq_lens, src_accepted, accepted, n_seq, n_acc);
  cuda_check(cudaGetLastError(), "producer kernel launch");
}

}  // namespace linmeta::bench
