// CUDA helpers of the bench: device probe, a stream gate, the floor's empty kernel, graph
// node counts. CUDA calls are checked with the tools' cuda_check (linmeta::Error on failure).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "cuda_check.hpp"

namespace linmeta::bench {

using tools::cuda_check;

struct DeviceInfo {
  bool available = false;
  std::string reason;  ///< why GPU figures are skipped (when !available)
  std::string name;
  int driver_version = 0, runtime_version = 0;  ///< e.g. 13000
  int cc_major = 0, cc_minor = 0, sm_count = 0, clock_khz = 0;
  int64_t memory_bytes = 0;
};

/// Device 0, or why there is none (cudaGetDeviceCount fails or returns 0).
DeviceInfo probe_device();

/// Holds a stream until release(): a one-thread kernel spins on a flag in mapped pinned
/// memory, so everything enqueued behind it runs back to back and events around it time the
/// device work alone, not the host's enqueue rate. It gives up after 1 s (timed_out()).
class StreamGate {
 public:
  StreamGate();
  ~StreamGate();
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  void hold(cudaStream_t stream);
  void release();
  /// Whether a hold since the last call ended by timeout (read after a sync); resets it.
  bool take_timeout();

 private:
  int32_t* host_ = nullptr;  ///< [0] open flag, [1] timed-out flag (mapped)
  int32_t* dev_ = nullptr;
};

/// Keeps every SM busy for about `ms` milliseconds (lets the clocks ramp up first).
void busy_device(cudaStream_t stream, double ms);

/// One launch of an empty kernel (1 block of 1 thread).
void launch_empty_kernel(cudaStream_t stream);

/// The bench's stand-in for an engine's input-preparation kernel: copies seq_lens and
/// accepted counts (n_seq / n_acc entries) from `src_*` into the step's device arrays, right before
/// a build reads them. On sm_90 it lets a dependent launched with PDL start early
/// (griddepcontrol.launch_dependents); the build's griddepcontrol.wait still orders the reads.
void launch_step_producer(cudaStream_t stream, const int32_t* src_seq_lens, int32_t* seq_lens,
                          const int32_t* src_accepted, int32_t* accepted, int32_t n_seq,
                          int32_t n_acc);

/// Kernel and memcpy nodes of a graph.
struct GraphNodes {
  int32_t kernels = 0, memcpys = 0, others = 0;
};
GraphNodes count_nodes(cudaGraph_t graph);

}  // namespace linmeta::bench
