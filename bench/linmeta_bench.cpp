// linmeta-bench: what one step's metadata build costs, per workload, on the host and on the
// device (eager and replayed in a CUDA graph), next to the floors of an empty kernel launch and
// of a gather of the same rows. See docs/bench.md.
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <pthread.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <thread>
#include <type_traits>

#include "bench.hpp"
#include "case_file.hpp"
#include "linmeta/names.hpp"
#include "step_json.hpp"

namespace {

using namespace linmeta;
using namespace linmeta::bench;

// Issue 10's targets on an H200: the headline over the empty launch, and the host time per row
// of two families (prefix, suffix around "B<rows>", label). The Mamba family's host time per
// build against the GDN headline family's of the same row count (kSameRows with the rows).
constexpr std::string_view kFamilies[][3] = {{"gdn/decode/B", "/none/G1/fullgraph", "decode"},
                                             {"gdn/spec-k3/B", "/align/G1/fullgraph", "spec-k3"}};
constexpr const char* kSameRows = "gdn/spec-k3/B{}/align/G4/fullgraph";
constexpr double kLaunchRatio = 1.5, kNsPerRow = 4, kSameRowsRatio = 1.5;

std::string us(double v) { return fmt::format("{:.2f}", v); }
double med(const json& j, const char* pointer) { return at(j, pointer).median; }

/// Every Config field (its field table), enums by name, unset optionals as null.
json config_json(const Config& c) {
  json j = json::object();
  for_each_config_field(c, [&j](const char* key, const auto& v) {
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_enum_v<T>)
      j[key] = names::name_of(names::table_of<T>(), v);
    else if constexpr (std::is_same_v<T, Unsettable<const int32_t>>)
      j[key] = v.value > 0 ? json(v.value) : json(nullptr);
    else
      j[key] = v;
  });
  return j;
}

const Result* find(std::span<const Result> results, const std::string& name) {
  for (const Result& r : results)
    if (r.error.empty() && r.workload->name == name) return &r;
  return nullptr;
}

/// The results table: one row per workload under two heading rows; the first and last columns
/// (workload, note) left-aligned, the others right-aligned.
void print_results(std::span<const Result> results, bool gpu) {
  using Cell = std::function<std::string(const json&)>;
  auto median = [](const char* p) -> Cell { return [p](const json& j) { return us(med(j, p)); }; };
  auto value = [](const char* p) -> Cell {
    return [p](const json& j) { return j.at(json::json_pointer(p)).dump(); };
  };
  auto kib = [](const char* key) -> Cell {
    return [key](const json& j) { return fmt::format("{:.1f}", j.at(key).get<double>() / 1024); };
  };
  const std::vector<std::tuple<const char*, const char*, Cell, bool>> cols = {
      {"host us", "med", median("/host_us/total"), false},
      {"", "p99", [](const json& j) { return us(at(j, "/host_us/total").p99); }, false},
      {"", "noise%",
       [](const json& j) { return fmt::format("{:.1f}", 100 * at(j, "/host_us/total").noise()); },
       false},
      {"plan", "med", median("/host_us/plan"), false},
      {"pack", "med", median("/host_us/pack"), false},
      {"enq", "med", median("/host_us/enqueue"), false},
      {"GPU us", "eager", median("/gpu_us/eager"), true},
      {"", "graph", median("/gpu_us/graph"), true},
      {"gather", "graph", median("/gpu_us/gather/graph"), true},
      {"x gather", "graph",
       [](const json& j) {
         return us(ratio(med(j, "/gpu_us/graph"), med(j, "/gpu_us/gather/graph")));
       },
       true},
      {"launch", "/step", value("/graph_nodes/kernels"), true},
      {"param", "bytes", value("/param_bytes"), true},
      {"prod+build", "graph", median("/gpu_us/producer/graph"), true},
      {"", "PDL", median("/gpu_us/producer_pdl/graph"), true},
      {"pinned", "KiB", kib("pinned_bytes"), true},
      {"upload", "bytes", value("/upload_bytes"), false},
      {"device", "KiB", kib("buffer_bytes"), false}};
  std::vector<std::vector<std::string>> rows = {{"workload"}, {""}};
  for (const auto& [top, bottom, cell, on_gpu] : cols)
    if (gpu || !on_gpu) rows[0].emplace_back(top), rows[1].emplace_back(bottom);
  rows[0].emplace_back("note"), rows[1].emplace_back("");
  for (const Result& r : results) {
    std::vector<std::string>& row = rows.emplace_back(1, r.workload->name);
    for (const auto& [top, bottom, cell, on_gpu] : cols)
      if (gpu || !on_gpu) row.push_back(r.error.empty() ? cell(r.figures) : "-");
    std::vector<std::string> notes;
    if (!r.error.empty()) notes.emplace_back("ERROR");
    if (at(r.figures, "/host_us/total").noisy()) notes.emplace_back("noisy");
    if (std::ranges::any_of(std::array{"/gpu_us/eager", "/gpu_us/graph", "/gpu_us/gather/graph"},
                            [&](const char* p) { return at(r.figures, p).two_modes(); }))
      notes.emplace_back("2 modes");
    if (r.figures.value(json::json_pointer("/gpu_us/gate_timed_out"), false))
      notes.emplace_back("gate timeout");
    row.push_back(fmt::format("{}", fmt::join(notes, ", ")));
  }
  std::vector<size_t> width(rows[0].size());
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      line += (c > 0 ? "  " : "") + (c == 0 || c + 1 == row.size() ? row[c] + pad : pad + row[c]);
    }
    fmt::print("{}\n", line.erase(line.find_last_not_of(' ') + 1));
  }
}

void print_notes(std::span<const Result> results) {
  bool noisy = false, timeout = false;
  for (const Result& r : results) {
    if (!r.error.empty()) fmt::print("ERROR {}: {}\n", r.workload->name, r.error);
    noisy = noisy || at(r.figures, "/host_us/total").noisy();
    timeout = timeout || r.figures.value(json::json_pointer("/gpu_us/gate_timed_out"), false);
  }
  if (noisy)
    fmt::print(
        "WARNING noisy: a host mean above 1.5x its median (some builds were much slower, "
        "e.g. preempted): trust the median, or rerun with --pin-cpu on a quieter machine.\n");
  if (timeout)
    fmt::print(
        "WARNING gate timeout: the stream gate gave up (1 s) before the host had enqueued "
        "a batch: those GPU figures include host enqueue time.\n");
}

void print_targets(std::span<const Result> results, const json& launch) {
  std::vector<std::string> lines;
  // "what: A us / B us = R" for figure `p` of `j` over figure `q` of `k`, with its target.
  auto line = [&](const std::string& what, const json& j, const char* p, const json& k,
                  const char* q, double limit = 0) {
    const double v = ratio(med(j, p), med(k, q));
    lines.push_back(fmt::format(
        "{}: {} us / {} us = {:.2f}x{}", what, us(med(j, p)), us(med(k, q)), v,
        limit > 0 ? fmt::format(" (target <= {}x) {}", limit, v <= limit ? "ok" : "OVER") : ""));
  };
  const bool cuda = launch.is_object();
  if (const Result* h = find(results, kHeadline); h != nullptr && cuda) {
    const json& g = h->figures;
    const std::string name = kHeadline;
    line(name + ": host / empty launch's host", g, "/host_us/total", launch, "/host", kLaunchRatio);
    line(name + ": GPU in a graph / empty kernel's", g, "/gpu_us/graph", launch, "/graph",
         kLaunchRatio);
    line(name + ": GPU in a graph / its gather floor's", g, "/gpu_us/graph", g,
         "/gpu_us/gather/graph");
    line(name + ": producer + build in a graph, with PDL / without", g,
         "/gpu_us/producer_pdl/graph", g, "/gpu_us/producer/graph");
  }
  // Least-squares slope of the host medians (total and plan) over a family "prefix B<rows> suffix".
  for (const auto& [prefix, suffix, what] : kFamilies) {
    std::vector<const Result*> pts;
    for (const Result& r : results)
      if (cuda && r.error.empty() && r.workload->name.starts_with(prefix) &&
          r.workload->name.ends_with(suffix))
        pts.push_back(&r);
    auto slope = [&](const char* figure) {  // least squares, ns per row
      double n = static_cast<double>(pts.size()), sx = 0, sy = 0, sxy = 0, sxx = 0;
      for (const Result* r : pts) {
        const double x = r->workload->step.num_reqs, y = med(r->figures, figure);
        sx += x, sy += y, sxy += x * y, sxx += x * x;
      }
      return ratio(1000.0 * (n * sxy - sx * sy), n * sxx - sx * sx);
    };
    if (pts.size() >= 2)
      lines.push_back(fmt::format(
          "host time per row, {} ({} workloads): {:.2f} ns (target <= {} ns) {}; "
          "plan phase {:.2f} ns",
          what, pts.size(), slope("/host_us/total"), kNsPerRow,
          slope("/host_us/total") <= kNsPerRow ? "ok" : "OVER", slope("/host_us/plan")));
  }
  // The Mamba family's built-ins against the GDN headline family: same rows, same run.
  std::string missing;
  for (const Result& r : results) {
    if (!r.error.empty() || is_gdn_family(r.workload->step.kind) ||
        r.workload->name.find(':') != std::string::npos)
      continue;
    const std::string ref = fmt::format(fmt::runtime(kSameRows), r.workload->step.num_reqs);
    if (const Result* g = find(results, ref))
      line(r.workload->name + ": host / " + ref + "'s", r.figures, "/host_us/total", g->figures,
           "/host_us/total", kSameRowsRatio);
    else if (missing.find(ref) == std::string::npos)
      missing += " " + ref;
  }
  if (!missing.empty())
    lines.push_back("no same-run reference for some Mamba-family workloads:" + missing);
  if (cuda)
    lines.push_back(fmt::format(
        "launch floor (one empty kernel): host {} us, GPU eager {} us, "
        "graph {} us",
        us(med(launch, "/host")), us(med(launch, "/eager")), us(med(launch, "/graph"))));
  if (lines.empty()) return;
  fmt::print("\nSame-run ratios and targets ({} target):\n", cuda ? "cuda" : "host");
  for (const auto& l : lines) fmt::print("  {}\n", l);
}

json to_json(std::span<const Result> results, json info, const json& launch_floor) {
  info["launch_floor"] = launch_floor;
  info["workloads"] = json::array();
  for (const Result& r : results) {
    const Workload& w = *r.workload;
    json o = {{"name", w.name},
              {"builder", names::builder_kind_name(w.step.kind)},
              {"groups", w.groups()},
              {"headline", w.name == kHeadline},
              {"config", config_json(w.step.config)},
              {"step",
               {{"prefill_len", w.prefill_len},
                {"rows", w.step.num_reqs},
                {"tokens", w.step.num_actual_tokens},
                {"capture", w.step.capture}}}};
    o.update(r.error.empty() ? r.figures : json{{"error", r.error}});
    info["workloads"].push_back(o);
  }
  return info;
}

constexpr const char* kUsage = R"(usage: linmeta-bench [options]

Times linmeta's metadata builders on named, deterministic scheduler steps (docs/bench.md).

  --workload NAME      run the workload NAME (exact; repeatable; any name of the documented
                       form works, listed or not)
  --filter SUBSTRING   run the listed workloads whose name contains SUBSTRING (repeatable)
  --cases FILE.jsonl   run the steps of a case file instead of the built-in workloads
  --list               print the selected workload names and exit
  --json FILE          write every figure to FILE (JSON)
  --steps FILE         write each selected step to FILE as a case-file line (JSONL)
  --target auto|host|cuda
                       builder target (default auto: cuda when a CUDA device is present)
  --reps N             timed host builds per workload, at least (default 2000)
  --min-time S         sample each figure for at least S seconds (default 0.1)
  --warmup N           untimed builds first (default 200)
  --pin-cpu N          pin the timing thread to CPU N (steadier host figures)
  --quiet              no progress line on stderr
  -h, --help           this text
)";

[[noreturn]] void usage_error(const std::string& msg) {
  fmt::print(stderr, "linmeta-bench: {}\n\n{}", msg, kUsage);
  std::exit(2);
}

double number(const std::string& flag, const char* text, double lo, double hi) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(v >= lo && v <= hi))
    usage_error(fmt::format("{} takes a number from {} to {}, got '{}'", flag, lo, hi, text));
  return v;
}

struct Args {
  std::vector<std::string> workloads, filters;
  std::string cases, json, steps, target = "auto";
  bool list = false, quiet = false;
  int32_t pin_cpu = -1;
  Settings settings;
};

Args parse(int argc, char** argv) {
  Args a;
  auto count = [](int32_t& v) {
    return [&v](const std::string& f, const char* s) {
      v = static_cast<int32_t>(number(f, s, 0, 1e7));
    };
  };
  auto text = [](std::string& v) { return [&v](const std::string&, const char* s) { v = s; }; };
  auto add = [](std::vector<std::string>& v) {
    return [&v](const std::string&, const char* s) { v.emplace_back(s); };
  };
  const std::map<std::string, std::function<void(const std::string&, const char*)>> with_value = {
      {"--workload", add(a.workloads)},
      {"--filter", add(a.filters)},
      {"--cases", text(a.cases)},
      {"--json", text(a.json)},
      {"--steps", text(a.steps)},
      {"--target", text(a.target)},
      {"--reps", count(a.settings.host_reps)},
      {"--warmup", count(a.settings.warmup)},
      {"--pin-cpu", count(a.pin_cpu)},
      {"--min-time",
       [&a](const std::string& f, const char* s) { a.settings.min_time_s = number(f, s, 0, 60); }}};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      fmt::print("{}", kUsage);
      std::exit(0);
    } else if (arg == "--list" || arg == "--quiet") {
      (arg == "--list" ? a.list : a.quiet) = true;
    } else if (arg == "--compare") {
      usage_error("--compare is bench/python/compare.py A.json B.json now (docs/bench.md)");
    } else if (const auto it = with_value.find(arg); it != with_value.end()) {
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      it->second(arg, argv[++i]);
    } else {
      usage_error(fmt::format("unknown argument '{}'", arg));
    }
  }
  if (a.target != "auto" && a.target != "host" && a.target != "cuda")
    usage_error(fmt::format("--target takes auto, host or cuda, got '{}'", a.target));
  if (a.settings.host_reps < 1) usage_error("--reps must be at least 1");
  if (!a.cases.empty() && !(a.workloads.empty() && a.filters.empty()))
    usage_error("--cases runs every case of the file; --workload / --filter select built-ins");
  return a;
}

std::vector<Workload> select(const Args& a) {
  if (!a.cases.empty()) return case_workloads(a.cases);
  std::vector<Workload> out;
  for (const auto& name : a.workloads) out.push_back(make_workload(name));
  for (const auto& name : builtin_names())
    if ((a.workloads.empty() && a.filters.empty()) ||
        std::ranges::any_of(a.filters,
                            [&](const auto& f) { return name.find(f) != std::string::npos; }))
      out.push_back(make_workload(name));
  return out;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("model name") && line.find(':') != std::string::npos)
      return line.substr(line.find_first_not_of(" \t", line.find(':') + 1));
  return "unknown CPU";
}

/// Device 0 (docs/bench.md, "JSON"), or why there is none: cudaGetDeviceCount fails or is 0.
json probe_device() {
  int driver = 0, runtime = 0, count = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  const cudaError_t err = cudaGetDeviceCount(&count);
  cudaGetLastError();  // clear a failure so later calls do not report it
  const bool available = err == cudaSuccess && count > 0;
  json d = {{"driver_version", driver}, {"runtime_version", runtime}, {"available", available}};
  d["reason"] = available ? ""
                : err != cudaSuccess
                    ? std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(err)
                    : "cudaGetDeviceCount returned 0";
  if (!available) return d;
  cudaDeviceProp p{};
  cuda_check(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties");
  cuda_check(cudaSetDevice(0), "cudaSetDevice");
  d["name"] = p.name, d["cc_major"] = p.major, d["cc_minor"] = p.minor;
  d["sm_count"] = p.multiProcessorCount, d["memory_bytes"] = p.totalGlobalMem;
  return d;
}

/// The header lines of a run, from its --json header object.
void print_header(const json& i) {
  const json &d = i["device"], &h = i["host"];
  auto get = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  fmt::print(
      "linmeta-bench {} ({} build), {}\nhost: {} ({} threads, timing thread pinned to CPU {})\n",
      get(i["version"]), get(i["build_type"]), get(i["date_utc"]), get(h["cpu"]), get(h["threads"]),
      h["pinned_cpu"] >= 0 ? get(h["pinned_cpu"]) : "none");
  fmt::print(
      "device: {}, driver {}, runtime {}\ntarget: {}, settings {}\n",
      d["available"] ? fmt::format("{} (sm_{}{}, {} SMs, {:.1f} GiB)", get(d["name"]),
                                   get(d["cc_major"]), get(d["cc_minor"]), get(d["sm_count"]),
                                   d["memory_bytes"].get<double>() / (1 << 30))
                     : "none (" + get(d["reason"]) + ")",
      get(d["driver_version"]), get(d["runtime_version"]), get(i["target"]), i["settings"].dump());
  if (i["target"] == "host")
    fmt::print(
        "NOTE: {}: no GPU figures (no launch floor, no gather floor). On the host target "
        "'enq' is the element work done on the CPU, not a launch.\n",
        d["available"] ? "--target host" : "no CUDA device");
  fmt::print("{}\n", i["selection"] == "" ? "" : "selection: " + get(i["selection"]) + "\n");
}

int run(const Args& args) {
  const std::vector<Workload> workloads = select(args);
  if (!args.steps.empty()) {
    std::ofstream out(args.steps);
    for (const auto& w : workloads)
      out << linmeta::testing::step_case_json(w.step, w.name).dump() << "\n";
    if (!out) throw linmeta::Error("cannot write " + args.steps);
  }
  if (args.list) {
    for (const auto& w : workloads) fmt::print("{}\n", w.name);
    return 0;
  }
  if (workloads.empty()) {
    fmt::print(stderr, "linmeta-bench: nothing selected (see --list)\n");
    return 2;
  }
  const json d = probe_device();
  if (args.target == "cuda" && !d["available"]) {
    fmt::print(stderr, "linmeta-bench: --target cuda but no CUDA device: {}\n",
               d["reason"].get<std::string>());
    return 2;
  }
  const bool cuda = d["available"] && args.target != "host";
  if (args.pin_cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(static_cast<size_t>(args.pin_cpu), &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0)
      throw linmeta::Error(fmt::format("cannot pin the thread to CPU {}", args.pin_cpu));
  }
  std::string selection = args.cases.empty() ? "" : "cases " + args.cases;
  for (const auto& w : args.workloads) selection += "workload " + w + "; ";
  for (const auto& f : args.filters) selection += "filter " + f + "; ";
  json info = {
      {"bench", "linmeta-bench"},
      {"version", LINMETA_BENCH_VERSION},
      {"build_type", LINMETA_BENCH_BUILD_TYPE},
      {"date_utc", fmt::format("{:%Y-%m-%d %H:%M:%S} UTC", fmt::gmtime(std::time(nullptr)))},
      {"target", cuda ? "cuda" : "host"},
      {"selection", selection},
      {"host",
       {{"cpu", cpu_model()},
        {"threads", std::thread::hardware_concurrency()},
        {"pinned_cpu", args.pin_cpu}}},
      {"device", d},
      {"settings", args.settings}};
  print_header(info);
  std::fflush(stdout);

  const bool tty = isatty(fileno(stderr)) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Result> results;
  Bench bench(args.settings, cuda);
  for (size_t i = 0; i < workloads.size(); ++i) {
    if (!args.quiet)
      fmt::print(stderr, "{}[{}/{}] {}{}", tty ? "\r\033[K" : "", i + 1, workloads.size(),
                 workloads[i].name, tty ? "" : "\n");
    results.push_back(bench.run(workloads[i]));
  }
  if (!args.quiet && tty) fmt::print(stderr, "\r\033[K");
  info["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  print_results(results, cuda);
  print_notes(results);
  print_targets(results, bench.launch_floor);
  fmt::print("\n{} workloads in {:.1f} s\n", results.size(), info["wall_s"].get<double>());
  if (!args.json.empty()) {
    std::ofstream out(args.json);
    out << to_json(results, info, bench.launch_floor).dump(2) << "\n";
    if (!out) throw linmeta::Error("cannot write " + args.json);
  }
  return std::ranges::any_of(results, [](const Result& r) { return !r.error.empty(); }) ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    fmt::print(stderr, "linmeta-bench: {}\n", e.what());
    return 1;
  }
}
