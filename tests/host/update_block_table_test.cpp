// update_block_table (SPEC §7 E): it takes only the metadata of the builder's last built step
// (not an earlier step's with equal counts, not another builder's), survives a rejected build,
// re-gathers from the builder's own buffers (never the caller's released arrays), and its
// rejections write nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "case_file.hpp"
#include "host_configs.hpp"
#include "host_step.hpp"
#include "rejection.hpp"

namespace linmeta {
namespace {

using testing::expect_error;
using testing::HostStep;

TEST(UpdateBlockTable, Rejections) {
  for (const testing::Base& base : testing::all_bases()) {
    SCOPED_TRACE(base.name);
    MetadataBuilder b(base.kind, base.config, testing::host_options());
    expect_error([&] { b.update_block_table(Metadata{}, base.step.block_table()); },
                 {"update_block_table before any build"}, "before build");
    const Metadata good = b.build(base.step.step());
    const testing::Snapshot snap({&good, 1}, base.kind);
    expect_error([&] { b.update_block_table(good, base.step.block_table(), 1); },
                 {"update_block_table group = 1", "[0, 1)"}, "group out of range");
    BlockTable null_table = base.step.block_table();
    null_table.data = nullptr;
    expect_error([&] { b.update_block_table(good, null_table); },
                 {"block_table of group 0 is null"}, "null table");
    HostStep narrow = base.step;
    narrow.iota_table(base.kind == BuilderKind::Kda ? 3 : 1, 8, 700);
    if (base.kind == BuilderKind::Kda || base.name == "gdn staged pure spec")
      expect_error([&] { b.update_block_table(good, narrow.block_table()); }, {"too narrow"},
                   "narrow table");
    Metadata stale = good;
    stale.step_id += 1;
    expect_error([&] { b.update_block_table(stale, base.step.block_table()); }, {"last built step"},
                 "metadata of another step");
    snap.expect_unchanged("update_block_table");
  }
}

// A rejected table of group g names group g (it named group 0 whatever the group).
TEST(UpdateBlockTable, RejectionsNameTheGroup) {
  const testing::Base base = testing::kda_mixed();
  MetadataBuilder b(base.kind, base.config, testing::host_options(3));
  const std::vector<BlockTable> tables(3, base.step.block_table());
  const Metadata good = b.build_groups(base.step.step(), tables)[2];
  BlockTable null_table = base.step.block_table();
  null_table.data = nullptr;
  expect_error([&] { b.update_block_table(good, null_table, 2); },
               {"block_table of group 2 is null"}, "null table");
  HostStep narrow = base.step;
  narrow.iota_table(3, 8, 700);
  expect_error([&] { b.update_block_table(good, narrow.block_table(), 2); },
               {"block_table of group 2 is too narrow"}, "narrow table");
}

TEST(UpdateBlockTable, AfterARejectedBuildStillUsesTheLastGoodStep) {
  for (const testing::Base& base : testing::all_bases()) {
    SCOPED_TRACE(base.name);
    MetadataBuilder b(base.kind, base.config, testing::host_options());
    MetadataBuilder ref(base.kind, base.config, testing::host_options());
    const Metadata good = b.build(base.step.step());
    HostStep early = base.step;  // rejected before planning starts
    early.tokens(1025);
    EXPECT_THROW(b.build(early.step()), Error);
    if (base.step.has_drafts) {
      HostStep late = base.step;  // rejected halfway through planning
      testing::add_tokens_from(late, 1, base.kind == BuilderKind::Kda ? 4 : 1);
      EXPECT_THROW(b.build(late.step()), Error);
    }
    HostStep other = base.step;
    other.iota_table(other.width, 8, 5000);
    const Metadata updated = b.update_block_table(good, other.block_table());
    EXPECT_EQ(cases::to_json(updated, base.kind),
              cases::to_json(ref.build(other.step()), base.kind));
  }
}

// Steps A and B with equal counts (2 decodes, 1 prefill) but other chunk metadata: the
// metadata of A, after B was built, is refused (it would pair A's shapes with B's buffers).
TEST(UpdateBlockTable, RefusesAnEarlierStepsMetadata) {
  HostStep a, b;
  a.lens({1, 1, 200}).seq({5, 9, 200}).prefilling({0, 0, 1}).iota_table(2);
  b.lens({1, 1, 300}).seq({5, 9, 300}).prefilling({0, 0, 1}).iota_table(2);
  Config c;
  c.max_num_batched_tokens = 1024;
  MetadataBuilder builder(BuilderKind::Gdn, c, testing::host_options());
  const Metadata ma = builder.build(a.step());
  const Metadata mb = builder.build(b.step());
  ASSERT_EQ(static_cast<const StepCounts&>(ma).num_prefills, mb.num_prefills);
  ASSERT_NE(ma.chunk_indices.rows, mb.chunk_indices.rows);
  EXPECT_THROW(builder.update_block_table(ma, b.block_table()), Error);
  EXPECT_NO_THROW(builder.update_block_table(mb, b.block_table()));
  // Metadata of another builder's step is refused too.
  MetadataBuilder other(BuilderKind::Gdn, c, testing::host_options());
  const Metadata mo = other.build(b.step());
  EXPECT_THROW(builder.update_block_table(mo, b.block_table()), Error);
}

// Metadata of an earlier step with the same counts but prefill checkpoints (the last step has
// none) once made update_block_table read a disengaged optional (a fuzzer finding).
TEST(UpdateBlockTable, RejectsMetadataOfAnotherStepWithTheSameCounts) {
  Config c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 1024;
  c.mamba_cache_mode = CacheMode::Align;
  c.block_size = 16;
  c.chunk_metadata = false;
  c.num_prefill_checkpoint_blocks = 1;
  KdaMetadataBuilder b(c, testing::host_options());
  HostStep with;  // (52 / 16) * 16 - (52 - 20) = 16: a checkpoint 16 tokens into the row
  with.lens({20}).seq({52}).prefilling({1}).iota_table(8);
  const Metadata earlier = b.build(with.step());
  ASSERT_TRUE(earlier.checkpoint.has_value());
  HostStep without;  // offset 12 is not on the 16-token grid: no checkpoint
  without.lens({20}).seq({40}).prefilling({1}).iota_table(8);
  const Metadata last = b.build(without.step());
  ASSERT_FALSE(last.checkpoint.has_value());
  ASSERT_EQ(last.num_prefills, earlier.num_prefills);
  ASSERT_EQ(last.num_actual_tokens, earlier.num_actual_tokens);
  expect_error([&] { b.update_block_table(earlier, without.block_table()); }, {"last built step"});
}

// The re-gather reads the aligned starts the build stored in the builder's buffers, not the
// caller's device seq_lens, which the caller may release once the build has run.
TEST(UpdateBlockTable, DoesNotReadTheReleasedSeqLens) {
  for (BuilderKind kind : {BuilderKind::Gdn, BuilderKind::Kda}) {
    SCOPED_TRACE(kind == BuilderKind::Gdn ? "gdn" : "kda");
    Config c = testing::gdn_config(2, CacheMode::Align);
    c.chunk_metadata = kind == BuilderKind::Gdn;
    HostStep s;
    s.lens({3, 3, 5}).seq({17, 40, 70}).prefilling({0, 0, 1}).draft_counts({2, 2, -1});
    s.accepted_counts({1, 2, 1}).iota_table(8);
    HostStep other = s;
    other.iota_table(8, 8, 5000);
    MetadataBuilder b(kind, c, testing::host_options());
    MetadataBuilder ref(kind, c, testing::host_options());
    const auto expected = cases::to_json(ref.build(other.step()), kind);

    // The caller's device seq_lens live in memory it releases after the build ran.
    auto released = std::make_unique<int32_t[]>(3);
    std::copy(s.seq_lens.begin(), s.seq_lens.end(), released.get());
    Step step = s.step();
    step.seq_lens = released.get();
    const Metadata built = b.build(step);
    // Reused memory: other values (a read would gather other columns) ...
    for (int i = 0; i < 3; ++i) released[i] = 1000000;
    EXPECT_EQ(cases::to_json(b.update_block_table(built, other.block_table()), kind), expected);
    // ... or freed (a read is an ASan heap-use-after-free in the asan preset).
    released.reset();
    EXPECT_EQ(cases::to_json(b.update_block_table(built, other.block_table()), kind), expected);
  }
}

// Bailing's staged decode-only step pads the rows whose device seq_len is 0 (L2); the
// re-gather does so from the seq_lens the build kept, not the caller's released array.
TEST(UpdateBlockTable, BailingPadsEmptyRowsFromTheKeptSeqLens) {
  Config c = testing::gdn_config(0, CacheMode::None, true);
  c.chunk_metadata = false;
  c.profile = Profile::Vllm034;
  HostStep s;
  s.lens({1, 1, 0}).seq({9, 20, 0}).prefilling({0, 0, 0}).iota_table(1);
  HostStep other = s;
  other.iota_table(1, 8, 5000);
  BailingLinearMetadataBuilder b(c, testing::host_options());
  BailingLinearMetadataBuilder ref(c, testing::host_options());
  const Metadata want = ref.build(other.step());
  ASSERT_EQ(want.state_indices_tensor.rows, 3);
  EXPECT_EQ(want.state_indices_tensor.at(0), 5000);
  EXPECT_EQ(want.state_indices_tensor.at(2), -1);  // PAD_SLOT_ID: seq_len 0
  EXPECT_EQ(want.state_indices_tensor_d.ndim, 1);  // k = 0: 1-D, the same rows
  EXPECT_EQ(want.state_indices_tensor_d.rows, 3);

  auto released = std::make_unique<int32_t[]>(3);
  std::copy(s.seq_lens.begin(), s.seq_lens.end(), released.get());
  Step step = s.step();
  step.seq_lens = released.get();
  const Metadata built = b.build(step);
  // Reused memory: read, it would pad rows 0 and 1 and not row 2.
  const int32_t reused[] = {0, 0, 7};
  std::copy(reused, reused + 3, released.get());
  const Metadata got = b.update_block_table(built, other.block_table());
  std::copy(s.seq_lens.begin(), s.seq_lens.end(), released.get());  // seq_lens is a view
  EXPECT_EQ(cases::to_json(got, BuilderKind::BailingLinear),
            cases::to_json(want, BuilderKind::BailingLinear));
}

}  // namespace
}  // namespace linmeta
