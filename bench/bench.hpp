// linmeta-bench (docs/bench.md): workloads, statistics, measurement and output.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gpu.hpp"
#include "linmeta/linmeta.hpp"
#include "random_step.hpp"

namespace linmeta::bench {

// --- Workloads (workloads.cpp).

struct Workload {
  std::string name;
  testing::RandomStep step;  ///< config, kind, arrays, one block table per group
  double vllm_py_us = 0;     ///< vLLM's Python builder on an H200 for this step, 0 = unknown
  bool headline = false;
  int32_t spec_rows = 0, decode_rows = 0, prefill_rows = 0, prefill_len = 0;  ///< built-ins

  [[nodiscard]] int32_t groups() const { return static_cast<int32_t>(step.tables.size()); }
};

/// GLM-5.3-Flash: 4 GDN groups, 256 spec-decode rows, k = 3, align mode, FULL graphs.
inline constexpr const char* kHeadline = "gdn/spec-k3/B256/align/G4/fullgraph";
/// The built-in workload names, in table order.
const std::vector<std::string>& builtin_names();
/// The workload a name describes (docs/bench.md's grammar); throws linmeta::Error otherwise.
Workload make_workload(const std::string& name);
/// One workload per case of a case file, named "LINE:<case name>"; cases on which the
/// reference rejected its input are left out.
std::vector<Workload> case_workloads(const std::string& path);

// --- Statistics.

struct Summary {
  double median = 0, p25 = 0, p75 = 0, p99 = 0, mean = 0, stddev = 0, min = 0, max = 0;
  int64_t count = 0;

  /// Interquartile range over the median: the spread of a typical sample.
  [[nodiscard]] double noise() const { return median > 0 ? (p75 - p25) / median : 0; }
  /// A few very slow samples pull the mean far above the median (e.g. preemption).
  [[nodiscard]] bool noisy() const { return mean > 1.5 * median; }
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Summary, median, p25, p75, p99, mean, stddev, min,
                                                max, count)

/// Nearest-rank quantiles, median of the middle two for an even count, sample stddev.
inline Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  auto rank = [&](double q) {
    return v[std::clamp<size_t>(static_cast<size_t>(std::ceil(q * static_cast<double>(n))), 1, n) -
             1];
  };
  s.count = static_cast<int64_t>(n);
  s.median = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  s.p25 = rank(0.25);
  s.p75 = rank(0.75);
  s.p99 = rank(0.99);
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(n);
  for (double x : v) s.stddev += (x - s.mean) * (x - s.mean);
  s.stddev = n > 1 ? std::sqrt(s.stddev / static_cast<double>(n - 1)) : 0;
  s.min = v.front();
  s.max = v.back();
  return s;
}

/// Calls `one()` (one sample each) until there are `min_count` samples and `min_seconds` have
/// passed, or 100 * min_count samples: fast figures get more samples, slow ones are not cut.
template <class F>
std::vector<double> sample(int32_t min_count, double min_seconds, F&& one) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::vector<double> v;
  while (std::cmp_less(v.size(), min_count) ||
         (std::chrono::duration<double>(Clock::now() - t0).count() < min_seconds &&
          std::cmp_less(v.size(), 100 * static_cast<int64_t>(min_count))))
    v.push_back(one());
  return v;
}

// --- Measurement (measure.cpp).

struct Settings {
  int32_t host_reps = 2000;    ///< timed host builds per workload, at least
  int32_t warmup = 200;        ///< untimed builds first
  double min_time_s = 0.1;     ///< every figure samples at least this long
  int32_t eager_batch = 64;    ///< back-to-back builds between two events
  int32_t eager_batches = 25;  ///< batches, at least
  int32_t graph_batch = 128;   ///< back-to-back graph replays between two events
  int32_t graph_batches = 25;
  int32_t staging_slots = 4;  ///< BuilderOptions of the timed builder
  int32_t capture_slots = 2;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Settings, host_reps, warmup, min_time_s,
                                                eager_batch, eager_batches, graph_batch,
                                                graph_batches, staging_slots, capture_slots)

/// The floor for one byte count, per step: one cudaMemcpyAsync of the bytes from pinned memory
/// plus one empty kernel launch, and the copy alone (microseconds; host = enqueue time).
struct Floor {
  Summary host, eager, graph, copy_eager, copy_graph;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Floor, host, eager, graph, copy_eager, copy_graph)

struct GpuFigures {
  Summary eager;          ///< gated: N builds back to back, device time / N, over batches
  Summary eager_ungated;  ///< events around N builds as the host issues them
  Summary graph;          ///< one captured build, replayed back to back
  GraphNodes nodes;       ///< of the captured build
  Floor floor;            ///< for the build's upload bytes
  /// End to end with a producer kernel writing seq_lens / accepted counts right before the
  /// build (eager gated and graph replay, per step), without and with PDL.
  Summary producer_eager, producer_graph, producer_eager_pdl, producer_graph_pdl;
  bool gate_timed_out = false;
};

struct Result {
  const Workload* workload = nullptr;
  std::string error;                   ///< non-empty when the workload failed
  StepCounts counts;                   ///< what the planner made of the step (group 0)
  Summary total, plan, pack, enqueue;  ///< host microseconds per step
  int64_t upload_bytes = 0, pinned_bytes = 0, buffer_bytes = 0;
  int32_t param_bytes = 0;        ///< kernel parameter bytes of the launch (cuda target)
  std::optional<GpuFigures> gpu;  ///< absent on the host target
};

/// Measures workloads on one target; owns the stream, events, gate and the floors.
class Bench {
 public:
  Bench(const Settings& settings, bool cuda);
  ~Bench();
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  Result run(const Workload& w);
  /// The floors measured so far, by byte count.
  std::map<int64_t, Floor> floors;
  /// One empty kernel launch alone (no copy); absent on the host target.
  std::optional<Floor> launch_floor;

 private:
  Floor floor(int64_t bytes);
  template <class F>
  Summary device_time_us(int32_t batch, int32_t batches, bool gated, F&& enqueue);
  template <class F, class G>
  Summary host_time_us(F&& enqueue, G&& after_timed_call);
  template <class F>
  void eager_and_graph_us(F&& enqueue, Summary& eager, Summary& graph);
  void sync();

  Settings s_;
  bool cuda_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  std::unique_ptr<StreamGate> gate_;
  bool timed_out_ = false;     ///< the gate gave up during the current workload
  void* floor_src_ = nullptr;  ///< pinned
  void* floor_dst_ = nullptr;
  int64_t floor_capacity_ = 0;
};

// --- Output (report.cpp).

struct RunInfo {
  std::string version, build_type, date_utc, cpu;
  unsigned cpu_threads = 0;
  int32_t pinned_cpu = -1;  ///< CPU the timing thread is pinned to, -1 = not pinned
  DeviceInfo device;
  bool cuda_target = false;
  std::string selection;  ///< --workload / --filter / --cases, for the header
  Settings settings;
  double wall_s = 0;
};

/// Rows of strings under two-line headings, written aligned, as CSV or as markdown.
struct Table {
  struct Column {
    std::string top, bottom;
    bool left = false;
  };
  std::vector<Column> columns;
  std::vector<std::vector<std::string>> rows;
};
enum class Format { Text, Csv, Markdown };
void write_table(std::FILE* out, const Table& t, Format f);

void print_header(std::FILE* out, const RunInfo& info);
Table results_table(std::span<const Result> results, const RunInfo& info);
Table floors_table(const Bench& bench);
/// Errors, noisy figures, gate timeouts.
void print_notes(std::FILE* out, std::span<const Result> results);
/// Issue 10's targets and the speed-ups over vLLM's Python builder (cuda target only).
void print_targets(std::FILE* out, std::span<const Result> results, const Bench& bench);
std::string to_json(std::span<const Result> results, const RunInfo& info, const Bench& bench);
/// Per-workload ratios B / A of two --json files, with the noise of each figure.
Table compare_table(const std::string& a_path, const std::string& b_path);

}  // namespace linmeta::bench
