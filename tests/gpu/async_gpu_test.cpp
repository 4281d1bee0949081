// Asynchrony of the cuda target: builds enqueued back to back on one stream (the
// pinned staging ring of the copy path, taken by steps whose arena outgrows the
// kernel parameters, must never hand out a slot a pending copy still reads), and
// builds that return while the stream is still busy (no host synchronisation).
#include <atomic>
#include <chrono>
#include <thread>
#include <tuple>

#include "gpu_support.hpp"
#include "spin_kernel.hpp"

namespace linmeta::gputest {
namespace {

using linmeta::testing::random_step;
using linmeta::testing::RandomStepOptions;

/// Configurations that exercise spec decoding, FULL-graph staging, align mode, (KDA)
/// RecoverSSM with checkpoints and (Mamba2, PLE ShortConv) prefill checkpoints.
Config async_config(BuilderKind kind, int32_t rows = 64) {
  Config c;
  c.max_num_seqs = rows;
  c.full_cuda_graph = true;
  c.mamba_cache_mode = CacheMode::Align;
  if (kind == BuilderKind::Gdn) {
    c.num_spec = 2;
    c.block_size = 16;
    c.num_speculative_blocks = 2;
    c.chunk_metadata = true;
  } else if (!is_gdn_family(kind)) {  // the Mamba family: vLLM 0.34's rules only
    c.profile = Profile::Vllm034;
    c.prefill_backend = PrefillBackend::Triton;
    c.num_spec = 3;
    c.block_size = 64;
    c.num_speculative_blocks = 3;
    c.chunk_metadata = false;
    if (kind == BuilderKind::Mamba2) c.chunk_size = 128;
    if (kind == BuilderKind::Mamba2 || kind == BuilderKind::PleShortConv) {
      c.num_prefill_checkpoint_blocks = 1;
      c.prefill_checkpoint_alignment = 16;
    }
  } else {
    c.num_spec = 3;
    c.block_size = 64;
    c.use_recoverssm = true;
    c.num_speculative_blocks = 0;
    c.num_prefill_checkpoint_blocks = 1;
    c.chunk_metadata = false;
  }
  if (in_family(kind, BuilderFamily::Attention)) {  // no Mamba state (Inkling, I2)
    c.mamba_cache_mode = CacheMode::None;
    c.num_speculative_blocks = 0;
  }
  c.max_num_batched_tokens = std::max(4096, c.max_num_seqs * (c.num_spec + 1) + 16);
  return c;
}

std::vector<RandomStep> random_steps(BuilderKind kind, const Config& cfg, int32_t groups, int n,
                                     uint32_t seed) {
  std::mt19937 rng(seed);
  RandomStepOptions o;
  o.kind = kind;
  o.num_groups = groups;
  std::vector<RandomStep> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(random_step(rng, cfg, o));
    if (out.back().config.max_num_batched_tokens != cfg.max_num_batched_tokens)
      throw std::runtime_error("random_step changed the configuration");
  }
  return out;
}

// ---- (a) ring safety ---------------------------------------------------------------

using RingParam =
    std::tuple<BuilderKind, int32_t /*groups*/, int32_t /*staging slots*/, int32_t /*max rows*/>;
class RingSafetyGpu : public GpuParamTest<RingParam> {};

TEST_P(RingSafetyGpu, BackToBackBuildsWithoutSyncMatchSynchronisedHostBuilds) {
  const auto [kind, G, slots, rows] = GetParam();
  constexpr int kSteps = 64;
  const Config cfg = async_config(kind, rows);
  const uint32_t seed = testing::test_seed(0xa5a5u + static_cast<uint32_t>(G * 16 + slots));
  SCOPED_TRACE(testing::seed_note(seed));
  const auto steps = random_steps(kind, cfg, G, kSteps, seed);

  // Every step keeps its own device inputs: the finish kernels read them later.
  std::vector<DeviceStep> dev(kSteps);
  for (int i = 0; i < kSteps; ++i)
    dev[static_cast<size_t>(i)].upload(steps[static_cast<size_t>(i)]);

  BuilderOptions co;
  co.target = Target::Cuda;
  co.num_groups = G;
  co.staging_slots = slots;
  BuilderOptions ho = co;
  ho.target = Target::Host;
  MetadataBuilder cuda(kind, cfg, co);
  MetadataBuilder host(kind, cfg, ho);
  StreamHandle stream;
  SnapshotArea dev_snap(Target::Cuda, size_t{64} << 20);
  SnapshotArea host_snap(Target::Host, size_t{64} << 20);

  // Hold the stream for a while so that the host runs ahead of the device and the
  // ring wraps while earlier copies are still pending.
  MappedHost<int> never(1), state(2);
  launch_spin(stream.get(), never.device(), state.device(), 20'000'000);
  int copy_path = 0;  // builds whose arena was copied (outgrew the kernel parameters)
  for (int i = 0; i < kSteps; ++i) {
    const auto u = static_cast<size_t>(i);
    const auto ms = build_step(cuda, steps[u], dev[u].step, dev[u].tables, G == 1, stream.get());
    copy_path += arena_was_copied(cuda) ? 1 : 0;
    for (const auto& m : ms) dev_snap.take(m, stream.get());
  }
  stream.sync();
  if (rows > 1024) {
    EXPECT_GE(copy_path, 2) << "too few steps exercised the staging ring";
  }
  EXPECT_EQ(state.host()[1], 2) << "the spin kernel should have run to its time limit";

  for (int i = 0; i < kSteps; ++i) {
    const auto& r = steps[static_cast<size_t>(i)];
    const Step hs = r.host_step();
    const auto ht = r.host_tables();
    for (const auto& m : build_step(host, r, hs, ht, G == 1, nullptr)) host_snap.take(m, nullptr);
  }
  const HostMetadata got = dev_snap.collect();
  const HostMetadata want = host_snap.collect();
  ASSERT_EQ(got.groups.size(), static_cast<size_t>(kSteps * G));
  ASSERT_EQ(want.groups.size(), got.groups.size());
  int failures = 0;
  for (size_t k = 0; k < got.groups.size() && failures < 5; ++k) {
    const std::string report = mismatch(got.groups[k], want.groups[k], kind);
    if (!report.empty()) {
      ++failures;
      ADD_FAILURE() << "step " << k / static_cast<size_t>(G) << " group "
                    << k % static_cast<size_t>(G) << ": " << report;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Async, RingSafetyGpu,
                         ::testing::Combine(::testing::Values(BuilderKind::Gdn, BuilderKind::Kda,
                                                              BuilderKind::Mamba2,
                                                              BuilderKind::PleShortConv),
                                            ::testing::Values(1, 4), ::testing::Values(1, 4),
                                            ::testing::Values(64, 2048)),
                         [](const ::testing::TestParamInfo<RingParam>& i) {
                           return std::string(kind_name(std::get<0>(i.param))) + "_G" +
                                  std::to_string(std::get<1>(i.param)) + "_slots" +
                                  std::to_string(std::get<2>(i.param)) + "_rows" +
                                  std::to_string(std::get<3>(i.param));
                         });

// ---- (b) no host synchronisation ------------------------------------------------------

using NoSyncParam = std::tuple<BuilderKind, int32_t /*staging slots*/>;
class NoSyncGpu : public GpuParamTest<NoSyncParam> {};

TEST_P(NoSyncGpu, BuildsReturnWhileTheStreamIsBusy) {
  const auto [kind, slots] = GetParam();
  constexpr long long kSpinNs = 2'000'000'000;  // the spin kernel's own time limit
  const Config cfg = async_config(kind);
  const int n = 2 * slots + slots;
  const uint32_t seed = testing::test_seed(0xb0b0u + static_cast<uint32_t>(slots));
  SCOPED_TRACE(testing::seed_note(seed));
  const auto steps = random_steps(kind, cfg, 1, n, seed);
  std::vector<DeviceStep> dev(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) dev[static_cast<size_t>(i)].upload(steps[static_cast<size_t>(i)]);

  BuilderOptions co;
  co.target = Target::Cuda;
  co.staging_slots = slots;
  MetadataBuilder cuda(kind, cfg, co);
  StreamHandle stream;
  // Warm-up: every staging slot used once and finished.
  for (int i = 0; i < 2 * slots; ++i) {
    const auto u = static_cast<size_t>(i);
    build_step(cuda, steps[u], dev[u].step, dev[u].tables, true, stream.get());
  }
  stream.sync();

  MappedHost<int> flag(1), state(2);
  int builds = 0;
  double elapsed = 0;
  HostMetadata last;  // views of the last build (device memory), read after the release
  bool busy_after = false;
  int state_after = -1;
  {
    const Release release{flag.host()};
    launch_spin(stream.get(), flag.device(), state.device(), kSpinNs);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 2 * slots; i < 2 * slots + slots - 1; ++i, ++builds) {
      const auto u = static_cast<size_t>(i);
      const auto ms = build_step(cuda, steps[u], dev[u].step, dev[u].tables, true, stream.get());
      last.groups.assign(ms.begin(), ms.end());
      last.own_host_arrays();
    }
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state_after = state.host()[1];
    busy_after = cudaStreamQuery(stream.get()) == cudaErrorNotReady;
  }  // releases the spin kernel
  stream.sync();
  EXPECT_EQ(builds, slots - 1);
  EXPECT_LT(elapsed, 0.25) << "staging_slots - 1 = " << slots - 1 << " builds took " << elapsed
                           << " s while a " << kSpinNs / 1e9 << " s spin kernel held the stream";
  EXPECT_EQ(state_after, 0) << "the spin kernel ended before the builds returned";
  EXPECT_TRUE(busy_after) << "the stream was idle right after the builds";
  EXPECT_EQ(state.host()[1], 1) << "the spin kernel timed out instead of being released";

  // The last build, finished after the release, is right.
  if (slots > 1) {
    const auto& r = steps[static_cast<size_t>(2 * slots + slots - 2)];
    BuilderOptions ho;
    MetadataBuilder host(kind, cfg, ho);
    const Step hs = r.host_step();
    const auto ht = r.host_tables();
    const auto want = read_back(build_step(host, r, hs, ht, true, nullptr));
    const auto got = read_back(last.groups);
    EXPECT_EQ(mismatch(got.groups[0], want.groups[0], kind), "");
  }
}

INSTANTIATE_TEST_SUITE_P(Async, NoSyncGpu,
                         ::testing::Combine(kAllKinds, ::testing::Values(2, 4, 8)),
                         [](const ::testing::TestParamInfo<NoSyncParam>& i) {
                           return std::string(kind_name(std::get<0>(i.param))) + "_slots" +
                                  std::to_string(std::get<1>(i.param));
                         });

}  // namespace
}  // namespace linmeta::gputest
