// linmeta-bench: what one step's metadata build costs, per workload, on the host and on the
// device (eager and replayed in a CUDA graph), next to the floor of one pinned copy plus one
// empty kernel launch. See docs/bench.md.
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include "bench.hpp"

namespace {

using namespace linmeta::bench;

constexpr const char* kUsage = R"(usage: linmeta-bench [options]
       linmeta-bench --compare A.json B.json [--csv FILE] [--markdown FILE]

Times linmeta's metadata builders on named, deterministic scheduler steps (docs/bench.md).

  --workload NAME      run the workload NAME (exact; repeatable; any name of the documented
                       form works, listed or not)
  --filter SUBSTRING   run the listed workloads whose name contains SUBSTRING (repeatable)
  --cases FILE.jsonl   run the steps of a case file instead of the built-in workloads
  --list               print the selected workload names and exit
  --json FILE          write every figure to FILE (JSON)
  --csv FILE           write the table as CSV ('-': to stdout, instead of the text table)
  --markdown FILE      write the tables as markdown ('-': to stdout, instead of the text)
  --compare A B        per-workload ratios B / A of two --json files, with their noise
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
  std::vector<std::string> workloads, filters, compare;
  std::string cases, json, csv, markdown, target = "auto";
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
      {"--csv", text(a.csv)},
      {"--markdown", text(a.markdown)},
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
      if (i + 2 >= argc) usage_error("--compare needs two JSON files");
      a.compare = {argv[i + 1], argv[i + 2]};
      i += 2;
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
    for (const auto& f : a.filters)
      if (name.find(f) != std::string::npos) {
        out.push_back(make_workload(name));
        break;
      }
  if (a.workloads.empty() && a.filters.empty())
    for (const auto& name : builtin_names()) out.push_back(make_workload(name));
  return out;
}

/// Writes `table` (and `floors`, for markdown) to FILE or, for '-', to stdout.
void write_file(const std::string& path, Format f, const Table& table, const Table* floors) {
  std::FILE* out = path == "-" ? stdout : std::fopen(path.c_str(), "w");
  if (out == nullptr) throw linmeta::Error("cannot write " + path);
  write_table(out, table, f);
  if (floors != nullptr && !floors->rows.empty()) {
    fmt::print(out, "\nFloors:\n\n");
    write_table(out, *floors, f);
  }
  if (out != stdout && std::fclose(out) != 0) throw linmeta::Error("cannot write " + path);
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("model name") && line.find(':') != std::string::npos)
      return line.substr(line.find_first_not_of(" \t", line.find(':') + 1));
  return "unknown CPU";
}

int run(const Args& args) {
  const bool to_stdout = args.csv == "-" || args.markdown == "-";
  if (!args.compare.empty()) {
    const Table t = compare_table(args.compare[0], args.compare[1]);
    if (!args.csv.empty()) write_file(args.csv, Format::Csv, t, nullptr);
    if (!args.markdown.empty()) write_file(args.markdown, Format::Markdown, t, nullptr);
    if (!to_stdout) {
      fmt::print("A = {}, B = {}; 'faster' / 'slower' when B / A is outside the noise\n",
                 args.compare[0], args.compare[1]);
      write_table(stdout, t, Format::Text);
    }
    return 0;
  }
  const std::vector<Workload> workloads = select(args);
  if (args.list) {
    for (const auto& w : workloads) fmt::print("{}\n", w.name);
    return 0;
  }
  if (workloads.empty()) {
    fmt::print(stderr, "linmeta-bench: nothing selected (see --list)\n");
    return 2;
  }
  RunInfo info;
  info.version = LINMETA_BENCH_VERSION;
  info.build_type = LINMETA_BENCH_BUILD_TYPE;
  info.date_utc = fmt::format("{:%Y-%m-%d %H:%M:%S} UTC", fmt::gmtime(std::time(nullptr)));
  info.cpu = cpu_model();
  info.cpu_threads = std::thread::hardware_concurrency();
  for (const auto& s : args.workloads) info.selection += "workload " + s + "; ";
  for (const auto& s : args.filters) info.selection += "filter " + s + "; ";
  if (!args.cases.empty()) info.selection = "cases " + args.cases;
  info.settings = args.settings;
  info.device = probe_device();
  if (args.target == "cuda" && !info.device.available) {
    fmt::print(stderr, "linmeta-bench: --target cuda but no CUDA device: {}\n", info.device.reason);
    return 2;
  }
  info.cuda_target = info.device.available && args.target != "host";
  if (args.pin_cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(static_cast<size_t>(args.pin_cpu), &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0)
      throw linmeta::Error(fmt::format("cannot pin the thread to CPU {}", args.pin_cpu));
    info.pinned_cpu = args.pin_cpu;
  }
  if (!to_stdout) print_header(stdout, info);
  std::fflush(stdout);

  const bool tty = isatty(fileno(stderr)) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Result> results;
  Bench bench(info.settings, info.cuda_target);
  for (size_t i = 0; i < workloads.size(); ++i) {
    if (!args.quiet)
      fmt::print(stderr, "{}[{}/{}] {}{}", tty ? "\r\033[K" : "", i + 1, workloads.size(),
                 workloads[i].name, tty ? "" : "\n");
    results.push_back(bench.run(workloads[i]));
  }
  if (!args.quiet && tty) fmt::print(stderr, "\r\033[K");
  info.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const Table table = results_table(results, info);
  const Table floors = floors_table(bench);
  if (!to_stdout) {
    write_table(stdout, table, Format::Text);
    print_notes(stdout, results);
    if (!floors.rows.empty()) {
      fmt::print(
          "\nFloors (per step: one cudaMemcpyAsync of N pinned bytes + one empty kernel "
          "launch; 'copy' = the copy alone; last row = the launch alone):\n");
      write_table(stdout, floors, Format::Text);
    }
    if (info.cuda_target) print_targets(stdout, results, bench);
    fmt::print("\n{} workloads in {:.1f} s\n", results.size(), info.wall_s);
  }
  if (!args.csv.empty()) write_file(args.csv, Format::Csv, table, nullptr);
  if (!args.markdown.empty()) write_file(args.markdown, Format::Markdown, table, &floors);
  if (!args.json.empty()) {
    std::ofstream out(args.json);
    out << to_json(results, info, bench);
    if (!out) throw linmeta::Error("cannot write " + args.json);
  }
  for (const auto& r : results)
    if (!r.error.empty()) return 1;
  return 0;
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
