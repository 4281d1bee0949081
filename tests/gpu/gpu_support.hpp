// Shared helpers of the GPU tests: skipping without a device, RAII CUDA handles,
// device copies of random steps, and reading, snapshotting and comparing metadata.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "case_file.hpp"
#include "common/test_seed.hpp"
#include "random_step.hpp"
#include "step_json.hpp"

namespace linmeta::gputest {

using cases::json;
using linmeta::testing::RandomStep;

inline constexpr const char* kNoDeviceMessage = "no CUDA device: GPU test skipped";

/// Fixtures of every GPU test: without a usable device the test is skipped.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cases::cuda_available()) GTEST_SKIP() << kNoDeviceMessage;
  }
};

template <class P>
class GpuParamTest : public ::testing::TestWithParam<P> {
 protected:
  void SetUp() override {
    if (!cases::cuda_available()) GTEST_SKIP() << kNoDeviceMessage;
  }
};

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// An integer from the environment, `fallback` when unset or not a positive number.
inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  const long x = std::strtol(v, nullptr, 10);
  return x > 0 ? static_cast<int>(x) : fallback;
}

inline std::string kind_name(BuilderKind k) { return std::string(names::builder_kind_name(k)); }

/// Every builder kind, as test parameters, and their names.
inline const auto kAllKinds =
    ::testing::Values(BuilderKind::Gdn, BuilderKind::Kda, BuilderKind::Mamba2, BuilderKind::Mamba1,
                      BuilderKind::ShortConv, BuilderKind::Linear, BuilderKind::BailingLinear,
                      BuilderKind::PleShortConv, BuilderKind::Inkling);
inline std::string kind_param_name(const ::testing::TestParamInfo<BuilderKind>& i) {
  return kind_name(i.param);
}

/// The message of the linmeta::Error `fn()` throws; empty when it returns.
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

/// Whether the last build's arena was copied before the launch (too large for the kernel
/// parameters): an inline launch carries at least the arena's bytes.
inline bool arena_was_copied(const MetadataBuilder& b) {
  return b.last_upload_bytes() > b.last_launch_param_bytes();
}

// ---- RAII handles ----------------------------------------------------------------

class DeviceMemory {
 public:
  DeviceMemory() = default;
  explicit DeviceMemory(size_t bytes) { reserve(bytes); }
  ~DeviceMemory() { release(); }
  DeviceMemory(DeviceMemory&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  /// At least `bytes` (contents are lost when it grows).
  void reserve(size_t bytes) {
    if (bytes <= bytes_) return;
    release();
    check(cudaMalloc(&p_, bytes), "cudaMalloc");
    bytes_ = bytes;
  }
  template <class T = void>
  [[nodiscard]] T* get() const {
    return static_cast<T*>(p_);
  }
  [[nodiscard]] size_t bytes() const { return bytes_; }

 private:
  void release() {
    if (p_ != nullptr) cudaFree(p_);
    p_ = nullptr;
    bytes_ = 0;
  }
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

class StreamHandle {
 public:
  explicit StreamHandle(unsigned flags = cudaStreamNonBlocking) {
    check(cudaStreamCreateWithFlags(&s_, flags), "cudaStreamCreateWithFlags");
  }
  ~StreamHandle() {
    if (s_ != nullptr) cudaStreamDestroy(s_);
  }
  StreamHandle(const StreamHandle&) = delete;
  StreamHandle& operator=(const StreamHandle&) = delete;
  [[nodiscard]] cudaStream_t get() const { return s_; }
  void sync() const { check(cudaStreamSynchronize(s_), "cudaStreamSynchronize"); }

 private:
  cudaStream_t s_ = nullptr;
};

/// Zeroed pinned host memory mapped into the device address space.
template <class T>
class MappedHost {
 public:
  explicit MappedHost(size_t n) : n_(n) {
    check(cudaHostAlloc(reinterpret_cast<void**>(&h_), n * sizeof(T), cudaHostAllocMapped),
          "cudaHostAlloc(mapped)");
    std::memset(static_cast<void*>(h_), 0, n * sizeof(T));
    check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&d_), h_, 0),
          "cudaHostGetDevicePointer");
  }
  ~MappedHost() {
    if (h_ != nullptr) cudaFreeHost(h_);
  }
  MappedHost(const MappedHost&) = delete;
  MappedHost& operator=(const MappedHost&) = delete;
  [[nodiscard]] volatile T* host() const { return h_; }
  [[nodiscard]] T* device() const { return d_; }

 private:
  size_t n_;
  T* h_ = nullptr;
  T* d_ = nullptr;
};

// ---- steps on the device ------------------------------------------------------------

/// Gives every block table of `r` the row stride `stride` (>= width); the
/// columns past the width hold -7 (never read).
inline void restride(RandomStep& r, int64_t stride) {
  for (auto& t : r.tables) {
    std::vector<int32_t> n(static_cast<size_t>(r.num_reqs * stride), -7);
    for (int32_t i = 0; i < r.num_reqs; ++i)
      std::copy_n(t.begin() + i * r.row_stride, r.width, n.begin() + i * stride);
    t.swap(n);
  }
  r.row_stride = stride;
}

/// A hand-made step for `cfg`: query lengths `ql` (0 = padding row), drafts per
/// row (-1: not a spec row; empty: absent), is_prefilling flags (empty: absent);
/// computed tokens, accepted counts and `groups` block tables are random.
inline RandomStep make_step(std::mt19937& rng, const Config& cfg, BuilderKind kind, int32_t groups,
                            const std::vector<int32_t>& ql, const std::vector<int32_t>& drafts,
                            const std::vector<char>& prefilling, int32_t extra_tokens = 0) {
  using linmeta::testing::uniform;
  RandomStep r;
  r.config = cfg;
  r.kind = kind;
  r.num_reqs = static_cast<int32_t>(ql.size());
  r.qsl.assign(1, 0);
  r.drafts = drafts;
  r.has_drafts = !drafts.empty();
  r.has_accepted = cfg.num_spec > 0;
  r.is_prefilling = prefilling;
  int32_t need = cfg.num_spec + 1;
  for (size_t i = 0; i < ql.size(); ++i) {
    r.qsl.push_back(r.qsl.back() + ql[i]);
    const bool fresh = !prefilling.empty() && prefilling[i] != 0 && uniform(rng, 0, 1) == 0;
    const int32_t seq = ql[i] == 0 ? 0 : (fresh ? 0 : uniform(rng, 1, 3000)) + ql[i];
    r.seq_ub.push_back(seq);
    r.seq_lens.push_back(seq);
    r.accepted.push_back(!drafts.empty() && drafts[i] >= 0 ? uniform(rng, 1, ql[i] > 0 ? ql[i] : 1)
                                                           : 1);
    need =
        std::max(need, (seq > 0 ? (seq - 1) / cfg.block_size : 0) + cfg.num_speculative_blocks + 1);
    need = std::max(need, seq / cfg.block_size + 1);
  }
  r.num_actual_tokens = r.qsl.back() + extra_tokens;
  r.width = need + 1;
  r.row_stride = r.width + 3;
  for (int32_t g = 0; g < groups; ++g) {
    std::vector<int32_t> t(static_cast<size_t>(r.num_reqs * r.row_stride), -7);
    for (int32_t i = 0; i < r.num_reqs; ++i)
      for (int32_t c = 0; c < r.width; ++c)
        t[static_cast<size_t>(i * r.row_stride + c)] = uniform(rng, 1, 1 << 20);
    r.tables.push_back(std::move(t));
  }
  return r;
}

/// Device copies of a step's "device" arrays (qsl, seq_lens, accepted and every
/// group's block table) in one allocation that grows only when a step needs more.
class DeviceStep {
 public:
  DeviceStep() = default;
  explicit DeviceStep(size_t reserve_bytes) { mem_.reserve(reserve_bytes); }

  /// Synchronous upload; `r` must outlive `step`. cudaMemcpy from pageable memory returns
  /// once the bytes are staged, before the DMA lands, and the builds run on a non-blocking
  /// stream that is not ordered after the legacy stream: hence the device synchronize.
  void upload(const RandomStep& r) {
    const size_t n = static_cast<size_t>(r.num_reqs);
    const size_t head = (3 * n + 1 + 63) / 64 * 64;
    const size_t per_table = n * static_cast<size_t>(r.row_stride);
    staging_.assign(head + per_table * r.tables.size(), 0);
    std::copy(r.qsl.begin(), r.qsl.end(), staging_.begin());
    std::copy(r.seq_lens.begin(), r.seq_lens.end(),
              staging_.begin() + static_cast<ptrdiff_t>(n + 1));
    std::copy(r.accepted.begin(), r.accepted.end(),
              staging_.begin() + static_cast<ptrdiff_t>(2 * n + 1));
    for (size_t g = 0; g < r.tables.size(); ++g)
      std::copy(r.tables[g].begin(), r.tables[g].end(),
                staging_.begin() + static_cast<ptrdiff_t>(head + g * per_table));
    mem_.reserve(staging_.size() * sizeof(int32_t));
    check(cudaMemcpy(mem_.get(), staging_.data(), staging_.size() * sizeof(int32_t),
                     cudaMemcpyHostToDevice),
          "cudaMemcpy(step upload)");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize(step upload)");
    const int32_t* d = mem_.get<int32_t>();
    tables.clear();
    for (size_t g = 0; g < r.tables.size(); ++g)
      tables.push_back({d + head + g * per_table, r.width, r.row_stride});
    step = r.step(d, d + n + 1, d + 2 * n + 1, tables.at(0).data);
  }

  Step step;
  std::vector<BlockTable> tables;

 private:
  DeviceMemory mem_;
  std::vector<int32_t> staging_;
};

/// Builds `r` on `b`: build()/build_for_cudagraph_capture() when `single`
/// (one group), else the build_groups variants.
inline std::span<const Metadata> build_step(MetadataBuilder& b, const RandomStep& r, const Step& s,
                                            std::span<const BlockTable> tables, bool single,
                                            cudaStream_t stream) {
  if (single) {
    Step one = s;
    one.block_table = tables[0];
    const Metadata& m =
        r.capture ? b.build_for_cudagraph_capture(one, stream) : b.build(one, stream);
    return {&m, 1};
  }
  return r.capture ? b.build_groups_for_cudagraph_capture(s, tables, stream)
                   : b.build_groups(s, tables, stream);
}

/// A CUDA graph captured from a stream, instantiated, replayable.
class Graph {
 public:
  Graph() = default;
  ~Graph() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /// Captures `fn()` on `stream` (global capture mode) and instantiates it.
  template <class Fn>
  void capture(cudaStream_t stream, Fn&& fn) {
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    try {
      fn();
    } catch (...) {
      cudaGraph_t broken = nullptr;
      cudaStreamEndCapture(stream, &broken);
      if (broken != nullptr) cudaGraphDestroy(broken);
      throw;
    }
    check(cudaStreamEndCapture(stream, &graph_), "cudaStreamEndCapture");
    check(cudaGraphInstantiate(&exec_, graph_, 0), "cudaGraphInstantiate");
  }
  void launch(cudaStream_t stream) const {
    check(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
  }

  /// Node counts by type.
  [[nodiscard]] std::map<cudaGraphNodeType, int> node_types() const {
    size_t n = 0;
    check(cudaGraphGetNodes(graph_, nullptr, &n), "cudaGraphGetNodes");
    std::vector<cudaGraphNode_t> nodes(n);
    check(cudaGraphGetNodes(graph_, nodes.data(), &n), "cudaGraphGetNodes");
    std::map<cudaGraphNodeType, int> out;
    for (auto* node : nodes) {
      cudaGraphNodeType t{};
      check(cudaGraphNodeGetType(node, &t), "cudaGraphNodeGetType");
      ++out[t];
    }
    return out;
  }
  [[nodiscard]] size_t num_nodes() const {
    size_t n = 0;
    check(cudaGraphGetNodes(graph_, nullptr, &n), "cudaGraphGetNodes");
    return n;
  }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

/// Calls run(i) for i < warmup (lazy module loading and the like), synchronises `stream`,
/// then calls run(i) for i < builds: device memory and the builder's pinned and buffer
/// bytes must not change over the second loop.
template <class Run>
void expect_no_allocation(const MetadataBuilder& b, const StreamHandle& stream, int warmup,
                          int builds, Run&& run) {
  for (int i = 0; i < warmup; ++i) run(i);
  stream.sync();
  const int64_t pinned = b.pinned_bytes(), buffers = b.buffer_bytes();
  size_t free0 = 0, free1 = 0, total = 0;
  check(cudaMemGetInfo(&free0, &total), "cudaMemGetInfo");
  for (int i = 0; i < builds; ++i) run(i);
  stream.sync();
  check(cudaMemGetInfo(&free1, &total), "cudaMemGetInfo");
  EXPECT_EQ(free1, free0) << "device memory changed over " << builds << " builds";
  EXPECT_EQ(b.pinned_bytes(), pinned);
  EXPECT_EQ(b.buffer_bytes(), buffers);
}

// ---- metadata arrays ----------------------------------------------------------------

/// Calls f(spec, array) for every array field of `m` whose parent is present (every
/// builder kind's rows: another kind's stay absent), in the output table's order. Arrays
/// of Cap::Host rows are host memory on every target; the others target memory.
template <class M, class F>
void for_each_table_array(M& m, F&& f) {
  for (const OutputSpec& spec : kOutputs) {
    if (!spec.is_output()) continue;
    const FieldRef r = spec.field(const_cast<Metadata&>(static_cast<const Metadata&>(m)));
    if (r && r.type == FieldType::Array) f(spec, r.array());
  }
}

inline size_t array_bytes(const Array& a) {
  return a.present && a.size() > 0 ? static_cast<size_t>(a.bytes()) : 0;
}

inline size_t align_up(size_t x, size_t a = 256) { return (x + a - 1) / a * a; }

/// Metadata whose arrays live in host memory owned by this object (move only).
struct HostMetadata {
  HostMetadata() = default;
  HostMetadata(HostMetadata&&) noexcept = default;
  HostMetadata& operator=(HostMetadata&&) noexcept = default;
  HostMetadata(const HostMetadata&) = delete;
  HostMetadata& operator=(const HostMetadata&) = delete;

  std::vector<Metadata> groups;
  std::vector<std::byte> bytes;
  std::list<std::vector<std::byte>> host_copies;

  /// Copies the arrays in the builder's host memory (its plans, rewritten two builds later)
  /// into this object; target-memory arrays stay views.
  void own_host_arrays() {
    for (auto& m : groups)
      for_each_table_array(m, [&](const OutputSpec& spec, Array& a) {
        const size_t n = array_bytes(a);
        if (n == 0 || !spec.host_memory()) return;
        const auto* p = static_cast<const std::byte*>(a.data);
        a.data = host_copies.emplace_back(p, p + n).data();
      });
  }
};

/// Copies every array of `ms` into `out.bytes` (target-memory arrays with cudaMemcpy on
/// the cuda target) and points the copies' views there.
inline void copy_arrays(std::span<Metadata> ms, HostMetadata& out) {
  size_t total = 0;
  for (const auto& m : ms)
    for_each_table_array(
        m, [&](const OutputSpec&, const Array& a) { total += align_up(array_bytes(a)); });
  out.bytes.assign(total, std::byte{0});
  size_t at = 0;
  for (auto& m : ms) {
    const bool cuda = m.target == Target::Cuda;
    for_each_table_array(m, [&](const OutputSpec& spec, Array& a) {
      const size_t n = array_bytes(a);
      if (n == 0) return;
      if (cuda && !spec.host_memory())
        check(cudaMemcpy(out.bytes.data() + at, a.data, n, cudaMemcpyDeviceToHost),
              "cudaMemcpy(read back)");
      else
        std::memcpy(out.bytes.data() + at, a.data, n);
      a.data = out.bytes.data() + at;
      at += align_up(n);
    });
    m.target = Target::Host;
  }
}

/// Host copies of `ms` (every group of one build). The caller synchronises first.
inline HostMetadata read_back(std::span<const Metadata> ms) {
  HostMetadata out;
  out.groups.assign(ms.begin(), ms.end());
  copy_arrays(out.groups, out);
  return out;
}

inline HostMetadata read_back(const Metadata& m) {
  return read_back(std::span<const Metadata>(&m, 1));
}

/// Snapshots of metadata taken right after each build: every target-memory array is copied
/// (cudaMemcpyAsync device->device on the build's stream, or memcpy on the host target)
/// into an area of this object, every host-memory array at once into host memory, so later
/// builds may reuse the outputs.
class SnapshotArea {
 public:
  SnapshotArea(Target target, size_t bytes) : target_(target), capacity_(bytes) {
    if (target == Target::Cuda)
      dev_.reserve(bytes);
    else
      host_.resize(bytes);
  }

  void take(const Metadata& m, cudaStream_t stream) {
    Metadata copy = m;
    std::vector<Saved> saved;
    for_each_table_array(copy, [&](const OutputSpec& spec, Array& a) {
      const size_t n = array_bytes(a);
      if (n == 0) return;
      if (spec.host_memory()) {
        const auto* p = static_cast<const std::byte*>(a.data);
        saved.push_back({spec.id, false, 0, std::vector<std::byte>(p, p + n)});
        return;
      }
      if (used_ + n > capacity_) throw std::runtime_error("SnapshotArea: out of space");
      if (target_ == Target::Cuda)
        check(cudaMemcpyAsync(dev_.get<std::byte>() + used_, a.data, n, cudaMemcpyDeviceToDevice,
                              stream),
              "cudaMemcpyAsync(snapshot)");
      else
        std::memcpy(host_.data() + used_, a.data, n);
      saved.push_back({spec.id, true, used_, {}});
      used_ += align_up(n);
    });
    metas_.push_back(copy);
    saved_.push_back(std::move(saved));
  }

  /// Every snapshot, in the order taken, as host metadata. Synchronise the
  /// stream of the copies first.
  [[nodiscard]] HostMetadata collect() const {
    std::vector<std::byte> area(used_);
    if (used_ > 0) {
      if (target_ == Target::Cuda)
        check(cudaMemcpy(area.data(), dev_.get(), used_, cudaMemcpyDeviceToHost),
              "cudaMemcpy(snapshots)");
      else
        std::memcpy(area.data(), host_.data(), used_);
    }
    std::vector<Metadata> ms = metas_;
    for (size_t i = 0; i < ms.size(); ++i)
      for (const Saved& s : saved_[i]) {
        Array& a = output_spec(s.id).field(ms[i]).array();
        a.data = s.in_area ? static_cast<const void*>(area.data() + s.offset) : s.bytes.data();
      }
    HostMetadata out;
    out.groups = std::move(ms);
    for (auto& m : out.groups) m.target = Target::Host;
    copy_arrays(out.groups, out);
    return out;
  }

  [[nodiscard]] size_t size() const { return metas_.size(); }

 private:
  struct Saved {
    Out id;
    bool in_area;
    size_t offset;
    std::vector<std::byte> bytes;
  };
  Target target_;
  size_t capacity_;
  size_t used_ = 0;
  DeviceMemory dev_;
  std::vector<std::byte> host_;
  std::vector<Metadata> metas_;
  std::vector<std::vector<Saved>> saved_;
};

// ---- comparing metadata (both in host memory) -------------------------------------------

/// Empty when row `spec`'s fields `x` and `y` (of two metadata in host memory) are equal,
/// else what differs: values, presence, shape, dtype or contents.
inline std::string diff_one(const OutputSpec& spec, const FieldRef& x, const FieldRef& y) {
  const std::string name = spec.name;
  switch (x.type) {
    case FieldType::Count:
      if (x.count() == y.count()) return {};
      return name + " (" + std::to_string(x.count()) + " vs " + std::to_string(y.count()) + ")";
    case FieldType::OptionalInt:
      if (x.optional_int() == y.optional_int()) return {};
      return name + " (" + std::to_string(x.optional_int().value_or(-1)) + " vs " +
             std::to_string(y.optional_int().value_or(-1)) + ")";
    case FieldType::Flag:
      return x.flag() == y.flag() ? std::string() : name;
    case FieldType::Composite:
      return x.present() == y.present() ? std::string() : name + " (presence)";
    case FieldType::Table:
      return x.table().width == y.table().width && x.table().row_stride == y.table().row_stride
                 ? std::string()
                 : name + " (shape)";
    case FieldType::Array: {
      const Array& p = x.array();
      const Array& q = y.array();
      if (p.present != q.present || p.rows != q.rows || p.cols != q.cols || p.ndim != q.ndim ||
          p.dtype != q.dtype)
        return name + " (presence, shape or dtype)";
      if (array_bytes(p) > 0 && std::memcmp(p.data, q.data, array_bytes(p)) != 0) return name;
      return {};
    }
  }
  return {};
}

/// Names of the fields where `a` and `b` differ: every row of the output table (every
/// builder kind's; conv1d arrays over their whole capacity). Both must be host memory.
inline std::vector<std::string> diff(const Metadata& a, const Metadata& b) {
  std::vector<std::string> out;
  auto& ma = const_cast<Metadata&>(a);
  auto& mb = const_cast<Metadata&>(b);
  for (const OutputSpec& spec : kOutputs) {
    if (!spec.is_output()) continue;
    const FieldRef x = spec.field(ma), y = spec.field(mb);
    if (!x || !y) {
      if (static_cast<bool>(x) != static_cast<bool>(y))
        out.emplace_back(std::string(spec.name) + " (parent)");
      continue;
    }
    if (std::string d = diff_one(spec, x, y); !d.empty()) out.push_back(std::move(d));
  }
  return out;
}

inline std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

/// The to_json mismatches of two host-memory metadata, one line each.
inline std::string json_diff(const Metadata& got, const Metadata& want, BuilderKind kind) {
  std::string s;
  for (const auto& m : cases::compare(cases::to_json(want, kind), cases::to_json(got, kind)))
    s += "\n    " + m.field + ": expected " + m.expected.substr(0, 400) + ", got " +
         m.got.substr(0, 400);
  return s;
}

/// Empty when `got` equals `want` field for field (diff() and to_json), else a report.
inline std::string mismatch(const Metadata& got, const Metadata& want, BuilderKind kind) {
  const auto d = diff(got, want);
  const bool same_json = cases::to_json(got, kind) == cases::to_json(want, kind);
  if (d.empty() && same_json) return {};
  return "fields differ: " + (d.empty() ? std::string("(to_json only)") : join(d)) +
         json_diff(got, want, kind);
}

/// A random step as a case-file line without "expected" (for reproducing a failure
/// with linmeta-replay run).
inline json case_json(const RandomStep& r, const std::string& name) {
  json j = linmeta::testing::step_case_json(r, name);
  j["config"]["max_num_batched_tokens"] = r.config.max_num_batched_tokens;
  j["row_stride"] = r.row_stride;
  return j;
}

}  // namespace linmeta::gputest
