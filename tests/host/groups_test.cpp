// Several KV-cache groups (SPEC §7 E), on random steps and random configs:
// * build_groups on one G-group builder equals G independent single-group builds
//   of the same step, one per table, field for field;
// * update_block_table(metadata of group 0, table g, group h) re-gathers exactly the
//   state indices an independent build with table g gives, keeps every other field
//   of group 0's metadata, and leaves group 0's buffers alone when h != 0.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "case_file.hpp"
#include "common/test_seed.hpp"
#include "host_step.hpp"
#include "random_step.hpp"

namespace linmeta {
namespace {

using cases::json;
using testing::RandomStep;
using testing::RandomStepOptions;

/// The first few differing fields, for a readable failure.
std::string diff(const json& expected, const json& got) {
  std::string out;
  int shown = 0;
  for (const auto& m : cases::compare(expected, got)) {
    if (shown++ == 3) break;
    out += "\n  " + m.field + ": expected " + m.expected.substr(0, 300) + "\n  " +
           std::string(m.field.size(), ' ') + "  got      " + m.got.substr(0, 300);
  }
  return out;
}

/// Group 0's JSON with the state-index fields of `table_build` (SPEC §7 E: the
/// block-table gathers are the only per-group fields).
json with_state_of(json base, const json& table_build) {
  for (const char* key :
       {"spec_state_indices_tensor", "non_spec_state_indices_tensor", "prefill_state_indices"})
    base[key] = table_build[key];
  for (const char* parent : {"recoverssm_commit", "checkpoint"})
    if (base.contains(parent) && !base[parent].is_null())
      base[parent]["state_indices"] = table_build[parent]["state_indices"];
  return base;
}

struct Builders {
  std::unique_ptr<MetadataBuilder> multi, single;
  int32_t max_tokens = -1;
};

class Groups : public ::testing::TestWithParam<std::tuple<BuilderKind, int32_t>> {};

/// Steps per (kind, G): a few thousand in all, fewer where G makes each one costly.
int32_t steps_for(int32_t groups) {
  switch (groups) {
    case 1:
      return 1000;
    case 2:
      return 500;
    case 4:
      return 300;
    case 16:
      return 100;
    default:
      return 40;
  }
}

TEST_P(Groups, MultiGroupBuildEqualsIndependentBuildsAndUpdateBlockTableRegathers) {
  const auto [kind, G] = GetParam();
  const int32_t num_steps = steps_for(G);
  constexpr int32_t kStepsPerConfig = 10;
  const uint32_t seed =
      testing::test_seed(static_cast<uint32_t>(1000 * G + (kind == BuilderKind::Kda ? 7 : 0)));
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937 rng(seed);
  const RandomStepOptions options{kind, G, 3000, true};
  int32_t checked_updates = 0;
  Config config;
  Builders b;
  for (int32_t step = 0; step < num_steps; ++step) {
    if (step % kStepsPerConfig == 0) {
      config = testing::random_config(rng, kind);
      b = Builders{};
    }
    const RandomStep r = testing::random_step(rng, config, options);
    if (b.max_tokens != r.config.max_num_batched_tokens) {  // random_step may raise it
      b.multi = std::make_unique<MetadataBuilder>(kind, r.config, testing::host_options(G));
      b.single = std::make_unique<MetadataBuilder>(kind, r.config, testing::host_options(1));
      b.max_tokens = r.config.max_num_batched_tokens;
    }
    const std::string where = "step " + std::to_string(step) + (r.capture ? " (capture)" : "") +
                              ", num_reqs " + std::to_string(r.num_reqs);
    const Step s = r.host_step();
    const std::vector<BlockTable> tables = r.host_tables();

    const auto ms = r.capture ? b.multi->build_groups_for_cudagraph_capture(s, tables)
                              : b.multi->build_groups(s, tables);
    ASSERT_EQ(ms.size(), static_cast<size_t>(G));
    std::vector<json> got, independent;
    for (const auto& m : ms) got.push_back(cases::to_json(m, kind));
    for (int32_t g = 0; g < G; ++g) {
      Step sg = s;
      sg.block_table = tables[static_cast<size_t>(g)];
      const Metadata& m =
          r.capture ? b.single->build_for_cudagraph_capture(sg) : b.single->build(sg);
      independent.push_back(cases::to_json(m, kind));
      ASSERT_EQ(got[static_cast<size_t>(g)], independent.back())
          << where << ", group " << g << " of " << G
          << diff(independent.back(), got[static_cast<size_t>(g)]);
    }

    // update_block_table: table g into group h, from group 0's metadata.
    const auto g = testing::uniform(rng, 0, G - 1);
    const auto h = testing::uniform(rng, 0, G - 1);
    const Metadata u = b.multi->update_block_table(ms[0], tables[static_cast<size_t>(g)], h);
    const json expected = with_state_of(got[0], independent[static_cast<size_t>(g)]);
    const json updated = cases::to_json(u, kind);
    ASSERT_EQ(updated, expected) << where << ", table " << g << " into group " << h
                                 << diff(expected, updated);
    for (int32_t k = 0; k < G; ++k) {  // every other group's buffers are untouched
      if (k == h) continue;
      ASSERT_EQ(cases::to_json(ms[static_cast<size_t>(k)], kind), got[static_cast<size_t>(k)])
          << where << ": updating group " << h << " changed group " << k;
    }
    ++checked_updates;
  }
  EXPECT_EQ(checked_updates, num_steps);
}

std::string param_name(const ::testing::TestParamInfo<std::tuple<BuilderKind, int32_t>>& info) {
  return std::string(std::get<0>(info.param) == BuilderKind::Gdn ? "Gdn" : "Kda") + "_G" +
         std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Random, Groups,
                         ::testing::Combine(::testing::Values(BuilderKind::Gdn, BuilderKind::Kda),
                                            ::testing::Values(1, 2, 4, 16, 48)),
                         param_name);

}  // namespace
}  // namespace linmeta
