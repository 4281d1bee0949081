#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <string_view>

#include "bench.hpp"
#include "linmeta/names.hpp"

namespace linmeta {

// JSON of the library's types, for the bench's --json.
void to_json(nlohmann::json& j, CacheMode m) { j = std::string(names::cache_mode_name(m)); }
void from_json(const nlohmann::json& j, CacheMode& m) {
  m = names::parse(names::kCacheModes, j.get<std::string>()).value_or(CacheMode::None);
}
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Config, num_spec, max_num_seqs, max_num_batched_tokens,
                                   full_cuda_graph, max_cudagraph_capture_size, mamba_cache_mode,
                                   block_size, num_speculative_blocks, chunk_metadata,
                                   use_recoverssm, num_prefill_checkpoint_blocks)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(StepCounts, num_prefills, num_prefill_tokens, num_decodes,
                                   num_decode_tokens, num_spec_decodes, num_spec_decode_tokens,
                                   num_actual_tokens)

namespace bench {

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(DeviceInfo, available, reason, name, driver_version,
                                   runtime_version, cc_major, cc_minor, sm_count, clock_khz,
                                   memory_bytes)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(GraphNodes, kernels, memcpys, others)

namespace {

using nlohmann::json;

// Reference targets on an H200 (issue 10): the headline over the empty launch's floor, and the
// host time per row of two families (prefix, suffix around "B<rows>", label).
constexpr std::string_view kFamilies[][3] = {{"gdn/decode/B", "/none/G1/fullgraph", "decode"},
                                             {"gdn/spec-k3/B", "/align/G1/fullgraph", "spec-k3"}};
constexpr double kFloorRatio = 1.5, kNsPerRow = 4;

std::string us(double v) { return fmt::format("{:.2f}", v); }
std::string pct(double v) { return fmt::format("{:.1f}", 100 * v); }
std::string kib(int64_t bytes) { return fmt::format("{:.1f}", static_cast<double>(bytes) / 1024); }
double ratio(double a, double b) {
  return b > 0 ? a / b : std::numeric_limits<double>::quiet_NaN();
}
/// GPU batches in two modes: the slowest batch over 1.5x the fastest.
bool two_modes(const Summary& s) { return s.count > 1 && s.max > 1.5 * s.min; }
std::string driver(int v) {
  return v == 0 ? std::string("none") : fmt::format("{}.{} ({})", v / 1000, (v % 1000) / 10, v);
}

/// The heading of column `c` on one line ("host us p99"), the group carried from the left.
std::string heading(const Table& t, size_t c) {
  std::string top;
  for (size_t i = 0; i <= c; ++i)
    if (!t.columns[i].top.empty()) top = t.columns[i].top;
  const std::string& bottom = t.columns[c].bottom;
  return top.empty() ? bottom : bottom.empty() ? top : top + " " + bottom;
}

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

}  // namespace

void write_table(std::FILE* out, const Table& t, Format f) {
  const size_t n = t.columns.size();
  auto line = [&](auto cell, const char* sep, const char* begin, const char* end) {
    std::string s = begin;
    for (size_t c = 0; c < n; ++c) s.append(c > 0 ? sep : "").append(cell(c));
    s += end;
    if (f == Format::Text) s.erase(s.find_last_not_of(' ') + 1);
    fmt::print(out, "{}\n", s);
  };
  if (f == Format::Csv) {
    line([&](size_t c) { return csv_cell(heading(t, c)); }, ",", "", "");
    for (const auto& row : t.rows) line([&](size_t c) { return csv_cell(row[c]); }, ",", "", "");
  } else if (f == Format::Markdown) {
    line([&](size_t c) { return heading(t, c); }, " | ", "| ", " |");
    line([&](size_t c) { return std::string(t.columns[c].left ? ":--" : "--:"); }, " | ", "| ",
         " |");
    for (const auto& row : t.rows) line([&](size_t c) { return row[c]; }, " | ", "| ", " |");
  } else {
    std::vector<size_t> w(n);
    for (size_t c = 0; c < n; ++c) {
      w[c] = std::max(t.columns[c].top.size(), t.columns[c].bottom.size());
      for (const auto& row : t.rows) w[c] = std::max(w[c], row[c].size());
    }
    auto aligned = [&](size_t c, const std::string& v) {
      const std::string pad(w[c] - v.size(), ' ');
      return t.columns[c].left ? v + pad : pad + v;
    };
    line([&](size_t c) { return aligned(c, t.columns[c].top); }, "  ", "", "");
    line([&](size_t c) { return aligned(c, t.columns[c].bottom); }, "  ", "", "");
    for (const auto& row : t.rows) line([&](size_t c) { return aligned(c, row[c]); }, "  ", "", "");
  }
}

void print_header(std::FILE* out, const RunInfo& info) {
  fmt::print(out, "linmeta-bench {} ({} build), {}\n", info.version, info.build_type,
             info.date_utc);
  const DeviceInfo& d = info.device;
  if (d.available)
    fmt::print(out, "device: {} (sm_{}{}, {} SMs, {:.1f} GiB), driver {}, runtime {}\n", d.name,
               d.cc_major, d.cc_minor, d.sm_count, static_cast<double>(d.memory_bytes) / (1 << 30),
               driver(d.driver_version), driver(d.runtime_version));
  else
    fmt::print(out, "device: none ({}), driver {}, runtime {}\n", d.reason,
               driver(d.driver_version), driver(d.runtime_version));
  fmt::print(
      out, "host:   {} ({} threads){}\n", info.cpu, info.cpu_threads,
      info.pinned_cpu >= 0 ? fmt::format(", timing thread pinned to CPU {}", info.pinned_cpu) : "");
  const Settings& s = info.settings;
  fmt::print(out, "target: {}. Host: >= {} timed builds and >= {} s per workload after {} warm-up",
             info.cuda_target ? "cuda" : "host", s.host_reps, s.min_time_s, s.warmup);
  if (info.cuda_target)
    fmt::print(out,
               " (staging_slots {}, capture_slots {}). GPU: median of >= {} gated batches of {} "
               "builds (eager) and >= {} of {} graph replays\n",
               s.staging_slots, s.capture_slots, s.eager_batches, s.eager_batch, s.graph_batches,
               s.graph_batch);
  else
    fmt::print(out,
               "\nNOTE: {}: no GPU figures. On the host target 'enq' is the element work done on "
               "the CPU, not a launch.\n",
               d.available ? "--target host" : "no CUDA device");
  if (!info.selection.empty()) fmt::print(out, "selection: {}\n", info.selection);
  fmt::print(out, "\n");
}

Table results_table(std::span<const Result> results, const RunInfo& info) {
  const bool gpu = info.cuda_target;
  Table t;
  t.columns = {{"workload", "", true}, {"host us", "med"}, {"", "p99"},     {"", "stddev"},
               {"", "noise%"},         {"plan", "med"},    {"pack", "med"}, {"enq", "med"}};
  if (gpu)
    t.columns.insert(t.columns.end(), {{"GPU us", "eager"},
                                       {"", "graph"},
                                       {"x floor", "eager"},
                                       {"", "graph"},
                                       {"launch", "/step"},
                                       {"param", "bytes"},
                                       {"prod+build", "graph"},
                                       {"", "PDL"},
                                       {"pinned", "KiB"}});
  t.columns.insert(t.columns.end(), {{"upload", "bytes"}, {"device", "KiB"}});
  if (gpu) t.columns.push_back({"vLLM py", "us"});
  t.columns.push_back({"note", "", true});
  for (const Result& r : results) {
    std::vector<std::string> row = {r.workload->name};
    if (!r.error.empty()) {
      row.resize(t.columns.size(), "-");
      row.back() = "ERROR";
      t.rows.push_back(std::move(row));
      continue;
    }
    std::vector<std::string> notes;
    if (r.total.noisy()) notes.emplace_back("noisy");
    row.insert(row.end(),
               {us(r.total.median), us(r.total.p99), us(r.total.stddev), pct(r.total.noise()),
                us(r.plan.median), us(r.pack.median), us(r.enqueue.median)});
    if (r.gpu) {
      const GpuFigures& g = *r.gpu;
      if (two_modes(g.eager) || two_modes(g.graph) || two_modes(g.floor.eager) ||
          two_modes(g.floor.graph))
        notes.emplace_back("2 modes");
      if (g.gate_timed_out) notes.emplace_back("gate timeout");
      row.insert(
          row.end(),
          {us(g.eager.median), us(g.graph.median), us(ratio(g.eager.median, g.floor.eager.median)),
           us(ratio(g.graph.median, g.floor.graph.median)), fmt::format("{}", g.nodes.kernels),
           fmt::format("{}", r.param_bytes), us(g.producer_graph.median),
           us(g.producer_graph_pdl.median), kib(r.pinned_bytes)});
    }
    row.insert(row.end(), {fmt::format("{}", r.upload_bytes), kib(r.buffer_bytes)});
    if (gpu)
      row.push_back(r.workload->vllm_py_us > 0 ? fmt::format("{:.0f}", r.workload->vllm_py_us)
                                               : "");
    std::string note;
    for (const auto& s : notes) note += (note.empty() ? "" : ", ") + s;
    row.push_back(note);
    t.rows.push_back(std::move(row));
  }
  return t;
}

Table floors_table(const Bench& bench) {
  Table t;
  t.columns = {{"bytes", "N"}, {"host us", "med"},
               {"", "p99"},    {"GPU eager us", "copy+launch"},
               {"", "copy"},   {"GPU graph us", "copy+launch"},
               {"", "copy"}};
  for (const auto& [bytes, f] : bench.floors)
    t.rows.push_back({fmt::format("{}", bytes), us(f.host.median), us(f.host.p99),
                      us(f.eager.median), us(f.copy_eager.median), us(f.graph.median),
                      us(f.copy_graph.median)});
  if (const auto& k = bench.launch_floor)
    t.rows.push_back({"launch", us(k->host.median), us(k->host.p99), us(k->eager.median), "-",
                      us(k->graph.median), "-"});
  return t;
}

void print_notes(std::FILE* out, std::span<const Result> results) {
  bool noisy = false, timeout = false;
  for (const Result& r : results) {
    if (!r.error.empty()) fmt::print(out, "ERROR {}: {}\n", r.workload->name, r.error);
    noisy = noisy || (r.error.empty() && r.total.noisy());
    timeout = timeout || (r.gpu && r.gpu->gate_timed_out);
  }
  if (noisy)
    fmt::print(
        out,
        "WARNING noisy: a host mean above 1.5x its median (some builds were much slower, "
        "e.g. preempted): trust the median, or rerun with --pin-cpu on a quieter machine.\n");
  if (timeout)
    fmt::print(out,
               "WARNING gate timeout: the stream gate gave up (1 s) before the host had enqueued "
               "a batch: those GPU figures include host enqueue time.\n");
  fmt::print(out,
             "noise% = interquartile range / median of the host samples. '2 modes': GPU batches "
             "fell into two modes (slowest > 1.5x fastest; the JSON has min/max).\n");
}

void print_targets(std::FILE* out, std::span<const Result> results, const Bench& bench) {
  std::vector<std::string> lines;
  auto target = [&](const std::string& what, double v, double limit, const char* unit) {
    lines.push_back(fmt::format("{}: {:.2f}{} (target <= {}{}) {}", what, v, unit, limit, unit,
                                v <= limit ? "ok" : "OVER"));
  };
  const auto& k = bench.launch_floor;
  for (const Result& h : results)
    if (h.workload->name == kHeadline && h.gpu && k) {
      target(fmt::format("{}: host {} us / empty launch host {} us", kHeadline, us(h.total.median),
                         us(k->host.median)),
             ratio(h.total.median, k->host.median), kFloorRatio, "x");
      target(fmt::format("{}: GPU in a graph {} us / empty kernel {} us", kHeadline,
                         us(h.gpu->graph.median), us(k->graph.median)),
             ratio(h.gpu->graph.median, k->graph.median), kFloorRatio, "x");
      const GpuFigures& g = *h.gpu;
      lines.push_back(fmt::format(
          "{}: producer kernel + build, per step: graph {} us, with PDL {} us ({:.2f}x); eager "
          "{} us, with PDL {} us ({:.2f}x)",
          kHeadline, us(g.producer_graph.median), us(g.producer_graph_pdl.median),
          ratio(g.producer_graph_pdl.median, g.producer_graph.median), us(g.producer_eager.median),
          us(g.producer_eager_pdl.median),
          ratio(g.producer_eager_pdl.median, g.producer_eager.median)));
    }
  // Least-squares slope of the host medians (total and plan) over a family "prefix B<rows> suffix".
  for (const auto& [prefix, suffix, what] : kFamilies) {
    std::vector<const Result*> pts;
    for (const Result& r : results)
      if (r.error.empty() && r.workload->name.starts_with(prefix) &&
          r.workload->name.ends_with(suffix))
        pts.push_back(&r);
    if (pts.size() < 2) continue;
    auto slope = [&](Summary Result::*figure) {
      const auto n = static_cast<double>(pts.size());
      double mx = 0, my = 0, sxy = 0, sxx = 0;
      for (const Result* r : pts) {
        mx += r->workload->step.num_reqs / n;
        my += (r->*figure).median / n;
      }
      for (const Result* r : pts) {
        sxy += (r->workload->step.num_reqs - mx) * ((r->*figure).median - my);
        sxx += (r->workload->step.num_reqs - mx) * (r->workload->step.num_reqs - mx);
      }
      return sxx > 0 ? 1000.0 * sxy / sxx : std::numeric_limits<double>::quiet_NaN();
    };
    target(fmt::format("host time per row, {} ({} workloads, least squares; plan phase {:.2f} "
                       "ns/row)",
                       what, pts.size(), slope(&Result::plan)),
           slope(&Result::total), kNsPerRow, " ns/row");
  }
  for (const Result& r : results)
    if (r.error.empty() && r.workload->vllm_py_us > 0)
      lines.push_back(fmt::format("{}: vLLM Python builder {:.0f} us / {} us = {:.0f}x",
                                  r.workload->name, r.workload->vllm_py_us, us(r.total.median),
                                  r.workload->vllm_py_us / r.total.median));
  if (lines.empty()) return;
  fmt::print(out, "\nReference targets (issue 10, H200, cuda target):\n");
  for (const auto& l : lines) fmt::print(out, "  {}\n", l);
}

std::string to_json(std::span<const Result> results, const RunInfo& info, const Bench& bench) {
  json j = {
      {"bench", "linmeta-bench"},
      {"version", info.version},
      {"build_type", info.build_type},
      {"date_utc", info.date_utc},
      {"target", info.cuda_target ? "cuda" : "host"},
      {"selection", info.selection},
      {"wall_s", info.wall_s},
      {"host", {{"cpu", info.cpu}, {"threads", info.cpu_threads}, {"pinned_cpu", info.pinned_cpu}}},
      {"device", info.device},
      {"settings", info.settings},
      {"workloads", json::array()},
      {"floors", json::array()}};
  for (const Result& r : results) {
    const Workload& w = *r.workload;
    json o = {{"name", w.name},
              {"builder", names::builder_kind_name(w.step.kind)},
              {"groups", w.groups()},
              {"headline", w.headline},
              {"config", w.step.config},
              {"step",
               {{"spec_rows", w.spec_rows},
                {"decode_rows", w.decode_rows},
                {"prefill_rows", w.prefill_rows},
                {"prefill_len", w.prefill_len},
                {"rows", w.step.num_reqs},
                {"tokens", w.step.num_actual_tokens},
                {"capture", w.step.capture}}}};
    if (!r.error.empty()) {
      o["error"] = r.error;
      j["workloads"].push_back(o);
      continue;
    }
    o.update({{"metadata", r.counts},
              {"host_us",
               {{"total", r.total}, {"plan", r.plan}, {"pack", r.pack}, {"enqueue", r.enqueue}}},
              {"gpu_us", nullptr},
              {"graph_nodes", nullptr},
              {"upload_bytes", r.upload_bytes},
              {"pinned_bytes", r.pinned_bytes},
              {"buffer_bytes", r.buffer_bytes},
              {"param_bytes", info.cuda_target ? json(r.param_bytes) : json(nullptr)},
              {"vllm_py_us", w.vllm_py_us > 0 ? json(w.vllm_py_us) : json(nullptr)}});
    if (r.gpu) {
      const GpuFigures& g = *r.gpu;
      o["gpu_us"] = {{"eager", g.eager},
                     {"eager_ungated", g.eager_ungated},
                     {"graph", g.graph},
                     {"floor", g.floor},
                     {"x_floor_eager", ratio(g.eager.median, g.floor.eager.median)},
                     {"x_floor_graph", ratio(g.graph.median, g.floor.graph.median)},
                     {"producer_eager", g.producer_eager},
                     {"producer_graph", g.producer_graph},
                     {"producer_eager_pdl", g.producer_eager_pdl},
                     {"producer_graph_pdl", g.producer_graph_pdl},
                     {"gate_timed_out", g.gate_timed_out}};
      o["graph_nodes"] = g.nodes;
      if (w.vllm_py_us > 0) o["speedup_vs_vllm_py"] = w.vllm_py_us / r.total.median;
    }
    j["workloads"].push_back(o);
  }
  auto floor_json = [&](const Floor& f, const json& bytes) {
    json o = f;
    o["bytes"] = bytes;
    j["floors"].push_back(o);
  };
  for (const auto& [bytes, f] : bench.floors) floor_json(f, bytes);
  if (bench.launch_floor) floor_json(*bench.launch_floor, nullptr);
  return j.dump(2) + "\n";
}

Table compare_table(const std::string& a_path, const std::string& b_path) {
  auto load = [](const std::string& path) {
    std::ifstream in(path);
    if (!in) throw Error("cannot open " + path);
    try {
      return json::parse(in).at("workloads");
    } catch (const json::exception& e) {
      throw Error(path + ": not a linmeta-bench --json file (" + e.what() + ")");
    }
  };
  const json a = load(a_path), b = load(b_path);
  Table t;
  t.columns = {
      {"workload", "", true}, {"host us", "A"},      {"", "B"}, {"", "B/A"}, {"", "noise%"},
      {"", "change", true},   {"GPU graph us", "A"}, {"", "B"}, {"", "B/A"}, {"", "noise%"},
      {"", "", true}};
  // One figure: A, B, B / A, the larger relative noise of the two, and whether the ratio is
  // outside that noise.
  auto figure = [](const json& x, const json& y, std::vector<std::string>& row) {
    if (!x.is_object() || !y.is_object()) {
      row.insert(row.end(), {"-", "-", "-", "-", ""});
      return;
    }
    const Summary sa = x.get<Summary>(), sb = y.get<Summary>();
    const double r = ratio(sb.median, sa.median), noise = std::max(sa.noise(), sb.noise());
    const bool known = sa.p75 > 0 && sb.p75 > 0;  // files before noise figures lack p25 / p75
    row.insert(row.end(),
               {us(sa.median), us(sb.median), fmt::format("{:.3f}", r), known ? pct(noise) : "?",
                !known || std::abs(r - 1) <= noise ? ""
                : r < 1                            ? "faster"
                                                   : "slower"});
  };
  for (const json& wa : a)
    for (const json& wb : b) {
      if (wa.at("name") != wb.at("name") || wa.contains("error") || wb.contains("error")) continue;
      std::vector<std::string> row = {wa.at("name").get<std::string>()};
      figure(wa.at("host_us").at("total"), wb.at("host_us").at("total"), row);
      const json& ga = wa.value("gpu_us", json());
      const json& gb = wb.value("gpu_us", json());
      figure(ga.is_object() ? ga.at("graph") : json(), gb.is_object() ? gb.at("graph") : json(),
             row);
      t.rows.push_back(std::move(row));
    }
  return t;
}

}  // namespace bench
}  // namespace linmeta
