// After its first step, a builder never touches the heap: build(), build_groups(),
// the capture builds and update_block_table() run without a single allocation.
// Every global operator new / delete of this test binary is replaced by a
// counting version; counting is on only inside a CountAllocations scope.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "common/test_seed.hpp"
#include "host_step.hpp"
#include "linmeta/names.hpp"
#include "random_step.hpp"
#include "sglang_random_step.hpp"
#include "sglang_step.hpp"

namespace {

std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocs{0};
std::atomic<int64_t> g_frees{0};

void* counted_malloc(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}

void* counted_aligned(std::size_t n, std::align_val_t al) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  const auto a = static_cast<std::size_t>(al);
  const std::size_t size = n == 0 ? a : (n + a - 1) / a * a;  // aligned_alloc wants a multiple
  return std::aligned_alloc(a, size);
}

void counted_free(void* p) noexcept {
  if (p == nullptr) return;
  if (g_counting.load(std::memory_order_relaxed)) g_frees.fetch_add(1, std::memory_order_relaxed);
  std::free(p);
}

void* or_throw(void* p) {
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

/// Counts allocations and frees while alive.
class CountAllocations {
 public:
  CountAllocations() {
    g_allocs = 0;
    g_frees = 0;
    g_counting = true;
  }
  ~CountAllocations() { stop(); }
  CountAllocations(const CountAllocations&) = delete;
  CountAllocations& operator=(const CountAllocations&) = delete;
  void stop() { g_counting = false; }
  [[nodiscard]] static int64_t allocs() { return g_allocs.load(); }
  [[nodiscard]] static int64_t frees() { return g_frees.load(); }
};

}  // namespace

// ---- replaced global allocation functions ---------------------------------------

void* operator new(std::size_t n) { return or_throw(counted_malloc(n)); }
void* operator new[](std::size_t n) { return or_throw(counted_malloc(n)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return counted_malloc(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return counted_malloc(n); }
void* operator new(std::size_t n, std::align_val_t al) { return or_throw(counted_aligned(n, al)); }
void* operator new[](std::size_t n, std::align_val_t al) {
  return or_throw(counted_aligned(n, al));
}
void* operator new(std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  return counted_aligned(n, al);
}
void* operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  return counted_aligned(n, al);
}

void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { counted_free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  counted_free(p);
}

namespace linmeta {
namespace {

using testing::RandomStep;
using testing::RandomStepOptions;

TEST(NoAlloc, TheCounterSeesEveryOverload) {
  CountAllocations count;
  void* a = ::operator new(16);
  void* b = ::operator new[](16);
  void* c = ::operator new (64, std::align_val_t{64});
  void* d = ::operator new[](8, std::align_val_t{128}, std::nothrow);
  void* e = ::operator new(8, std::nothrow);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d) % 128, 0u);
  ::operator delete(a, 16);
  ::operator delete[](b);
  ::operator delete (c, std::align_val_t{64});
  ::operator delete[](d, std::align_val_t{128});
  ::operator delete(e);
  count.stop();
  EXPECT_EQ(CountAllocations::allocs(), 5);
  EXPECT_EQ(CountAllocations::frees(), 5);
}

// The library's own allocations go through the replaced operators: a builder's
// construction is seen (so a zero count below is not vacuous).
TEST(NoAlloc, TheCounterSeesTheLibrary) {
  Config c;
  CountAllocations count;
  { GdnMetadataBuilder b(c, testing::host_options()); }
  count.stop();
  EXPECT_GT(CountAllocations::allocs(), 0);
  EXPECT_EQ(CountAllocations::allocs(), CountAllocations::frees());
}

/// Host views of random steps, made before counting starts.
struct Prepared {
  std::vector<Step> steps;
  std::vector<std::vector<BlockTable>> tables;
  std::vector<char> capture;
};

Prepared prepare(const std::vector<RandomStep>& steps) {
  Prepared p;
  for (const auto& r : steps) {
    p.steps.push_back(r.host_step());
    p.tables.push_back(r.host_tables());
    p.capture.push_back(r.capture ? 1 : 0);
  }
  return p;
}

int64_t use(const Metadata& m) {
  int64_t x = m.num_prefills + m.num_decodes + m.num_spec_decodes + m.num_actual_tokens;
  if (m.spec_state_indices_tensor && m.spec_state_indices_tensor.size() > 0)
    x += m.spec_state_indices_tensor.at(0);
  if (m.non_spec_state_indices_tensor && m.non_spec_state_indices_tensor.size() > 0)
    x += m.non_spec_state_indices_tensor.at(0);
  return x;
}

/// One random config, `num_steps` random steps. Steps are generated in batches,
/// each before counting starts; the very first step warms the builder up.
void expect_no_allocations(BuilderKind kind, int32_t groups, uint32_t fixed_seed,
                           int32_t num_steps) {
  const uint32_t seed = testing::test_seed(fixed_seed);
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937 rng(seed);
  Config config = testing::random_config(rng, kind);
  // High enough that random_step never raises it: every step fits this one builder.
  config.max_num_batched_tokens = 16384;
  const RandomStepOptions options{kind, groups, 3000, true};
  MetadataBuilder b(kind, config, testing::host_options(groups));
  bool warm = false;
  int64_t checksum = 0;
  constexpr int32_t kBatch = 25;  // steps generated (and held) at a time
  for (int32_t done = 0; done < num_steps; done += kBatch) {
    std::vector<RandomStep> steps;
    for (int32_t i = 0; i < kBatch; ++i) {
      steps.push_back(testing::random_step(rng, config, options));
      ASSERT_EQ(steps.back().config.max_num_batched_tokens, config.max_num_batched_tokens);
    }
    const Prepared p = prepare(steps);
    size_t first = 0;
    if (!warm) {
      b.build_groups(p.steps[0], p.tables[0]);
      warm = true;
      first = 1;
    }
    std::string error;
    CountAllocations count;
    try {
      for (size_t i = first; i < p.steps.size(); ++i) {
        const Step& s = p.steps[i];
        const auto& t = p.tables[i];
        const auto g = static_cast<int32_t>(i % static_cast<size_t>(groups));
        const Metadata* m0 = nullptr;
        if (groups == 1 && i % 2 == 0) {
          m0 = p.capture[i] ? &b.build_for_cudagraph_capture(s) : &b.build(s);
        } else {
          const auto ms =
              p.capture[i] ? b.build_groups_for_cudagraph_capture(s, t) : b.build_groups(s, t);
          m0 = &ms[0];
          checksum += use(ms[static_cast<size_t>(g)]);
        }
        checksum += use(*m0);
        // Another group's table into group g (all tables of a step have one width).
        const Metadata u = b.update_block_table(*m0, t[(i + 1) % t.size()], g);
        checksum += use(u);
      }
    } catch (const std::exception& e) {
      count.stop();
      error = e.what();
    }
    count.stop();
    ASSERT_TRUE(error.empty()) << error;
    ASSERT_EQ(CountAllocations::allocs(), 0)
        << "groups " << groups << ": heap allocations after the first step";
    ASSERT_EQ(CountAllocations::frees(), 0) << "heap frees after the first step";
  }
  EXPECT_NE(checksum, -1);
}

constexpr int32_t kConfigs = 8;
constexpr int32_t kStepsPerConfig = 200;

TEST(NoAlloc, GdnSingleGroup) {
  for (uint32_t seed = 0; seed < kConfigs; ++seed)
    expect_no_allocations(BuilderKind::Gdn, 1, 100 + seed, kStepsPerConfig);
}

TEST(NoAlloc, GdnFourGroups) {
  for (uint32_t seed = 0; seed < kConfigs; ++seed)
    expect_no_allocations(BuilderKind::Gdn, 4, 200 + seed, kStepsPerConfig);
}

TEST(NoAlloc, KdaSingleGroup) {
  for (uint32_t seed = 0; seed < kConfigs; ++seed)
    expect_no_allocations(BuilderKind::Kda, 1, 300 + seed, kStepsPerConfig);
}

TEST(NoAlloc, KdaFourGroups) {
  for (uint32_t seed = 0; seed < kConfigs; ++seed)
    expect_no_allocations(BuilderKind::Kda, 4, 400 + seed, kStepsPerConfig);
}

/// The Mamba family, linear attention and Inkling (their own rules, one pipeline with GDN / KDA's):
/// random vllm-0.34 configurations, one and four groups.
class NoAllocMamba : public ::testing::TestWithParam<BuilderKind> {};

TEST_P(NoAllocMamba, RandomConfigs) {
  const auto kind = static_cast<uint32_t>(GetParam());
  for (uint32_t seed = 0; seed < kConfigs / 2; ++seed) {
    expect_no_allocations(GetParam(), 1, 500 + 100 * kind + seed, kStepsPerConfig);
    expect_no_allocations(GetParam(), 4, 550 + 100 * kind + seed, kStepsPerConfig);
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, NoAllocMamba,
                         ::testing::Values(BuilderKind::Mamba2, BuilderKind::Mamba1,
                                           BuilderKind::ShortConv, BuilderKind::Linear,
                                           BuilderKind::BailingLinear, BuilderKind::PleShortConv,
                                           BuilderKind::Inkling),
                         [](const ::testing::TestParamInfo<BuilderKind>& i) {
                           return std::string(linmeta::names::builder_kind_name(i.param));
                         });

/// Hand-picked configurations the random ones may miss: FULL graphs with
/// RecoverSSM and checkpoints, align mode, many groups.
TEST(NoAlloc, FixedConfigsManyGroups) {
  for (BuilderKind kind : {BuilderKind::Gdn, BuilderKind::Kda}) {
    Config c;
    c.num_spec = 3;
    c.num_speculative_blocks = kind == BuilderKind::Kda ? 0 : 3;
    c.max_num_seqs = 64;
    c.max_num_batched_tokens = 16384;
    c.full_cuda_graph = true;
    c.mamba_cache_mode = CacheMode::Align;
    c.block_size = 16;
    c.chunk_metadata = kind == BuilderKind::Gdn;
    c.use_recoverssm = kind == BuilderKind::Kda;
    c.num_prefill_checkpoint_blocks = kind == BuilderKind::Kda ? 1 : 0;
    const uint32_t seed = testing::test_seed(7);
    SCOPED_TRACE(testing::seed_note(seed));
    std::mt19937 rng(seed);
    const RandomStepOptions options{kind, 16, 400, true};
    std::vector<RandomStep> steps;
    for (int32_t i = 0; i < 40; ++i) steps.push_back(testing::random_step(rng, c, options));
    const Prepared p = prepare(steps);
    MetadataBuilder b(kind, c, testing::host_options(16));
    b.build_groups(p.steps[0], p.tables[0]);
    int64_t checksum = 0;
    CountAllocations count;
    for (size_t i = 1; i < p.steps.size(); ++i) {
      const auto ms = p.capture[i] ? b.build_groups_for_cudagraph_capture(p.steps[i], p.tables[i])
                                   : b.build_groups(p.steps[i], p.tables[i]);
      for (int32_t g = 0; g < 16; g += 5)
        checksum += use(b.update_block_table(ms[0], p.tables[i][static_cast<size_t>(g)], g));
    }
    count.stop();
    EXPECT_EQ(CountAllocations::allocs(), 0) << (kind == BuilderKind::Gdn ? "gdn" : "kda");
    EXPECT_EQ(CountAllocations::frees(), 0);
    EXPECT_NE(checksum, -1);
  }
}

/// The SGLang kinds (linmeta/sglang.hpp): every entry point, tracking, tree verify and KDA's
/// prefill-graph tables included.
TEST(NoAlloc, SglangEveryKindAndEntry) {
  Config c;
  c.max_num_seqs = 64;
  c.max_num_batched_tokens = 4096;
  c.chunk_size = 8;
  SglangMamba2MetadataBuilder b(c);
  SglangGdnMetadataBuilder gdn(c);
  SglangLightningMetadataBuilder lightning(c);
  SglangKdaMetadataBuilder kda(c);
  SglangShortConvMetadataBuilder short_conv(c);
  std::vector<std::unique_ptr<test::SglStep>> steps;
  const auto add = [&]() -> test::SglStep& { return *steps.emplace_back(new test::SglStep); };
  add().rows(40);  // decode
  test::SglStep& mixed = add();
  mixed.extend({{0, 300}, {1024, 70}, {5, 33}, {90, 1}, {91, 1}}, SglangMode::Mixed);
  mixed.track();
  mixed.s.conv_block_table = true;
  mixed.s.host_mirrors = true;
  mixed.cache_buf.assign(48, 0);
  mixed.s.cache_indices_buf = mixed.cache_buf.data();
  mixed.s.cache_indices_buf_len = 48;
  test::SglStep& verify = add();
  verify.rows(6);
  verify.s.forward_mode = verify.s.logical_mode = SglangMode::TargetVerify;
  verify.s.has_spec_info = true;
  verify.s.topk = 2;
  verify.s.draft_token_num = 4;
  verify.s.num_tokens = 24;
  verify.rnt.assign(24, 1);
  verify.rns.assign(24, -1);
  verify.s.retrieve_next_token = verify.rnt.data();
  verify.s.retrieve_next_sibling = verify.rns.data();
  verify.s.retrieve_rows = 6;
  for (const SglangEntry entry :
       {SglangEntry::GraphReplay, SglangEntry::GraphCapture, SglangEntry::CpuGraphCapture}) {
    test::SglStep& g = add();
    g.rows(12);
    g.s.num_padding = entry == SglangEntry::GraphReplay ? 3 : -1;
    g.track_indices.assign(12, 9);
    g.s.track_indices = entry == SglangEntry::CpuGraphCapture ? nullptr : g.track_indices.data();
    g.graph(entry);
  }
  // KDA's prefill-graph tables, tracked and not.
  for (const bool track : {false, true}) {
    test::SglStep& pg = add();
    pg.extend({{0, 300}, {1024, 70}, {5, 33}, {90, 1}}, SglangMode::Extend);
    if (track) pg.track();
    pg.s.original_batch_size = track ? 3 : -1;
    pg.prefill_graph(512, 32, true);
  }
  const auto lightning_takes = [](const test::SglStep& st) { return st.s.topk <= 1; };
  const auto kda_only = [](const test::SglStep& st) {
    return st.s.entry == SglangEntry::PrefillGraph;
  };
  for (const auto& st : steps) {
    kda.build(st->step);
    if (kda_only(*st)) continue;
    b.build(st->step);
    gdn.build(st->step);
    short_conv.build(st->step);
    if (lightning_takes(*st)) lightning.build(st->step);
  }
  int64_t checksum = 0;
  CountAllocations count;
  for (int round = 0; round < 3; ++round)
    for (const auto& st : steps) {
      checksum += kda.build(st->step).sglang->draft_token_num;
      if (kda_only(*st)) continue;
      checksum += b.build(st->step).sglang->num_decodes + gdn.build(st->step).sglang->num_decodes;
      checksum += short_conv.build(st->step).sglang->cache_indices.rows;
      if (lightning_takes(*st)) checksum += lightning.build(st->step).sglang->batch_size;
    }
  count.stop();
  EXPECT_EQ(CountAllocations::allocs(), 0);
  EXPECT_EQ(CountAllocations::frees(), 0);
  EXPECT_NE(checksum, -1);
}

/// Every kind of the Sglang family over random steps of every entry and mode
/// (sglang_random_step.hpp).
TEST(NoAlloc, SglangRandomStepsEveryKind) {
  for (const BuilderKind kind : test::sglang_kinds()) {
    const uint32_t seed = testing::test_seed(0x5a11u + static_cast<uint32_t>(kind));
    SCOPED_TRACE(std::string(names::builder_kind_name(kind)) + ": " + testing::seed_note(seed));
    std::mt19937 rng(seed);
    const test::SglangRandomEngine e = test::for_kind(test::random_sglang_engine(rng), kind);
    MetadataBuilder b(kind, e.config);
    std::vector<std::unique_ptr<test::SglStep>> steps;
    for (int i = 0; i < 80; ++i)
      test::random_sglang_step(rng, e, *steps.emplace_back(new test::SglStep));
    for (const auto& st : steps) b.build(st->step);
    int64_t checksum = 0;
    CountAllocations count;
    for (int round = 0; round < 3; ++round)
      for (const auto& st : steps) checksum += b.build(st->step).sglang->draft_token_num;
    count.stop();
    EXPECT_EQ(CountAllocations::allocs(), 0);
    EXPECT_EQ(CountAllocations::frees(), 0);
    EXPECT_NE(checksum, -1);
  }
}

}  // namespace
}  // namespace linmeta
