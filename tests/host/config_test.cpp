// Configuration validation (SPEC §1): every invalid configuration, builder kind or group count
// throws linmeta::Error naming the field, from validate_config and from the constructor alike;
// the bounds themselves and the fields with no upper bound are valid.
#include <gtest/gtest.h>

#include <climits>
#include <string>
#include <vector>

#include "host_configs.hpp"
#include "host_step.hpp"
#include "rejection.hpp"

namespace linmeta {
namespace {

using testing::expect_error;
using testing::gdn_config;
using testing::HostStep;

void expect_bad_config(const Config& c, BuilderKind kind, const std::vector<std::string>& needles) {
  SCOPED_TRACE(needles.front());
  expect_error([&] { validate_config(c, kind); }, needles, "validate_config");
  expect_error([&] { MetadataBuilder b(kind, c, testing::host_options()); }, needles,
               "constructor");
}

/// `good` with `edit` applied.
template <class Edit>
Config with(const Config& good, Edit edit) {
  Config c = good;
  edit(c);
  return c;
}

TEST(ConfigValidation, InvalidConfigs) {
  const Config good = testing::graph_gdn_config();
  EXPECT_NO_THROW(validate_config(good, BuilderKind::Gdn));
  EXPECT_NO_THROW(validate_config(testing::checkpoint_kda_config(), BuilderKind::Kda));
  expect_bad_config(with(good, [](Config& c) { c.max_num_seqs = 0; }), BuilderKind::Gdn,
                    {"config.max_num_seqs = 0"});
  expect_bad_config(with(good, [](Config& c) { c.max_num_batched_tokens = -1; }), BuilderKind::Gdn,
                    {"config.max_num_batched_tokens = -1"});
  expect_bad_config(with(good, [](Config& c) { c.block_size = 0; }), BuilderKind::Kda,
                    {"config.block_size = 0"});
  expect_bad_config(with(good, [](Config& c) { c.num_spec = -1; }), BuilderKind::Gdn,
                    {"config.num_spec = -1"});
  expect_bad_config(with(good, [](Config& c) { c.num_speculative_blocks = -1; }), BuilderKind::Gdn,
                    {"config.num_speculative_blocks = -1"});
  expect_bad_config(with(good, [](Config& c) { c.num_prefill_checkpoint_blocks = -1; }),
                    BuilderKind::Kda, {"config.num_prefill_checkpoint_blocks = -1"});
  expect_bad_config(with(good, [](Config& c) { c.use_recoverssm = true; }), BuilderKind::Gdn,
                    {"config.use_recoverssm"});
  expect_bad_config(with(good,
                         [](Config& c) {
                           c.mamba_cache_mode = CacheMode::Align;
                           c.num_speculative_blocks = 1;
                         }),
                    BuilderKind::Gdn, {"config.num_speculative_blocks = 1", "num_spec + 1"});
  // A KDA backend for GDN, in both profiles.
  for (const Profile profile : {Profile::Seed, Profile::Vllm034})
    expect_bad_config(with(good,
                           [profile](Config& c) {
                             c.profile = profile;
                             c.prefill_backend = PrefillBackend::FlashKda;
                           }),
                      BuilderKind::Gdn, {"config.prefill_backend = flashkda is a KDA backend"});
}

TEST(ConfigValidation, EnumsOutsideTheirEnumerators) {
  for (const int32_t v : {-1, 2, 77}) {
    Config c = testing::graph_gdn_config();
    c.profile = static_cast<Profile>(v);
    expect_bad_config(c, BuilderKind::Gdn, {"config.profile = " + std::to_string(v)});
  }
  for (const int32_t v : {-1, 3, 77}) {
    Config c = testing::checkpoint_kda_config();
    c.prefill_backend = static_cast<PrefillBackend>(v);
    expect_bad_config(c, BuilderKind::Kda, {"config.prefill_backend = " + std::to_string(v)});
  }
}

TEST(ConfigValidation, InvalidGroupCounts) {
  const Config c = testing::graph_gdn_config();
  for (int32_t groups : {0, -1, kMaxNumGroups + 1, 1 << 20, INT32_MAX})
    expect_error([&] { MetadataBuilder b(BuilderKind::Gdn, c, testing::host_options(groups)); },
                 {"options.num_groups = " + std::to_string(groups), "kMaxNumGroups = 64"},
                 "num_groups");
  EXPECT_NO_THROW(MetadataBuilder(BuilderKind::Gdn, c, testing::host_options(kMaxNumGroups)));
}

TEST(ConfigValidation, UpperBoundsThrowLinmetaError) {
  const Config good = gdn_config(2);
  // Each of these overflowed D or a capacity, or threw std::length_error / bad_alloc.
  expect_bad_config(with(good, [](Config& c) { c.num_spec = INT_MAX; }), BuilderKind::Gdn,
                    {"config.num_spec = 2147483647", "exceeds kMaxNumSpec = 32"});
  expect_bad_config(with(good, [](Config& c) { c.num_spec = kMaxNumSpec + 1; }), BuilderKind::Kda,
                    {"config.num_spec = 33"});
  expect_bad_config(with(good, [](Config& c) { c.max_num_seqs = INT_MAX; }), BuilderKind::Gdn,
                    {"config.max_num_seqs = 2147483647", "exceeds kMaxNumSeqs = 16384"});
  expect_bad_config(with(good, [](Config& c) { c.max_num_seqs = kMaxNumSeqs + 1; }),
                    BuilderKind::Kda, {"config.max_num_seqs = 16385"});
  expect_bad_config(
      with(good, [](Config& c) { c.max_num_batched_tokens = INT_MAX; }), BuilderKind::Gdn,
      {"config.max_num_batched_tokens = 2147483647", "exceeds kMaxNumBatchedTokens = 16777216"});
  expect_bad_config(with(good, [](Config& c) { c.mamba_cache_mode = static_cast<CacheMode>(7); }),
                    BuilderKind::Gdn, {"config.mamba_cache_mode = 7"});
  expect_bad_config(with(good, [](Config& c) { c.mamba_cache_mode = static_cast<CacheMode>(-1); }),
                    BuilderKind::Kda, {"config.mamba_cache_mode = -1"});
  expect_bad_config(good, static_cast<BuilderKind>(kNumBuilderKinds),
                    {"builder kind = " + std::to_string(kNumBuilderKinds)});
}

TEST(ConfigValidation, BoundsThemselvesAreValid) {
  Config c = gdn_config(2);
  c.num_spec = kMaxNumSpec;
  c.num_speculative_blocks = kMaxNumSpec;
  c.max_num_seqs = kMaxNumSeqs;
  c.max_num_batched_tokens = kMaxNumBatchedTokens;
  c.mamba_cache_mode = CacheMode::Align;
  EXPECT_NO_THROW(validate_config(c, BuilderKind::Gdn));
  EXPECT_EQ(c.decode_cudagraph_max_bs(BuilderKind::Gdn), kMaxNumSeqs * (kMaxNumSpec + 1));
}

TEST(ConfigValidation, UnboundedFieldsTakeAnyInt32) {
  // block_size, max_cudagraph_capture_size and num_speculative_blocks need no upper bound.
  Config c = gdn_config(2);
  c.block_size = INT_MAX;
  c.max_cudagraph_capture_size = INT_MAX;
  c.full_cuda_graph = true;
  c.mamba_cache_mode = CacheMode::Align;
  GdnMetadataBuilder b(c, testing::host_options());
  EXPECT_EQ(c.decode_cudagraph_max_bs(BuilderKind::Gdn), 8 * 3);
  HostStep s;
  s.lens({3, 3}).seq({INT_MAX, 40}).draft_counts({2, 2}).accepted_counts({1, 2}).iota_table(3);
  EXPECT_EQ(testing::rows_of(b.build(s.step()).spec_state_indices_tensor),
            (testing::Ints2{{100, 101, 102}, {108, 109, 110}}));

  c.num_speculative_blocks = INT_MAX;  // valid, but no table is that wide
  GdnMetadataBuilder wide(c, testing::host_options());
  expect_error([&] { wide.build(s.step()); }, {"too narrow", "reads 2147483648 columns"});
}

TEST(ConfigValidation, DecodeCudagraphMaxBsIsDefinedForAnyConfig) {
  Config c;
  c.max_num_seqs = INT_MAX;
  c.num_spec = INT_MAX;
  EXPECT_EQ(c.decode_cudagraph_max_bs(BuilderKind::Gdn), INT_MAX);
  c.num_spec = INT_MIN;
  EXPECT_EQ(c.decode_cudagraph_max_bs(BuilderKind::Gdn), 0);
  c.max_cudagraph_capture_size = 5;
  c.num_spec = 3;
  EXPECT_EQ(c.decode_cudagraph_max_bs(BuilderKind::Gdn), 5);
}

TEST(ConfigValidation, DecodeCudagraphMaxTokensIsPleShortConvsTokenLimit) {
  Config c;
  c.max_num_seqs = 8;
  c.num_spec = 2;
  EXPECT_EQ(c.decode_cudagraph_max_tokens(), 24);  // rows * (1 + k), whatever the kind's D
  EXPECT_EQ(c.decode_cudagraph_max_bs(BuilderKind::PleShortConv), 8);
  c.max_cudagraph_capture_size = 20;
  EXPECT_EQ(c.decode_cudagraph_max_tokens(), 20);
  c.max_num_seqs = INT_MAX;
  c.num_spec = INT_MAX;
  c.max_cudagraph_capture_size = 0;
  EXPECT_EQ(c.decode_cudagraph_max_tokens(), INT_MAX);
}

TEST(ConfigValidation, MetadataSaysWhetherItsSpecRowsWereStaged) {
  Config c = gdn_config(2);
  c.full_cuda_graph = true;
  HostStep s;
  s.lens({3, 3}).seq({10, 40}).draft_counts({2, 2}).accepted_counts({1, 2}).iota_table(3);
  GdnMetadataBuilder staged(c, testing::host_options());
  EXPECT_TRUE(staged.build(s.step()).spec_rows_staged);
  c.full_cuda_graph = false;
  GdnMetadataBuilder eager(c, testing::host_options());
  EXPECT_FALSE(eager.build(s.step()).spec_rows_staged);
}

/// A Mamba1 builder with ReplaySSM's Triton path (docs/semantics.md M6).
Config replayssm_config(CacheMode mode, bool full_graph) {
  Config c = gdn_config(0, mode, full_graph);
  c.chunk_metadata = false;
  c.profile = Profile::Vllm034;
  c.use_replayssm = true;
  return c;
}

TEST(ConfigValidation, ReplaySsmIsTheMambaBaseBuildersOptionWithoutSpec) {
  const Config good = replayssm_config(CacheMode::None, false);
  EXPECT_NO_THROW(validate_config(good, BuilderKind::Mamba1));
  EXPECT_NO_THROW(validate_config(good, BuilderKind::PleShortConv));
  for (const BuilderKind kind :
       {BuilderKind::Linear, BuilderKind::BailingLinear, BuilderKind::Inkling, BuilderKind::Gdn})
    expect_bad_config(good, kind, {"config.use_replayssm is an option of vLLM's Mamba base"});
  expect_bad_config(with(good,
                         [](Config& c) {
                           c.num_spec = 1;
                           c.num_speculative_blocks = 1;
                         }),
                    BuilderKind::ShortConv, {"config.use_replayssm with num_spec = 1"});
}

TEST(ConfigValidation, ReplaySsmRowsAreTheDecodeRows) {
  HostStep s;
  s.lens({1, 1, 5}).seq({10, 40, 5}).prefilling({0, 0, 1}).iota_table(3);
  // Eager (a prefill row): the two decode rows; none mode has no seq_lens view.
  Mamba1MetadataBuilder eager(replayssm_config(CacheMode::None, true), testing::host_options());
  const Metadata m = eager.build(s.step());
  EXPECT_EQ(m.replayssm_rows, 2);
  EXPECT_FALSE(m.decode_rows_staged);
  EXPECT_FALSE(m.replayssm_seq_lens_d.present);
  EXPECT_EQ(m.replayssm_align_block_size, 0);
  // A FULL-graph decode step in align mode: staged, seq_lens[:num_reqs], the block size.
  HostStep d;
  d.lens({1, 1}).seq({10, 40}).prefilling({0, 0}).iota_table(4);
  Mamba1MetadataBuilder staged(replayssm_config(CacheMode::Align, true), testing::host_options());
  const Metadata g = staged.build(d.step());
  EXPECT_EQ(g.replayssm_rows, 2);
  EXPECT_TRUE(g.decode_rows_staged);
  EXPECT_EQ(g.replayssm_seq_lens_d.data, d.step().seq_lens);
  EXPECT_EQ(g.replayssm_seq_lens_d.rows, 2);
  EXPECT_EQ(g.replayssm_align_block_size, 16);
  // No decode rows: None, as vLLM's views.
  HostStep p;
  p.lens({5}).seq({5}).prefilling({1}).iota_table(4);
  EXPECT_FALSE(staged.build(p.step()).replayssm_rows.has_value());
  // ReplaySSM off: none of its fields.
  Mamba1MetadataBuilder off(
      with(replayssm_config(CacheMode::Align, true), [](Config& c) { c.use_replayssm = false; }),
      testing::host_options());
  const Metadata o = off.build(d.step());
  EXPECT_FALSE(o.replayssm_rows.has_value());
  EXPECT_FALSE(o.replayssm_seq_lens_d.present);
  EXPECT_EQ(o.replayssm_align_block_size, 0);
}

}  // namespace
}  // namespace linmeta
