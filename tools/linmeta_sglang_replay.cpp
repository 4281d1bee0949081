// linmeta-sglang-replay: checks linmeta's SGLang kinds against SGLang cases (format
// "sglang-case/1", docs/sglang-cases.md), each written by SGLang 0.5.23's own code. Every
// case's step is built with the kind, on the host or cuda target, and every field of every
// object SGLang produced is compared: the metadata (dtype, shape, values), the fields SGLang
// leaves at their defaults, the graph entries' aliasing of the backend's static buffers (and
// the elements they must leave alone), and the side effects on the batch. The backends' own
// state (GDN's routing, ...) is Python's and tests/sglang/linmeta_diff.py's, except KDA's
// prefill-graph tables: a prefill_graph case's KDAPrefillGraphMetadata buffers are allocated
// here as SGLang's allocate makes them, filled by the build and compared table by table.
//
//   linmeta-sglang-replay check FILE... [--target host|cuda] [--allow-skip] [--quiet]
//
// Exit status 0 when every case matches (a case where SGLang raised must be rejected).
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cuda_check.hpp"
#include "linmeta/builder.hpp"
#include "linmeta/error.hpp"
#include "linmeta/names.hpp"
#include "linmeta/outputs.hpp"
#include "linmeta/sglang.hpp"

namespace {

using json = nlohmann::json;
using linmeta::Array;
using linmeta::BuilderKind;
using linmeta::DType;
using linmeta::SglangEntry;
using linmeta::SglangMode;
using linmeta::Target;
using linmeta::tools::cuda_check;

constexpr int64_t kUnwritten = -7777;  // the harness's fill of the graph buffers

struct Mismatch {
  std::string what;
};
[[noreturn]] void differ(const std::string& what) { throw Mismatch{what}; }

/// Target memory of one case: host vectors, or device copies on the cuda target.
class Mem {
 public:
  explicit Mem(Target t) : target_(t) {}
  Mem(const Mem&) = delete;
  Mem& operator=(const Mem&) = delete;
  ~Mem() {
    for (void* p : device_) cudaFree(p);
  }
  template <class T>
  T* put(const std::vector<T>& v) {
    const size_t bytes = std::max<size_t>(1, v.size()) * sizeof(T);
    if (target_ == Target::Host) {
      auto& h = host_.emplace_back(bytes);
      if (!v.empty()) std::memcpy(h.data(), v.data(), v.size() * sizeof(T));
      return reinterpret_cast<T*>(h.data());
    }
    void* p = nullptr;
    cuda_check(cudaMalloc(&p, bytes), "cudaMalloc");
    device_.push_back(p);
    if (!v.empty())
      cuda_check(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice),
                 "cudaMemcpy");
    return static_cast<T*>(p);
  }
  /// `n` elements of target memory at `p` as int64 (host memory when `host`).
  std::vector<int64_t> read(const void* p, DType dtype, int64_t n, bool host) const {
    std::vector<char> raw(static_cast<size_t>(n * linmeta::dtype_size(dtype)));
    if (n > 0) {
      if (host || target_ == Target::Host)
        std::memcpy(raw.data(), p, raw.size());
      else
        cuda_check(cudaMemcpy(raw.data(), p, raw.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
    }
    std::vector<int64_t> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const char* e = raw.data() + i * linmeta::dtype_size(dtype);
      switch (dtype) {
        case DType::Bool:
          out[static_cast<size_t>(i)] = *reinterpret_cast<const bool*>(e) ? 1 : 0;
          break;
        case DType::Int32:
          out[static_cast<size_t>(i)] = *reinterpret_cast<const int32_t*>(e);
          break;
        case DType::Int64:
          out[static_cast<size_t>(i)] = *reinterpret_cast<const int64_t*>(e);
          break;
      }
    }
    return out;
  }

 private:
  Target target_;
  std::vector<std::vector<std::byte>> host_;
  std::vector<void*> device_;
};

SglangMode mode_of(const std::string& s) {
  static const std::map<std::string, SglangMode> m{{"EXTEND", SglangMode::Extend},
                                                   {"DECODE", SglangMode::Decode},
                                                   {"MIXED", SglangMode::Mixed},
                                                   {"IDLE", SglangMode::Idle},
                                                   {"TARGET_VERIFY", SglangMode::TargetVerify},
                                                   {"DRAFT_EXTEND_V2", SglangMode::DraftExtendV2}};
  const auto it = m.find(s);
  if (it == m.end()) throw std::runtime_error("unknown forward mode " + s);
  return it->second;
}

template <class T>
std::vector<T> ints(const json& j) {
  std::vector<T> v;
  for (const auto& x : j) v.push_back(x.is_boolean() ? T(x.get<bool>()) : x.get<T>());
  return v;
}

std::vector<int64_t> flat(const json& rows) {
  std::vector<int64_t> v;
  for (const auto& r : rows)
    for (const auto& x : r) v.push_back(x.get<int64_t>());
  return v;
}

BuilderKind kind_of(const std::string& backend) {
  if (backend == "mamba2") return BuilderKind::SglangMamba2;
  if (backend == "gdn") return BuilderKind::SglangGdn;
  if (backend == "lightning") return BuilderKind::SglangLightning;
  if (backend == "kda") return BuilderKind::SglangKda;
  if (backend == "short_conv") return BuilderKind::SglangShortConv;
  throw std::runtime_error("no linmeta kind for SGLang backend " + backend);
}

const char* dtype_str(DType d) {
  return d == DType::Bool ? "bool" : d == DType::Int32 ? "int32" : "int64";
}

/// One case: build, compare. Builders are kept per (backend, configuration).
class Checker {
 public:
  explicit Checker(Target t) : target_(t) {}

  void check(const json& c) {
    if (c.value("format", "") != "sglang-case/1") differ("format is not sglang-case/1");
    const json& cfg = c.at("config");
    const BuilderKind kind = kind_of(c.at("backend").get<std::string>());
    linmeta::MetadataBuilder& b = builder(kind, cfg);
    const json& in = c.at("input");
    const std::string mode = c.at("mode").get<std::string>();
    Mem mem(target_);

    linmeta::SglangStep s;
    s.entry = mode == "capture"         ? SglangEntry::GraphCapture
              : mode == "replay"        ? SglangEntry::GraphReplay
              : mode == "cpu_capture"   ? SglangEntry::CpuGraphCapture
              : mode == "prefill_graph" ? SglangEntry::PrefillGraph
                                        : SglangEntry::Eager;
    s.forward_mode = mode_of(in.at("forward_mode").get<std::string>());
    s.logical_mode = s.forward_mode;
    const bool extendish = s.forward_mode == SglangMode::Extend ||
                           s.forward_mode == SglangMode::Mixed ||
                           s.forward_mode == SglangMode::TargetVerify;
    if (in.contains("original_forward_mode") &&
        in.at("original_forward_mode").get<std::string>() == "DECODE" && extendish)
      s.logical_mode = SglangMode::Decode;
    const auto rpi = ints<int64_t>(in.at("req_pool_indices"));
    const auto slots = ints<int32_t>(in.at("mamba_slots"));
    const auto bs = static_cast<int32_t>(rpi.size());
    s.batch_size = bs;
    std::vector<int32_t> map(static_cast<size_t>(cfg.at("pool_size").get<int32_t>()) + 1, 0);
    for (size_t i = 0; i < slots.size(); ++i) map[static_cast<size_t>(rpi[i])] = slots[i];
    s.mamba_map = mem.put(map);
    s.mamba_map_len = static_cast<int64_t>(map.size());
    int64_t* rpi_dev = mem.put(rpi);
    s.req_pool_indices = rpi_dev;
    const auto seq = ints<int64_t>(in.at("seq_lens"));
    s.seq_lens = seq;
    std::vector<int32_t> ext, prefix;
    if (in.contains("extend_seq_lens")) {
      ext = ints<int32_t>(in.at("extend_seq_lens"));
      prefix = ints<int32_t>(in.at("extend_prefix_lens"));
      s.extend_seq_lens = ext;
      s.extend_prefix_lens = prefix;
      int32_t total = 0;
      for (const int32_t e : ext) total += e;
      s.extend_num_tokens = total;
    }
    s.cache_chunk_size = cfg.at("cache_chunk_size").get<int32_t>();
    s.conv_window = cfg.at("conv_kernel").get<int32_t>() - 1;
    s.topk = cfg.at("topk").get<int32_t>();
    s.conv_block_table = true;  // the harness answers GDN's is_cuda() True
    s.host_mirrors = true;      // ShortConvAttnBackend.needs_extend_host_mirrors
    int32_t k = 1;
    std::vector<int64_t> rnt, rns;
    if (in.contains("spec")) {
      const json& sp = in.at("spec");
      s.has_spec_info = true;
      k = s.draft_token_num = sp.at("draft_token_num").get<int32_t>();
      if (sp.contains("retrieve_next_token")) {
        rnt = flat(sp.at("retrieve_next_token"));
        rns = flat(sp.at("retrieve_next_sibling"));
        s.retrieve_next_token = mem.put(rnt);
        s.retrieve_next_sibling = mem.put(rns);
        s.retrieve_rows = static_cast<int32_t>(sp.at("retrieve_next_token").size());
      }
    }
    s.num_tokens = s.forward_mode == SglangMode::TargetVerify ? bs * k
                   : s.extend_num_tokens >= 0                 ? s.extend_num_tokens
                                                              : bs;
    if (in.contains("num_padding") && !in.at("num_padding").is_null())
      s.num_padding = in.at("num_padding").get<int32_t>();
    std::vector<uint8_t> mask_bytes;
    std::unique_ptr<bool[]> mask;
    std::vector<int64_t> track_seqlens;
    if (in.contains("track")) {
      const json& t = in.at("track");
      s.track = true;
      const auto m = ints<int32_t>(t.at("mask"));
      mask = std::make_unique<bool[]>(m.size());
      for (size_t i = 0; i < m.size(); ++i) mask[i] = m[i] != 0;
      s.track_mask = std::span<const bool>(mask.get(), m.size());
      s.track_indices = mem.put(ints<int64_t>(t.at("indices")));
      if (!t.at("seqlens").is_null()) {
        track_seqlens = ints<int64_t>(t.at("seqlens"));
        s.track_seqlens = track_seqlens;
      }
      // The scheduler's host lists (mamba_prefill_track_mask_cpu, mamba_track_seqlens_cpu).
      s.track_lists = t.value("cpu_lists", false) && !t.at("seqlens").is_null();
    }
    if (in.contains("original_batch_size"))
      s.original_batch_size = in.at("original_batch_size").get<int32_t>();
    std::optional<PrefillGraphBuffers> pg;
    if (s.entry == SglangEntry::PrefillGraph) pg.emplace(s, in, c, mem);
    // The backend's graph buffers of this batch size, filled as the harness fills them.
    const bool graph = s.entry != SglangEntry::Eager && !pg;
    const int32_t gk = std::max(1, cfg.at("draft_tokens").get<int32_t>());
    std::map<std::string, std::pair<const void*, DType>> buffers;
    if (graph) {
      const auto fill32 = [&](size_t n) {
        return mem.put(std::vector<int32_t>(n, static_cast<int32_t>(kUnwritten)));
      };
      s.graph.state_indices = fill32(static_cast<size_t>(bs));
      s.graph.query_start_loc = fill32(static_cast<size_t>(bs) + 1);
      s.graph.track_indices = mem.put(std::vector<int64_t>(
          static_cast<size_t>(cfg.at("graph_max_bs").get<int32_t>()), kUnwritten));
      s.graph.retrieve_next_token = fill32(static_cast<size_t>(bs * gk));
      s.graph.retrieve_next_sibling = fill32(static_cast<size_t>(bs * gk));
      s.graph.retrieve_parent_token = fill32(static_cast<size_t>(bs * gk));
      const std::string at = fmt::format("[{}]", bs - 1);
      buffers["state_indices_list" + at] = {s.graph.state_indices, DType::Int32};
      buffers["query_start_loc_list" + at] = {s.graph.query_start_loc, DType::Int32};
      buffers["mamba_track_indices_buf"] = {s.graph.track_indices, DType::Int64};
      buffers["retrieve_next_token_list" + at] = {s.graph.retrieve_next_token, DType::Int32};
      buffers["retrieve_next_sibling_list" + at] = {s.graph.retrieve_next_sibling, DType::Int32};
      buffers["retrieve_parent_token_list" + at] = {s.graph.retrieve_parent_token, DType::Int32};
    }
    // ShortConv's _cache_indices_buf: made with the graph state (any entry then writes it).
    if (kind == BuilderKind::SglangShortConv && cfg.value("graph", "none") != "none") {
      const auto n = static_cast<size_t>(cfg.at("graph_max_bs").get<int32_t>());
      s.cache_indices_buf = mem.put(std::vector<int64_t>(n, kUnwritten));
      s.cache_indices_buf_len = static_cast<int64_t>(n);
      buffers["_cache_indices_buf"] = {s.cache_indices_buf, DType::Int64};
    }
    linmeta::Step step;
    step.sglang = &s;

    if (c.contains("raises")) {
      try {
        b.build(step);
      } catch (const linmeta::Error&) {
        return;
      }
      differ("SGLang raised (" + c.at("raises").get<std::string>() + "), linmeta built");
    }
    const linmeta::Metadata& m = b.build(step);
    if (target_ == Target::Cuda) cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    const json& out = c.at("output");
    if (pg) {
      pg->compare(out.at("backend").at("prefill_graph_metadata"), mem);
    } else {
      compare(kind, m, out.at("forward_metadata"), mem, out.value("aliases", json::object()),
              buffers);
      if (kind == BuilderKind::SglangShortConv)
        compare_conv_state(kind, m, out.at("backend").at("conv_state_metadata"), mem);
    }
    // Side effects on the batch.
    const json& fb = out.at("forward_batch");
    compare_tensor("forward_batch.req_pool_indices", fb.at("req_pool_indices"),
                   Array{rpi_dev, DType::Int64, bs, 1, 1, true}, mem, false);
  }

 private:
  linmeta::MetadataBuilder& builder(BuilderKind kind, const json& cfg) {
    const std::string key = fmt::format("{}/{}", static_cast<int>(kind), cfg.dump());
    auto it = builders_.find(key);
    if (it != builders_.end()) return *it->second;
    linmeta::Config c;
    c.max_num_seqs = 256;
    c.max_num_batched_tokens = 1 << 17;
    c.chunk_size = cfg.at("chunk_size").get<int32_t>();
    linmeta::BuilderOptions o;
    o.target = target_;
    auto b = std::make_unique<linmeta::MetadataBuilder>(kind, c, o);
    return *builders_.emplace(key, std::move(b)).first->second;
  }

  /// KDA's KDAPrefillGraphMetadata of a prefill_graph case: the bucket's buffers as SGLang's
  /// allocate makes them (packed and host zeros, cache_indices -1, has_initial_state False,
  /// track_dst 0), and their comparison with SGLang's object after the step.
  struct PrefillGraphBuffers {
    PrefillGraphBuffers(linmeta::SglangStep& s, const json& in, const json& c, Mem& mem) {
      linmeta::SglangPrefillGraph& pg = s.prefill_graph;
      pg.num_tokens = in.at("bucket_tokens").get<int32_t>();
      // SGLANG_KDA_PREFILL_GRAPH_MAX_SEQS's default (128) bounds the bucket's sequences.
      pg.max_seqs = std::max(1, std::min(pg.num_tokens, 128));
      const json* fields = nullptr;
      if (c.contains("output")) {
        fields = &c.at("output").at("backend").at("prefill_graph_metadata").at("fields");
        pg.max_seqs = fields->at("max_seqs").get<int32_t>();
        pg.track = fields->at("track").get<bool>();
      }
      layout = linmeta::SglangPrefillGraphLayout::of(pg.num_tokens, pg.max_seqs);
      const auto n = static_cast<size_t>(layout.total), rows = static_cast<size_t>(pg.max_seqs);
      pg.packed = mem.put(std::vector<int32_t>(n, 0));
      pg.packed_len = layout.total;
      host.assign(n, 0);
      pg.host = host.data();
      pg.cache_indices = mem.put(std::vector<int32_t>(rows, -1));
      pg.has_initial_state = reinterpret_cast<bool*>(mem.put(std::vector<uint8_t>(rows, 0)));
      pg.track_dst = mem.put(std::vector<int64_t>(rows, 0));
      buffers = pg;
    }
    void compare(const json& want, const Mem& mem) const {
      if (want.at("type") != "KDAPrefillGraphMetadata") differ("not a KDAPrefillGraphMetadata");
      const json& f = want.at("fields");
      const linmeta::SglangPrefillGraph& pg = buffers;
      const auto scalar = [&](const char* name, int64_t ours) {
        if (f.at(name).get<int64_t>() != ours)
          differ(fmt::format("prefill_graph.{}: {} vs SGLang's {}", name, ours, f.at(name).dump()));
      };
      scalar("num_tokens", pg.num_tokens);
      scalar("max_seqs", pg.max_seqs);
      scalar("max_chunks", layout.max_chunks);
      scalar("max_conv_blocks", layout.max_conv_blocks);
      if (!f.at("flashinfer").is_null()) differ("prefill_graph.flashinfer: SGLang has one");
      const auto table = [&](const char* name, int64_t at, int64_t rows, int32_t cols) {
        Array a{pg.packed + at, DType::Int32, rows, cols, cols > 1 ? 2 : 1, true};
        compare_tensor(std::string("prefill_graph.") + name, f.at(name), a, mem, false);
      };
      const int64_t S = pg.max_seqs;
      table("packed", 0, layout.total, 1);
      table("cu_seqlens", layout.cu_seqlens, S + 1, 1);
      table("chunk_indices", layout.chunk_indices, layout.max_chunks, 2);
      table("chunk_offsets", layout.chunk_offsets, S + 1, 1);
      table("conv_block_table", layout.conv_block_table, layout.max_conv_blocks, 2);
      table("track_chunk_idx", layout.track_chunk_idx, S, 1);
      table("track_mode", layout.track_mode, S, 1);
      table("track_conv_start", layout.track_conv_start, S, 1);
      table("num_logical_tokens", layout.num_logical_tokens, 1, 1);
      compare_tensor("prefill_graph.host", f.at("host"),
                     Array{host.data(), DType::Int32, layout.total, 1, 1, true}, mem, true);
      compare_tensor("prefill_graph.cache_indices", f.at("cache_indices"),
                     Array{pg.cache_indices, DType::Int32, S, 1, 1, true}, mem, false);
      compare_tensor("prefill_graph.has_initial_state", f.at("has_initial_state"),
                     Array{pg.has_initial_state, DType::Bool, S, 1, 1, true}, mem, false);
      compare_tensor("prefill_graph.track_dst", f.at("track_dst"),
                     Array{pg.track_dst, DType::Int64, S, 1, 1, true}, mem, false);
    }
    linmeta::SglangPrefillGraphLayout layout;
    std::vector<int32_t> host;
    linmeta::SglangPrefillGraph buffers;
  };

  static void compare_tensor(const std::string& name, const json& want, const Array& got,
                             const Mem& mem, bool host) {
    if (!got.present) differ(name + ": linmeta has None, SGLang a tensor");
    if (want.at("dtype").get<std::string>() != dtype_str(got.dtype))
      differ(fmt::format("{}: dtype {} vs SGLang's {}", name, dtype_str(got.dtype),
                         want.at("dtype").get<std::string>()));
    std::vector<int64_t> shape{got.rows};
    if (got.ndim == 2) shape.push_back(got.cols);
    if (want.at("shape").get<std::vector<int64_t>>() != shape)
      differ(fmt::format("{}: shape {} vs SGLang's {}", name, json(shape).dump(),
                         want.at("shape").dump()));
    if (want.at("data").is_null()) return;  // contents undefined (torch.empty_like)
    const auto data = mem.read(got.data, got.dtype, got.size(), host);
    const auto expect = ints<int64_t>(want.at("data"));
    if (data != expect)
      differ(fmt::format("{}: {} vs SGLang's {}", name, json(data).dump().substr(0, 300),
                         want.at("data").dump().substr(0, 300)));
  }

  /// SGLang's object `want` ({type, fields}) against the kind's rows under `prefix`.
  void compare_object(BuilderKind kind, linmeta::Metadata& m, const json& want,
                      const std::string& prefix, const Mem& mem) {
    for (const auto& [field, value] : want.at("fields").items()) {
      const std::string name = prefix + field;
      const linmeta::OutputSpec* spec = linmeta::find_output(name);
      if (spec == nullptr || !spec->has(kind)) {
        // A field linmeta does not produce: SGLang's must be its default.
        if (!(value.is_null() || value == 0 || value == false))
          differ(name + ": SGLang has " + value.dump().substr(0, 100) + ", linmeta no such field");
        continue;
      }
      const linmeta::FieldRef r = spec->field(m);
      if (!r) differ(name + ": its parent is absent in linmeta");
      switch (r.type) {
        case linmeta::FieldType::Count:
          if (value != r.count())
            differ(fmt::format("{}: {} vs SGLang's {}", name, r.count(), value.dump()));
          break;
        case linmeta::FieldType::OptionalInt:
          if (value.is_null() != !r.present() || (!value.is_null() && value != *r.optional_int()))
            differ(fmt::format("{}: {} vs SGLang's {}", name,
                               r.present() ? std::to_string(*r.optional_int()) : "None",
                               value.dump()));
          break;
        case linmeta::FieldType::Flag:
          if (value != r.flag())
            differ(fmt::format("{}: {} vs SGLang's {}", name, r.flag(), value.dump()));
          break;
        case linmeta::FieldType::Composite:
          if (value.is_null() != !r.present())
            differ(fmt::format("{}: present {} vs SGLang's {}", name, r.present(),
                               value.is_null() ? "None" : "object"));
          if (!value.is_null()) compare_object(kind, m, value, name + ".", mem);
          break;
        case linmeta::FieldType::Array: {
          const Array& a = r.array();
          if (value.is_null()) {
            if (a.present) differ(name + ": linmeta has an array, SGLang None");
          } else if (value.is_array()) {  // a host list
            if (!a.present) differ(name + ": linmeta has None, SGLang a list");
            const auto data = mem.read(a.data, a.dtype, a.size(), true);
            if (data != ints<int64_t>(value))
              differ(fmt::format("{}: {} vs SGLang's {}", name, json(data).dump(), value.dump()));
          } else {
            compare_tensor(name, value, a, mem, spec->host_memory());
          }
          break;
        }
        default:
          differ(name + ": unexpected row type");
      }
    }
  }

  /// ShortConv's conv_state_metadata(): its fields are the kind's rows of the same names
  /// (query_start_loc is the metadata's); slot_ids_cpu is the plugin's host copy of
  /// cache_indices, present exactly when has_prefix_cpu is.
  void compare_conv_state(BuilderKind kind, const linmeta::Metadata& got, const json& want,
                          const Mem& mem) {
    linmeta::Metadata m = got;
    json fields = want.at("fields");
    const json slots = fields.at("slot_ids_cpu");
    fields.erase("slot_ids_cpu");
    compare_object(kind, m, json{{"fields", fields}}, "sglang.", mem);
    const Array& prefix = m.sglang->has_prefix_cpu;
    if (slots.is_null() != !prefix.present)
      differ(fmt::format("conv_state_metadata.slot_ids_cpu: SGLang's {}, has_prefix_cpu {}",
                         slots.is_null() ? "None" : "a list", prefix.present ? "present" : "None"));
    const Array& ci = m.sglang->cache_indices;
    if (!slots.is_null() && mem.read(ci.data, ci.dtype, ci.size(), false) != ints<int64_t>(slots))
      differ("conv_state_metadata.slot_ids_cpu: " + slots.dump() + " is not cache_indices");
  }

  void compare(BuilderKind kind, const linmeta::Metadata& got, const json& want, const Mem& mem,
               const json& aliases,
               const std::map<std::string, std::pair<const void*, DType>>& buffers) {
    linmeta::Metadata m = got;
    if (!m.sglang) differ("linmeta produced no sglang metadata");
    const std::string type = want.at("type").get<std::string>();
    if ((type != "ForwardMetadata") != m.sglang->kind_metadata)
      differ("object type: SGLang's is " + type);
    compare_object(kind, m, want, "sglang.", mem);
    // Graph entries: every aliased field is a view of that buffer at that offset, and every
    // array linmeta points into a graph buffer is one SGLang aliases.
    std::map<std::string, const void*> ours;
    linmeta::for_each_array(m, kind, [&](const linmeta::OutputSpec& spec, const Array& a) {
      if (!a.present) return;
      for (const auto& [bname, buf] : buffers)
        if (a.data == buf.first) ours[std::string(spec.name).substr(7)] = a.data;
    });
    for (const auto& [alias, where] : aliases.items()) {
      // ShortConv's conv_state_metadata fields are the kind's rows of the same names.
      const std::string prefix = "conv_state_metadata.";
      const bool conv_state = alias.starts_with(prefix);
      const std::string field = conv_state ? alias.substr(prefix.size()) : alias;
      if (conv_state && field == "query_start_loc") continue;  // the metadata's own (above)
      const std::string bname = where.at(0).get<std::string>();
      const auto it = buffers.find(bname);
      if (it == buffers.end()) differ("alias to unknown buffer " + bname);
      if (where.at(1).get<int64_t>() != 0) differ("alias offset != 0: " + field);
      const auto o = ours.find(field);
      if (o == ours.end() || o->second != it->second.first)
        differ(field + ": not a view of " + bname + " in linmeta");
      ours.erase(o);
    }
    if (!ours.empty()) differ(ours.begin()->first + ": a graph buffer SGLang does not hand out");
  }

  Target target_;
  std::map<std::string, std::unique_ptr<linmeta::MetadataBuilder>> builders_;
};

bool cuda_present() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> files;
  Target target = Target::Host;
  bool allow_skip = false, quiet = false;
  if (argc < 3 || std::string(argv[1]) != "check") {
    std::cerr << "usage: linmeta-sglang-replay check FILE... [--target host|cuda] [--allow-skip] "
                 "[--quiet]\n";
    return 2;
  }
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--target" && i + 1 < argc) {
      target = std::string(argv[++i]) == "cuda" ? Target::Cuda : Target::Host;
    } else if (a == "--allow-skip") {
      allow_skip = true;
    } else if (a == "--quiet") {
      quiet = true;
    } else {
      files.push_back(a);
    }
  }
  if (target == Target::Cuda && !cuda_present()) {
    std::cerr << "linmeta-sglang-replay: no CUDA device\n";
    return allow_skip ? 0 : 1;
  }
  Checker checker(target);
  int64_t n = 0, bad = 0;
  std::map<std::string, int64_t> per_mode;
  for (const std::string& f : files) {
    std::ifstream src(f);
    if (!src) {
      std::cerr << "cannot read " << f << "\n";
      return 2;
    }
    std::string line;
    int64_t lineno = 0;
    while (std::getline(src, line)) {
      ++lineno;
      if (line.empty()) continue;
      ++n;
      std::string name = "?";
      try {
        const json c = json::parse(line);
        name = c.value("name", "?");
        const std::string mode = c.value("mode", "?");
        ++per_mode[mode];
        checker.check(c);
      } catch (const Mismatch& e) {
        ++bad;
        if (!quiet || bad <= 20)
          std::cout << f << ":" << lineno << ": " << name << ": " << e.what << "\n";
      } catch (const std::exception& e) {
        ++bad;
        if (!quiet || bad <= 20)
          std::cout << f << ":" << lineno << ": " << name << ": error: " << e.what() << "\n";
      }
    }
  }
  std::string modes;
  for (const auto& [mode, count] : per_mode) modes += fmt::format(" {} {},", mode, count);
  std::cout << fmt::format("linmeta-sglang-replay ({}): {} cases,{} {} differ\n",
                           target == Target::Cuda ? "cuda" : "host", n, modes, bad);
  return bad == 0 ? 0 : 1;
}
