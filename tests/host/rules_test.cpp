// One rule at a time (SPEC §3–8), on small steps whose expected values are
// worked out by hand from the SPEC and the seeds. Host target, public API except
// for split_decodes_and_prefills (src/split.hpp), which has no public entry point.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <span>

#include "case_file.hpp"
#include "host_configs.hpp"
#include "host_step.hpp"
#include "src/split.hpp"

namespace linmeta {
namespace {

using testing::gdn_config;
using testing::HostStep;
using testing::Ints;
using testing::Ints2;
using testing::kda_config;
using testing::rows_of;
using testing::vec;

struct Counts {
  int32_t decodes, decode_tokens, prefills, prefill_tokens, spec_decodes, spec_decode_tokens;
};

void expect_counts(const Metadata& m, Counts c) {
  EXPECT_EQ(m.num_decodes, c.decodes);
  EXPECT_EQ(m.num_decode_tokens, c.decode_tokens);
  EXPECT_EQ(m.num_prefills, c.prefills);
  EXPECT_EQ(m.num_prefill_tokens, c.prefill_tokens);
  EXPECT_EQ(m.num_spec_decodes, c.spec_decodes);
  EXPECT_EQ(m.num_spec_decode_tokens, c.spec_decode_tokens);
}

void expect_no_spec_fields(const Metadata& m) {
  EXPECT_FALSE(m.spec_state_indices_tensor);
  EXPECT_FALSE(m.spec_query_start_loc);
  EXPECT_FALSE(m.spec_sequence_masks);
  EXPECT_FALSE(m.spec_token_indx);
  EXPECT_FALSE(m.non_spec_token_indx);
  EXPECT_FALSE(m.num_accepted_tokens);
  EXPECT_FALSE(m.uniform_spec_sequence_length.has_value());
}

void expect_no_prefill_fields(const Metadata& m) {
  EXPECT_FALSE(m.has_initial_state);
  EXPECT_FALSE(m.chunk_indices);
  EXPECT_FALSE(m.chunk_offsets);
  EXPECT_FALSE(m.prefill_query_start_loc);
  EXPECT_FALSE(m.prefill_state_indices);
  EXPECT_FALSE(m.prefill_has_initial_state);
  EXPECT_FALSE(m.conv1d.has_value());
}

/// Conv1d metadata (SPEC §6): nums, tot, the first tot programs, PAD_SLOT_ID past them.
void expect_conv(const Metadata& m, const Ints& nums, const Ints& batch, const Ints& chunk) {
  ASSERT_TRUE(m.conv1d.has_value());
  const Conv1dMetadata& c = *m.conv1d;
  EXPECT_EQ(vec(c.nums), nums);
  const auto tot = static_cast<int32_t>(batch.size());
  EXPECT_EQ(c.tot, tot);
  ASSERT_TRUE(c.batch_ptr && c.token_chunk_offset_ptr);
  ASSERT_EQ(c.batch_ptr.size(), c.token_chunk_offset_ptr.size());
  EXPECT_GE(c.batch_ptr.size(), 2 * std::max<int64_t>(1024, tot));  // upstream's capacity at least
  const Ints bp = vec(c.batch_ptr), off = vec(c.token_chunk_offset_ptr);
  EXPECT_EQ(Ints(bp.begin(), bp.begin() + tot), batch);
  EXPECT_EQ(Ints(off.begin(), off.begin() + tot), chunk);
  for (size_t i = static_cast<size_t>(tot); i < bp.size(); ++i) {
    ASSERT_EQ(bp[i], kPadSlotId) << "batch_ptr[" << i << "]";
    ASSERT_EQ(off[i], kPadSlotId) << "token_chunk_offset_ptr[" << i << "]";
  }
}

// ---- SPEC §4: split_decodes_and_prefills ---------------------------------------

void expect_split(detail::Split s, int32_t decodes, int32_t prefills, int32_t decode_tokens,
                  int32_t prefill_tokens) {
  EXPECT_EQ(s.num_decodes, decodes);
  EXPECT_EQ(s.num_prefills, prefills);
  EXPECT_EQ(s.num_decode_tokens, decode_tokens);
  EXPECT_EQ(s.num_prefill_tokens, prefill_tokens);
}

TEST(Split, FastPathCountsEveryRowAndPaddedTokensAsDecodes) {
  const Ints qsl{0, 1, 2, 2};
  auto all = [](int32_t) { return true; };
  // max ql <= 1 with treat_short_extends_as_decodes: is_prefilling is not consulted.
  expect_split(detail::split_decodes_and_prefills(std::span<const int32_t>(qsl), 5, 1, true, all),
               3, 0, 5, 0);
}

TEST(Split, FirstRowPrefillMakesEverythingPrefill) {
  const Ints qsl{0, 3, 4, 5};
  auto none = [](int32_t) { return false; };
  expect_split(detail::split_decodes_and_prefills(std::span<const int32_t>(qsl), 7, 1, true, none),
               0, 3, 0, 7);
  expect_split(detail::split_decodes_and_prefills(std::span<const int32_t>(qsl), 7, 1, false, none),
               0, 3, 0, 7);
}

TEST(Split, RowsAfterFirstPrefillCountAsPrefill) {
  const Ints qsl{0, 1, 1, 5, 5};  // ql 1, 0, 4, 0; 9 padded tokens
  auto none = [](int32_t) { return false; };
  expect_split(detail::split_decodes_and_prefills(std::span<const int32_t>(qsl), 9, 1, true, none),
               2, 2, 1, 8);
  // Without the flag, is_prefilling is OR'ed in: row 0 becomes the first prefill.
  auto row0 = [](int32_t r) { return r == 0; };
  expect_split(detail::split_decodes_and_prefills(std::span<const int32_t>(qsl), 9, 1, false, row0),
               0, 4, 0, 9);
  // With the flag, it is ignored.
  expect_split(detail::split_decodes_and_prefills(std::span<const int32_t>(qsl), 9, 1, true, row0),
               2, 2, 1, 8);
}

// vLLM's decode_threshold (the Mamba builders' 1 + k with speculative decoding): rows of up
// to that many tokens are decodes.
TEST(Split, DecodeThreshold) {
  const Ints qsl{0, 3, 6, 7, 12};  // ql 3, 3, 1, 5
  auto none = [](int32_t) { return false; };
  expect_split(
      detail::split_decodes_and_prefills(std::span<const int32_t>(qsl), 12, 3, false, none), 3, 1,
      7, 5);
  expect_split(
      detail::split_decodes_and_prefills(std::span<const int32_t>(qsl), 12, 2, false, none), 0, 4,
      0, 12);
  expect_split(detail::split_decodes_and_prefills(std::span<const int32_t>(qsl), 12, 5, true, none),
               4, 0, 12, 0);
}

TEST(Split, IsPrefillingOrOnShortRows) {
  const Ints qsl{0, 1, 2, 3};
  auto row1 = [](int32_t r) { return r == 1; };
  expect_split(detail::split_decodes_and_prefills(std::span<const int32_t>(qsl), 5, 1, false, row1),
               1, 2, 1, 4);
  auto none = [](int32_t) { return false; };
  expect_split(detail::split_decodes_and_prefills(std::span<const int32_t>(qsl), 5, 1, false, none),
               3, 0, 5, 0);
}

// ---- SPEC §3: aligned state gather --------------------------------------------

TEST(AlignGather, SpecExampleOnAGdnSpecStep) {
  GdnMetadataBuilder b(gdn_config(2, CacheMode::Align), testing::host_options());
  HostStep s;
  s.lens({1, 1, 1, 1, 1, 2})
      .seq({1, 1, 15, 16, 17, 33})
      .seq_device({0, 1, 15, 16, 17, 33})  // the gather reads the device seq_lens
      .draft_counts({0, 0, 0, 0, 0, 1})
      .accepted_counts({1, 1, 1, 1, 1, 2})
      .iota_table(8);
  s.seq_ub[4] = 40;  // a host bound whose block differs: must not be used
  const Metadata& m = b.build(s.step());
  expect_counts(m, {0, 0, 0, 0, 6, 7});
  EXPECT_EQ(rows_of(m.spec_state_indices_tensor), (Ints2{{100, 101, 102},
                                                         {108, 109, 110},
                                                         {116, 117, 118},
                                                         {124, 125, 126},
                                                         {133, 134, 135},
                                                         {142, 143, 144}}));
  EXPECT_EQ(vec(m.spec_query_start_loc), (Ints{0, 1, 2, 3, 4, 5, 7}));
  EXPECT_EQ(vec(m.spec_token_indx), (Ints{0, 1, 2, 3, 4, 5, 6}));  // arange(min(6 * 3, 7))
  EXPECT_EQ(vec(m.non_spec_token_indx), Ints{});
  EXPECT_TRUE(m.non_spec_token_indx);
  EXPECT_EQ(vec(m.spec_sequence_masks), (Ints{1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(vec(m.num_accepted_tokens), (Ints{1, 1, 1, 1, 1, 2}));
  EXPECT_FALSE(m.uniform_spec_sequence_length.has_value());
  EXPECT_FALSE(m.non_spec_state_indices_tensor);
  EXPECT_FALSE(m.non_spec_query_start_loc);
}

TEST(AlignGather, NonSpecStateIsColumnZeroOfTheAlignedTable) {
  GdnMetadataBuilder b(gdn_config(2, CacheMode::Align), testing::host_options());
  HostStep s;
  s.lens({1, 1, 1, 1, 1, 1})
      .seq({1, 1, 15, 16, 17, 33})
      .seq_device({0, 1, 15, 16, 17, 33})
      .iota_table(8);
  const Metadata& m = b.build(s.step());  // no drafts: no spec path
  EXPECT_EQ(vec(m.non_spec_state_indices_tensor), (Ints{100, 108, 116, 124, 133, 142}));
}

TEST(AlignGather, ModesNoneAndAllUseTheTableItself) {
  for (CacheMode mode : {CacheMode::None, CacheMode::All}) {
    GdnMetadataBuilder b(gdn_config(2, mode), testing::host_options());
    HostStep s;
    s.lens({1, 1, 1, 1, 1, 2})
        .seq({1, 1, 15, 16, 17, 33})
        .draft_counts({0, 0, 0, 0, 0, 1})
        .accepted_counts({1, 1, 1, 1, 1, 2})
        .iota_table(8);
    const Metadata& m = b.build(s.step());
    EXPECT_EQ(rows_of(m.spec_state_indices_tensor), (Ints2{{100, 101, 102},
                                                           {108, 109, 110},
                                                           {116, 117, 118},
                                                           {124, 125, 126},
                                                           {132, 133, 134},
                                                           {140, 141, 142}}));
  }
}

// ---- SPEC §5: FLA chunk metadata ----------------------------------------------

const Metadata& build_prefills(GdnMetadataBuilder& b, HostStep& s) {
  s.iota_table(2);
  return b.build(s.step());
}

TEST(ChunkMetadata, ThreeSequences) {
  GdnMetadataBuilder b(gdn_config(0), testing::host_options());
  HostStep s;
  s.lens({3, 64, 133}).seq({3, 64, 133});
  const Metadata& m = build_prefills(b, s);
  expect_counts(m, {0, 0, 3, 200, 0, 0});
  EXPECT_EQ(rows_of(m.chunk_indices), (Ints2{{0, 0}, {1, 0}, {2, 0}, {2, 1}, {2, 2}}));
  EXPECT_EQ(vec(m.chunk_offsets), (Ints{0, 1, 2, 5}));
  EXPECT_EQ(vec(m.prefill_query_start_loc), (Ints{0, 3, 67, 200}));
}

TEST(ChunkMetadata, OneSequenceOverOneChunk) {
  GdnMetadataBuilder b(gdn_config(0), testing::host_options());
  HostStep s;
  s.lens({65}).seq({65});
  const Metadata& m = build_prefills(b, s);
  EXPECT_EQ(rows_of(m.chunk_indices), (Ints2{{0, 0}, {0, 1}}));
  EXPECT_EQ(vec(m.chunk_offsets), (Ints{0, 2}));
}

TEST(ChunkMetadata, TrailingEmptySequence) {
  GdnMetadataBuilder b(gdn_config(0), testing::host_options());
  HostStep s;
  s.lens({65, 0}).seq({65, 0});
  const Metadata& m = build_prefills(b, s);
  expect_counts(m, {0, 0, 1, 65, 0, 0});  // the padding row is dropped from the counts
  EXPECT_EQ(rows_of(m.chunk_indices), (Ints2{{0, 0}, {0, 1}}));
  EXPECT_EQ(vec(m.chunk_offsets), (Ints{0, 2, 2}));
  EXPECT_EQ(vec(m.prefill_query_start_loc), (Ints{0, 65, 65}));
}

TEST(ChunkMetadata, OffWhenDisabledInTheConfig) {
  Config c = gdn_config(0);
  c.chunk_metadata = false;
  GdnMetadataBuilder b(c, testing::host_options());
  HostStep s;
  s.lens({65}).seq({65}).iota_table(2);
  const Metadata& m = b.build(s.step());
  EXPECT_FALSE(m.chunk_indices);
  EXPECT_FALSE(m.chunk_offsets);
  EXPECT_TRUE(m.prefill_query_start_loc);
  EXPECT_TRUE(m.conv1d.has_value());
}

// SPEC §5 says "use the true i" when an empty sequence precedes a non-empty one;
// the executed reference (public case "T-gdn zero_length_padding_with_spec")
// numbers sequences by the count of non-empty ones so far, and the library
// follows the executed reference. This pins that choice: prefill cu_seqlens
// [0, 0, 1] -> [[0, 0]] (SPEC text: [[1, 0]]).
TEST(ChunkMetadata, EmptySequenceBeforeANonEmptyOneFollowsTheExecutedReference) {
  GdnMetadataBuilder b(gdn_config(2), testing::host_options());
  HostStep s;
  s.lens({0, 1, 3})
      .seq({16, 65, 20})
      .draft_counts({-1, -1, 2})
      .accepted_counts({1, 1, 1})
      .iota_table(5);
  const Metadata& m = b.build(s.step());
  EXPECT_EQ(vec(m.prefill_query_start_loc), (Ints{0, 0, 1}));
  EXPECT_EQ(vec(m.chunk_offsets), (Ints{0, 0, 1}));
  EXPECT_EQ(rows_of(m.chunk_indices), (Ints2{{0, 0}}));
  expect_conv(m, {0, 1}, {1}, {0});  // conv1d uses the true sequence number
}

// ---- SPEC §6: causal-conv1d metadata ------------------------------------------

TEST(Conv1dMetadata, SpecExampleGdn) {
  GdnMetadataBuilder b(gdn_config(0), testing::host_options());
  HostStep s;
  s.lens({3, 17, 0, 9}).seq({3, 17, 0, 9}).iota_table(2);
  const Metadata& m = b.build(s.step());
  // GDN's trailing-padding correction counts every zero-length row from num_decodes on.
  expect_counts(m, {0, 0, 3, 20, 0, 0});
  expect_conv(m, {1, 3, 0, 2}, {0, 1, 1, 1, 3, 3}, {0, 0, 1, 2, 0, 1});
}

TEST(Conv1dMetadata, SpecExampleKda) {
  KdaMetadataBuilder b(kda_config(0), testing::host_options());
  HostStep s;
  s.lens({3, 17, 0, 9}).seq({3, 17, 0, 9}).prefilling({1, 1, 0, 1}).iota_table(2);
  const Metadata& m = b.build(s.step());
  expect_counts(m, {0, 0, 4, 29, 0, 0});  // KDA has no padding correction
  expect_conv(m, {1, 3, 0, 2}, {0, 1, 1, 1, 3, 3}, {0, 0, 1, 2, 0, 1});
}

TEST(Conv1dMetadata, StaleProgramsOfALargerStepAreRepadded) {
  GdnMetadataBuilder b(gdn_config(0), testing::host_options());
  HostStep big;
  big.lens({500, 300}).seq({500, 300}).iota_table(2);
  b.build(big.step());
  HostStep s;
  s.lens({3, 17, 0, 9}).seq({3, 17, 0, 9}).iota_table(2);
  expect_conv(b.build(s.step()), {1, 3, 0, 2}, {0, 1, 1, 1, 3, 3}, {0, 0, 1, 2, 0, 1});
}

// ---- SPEC §7 A: GDN spec detection ---------------------------------------------

TEST(GdnSpecDetection, ZeroDraftsInTotalMeansNoSpec) {
  GdnMetadataBuilder b(gdn_config(2), testing::host_options());
  HostStep s;
  s.lens({1, 1}).seq({10, 20}).draft_counts({0, 0}).accepted_counts({1, 1}).iota_table(4);
  const Metadata& m = b.build(s.step());
  expect_counts(m, {2, 2, 0, 0, 0, 0});
  expect_no_spec_fields(m);
  EXPECT_EQ(vec(m.non_spec_state_indices_tensor), (Ints{100, 108}));
  EXPECT_EQ(vec(m.non_spec_query_start_loc), (Ints{0, 1, 2}));
}

TEST(GdnSpecDetection, NoSpecWithoutDraftsOrWithoutSpecRowsOrWithNumSpecZero) {
  {
    GdnMetadataBuilder b(gdn_config(2), testing::host_options());
    HostStep s;  // drafts absent
    s.lens({1, 1}).seq({10, 20}).accepted_counts({1, 1}).iota_table(4);
    const Metadata& m = b.build(s.step());
    expect_counts(m, {2, 2, 0, 0, 0, 0});
    expect_no_spec_fields(m);
  }
  {
    GdnMetadataBuilder b(gdn_config(2), testing::host_options());
    HostStep s;  // no row with drafts >= 0
    s.lens({1, 1}).seq({10, 20}).draft_counts({-1, -1}).accepted_counts({1, 1}).iota_table(4);
    const Metadata& m = b.build(s.step());
    expect_counts(m, {2, 2, 0, 0, 0, 0});
    expect_no_spec_fields(m);
  }
  {
    GdnMetadataBuilder b(gdn_config(0), testing::host_options());
    HostStep s;  // num_spec = 0: drafts are ignored
    s.lens({1, 1}).seq({10, 20}).draft_counts({1, 1}).accepted_counts({1, 1}).iota_table(4);
    const Metadata& m = b.build(s.step());
    expect_counts(m, {2, 2, 0, 0, 0, 0});
    expect_no_spec_fields(m);
  }
}

TEST(GdnSpecDetection, ARowWithZeroDraftsIsStillASpecRow) {
  GdnMetadataBuilder b(gdn_config(2), testing::host_options());
  HostStep s;
  s.lens({3, 1, 1})
      .seq({20, 30, 40})
      .draft_counts({2, 0, -1})
      .accepted_counts({2, 1, 1})
      .iota_table(4);
  const Metadata& m = b.build(s.step());
  // Row 2 is a one-token non-spec decode: reclassified as a prefill.
  expect_counts(m, {0, 0, 1, 1, 2, 4});
  EXPECT_EQ(vec(m.spec_sequence_masks), (Ints{1, 1, 0}));
  EXPECT_EQ(rows_of(m.spec_state_indices_tensor), (Ints2{{100, 101, 102}, {108, 109, 110}}));
  EXPECT_EQ(vec(m.non_spec_state_indices_tensor), (Ints{116}));
  EXPECT_EQ(vec(m.spec_query_start_loc), (Ints{0, 3, 4}));
  EXPECT_EQ(vec(m.non_spec_query_start_loc), (Ints{0, 1}));
  EXPECT_EQ(vec(m.spec_token_indx), (Ints{0, 1, 2, 3}));
  EXPECT_EQ(vec(m.non_spec_token_indx), (Ints{4}));
  EXPECT_EQ(vec(m.num_accepted_tokens), (Ints{2, 1}));
  EXPECT_FALSE(m.uniform_spec_sequence_length.has_value());
  EXPECT_EQ(vec(m.prefill_query_start_loc), (Ints{0, 1}));
  EXPECT_EQ(vec(m.prefill_state_indices), (Ints{116}));
  EXPECT_EQ(vec(m.has_initial_state), (Ints{1}));
  EXPECT_EQ(vec(m.prefill_has_initial_state), (Ints{1}));
  EXPECT_EQ(rows_of(m.chunk_indices), (Ints2{{0, 0}}));
  EXPECT_EQ(vec(m.chunk_offsets), (Ints{0, 1}));
  expect_conv(m, {1}, {0}, {0});
}

// Spec detection reads the draft counts row by row, never their sum (INT_MAX + INT_MAX + 2
// wrapped to 0 in int32 and a spec step became a non-spec one).
TEST(GdnSpecDetection, DraftCountsAreNotSummed) {
  // Spec rows with no draft at all take the regular path; one draft anywhere among them
  // takes the spec path (SPEC §7 A).
  GdnMetadataBuilder b(gdn_config(2), testing::host_options());
  HostStep s;
  s.lens({1, 1, 1}).seq({5, 6, 7}).accepted_counts({1, 1, 1}).iota_table(3);
  s.draft_counts({0, 0, -1});
  EXPECT_EQ(b.build(s.step()).num_spec_decodes, 0);
  s.draft_counts({0, 1, -1});
  s.lens({1, 2, 1}).iota_table(3);
  EXPECT_EQ(b.build(s.step()).num_spec_decodes, 2);
}

TEST(GdnSpecDetection, DraftsAreNotReadWithSpeculativeDecodingOff) {
  GdnMetadataBuilder b(gdn_config(0), testing::host_options());
  HostStep s;
  s.lens({1, 1}).seq({5, 6}).draft_counts({5, INT_MAX}).iota_table(1);
  const Metadata& m = b.build(s.step());
  EXPECT_EQ(m.num_decodes, 2);
  EXPECT_EQ(m.num_spec_decodes, 0);
}

// ---- SPEC §7 B1: GDN no-spec rules ---------------------------------------------

TEST(GdnFreshPrompt, OneTokenFirstChunkIsAPrefill) {
  GdnMetadataBuilder b(gdn_config(0), testing::host_options());
  HostStep s;
  s.lens({1, 1, 1}).seq({10, 1, 1}).prefilling({0, 1, 0}).iota_table(4);
  const Metadata& m = b.build(s.step());
  // Row 1: prefilling and seq_len <= ql -> the first prefill; row 2 follows it.
  expect_counts(m, {1, 1, 2, 2, 0, 0});
  EXPECT_EQ(vec(m.non_spec_state_indices_tensor), (Ints{100, 108, 116}));
  EXPECT_EQ(vec(m.non_spec_query_start_loc), (Ints{0, 1, 2, 3}));
  // Decodes are peeled off the prefill views (SPEC §7 C).
  EXPECT_EQ(vec(m.prefill_query_start_loc), (Ints{0, 1, 2}));
  EXPECT_EQ(vec(m.prefill_state_indices), (Ints{108, 116}));
  EXPECT_EQ(vec(m.has_initial_state), (Ints{1, 0, 0}));
  EXPECT_EQ(vec(m.prefill_has_initial_state), (Ints{0, 0}));
  EXPECT_EQ(rows_of(m.chunk_indices), (Ints2{{0, 0}, {1, 0}}));
  EXPECT_EQ(vec(m.chunk_offsets), (Ints{0, 1, 2}));
  expect_conv(m, {1, 1, 1}, {0, 1, 2}, {0, 0, 0});
  expect_no_spec_fields(m);
}

TEST(GdnFreshPrompt, NeedsIsPrefillingAPriorFreeRowAndTokens) {
  auto counts_of = [](HostStep s) {
    GdnMetadataBuilder b(gdn_config(0), testing::host_options());
    s.iota_table(4);
    const Metadata& m = b.build(s.step());
    return Ints{m.num_decodes, m.num_decode_tokens, m.num_prefills, m.num_prefill_tokens};
  };
  HostStep absent;  // is_prefilling absent: capture-like batches stay decodes
  absent.lens({1, 1, 1}).seq({10, 1, 1});
  EXPECT_EQ(counts_of(absent), (Ints{3, 3, 0, 0}));
  HostStep resumed;  // a resumed one-token chunk has prior state
  resumed.lens({1, 1, 1}).seq({10, 5, 1}).prefilling({0, 1, 0});
  EXPECT_EQ(counts_of(resumed), (Ints{3, 3, 0, 0}));
  HostStep empty;  // a zero-length row is never a fresh prompt
  empty.lens({1, 0}).seq({5, 0}).prefilling({0, 1});
  EXPECT_EQ(counts_of(empty), (Ints{2, 1, 0, 0}));
}

TEST(GdnNoSpec, TrailingPaddingIsDroppedFromPrefillCounts) {
  GdnMetadataBuilder b(gdn_config(0), testing::host_options());
  HostStep s;
  s.lens({1, 4, 0, 0}).seq({9, 4, 0, 0}).tokens(8).iota_table(4);
  const Metadata& m = b.build(s.step());
  expect_counts(m, {1, 1, 1, 4, 0, 0});
  EXPECT_EQ(m.num_actual_tokens, 8);
  EXPECT_EQ(vec(m.non_spec_state_indices_tensor), (Ints{100, 108, 116, 124}));
  EXPECT_EQ(vec(m.prefill_query_start_loc), (Ints{0, 4, 4, 4}));
  EXPECT_EQ(vec(m.prefill_state_indices), (Ints{108, 116, 124}));
}

TEST(GdnNoSpec, DecodeOnlyStepCountsPaddingRowsAndTokensAsDecodes) {
  GdnMetadataBuilder b(gdn_config(0), testing::host_options());
  HostStep s;
  s.lens({1, 1, 0}).seq({9, 4, 0}).tokens(4).iota_table(4);
  const Metadata& m = b.build(s.step());
  expect_counts(m, {3, 4, 0, 0, 0, 0});
  expect_no_prefill_fields(m);
  expect_no_spec_fields(m);
}

// ---- SPEC §7 B2: GDN spec rules --------------------------------------------------

TEST(GdnSpec, DecodesAreReclassifiedAsPrefillsNextToSpecDecodes) {
  GdnMetadataBuilder b(gdn_config(1), testing::host_options());
  HostStep s;
  s.lens({2, 2, 1, 1, 5, 0})
      .seq({50, 60, 70, 80, 90, 0})
      .draft_counts({1, 1, -1, -1, -1, -1})
      .accepted_counts({1, 2, 1, 1, 1, 1})
      .iota_table(4);
  const Metadata& m = b.build(s.step());
  expect_counts(m, {0, 0, 3, 7, 2, 4});
  EXPECT_EQ(vec(m.spec_sequence_masks), (Ints{1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(rows_of(m.spec_state_indices_tensor), (Ints2{{100, 101}, {108, 109}}));
  EXPECT_EQ(vec(m.non_spec_state_indices_tensor), (Ints{116, 124, 132, 140}));  // padding kept
  EXPECT_EQ(vec(m.spec_query_start_loc), (Ints{0, 2, 4}));
  EXPECT_EQ(vec(m.non_spec_query_start_loc), (Ints{0, 1, 2, 7, 7}));
  EXPECT_EQ(vec(m.spec_token_indx), (Ints{0, 1, 2, 3}));
  EXPECT_EQ(vec(m.non_spec_token_indx), (Ints{4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(vec(m.num_accepted_tokens), (Ints{1, 2}));
  EXPECT_EQ(m.uniform_spec_sequence_length, 2);
  EXPECT_EQ(vec(m.has_initial_state), (Ints{1, 1, 1, 0}));
  EXPECT_EQ(vec(m.prefill_has_initial_state), (Ints{1, 1, 1, 0}));
  EXPECT_EQ(vec(m.prefill_query_start_loc), (Ints{0, 1, 2, 7, 7}));
  EXPECT_EQ(vec(m.prefill_state_indices), (Ints{116, 124, 132, 140}));
  EXPECT_EQ(rows_of(m.chunk_indices), (Ints2{{0, 0}, {1, 0}, {2, 0}}));
  EXPECT_EQ(vec(m.chunk_offsets), (Ints{0, 1, 2, 3, 3}));
  expect_conv(m, {1, 1, 1, 0}, {0, 1, 2}, {0, 0, 0});
}

TEST(GdnSpec, UniformSpecSequenceLength) {
  auto uniform = [](std::initializer_list<int32_t> lens, std::initializer_list<int32_t> drafts) {
    GdnMetadataBuilder b(gdn_config(2), testing::host_options());
    HostStep s;
    s.lens(lens).draft_counts(drafts);
    s.seq_lens.assign(drafts.size(), 30);
    s.seq_ub = s.seq_lens;
    s.accepted.assign(drafts.size(), 1);
    s.has_accepted = true;
    s.iota_table(4);
    const Metadata& m = b.build(s.step());
    EXPECT_EQ(m.num_prefills + m.num_decodes, 0) << "expected a pure spec step";
    return m.uniform_spec_sequence_length;
  };
  EXPECT_EQ(uniform({3, 3, 0}, {2, 2, -1}), 3);  // padding rows are not spec rows
  EXPECT_EQ(uniform({2, 2, 2}, {1, 1, 1}), 2);
  EXPECT_EQ(uniform({3, 2}, {2, 1}), std::nullopt);
  EXPECT_EQ(uniform({0, 3}, {0, 2}), std::nullopt);  // first spec length must be positive
}

TEST(GdnSpec, PureSpecWithPaddingRows) {
  GdnMetadataBuilder b(gdn_config(2), testing::host_options());
  HostStep s;
  s.lens({3, 3, 0})
      .seq({10, 20, 0})
      .draft_counts({2, 2, -1})
      .accepted_counts({1, 3, 1})
      .tokens(8)
      .iota_table(4);
  const Metadata& m = b.build(s.step());
  expect_counts(m, {0, 0, 0, 0, 2, 6});
  EXPECT_EQ(m.num_actual_tokens, 8);
  EXPECT_EQ(vec(m.spec_token_indx), (Ints{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(vec(m.spec_query_start_loc), (Ints{0, 3, 6}));
  EXPECT_EQ(vec(m.spec_sequence_masks), (Ints{1, 1, 0}));
  EXPECT_EQ(vec(m.num_accepted_tokens), (Ints{1, 3}));
  EXPECT_FALSE(m.non_spec_state_indices_tensor);
  EXPECT_FALSE(m.non_spec_query_start_loc);
  expect_no_prefill_fields(m);
}

// ---- SPEC §7 D / F: FULL-graph staging -------------------------------------------

TEST(GdnStaging, SpecStagingPadsPastTheSpecRows) {
  GdnMetadataBuilder b(gdn_config(2, CacheMode::None, true), testing::host_options());
  // A larger staged step first, so that the fills must overwrite its values.
  HostStep big;
  big.lens({3, 3, 3, 3})
      .seq({10, 20, 30, 40})
      .draft_counts({2, 2, 2, 2})
      .accepted_counts({3, 3, 3, 3})
      .iota_table(8);
  const Metadata& first = b.build(big.step());
  const void* state_at = first.spec_state_indices_tensor.data;
  HostStep s;
  s.lens({3, 2, 0, 0})
      .seq({10, 20, 0, 0})
      .draft_counts({2, 1, -1, -1})
      .accepted_counts({2, 1, 7, 7})
      .tokens(8)
      .iota_table(8, 8, 500);
  const Metadata& m = b.build(s.step());
  expect_counts(m, {0, 0, 0, 0, 2, 5});
  EXPECT_EQ(m.spec_state_indices_tensor.data, state_at);
  EXPECT_EQ(rows_of(m.spec_state_indices_tensor),
            (Ints2{{500, 501, 502}, {508, 509, 510}, {0, 0, 0}, {0, 0, 0}}));
  EXPECT_EQ(vec(m.spec_sequence_masks), (Ints{1, 1, 0, 0}));
  EXPECT_EQ(vec(m.spec_query_start_loc), (Ints{0, 3, 5, 5, 5}));
  EXPECT_EQ(vec(m.num_accepted_tokens), (Ints{2, 1, 1, 1}));
  EXPECT_EQ(vec(m.spec_token_indx), (Ints{0, 1, 2, 3, 4}));
  EXPECT_EQ(vec(m.non_spec_token_indx), Ints{});
  EXPECT_FALSE(m.uniform_spec_sequence_length.has_value());
}

TEST(GdnStaging, DecodeStagingCopiesStateAndQueryStartLoc) {
  GdnMetadataBuilder b(gdn_config(0, CacheMode::None, true), testing::host_options());
  HostStep s;
  s.lens({1, 1, 1, 0, 0}).seq({5, 6, 7, 0, 0}).tokens(5).iota_table(4);
  const Metadata& m = b.build(s.step());
  expect_counts(m, {5, 5, 0, 0, 0, 0});
  EXPECT_EQ(vec(m.non_spec_state_indices_tensor), (Ints{100, 108, 116, 124, 132}));
  EXPECT_EQ(vec(m.non_spec_query_start_loc), (Ints{0, 1, 2, 3, 3, 3}));
}

TEST(GdnStaging, CaptureBuildDerivesDraftsAndAcceptedFromQueryLengths) {
  Config c = gdn_config(1, CacheMode::None, true);
  c.max_num_seqs = 4;  // D = 8
  GdnMetadataBuilder b(c, testing::host_options());
  HostStep s;
  s.lens({2, 2, 1, 0}).seq({10, 20, 30, 0}).iota_table(4);  // no drafts, no accepted
  const Metadata& m = b.build_for_cudagraph_capture(s.step());
  expect_counts(m, {0, 0, 0, 0, 3, 5});
  EXPECT_EQ(rows_of(m.spec_state_indices_tensor),
            (Ints2{{100, 101}, {108, 109}, {116, 117}, {0, 0}}));
  EXPECT_EQ(vec(m.spec_sequence_masks), (Ints{1, 1, 1, 0}));
  EXPECT_EQ(vec(m.spec_query_start_loc), (Ints{0, 2, 4, 5, 5}));
  EXPECT_EQ(vec(m.num_accepted_tokens), (Ints{2, 2, 1, 1}));
  EXPECT_EQ(vec(m.spec_token_indx), (Ints{0, 1, 2, 3, 4}));
}

// ---- SPEC §8: KDA -----------------------------------------------------------------

TEST(Kda, PackedDecodeNextToSpecDecodes) {
  KdaMetadataBuilder b(kda_config(2), testing::host_options());
  HostStep s;
  s.lens({3, 1, 1, 0})
      .seq({30, 40, 50, 0})
      .prefilling({0, 0, 0, 0})
      .draft_counts({2, -1, -1, -1})
      .accepted_counts({2, 1, 1, 1})
      .iota_table(4);
  const Metadata& m = b.build(s.step());
  expect_counts(m, {2, 2, 0, 0, 1, 3});
  EXPECT_EQ(rows_of(m.spec_state_indices_tensor), (Ints2{{100, 101, 102}}));
  EXPECT_EQ(vec(m.non_spec_state_indices_tensor), (Ints{108, 116}));  // padding dropped
  EXPECT_EQ(vec(m.spec_query_start_loc), (Ints{0, 3}));
  EXPECT_FALSE(m.non_spec_query_start_loc);  // packed decode has no cumsum
  EXPECT_EQ(vec(m.spec_token_indx), (Ints{0, 1, 2}));
  EXPECT_EQ(vec(m.non_spec_token_indx), (Ints{3, 4}));
  EXPECT_EQ(vec(m.num_accepted_tokens), (Ints{2}));
  EXPECT_FALSE(m.spec_sequence_masks);
  EXPECT_FALSE(m.uniform_spec_sequence_length.has_value());
  expect_no_prefill_fields(m);
  EXPECT_FALSE(m.recoverssm_commit.has_value());
  EXPECT_FALSE(m.checkpoint.has_value());
}

TEST(Kda, OnePrefillingNonSpecRowMakesThemAllPrefills) {
  KdaMetadataBuilder b(kda_config(2), testing::host_options());
  HostStep s;
  s.lens({3, 1, 1, 0})
      .seq({30, 40, 50, 0})
      .prefilling({0, 0, 1, 0})
      .draft_counts({2, -1, -1, -1})
      .accepted_counts({2, 1, 1, 1})
      .iota_table(4);
  const Metadata& m = b.build(s.step());
  expect_counts(m, {0, 0, 2, 2, 1, 3});
  EXPECT_EQ(vec(m.non_spec_state_indices_tensor), (Ints{108, 116}));
  EXPECT_EQ(vec(m.non_spec_query_start_loc), (Ints{0, 1, 2}));
  EXPECT_EQ(vec(m.non_spec_token_indx), (Ints{3, 4}));
  EXPECT_EQ(vec(m.has_initial_state), (Ints{1, 1}));
  expect_conv(m, {1, 1}, {0, 1}, {0, 0});
  // KDA never has chunk metadata or the GDN prefill views.
  EXPECT_FALSE(m.chunk_indices);
  EXPECT_FALSE(m.chunk_offsets);
  EXPECT_FALSE(m.prefill_query_start_loc);
  EXPECT_FALSE(m.prefill_state_indices);
  EXPECT_FALSE(m.prefill_has_initial_state);
}

TEST(Kda, ALongerNonSpecRowMakesThemAllPrefills) {
  KdaMetadataBuilder b(kda_config(2), testing::host_options());
  HostStep s;
  s.lens({3, 1, 2})
      .seq({30, 40, 50})
      .prefilling({0, 0, 0})
      .draft_counts({2, -1, -1})
      .accepted_counts({2, 1, 1})
      .iota_table(4);
  const Metadata& m = b.build(s.step());
  expect_counts(m, {0, 0, 2, 3, 1, 3});
}

TEST(Kda, ZeroDraftsWithoutRecoverSsmIsTheRegularPath) {
  KdaMetadataBuilder b(kda_config(2), testing::host_options());
  HostStep s;
  s.lens({1, 1, 0})
      .seq({5, 6, 0})
      .prefilling({0, 0, 0})
      .draft_counts({0, 0, -1})
      .accepted_counts({1, 1, 1})
      .iota_table(4);
  const Metadata& m = b.build(s.step());
  expect_counts(m, {3, 2, 0, 0, 0, 0});  // split's fast path: every row, padded tokens
  expect_no_spec_fields(m);
  EXPECT_EQ(vec(m.non_spec_state_indices_tensor), (Ints{100, 108, 116}));
  EXPECT_EQ(vec(m.non_spec_query_start_loc), (Ints{0, 1, 2, 2}));
}

TEST(KdaStaging, PureSpecPadsStateQslAndAccepted) {
  Config c = kda_config(2);
  c.full_cuda_graph = true;
  KdaMetadataBuilder b(c, testing::host_options());
  HostStep s;
  s.lens({3, 2, 0, 0})
      .seq({10, 20, 0, 0})
      .prefilling({0, 0, 0, 0})
      .draft_counts({2, 1, -1, -1})
      .accepted_counts({3, 2, 9, 9})
      .tokens(8)
      .iota_table(4);
  const Metadata& m = b.build(s.step());
  expect_counts(m, {0, 0, 0, 0, 2, 5});
  EXPECT_EQ(rows_of(m.spec_state_indices_tensor),
            (Ints2{{100, 101, 102}, {108, 109, 110}, {0, 0, 0}, {0, 0, 0}}));
  EXPECT_EQ(vec(m.spec_query_start_loc), (Ints{0, 3, 5, 5, 5}));
  EXPECT_EQ(vec(m.num_accepted_tokens), (Ints{3, 2, 1, 1}));
  EXPECT_FALSE(m.spec_sequence_masks);
  EXPECT_FALSE(m.spec_token_indx);
  EXPECT_FALSE(m.non_spec_token_indx);
}

TEST(KdaRecoverSsm, DraftlessActiveDecodeRowsBecomeSpecRows) {
  KdaMetadataBuilder b(kda_config(2, true), testing::host_options());
  HostStep s;
  s.lens({3, 1, 0})
      .seq({30, 40, 0})
      .prefilling({0, 0, 0})
      .draft_counts({2, -1, -1})
      .accepted_counts({2, 1, 1})
      .iota_table(4);
  const Metadata& m = b.build(s.step());
  expect_counts(m, {0, 0, 0, 0, 2, 4});
  EXPECT_EQ(rows_of(m.spec_state_indices_tensor), (Ints2{{100}, {108}}));  // S = 1
  EXPECT_EQ(vec(m.spec_query_start_loc), (Ints{0, 3, 4}));
  EXPECT_EQ(vec(m.num_accepted_tokens), (Ints{1, 1}));  // all ones
  EXPECT_FALSE(m.spec_token_indx);
  EXPECT_FALSE(m.non_spec_state_indices_tensor);
  ASSERT_TRUE(m.recoverssm_commit.has_value());
  EXPECT_EQ(rows_of(m.recoverssm_commit->state_indices), (Ints2{{100}, {108}}));
  EXPECT_EQ(vec(m.recoverssm_commit->query_start_loc), (Ints{0, 3, 4}));
  EXPECT_FALSE(m.recoverssm_commit->request_indices);
  EXPECT_FALSE(m.recoverssm_commit->align.has_value());
}

TEST(KdaRecoverSsm, ZeroDraftsStillTakesTheSpecPath) {
  KdaMetadataBuilder b(kda_config(2, true), testing::host_options());
  HostStep s;
  s.lens({1, 1, 0})
      .seq({30, 40, 0})
      .prefilling({0, 0, 0})
      .draft_counts({-1, -1, -1})
      .accepted_counts({3, 3, 3})
      .iota_table(4);
  const Metadata& m = b.build(s.step());
  expect_counts(m, {0, 0, 0, 0, 2, 2});
  EXPECT_EQ(vec(m.num_accepted_tokens), (Ints{1, 1}));
  EXPECT_TRUE(m.recoverssm_commit.has_value());
}

// SPEC §8: under RecoverSSM the accepted counts are all ones, so the device array is never
// read and may be absent. Pure spec (staged and eager) and mixed steps.
TEST(KdaRecoverSsm, NullAcceptedCountsReadAsOnes) {
  HostStep pure;
  pure.lens({3, 2, 1, 0}).seq({30, 40, 50, 0}).prefilling({0, 0, 0, 0});
  pure.draft_counts({2, 1, -1, -1}).accepted_counts({3, 2, 1, 1}).iota_table(3);
  HostStep mixed;
  mixed.lens({3, 1, 34, 0}).seq({30, 40, 50, 0}).prefilling({0, 0, 1, 0});
  mixed.draft_counts({2, -1, -1, -1}).accepted_counts({2, 1, 1, 1}).iota_table(3);
  for (bool graph : {false, true})
    for (const HostStep& given : {pure, mixed}) {
      SCOPED_TRACE(graph ? "FULL graphs" : "eager");
      Config c = kda_config(2, /*recoverssm=*/true);
      c.full_cuda_graph = graph;
      KdaMetadataBuilder with(c, testing::host_options());
      KdaMetadataBuilder without(c, testing::host_options());
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

TEST(KdaRecoverSsm, MixedStepHasRequestIndicesAndAlignCommit) {
  KdaMetadataBuilder b(kda_config(2, true, CacheMode::Align), testing::host_options());
  HostStep s;
  s.lens({3, 1, 10, 0})
      .seq({30, 40, 10, 0})
      .prefilling({0, 0, 1, 0})
      .draft_counts({2, -1, -1, -1})
      .accepted_counts({3, 1, 1, 1})
      .iota_table(8);
  const Metadata& m = b.build(s.step());
  expect_counts(m, {0, 0, 1, 10, 2, 4});
  // Aligned column 0: starts (30-1)/16 = 1, (40-1)/16 = 2, (10-1)/16 = 0.
  EXPECT_EQ(rows_of(m.spec_state_indices_tensor), (Ints2{{101}, {110}}));
  EXPECT_EQ(vec(m.non_spec_state_indices_tensor), (Ints{116}));
  EXPECT_EQ(vec(m.spec_query_start_loc), (Ints{0, 3, 4}));
  EXPECT_EQ(vec(m.non_spec_query_start_loc), (Ints{0, 10}));
  EXPECT_EQ(vec(m.spec_token_indx), (Ints{0, 1, 2, 3}));
  EXPECT_EQ(vec(m.non_spec_token_indx), (Ints{4, 5, 6, 7, 8, 9, 10, 11, 12, 13}));
  EXPECT_EQ(vec(m.num_accepted_tokens), (Ints{1, 1}));
  EXPECT_EQ(vec(m.has_initial_state), (Ints{0}));
  expect_conv(m, {2}, {0, 0}, {0, 1});
  ASSERT_TRUE(m.recoverssm_commit.has_value());
  const RecoverSsmCommit& rc = *m.recoverssm_commit;
  EXPECT_EQ(rows_of(rc.state_indices), (Ints2{{101}, {110}}));
  EXPECT_EQ(vec(rc.query_start_loc), (Ints{0, 3, 4}));
  EXPECT_EQ(vec(rc.request_indices), (Ints{0, 1}));
  ASSERT_TRUE(rc.align.has_value());
  EXPECT_EQ(rc.align->block_table.data, s.table.data());  // the raw table
  EXPECT_EQ(rc.align->block_size, 16);
  EXPECT_EQ(vec(rc.align->num_computed_tokens), (Ints{27, 39, 0, 0}));
  EXPECT_FALSE(m.checkpoint.has_value());  // num_prefill_checkpoint_blocks = 0
}

Config checkpoint_config(bool recoverssm) {
  Config c = kda_config(recoverssm ? 2 : 0, recoverssm, CacheMode::Align);
  c.block_size = 64;
  c.num_prefill_checkpoint_blocks = 1;
  return c;
}

TEST(KdaCheckpoint, SpecFormulaPerRow) {
  KdaMetadataBuilder b(checkpoint_config(false), testing::host_options());
  HostStep s;
  // B = 64. offset = (seq / 64) * 64 - (seq - q):
  //   row 0: 64 - 20 = 44 (not a multiple of 16)   -> no checkpoint
  //   row 1: 64 - 32 = 32, valid                     -> offset 32, column 0
  //   row 2: seq % 64 == 0                           -> no checkpoint
  //   row 3: 192 - 50 = 142 (not a multiple of 16)   -> no checkpoint
  //   row 4: 192 - 64 = 128 < 136, valid             -> offset 128, column 2
  s.lens({80, 68, 64, 150, 136})
      .seq({100, 100, 128, 200, 200})
      .prefilling({1, 1, 1, 1, 1})
      .iota_table(8);
  const Metadata& m = b.build(s.step());
  expect_counts(m, {0, 0, 5, 498, 0, 0});
  EXPECT_EQ(vec(m.non_spec_state_indices_tensor), (Ints{101, 109, 117, 127, 135}));  // aligned
  ASSERT_TRUE(m.checkpoint.has_value());
  EXPECT_EQ(vec(m.checkpoint->checkpoint_offsets), (Ints{0, 32, 0, 0, 128}));
  // The raw (unaligned) block table, NULL where there is no checkpoint.
  EXPECT_EQ(vec(m.checkpoint->state_indices), (Ints{0, 108, 0, 0, 134}));
  EXPECT_FALSE(m.recoverssm_commit.has_value());
}

TEST(KdaCheckpoint, AbsentWithoutAnyTail) {
  KdaMetadataBuilder b(checkpoint_config(false), testing::host_options());
  HostStep s;
  s.lens({80, 64}).seq({100, 128}).prefilling({1, 1}).iota_table(8);
  const Metadata& m = b.build(s.step());
  EXPECT_EQ(m.num_prefills, 2);
  EXPECT_FALSE(m.checkpoint.has_value());
}

TEST(KdaCheckpoint, OnlyOnActiveNonSpecRowsOfASpecStep) {
  KdaMetadataBuilder b(checkpoint_config(true), testing::host_options());
  HostStep s;
  s.lens({3, 68, 0})
      .seq({30, 100, 0})
      .prefilling({0, 1, 0})
      .draft_counts({2, -1, -1})
      .accepted_counts({1, 1, 1})
      .iota_table(8);
  const Metadata& m = b.build(s.step());
  expect_counts(m, {0, 0, 1, 68, 1, 3});
  ASSERT_TRUE(m.checkpoint.has_value());
  EXPECT_EQ(vec(m.checkpoint->checkpoint_offsets), (Ints{32}));
  EXPECT_EQ(vec(m.checkpoint->state_indices), (Ints{108}));
}

// The seed raises UnboundLocalError here (RecoverSSM builds a spec mask, no row
// is spec, and the checkpoint code reads the spec path's row mask); SPEC §8: the
// metadata must be produced, with checkpoint rows = all rows as in the no-spec path.
TEST(KdaCheckpoint, RecoverSsmWithOnlyPrefillsUsesEveryRow) {
  KdaMetadataBuilder b(checkpoint_config(true), testing::host_options());
  HostStep s;
  s.lens({68, 80, 0})
      .seq({100, 100, 0})
      .prefilling({1, 1, 0})
      .draft_counts({-1, -1, -1})
      .accepted_counts({1, 1, 1})
      .iota_table(8);
  const Metadata& m = b.build(s.step());
  expect_counts(m, {0, 0, 3, 148, 0, 0});  // KDA split: row 0 is a prefill, so all rows are
  expect_no_spec_fields(m);
  EXPECT_FALSE(m.recoverssm_commit.has_value());
  EXPECT_EQ(vec(m.non_spec_state_indices_tensor), (Ints{101, 109, 116}));
  EXPECT_EQ(vec(m.non_spec_query_start_loc), (Ints{0, 68, 148, 148}));
  EXPECT_EQ(vec(m.has_initial_state), (Ints{1, 1, 0}));
  expect_conv(m, {9, 10, 0}, {0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
              {0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  ASSERT_TRUE(m.checkpoint.has_value());
  EXPECT_EQ(vec(m.checkpoint->checkpoint_offsets), (Ints{32, 0, 0}));
  EXPECT_EQ(vec(m.checkpoint->state_indices), (Ints{100, 0, 0}));
}

// FULL-graph spec staging of more rows than decode_cudagraph_max_bs (D = 10): RecoverSSM
// stages max_num_seqs rows of state indices, but the reference's query_start_loc / accepted
// slices [:B + 1] / [:B] stop at the ends of its [D + 1] / [D] buffers.
TEST(KdaStaging, RecoverSsmRowsPastTheCaptureSizeKeepTheBufferSlices) {
  Config c = kda_config(1, /*recoverssm=*/true);
  c.max_num_seqs = 64;
  c.max_num_batched_tokens = 2048;
  c.full_cuda_graph = true;
  c.max_cudagraph_capture_size = 10;
  c.block_size = 64;
  ASSERT_EQ(c.decode_cudagraph_max_bs(BuilderKind::Gdn), 10);
  KdaMetadataBuilder b(c, testing::host_options());
  HostStep s;
  s.lens({1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0})
      .seq({100, 101, 102, 103, 104, 105, 0, 0, 0, 0, 0, 0})
      .prefilling({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
      .draft_counts({0, 0, 0, 0, 0, 0, -1, -1, -1, -1, -1, -1})
      .accepted_counts({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
      .iota_table(4);
  const Metadata& m = b.build(s.step());
  EXPECT_EQ(m.num_spec_decodes, 6);
  EXPECT_EQ(m.spec_state_indices_tensor.rows, 12);
  EXPECT_EQ(vec(m.spec_query_start_loc), (Ints{0, 1, 2, 3, 4, 5, 6, 6, 6, 6, 6}));
  EXPECT_EQ(vec(m.num_accepted_tokens), (Ints(10, 1)));
}

}  // namespace
}  // namespace linmeta
