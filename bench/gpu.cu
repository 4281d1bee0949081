#include <algorithm>
#include <atomic>
#include <vector>

#include "gpu.hpp"

namespace linmeta::bench {

namespace {

__device__ unsigned long long global_ns() {
  unsigned long long t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void gate_kernel(const volatile int32_t* open, volatile int32_t* timed_out) {
  const unsigned long long t0 = global_ns();
  while (*open == 0) {
    if (global_ns() - t0 > 1'000'000'000ULL) {
      *timed_out = 1;
      return;
    }
    __nanosleep(500);
  }
}

__global__ void empty_kernel() {}

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

__global__ void busy_kernel(unsigned long long duration_ns) {
  const unsigned long long t0 = global_ns();
  while (global_ns() - t0 < duration_ns) {
  }
}

}  // namespace

DeviceInfo probe_device() {
  DeviceInfo d;
  cudaDriverGetVersion(&d.driver_version);
  cudaRuntimeGetVersion(&d.runtime_version);
  int count = 0;
  if (const cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess || count == 0) {
    d.reason = err != cudaSuccess
                   ? std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(err)
                   : "cudaGetDeviceCount returned 0";
    cudaGetLastError();  // clear it so later calls do not report it
    return d;
  }
  cudaDeviceProp p{};
  cuda_check(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties");
  cuda_check(cudaSetDevice(0), "cudaSetDevice");
  d.available = true;
  d.name = p.name;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  cudaDeviceGetAttribute(&d.clock_khz, cudaDevAttrClockRate, 0);
  d.memory_bytes = static_cast<int64_t>(p.totalGlobalMem);
  return d;
}

StreamGate::StreamGate() {
  cuda_check(
      cudaHostAlloc(reinterpret_cast<void**>(&host_), 2 * sizeof(int32_t), cudaHostAllocMapped),
      "cudaHostAlloc(gate)");
  host_[0] = host_[1] = 0;
  cuda_check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev_), host_, 0),
             "cudaHostGetDevicePointer(gate)");
}

StreamGate::~StreamGate() { cudaFreeHost(host_); }

void StreamGate::hold(cudaStream_t stream) {
  static_cast<volatile int32_t*>(host_)[0] = 0;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  gate_kernel<<<1, 1, 0, stream>>>(dev_, dev_ + 1);
  cuda_check(cudaGetLastError(), "gate kernel launch");
}

void StreamGate::release() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  static_cast<volatile int32_t*>(host_)[0] = 1;
}

bool StreamGate::take_timeout() {
  auto* flags = static_cast<volatile int32_t*>(host_);
  const bool t = flags[1] != 0;
  flags[1] = 0;
  return t;
}

void busy_device(cudaStream_t stream, double ms) {
  int sms = 1;
  cuda_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0),
             "cudaDeviceGetAttribute");
  busy_kernel<<<2 * sms, 128, 0, stream>>>(static_cast<unsigned long long>(ms * 1e6));
  cuda_check(cudaGetLastError(), "busy kernel launch");
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize(busy)");
}

void launch_empty_kernel(cudaStream_t stream) {
  empty_kernel<<<1, 1, 0, stream>>>();
  cuda_check(cudaGetLastError(), "empty kernel launch");
}

void launch_step_producer(cudaStream_t stream, const int32_t* src_seq_lens, int32_t* seq_lens,
                          const int32_t* src_accepted, int32_t* accepted, int32_t n_seq,
                          int32_t n_acc) {
  const int32_t blocks = std::max(1, std::min((std::max(n_seq, n_acc) + 255) / 256, 64));
  producer_kernel<<<blocks, 256, 0, stream>>>(src_seq_lens, seq_lens, src_accepted, accepted, n_seq,
                                              n_acc);
  cuda_check(cudaGetLastError(), "producer kernel launch");
}

GraphNodes count_nodes(cudaGraph_t graph) {
  size_t n = 0;
  cuda_check(cudaGraphGetNodes(graph, nullptr, &n), "cudaGraphGetNodes");
  std::vector<cudaGraphNode_t> nodes(n);
  if (n > 0) cuda_check(cudaGraphGetNodes(graph, nodes.data(), &n), "cudaGraphGetNodes");
  GraphNodes c;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    cuda_check(cudaGraphNodeGetType(node, &type), "cudaGraphNodeGetType");
    ++(type == cudaGraphNodeTypeKernel   ? c.kernels
       : type == cudaGraphNodeTypeMemcpy ? c.memcpys
                                         : c.others);
  }
  return c;
}

}  // namespace linmeta::bench
