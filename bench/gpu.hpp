// CUDA helpers of the bench: device probe, a stream gate, the floor's empty
// kernel, event timing and graph node counts.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace linmeta::bench {

/// Throws linmeta::Error naming the call when `err` is not cudaSuccess.
void cuda_ok(cudaError_t err, const char* call);

struct DeviceInfo {
  bool available = false;
  std::string reason;  ///< why GPU figures are skipped (when !available)
  std::string name;
  int driver_version = 0;   ///< cudaDriverGetVersion, e.g. 13000
  int runtime_version = 0;  ///< cudaRuntimeGetVersion
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int clock_khz = 0;
  int64_t memory_bytes = 0;
};

/// Device 0, or why there is none (cudaGetDeviceCount fails or returns 0).
DeviceInfo probe_device();

/// Holds a stream until release(): a one-thread kernel spins on a flag in mapped
/// pinned memory. Everything enqueued behind it then runs back to back, so the
/// events around it time the device work alone, not the host's enqueue rate.
/// The kernel gives up after a timeout (timed_out() reports it).
class StreamGate {
 public:
  StreamGate();
  ~StreamGate();
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  void hold(cudaStream_t stream);
  void release();
  /// Whether a hold since the last reset ended by timeout (read after a sync).
  [[nodiscard]] bool timed_out() const;
  void reset_timeout();

 private:
  int32_t* host_ = nullptr;  ///< [0] open flag, [1] timed-out flag (mapped)
  int32_t* dev_ = nullptr;
};

/// Keeps every SM busy for about `ms` milliseconds (lets the clocks ramp up first).
void busy_device(cudaStream_t stream, double ms);

/// One launch of an empty kernel (1 block of 1 thread).
void launch_empty_kernel(cudaStream_t stream);

/// Kernel, memcpy and other nodes of a graph.
struct GraphNodes {
  int32_t kernels = 0;
  int32_t memcpys = 0;
  int32_t others = 0;
};
GraphNodes count_nodes(cudaGraph_t graph);

/// Milliseconds between two completed events.
float elapsed_ms(cudaEvent_t start, cudaEvent_t stop);

}  // namespace linmeta::bench
