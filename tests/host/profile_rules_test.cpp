// The rules on which the vllm-0.34 profile differs from the seed (docs/semantics.md §11),
// each on a hand-made step built in both profiles. Values worked out from the two
// references' sources; tests/data/vllm034.jsonl checks the same rules on the real wheel.
#include <gtest/gtest.h>

#include <memory>

#include "host_configs.hpp"
#include "host_step.hpp"
#include "linmeta/error.hpp"
#include "src/step_plan.hpp"

namespace linmeta {
namespace {

using testing::HostStep;
using testing::Ints;
using testing::Ints2;
using testing::rows_of;
using testing::vec;

Config config(BuilderKind kind, Profile profile, int32_t k, CacheMode mode = CacheMode::None) {
  Config c = testing::gdn_config(k, mode);
  c.profile = profile;
  c.chunk_metadata = kind == BuilderKind::Gdn;
  c.prefill_backend = kind == BuilderKind::Kda ? PrefillBackend::FlashKda : PrefillBackend::Triton;
  return c;
}

// Metadata views point into the builder's buffers: the result keeps its builder alive.
struct Built : Metadata {
  std::unique_ptr<MetadataBuilder> owner;
};

Built build(BuilderKind kind, const Config& c, const HostStep& s) {
  auto b = std::make_unique<MetadataBuilder>(kind, c, testing::host_options());
  const Metadata m = b->build(s.step());
  return Built{m, std::move(b)};
}

// R1: two spec rows that drafted nothing. Seed: regular decode path; 0.34: spec path.
TEST(ProfileRules, R1ZeroDraftsTakeTheSpecPathInVllm034) {
  HostStep s;
  s.lens({1, 1}).seq({10, 20}).draft_counts({0, 0}).accepted_counts({1, 2}).iota_table(3);
  const Built seed = build(BuilderKind::Gdn, config(BuilderKind::Gdn, Profile::Seed, 2), s);
  EXPECT_EQ(seed.num_spec_decodes, 0);
  EXPECT_EQ(seed.num_decodes, 2);
  EXPECT_FALSE(seed.num_accepted_tokens);
  const Built v = build(BuilderKind::Gdn, config(BuilderKind::Gdn, Profile::Vllm034, 2), s);
  EXPECT_EQ(v.num_spec_decodes, 2);
  EXPECT_EQ(v.num_decodes, 0);
  EXPECT_EQ(vec(v.num_accepted_tokens), (Ints{1, 2}));
  EXPECT_EQ(rows_of(v.spec_state_indices_tensor), (Ints2{{100, 101, 102}, {108, 109, 110}}));
}

// R2: a zero-length non-spec row before the spec row of a pure-spec step. Seed gathers the
// masked row (1); 0.34 the first N rows (row 0).
TEST(ProfileRules, R2PureSpecGathersTheFirstRows) {
  HostStep s;
  s.lens({0, 2}).seq({0, 12}).draft_counts({-1, 1}).accepted_counts({1, 2}).iota_table(2);
  const Built seed = build(BuilderKind::Gdn, config(BuilderKind::Gdn, Profile::Seed, 1), s);
  EXPECT_EQ(rows_of(seed.spec_state_indices_tensor), (Ints2{{108, 109}}));
  EXPECT_EQ(vec(seed.num_accepted_tokens), (Ints{2}));
  const Built v = build(BuilderKind::Gdn, config(BuilderKind::Gdn, Profile::Vllm034, 1), s);
  EXPECT_EQ(rows_of(v.spec_state_indices_tensor), (Ints2{{100, 101}}));
  EXPECT_EQ(vec(v.num_accepted_tokens), (Ints{1}));
}

// R3: "all" is a seed-only cache mode.
TEST(ProfileRules, R3AllCacheModeIsRejectedInVllm034) {
  EXPECT_NO_THROW(validate_config(config(BuilderKind::Gdn, Profile::Seed, 0, CacheMode::All),
                                  BuilderKind::Gdn));
  EXPECT_THROW(validate_config(config(BuilderKind::Gdn, Profile::Vllm034, 0, CacheMode::All),
                               BuilderKind::Gdn),
               Error);
}

// R4: FlashInfer builds no chunk metadata; Triton does.
TEST(ProfileRules, R4NoChunkMetadataWithFlashInfer) {
  HostStep s;
  s.lens({70}).seq({70}).prefilling({1}).iota_table(1);
  Config c = config(BuilderKind::Gdn, Profile::Vllm034, 0);
  EXPECT_EQ(vec(build(BuilderKind::Gdn, c, s).chunk_offsets), (Ints{0, 2}));
  c.prefill_backend = PrefillBackend::FlashInfer;
  const Built m = build(BuilderKind::Gdn, c, s);
  EXPECT_FALSE(m.chunk_indices);
  EXPECT_FALSE(m.chunk_offsets);
  EXPECT_TRUE(m.prefill_query_start_loc);
}

// K2: under RecoverSSM a non-prefilling row longer than k + 1 is an error in the seed and
// a prefill in 0.34.
TEST(ProfileRules, K2LongRecoverSsmRowIsNonSpecInVllm034) {
  HostStep s;
  s.lens({1, 5}).seq({10, 30}).prefilling({0, 0}).draft_counts({0, -1}).accepted_counts({1, 1});
  s.iota_table(1);
  Config c = config(BuilderKind::Kda, Profile::Seed, 2);
  c.use_recoverssm = true;
  c.num_speculative_blocks = 0;
  EXPECT_THROW(build(BuilderKind::Kda, c, s), Error);
  c.profile = Profile::Vllm034;
  const Built m = build(BuilderKind::Kda, c, s);
  EXPECT_EQ(m.num_spec_decodes, 1);
  EXPECT_EQ(m.num_prefills, 1);
  EXPECT_EQ(m.num_prefill_tokens, 5);
  EXPECT_EQ(vec(m.non_spec_state_indices_tensor), (Ints{108}));
}

// K3: a no-spec KDA step with a fresh one-token prompt and a padding row. Seed: every row
// a decode (short extends are decodes); 0.34: the fresh prompt is a prefill, padding drops.
TEST(ProfileRules, K3KdaNoSpecSplitFollowsGdnInVllm034) {
  HostStep s;
  s.lens({1, 1, 0}).seq({9, 1, 0}).prefilling({0, 1, 0}).iota_table(1).tokens(4);
  const Built seed = build(BuilderKind::Kda, config(BuilderKind::Kda, Profile::Seed, 0), s);
  EXPECT_EQ(seed.num_decodes, 3);
  EXPECT_EQ(seed.num_decode_tokens, 4);
  EXPECT_EQ(seed.num_prefills, 0);
  const Built v = build(BuilderKind::Kda, config(BuilderKind::Kda, Profile::Vllm034, 0), s);
  EXPECT_EQ(v.num_decodes, 1);
  EXPECT_EQ(v.num_prefills, 1);
  EXPECT_EQ(v.num_prefill_tokens, 1);
}

// K4, block 64. Row 0, a 200-token fresh prompt: both rules checkpoint at 192 in column 2.
// Row 1 resumes at 96, off the block grid: the seed's FlashKDA rule takes offset 96
// (192 - 96, a multiple of 16), 0.34 none. Row 2, a 256-token prompt ending on a block:
// the seed none (seq % B == 0), 0.34 position 192, column ceil(256/64) - 2 = 2.
TEST(ProfileRules, K4CheckpointRule) {
  HostStep s;
  s.lens({200, 104, 256}).seq({200, 200, 256}).prefilling({1, 1, 1}).iota_table(4);
  Config c = config(BuilderKind::Kda, Profile::Seed, 0, CacheMode::Align);
  c.block_size = 64;
  c.num_prefill_checkpoint_blocks = 1;
  const Built seed = build(BuilderKind::Kda, c, s);
  ASSERT_TRUE(seed.checkpoint.has_value());
  EXPECT_EQ(vec(seed.checkpoint->checkpoint_offsets), (Ints{192, 96, 0}));
  EXPECT_EQ(vec(seed.checkpoint->state_indices), (Ints{102, 110, 0}));
  c.profile = Profile::Vllm034;
  const Built v = build(BuilderKind::Kda, c, s);
  ASSERT_TRUE(v.checkpoint.has_value());
  EXPECT_EQ(vec(v.checkpoint->checkpoint_offsets), (Ints{192, 0, 192}));
  EXPECT_EQ(vec(v.checkpoint->state_indices), (Ints{102, 0, 118}));
}

// K4 / R5 with a host upper bound at INT32_MAX: computed in 64 bits, as vLLM's Python
// integers (in 32 bits ceil(INT32_MAX / B) wraps and the row loses its checkpoint). Block
// B = 2^20; the query of 2^21 - 1 tokens starts at 2^31 - 2^21, on the grid; the checkpoint
// sits at the last block boundary before the end, offset 2^20, column ceil(seq / B) - 2 = 2046.
TEST(ProfileRules, K4CheckpointRuleAtTheInt32Limit) {
  constexpr int32_t kBlock = 1 << 20, kQuery = (1 << 21) - 1;
  HostStep s;
  s.lens({kQuery}).seq({INT32_MAX}).prefilling({1}).iota_table(2048, 2048);
  Config c = config(BuilderKind::Kda, Profile::Vllm034, 0, CacheMode::Align);
  c.block_size = kBlock;
  c.max_num_batched_tokens = 1 << 22;
  c.num_prefill_checkpoint_blocks = 1;
  const Built v = build(BuilderKind::Kda, c, s);
  ASSERT_TRUE(v.checkpoint.has_value());
  EXPECT_EQ(vec(v.checkpoint->checkpoint_offsets), (Ints{kBlock}));
  EXPECT_EQ(vec(v.checkpoint->state_indices), (Ints{s.bt(0, 2046)}));
}

// K5 / K6 on the planner's data (not in the metadata yet): spec rows first, then a prefill.
TEST(ProfileRules, K5K6TokenStartsAndFlashInferOrder) {
  HostStep s;
  s.lens({2, 2, 1, 3}).seq({20, 30, 1, 3}).prefilling({0, 0, 1, 1});
  s.draft_counts({1, 1, -1, -1}).accepted_counts({1, 2, 1, 1}).iota_table(2);
  Config c = config(BuilderKind::Kda, Profile::Vllm034, 1);
  c.prefill_backend = PrefillBackend::FlashInfer;
  const Step step = s.step();
  const BlockTable table = s.block_table();
  detail::PlanStorage storage(c, BuilderKind::Kda);
  detail::StepPlan p(storage);
  detail::plan_step(c, BuilderKind::Kda, step, false, {&table, 1}, p);
  EXPECT_EQ(p.gdn.spec_token_start, 0);
  EXPECT_EQ(p.gdn.non_spec_token_start, 4);
  ASSERT_TRUE(p.gdn.fi_prefill_qsl);
  EXPECT_EQ(Ints(p.ns_qsl.v.begin(), p.ns_qsl.v.begin() + 3), (Ints{0, 1, 4}));
  ASSERT_TRUE(p.gdn.fi_seq_order);
  EXPECT_EQ(Ints(p.gdn.fi_order.begin(), p.gdn.fi_order.begin() + 2), (Ints{1, 0}));
  c.profile = Profile::Seed;
  c.prefill_backend = PrefillBackend::FlashKda;
  p = detail::StepPlan(storage);
  detail::plan_step(c, BuilderKind::Kda, step, false, {&table, 1}, p);
  EXPECT_EQ(p.gdn.spec_token_start, -1);
  EXPECT_FALSE(p.gdn.fi_prefill_qsl);
}

}  // namespace
}  // namespace linmeta
