// Output of the bench: header, aligned table, reference targets, JSON.
#pragma once

#include <cstdio>
#include <map>
#include <optional>
#include <span>
#include <string>

#include "gpu.hpp"
#include "measure.hpp"

namespace linmeta::bench {

struct RunInfo {
  std::string version;
  std::string build_type;
  std::string date_utc;
  std::string cpu;
  unsigned cpu_threads = 0;
  int32_t pinned_cpu = -1;  ///< CPU the timing thread is pinned to, -1 = not pinned
  DeviceInfo device;
  bool cuda_target = false;
  std::string filter;
  Settings settings;
  double wall_s = 0;
};

void print_header(std::FILE* out, const RunInfo& info);
void print_table(std::FILE* out, std::span<const Result> results, const RunInfo& info);
/// The reference targets (H200) next to the measured figures, for the workloads that ran.
void print_targets(std::FILE* out, std::span<const Result> results, const RunInfo& info);
/// The floors the run measured, by byte count, and the launch alone.
void print_floors(std::FILE* out, const std::map<int64_t, Floor>& floors,
                  const std::optional<Floor>& launch_floor);
std::string to_json(std::span<const Result> results, const RunInfo& info,
                    const std::map<int64_t, Floor>& floors,
                    const std::optional<Floor>& launch_floor);

}  // namespace linmeta::bench
