// linmeta-bench: what one step's metadata build costs, per workload, on the host
// and on the device (eager and replayed in a CUDA graph), next to the floor of one
// pinned copy plus one empty kernel launch. See docs/bench.md.
#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gpu.hpp"
#include "measure.hpp"
#include "report.hpp"
#include "workloads.hpp"

#ifndef LINMETA_BENCH_VERSION
#define LINMETA_BENCH_VERSION "unknown"
#endif
#ifndef LINMETA_BENCH_BUILD_TYPE
#define LINMETA_BENCH_BUILD_TYPE "unknown"
#endif

namespace {

using namespace linmeta::bench;

constexpr const char* kUsage = R"(usage: linmeta-bench [options]

Times linmeta's metadata builders on named, deterministic scheduler steps.

  --filter SUBSTRING   run only workloads whose name contains SUBSTRING
                       (repeatable: a workload runs when any filter matches)
  --json FILE          also write every number to FILE (JSON)
  --list               print the workload names and exit
  --target auto|host|cuda
                       builder target (default auto: cuda when a CUDA device is
                       present, else host with GPU figures skipped)
  --reps N             timed host builds per workload (default 2000)
  --warmup N           untimed builds first (default 200)
  --pin-cpu N          pin the timing thread to CPU N (steadier host figures)
  --quiet              no progress line on stderr
  -h, --help           this text
)";

struct Args {
  std::vector<std::string> filters;
  std::string json;
  std::string target = "auto";
  bool list = false;
  bool quiet = false;
  int32_t pin_cpu = -1;
  Settings settings;
};

[[noreturn]] void usage_error(const std::string& msg) {
  fmt::print(stderr, "linmeta-bench: {}\n\n{}", msg, kUsage);
  std::exit(2);
}

int32_t positive_int(std::string_view flag, const char* text) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < 1 || v > 10'000'000)
    usage_error(fmt::format("{} takes a positive integer, got '{}'", flag, text));
  return static_cast<int32_t>(v);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) usage_error(fmt::format("{} needs a value", arg));
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      fmt::print("{}", kUsage);
      std::exit(0);
    } else if (arg == "--filter") {
      a.filters.emplace_back(next());
    } else if (arg == "--json") {
      a.json = next();
    } else if (arg == "--list") {
      a.list = true;
    } else if (arg == "--quiet") {
      a.quiet = true;
    } else if (arg == "--target") {
      a.target = next();
      if (a.target != "auto" && a.target != "host" && a.target != "cuda")
        usage_error(fmt::format("--target takes auto, host or cuda, got '{}'", a.target));
    } else if (arg == "--reps") {
      a.settings.host_reps = positive_int(arg, next());
    } else if (arg == "--pin-cpu") {
      const char* v = next();
      a.pin_cpu = std::string_view(v) == "0" ? 0 : positive_int(arg, v);
    } else if (arg == "--warmup") {
      a.settings.warmup = positive_int(arg, next());
    } else {
      usage_error(fmt::format("unknown argument '{}'", arg));
    }
  }
  return a;
}

bool selected(const Workload& w, const std::vector<std::string>& filters) {
  if (filters.empty()) return true;
  for (const auto& f : filters)
    if (w.name.find(f) != std::string::npos) return true;
  return false;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "unknown CPU";
}

/// Pins the calling thread to one CPU; threads the CUDA driver started earlier keep theirs.
bool pin_thread(int32_t cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(static_cast<size_t>(cpu), &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  std::vector<Workload> workloads;
  for (auto& w : all_workloads())
    if (selected(w, args.filters)) workloads.push_back(std::move(w));
  if (args.list) {
    for (const auto& w : workloads) fmt::print("{}\n", w.name);
    return 0;
  }
  if (workloads.empty()) {
    fmt::print(stderr, "linmeta-bench: no workload matches --filter {} (see --list)\n",
               join(args.filters));
    return 2;
  }

  RunInfo info;
  info.version = LINMETA_BENCH_VERSION;
  info.build_type = LINMETA_BENCH_BUILD_TYPE;
  info.date_utc = utc_now();
  info.cpu = cpu_model();
  info.cpu_threads = std::thread::hardware_concurrency();
  info.filter = join(args.filters);
  info.settings = args.settings;
  try {
    info.device = probe_device();
  } catch (const std::exception& e) {
    info.device = DeviceInfo{};
    info.device.reason = e.what();
  }
  if (args.target == "cuda" && !info.device.available) {
    fmt::print(stderr, "linmeta-bench: --target cuda but no CUDA device: {}\n", info.device.reason);
    return 2;
  }
  info.cuda_target = info.device.available && args.target != "host";
  if (args.pin_cpu >= 0) {
    if (!pin_thread(args.pin_cpu)) {
      fmt::print(stderr, "linmeta-bench: cannot pin the thread to CPU {}\n", args.pin_cpu);
      return 2;
    }
    info.pinned_cpu = args.pin_cpu;
  }
  print_header(stdout, info);
  std::fflush(stdout);

  const bool tty = isatty(fileno(stderr)) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Result> results;
  std::unique_ptr<Bench> bench;
  try {
    bench = std::make_unique<Bench>(info.settings, info.cuda_target);
    for (size_t i = 0; i < workloads.size(); ++i) {
      if (!args.quiet) {
        fmt::print(stderr, "{}[{}/{}] {}{}", tty ? "\r\033[K" : "", i + 1, workloads.size(),
                   workloads[i].name, tty ? "" : "\n");
        std::fflush(stderr);
      }
      results.push_back(bench->run(workloads[i]));
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "\nlinmeta-bench: {}\n", e.what());
    return 1;
  }
  if (!args.quiet && tty) fmt::print(stderr, "\r\033[K");
  info.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  print_table(stdout, results, info);
  print_floors(stdout, bench->floors(), bench->launch_floor());
  print_targets(stdout, results, info);
  fmt::print("\n{} workloads in {:.1f} s\n", results.size(), info.wall_s);

  if (!args.json.empty()) {
    std::ofstream out(args.json);
    out << to_json(results, info, bench->floors(), bench->launch_floor());
    if (!out) {
      fmt::print(stderr, "linmeta-bench: cannot write {}\n", args.json);
      return 1;
    }
    fmt::print("JSON: {}\n", args.json);
  }
  for (const auto& r : results)
    if (!r.error.empty()) return 1;
  return 0;
}
