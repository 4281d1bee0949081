// Input validation (SPEC §1, §2): every rejected step or configuration throws
// linmeta::Error naming the field (and the row / values where there are some),
// and a rejected build writes nothing: the metadata of the last good build keeps
// its exact JSON, and the builder still builds afterwards.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "case_file.hpp"
#include "host_step.hpp"

namespace linmeta {
namespace {

using cases::json;
using testing::HostStep;

/// A builder's configuration plus the valid step built before the bad one.
struct Base {
  std::string name;
  BuilderKind kind = BuilderKind::Gdn;
  Config config;
  HostStep step;
  int32_t groups = 1;
};

Config gdn_config() {
  Config c;
  c.num_spec = 2;
  c.num_speculative_blocks = 2;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 1024;
  c.full_cuda_graph = true;
  c.block_size = 16;
  return c;
}

Config kda_config() {
  Config c = gdn_config();
  c.full_cuda_graph = false;
  c.chunk_metadata = false;
  c.use_recoverssm = true;
  c.num_speculative_blocks = 0;
  c.mamba_cache_mode = CacheMode::Align;
  c.num_prefill_checkpoint_blocks = 1;
  return c;
}

/// GDN, last build staged into the FULL-graph buffers.
Base gdn_staged() {
  HostStep s;
  s.lens({3, 3, 0, 0}).seq({30, 40, 0, 0}).prefilling({0, 0, 0, 0}).draft_counts({2, 2, -1, -1});
  s.accepted_counts({1, 2, 1, 1}).tokens(8).iota_table(4);
  return {"gdn staged pure spec", BuilderKind::Gdn, gdn_config(), s};
}

/// GDN, last build an eager mixed step (spec + prefill: every GDN array present).
Base gdn_mixed() {
  HostStep s;
  s.lens({3, 3, 5, 0}).seq({30, 40, 5, 0}).prefilling({0, 0, 1, 0}).draft_counts({2, 2, -1, -1});
  s.accepted_counts({1, 2, 1, 1}).iota_table(4);
  return {"gdn mixed", BuilderKind::Gdn, gdn_config(), s};
}

/// GDN, last build a staged decode step (no drafts).
Base gdn_decode() {
  HostStep s;
  s.lens({1, 1, 1, 0}).seq({30, 40, 5, 0}).prefilling({0, 0, 0, 0}).iota_table(4);
  return {"gdn staged decode", BuilderKind::Gdn, gdn_config(), s};
}

/// KDA RecoverSSM, align mode, checkpoints: commit, request indices and checkpoint present.
Base kda_mixed() {
  HostStep s;
  s.lens({3, 1, 34, 0}).seq({30, 40, 50, 0}).prefilling({0, 0, 1, 0}).draft_counts({2, -1, -1, -1});
  s.accepted_counts({2, 1, 1, 1}).iota_table(5);
  return {"kda recoverssm mixed", BuilderKind::Kda, kda_config(), s};
}

std::vector<Base> all_bases() { return {gdn_staged(), gdn_mixed(), gdn_decode(), kda_mixed()}; }
std::vector<Base> spec_bases() { return {gdn_staged(), gdn_mixed(), kda_mixed()}; }

using MakeBad = std::function<Step(HostStep&)>;
using Call = std::function<void(MetadataBuilder&, const Step&)>;

void plain_build(MetadataBuilder& b, const Step& s) { b.build(s); }

/// Runs `call` and checks it throws linmeta::Error whose message holds every needle.
void expect_error(const std::function<void()>& call, const std::vector<std::string>& needles,
                  const std::string& where) {
  try {
    call();
    ADD_FAILURE() << where << ": no linmeta::Error thrown";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const auto& n : needles)
      EXPECT_NE(what.find(n), std::string::npos)
          << where << ": message \"" << what << "\" lacks \"" << n << "\"";
  } catch (const std::exception& e) {
    ADD_FAILURE() << where << ": not a linmeta::Error: " << e.what();
  }
}

/// Snapshots of builder-owned metadata, to prove a failed call wrote nothing.
class Snapshot {
 public:
  Snapshot(std::span<const Metadata> ms, BuilderKind kind)
      : kind_(kind), ms_(ms.begin(), ms.end()) {
    for (const auto& m : ms_) json_.push_back(cases::to_json(m, kind_));
  }
  void expect_unchanged(const std::string& where) const {
    for (size_t g = 0; g < ms_.size(); ++g)
      EXPECT_EQ(cases::to_json(ms_[g], kind_), json_[g]) << where << ": group " << g << " changed";
  }
  [[nodiscard]] const json& at(size_t g) const { return json_[g]; }

 private:
  BuilderKind kind_;
  std::vector<Metadata> ms_;
  std::vector<json> json_;
};

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

void add_tokens_from(HostStep& s, int32_t row, int32_t extra) {
  for (size_t i = static_cast<size_t>(row) + 1; i < s.qsl.size(); ++i) s.qsl[i] += extra;
}

// ---- query_start_loc / token counts / rows ------------------------------------

TEST(Validation, QueryStartLocMustStartAtZero) {
  for (const Base& base : all_bases())
    expect_rejected(base,
                    [](HostStep& s) {
                      for (auto& x : s.qsl) x += 1;
                      return s.step();
                    },
                    {"query_start_loc_cpu[0] = 1", "must be 0"});
}

TEST(Validation, QueryStartLocMustNotDecrease) {
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

TEST(Validation, QueryStartLocNeedsNumReqsPlusOneEntries) {
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

TEST(Validation, NumActualTokensBelowTheQueryTotal) {
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

TEST(Validation, NumActualTokensAboveMaxNumBatchedTokens) {
  for (const Base& base : all_bases())
    expect_rejected(base,
                    [](HostStep& s) {
                      s.tokens(1025);
                      return s.step();
                    },
                    {"num_actual_tokens = 1025", "max_num_batched_tokens = 1024"});
}

TEST(Validation, NumReqsAboveMaxNumSeqs) {
  for (const Base& base : all_bases())
    expect_rejected(base,
                    [](HostStep& s) {
                      s.pad_to(9);
                      return s.step();
                    },
                    {"num_reqs = 9", "max_num_seqs = 8"});
}

TEST(Validation, NumReqsBelowOne) {
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

TEST(Validation, DraftCountBelowMinusOne) {
  for (const Base& base : spec_bases())
    expect_rejected(base,
                    [](HostStep& s) {
                      s.drafts[2] = -2;
                      return s.step();
                    },
                    {"num_decode_draft_tokens[2] = -2", "below -1"});
}

TEST(Validation, NegativeSeqLensUpperBound) {
  for (const Base& base : all_bases())
    expect_rejected(base,
                    [](HostStep& s) {
                      s.seq_ub[1] = -3;
                      return s.step();
                    },
                    {"seq_lens_cpu_upper_bound[1] = -3", "negative"});
}

TEST(Validation, GdnSpecRowLongerThanNumSpecPlusOne) {
  for (const Base& base : {gdn_staged(), gdn_mixed()})
    expect_rejected(base,
                    [](HostStep& s) {
                      add_tokens_from(s, 1, 1);  // row 1: 4 tokens, 2 drafts
                      return s.step();
                    },
                    {"spec-decode row 1", "query length 4", "num_spec + 1 = 3"});
}

TEST(Validation, KdaRecoverSsmActivationCapacity) {
  // Row 1 is a draftless, non-prefilling row: RecoverSSM makes it a spec row.
  expect_rejected(
      kda_mixed(),
      [](HostStep& s) {
        add_tokens_from(s, 1, 4);  // 5 tokens
        return s.step();
      },
      {"RecoverSSM", "activation capacity", "row 1", "query length 5", "num_spec + 1 = 3"});
}

TEST(Validation, KdaRecoverSsmNeedsIsPrefilling) {
  expect_rejected(kda_mixed(),
                  [](HostStep& s) {
                    s.is_prefilling.clear();
                    return s.step();
                  },
                  {"is_prefilling is required"});
}

TEST(Validation, KdaSpecStepWithNonSpecRowsNeedsIsPrefilling) {
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

TEST(Validation, BlockTableTooNarrowForTheAlignedGather) {
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

TEST(Validation, BlockTableTooNarrowForTheStagedSpecState) {
  expect_rejected(
      gdn_staged(),
      [](HostStep& s) {
        s.iota_table(2);  // a staged spec row takes num_spec + 1 = 3 columns
        return s.step();
      },
      {"block_table of group 0 is too narrow", "3 columns", "staged spec state", "width = 2"});
}

TEST(Validation, BlockTableBadWidthOrStride) {
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

// ---- null device pointers ---------------------------------------------------------

TEST(Validation, NullSeqLens) {
  for (const Base& base : all_bases())
    expect_rejected(base,
                    [](HostStep& s) {
                      Step st = s.step();
                      st.seq_lens = nullptr;
                      return st;
                    },
                    {"seq_lens", "null"});
}

TEST(Validation, NullBlockTable) {
  for (const Base& base : all_bases())
    expect_rejected(base,
                    [](HostStep& s) {
                      Step st = s.step();
                      st.block_table.data = nullptr;
                      return st;
                    },
                    {"block_table of group 0 is null"});
}

TEST(Validation, NullNumAcceptedTokensOnASpecStep) {
  // Not KDA RecoverSSM: its accepted counts are all ones, never read (hardening_test).
  for (const Base& base : {gdn_staged(), gdn_mixed()})
    expect_rejected(base,
                    [](HostStep& s) {
                      s.has_accepted = false;
                      return s.step();
                    },
                    {"num_accepted_tokens", "null"});
}

// ---- sizes that disagree ----------------------------------------------------------

TEST(Validation, SeqLensUpperBoundSize) {
  for (const Base& base : all_bases())
    expect_rejected(base,
                    [](HostStep& s) {
                      s.seq_ub.pop_back();
                      return s.step();
                    },
                    {"seq_lens_cpu_upper_bound has 3 entries", "num_reqs = 4"});
}

TEST(Validation, IsPrefillingSize) {
  for (const Base& base : all_bases())
    expect_rejected(base,
                    [](HostStep& s) {
                      s.is_prefilling.push_back(0);
                      return s.step();
                    },
                    {"is_prefilling has 5 entries", "num_reqs = 4"});
}

TEST(Validation, DraftsSize) {
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

TEST(Validation, CaptureAboveDecodeCudagraphMaxBs) {
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

TEST(Validation, WrongNumberOfTablesForBuildGroups) {
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

// ---- update_block_table ---------------------------------------------------------------

TEST(Validation, UpdateBlockTableRejections) {
  for (const Base& base : all_bases()) {
    SCOPED_TRACE(base.name);
    MetadataBuilder b(base.kind, base.config, testing::host_options());
    expect_error([&] { b.update_block_table(Metadata{}, base.step.block_table()); },
                 {"update_block_table before any build"}, "before build");
    const Metadata good = b.build(base.step.step());
    const Snapshot snap({&good, 1}, base.kind);
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

TEST(Validation, UpdateBlockTableAfterARejectedBuildStillUsesTheLastGoodStep) {
  for (const Base& base : all_bases()) {
    SCOPED_TRACE(base.name);
    MetadataBuilder b(base.kind, base.config, testing::host_options());
    MetadataBuilder ref(base.kind, base.config, testing::host_options());
    const Metadata good = b.build(base.step.step());
    HostStep early = base.step;  // rejected before planning starts
    early.tokens(1025);
    EXPECT_THROW(b.build(early.step()), Error);
    if (base.step.has_drafts) {
      HostStep late = base.step;  // rejected halfway through planning
      add_tokens_from(late, 1, base.kind == BuilderKind::Kda ? 4 : 1);
      EXPECT_THROW(b.build(late.step()), Error);
    }
    HostStep other = base.step;
    other.iota_table(other.width, 8, 5000);
    const Metadata updated = b.update_block_table(good, other.block_table());
    EXPECT_EQ(cases::to_json(updated, base.kind),
              cases::to_json(ref.build(other.step()), base.kind));
  }
}

// ---- configuration ------------------------------------------------------------------

void expect_bad_config(const Config& c, BuilderKind kind, const std::vector<std::string>& needles) {
  expect_error([&] { validate_config(c, kind); }, needles, "validate_config");
  expect_error([&] { MetadataBuilder b(kind, c, testing::host_options()); }, needles,
               "constructor");
}

TEST(Validation, InvalidConfigs) {
  const Config good = gdn_config();
  EXPECT_NO_THROW(validate_config(good, BuilderKind::Gdn));
  EXPECT_NO_THROW(validate_config(kda_config(), BuilderKind::Kda));
  auto with = [&](auto edit) {
    Config c = good;
    edit(c);
    return c;
  };
  expect_bad_config(with([](Config& c) { c.max_num_seqs = 0; }), BuilderKind::Gdn,
                    {"config.max_num_seqs = 0"});
  expect_bad_config(with([](Config& c) { c.max_num_batched_tokens = -1; }), BuilderKind::Gdn,
                    {"config.max_num_batched_tokens = -1"});
  expect_bad_config(with([](Config& c) { c.block_size = 0; }), BuilderKind::Kda,
                    {"config.block_size = 0"});
  expect_bad_config(with([](Config& c) { c.num_spec = -1; }), BuilderKind::Gdn,
                    {"config.num_spec = -1"});
  expect_bad_config(with([](Config& c) { c.num_speculative_blocks = -1; }), BuilderKind::Gdn,
                    {"config.num_speculative_blocks = -1"});
  expect_bad_config(with([](Config& c) { c.num_prefill_checkpoint_blocks = -1; }), BuilderKind::Kda,
                    {"config.num_prefill_checkpoint_blocks = -1"});
  expect_bad_config(with([](Config& c) { c.use_recoverssm = true; }), BuilderKind::Gdn,
                    {"config.use_recoverssm"});
  expect_bad_config(with([](Config& c) {
                      c.mamba_cache_mode = CacheMode::Align;
                      c.num_speculative_blocks = 1;
                    }),
                    BuilderKind::Gdn, {"config.num_speculative_blocks = 1", "num_spec + 1"});
}

TEST(Validation, EnumsOutsideTheirEnumerators) {
  for (const int32_t v : {-1, 2, 77}) {
    Config c = gdn_config();
    c.profile = static_cast<Profile>(v);
    expect_bad_config(c, BuilderKind::Gdn, {"config.profile = " + std::to_string(v)});
  }
  for (const int32_t v : {-1, 3, 77}) {
    Config c = kda_config();
    c.prefill_backend = static_cast<PrefillBackend>(v);
    expect_bad_config(c, BuilderKind::Kda, {"config.prefill_backend = " + std::to_string(v)});
  }
}

TEST(Validation, InvalidGroupCounts) {
  for (int32_t groups : {0, -1, kMaxNumGroups + 1, 1 << 20, INT32_MAX})
    expect_error(
        [&] { MetadataBuilder b(BuilderKind::Gdn, gdn_config(), testing::host_options(groups)); },
        {"options.num_groups = " + std::to_string(groups), "kMaxNumGroups = 64"}, "num_groups");
  EXPECT_NO_THROW(
      MetadataBuilder(BuilderKind::Gdn, gdn_config(), testing::host_options(kMaxNumGroups)));
}

}  // namespace
}  // namespace linmeta
