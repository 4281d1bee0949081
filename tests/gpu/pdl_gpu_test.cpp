// Programmatic Dependent Launch (BuilderOptions::programmatic_dependent_launch):
// a producer kernel writes seq_lens and accepted counts right before the build,
// after a delay; a PDL build that is scheduled early must still read the
// producer's values (griddepcontrol.wait), eagerly and inside a captured graph.
#include "gpu_support.hpp"
#include "spin_kernel.hpp"

namespace linmeta::gputest {
namespace {

using linmeta::testing::random_config;
using linmeta::testing::random_step;
using linmeta::testing::RandomStepOptions;
using linmeta::testing::uniform;

constexpr long long kProducerDelayNs = 100'000;  // 100 us: far longer than a launch

class PdlGpu : public GpuParamTest<std::tuple<BuilderKind, bool /*capture*/>> {};

TEST_P(PdlGpu, BuildWaitsForTheProducerOfItsDeviceInputs) {
  const auto [kind, captured] = GetParam();
  const uint32_t seed = testing::test_seed(kind == BuilderKind::Gdn ? 0x9d1u : 0x9d2u);
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937 rng(seed);
  StreamHandle stream;
  DeviceStep dev(size_t{16} << 20);
  DeviceMemory truth(size_t{1} << 20);
  const int steps = env_int("LINMETA_PDL_STEPS", 150);
  int compared = 0;
  for (int i = 0; i < steps; ++i) {
    Config cfg = random_config(rng, kind);
    cfg.max_num_batched_tokens =
        std::max(cfg.max_num_batched_tokens, cfg.max_num_seqs * (cfg.num_spec + 1) + 16);
    const int32_t G = uniform(rng, 0, 1) == 0 ? 1 : 4;
    BuilderOptions ho, co;
    ho.target = Target::Host;
    co.target = Target::Cuda;
    co.programmatic_dependent_launch = true;
    ho.num_groups = co.num_groups = G;
    MetadataBuilder host(kind, cfg, ho);
    MetadataBuilder cuda(kind, cfg, co);
    RandomStepOptions o;
    o.kind = kind;
    o.num_groups = G;
    RandomStep r = random_step(rng, cfg, o);
    if (captured) r.capture = false;  // the graph holds an ordinary build
    dev.upload(r);
    const auto n = static_cast<size_t>(r.num_reqs);
    // seq_lens and accepted counts are adjacent in DeviceStep: [seq_lens | accepted].
    auto* inputs = const_cast<int32_t*>(dev.step.seq_lens);
    // On the build's stream: a device-to-device cudaMemcpy does not wait for its copy, and the
    // legacy stream it runs on is not ordered before this non-blocking stream's scramble.
    check(cudaMemcpyAsync(truth.get(), inputs, 2 * n * sizeof(int32_t), cudaMemcpyDeviceToDevice,
                          stream.get()),
          "cudaMemcpyAsync(truth)");
    auto scramble = [&] {  // values a build must never see: -1 everywhere
      check(cudaMemsetAsync(inputs, 0xff, 2 * n * sizeof(int32_t), stream.get()), "cudaMemset");
    };
    std::span<const Metadata> got_views;
    auto produce_and_build = [&] {
      launch_delayed_copy(stream.get(), inputs, truth.get<int32_t>(), static_cast<int>(2 * n),
                          kProducerDelayNs);
      got_views = build_step(cuda, r, dev.step, dev.tables, G == 1, stream.get());
    };
    const Step hs = r.host_step();
    const auto htables = r.host_tables();
    std::span<const Metadata> want;
    try {
      want = build_step(host, r, hs, htables, G == 1, nullptr);
    } catch (const Error&) {
      continue;  // a step this config rejects: nothing to compare
    }
    Graph graph;
    scramble();
    if (captured) {
      graph.capture(stream.get(), produce_and_build);
      graph.launch(stream.get());
    } else {
      produce_and_build();
    }
    stream.sync();
    const HostMetadata got = read_back(got_views);
    ASSERT_EQ(got.groups.size(), want.size());
    for (size_t g = 0; g < want.size(); ++g) {
      const std::string report = mismatch(got.groups[g], want[g], kind);
      ASSERT_TRUE(report.empty()) << "step " << i << " group " << g << ": " << report << "\n  "
                                  << case_json(r, "pdl").dump();
    }
    ++compared;
  }
  EXPECT_GT(compared, steps / 2);
}

INSTANTIATE_TEST_SUITE_P(Modes, PdlGpu,
                         ::testing::Combine(::testing::Values(BuilderKind::Gdn, BuilderKind::Kda),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<BuilderKind, bool>>& i) {
                           return std::string(std::get<0>(i.param) == BuilderKind::Gdn ? "Gdn"
                                                                                       : "Kda") +
                                  (std::get<1>(i.param) ? "_Captured" : "_Eager");
                         });

}  // namespace
}  // namespace linmeta::gputest
