// Measuring one workload: host phases, device time (eager and in a CUDA graph),
// upload bytes, launches, memory, and the copy-plus-launch floor.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "gpu.hpp"
#include "stats.hpp"
#include "workloads.hpp"

namespace linmeta::bench {

struct Settings {
  int32_t host_reps = 2000;  ///< timed host builds per workload
  int32_t warmup = 200;      ///< untimed builds first
  int32_t eager_batch = 64;  ///< back-to-back builds between two events
  int32_t eager_batches = 25;
  int32_t graph_batch = 128;  ///< back-to-back graph replays between two events
  int32_t graph_batches = 25;
  int32_t staging_slots = 4;  ///< BuilderOptions of the timed builder
  int32_t capture_slots = 2;
};

/// The floor for one byte count: one cudaMemcpyAsync of `bytes` pinned bytes plus
/// one empty kernel launch per step, and the copy alone (microseconds per step).
struct Floor {
  Summary host_us;        ///< host time to enqueue the copy and the launch
  Summary eager_us;       ///< gated batches, device time per copy + launch
  Summary graph_us;       ///< copy + launch captured, replays back to back
  Summary copy_eager_us;  ///< the copy alone
  Summary copy_graph_us;
};

struct GpuFigures {
  Summary eager_us;          ///< gated: N builds back to back, device time / N, over batches
  Summary eager_ungated_us;  ///< events around N builds as the host issues them
  Summary graph_us;          ///< one captured build, replayed back to back
  GraphNodes nodes;          ///< of the captured build
  Floor floor;
  bool gate_timed_out = false;
};

struct Result {
  const Workload* workload = nullptr;
  std::string error;  ///< non-empty when the workload failed
  int32_t rows = 0;
  int32_t tokens = 0;
  // What the planner made of the step (group 0's metadata).
  int32_t num_decodes = 0, num_decode_tokens = 0;
  int32_t num_spec_decodes = 0, num_spec_decode_tokens = 0;
  int32_t num_prefills = 0, num_prefill_tokens = 0;
  // Host microseconds per step.
  Summary total, plan, pack, enqueue;
  int64_t upload_bytes = 0;
  int64_t pinned_bytes = 0;
  int64_t buffer_bytes = 0;
  std::optional<GpuFigures> gpu;  ///< absent on the host target
};

/// Measures workloads on one target; owns the stream, events, gate and floor cache.
class Bench {
 public:
  Bench(const Settings& settings, bool cuda);
  ~Bench();
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  Result run(const Workload& w);

  /// The floors measured so far, by byte count.
  [[nodiscard]] const std::map<int64_t, Floor>& floors() const { return floors_; }
  /// One empty kernel launch alone (eager and graph; no copy); absent on the host target.
  [[nodiscard]] const std::optional<Floor>& launch_floor() const { return launch_floor_; }

 private:
  Floor floor(int64_t bytes);
  /// Device microseconds per `enqueue()` over batches of `batch` calls (gated: the
  /// stream is held while the host enqueues, so the events time device work alone).
  template <class F>
  Summary device_time_us(int32_t batch, int32_t batches, bool gated, F&& enqueue, bool& timed_out);
  /// Host microseconds per `enqueue()`, draining the stream every staging_slots calls.
  template <class F>
  Summary host_time_us(F&& enqueue);
  /// Eager and graph device time of what `enqueue` issues.
  template <class F>
  std::pair<Summary, Summary> eager_and_graph_us(F&& enqueue, bool& timed_out);

  Settings s_;
  bool cuda_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  std::unique_ptr<StreamGate> gate_;
  std::map<int64_t, Floor> floors_;
  std::optional<Floor> launch_floor_;
  void* floor_src_ = nullptr;  ///< pinned
  void* floor_dst_ = nullptr;  ///< device
  int64_t floor_capacity_ = 0;
};

}  // namespace linmeta::bench
