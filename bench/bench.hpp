// linmeta-bench (docs/bench.md). Every figure of a workload goes into one JSON object, the one
// --json writes: the table, the targets and bench/python/compare.py read figures from it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "gpu.hpp"
#include "linmeta/linmeta.hpp"
#include "random_step.hpp"

namespace linmeta {

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(StepCounts, num_prefills, num_prefill_tokens, num_decodes,
                                   num_decode_tokens, num_spec_decodes, num_spec_decode_tokens,
                                   num_actual_tokens)

namespace bench {

using nlohmann::json;

// --- Workloads (workloads.cpp).

struct Workload {
  std::string name;
  testing::RandomStep step;  ///< config, kind, arrays, one block table per group
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
  /// GPU batches in two modes: the slowest batch over 1.5x the fastest.
  [[nodiscard]] bool two_modes() const { return count > 1 && max > 1.5 * min; }
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
  s.p25 = rank(0.25), s.p75 = rank(0.75), s.p99 = rank(0.99), s.min = v.front(), s.max = v.back();
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(n);
  for (double x : v) s.stddev += (x - s.mean) * (x - s.mean);
  s.stddev = n > 1 ? std::sqrt(s.stddev / static_cast<double>(n - 1)) : 0;
  return s;
}

/// Calls `one()` (one sample each) until there are `min_count` samples and `min_seconds` have
/// passed, or 100 * min_count samples: fast figures get more samples, slow ones are not cut.
template <class F>
Summary sample(int32_t min_count, double min_seconds, F&& one) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<double> v;
  while (
      std::cmp_less(v.size(), min_count) ||
      (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < min_seconds &&
       std::cmp_less(v.size(), 100 * static_cast<int64_t>(min_count))))
    v.push_back(one());
  return summarize(std::move(v));
}

/// The summary at `pointer` in `j` (e.g. "/gpu_us/graph"); an empty one where there is none.
inline Summary at(const json& j, const char* pointer) {
  const json::json_pointer p(pointer);
  return j.contains(p) && j.at(p).is_object() ? j.at(p).get<Summary>() : Summary{};
}
/// a / b; NaN when b is not positive.
inline double ratio(double a, double b) { return b > 0 ? a / b : std::nan(""); }

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

struct Result {
  const Workload* workload = nullptr;
  std::string error;  ///< non-empty when the workload failed
  json figures;       ///< host_us, gpu_us, bytes, ... (docs/bench.md, "JSON")
};

/// Measures workloads on one target; owns the stream, events, stream gate and launch floor.
class Bench {
 public:
  Bench(const Settings& settings, bool cuda);
  ~Bench();
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  Result run(const Workload& w);
  /// One empty kernel launch, {host, eager, graph}; null until a workload ran on the cuda target.
  json launch_floor;

 private:
  template <class F>
  Summary device_time_us(int32_t batch, int32_t batches, F&& enqueue);
  template <class F, class G>
  Summary host_time_us(F&& enqueue, G&& after_timed_call);
  template <class F>
  json device_figures(F&& enqueue, json* nodes = nullptr);
  void sync();

  Settings s_;
  bool cuda_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  int32_t *gate_ = nullptr, *gate_dev_ = nullptr;  ///< mapped [open flag, timed-out flag]
  bool timed_out_ = false;                         ///< the gate gave up during the current workload
};

}  // namespace bench
}  // namespace linmeta
