// Builder-owned memory on the cuda target: no device allocation after warm-up, and
// FULL-graph outputs at the same addresses every step, distinct for every group.
#include <set>
#include <tuple>

#include "gpu_support.hpp"

namespace linmeta::gputest {
namespace {

using linmeta::testing::coin;
using linmeta::testing::random_config;
using linmeta::testing::random_step;
using linmeta::testing::RandomStepOptions;

// ---- (d) device memory unchanged over many builds ---------------------------------------

class DeviceMemoryGpu : public GpuParamTest<BuilderKind> {};

TEST_P(DeviceMemoryGpu, ThousandBuildsAllocateNothing) {
  const BuilderKind kind = GetParam();
  constexpr int32_t G = 4;
  constexpr int kDistinct = 40;
  constexpr int kBuilds = 1000;
  const uint32_t seed = testing::test_seed(kind == BuilderKind::Gdn ? 0xd00du : 0xd11du);
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937 rng(seed);
  Config cfg = random_config(rng, kind);
  cfg.num_spec = 2;
  cfg.full_cuda_graph = true;
  cfg.max_num_seqs = 64;
  cfg.mamba_cache_mode = CacheMode::Align;
  cfg.use_recoverssm = false;
  cfg.num_speculative_blocks = 2;
  cfg.max_num_batched_tokens =
      std::max(cfg.max_num_batched_tokens, cfg.max_num_seqs * (cfg.num_spec + 1) + 16);
  RandomStepOptions o;
  o.kind = kind;
  o.num_groups = G;
  std::vector<RandomStep> steps;
  for (int i = 0; i < kDistinct; ++i) steps.push_back(random_step(rng, cfg, o));
  std::vector<DeviceStep> dev(kDistinct);
  for (int i = 0; i < kDistinct; ++i)
    dev[static_cast<size_t>(i)].upload(steps[static_cast<size_t>(i)]);
  // Replacement tables for update_block_table (same width and stride as each step).
  std::vector<DeviceStep> other(kDistinct);
  for (int i = 0; i < kDistinct; ++i) {
    RandomStep r = steps[static_cast<size_t>(i)];
    for (auto& t : r.tables)
      for (auto& x : t) x = x == -7 ? -7 : x + 1;
    other[static_cast<size_t>(i)].upload(r);
  }

  BuilderOptions co;
  co.target = Target::Cuda;
  co.num_groups = G;
  MetadataBuilder cuda(kind, cfg, co);
  StreamHandle stream;
  auto run = [&](int i) {
    const auto u = static_cast<size_t>(i % kDistinct);
    const auto ms = build_step(cuda, steps[u], dev[u].step, dev[u].tables, false, stream.get());
    if (i % 7 == 0) cuda.update_block_table(ms[1], other[u].tables[1], 1, stream.get());
  };
  expect_no_allocation(cuda, stream, 2 * kDistinct, kBuilds, run);
}

INSTANTIATE_TEST_SUITE_P(Persistent, DeviceMemoryGpu,
                         ::testing::Values(BuilderKind::Gdn, BuilderKind::Kda),
                         [](const ::testing::TestParamInfo<BuilderKind>& i) {
                           return std::string(kind_name(i.param));
                         });

// ---- (e) persistent addresses ----------------------------------------------------------------

struct Span {
  uintptr_t begin = 0, end = 0;
};

/// Address ranges of the arrays of `m` by name (present arrays only).
std::map<std::string, Span> spans_of(const Metadata& m) {
  std::map<std::string, Span> out;
  for_each_table_array(m, [&](const OutputSpec& spec, const Array& a) {
    if (!a.present || spec.host_memory()) return;
    const auto p = reinterpret_cast<uintptr_t>(a.data);
    out[spec.name] = Span{p, p + array_bytes(a)};
  });
  return out;
}

// Fields staged into persistent buffers (SPEC §7 D, §8) by a spec-only / decode-only step.
std::vector<std::string> spec_staged(BuilderKind kind) {
  if (kind == BuilderKind::Kda)
    return {"spec_state_indices_tensor", "spec_query_start_loc", "num_accepted_tokens"};
  return {"spec_state_indices_tensor", "spec_sequence_masks", "spec_query_start_loc",
          "num_accepted_tokens", "spec_token_indx"};
}
std::vector<std::string> decode_staged(BuilderKind kind) {
  if (kind == BuilderKind::Kda) return {"non_spec_state_indices_tensor"};
  return {"non_spec_state_indices_tensor", "non_spec_query_start_loc"};
}
// Fields gathered from each group's own block table.
const std::vector<std::string> kGathered = {"spec_state_indices_tensor",
                                            "non_spec_state_indices_tensor",
                                            "prefill_state_indices", "checkpoint.state_indices"};

using AddressParam = std::tuple<BuilderKind, int32_t /*groups*/>;
class PersistentAddressGpu : public GpuParamTest<AddressParam> {};

TEST_P(PersistentAddressGpu, StableAcrossStepsAndDistinctPerGroup) {
  const auto [kind, G] = GetParam();
  Config cfg;
  cfg.num_spec = 2;
  cfg.max_num_seqs = 32;
  cfg.max_num_batched_tokens = 4096;
  cfg.full_cuda_graph = true;
  cfg.mamba_cache_mode = CacheMode::Align;
  cfg.block_size = 16;
  cfg.num_speculative_blocks = 2;
  cfg.chunk_metadata = kind == BuilderKind::Gdn;
  const uint32_t seed = testing::test_seed(0xadd0u + static_cast<uint32_t>(G));
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937 rng(seed);

  enum Shape { SpecOnly, DecodeOnly, Mixed };
  auto make = [&](Shape s) {
    const int32_t n = linmeta::testing::uniform(rng, 1, 12);
    const int32_t pads = linmeta::testing::uniform(rng, 0, 3);
    std::vector<int32_t> ql, drafts;
    std::vector<char> pre;
    for (int32_t i = 0; i < n; ++i) {
      if (s == SpecOnly) {
        drafts.push_back(linmeta::testing::uniform(rng, 1, 2));
        ql.push_back(drafts.back() + 1);
      } else if (s == DecodeOnly) {
        drafts.push_back(-1);
        ql.push_back(1);
      } else {
        const bool prefill = i >= n / 2;
        drafts.push_back(prefill ? -1 : 2);
        ql.push_back(prefill ? linmeta::testing::uniform(rng, 2, 300) : 3);
      }
      pre.push_back(s == Mixed && i >= n / 2 ? 1 : 0);
    }
    for (int32_t i = 0; i < pads; ++i) {
      ql.push_back(0);
      drafts.push_back(-1);
      pre.push_back(0);
    }
    return make_step(rng, cfg, kind, G, ql, drafts, pre, coin(rng) ? 2 : 0);
  };
  std::vector<std::pair<Shape, RandomStep>> steps;
  for (int i = 0; i < 30; ++i) {
    const auto s = static_cast<Shape>(i % 3 == 2 ? linmeta::testing::uniform(rng, 0, 2) : i % 3);
    steps.emplace_back(s, make(s));
  }

  BuilderOptions co;
  co.target = Target::Cuda;
  co.num_groups = G;
  BuilderOptions ho = co;
  ho.target = Target::Host;
  MetadataBuilder cuda(kind, cfg, co);
  MetadataBuilder host(kind, cfg, ho);
  StreamHandle stream;
  DeviceStep dev(size_t{16} << 20);
  // First address of every staged field, per shape and group.
  std::map<std::tuple<int, int32_t, std::string>, uintptr_t> first;
  int staged_checked = 0;
  for (size_t k = 0; k < steps.size(); ++k) {
    const auto& [shape, r] = steps[k];
    dev.upload(r);
    const auto ms = build_step(cuda, r, dev.step, dev.tables, G == 1 && k % 2 == 0, stream.get());
    stream.sync();
    ASSERT_EQ(ms.size(), static_cast<size_t>(G));
    std::vector<std::map<std::string, Span>> spans;
    for (const auto& m : ms) spans.push_back(spans_of(m));

    // Stable: a staged field of a spec-only / decode-only step sits where it sat
    // at the first step of that shape, whatever was built in between.
    const auto staged = shape == SpecOnly     ? spec_staged(kind)
                        : shape == DecodeOnly ? decode_staged(kind)
                                              : kGathered;
    if (shape != Mixed)
      for (int32_t g = 0; g < G; ++g)
        for (const auto& f : staged) {
          const auto it = spans[static_cast<size_t>(g)].find(f);
          ASSERT_NE(it, spans[static_cast<size_t>(g)].end())
              << "step " << k << ": " << f << " absent";
          const auto key = std::make_tuple(static_cast<int>(shape), g, f);
          const auto [pos, inserted] = first.emplace(key, it->second.begin);
          EXPECT_EQ(it->second.begin, pos->second)
              << "step " << k << " group " << g << ": " << f << " moved";
          staged_checked += inserted ? 0 : 1;
        }
    // Distinct: a group's gathered and staged arrays overlap no other group's.
    std::set<std::string> per_group(kGathered.begin(), kGathered.end());
    if (shape != Mixed) per_group.insert(staged.begin(), staged.end());
    for (int32_t g = 0; g < G; ++g)
      for (int32_t h = g + 1; h < G; ++h)
        for (const auto& f : per_group) {
          const auto a = spans[static_cast<size_t>(g)].find(f),
                     b = spans[static_cast<size_t>(h)].find(f);
          if (a == spans[static_cast<size_t>(g)].end() || b == spans[static_cast<size_t>(h)].end())
            continue;
          if (a->second.begin == a->second.end && b->second.begin == b->second.end)
            continue;  // both empty
          EXPECT_TRUE(a->second.end <= b->second.begin || b->second.end <= a->second.begin)
              << "step " << k << ": " << f << " of groups " << g << " and " << h << " overlap";
        }
    // And the values are right.
    const auto got = read_back(ms);
    const Step hs = r.host_step();
    const auto ht = r.host_tables();
    const auto want = read_back(build_step(host, r, hs, ht, false, nullptr));
    for (int32_t g = 0; g < G; ++g)
      EXPECT_EQ(
          mismatch(got.groups[static_cast<size_t>(g)], want.groups[static_cast<size_t>(g)], kind),
          "")
          << "step " << k << " group " << g;
  }
  EXPECT_GT(staged_checked, 0);
}

INSTANTIATE_TEST_SUITE_P(Persistent, PersistentAddressGpu,
                         ::testing::Combine(::testing::Values(BuilderKind::Gdn, BuilderKind::Kda),
                                            ::testing::Values(1, 4)),
                         [](const ::testing::TestParamInfo<AddressParam>& i) {
                           return std::string(kind_name(std::get<0>(i.param))) + "_G" +
                                  std::to_string(std::get<1>(i.param));
                         });

}  // namespace
}  // namespace linmeta::gputest
