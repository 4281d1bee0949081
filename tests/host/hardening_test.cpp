// Issue 13 reproducers on the host target (items 2, 4, 5, 6, 7): each input that once
// slipped past validation (or threw the wrong type) is rejected with a linmeta::Error
// naming the field, or, where it is valid, builds.
#include <gtest/gtest.h>

#include <climits>
#include <functional>
#include <string>
#include <vector>

#include "case_file.hpp"
#include "host_step.hpp"

namespace linmeta {
namespace {

using testing::HostStep;
using testing::Ints;

/// `call` throws linmeta::Error (no other type) whose message holds every needle.
void expect_error(const std::function<void()>& call, const std::vector<std::string>& needles) {
  try {
    call();
    ADD_FAILURE() << "no linmeta::Error thrown";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const auto& n : needles)
      EXPECT_NE(what.find(n), std::string::npos)
          << "message \"" << what << "\" lacks \"" << n << "\"";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a linmeta::Error: " << e.what();
  }
}

Config spec_config(int32_t k = 2) {
  Config c;
  c.num_spec = k;
  c.num_speculative_blocks = k;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 1024;
  c.block_size = 16;
  return c;
}

// ---- item 2: the aligned width in 64-bit -------------------------------------------

TEST(Hardening, AlignedWidthOfAHugeUpperBoundDoesNotWrap) {
  // block_size 1 and an upper bound of INT32_MAX: the gather starts at column
  // INT32_MAX - 1 and reads 3 columns; in int32 that wrapped negative and a 4-wide
  // table was accepted (then read far outside its rows).
  Config c = spec_config();
  c.mamba_cache_mode = CacheMode::Align;
  c.block_size = 1;
  HostStep s;
  s.lens({3, 3}).seq({10, 12}).draft_counts({2, 2}).accepted_counts({1, 1}).iota_table(4);
  s.seq_ub = {INT_MAX, 12};
  for (BuilderKind kind : {BuilderKind::Gdn, BuilderKind::Kda}) {
    MetadataBuilder b(kind, c, testing::host_options());
    expect_error([&] { b.build(s.step()); },
                 {"block_table of group 0 is too narrow", "row 0 reads 2147483649 columns",
                  "aligned state gather", "width = 4"});
    // Capture builds plan the same width.
    HostStep cap = s;
    cap.has_drafts = cap.has_accepted = false;
    expect_error([&] { b.build_for_cudagraph_capture(cap.step()); }, {"2147483649 columns"});
  }
}

TEST(Hardening, AlignedWidthStillAcceptsAWideEnoughTable) {
  Config c = spec_config();
  c.mamba_cache_mode = CacheMode::Align;
  c.block_size = 1000000000;  // one block holds every sequence: start column 0
  HostStep s;
  s.lens({3, 3}).seq({INT_MAX, 12}).draft_counts({2, 2}).accepted_counts({1, 1}).iota_table(3);
  GdnMetadataBuilder b(c, testing::host_options());
  // (INT32_MAX - 1) / 1e9 = 2: start column 2, so 5 columns are needed.
  expect_error([&] { b.build(s.step()); }, {"reads 5 columns"});
  s.iota_table(5);
  s.seq_lens = {1, 12};  // the device value: start 0
  const Metadata& m = b.build(s.step());
  EXPECT_EQ(testing::rows_of(m.spec_state_indices_tensor),
            (testing::Ints2{{100, 101, 102}, {108, 109, 110}}));
}

TEST(Hardening, RowStridesThatWouldWrapARowOffsetAreRejected) {
  GdnMetadataBuilder b(spec_config(), testing::host_options());
  HostStep s;
  s.lens({3, 3}).seq({10, 12}).draft_counts({2, 2}).accepted_counts({1, 1}).iota_table(4);
  Step bad = s.step();
  bad.block_table.row_stride = INT64_MAX / 2;  // row 1's offset alone is past any memory
  expect_error([&] { b.build(bad); },
               {"block_table of group 0", "row_stride = 4611686018427387903", "exceeds INT32_MAX"});
  const Metadata built = b.build(s.step());
  expect_error([&] { b.update_block_table(built, bad.block_table); }, {"exceeds INT32_MAX"});
}

// ---- item 4: query_start_loc differences that wrap -----------------------------------

TEST(Hardening, WrappedQueryStartLocIsRejected) {
  const Config c = spec_config();
  for (BuilderKind kind : {BuilderKind::Gdn, BuilderKind::Kda}) {
    MetadataBuilder b(kind, c, testing::host_options());
    HostStep s;
    s.lens({1, 1}).seq({5, 5}).iota_table(1);
    s.qsl = {0, INT_MAX, INT_MIN};  // INT_MIN - INT_MAX wraps to 1 in int32
    s.tokens(4);
    expect_error([&] { b.build(s.step()); }, {"query_start_loc_cpu decreases at row 1",
                                              "[1] = 2147483647", "[2] = -2147483648"});
    s.qsl = {0, INT_MIN + 5, 7};  // a first row of negative length that wraps
    expect_error([&] { b.build(s.step()); }, {"query_start_loc_cpu decreases at row 0"});
    // A total above the token capacity names num_actual_tokens, not an internal error.
    s.qsl = {0, 1, INT_MAX};
    s.tokens(INT_MAX);
    expect_error([&] { b.build(s.step()); },
                 {"num_actual_tokens = 2147483647", "max_num_batched_tokens"});
  }
}

// ---- item 5: draft counts ------------------------------------------------------------

TEST(Hardening, DraftCountsAboveNumSpecAreRejected) {
  const Config c = spec_config(3);
  for (BuilderKind kind : {BuilderKind::Gdn, BuilderKind::Kda}) {
    MetadataBuilder b(kind, c, testing::host_options());
    HostStep s;
    s.lens({1, 1, 3}).seq({5, 6, 7}).prefilling({0, 0, 0}).accepted_counts({1, 1, 1});
    s.iota_table(4);
    // INT_MAX + INT_MAX + 2 = 2^32 summed to 0 in int32: the spec step became a non-spec one.
    s.draft_counts({INT_MAX, INT_MAX, 2});
    expect_error([&] { b.build(s.step()); },
                 {"num_decode_draft_tokens[0] = 2147483647", "exceeds num_spec = 3"});
    s.draft_counts({0, 4, 2});
    expect_error([&] { b.build(s.step()); }, {"num_decode_draft_tokens[1] = 4", "num_spec = 3"});
    // -1 and 0..num_spec are valid.
    s.draft_counts({-1, 0, 2});
    EXPECT_NO_THROW(b.build(s.step()));
  }
}

TEST(Hardening, DraftsAreNotReadWithSpeculativeDecodingOff) {
  Config c = spec_config(0);
  GdnMetadataBuilder b(c, testing::host_options());
  HostStep s;
  s.lens({1, 1}).seq({5, 6}).draft_counts({5, INT_MAX}).iota_table(1);
  const Metadata& m = b.build(s.step());
  EXPECT_EQ(m.num_decodes, 2);
  EXPECT_EQ(m.num_spec_decodes, 0);
}

TEST(Hardening, SpecDetectionWithoutSummingDrafts) {
  // GDN: spec rows with no draft at all take the regular path; one draft anywhere
  // among them takes the spec path (SPEC §7 A).
  GdnMetadataBuilder b(spec_config(2), testing::host_options());
  HostStep s;
  s.lens({1, 1, 1}).seq({5, 6, 7}).accepted_counts({1, 1, 1}).iota_table(3);
  s.draft_counts({0, 0, -1});
  EXPECT_EQ(b.build(s.step()).num_spec_decodes, 0);
  s.draft_counts({0, 1, -1});
  s.lens({1, 2, 1}).iota_table(3);
  EXPECT_EQ(b.build(s.step()).num_spec_decodes, 2);
}

// ---- item 6: configuration bounds ------------------------------------------------------

void expect_bad_config(const Config& c, BuilderKind kind, const std::vector<std::string>& needles) {
  SCOPED_TRACE(needles.front());
  expect_error([&] { validate_config(c, kind); }, needles);
  expect_error([&] { MetadataBuilder b(kind, c, testing::host_options()); }, needles);
}

TEST(Hardening, ConfigUpperBoundsThrowLinmetaError) {
  const Config good = spec_config();
  auto with = [&](auto edit) {
    Config c = good;
    edit(c);
    return c;
  };
  // Each of these overflowed D or a capacity, or threw std::length_error / bad_alloc.
  expect_bad_config(with([](Config& c) { c.num_spec = INT_MAX; }), BuilderKind::Gdn,
                    {"config.num_spec = 2147483647", "exceeds kMaxNumSpec = 32"});
  expect_bad_config(with([](Config& c) { c.num_spec = kMaxNumSpec + 1; }), BuilderKind::Kda,
                    {"config.num_spec = 33"});
  expect_bad_config(with([](Config& c) { c.max_num_seqs = INT_MAX; }), BuilderKind::Gdn,
                    {"config.max_num_seqs = 2147483647", "exceeds kMaxNumSeqs = 16384"});
  expect_bad_config(with([](Config& c) { c.max_num_seqs = kMaxNumSeqs + 1; }), BuilderKind::Kda,
                    {"config.max_num_seqs = 16385"});
  expect_bad_config(
      with([](Config& c) { c.max_num_batched_tokens = INT_MAX; }), BuilderKind::Gdn,
      {"config.max_num_batched_tokens = 2147483647", "exceeds kMaxNumBatchedTokens = 16777216"});
  expect_bad_config(with([](Config& c) { c.mamba_cache_mode = static_cast<CacheMode>(7); }),
                    BuilderKind::Gdn, {"config.mamba_cache_mode = 7"});
  expect_bad_config(with([](Config& c) { c.mamba_cache_mode = static_cast<CacheMode>(-1); }),
                    BuilderKind::Kda, {"config.mamba_cache_mode = -1"});
  expect_bad_config(good, static_cast<BuilderKind>(7), {"builder kind = 7"});
}

TEST(Hardening, ConfigBoundsThemselvesAreValid) {
  Config c = spec_config();
  c.num_spec = kMaxNumSpec;
  c.num_speculative_blocks = kMaxNumSpec;
  c.max_num_seqs = kMaxNumSeqs;
  c.max_num_batched_tokens = kMaxNumBatchedTokens;
  c.mamba_cache_mode = CacheMode::Align;
  EXPECT_NO_THROW(validate_config(c, BuilderKind::Gdn));
  EXPECT_EQ(c.decode_cudagraph_max_bs(BuilderKind::Gdn), kMaxNumSeqs * (kMaxNumSpec + 1));
}

TEST(Hardening, UnboundedFieldsTakeAnyInt32) {
  // block_size, max_cudagraph_capture_size and num_speculative_blocks need no upper bound.
  Config c = spec_config();
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

TEST(Hardening, DecodeCudagraphMaxBsIsDefinedForAnyConfig) {
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

// ---- item 7: KDA RecoverSSM takes null accepted counts ---------------------------------

Config recover_config(bool full_graph) {
  Config c = spec_config(2);
  c.num_speculative_blocks = 0;
  c.use_recoverssm = true;
  c.chunk_metadata = false;
  c.full_cuda_graph = full_graph;
  return c;
}

TEST(Hardening, KdaRecoverSsmWithNullAcceptedCountsUsesOnes) {
  // SPEC §8: under RecoverSSM the accepted counts are all ones, so the device array
  // is never read and may be absent. Pure spec (staged and eager) and mixed steps.
  HostStep pure;
  pure.lens({3, 2, 1, 0}).seq({30, 40, 50, 0}).prefilling({0, 0, 0, 0});
  pure.draft_counts({2, 1, -1, -1}).accepted_counts({3, 2, 1, 1}).iota_table(3);
  HostStep mixed;
  mixed.lens({3, 1, 34, 0}).seq({30, 40, 50, 0}).prefilling({0, 0, 1, 0});
  mixed.draft_counts({2, -1, -1, -1}).accepted_counts({2, 1, 1, 1}).iota_table(3);
  for (bool graph : {false, true})
    for (const HostStep& given : {pure, mixed}) {
      SCOPED_TRACE(graph ? "FULL graphs" : "eager");
      KdaMetadataBuilder with(recover_config(graph), testing::host_options());
      KdaMetadataBuilder without(recover_config(graph), testing::host_options());
      HostStep absent = given;
      absent.has_accepted = false;
      const Metadata& a = without.build(absent.step());
      ASSERT_TRUE(a.num_accepted_tokens.present);
      for (int64_t i = 0; i < a.num_accepted_tokens.size(); ++i)
        EXPECT_EQ(a.num_accepted_tokens.at(i), 1) << i;
      EXPECT_EQ(cases::to_json(a, BuilderKind::Kda),
                cases::to_json(with.build(given.step()), BuilderKind::Kda));
    }
}

TEST(Hardening, NullAcceptedCountsStillRejectedWhereTheyAreRead) {
  HostStep s;
  s.lens({3, 2}).seq({30, 40}).prefilling({0, 0}).draft_counts({2, 1}).iota_table(3);
  Config kda = spec_config(2);
  kda.chunk_metadata = false;
  for (auto [kind, c] :
       {std::pair{BuilderKind::Gdn, spec_config(2)}, std::pair{BuilderKind::Kda, kda}}) {
    MetadataBuilder b(kind, c, testing::host_options());
    expect_error([&] { b.build(s.step()); }, {"num_accepted_tokens (device) is null"});
  }
}

TEST(Hardening, UpdateBlockTableRejectsMetadataOfAnotherStepWithTheSameCounts) {
  // Fuzz finding: metadata of an earlier step with the same counts but prefill checkpoints
  // (the last step has none) made update_block_table read a disengaged optional.
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

}  // namespace
}  // namespace linmeta
