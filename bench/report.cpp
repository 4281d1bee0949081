#include "report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include "json_writer.hpp"

namespace linmeta::bench {

namespace {

constexpr std::string_view kNone = "-";

// Reference targets on an H200 (the issue): headline step, decode-only B=1024, per-row slope.
constexpr std::string_view kHeadline = "gdn/spec-k3/B256/align/G4/fullgraph";
constexpr std::string_view kDecode1024 = "gdn/decode/B1024/none/G1/fullgraph";
// Families fitted for the per-row slope: prefix, suffix around "B<rows>".
constexpr std::string_view kDecodeFamily[2] = {"gdn/decode/B", "/none/G1/fullgraph"};
constexpr std::string_view kSpecFamily[2] = {"gdn/spec-k3/B", "/align/G1/fullgraph"};
constexpr double kHeadlineHostUs = 10, kHeadlineGraphUs = 5, kHeadlineFloorRatio = 1.5;
constexpr double kDecode1024HostUs = 8, kNsPerRow = 5;

std::string us(double v) { return fmt::format("{:.2f}", v); }

/// Batches in two modes: the slowest batch over 1.5x the fastest (device timings are
/// otherwise within a few percent).
bool two_modes(const Summary& s) { return s.count > 1 && s.max > 1.5 * s.min; }
std::string mark(bool two) { return two ? "*" : ""; }
std::string kib(int64_t bytes) {
  return fmt::format("{:.1f}", static_cast<double>(bytes) / 1024.0);
}
double ratio(double a, double b) {
  return b > 0 ? a / b : std::numeric_limits<double>::quiet_NaN();
}

std::string driver(int v) {
  return v == 0 ? std::string("none") : fmt::format("{}.{} ({})", v / 1000, (v % 1000) / 10, v);
}

const Result* find(std::span<const Result> results, std::string_view name) {
  for (const Result& r : results)
    if (r.workload->name == name && r.error.empty()) return &r;
  return nullptr;
}

struct Column {
  std::string_view top, bottom;
  bool left = false;
};

void print_rows(std::FILE* out, const std::vector<Column>& cols,
                const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(cols.size());
  for (size_t c = 0; c < cols.size(); ++c) {
    width[c] = std::max(cols[c].top.size(), cols[c].bottom.size());
    for (const auto& row : rows) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](auto cell) {
    std::string s;
    for (size_t c = 0; c < cols.size(); ++c) {
      if (c > 0) s += "  ";
      const std::string_view v = cell(c);
      const std::string pad(width[c] - v.size(), ' ');
      s += cols[c].left ? std::string(v) + pad : pad + std::string(v);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    fmt::print(out, "{}\n", s);
  };
  line([&](size_t c) { return cols[c].top; });
  line([&](size_t c) { return cols[c].bottom; });
  for (const auto& row : rows) line([&](size_t c) { return std::string_view(row[c]); });
}

void summary_json(JsonWriter& j, std::string_view key, const Summary& s) {
  j.key(key).begin_object();
  j.field("median", s.median).field("p99", s.p99).field("mean", s.mean);
  j.field("min", s.min).field("max", s.max);
  j.end_object();
}

const char* mode_name(CacheMode m) {
  return m == CacheMode::None ? "none" : m == CacheMode::All ? "all" : "align";
}

}  // namespace

void print_header(std::FILE* out, const RunInfo& info) {
  fmt::print(out, "linmeta-bench {} ({} build), {}\n", info.version, info.build_type,
             info.date_utc);
  const DeviceInfo& d = info.device;
  if (d.available) {
    fmt::print(out, "device: {} (sm_{}{}, {} SMs, {:.1f} GiB), driver {}, runtime {}\n", d.name,
               d.cc_major, d.cc_minor, d.sm_count,
               static_cast<double>(d.memory_bytes) / (1024.0 * 1024.0 * 1024.0),
               driver(d.driver_version), driver(d.runtime_version));
  } else {
    fmt::print(out, "device: none ({}), driver {}, runtime {}\n", d.reason,
               driver(d.driver_version), driver(d.runtime_version));
  }
  fmt::print(
      out, "host:   {} ({} threads){}\n", info.cpu, info.cpu_threads,
      info.pinned_cpu >= 0 ? fmt::format(", timing thread pinned to CPU {}", info.pinned_cpu) : "");
  const Settings& s = info.settings;
  if (info.cuda_target) {
    fmt::print(
        out,
        "target: cuda. Host: {} timed builds per workload after {} warm-up (staging_slots {}, "
        "capture_slots {}). GPU: median of {} gated batches of {} builds (eager) and {} of {} "
        "graph replays\n",
        s.host_reps, s.warmup, s.staging_slots, s.capture_slots, s.eager_batches, s.eager_batch,
        s.graph_batches, s.graph_batch);
  } else {
    fmt::print(out, "target: host. {} timed builds per workload after {} warm-up\n", s.host_reps,
               s.warmup);
    if (!d.available)
      fmt::print(
          out,
          "NOTE: no CUDA device: GPU figures skipped, host target only (GPU columns show -).\n");
    else
      fmt::print(out, "NOTE: --target host: GPU figures skipped (GPU columns show -).\n");
    fmt::print(out,
               "      On the host target 'enq' is the element work done on the CPU, not a copy + "
               "launch.\n");
  }
  if (!info.filter.empty()) fmt::print(out, "filter: {}\n", info.filter);
  fmt::print(out, "\n");
}

void print_table(std::FILE* out, std::span<const Result> results, const RunInfo& info) {
  const std::vector<Column> cols = {
      {"workload", "", true}, {"host us", "med"}, {"", "p99"},         {"plan", "med"},
      {"pack", "med"},        {"enq", "med"},     {"GPU us", "eager"}, {"", "graph"},
      {"x floor", "eager"},   {"", "graph"},      {"upload", "bytes"}, {"launch", "/step"},
      {"pinned", "KiB"},      {"device", "KiB"},  {"vLLM py", "us"},
  };
  std::vector<std::vector<std::string>> rows;
  bool any_two_modes = false;
  for (const Result& r : results) {
    const Workload& w = *r.workload;
    if (!r.error.empty()) {
      std::vector<std::string> row(cols.size(), std::string(kNone));
      row[0] = w.name;
      row[1] = "ERROR";
      rows.push_back(std::move(row));
      continue;
    }
    std::vector<std::string> row = {w.name,
                                    us(r.total.median),
                                    us(r.total.p99),
                                    us(r.plan.median),
                                    us(r.pack.median),
                                    us(r.enqueue.median)};
    if (r.gpu) {
      const GpuFigures& g = *r.gpu;
      const bool eager2 = two_modes(g.eager_us), graph2 = two_modes(g.graph_us);
      const bool floor_eager2 = two_modes(g.floor.eager_us),
                 floor_graph2 = two_modes(g.floor.graph_us);
      any_two_modes = any_two_modes || eager2 || graph2 || floor_eager2 || floor_graph2;
      row.push_back(us(g.eager_us.median) + mark(eager2));
      row.push_back(us(g.graph_us.median) + mark(graph2));
      row.push_back(fmt::format("{:.2f}", ratio(g.eager_us.median, g.floor.eager_us.median)) +
                    mark(eager2 || floor_eager2));
      row.push_back(fmt::format("{:.2f}", ratio(g.graph_us.median, g.floor.graph_us.median)) +
                    mark(graph2 || floor_graph2));
    } else {
      row.insert(row.end(), 4, std::string(kNone));
    }
    row.push_back(fmt::format("{}", r.upload_bytes));
    row.push_back(r.gpu ? fmt::format("{}", r.gpu->nodes.kernels) : std::string(kNone));
    row.push_back(info.cuda_target ? kib(r.pinned_bytes) : std::string(kNone));
    row.push_back(kib(r.buffer_bytes));
    row.push_back(w.vllm_py_us > 0 ? fmt::format("{:.0f}", w.vllm_py_us) : std::string());
    rows.push_back(std::move(row));
  }
  print_rows(out, cols, rows);
  if (any_two_modes)
    fmt::print(
        out,
        "* its timed batches fell into two modes (slowest batch > 1.5x the fastest; e.g. 8.2 vs "
        "16.4 us): the\n  median is the more frequent mode. JSON has min/max per figure and "
        "x_floor_*_best (fastest batch over fastest floor batch).\n");
  for (const Result& r : results)
    if (!r.error.empty()) fmt::print(out, "ERROR {}: {}\n", r.workload->name, r.error);
  for (const Result& r : results)
    if (r.gpu && r.gpu->gate_timed_out)
      fmt::print(
          out, "WARNING {}: the stream gate timed out; its GPU figures include host enqueue time\n",
          r.workload->name);
}

void print_targets(std::FILE* out, std::span<const Result> results, const RunInfo& info) {
  std::vector<std::string> lines;
  auto verdict = [&](double v, double limit) {
    if (!info.cuda_target) return std::string();
    return v <= limit ? std::string("  ok") : std::string("  OVER");
  };
  if (const Result* h = find(results, kHeadline)) {
    lines.push_back(fmt::format("{}: host {} us (target <= {:.0f}){}", kHeadline,
                                us(h->total.median), kHeadlineHostUs,
                                verdict(h->total.median, kHeadlineHostUs)));
    if (h->gpu) {
      const GpuFigures& g = *h->gpu;
      const double x = ratio(g.graph_us.median, g.floor.graph_us.median);
      const double best = ratio(g.graph_us.min, g.floor.graph_us.min);
      lines.push_back(
          fmt::format("{}: GPU in a graph {} us (target <= {:.0f}){}, {:.2f}x the floor "
                      "(target <= {:.1f}){}",
                      kHeadline, us(g.graph_us.median), kHeadlineGraphUs,
                      verdict(g.graph_us.median, kHeadlineGraphUs), x, kHeadlineFloorRatio,
                      verdict(x, kHeadlineFloorRatio)));
      lines.push_back(fmt::format(
          "{}: fastest batch {} us in a graph, floor {} us ({} bytes + launch), "
          "{:.2f}x",
          kHeadline, us(g.graph_us.min), us(g.floor.graph_us.min), h->upload_bytes, best));
    }
  }
  if (const Result* d = find(results, kDecode1024))
    lines.push_back(fmt::format("{}: host {} us (target <= {:.0f}){}", kDecode1024,
                                us(d->total.median), kDecode1024HostUs,
                                verdict(d->total.median, kDecode1024HostUs)));
  // Least-squares slope of the host medians over one family of workloads (names
  // prefix + "B<rows>" + suffix), total and plan phase.
  auto slope = [&](std::string_view prefix, std::string_view suffix, const char* what) {
    std::vector<const Result*> pts;
    for (const Result& r : results) {
      const std::string_view n = r.workload->name;
      if (r.error.empty() && n.size() > prefix.size() + suffix.size() && n.starts_with(prefix) &&
          n.ends_with(suffix))
        pts.push_back(&r);
    }
    if (pts.size() < 2) return;
    auto fit = [&](auto value) {
      double mx = 0, my = 0;
      for (const Result* r : pts) {
        mx += r->rows;
        my += value(*r);
      }
      mx /= static_cast<double>(pts.size());
      my /= static_cast<double>(pts.size());
      double sxy = 0, sxx = 0;
      for (const Result* r : pts) {
        sxy += (r->rows - mx) * (value(*r) - my);
        sxx += (r->rows - mx) * (r->rows - mx);
      }
      return sxx > 0 ? 1000.0 * sxy / sxx : std::numeric_limits<double>::quiet_NaN();
    };
    const double total = fit([](const Result& r) { return r.total.median; });
    const double plan = fit([](const Result& r) { return r.plan.median; });
    std::string rows;
    for (const Result* r : pts) rows += fmt::format("{}B{}", rows.empty() ? "" : ",", r->rows);
    lines.push_back(fmt::format(
        "host time per row, {} ({}, least squares): {:.2f} ns/row (target <= {:.0f}){}; "
        "plan phase {:.2f} ns/row",
        what, rows, total, kNsPerRow, verdict(total, kNsPerRow), plan));
  };
  slope(kDecodeFamily[0], kDecodeFamily[1], "decode");
  slope(kSpecFamily[0], kSpecFamily[1], "spec-k3 align");
  for (const Result& r : results)
    if (r.error.empty() && r.workload->vllm_py_us > 0)
      lines.push_back(fmt::format("{}: vLLM Python builder {:.0f} us / {} us = {:.0f}x",
                                  r.workload->name, r.workload->vllm_py_us, us(r.total.median),
                                  r.workload->vllm_py_us / r.total.median));
  if (lines.empty()) return;
  fmt::print(out, "\nReference targets (H200, cuda target){}:\n",
             info.cuda_target ? "" : " - not comparable: this run is the host target");
  for (const auto& l : lines) fmt::print(out, "  {}\n", l);
}

void print_floors(std::FILE* out, const std::map<int64_t, Floor>& floors,
                  const std::optional<Floor>& launch_floor) {
  if (floors.empty()) return;
  fmt::print(out,
             "\nFloors (per step: one cudaMemcpyAsync of N pinned bytes + one empty kernel launch; "
             "'copy' = the copy alone; last row = the launch alone):\n");
  const std::vector<Column> cols = {
      {"bytes", "N"}, {"host us", "med"},
      {"", "p99"},    {"GPU eager us", "copy+launch"},
      {"", "copy"},   {"GPU graph us", "copy+launch"},
      {"", "copy"},
  };
  std::vector<std::vector<std::string>> rows;
  for (const auto& [bytes, f] : floors)
    rows.push_back({fmt::format("{}", bytes), us(f.host_us.median), us(f.host_us.p99),
                    us(f.eager_us.median) + mark(two_modes(f.eager_us)),
                    us(f.copy_eager_us.median) + mark(two_modes(f.copy_eager_us)),
                    us(f.graph_us.median) + mark(two_modes(f.graph_us)),
                    us(f.copy_graph_us.median) + mark(two_modes(f.copy_graph_us))});
  if (launch_floor) {
    const Floor& k = *launch_floor;
    rows.push_back({"launch", us(k.host_us.median), us(k.host_us.p99), us(k.eager_us.median),
                    std::string(kNone), us(k.graph_us.median), std::string(kNone)});
  }
  print_rows(out, cols, rows);
}

std::string to_json(std::span<const Result> results, const RunInfo& info,
                    const std::map<int64_t, Floor>& floors,
                    const std::optional<Floor>& launch_floor) {
  JsonWriter j;
  j.begin_object();
  j.field("bench", "linmeta-bench")
      .field("version", info.version)
      .field("build_type", info.build_type);
  j.field("date_utc", info.date_utc).field("target", info.cuda_target ? "cuda" : "host");
  j.field("filter", info.filter).field("wall_s", info.wall_s);
  j.field("gpu_figures_skipped", !info.cuda_target);
  j.key("host")
      .begin_object()
      .field("cpu", info.cpu)
      .field("threads", static_cast<int32_t>(info.cpu_threads));
  j.field("pinned_cpu", info.pinned_cpu).end_object();
  const DeviceInfo& d = info.device;
  j.key("device").begin_object();
  j.field("available", d.available);
  if (d.available) {
    j.field("name", d.name)
        .field("compute_capability", fmt::format("{}.{}", d.cc_major, d.cc_minor));
    j.field("sm_count", d.sm_count)
        .field("clock_khz", d.clock_khz)
        .field("memory_bytes", d.memory_bytes);
  } else {
    j.field("gpu_skipped_reason", d.reason);
  }
  j.field("driver_version", d.driver_version).field("runtime_version", d.runtime_version);
  j.end_object();
  const Settings& s = info.settings;
  j.key("settings").begin_object();
  j.field("host_reps", s.host_reps).field("warmup", s.warmup);
  j.field("eager_batch", s.eager_batch).field("eager_batches", s.eager_batches);
  j.field("graph_batch", s.graph_batch).field("graph_batches", s.graph_batches);
  j.field("staging_slots", s.staging_slots).field("capture_slots", s.capture_slots);
  j.end_object();

  j.key("workloads").begin_array();
  for (const Result& r : results) {
    const Workload& w = *r.workload;
    const Config& c = w.config;
    j.begin_object();
    j.field("name", w.name).field("builder", w.kind == BuilderKind::Gdn ? "gdn" : "kda");
    j.field("groups", w.groups).field("headline", w.headline);
    j.key("config").begin_object();
    j.field("num_spec", c.num_spec).field("max_num_seqs", c.max_num_seqs);
    j.field("max_num_batched_tokens", c.max_num_batched_tokens)
        .field("full_cuda_graph", c.full_cuda_graph);
    j.field("mamba_cache_mode", mode_name(c.mamba_cache_mode)).field("block_size", c.block_size);
    j.field("num_speculative_blocks", c.num_speculative_blocks)
        .field("chunk_metadata", c.chunk_metadata);
    j.field("use_recoverssm", c.use_recoverssm);
    j.field("num_prefill_checkpoint_blocks", c.num_prefill_checkpoint_blocks);
    j.end_object();
    j.key("step").begin_object();
    j.field("spec_rows", w.shape.spec_rows).field("decode_rows", w.shape.decode_rows);
    j.field("prefill_rows", w.shape.prefill_rows).field("prefill_len", w.shape.prefill_len);
    j.field("pad_rows", w.shape.pad_rows).field("rows", r.rows).field("tokens", r.tokens);
    j.end_object();
    if (!r.error.empty()) {
      j.field("error", r.error);
      j.end_object();
      continue;
    }
    j.key("metadata").begin_object();
    j.field("num_decodes", r.num_decodes).field("num_decode_tokens", r.num_decode_tokens);
    j.field("num_spec_decodes", r.num_spec_decodes)
        .field("num_spec_decode_tokens", r.num_spec_decode_tokens);
    j.field("num_prefills", r.num_prefills).field("num_prefill_tokens", r.num_prefill_tokens);
    j.end_object();
    j.key("host_us").begin_object();
    summary_json(j, "total", r.total);
    summary_json(j, "plan", r.plan);
    summary_json(j, "pack", r.pack);
    summary_json(j, "enqueue", r.enqueue);
    j.end_object();
    j.key("gpu_us");
    if (r.gpu) {
      const GpuFigures& g = *r.gpu;
      j.begin_object();
      summary_json(j, "eager", g.eager_us);
      summary_json(j, "eager_ungated", g.eager_ungated_us);
      summary_json(j, "graph", g.graph_us);
      j.field("floor_eager", g.floor.eager_us.median).field("floor_graph", g.floor.graph_us.median);
      j.field("x_floor_eager", ratio(g.eager_us.median, g.floor.eager_us.median));
      j.field("x_floor_graph", ratio(g.graph_us.median, g.floor.graph_us.median));
      j.field("x_floor_eager_best", ratio(g.eager_us.min, g.floor.eager_us.min));
      j.field("x_floor_graph_best", ratio(g.graph_us.min, g.floor.graph_us.min));
      j.field("gate_timed_out", g.gate_timed_out);
      j.end_object();
      j.field("launches_per_step", g.nodes.kernels).field("memcpys_per_step", g.nodes.memcpys);
      j.field("other_graph_nodes", g.nodes.others);
    } else {
      j.null();
      j.key("launches_per_step").null();
    }
    j.field("upload_bytes", r.upload_bytes);
    j.field("pinned_bytes", r.pinned_bytes).field("buffer_bytes", r.buffer_bytes);
    j.key("vllm_py_us");
    if (w.vllm_py_us > 0) {
      j.value(w.vllm_py_us);
      j.field("speedup_vs_vllm_py", w.vllm_py_us / r.total.median);
    } else {
      j.null();
    }
    j.end_object();
  }
  j.end_array();

  j.key("floors").begin_array();
  auto floor_json = [&](std::optional<int64_t> bytes, const Floor& f) {
    j.begin_object();
    j.key("bytes");
    if (bytes)
      j.value(*bytes);
    else
      j.null();
    summary_json(j, "host", f.host_us);
    summary_json(j, "eager", f.eager_us);
    summary_json(j, "graph", f.graph_us);
    if (bytes) {
      summary_json(j, "copy_eager", f.copy_eager_us);
      summary_json(j, "copy_graph", f.copy_graph_us);
    }
    j.end_object();
  };
  for (const auto& [bytes, f] : floors) floor_json(bytes, f);
  if (launch_floor) floor_json(std::nullopt, *launch_floor);
  j.end_array();
  j.end_object();
  return j.str() + "\n";
}

}  // namespace linmeta::bench
