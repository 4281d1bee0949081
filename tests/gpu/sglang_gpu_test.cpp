// The kinds of the Sglang family (linmeta/sglang.hpp, docs/sglang.md) on the cuda target, each
// kind of the family (config.hpp's list) over random steps of every entry and mode
// (tests/host/sglang_random_step.hpp):
//  * the cuda target gives the host target's metadata field for field, the same arrays
//    handed out as the step's tensors or the backend's graph buffers, and the same side
//    effects (replay's zeroed request rows, every graph buffer element written or left;
//    KDA's prefill-graph tables and SGLang's host staging of them);
//  * a build captured into a CUDA graph and replayed after other builds gives its results;
//  * a rejected step leaves the last metadata, the graph buffers and the batch untouched;
//  * builds return while a spin kernel holds the stream (no device->host sync), and a
//    thousand builds allocate no device or pinned memory.
// LINMETA_RANDOM_STEPS sets the random steps per kind (default 2000; scripts/gpu-check.sh's
// soak and sanitizer stages set it), LINMETA_TEST_SEED draws other steps.
#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <type_traits>

#include "gpu_support.hpp"
#include "host/sglang_random_step.hpp"
#include "spin_kernel.hpp"

namespace linmeta::gputest {
namespace {

using linmeta::testing::coin;
using linmeta::testing::uniform;
using test::SglStep;

// ---- an SglStep's target memory on the device ------------------------------------------

/// One array of an SglStep that is target memory: the step's device inputs and the
/// backend's graph buffers.
struct Part {
  const char* name;
  const void* host;  ///< the SglStep's vector (the host target's memory)
  size_t bytes;
  size_t offset;  ///< in DeviceSglStep's allocation
};

std::vector<Part> parts_of(const SglStep& st) {
  std::vector<Part> out;
  size_t at = 0;
  const auto add = [&](const char* name, const auto& v) {
    const size_t n = v.size() * sizeof(v[0]);
    out.push_back({name, v.data(), n, at});
    at += align_up(n);
  };
  add("mamba_map", st.map);
  add("req_pool_indices", st.rpi);
  add("track_indices", st.track_indices);
  add("retrieve_next_token", st.rnt);
  add("retrieve_next_sibling", st.rns);
  add("graph.state_indices", st.state);
  add("graph.query_start_loc", st.qsl);
  add("graph.track_indices", st.track_buf);
  add("graph.retrieve_next_token", st.rnt_buf);
  add("graph.retrieve_next_sibling", st.rns_buf);
  add("graph.retrieve_parent_token", st.rpt_buf);
  add("prefill_graph.packed", st.pg_packed);
  add("prefill_graph.cache_indices", st.pg_cache);
  add("prefill_graph.has_initial_state", st.pg_initial);
  add("prefill_graph.track_dst", st.pg_track_dst);
  add("cache_indices_buf", st.cache_buf);
  return out;
}

/// The part holding `p` (host addresses, or device ones from `base`), -1: none (the
/// builder's own memory).
int part_of(const std::vector<Part>& parts, const void* p, const std::byte* base) {
  const auto* q = static_cast<const std::byte*>(p);
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::byte* start =
        base != nullptr ? base + parts[i].offset : static_cast<const std::byte*>(parts[i].host);
    if (parts[i].bytes > 0 && q >= start && q < start + parts[i].bytes) return static_cast<int>(i);
  }
  return -1;
}

/// Every part's bytes (host vectors).
std::vector<std::byte> host_contents(const std::vector<Part>& parts) {
  std::vector<std::byte> out(parts.empty() ? 0 : parts.back().offset + parts.back().bytes);
  for (const Part& p : parts)
    if (p.bytes > 0) std::memcpy(out.data() + p.offset, p.host, p.bytes);
  return out;
}

/// Device copies of an SglStep's target memory and the step pointing at them (its host
/// lists stay the SglStep's). Upload before the host build: it writes the SglStep's vectors.
class DeviceSglStep {
 public:
  void upload(const SglStep& st) {
    parts_ = parts_of(st);
    initial_ = host_contents(parts_);
    mem_.reserve(std::max<size_t>(initial_.size(), 256));
    reset();
    const auto relocate = [&](auto* p) {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(p)>>;
      const int i = part_of(parts_, p, nullptr);
      return i < 0 ? p
                   : reinterpret_cast<T*>(mem_.get<std::byte>() +
                                          parts_[static_cast<size_t>(i)].offset);
    };
    step = st.s;
    step.mamba_map = relocate(st.s.mamba_map);
    step.req_pool_indices = relocate(st.s.req_pool_indices);
    step.track_indices = relocate(st.s.track_indices);
    step.retrieve_next_token = relocate(st.s.retrieve_next_token);
    step.retrieve_next_sibling = relocate(st.s.retrieve_next_sibling);
    SglangGraphBuffers& g = step.graph;
    g.state_indices = relocate(g.state_indices);
    g.query_start_loc = relocate(g.query_start_loc);
    g.track_indices = relocate(g.track_indices);
    g.retrieve_next_token = relocate(g.retrieve_next_token);
    g.retrieve_next_sibling = relocate(g.retrieve_next_sibling);
    g.retrieve_parent_token = relocate(g.retrieve_parent_token);
    SglangPrefillGraph& pg = step.prefill_graph;
    pg.packed = relocate(pg.packed);
    pg.cache_indices = relocate(pg.cache_indices);
    pg.has_initial_state = relocate(pg.has_initial_state);
    pg.track_dst = relocate(pg.track_dst);
    // SGLang's host staging stays host memory: a copy of its own, for the cuda build.
    pg_host = st.pg_host;
    if (pg.host != nullptr) pg.host = pg_host.data();
    step.cache_indices_buf = relocate(st.s.cache_indices_buf);
    full = Step{};
    full.sglang = &step;
  }
  /// Back to the uploaded contents (synchronous).
  void reset() const {
    if (!initial_.empty())
      check(cudaMemcpy(mem_.get(), initial_.data(), initial_.size(), cudaMemcpyHostToDevice),
            "cudaMemcpy(sglang step upload)");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize(sglang step upload)");
  }
  /// Every part's bytes now (synchronous).
  [[nodiscard]] std::vector<std::byte> contents() const {
    std::vector<std::byte> out(initial_.size());
    if (!out.empty())
      check(cudaMemcpy(out.data(), mem_.get(), out.size(), cudaMemcpyDeviceToHost),
            "cudaMemcpy(sglang step read back)");
    return out;
  }
  [[nodiscard]] const std::vector<Part>& parts() const { return parts_; }
  [[nodiscard]] const std::byte* base() const { return mem_.get<std::byte>(); }

  SglangStep step;
  Step full;
  std::vector<int32_t> pg_host;  ///< the prefill-graph host staging the cuda build writes

 private:
  std::vector<Part> parts_;
  std::vector<std::byte> initial_;
  DeviceMemory mem_;
};

/// The parts whose bytes differ, by name.
std::string parts_diff(const std::vector<Part>& parts, const std::vector<std::byte>& got,
                       const std::vector<std::byte>& want) {
  std::vector<std::string> out;
  for (const Part& p : parts)
    if (p.bytes > 0 && std::memcmp(got.data() + p.offset, want.data() + p.offset, p.bytes) != 0)
      out.emplace_back(p.name);
  return join(out);
}

// ---- reading and comparing metadata ------------------------------------------------------

/// Zeroed memory on both targets, standing for arrays whose contents are undefined.
class Zeros {
 public:
  static constexpr size_t kBytes = size_t{1} << 20;
  Zeros() : host_(kBytes), dev_(kBytes) {
    check(cudaMemset(dev_.get(), 0, kBytes), "cudaMemset");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  [[nodiscard]] const void* of(Target t) const {
    return t == Target::Cuda ? dev_.get() : static_cast<const void*>(host_.data());
  }

 private:
  std::vector<std::byte> host_;
  DeviceMemory dev_;
};

/// `m` in host memory. Eager tree verify's retrieve_parent_token is SGLang's
/// torch.empty_like (contents undefined: the verify kernel fills it): its contents are
/// read as zeros, its presence, shape and dtype as they are. Synchronise first.
HostMetadata read(const Metadata& m, const Zeros& zeros) {
  Metadata copy = m;
  if (copy.sglang) {
    Array& parent = copy.sglang->retrieve_parent_token;
    if (parent.present && parent.dtype == DType::Int64) {  // the builder's (graph buffers: int32)
      if (array_bytes(parent) > Zeros::kBytes) throw std::runtime_error("Zeros: too small");
      parent.data = zeros.of(m.target);
    }
  }
  return read_back(copy);
}

/// For every array of `m`: the part of the step it is a view of (-1: builder memory).
std::vector<std::pair<std::string, int>> aliases(const Metadata& m, const std::vector<Part>& parts,
                                                 const std::byte* base) {
  std::vector<std::pair<std::string, int>> out;
  for_each_table_array(m, [&](const OutputSpec& spec, const Array& a) {
    if (a.present) out.emplace_back(spec.name, part_of(parts, a.data, base));
  });
  return out;
}

/// Empty when the cuda build `cm` (of `dev`) equals the host build `hm` (of `st`, which it
/// wrote): the metadata, which arrays are views of which step arrays or graph buffers, every
/// step array and graph buffer afterwards. Synchronise first.
std::string compare(BuilderKind kind, const Metadata& hm, const SglStep& st, const Metadata& cm,
                    const DeviceSglStep& dev, const Zeros& zeros) {
  std::string report = mismatch(read(cm, zeros).groups[0], read(hm, zeros).groups[0], kind);
  const std::vector<Part> parts = parts_of(st);
  if (aliases(hm, parts, nullptr) != aliases(cm, dev.parts(), dev.base()))
    report += "\n    the arrays are views of other step arrays or graph buffers";
  const std::string d = parts_diff(parts, dev.contents(), host_contents(parts));
  if (!d.empty()) report += "\n    step arrays / graph buffers differ afterwards: " + d;
  if (dev.pg_host != st.pg_host) report += "\n    the prefill-graph host staging differs";
  return report;
}

std::vector<BuilderKind> kinds() { return test::sglang_kinds(); }
std::string kind_param(const ::testing::TestParamInfo<BuilderKind>& i) {
  return kind_name(i.param);
}

BuilderOptions cuda_options() {
  BuilderOptions o;
  o.target = Target::Cuda;
  return o;
}

/// One random step with its device copy (kept together: the device copy's step reads the
/// SglStep's host lists).
struct Sample {
  SglStep st;
  DeviceSglStep dev;
  std::vector<std::string> labels;
};
void fill(Sample& s, std::mt19937& rng, const test::SglangRandomEngine& e) {
  s.labels = test::random_sglang_step(rng, e, s.st);
  s.dev.upload(s.st);
}
std::unique_ptr<Sample> sample(std::mt19937& rng, const test::SglangRandomEngine& e) {
  auto s = std::make_unique<Sample>();
  fill(*s, rng, e);
  return s;
}

/// The tests of one SGLang kind (the parameter): a stream and zeroed memory when a device
/// is there.
class SglangGpuTest : public GpuParamTest<BuilderKind> {
 protected:
  void SetUp() override {
    GpuParamTest<BuilderKind>::SetUp();
    if (IsSkipped()) return;
    stream_.emplace();
    zeros_.emplace();
  }
  [[nodiscard]] const StreamHandle& stream() const { return *stream_; }
  [[nodiscard]] const Zeros& zeros() const { return *zeros_; }
  /// The random stream of fixed seed `fixed` (LINMETA_TEST_SEED honoured), its seed traced
  /// in every failure message of the test.
  std::mt19937 seeded(uint32_t fixed) {
    seed_ = testing::test_seed(fixed + 0x1000u * static_cast<uint32_t>(GetParam()));
    trace_.emplace(__FILE__, __LINE__, testing::seed_note(seed_));
    return std::mt19937(seed_);
  }
  uint32_t seed_ = 0;

 private:
  std::optional<::testing::ScopedTrace> trace_;
  std::optional<StreamHandle> stream_;
  std::optional<Zeros> zeros_;
};

// ---- (a) random steps: the cuda target equals the host target -----------------------------

class SglangRandomGpu : public SglangGpuTest {};

TEST_P(SglangRandomGpu, CudaTargetMatchesHostTarget) {
  const BuilderKind kind = GetParam();
  const int total = env_int("LINMETA_RANDOM_STEPS", 2000);
  std::mt19937 rng = seeded(0x56a1u);
  const uint32_t seed = seed_;
  std::map<std::string, int> seen;
  Sample s;  // its device memory grows only when a step needs more
  int done = 0, engines = 0, failures = 0, errors = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (done < total && failures < 5) {
    const test::SglangRandomEngine e = test::for_kind(test::random_sglang_engine(rng), kind);
    BuilderOptions co = cuda_options();
    co.programmatic_dependent_launch = coin(rng);
    ++seen[co.programmatic_dependent_launch ? "pdl=on" : "pdl=off"];
    MetadataBuilder host(kind, e.config);
    MetadataBuilder cuda(kind, e.config, co);
    ++engines;
    const int steps = std::min(total - done, uniform(rng, 20, 60));
    for (int i = 0; i < steps && failures < 5; ++i, ++done) {
      fill(s, rng, e);
      for (const auto& l : s.labels) ++seen[l];
      const std::string where = kind_name(kind) + " seed " + std::to_string(seed) + " step " +
                                std::to_string(done) + " (" + s.labels[0] +
                                "): " + test::describe(s.st.s);
      const Metadata* hm = nullptr;
      const Metadata* cm = nullptr;
      const std::string herr = error_of([&] { hm = &host.build(s.st.step); });
      const std::string cerr = error_of([&] { cm = &cuda.build(s.dev.full, stream().get()); });
      if (!herr.empty() || !cerr.empty()) {
        ++errors;
        if (herr != cerr) {
          ++failures;
          ADD_FAILURE() << where << ": host error '" << herr << "', cuda error '" << cerr << "'";
        }
        continue;
      }
      stream().sync();
      const std::string report = compare(kind, *hm, s.st, *cm, s.dev, zeros());
      if (!report.empty()) {
        ++failures;
        ADD_FAILURE() << where << ": " << report;
      }
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[ RANDOM   ] " << kind_name(kind) << ": " << done << " steps, " << engines
            << " engines, " << errors << " rejected, " << secs << " s\n";
  EXPECT_EQ(errors, 0) << "random valid steps were rejected";
  if (total >= 1000) {  // reduced runs (sanitizers) may miss a rare shape
    std::vector<std::string> missing;
    auto need = test::sglang_required_labels(kind);
    need.insert(need.end(), {"pdl=on", "pdl=off"});
    for (const auto& l : need)
      if (!seen.contains(l)) missing.push_back(l);
    EXPECT_TRUE(missing.empty()) << "not exercised: " << join(missing);
  }
}

INSTANTIATE_TEST_SUITE_P(Sglang, SglangRandomGpu, ::testing::ValuesIn(kinds()), kind_param);

// ---- (b) CUDA-graph capture of builds --------------------------------------------------------

class SglangCaptureGpu : public SglangGpuTest {};

TEST_P(SglangCaptureGpu, ReplayingACapturedBuildGivesItsResults) {
  const BuilderKind kind = GetParam();
  std::mt19937 rng = seeded(0x56c0u);
  int overwritten = 0;  // second-pass replays whose results were not there before the launch
  for (int round = 0; round < 8; ++round) {
    const test::SglangRandomEngine e = test::for_kind(test::random_sglang_engine(rng), kind);
    MetadataBuilder host(kind, e.config);
    MetadataBuilder cuda(kind, e.config, cuda_options());
    // Six captured builds (within the builder's capture slots), then eager builds that
    // overwrite the builder's outputs.
    struct Captured {
      std::unique_ptr<Sample> s;
      HostMetadata want;
      std::vector<std::byte> want_parts;
      HostMetadata views;  ///< the captured build's metadata (device views), host arrays owned
      Graph graph;
    };
    std::vector<Captured> captured(6);
    for (auto& c : captured) {
      c.s = sample(rng, e);
      c.want = read(host.build(c.s->st.step), zeros());
      c.want_parts = host_contents(parts_of(c.s->st));
      c.graph.capture(stream().get(), [&] {
        c.views.groups.assign(1, cuda.build(c.s->dev.full, stream().get()));
        c.views.own_host_arrays();
      });
    }
    for (int i = 0; i < 6; ++i) {
      const auto s = sample(rng, e);
      cuda.build(s->dev.full, stream().get());
      stream().sync();
    }
    // Replays, forwards then backwards, each from the uploaded step arrays and buffers.
    for (int pass = 0; pass < 2; ++pass)
      for (size_t k = 0; k < captured.size(); ++k) {
        Captured& c = captured[pass == 0 ? k : captured.size() - 1 - k];
        c.s->dev.reset();
        // Meaningful where the other replays and the reset left other results there (read
        // in the second pass only: before its first replay a step's outputs may be memory
        // nothing wrote yet, which initcheck would report).
        if (pass == 1)
          overwritten +=
              mismatch(read(c.views.groups[0], zeros()).groups[0], c.want.groups[0], kind)
                          .empty() &&
                      parts_diff(c.s->dev.parts(), c.s->dev.contents(), c.want_parts).empty()
                  ? 0
                  : 1;
        c.graph.launch(stream().get());
        stream().sync();
        const std::string where = "round " + std::to_string(round) + " pass " +
                                  std::to_string(pass) + " (" + c.s->labels[0] +
                                  "): " + test::describe(c.s->st.s);
        EXPECT_EQ(mismatch(read(c.views.groups[0], zeros()).groups[0], c.want.groups[0], kind), "")
            << where;
        EXPECT_EQ(parts_diff(c.s->dev.parts(), c.s->dev.contents(), c.want_parts), "") << where;
      }
  }
  EXPECT_GT(overwritten, 24) << "the replays of the second pass found their results in place";
}

INSTANTIATE_TEST_SUITE_P(Sglang, SglangCaptureGpu, ::testing::ValuesIn(kinds()), kind_param);

// ---- (c) rejected steps leave everything as it was -----------------------------------------

/// Host lists a mutation replaces (the step's spans then point here).
struct BadLists {
  std::vector<int32_t> ext;
  std::vector<int64_t> seq, track_seqlens;
};

/// Makes `s` (a copy of a valid step: host or device pointers alike) invalid in way `which`;
/// false when that way does not apply to this step. Each is one the common validation or
/// plan of the family rejects.
bool mutate(int which, SglangStep& s, BadLists& lists, int32_t max_rows) {
  const bool eager = s.entry == SglangEntry::Eager;
  const bool pg = s.entry == SglangEntry::PrefillGraph;  // KDA's prefill-graph tables
  SglangPrefillGraph& tables = s.prefill_graph;
  const bool verify = s.forward_mode == SglangMode::TargetVerify;
  switch (which) {
    case 0:
      s.batch_size = max_rows + 1;
      return true;
    case 1:
      s.forward_mode = static_cast<SglangMode>(9);
      return true;
    case 2:
      s.entry = static_cast<SglangEntry>(7);
      return true;
    case 3:
      s.mamba_map = nullptr;
      return true;
    case 4:
      s.num_tokens = -1;
      return true;
    case 5:
      s.retrieve_rows = s.batch_size + 1;
      return true;
    case 6:
      if (!s.has_spec_info) return false;
      s.draft_token_num = 0;
      return true;
    case 7:
      if (s.extend_seq_lens.empty()) return false;
      lists.ext.assign(s.extend_seq_lens.begin(), s.extend_seq_lens.end());
      lists.ext.back() = -1;
      s.extend_seq_lens = lists.ext;
      return true;
    case 8:
      lists.seq.assign(s.seq_lens.begin(), s.seq_lens.end());
      lists.seq.push_back(5);
      s.seq_lens = lists.seq;
      return true;
    case 9: {  // a tracked row past its extend
      if (!(eager || pg) || s.track_seqlens.empty() || s.logical_mode == SglangMode::Decode)
        return false;
      for (size_t r = 0; r < s.track_mask.size(); ++r)
        if (s.track_mask[r]) {
          lists.track_seqlens.assign(s.track_seqlens.begin(), s.track_seqlens.end());
          lists.track_seqlens[r] =
              static_cast<int64_t>(s.extend_prefix_lens[r]) + s.extend_seq_lens[r] + 1;
          s.track_seqlens = lists.track_seqlens;
          return true;
        }
      return false;
    }
    case 10:
      if (!s.track) return false;
      s.conv_window = kSglangMaxConvWindow + 1;
      return true;
    case 11:
      if (eager || pg) return false;
      s.graph.query_start_loc = nullptr;
      return true;
    case 12:
      if (s.entry != SglangEntry::GraphReplay) return false;
      s.num_padding = s.batch_size + 1;
      return true;
    case 13:
      if (eager || pg) return false;
      s.forward_mode = s.logical_mode = SglangMode::Extend;
      return true;
    case 14:
      if (eager || !verify) return false;
      s.entry = SglangEntry::CpuGraphCapture;
      return true;
    case 15:
      if (eager || s.entry == SglangEntry::CpuGraphCapture || !verify || s.topk <= 1) return false;
      s.graph.retrieve_parent_token = nullptr;
      return true;
    case 16:
      if (eager || pg || s.entry == SglangEntry::CpuGraphCapture || s.track_indices == nullptr)
        return false;
      s.graph.track_indices = nullptr;
      return true;
    case 17:
      if (!eager || !verify) return false;
      s.has_spec_info = false;
      return true;
    case 18:
      if (!eager || s.extend_seq_lens.empty() || s.logical_mode == SglangMode::Decode ||
          s.forward_mode == SglangMode::DraftExtendV2)
        return false;
      s.extend_seq_lens = {};
      return true;
    case 19:
      s.cache_indices_buf_len = -1;
      return true;
    case 20:  // more sequences than the bucket holds
      if (!pg || s.batch_size < 2) return false;
      tables.max_seqs = s.batch_size - 1;
      tables.packed_len = SglangPrefillGraphLayout::of(tables.num_tokens, tables.max_seqs).total;
      return true;
    case 21:  // more tokens than the bucket holds
      if (!pg || s.extend_num_tokens < 1) return false;
      tables.num_tokens = s.extend_num_tokens - 1;
      tables.packed_len = SglangPrefillGraphLayout::of(tables.num_tokens, tables.max_seqs).total;
      return true;
    case 22:
      if (!pg) return false;
      tables.packed_len += 1;
      return true;
    case 23:  // a tracked batch on a bucket without track tables
      if (!pg || !s.track) return false;
      tables.track = false;
      return true;
    default:
      return false;
  }
}
constexpr int kMutations = 24;
constexpr int kFirstPrefillGraphMutation = 20;

class SglangErrorsGpu : public SglangGpuTest {};

TEST_P(SglangErrorsGpu, RejectedStepsLeaveTheMetadataAndTheBuffersUntouched) {
  const BuilderKind kind = GetParam();
  std::mt19937 rng = seeded(0x56e0u);
  std::vector<int> rejected(kMutations, 0);
  const int rounds = std::max(20, env_int("LINMETA_RANDOM_STEPS", 2000) / 10);
  for (int round = 0; round < rounds; round += 25) {
    const test::SglangRandomEngine e = test::for_kind(test::random_sglang_engine(rng), kind);
    MetadataBuilder host(kind, e.config);
    MetadataBuilder cuda(kind, e.config, cuda_options());
    for (int i = 0; i < 25; ++i) {
      const auto s = sample(rng, e);
      const Metadata hm = host.build(s->st.step);
      const Metadata cm = cuda.build(s->dev.full, stream().get());
      stream().sync();
      const HostMetadata hwant = read(hm, zeros()), cwant = read(cm, zeros());
      const auto hparts = host_contents(parts_of(s->st));
      const auto cparts = s->dev.contents();
      const std::string where = s->labels[0] + ": " + test::describe(s->st.s);
      // Every applicable mutation, on both targets, with the same step arrays and buffers.
      for (int which = 0; which < kMutations; ++which) {
        SglangStep hbad = s->st.s, cbad = s->dev.step;
        BadLists hl, cl;
        if (!mutate(which, hbad, hl, e.config.max_num_seqs)) continue;
        mutate(which, cbad, cl, e.config.max_num_seqs);
        Step hstep, cstep;
        hstep.sglang = &hbad;
        cstep.sglang = &cbad;
        const std::string herr = error_of([&] { host.build(hstep); });
        const std::string cerr = error_of([&] { cuda.build(cstep, stream().get()); });
        EXPECT_FALSE(herr.empty()) << "mutation " << which << " was built: " << where;
        EXPECT_EQ(herr, cerr) << "mutation " << which << ": " << where;
        ++rejected[static_cast<size_t>(which)];
      }
      stream().sync();
      EXPECT_EQ(mismatch(read(hm, zeros()).groups[0], hwant.groups[0], kind), "")
          << "host: " << where;
      EXPECT_EQ(mismatch(read(cm, zeros()).groups[0], cwant.groups[0], kind), "")
          << "cuda: " << where;
      const std::vector<Part> parts = parts_of(s->st);
      EXPECT_EQ(parts_diff(parts, host_contents(parts), hparts), "") << "host: " << where;
      EXPECT_EQ(parts_diff(s->dev.parts(), s->dev.contents(), cparts), "") << "cuda: " << where;
    }
  }
  // Mutation 15 needs a tree verify, which a kind without tree drafts never builds; the
  // prefill-graph mutations a kind with KDA's prefill-graph tables.
  const test::SglangRandomEngine ek = test::for_kind(test::SglangRandomEngine{}, kind);
  for (int which = 0; which < kMutations; ++which)
    EXPECT_TRUE(rejected[static_cast<size_t>(which)] > 0 || (which == 15 && !ek.tree_drafts) ||
                (which >= kFirstPrefillGraphMutation && !ek.prefill_graph))
        << "mutation " << which << " never applied";
}

INSTANTIATE_TEST_SUITE_P(Sglang, SglangErrorsGpu, ::testing::ValuesIn(kinds()), kind_param);

// ---- (d) no host synchronisation, no allocation ----------------------------------------------

class SglangSteadyStateGpu : public SglangGpuTest {};

TEST_P(SglangSteadyStateGpu, BuildsReturnWhileTheStreamIsBusy) {
  const BuilderKind kind = GetParam();
  constexpr int kSlots = 8;
  constexpr long long kSpinNs = 2'000'000'000;
  std::mt19937 rng = seeded(0x56b0u);
  const test::SglangRandomEngine e = test::for_kind(test::random_sglang_engine(rng), kind);
  std::vector<std::unique_ptr<Sample>> steps;
  for (int i = 0; i < 3 * kSlots - 1; ++i) steps.push_back(sample(rng, e));
  BuilderOptions co = cuda_options();
  co.staging_slots = kSlots;
  MetadataBuilder cuda(kind, e.config, co);
  for (int i = 0; i < 2 * kSlots; ++i)
    cuda.build(steps[static_cast<size_t>(i)]->dev.full, stream().get());
  stream().sync();  // warm-up: every staging slot used once and finished

  MappedHost<int> flag(1), state(2);
  double elapsed = 0;
  bool busy_after = false;
  int state_after = -1;
  HostMetadata last;  // views of the last build, read after the release
  {
    const Release release{flag.host()};
    launch_spin(stream().get(), flag.device(), state.device(), kSpinNs);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 2 * kSlots; i < 3 * kSlots - 1; ++i) {
      last.groups.assign(1, cuda.build(steps[static_cast<size_t>(i)]->dev.full, stream().get()));
      last.own_host_arrays();
    }
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state_after = state.host()[1];
    busy_after = cudaStreamQuery(stream().get()) == cudaErrorNotReady;
  }
  stream().sync();
  EXPECT_LT(elapsed, 0.25) << kSlots - 1 << " builds took " << elapsed << " s while a spin kernel "
                           << "held the stream";
  EXPECT_EQ(state_after, 0) << "the spin kernel ended before the builds returned";
  EXPECT_TRUE(busy_after) << "the stream was idle right after the builds";
  EXPECT_EQ(state.host()[1], 1) << "the spin kernel timed out instead of being released";
  // The last build, finished after the release, is right.
  const Sample& s = *steps.back();
  MetadataBuilder host(kind, e.config);
  EXPECT_EQ(mismatch(read(last.groups[0], zeros()).groups[0],
                     read(host.build(s.st.step), zeros()).groups[0], kind),
            "")
      << test::describe(s.st.s);
}

TEST_P(SglangSteadyStateGpu, ThousandBuildsAllocateNothing) {
  const BuilderKind kind = GetParam();
  constexpr int kDistinct = 40;
  constexpr int kBuilds = 1000;
  std::mt19937 rng = seeded(0x56d0u);
  const test::SglangRandomEngine e = test::for_kind(test::random_sglang_engine(rng), kind);
  std::vector<std::unique_ptr<Sample>> steps;
  for (int i = 0; i < kDistinct; ++i) steps.push_back(sample(rng, e));
  MetadataBuilder cuda(kind, e.config, cuda_options());
  const auto run = [&](int i) {
    cuda.build(steps[static_cast<size_t>(i % kDistinct)]->dev.full, stream().get());
  };
  expect_no_allocation(cuda, stream(), 2 * kDistinct, kBuilds, run);
}

INSTANTIATE_TEST_SUITE_P(Sglang, SglangSteadyStateGpu, ::testing::ValuesIn(kinds()), kind_param);

}  // namespace
}  // namespace linmeta::gputest
