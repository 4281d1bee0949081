// Device inputs that break the contract (seq_lens far above the host bound, negative
// or INT_MIN / INT_MAX values, garbage accepted counts) give the same defined result
// on both targets and never read outside a block-table row or write outside a
// buffer (run under compute-sanitizer memcheck by scripts/gpu-check.sh). The result
// for such values is documented in docs/semantics.md: the aligned window is clamped
// to end at the table's last column.
#include <climits>

#include "gpu_support.hpp"

namespace linmeta::gputest {
namespace {

using linmeta::testing::coin;
using linmeta::testing::pick;
using linmeta::testing::random_config;
using linmeta::testing::random_step;
using linmeta::testing::RandomStepOptions;
using linmeta::testing::uniform;

int32_t adversarial(std::mt19937& rng, int32_t honest) {
  switch (uniform(rng, 0, 6)) {
    case 0:
      return INT_MAX;
    case 1:
      return INT_MIN;
    case 2:
      return -1;
    case 3:
      return honest + uniform(rng, 1, 1 << 20);
    case 4:
      return static_cast<int32_t>(rng());
    default:
      return honest;
  }
}

class AdversarialDeviceInputsGpu : public GpuParamTest<BuilderKind> {};

TEST_P(AdversarialDeviceInputsGpu, DefinedAndInBoundsOnBothTargets) {
  const BuilderKind kind = GetParam();
  const uint32_t seed = testing::test_seed(0xad1u + static_cast<uint32_t>(kind));
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937 rng(seed);
  StreamHandle stream;
  DeviceStep dev(size_t{16} << 20);
  const int steps = env_int("LINMETA_ADVERSARIAL_STEPS", 400);
  int compared = 0;
  for (int i = 0; i < steps; ++i) {
    Config cfg = random_config(rng, kind, coin(rng) ? Profile::Seed : Profile::Vllm034);
    // Align mode reads seq_lens for every gather (the Attention family has no state).
    if (!in_family(kind, BuilderFamily::Attention) && coin(rng, 0.7)) {
      cfg.mamba_cache_mode = CacheMode::Align;
      cfg.block_size = pick(rng, {1, 16});
      cfg.num_speculative_blocks =
          (kind == BuilderKind::Kda && cfg.use_recoverssm) ? 0 : cfg.num_spec;
    }
    cfg.max_num_batched_tokens =
        std::max(cfg.max_num_batched_tokens, cfg.max_num_seqs * (cfg.num_spec + 1) + 16);
    const int32_t G = coin(rng) ? 1 : 3;
    BuilderOptions ho, co;
    ho.target = Target::Host;
    co.target = Target::Cuda;
    ho.num_groups = co.num_groups = G;
    MetadataBuilder host(kind, cfg, ho);
    MetadataBuilder cuda(kind, cfg, co);
    RandomStepOptions o;
    o.kind = kind;
    o.num_groups = G;
    RandomStep r = random_step(rng, cfg, o);
    for (auto& v : r.seq_lens) v = adversarial(rng, v);
    for (auto& v : r.accepted) v = adversarial(rng, v);
    dev.upload(r);
    const Step hs = r.host_step();
    const auto htables = r.host_tables();
    std::span<const Metadata> want;
    try {
      want = build_step(host, r, hs, htables, G == 1, nullptr);
    } catch (const Error&) {
      continue;  // host-side validation rejects the step: nothing reaches the device
    }
    const std::span<const Metadata> got_views =
        build_step(cuda, r, dev.step, dev.tables, G == 1, stream.get());
    stream.sync();
    const HostMetadata got = read_back(got_views);
    for (size_t g = 0; g < want.size(); ++g) {
      const std::string report = mismatch(got.groups[g], want[g], kind);
      ASSERT_TRUE(report.empty()) << "step " << i << " group " << g << ": " << report;
    }
    // A re-gather reads the starts the build stored, not the (released) seq_lens.
    const Metadata& m0 = got_views[0];
    const Metadata again = cuda.update_block_table(m0, dev.tables.back(), 0, stream.get());
    const Metadata want_again = host.update_block_table(want[0], htables.back(), 0, nullptr);
    stream.sync();
    const HostMetadata again_host = read_back(again);
    ASSERT_TRUE(mismatch(again_host.groups[0], want_again, kind).empty()) << "update, step " << i;
    ++compared;
  }
  EXPECT_GT(compared, steps / 2);
}

INSTANTIATE_TEST_SUITE_P(Kinds, AdversarialDeviceInputsGpu, kAllKinds, kind_param_name);

}  // namespace
}  // namespace linmeta::gputest
