// The step arena is sized once, at construction: arena_capacity_words() (src/pack.cpp) runs
// the packer in count mode over largest_plan(), and every later write is checked against that
// count ("step arena overflow" is an InternalError). The property: for every builder kind, in
// each profile it has, random steps at the configuration's limits (max_num_seqs rows, up to
// max_num_batched_tokens tokens, num_spec = kMaxNumSpec mostly, up to kMaxNumGroups groups,
// prefill checkpoints wherever the configuration allows them, capture builds too) never throw
// an InternalError, and no build or update_block_table writes more arena bytes
// (last_upload_bytes()) than were counted.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/test_seed.hpp"
#include "host_step.hpp"
#include "linmeta/names.hpp"
#include "random_step.hpp"
#include "src/builder_impl.hpp"
#include "src/pack.hpp"

namespace linmeta {
namespace {

using testing::coin;
using testing::pick;

struct KindProfile {
  BuilderKind kind;
  Profile profile;
};

std::string name_of(const KindProfile& p) {
  std::string s(names::builder_kind_name(p.kind));
  if (is_gdn_family(p.kind)) s += p.profile == Profile::Seed ? "_seed" : "_vllm034";
  return s;
}

/// A random configuration of `kind` pushed to the limits the property is about.
Config limit_config(std::mt19937& rng, const KindProfile& p) {
  Config c = testing::random_config(rng, p.kind, p.profile);
  c.max_num_seqs = pick(rng, {16, 128, 512});
  if (coin(rng, 0.8)) c.num_spec = kMaxNumSpec;
  c.use_recoverssm = p.kind == BuilderKind::Kda && c.num_spec > 0 && coin(rng);
  c.num_speculative_blocks = c.use_recoverssm ? 0 : c.num_spec;
  c.use_replayssm = c.use_replayssm && c.num_spec == 0;  // the Triton path has no spec decoding
  // Room for every row at num_spec + 1 tokens (random_step then keeps the configuration),
  // and for long prefills on top.
  c.max_num_batched_tokens =
      std::max(c.max_num_batched_tokens, 2 * c.max_num_seqs * (c.num_spec + 1) + 16);
  // Prefill checkpoints wherever this kind and profile have them.
  const bool v034 = c.profile == Profile::Vllm034;
  if (p.kind == BuilderKind::Kda && v034 && coin(rng, 0.7))
    c.prefill_backend = PrefillBackend::FlashKda;
  if ((p.kind == BuilderKind::Kda && (!v034 || c.prefill_backend == PrefillBackend::FlashKda)) ||
      (p.kind == BuilderKind::Gdn && v034) || p.kind == BuilderKind::Mamba2)
    c.num_prefill_checkpoint_blocks = 1;
  if (p.kind == BuilderKind::PleShortConv) {
    c.num_prefill_checkpoint_blocks = 1;
    c.prefill_checkpoint_alignment = 1;
  }
  if (p.kind == BuilderKind::Mamba2) c.chunk_size = pick(rng, {64, 256});
  return c;
}

std::string param_name(const ::testing::TestParamInfo<KindProfile>& info) {
  return name_of(info.param);
}

class StepArena : public ::testing::TestWithParam<KindProfile> {};

TEST_P(StepArena, BytesWrittenNeverExceedTheCountedCapacity) {
  const KindProfile p = GetParam();
  constexpr int32_t kConfigs = 16;
  constexpr int32_t kStepsPerConfig = 12;
  const uint32_t seed = testing::test_seed(0xa7e4u + 16 * static_cast<uint32_t>(p.kind) +
                                           static_cast<uint32_t>(p.profile));
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937 rng(seed);
  double most = 0;  // the largest share of the counted arena a step used
  int32_t steps = 0;
  for (int32_t ci = 0; ci < kConfigs; ++ci) {
    const Config c = limit_config(rng, p);
    const int32_t G = pick(rng, {1, 8, kMaxNumGroups});
    MetadataBuilder b(p.kind, c, testing::host_options(G));
    const int64_t counted = 4 * int64_t{detail::arena_capacity_words(c, p.kind, G)};
    ASSERT_GE(4 * int64_t{b.impl().executor_->arena().capacity}, counted)
        << "the executor's arena is smaller than the count";
    testing::RandomStepOptions o;
    o.kind = p.kind;
    o.num_reqs = c.max_num_seqs;
    o.max_prefill_len = c.max_num_batched_tokens;
    o.zero_drafts = c.profile == Profile::Vllm034 ? 0.1 : 0;
    for (int32_t si = 0; si < kStepsPerConfig; ++si, ++steps) {
      const testing::RandomStep r = testing::random_step(rng, c, o);
      ASSERT_EQ(r.config.max_num_batched_tokens, c.max_num_batched_tokens);
      const std::string where =
          "config " + std::to_string(ci) + " (max_num_seqs " + std::to_string(c.max_num_seqs) +
          ", num_spec " + std::to_string(c.num_spec) + ", G " + std::to_string(G) + "), step " +
          std::to_string(si) + (r.capture ? " (capture)" : "") + ": " + std::to_string(r.num_reqs) +
          " rows, " + std::to_string(r.num_actual_tokens) + " tokens";
      const Step s = r.host_step();
      const std::vector<BlockTable> tables(static_cast<size_t>(G), r.host_tables()[0]);
      try {
        const auto ms =
            r.capture ? b.build_groups_for_cudagraph_capture(s, tables) : b.build_groups(s, tables);
        ASSERT_LE(b.last_upload_bytes(), counted) << where << ": build";
        most = std::max(most,
                        static_cast<double>(b.last_upload_bytes()) / static_cast<double>(counted));
        b.update_block_table(ms[0], tables[0], testing::uniform(rng, 0, G - 1));
        ASSERT_LE(b.last_upload_bytes(), counted) << where << ": update_block_table";
      } catch (const InternalError& e) {
        FAIL() << where << ": " << e.what();
      } catch (const Error& e) {
        FAIL() << where << ": a valid random step was rejected: " << e.what();
      }
    }
  }
  std::printf("[  ARENA   ] %s: %d steps, at most %.0f%% of the counted arena\n",
              name_of(p).c_str(), steps, 100 * most);
  // The steps come near the count (largest_plan() sums rows no real step has all at once).
  EXPECT_GT(most, 0.25) << "the random steps stayed far below the limits";
}

INSTANTIATE_TEST_SUITE_P(Kinds, StepArena,
                         ::testing::Values(KindProfile{BuilderKind::Gdn, Profile::Seed},
                                           KindProfile{BuilderKind::Gdn, Profile::Vllm034},
                                           KindProfile{BuilderKind::Kda, Profile::Seed},
                                           KindProfile{BuilderKind::Kda, Profile::Vllm034},
                                           KindProfile{BuilderKind::Mamba2, Profile::Vllm034},
                                           KindProfile{BuilderKind::Mamba1, Profile::Vllm034},
                                           KindProfile{BuilderKind::ShortConv, Profile::Vllm034},
                                           KindProfile{BuilderKind::Linear, Profile::Vllm034},
                                           KindProfile{BuilderKind::BailingLinear,
                                                       Profile::Vllm034},
                                           KindProfile{BuilderKind::PleShortConv, Profile::Vllm034},
                                           KindProfile{BuilderKind::Inkling, Profile::Vllm034}),
                         param_name);

}  // namespace
}  // namespace linmeta
