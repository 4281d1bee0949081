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
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "case_file.hpp"
#include "random_step.hpp"

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

inline const char* kind_name(BuilderKind k) { return k == BuilderKind::Gdn ? "gdn" : "kda"; }

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

  /// Synchronous upload (cudaMemcpy); `r` must outlive `step`.
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

// ---- metadata arrays ----------------------------------------------------------------

/// Calls f(name, array) for every array of `m` in target memory (all but
/// conv1d.nums, which is host memory on every target), in the output table's order.
template <class F>
void for_each_named_array(Metadata& m, F&& f) {
  for (const OutputSpec& spec : kOutputs)
    if (spec.is_output())
      if (Array* a = spec.field(m)) f(spec.name, *a);
}
template <class F>
void for_each_named_array(const Metadata& m, F&& f) {
  linmeta::for_each_array(m, [&](const OutputSpec& spec, const Array& a) { f(spec.name, a); });
}

/// The fields that alias others (RecoverSSM commit) follow them after a move.
inline void relink_aliases(Metadata& m) {
  if (!m.recoverssm_commit) return;
  m.recoverssm_commit->state_indices = m.spec_state_indices_tensor;
  m.recoverssm_commit->query_start_loc = m.spec_query_start_loc;
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
  std::vector<std::vector<int32_t>> nums;

  /// Copies each group's conv1d.nums (host memory of the builder) into `nums`.
  void own_nums() {
    nums.resize(groups.size());
    for (size_t g = 0; g < groups.size(); ++g) {
      auto& c = groups[g].conv1d;
      if (!c || !c->nums.present) continue;
      const auto* v = c->nums.as<int32_t>();
      nums[g].assign(v, v + c->nums.size());
      c->nums.data = nums[g].data();
    }
  }
};

/// The driver's cuMemGetAddressRange, reached through the runtime (no libcuda link).
inline bool allocation_range(const void* p, uintptr_t& base, size_t& size) {
  using Fn = int (*)(unsigned long long*, size_t*, unsigned long long);
  static const Fn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess || f == nullptr) {
      (void)cudaGetLastError();
      return Fn{};
    }
    Fn g{};
    std::memcpy(&g, &f, sizeof g);
    return g;
  }();
  if (fn == nullptr) return false;
  unsigned long long b = 0;
  size_t s = 0;
  if (fn(&b, &s, static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p))) != 0)
    return false;
  base = static_cast<uintptr_t>(b);
  size = s;
  return true;
}

/// Host copies of `ms` (every group of one build). On the cuda target the arrays
/// are read with one cudaMemcpy when they share one allocation (the builder's
/// output block), else one copy per array. The caller synchronises first.
inline HostMetadata read_back(std::span<const Metadata> ms) {
  HostMetadata out;
  out.groups.assign(ms.begin(), ms.end());
  const bool cuda = !ms.empty() && ms[0].target == Target::Cuda;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  size_t total = 0;
  for (const auto& m : ms)
    for_each_named_array(m, [&](const char*, const auto& a) {
      const size_t n = array_bytes(a);
      if (n == 0) return;
      const auto p = reinterpret_cast<uintptr_t>(a.data);
      lo = std::min(lo, p);
      hi = std::max(hi, p + n);
      total += align_up(n);
    });
  uintptr_t base = 0;
  size_t size = 0;
  const bool one_range = cuda && hi > lo &&
                         allocation_range(reinterpret_cast<const void*>(lo), base, size) &&
                         hi <= base + size;
  if (one_range) {
    out.bytes.resize(hi - lo);
    check(cudaMemcpy(out.bytes.data(), reinterpret_cast<const void*>(lo), hi - lo,
                     cudaMemcpyDeviceToHost),
          "cudaMemcpy(read back)");
    for (auto& m : out.groups)
      for_each_named_array(m, [&](const char*, auto& a) {
        if (array_bytes(a) == 0) return;
        a.data = out.bytes.data() + (reinterpret_cast<uintptr_t>(a.data) - lo);
      });
  } else {
    out.bytes.resize(total);
    size_t at = 0;
    for (auto& m : out.groups)
      for_each_named_array(m, [&](const char*, auto& a) {
        const size_t n = array_bytes(a);
        if (n == 0) return;
        if (cuda)
          check(cudaMemcpy(out.bytes.data() + at, a.data, n, cudaMemcpyDeviceToHost),
                "cudaMemcpy(read back)");
        else
          std::memcpy(out.bytes.data() + at, a.data, n);
        a.data = out.bytes.data() + at;
        at += align_up(n);
      });
  }
  for (auto& m : out.groups) {
    m.target = Target::Host;
    relink_aliases(m);
  }
  out.own_nums();
  return out;
}

inline HostMetadata read_back(const Metadata& m) {
  return read_back(std::span<const Metadata>(&m, 1));
}

/// Snapshots of metadata taken right after each build: every array is copied
/// (cudaMemcpyAsync device->device on the build's stream, or memcpy on the host
/// target) into an area of this object, so later builds may reuse the outputs.
class SnapshotArea {
 public:
  SnapshotArea(Target target, size_t bytes) : target_(target), capacity_(bytes) {
    if (target == Target::Cuda)
      dev_.reserve(bytes);
    else
      host_.resize(bytes);
  }

  void take(const Metadata& m, cudaStream_t stream) {
    std::vector<size_t> offsets;
    for_each_named_array(m, [&](const char*, const auto& a) {
      const size_t n = array_bytes(a);
      offsets.push_back(used_);
      if (n == 0) return;
      if (used_ + n > capacity_) throw std::runtime_error("SnapshotArea: out of space");
      if (target_ == Target::Cuda)
        check(cudaMemcpyAsync(dev_.get<std::byte>() + used_, a.data, n, cudaMemcpyDeviceToDevice,
                              stream),
              "cudaMemcpyAsync(snapshot)");
      else
        std::memcpy(host_.data() + used_, a.data, n);
      used_ += align_up(n);
    });
    metas_.push_back(m);
    offsets_.push_back(std::move(offsets));
    HostMetadata nums;  // conv1d.nums is host memory of the builder: copy it now
    nums.groups.push_back(m);
    nums.own_nums();
    nums_.push_back(std::move(nums.nums[0]));
  }

  /// Every snapshot, in the order taken, as host metadata. Synchronise the
  /// stream of the copies first.
  [[nodiscard]] HostMetadata collect() const {
    HostMetadata out;
    out.bytes.resize(used_);
    if (used_ > 0) {
      if (target_ == Target::Cuda)
        check(cudaMemcpy(out.bytes.data(), dev_.get(), used_, cudaMemcpyDeviceToHost),
              "cudaMemcpy(snapshots)");
      else
        std::memcpy(out.bytes.data(), host_.data(), used_);
    }
    out.nums = nums_;
    out.groups = metas_;
    for (size_t i = 0; i < out.groups.size(); ++i) {
      Metadata& m = out.groups[i];
      size_t k = 0;
      for_each_named_array(m, [&](const char*, auto& a) {
        const size_t off = offsets_[i][k++];
        if (array_bytes(a) == 0) return;
        a.data = out.bytes.data() + off;
      });
      relink_aliases(m);
      if (m.conv1d && m.conv1d->nums.present) m.conv1d->nums.data = out.nums[i].data();
      m.target = Target::Host;
    }
    return out;
  }

  [[nodiscard]] size_t size() const { return metas_.size(); }

 private:
  Target target_;
  size_t capacity_;
  size_t used_ = 0;
  DeviceMemory dev_;
  std::vector<std::byte> host_;
  std::vector<Metadata> metas_;
  std::vector<std::vector<size_t>> offsets_;
  std::vector<std::vector<int32_t>> nums_;
};

// ---- comparing metadata (both in host memory) -------------------------------------------

struct ArrayInfo {
  bool present = false;
  int64_t rows = 0;
  int32_t cols = 1, ndim = 1;
  const std::byte* data = nullptr;
  size_t bytes = 0;
};

inline std::map<std::string, ArrayInfo> arrays_of(const Metadata& m) {
  std::map<std::string, ArrayInfo> out;
  for_each_named_array(m, [&](const char* name, const auto& a) {
    out[name] =
        ArrayInfo{a.present,     a.rows, a.cols, a.ndim, reinterpret_cast<const std::byte*>(a.data),
                  array_bytes(a)};
  });
  return out;
}

/// Names of the fields where `a` and `b` differ: every count, every optional's
/// presence, every array's presence, shape and contents (conv1d arrays over their
/// whole capacity). Both must be host memory.
inline std::vector<std::string> diff(const Metadata& a, const Metadata& b) {
  std::vector<std::string> out;
  auto scalar = [&](const char* name, auto x, auto y) {
    if (x != y)
      out.push_back(std::string(name) + " (" + std::to_string(x) + " vs " + std::to_string(y) +
                    ")");
  };
  scalar("num_prefills", a.num_prefills, b.num_prefills);
  scalar("num_prefill_tokens", a.num_prefill_tokens, b.num_prefill_tokens);
  scalar("num_decodes", a.num_decodes, b.num_decodes);
  scalar("num_decode_tokens", a.num_decode_tokens, b.num_decode_tokens);
  scalar("num_spec_decodes", a.num_spec_decodes, b.num_spec_decodes);
  scalar("num_spec_decode_tokens", a.num_spec_decode_tokens, b.num_spec_decode_tokens);
  scalar("num_actual_tokens", a.num_actual_tokens, b.num_actual_tokens);
  scalar("uniform_spec_sequence_length", a.uniform_spec_sequence_length.value_or(-1),
         b.uniform_spec_sequence_length.value_or(-1));
  scalar("conv1d.present", a.conv1d.has_value(), b.conv1d.has_value());
  if (a.conv1d && b.conv1d) {
    scalar("conv1d.tot", a.conv1d->tot, b.conv1d->tot);
    const auto& x = a.conv1d->nums;
    const auto& y = b.conv1d->nums;
    if (x.present != y.present || x.size() != y.size() ||
        (x.size() > 0 && std::memcmp(x.data, y.data, static_cast<size_t>(x.bytes())) != 0))
      out.emplace_back("conv1d.nums");
  }
  scalar("recoverssm_commit.present", a.recoverssm_commit.has_value(),
         b.recoverssm_commit.has_value());
  if (a.recoverssm_commit && b.recoverssm_commit) {
    const auto& x = a.recoverssm_commit->align;
    const auto& y = b.recoverssm_commit->align;
    scalar("recoverssm_commit.align.present", x.has_value(), y.has_value());
    if (x && y) {
      scalar("recoverssm_commit.align.block_size", x->block_size, y->block_size);
      scalar("recoverssm_commit.align.block_table.width", x->block_table.width,
             y->block_table.width);
      scalar("recoverssm_commit.align.block_table.row_stride", x->block_table.row_stride,
             y->block_table.row_stride);
    }
  }
  scalar("checkpoint.present", a.checkpoint.has_value(), b.checkpoint.has_value());
  const auto xa = arrays_of(a), xb = arrays_of(b);
  for (const auto& [name, x] : xa) {
    const auto it = xb.find(name);
    if (it == xb.end()) continue;  // the optional's presence is reported above
    const ArrayInfo& y = it->second;
    if (x.present != y.present || x.rows != y.rows || x.cols != y.cols || x.ndim != y.ndim)
      out.push_back(name + " (presence or shape)");
    else if (x.bytes != y.bytes || (x.bytes > 0 && std::memcmp(x.data, y.data, x.bytes) != 0))
      out.push_back(name);
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
  const Config& c = r.config;
  const char* modes[] = {"none", "all", "align"};
  auto table = [&](const std::vector<int32_t>& t) {
    json rows = json::array();
    for (int32_t i = 0; i < r.num_reqs; ++i)
      rows.push_back(std::vector<int32_t>(t.begin() + i * r.row_stride,
                                          t.begin() + i * r.row_stride + r.width));
    return rows;
  };
  json step;
  step["query_start_loc"] = r.qsl;
  step["seq_lens"] = r.seq_lens;
  step["seq_lens_cpu_upper_bound"] = r.seq_ub;
  json prefilling = nullptr;
  if (!r.is_prefilling.empty()) {
    prefilling = json::array();
    for (char b : r.is_prefilling) prefilling.push_back(b != 0);
  }
  step["is_prefilling"] = prefilling;
  step["num_actual_tokens"] = r.num_actual_tokens;
  step["num_decode_draft_tokens_cpu"] = r.has_drafts ? json(r.drafts) : json(nullptr);
  step["num_accepted_tokens"] = r.has_accepted ? json(r.accepted) : json(nullptr);
  if (r.tables.size() == 1) {
    step["block_table"] = table(r.tables[0]);
  } else {
    step["block_table"] = table(r.tables[0]);
    json groups = json::array();
    for (const auto& t : r.tables) groups.push_back(table(t));
    step["groups"] = groups;
  }
  return json{
      {"name", name},
      {"builder", kind_name(r.kind)},
      {"config",
       {{"num_spec", c.num_spec},
        {"max_num_seqs", c.max_num_seqs},
        {"max_num_batched_tokens", c.max_num_batched_tokens},
        {"full_cuda_graph", c.full_cuda_graph},
        {"max_cudagraph_capture_size",
         c.max_cudagraph_capture_size > 0 ? json(c.max_cudagraph_capture_size) : json(nullptr)},
        {"mamba_cache_mode", modes[static_cast<int>(c.mamba_cache_mode)]},
        {"block_size", c.block_size},
        {"num_speculative_blocks", c.num_speculative_blocks},
        {"chunk_metadata", c.chunk_metadata},
        {"use_recoverssm", c.use_recoverssm},
        {"num_prefill_checkpoint_blocks", c.num_prefill_checkpoint_blocks}}},
      {"step", step},
      {"mode", r.capture ? "capture" : "build"},
      {"row_stride", r.row_stride}};
}

}  // namespace linmeta::gputest
