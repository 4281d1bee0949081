// The output buffers' layout (SPEC §7 D, E; src/buffer_layout.hpp): FULL-graph views point
// at the same memory every step (captured graphs read them), and each KV-cache group's
// buffers are its own (no group-level array overlaps another group's arrays, and updating
// one group leaves the others alone).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "case_file.hpp"
#include "common/test_seed.hpp"
#include "host_step.hpp"

namespace linmeta {
namespace {

using testing::HostStep;

Config graph_config(BuilderKind kind, int32_t num_spec, bool recoverssm = false) {
  Config c;
  c.num_spec = num_spec;
  c.num_speculative_blocks = recoverssm ? 0 : num_spec;
  c.max_num_seqs = 16;
  c.max_num_batched_tokens = 2048;
  c.full_cuda_graph = true;
  c.block_size = 16;
  c.chunk_metadata = kind == BuilderKind::Gdn;
  c.use_recoverssm = recoverssm;
  return c;
}

/// A pure spec-decode step: `n` spec rows (ql 1..k+1, row 0 carrying k drafts)
/// followed by `pads` zero-length rows.
HostStep spec_step(std::mt19937& rng, int32_t k, int32_t n, int32_t pads, int32_t base) {
  HostStep s;
  for (int32_t r = 0; r < n + pads; ++r) {
    const int32_t q = r >= n   ? 0
                      : r == 0 ? k + 1
                               : std::uniform_int_distribution<int32_t>(1, k + 1)(rng);
    s.qsl.push_back(s.qsl.back() + q);
    s.seq_lens.push_back(r >= n ? 0 : 100 + 7 * r);
    s.is_prefilling.push_back(0);
    s.drafts.push_back(r >= n ? -1 : q - 1);
    s.accepted.push_back(r >= n ? 1 : std::uniform_int_distribution<int32_t>(1, q)(rng));
  }
  s.seq_ub = s.seq_lens;
  s.has_drafts = s.has_accepted = true;
  return s.iota_table(k + 2, k + 3, base);
}

/// A decode-only step: `n` one-token rows and `pads` zero-length rows.
HostStep decode_step(int32_t n, int32_t pads, int32_t base) {
  HostStep s;
  for (int32_t r = 0; r < n + pads; ++r) {
    s.qsl.push_back(s.qsl.back() + (r < n ? 1 : 0));
    s.seq_lens.push_back(r < n ? 50 + r : 0);
    s.is_prefilling.push_back(0);
  }
  s.seq_ub = s.seq_lens;
  return s.iota_table(3, 3, base);
}

/// A step with prefills (eager arrays), between the graph steps.
HostStep mixed_step(int32_t k, int32_t base) {
  HostStep s;
  s.lens({k + 1, 1, 70, 0}).seq({40, 41, 90, 0}).prefilling({0, 0, 1, 0});
  s.draft_counts({k, -1, -1, -1}).accepted_counts({1, 1, 1, 1});
  return s.iota_table(k + 2, k + 3, base);
}

/// Same values as a build on a fresh builder (no stale data in the views).
void expect_fresh_values(BuilderKind kind, const Config& c, const HostStep& s, const Metadata& m) {
  MetadataBuilder fresh(kind, c, testing::host_options());
  EXPECT_EQ(cases::to_json(m, kind), cases::to_json(fresh.build(s.step()), kind));
}

TEST(StableAddresses, GdnStagedSpecViewsKeepTheirAddresses) {
  const Config c = graph_config(BuilderKind::Gdn, 2);
  GdnMetadataBuilder b(c, testing::host_options());
  const uint32_t seed = testing::test_seed(1);
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937 rng(seed);
  const void* state = nullptr;
  const void* masks = nullptr;
  const void* qsl = nullptr;
  const void* accepted = nullptr;
  const void* spec_tok = nullptr;
  int32_t step = 0;
  for (const auto& [n, pads] : std::vector<std::pair<int32_t, int32_t>>{
           {1, 0}, {5, 2}, {16, 0}, {3, 9}, {8, 8}, {2, 0}, {11, 1}}) {
    SCOPED_TRACE("batch " + std::to_string(n) + " + " + std::to_string(pads) + " padding rows");
    if (step++ % 2 == 1) b.build(mixed_step(2, 9000).step());  // eager steps in between
    const HostStep s = spec_step(rng, 2, n, pads, 1000 * step);
    const Metadata& m = b.build(s.step());
    ASSERT_EQ(m.num_spec_decodes, n);
    ASSERT_EQ(m.spec_state_indices_tensor.rows, n + pads);
    if (state == nullptr) {
      state = m.spec_state_indices_tensor.data;
      masks = m.spec_sequence_masks.data;
      qsl = m.spec_query_start_loc.data;
      accepted = m.num_accepted_tokens.data;
      spec_tok = m.spec_token_indx.data;
    }
    EXPECT_EQ(m.spec_state_indices_tensor.data, state);
    EXPECT_EQ(m.spec_sequence_masks.data, masks);
    EXPECT_EQ(m.spec_query_start_loc.data, qsl);
    EXPECT_EQ(m.num_accepted_tokens.data, accepted);
    EXPECT_EQ(m.spec_token_indx.data, spec_tok);
    expect_fresh_values(BuilderKind::Gdn, c, s, m);
  }
}

// The FULL-graph staged step of the same batch shape gives equal metadata across builds
// (the same counts and views; only the step id differs); another shape, or another mode's
// views, does not.
TEST(StableAddresses, StagedStepsOfOneShapeHaveEqualMetadata) {
  const Config c = graph_config(BuilderKind::Gdn, 2);
  GdnMetadataBuilder b(c, testing::host_options());
  const uint32_t seed = testing::test_seed(3);
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937 rng(seed), same(seed);
  const HostStep first = spec_step(rng, 2, 5, 2, 1000);
  const Metadata m1 = b.build(first.step());
  b.build(mixed_step(2, 9000).step());
  const HostStep second = spec_step(same, 2, 5, 2, 2000);  // same lengths, other table
  const Metadata m2 = b.build(second.step());
  EXPECT_NE(m1.step_id, m2.step_id);
  EXPECT_FALSE(m1 == m2);
  Metadata m1_as_m2 = m1;
  m1_as_m2.step_id = m2.step_id;
  EXPECT_TRUE(m1_as_m2 == m2);
  const Metadata m3 = b.build(spec_step(rng, 2, 6, 1, 3000).step());
  EXPECT_FALSE(m3 == m2);  // other spec rows
  const Metadata m4 = b.build(mixed_step(2, 9000).step());
  EXPECT_FALSE(m4 == m2);  // eager: prefill views and counts
}

TEST(StableAddresses, GdnStagedDecodeViewsKeepTheirAddresses) {
  const Config c = graph_config(BuilderKind::Gdn, 0);
  GdnMetadataBuilder b(c, testing::host_options());
  const void* state = nullptr;
  const void* qsl = nullptr;
  int32_t step = 0;
  for (const auto& [n, pads] :
       std::vector<std::pair<int32_t, int32_t>>{{1, 0}, {7, 3}, {16, 0}, {2, 14}, {4, 0}}) {
    SCOPED_TRACE("batch " + std::to_string(n));
    if (step++ % 2 == 1) {
      HostStep prefill;
      prefill.lens({1, 30, 0}).seq({9, 30, 0}).iota_table(3, 3, 7000);
      b.build(prefill.step());
    }
    const HostStep s = decode_step(n, pads, 1000 * step);
    const Metadata& m = b.build(s.step());
    ASSERT_EQ(m.num_prefills, 0);
    if (state == nullptr) {
      state = m.non_spec_state_indices_tensor.data;
      qsl = m.non_spec_query_start_loc.data;
    }
    EXPECT_EQ(m.non_spec_state_indices_tensor.data, state);
    EXPECT_EQ(m.non_spec_query_start_loc.data, qsl);
    expect_fresh_values(BuilderKind::Gdn, c, s, m);
  }
}

TEST(StableAddresses, KdaStagedViewsKeepTheirAddresses) {
  for (bool recoverssm : {false, true}) {
    SCOPED_TRACE(recoverssm ? "recoverssm" : "native spec");
    const Config c = graph_config(BuilderKind::Kda, 3, recoverssm);
    KdaMetadataBuilder b(c, testing::host_options());
    const uint32_t seed = testing::test_seed(2);
    SCOPED_TRACE(testing::seed_note(seed));
    std::mt19937 rng(seed);
    const void* state = nullptr;
    const void* qsl = nullptr;
    const void* accepted = nullptr;
    const void* decode_state = nullptr;
    int32_t step = 0;
    for (const auto& [n, pads] :
         std::vector<std::pair<int32_t, int32_t>>{{1, 0}, {6, 2}, {16, 0}, {3, 5}}) {
      ++step;
      b.build(mixed_step(3, 9000).step());
      const HostStep s = spec_step(rng, 3, n, pads, 1000 * step);
      const Metadata& m = b.build(s.step());
      ASSERT_EQ(m.num_spec_decodes, n);
      ASSERT_EQ(m.spec_state_indices_tensor.rows, n + pads);  // staged: [:B]
      if (state == nullptr) {
        state = m.spec_state_indices_tensor.data;
        qsl = m.spec_query_start_loc.data;
        accepted = m.num_accepted_tokens.data;
      }
      EXPECT_EQ(m.spec_state_indices_tensor.data, state);
      EXPECT_EQ(m.spec_query_start_loc.data, qsl);
      EXPECT_EQ(m.num_accepted_tokens.data, accepted);
      expect_fresh_values(BuilderKind::Kda, c, s, m);
      if (recoverssm) continue;  // RecoverSSM turns decode rows into spec rows
      const HostStep d = decode_step(n, pads, 1000 * step + 500);
      const Metadata& md = b.build(d.step());
      ASSERT_EQ(md.num_spec_decodes, 0);
      if (decode_state == nullptr) decode_state = md.non_spec_state_indices_tensor.data;
      EXPECT_EQ(md.non_spec_state_indices_tensor.data, decode_state);
      expect_fresh_values(BuilderKind::Kda, c, d, md);
    }
  }
}

// ---- groups own their buffers ------------------------------------------------------

struct Range {
  std::string name;
  const char* begin;
  const char* end;
  bool group_level;
};

void add(std::vector<Range>& out, const std::string& name, const Array& a, bool group_level) {
  if (!a.present || a.size() == 0) return;
  const auto* p = static_cast<const char*>(a.data);
  out.push_back({name, p, p + a.bytes(), group_level});
}

/// Every array of `m`; group-level: the block-table gathers, and every view of a
/// FULL-graph buffer when the step was staged (KDA's decode staging stages only
/// the state indices: its non_spec_query_start_loc stays batch-level).
std::vector<Range> ranges(const Metadata& m, bool staged, BuilderKind kind) {
  std::vector<Range> r;
  for_each_array(m, kind, [&](const OutputSpec& spec, const Array& a) {
    if (spec.host_memory() || spec.caller_memory()) return;  // not the builder's buffers
    bool group_level = spec.scope == Scope::Group;
    if (staged && spec.staged != Cap::None)
      group_level = !(kind == BuilderKind::Kda && spec.id == Out::NonSpecQueryStartLoc);
    add(r, spec.name, a, group_level);
  });
  return r;
}

/// No group-level array of one group overlaps any array of another group.
void expect_groups_disjoint(std::span<const Metadata> ms, bool staged, BuilderKind kind,
                            const std::string& what) {
  std::vector<std::vector<Range>> per_group;
  for (const auto& m : ms) per_group.push_back(ranges(m, staged, kind));
  ASSERT_FALSE(per_group[0].empty());
  for (size_t g = 0; g < ms.size(); ++g)
    for (size_t h = 0; h < ms.size(); ++h) {
      if (g == h) continue;
      for (const Range& a : per_group[g]) {
        if (!a.group_level) continue;
        for (const Range& b : per_group[h])
          EXPECT_FALSE(a.begin < b.end && b.begin < a.end)
              << what << ": group " << g << " " << a.name << " overlaps group " << h << " "
              << b.name;
      }
    }
}

std::vector<HostStep> tables_for(const HostStep& s, int32_t groups) {
  std::vector<HostStep> out;
  for (int32_t g = 0; g < groups; ++g) {
    HostStep t = s;
    t.iota_table(s.width, s.stride, 10000 * (g + 1));
    out.push_back(t);
  }
  return out;
}

std::vector<BlockTable> views(const std::vector<HostStep>& ts) {
  std::vector<BlockTable> out;
  for (const auto& t : ts) out.push_back(t.block_table());
  return out;
}

TEST(GroupBuffers, AreDisjoint) {
  constexpr int32_t G = 4;
  const uint32_t seed = testing::test_seed(3);
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937 rng(seed);
  for (BuilderKind kind : {BuilderKind::Gdn, BuilderKind::Kda}) {
    SCOPED_TRACE(kind == BuilderKind::Gdn ? "gdn" : "kda");
    Config c = graph_config(kind, 2);
    c.mamba_cache_mode = CacheMode::Align;
    c.num_prefill_checkpoint_blocks = kind == BuilderKind::Kda ? 1 : 0;
    MetadataBuilder b(kind, c, testing::host_options(G));
    struct Named {
      std::string name;
      HostStep step;
      bool staged;
    };
    HostStep ckpt;  // a prefill with a checkpoint tail (seq 50, q 34 -> offset 32)
    ckpt.lens({3, 34, 0}).seq({40, 50, 0}).prefilling({0, 1, 0}).draft_counts({2, -1, -1});
    ckpt.accepted_counts({1, 1, 1}).iota_table(8, 8);
    for (const Named& n :
         {Named{"staged spec", spec_step(rng, 2, 6, 2, 100), true},
          Named{"staged decode", decode_step(5, 3, 100), true},
          Named{"mixed", mixed_step(2, 100), false}, Named{"checkpoint", ckpt, false}}) {
      HostStep s = n.step;
      s.iota_table(16, 16);  // wide enough for the aligned gather
      const auto ts = tables_for(s, G);
      const auto ms = b.build_groups(s.step(), views(ts));
      if (n.name == "checkpoint" && kind == BuilderKind::Kda) {
        ASSERT_TRUE(ms[0].checkpoint.has_value());
      }
      expect_groups_disjoint(ms, n.staged, kind, n.name);
    }
  }
}

TEST(GroupBuffers, UpdatingOneGroupLeavesTheOthersAlone) {
  constexpr int32_t G = 3;
  const uint32_t seed = testing::test_seed(4);
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937 rng(seed);
  for (BuilderKind kind : {BuilderKind::Gdn, BuilderKind::Kda}) {
    SCOPED_TRACE(kind == BuilderKind::Gdn ? "gdn" : "kda");
    const Config c = graph_config(kind, 2);
    MetadataBuilder b(kind, c, testing::host_options(G));
    for (const HostStep& s :
         {spec_step(rng, 2, 4, 1, 100), decode_step(3, 1, 100), mixed_step(2, 100)}) {
      const auto ts = tables_for(s, G);
      const auto ms = b.build_groups(s.step(), views(ts));
      std::vector<cases::json> before;
      for (const auto& m : ms) before.push_back(cases::to_json(m, kind));
      HostStep other = s;
      other.iota_table(s.width, s.stride, 777000);
      const Metadata u = b.update_block_table(ms[0], other.block_table(), 1);
      EXPECT_EQ(cases::to_json(ms[0], kind), before[0]);
      EXPECT_EQ(cases::to_json(ms[2], kind), before[2]);
      MetadataBuilder ref(kind, c, testing::host_options());
      EXPECT_EQ(cases::to_json(u, kind), cases::to_json(ref.build(other.step()), kind));
    }
  }
}

}  // namespace
}  // namespace linmeta
