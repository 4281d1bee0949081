// Step validation (SPEC §1, §2): every rejected step throws linmeta::Error naming the field
// (and the row / values where there are some), and a rejected build writes nothing: the
// metadata of the last good build keeps its exact JSON, and the builder still builds
// afterwards. Values at the int32 limits (sums, differences and products that once wrapped)
// are rejected by name, never by an internal error.
#include <gtest/gtest.h>

#include <climits>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "case_file.hpp"
#include "host_configs.hpp"
#include "host_step.hpp"
#include "rejection.hpp"

namespace linmeta {
namespace {

using testing::add_tokens_from;
using testing::all_bases;
using testing::Base;
using testing::expect_error;
using testing::gdn_config;
using testing::gdn_decode;
using testing::gdn_mixed;
using testing::gdn_staged;
using testing::HostStep;
using testing::kda_config;
using testing::kda_mixed;
using testing::Snapshot;
using testing::spec_bases;

using MakeBad = std::function<Step(HostStep&)>;
using Call = std::function<void(MetadataBuilder&, const Step&)>;

void plain_build(MetadataBuilder& b, const Step& s) { b.build(s); }

/// Builds base.step, makes the bad step, expects `call` to be rejected with the
/// needles, then checks the good metadata is untouched and the builder recovers.
void expect_rejected(const Base& base, const MakeBad& make_bad,
                     const std::vector<std::string>& needles, const Call& call = plain_build) {
  SCOPED_TRACE(base.name);
  MetadataBuilder b(base.kind, base.config, testing::host_options());
  const Metadata good = b.build(base.step.step());
  const Snapshot snap({&good, 1}, base.kind);
  ASSERT_FALSE(snap.at(0).is_null());
  HostStep bad = base.step;
  const Step s = make_bad(bad);
  expect_error([&] { call(b, s); }, needles, base.name);
  snap.expect_unchanged(base.name);
  EXPECT_EQ(cases::to_json(b.build(base.step.step()), base.kind), snap.at(0))
      << base.name << ": the builder does not recover";
}

// ---- query_start_loc / token counts / rows ------------------------------------

TEST(StepValidation, QueryStartLocMustStartAtZero) {
  for (const Base& base : all_bases())
    expect_rejected(base,
                    [](HostStep& s) {
                      for (auto& x : s.qsl) x += 1;
                      return s.step();
                    },
                    {"query_start_loc_cpu[0] = 1", "must be 0"});
}

TEST(StepValidation, QueryStartLocMustNotDecrease) {
  for (const Base& base : all_bases())
    expect_rejected(
        base,
        [](HostStep& s) {
          s.qsl[2] = s.qsl[1] - 1;
          return s.step();
        },
        {"query_start_loc_cpu decreases at row 1", "[1] = " + std::to_string(base.step.qsl[1]),
         "[2] = " + std::to_string(base.step.qsl[1] - 1)});
}

TEST(StepValidation, QueryStartLocNeedsNumReqsPlusOneEntries) {
  for (const Base& base : all_bases()) {
    expect_rejected(base,
                    [](HostStep& s) {
                      s.num_reqs = s.rows();
                      s.qsl.pop_back();
                      return s.step();
                    },
                    {"query_start_loc_cpu has 4 entries", "num_reqs + 1 = 5"});
    expect_rejected(base,
                    [](HostStep& s) {
                      s.num_reqs = s.rows();
                      s.qsl.push_back(s.qsl.back());
                      return s.step();
                    },
                    {"query_start_loc_cpu has 6 entries", "num_reqs + 1 = 5"});
  }
}

TEST(StepValidation, WrappedQueryStartLocIsRejected) {
  const Config c = gdn_config(2);
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

TEST(StepValidation, NumActualTokensBelowTheQueryTotal) {
  for (const Base& base : all_bases()) {
    const int32_t total = base.step.qsl.back();
    expect_rejected(base,
                    [total](HostStep& s) {
                      s.tokens(total - 1);
                      return s.step();
                    },
                    {"num_actual_tokens = " + std::to_string(total - 1),
                     "query_start_loc_cpu[4] = " + std::to_string(total)});
  }
}

TEST(StepValidation, NumActualTokensAboveMaxNumBatchedTokens) {
  for (const Base& base : all_bases())
    expect_rejected(base,
                    [](HostStep& s) {
                      s.tokens(1025);
                      return s.step();
                    },
                    {"num_actual_tokens = 1025", "max_num_batched_tokens = 1024"});
}

TEST(StepValidation, NumReqsAboveMaxNumSeqs) {
  for (const Base& base : all_bases())
    expect_rejected(base,
                    [](HostStep& s) {
                      s.pad_to(9);
                      return s.step();
                    },
                    {"num_reqs = 9", "max_num_seqs = 8"});
}

TEST(StepValidation, NumReqsBelowOne) {
  for (const Base& base : all_bases())
    expect_rejected(base,
                    [](HostStep& s) {
                      HostStep empty;
                      s = empty;
                      return s.step();
                    },
                    {"num_reqs = 0"});
}

// ---- per-row values --------------------------------------------------------------

TEST(StepValidation, DraftCountBelowMinusOne) {
  for (const Base& base : spec_bases())
    expect_rejected(base,
                    [](HostStep& s) {
                      s.drafts[2] = -2;
                      return s.step();
                    },
                    {"num_decode_draft_tokens[2] = -2", "below -1"});
}

TEST(StepValidation, DraftCountsAboveNumSpecAreRejected) {
  const Config c = gdn_config(3);
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

// M2 with speculative decoding off: the drafts of a prefilling row with prior state and at
// most 1 + k tokens are read (a prompt tail padded with placeholder drafts, ql == drafts + 1)
// but not range-checked, so that drafts + 1 of INT32_MAX overflowed in int32 (UB: the asan
// preset's UBSan stops there). The one-token row with prior state is a decode, as with no
// drafts.
TEST(StepValidation, MambaDraftCountOfIntMaxWithSpecOffIsDefined) {
  Config c;
  c.profile = Profile::Vllm034;
  c.max_num_batched_tokens = 1024;
  for (BuilderKind kind : {BuilderKind::Mamba2, BuilderKind::ShortConv}) {
    SCOPED_TRACE(std::string(names::builder_kind_name(kind)));
    c.chunk_size = kind == BuilderKind::Mamba2 ? 64 : 0;
    MetadataBuilder b(kind, c, testing::host_options());
    HostStep s;
    s.lens({1, 1}).seq({5, 10}).prefilling({0, 1}).iota_table(2);
    const auto without = cases::to_json(b.build(s.step()), kind);
    s.draft_counts({-1, INT_MAX});
    const Metadata& m = b.build(s.step());
    EXPECT_EQ(m.num_decodes, 2);
    EXPECT_EQ(cases::to_json(m, kind), without);
  }
}

TEST(StepValidation, NegativeSeqLensUpperBound) {
  for (const Base& base : all_bases())
    expect_rejected(base,
                    [](HostStep& s) {
                      s.seq_ub[1] = -3;
                      return s.step();
                    },
                    {"seq_lens_cpu_upper_bound[1] = -3", "negative"});
}

TEST(StepValidation, GdnSpecRowLongerThanNumSpecPlusOne) {
  for (const Base& base : {gdn_staged(), gdn_mixed()})
    expect_rejected(base,
                    [](HostStep& s) {
                      add_tokens_from(s, 1, 1);  // row 1: 4 tokens, 2 drafts
                      return s.step();
                    },
                    {"spec-decode row 1", "query length 4", "num_spec + 1 = 3"});
}

TEST(StepValidation, KdaRecoverSsmActivationCapacity) {
  // Row 1 is a draftless, non-prefilling row: RecoverSSM makes it a spec row.
  expect_rejected(
      kda_mixed(),
      [](HostStep& s) {
        add_tokens_from(s, 1, 4);  // 5 tokens
        return s.step();
      },
      {"RecoverSSM", "activation capacity", "row 1", "query length 5", "num_spec + 1 = 3"});
}

TEST(StepValidation, KdaRecoverSsmNeedsIsPrefilling) {
  expect_rejected(kda_mixed(),
                  [](HostStep& s) {
                    s.is_prefilling.clear();
                    return s.step();
                  },
                  {"is_prefilling is required"});
}

TEST(StepValidation, KdaSpecStepWithNonSpecRowsNeedsIsPrefilling) {
  Base base = kda_mixed();
  base.config.use_recoverssm = false;
  base.config.num_speculative_blocks = 2;
  base.step.iota_table(6);  // row 2: seq 50 -> start 3, reads columns 3..5
  expect_rejected(base,
                  [](HostStep& s) {
                    s.is_prefilling.clear();
                    return s.step();
                  },
                  {"is_prefilling is required"});
}

// ---- block tables --------------------------------------------------------------

TEST(StepValidation, BlockTableTooNarrowForTheAlignedGather) {
  Base base = gdn_mixed();
  base.name = "gdn align";
  base.config.mamba_cache_mode = CacheMode::Align;
  base.step.iota_table(5);  // row 1: seq 40 -> start 2, reads columns 2..4
  expect_rejected(base,
                  [](HostStep& s) {
                    s.iota_table(4);
                    return s.step();
                  },
                  {"block_table of group 0 is too narrow", "row 1", "5 columns",
                   "aligned state gather", "width = 4"});
}

TEST(StepValidation, BlockTableTooNarrowForTheStagedSpecState) {
  expect_rejected(
      gdn_staged(),
      [](HostStep& s) {
        s.iota_table(2);  // a staged spec row takes num_spec + 1 = 3 columns
        return s.step();
      },
      {"block_table of group 0 is too narrow", "3 columns", "staged spec state", "width = 2"});
}

TEST(StepValidation, BlockTableBadWidthOrStride) {
  for (const Base& base : all_bases()) {
    expect_rejected(base,
                    [](HostStep& s) {
                      Step st = s.step();
                      st.block_table.width = 0;
                      return st;
                    },
                    {"block_table of group 0", "width = 0"});
    expect_rejected(
        base,
        [](HostStep& s) {
          Step st = s.step();
          st.block_table.row_stride = st.block_table.width - 1;
          return st;
        },
        {"block_table of group 0", "row_stride = " + std::to_string(base.step.width - 1)});
  }
}

// The aligned gather's width is computed in 64 bits: with block_size 1 and an upper bound of
// INT32_MAX the gather starts at column INT32_MAX - 1 and reads 3 columns; in int32 that
// wrapped negative and a 4-wide table was accepted (then read far outside its rows).
TEST(StepValidation, AlignedWidthOfAHugeUpperBoundDoesNotWrap) {
  Config c = gdn_config(2, CacheMode::Align);
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

TEST(StepValidation, AlignedWidthStillAcceptsAWideEnoughTable) {
  Config c = gdn_config(2, CacheMode::Align);
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

TEST(StepValidation, RowStridesThatWouldWrapARowOffsetAreRejected) {
  GdnMetadataBuilder b(gdn_config(2), testing::host_options());
  HostStep s;
  s.lens({3, 3}).seq({10, 12}).draft_counts({2, 2}).accepted_counts({1, 1}).iota_table(4);
  Step bad = s.step();
  bad.block_table.row_stride = INT64_MAX / 2;  // row 1's offset alone is past any memory
  expect_error([&] { b.build(bad); },
               {"block_table of group 0", "row_stride = 4611686018427387903", "exceeds INT32_MAX"});
  const Metadata built = b.build(s.step());
  expect_error([&] { b.update_block_table(built, bad.block_table); }, {"exceeds INT32_MAX"});
}

// ---- null device pointers ---------------------------------------------------------

TEST(StepValidation, NullSeqLens) {
  for (const Base& base : all_bases())
    expect_rejected(base,
                    [](HostStep& s) {
                      Step st = s.step();
                      st.seq_lens = nullptr;
                      return st;
                    },
                    {"seq_lens", "null"});
}

TEST(StepValidation, NullBlockTable) {
  for (const Base& base : all_bases())
    expect_rejected(base,
                    [](HostStep& s) {
                      Step st = s.step();
                      st.block_table.data = nullptr;
                      return st;
                    },
                    {"block_table of group 0 is null"});
}

TEST(StepValidation, NullNumAcceptedTokensOnASpecStep) {
  // Not KDA RecoverSSM: its accepted counts are all ones, never read
  // (KdaRecoverSsm.NullAcceptedCountsReadAsOnes).
  for (const Base& base : {gdn_staged(), gdn_mixed()})
    expect_rejected(base,
                    [](HostStep& s) {
                      s.has_accepted = false;
                      return s.step();
                    },
                    {"num_accepted_tokens", "null"});
}

TEST(StepValidation, NullAcceptedCountsRejectedWhereTheyAreRead) {
  HostStep s;
  s.lens({3, 2}).seq({30, 40}).prefilling({0, 0}).draft_counts({2, 1}).iota_table(3);
  for (auto [kind, c] :
       {std::pair{BuilderKind::Gdn, gdn_config(2)}, std::pair{BuilderKind::Kda, kda_config(2)}}) {
    MetadataBuilder b(kind, c, testing::host_options());
    expect_error([&] { b.build(s.step()); }, {"num_accepted_tokens (device) is null"});
  }
}

// ---- sizes that disagree ----------------------------------------------------------

TEST(StepValidation, SeqLensUpperBoundSize) {
  for (const Base& base : all_bases())
    expect_rejected(base,
                    [](HostStep& s) {
                      s.seq_ub.pop_back();
                      return s.step();
                    },
                    {"seq_lens_cpu_upper_bound has 3 entries", "num_reqs = 4"});
}

TEST(StepValidation, IsPrefillingSize) {
  for (const Base& base : all_bases())
    expect_rejected(base,
                    [](HostStep& s) {
                      s.is_prefilling.push_back(0);
                      return s.step();
                    },
                    {"is_prefilling has 5 entries", "num_reqs = 4"});
}

TEST(StepValidation, DraftsSize) {
  for (const Base& base : all_bases())
    expect_rejected(base,
                    [](HostStep& s) {
                      s.drafts.assign(3, -1);
                      s.has_drafts = true;
                      return s.step();
                    },
                    {"num_decode_draft_tokens has 3 entries", "num_reqs = 4"});
}

// ---- capture builds -----------------------------------------------------------------

TEST(StepValidation, CaptureAboveDecodeCudagraphMaxBs) {
  Base base = gdn_staged();
  base.config.max_cudagraph_capture_size = 8;  // D = min(8 * 3, 8) = 8
  expect_rejected(
      base,
      [](HostStep& s) {
        s.tokens(9);
        return s.step();
      },
      {"capture", "num_actual_tokens = 9", "decode_cudagraph_max_bs = 8"},
      [](MetadataBuilder& b, const Step& s) { b.build_for_cudagraph_capture(s); });
}

// ---- groups -------------------------------------------------------------------------

TEST(StepValidation, WrongNumberOfTablesForBuildGroups) {
  const Base base = gdn_mixed();
  HostStep other = base.step;
  other.iota_table(4, 8, 900);
  const std::vector<BlockTable> two{base.step.block_table(), other.block_table()};
  MetadataBuilder b(base.kind, base.config, testing::host_options(2));
  const auto good = b.build_groups(base.step.step(), two);
  const Snapshot snap(good, base.kind);
  const std::vector<BlockTable> three{two[0], two[1], two[0]};
  expect_error([&] { b.build_groups(base.step.step(), std::span(two).first(1)); },
               {"1 block tables given", "num_groups = 2"}, "one table");
  expect_error([&] { b.build_groups(base.step.step(), three); },
               {"3 block tables given", "num_groups = 2"}, "three tables");
  expect_error([&] { b.build(base.step.step()); }, {"1 block tables given", "num_groups = 2"},
               "build() on two groups");
  snap.expect_unchanged("wrong table count");
  // A bad table in one group rejects the whole step.
  std::vector<BlockTable> bad = two;
  bad[1].data = nullptr;
  expect_error([&] { b.build_groups(base.step.step(), bad); }, {"block_table of group 1 is null"},
               "null table of group 1");
  snap.expect_unchanged("null table of group 1");
}

}  // namespace
}  // namespace linmeta
