// update_block_table on the cuda target: the re-gathered state indices equal a
// fresh build with the new table, every other field is kept (same views), and
// the other groups' outputs are untouched.
#include "gpu_support.hpp"

namespace linmeta::gputest {
namespace {

using linmeta::testing::coin;
using linmeta::testing::random_config;
using linmeta::testing::random_step;
using linmeta::testing::RandomStepOptions;
using linmeta::testing::uniform;

class UpdateBlockTableGpu : public GpuParamTest<BuilderKind> {};

TEST_P(UpdateBlockTableGpu, EqualsFreshBuildAndKeepsOtherFields) {
  const BuilderKind kind = GetParam();
  const uint32_t seed = testing::test_seed(0x0bdu + 0x100u * static_cast<uint32_t>(kind));
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937 rng(seed);
  StreamHandle stream;
  DeviceStep dev(size_t{16} << 20), fresh(size_t{16} << 20);
  int checked = 0, failures = 0;
  for (int c = 0; c < 60 && failures < 5; ++c) {
    Config cfg = random_config(rng, kind, coin(rng) ? Profile::Seed : Profile::Vllm034);
    cfg.max_num_batched_tokens =
        std::max(cfg.max_num_batched_tokens, cfg.max_num_seqs * (cfg.num_spec + 1) + 16);
    const int32_t G = coin(rng) ? 1 : 3;
    BuilderOptions co;
    co.target = Target::Cuda;
    co.num_groups = G;
    BuilderOptions ho = co;
    ho.target = Target::Host;
    MetadataBuilder cuda(kind, cfg, co);
    MetadataBuilder host(kind, cfg, ho);
    for (int s = 0; s < 5 && failures < 5; ++s) {
      RandomStepOptions o;
      o.kind = kind;
      o.num_groups = G;
      const RandomStep r = random_step(rng, cfg, o);
      // The same step with group g's table replaced (new values, maybe another stride).
      const int32_t g = uniform(rng, 0, G - 1);
      RandomStep r2 = r;
      {
        std::vector<int32_t>& t = r2.tables[static_cast<size_t>(g)];
        for (auto& x : t) x = x == -7 ? -7 : uniform(rng, 1, 1 << 20);
        if (coin(rng)) restride(r2, r2.row_stride + uniform(rng, 1, 4));
      }
      dev.upload(r);
      fresh.upload(r2);
      const bool single = G == 1 && coin(rng);
      const std::string where = std::string(kind_name(kind)) + " config " + std::to_string(c) +
                                " step " + std::to_string(s) + " group " + std::to_string(g) +
                                " of " + std::to_string(G);

      const auto ms = build_step(cuda, r, dev.step, dev.tables, single, stream.get());
      const std::vector<Metadata> before(ms.begin(), ms.end());
      const Metadata updated = cuda.update_block_table(
          before[static_cast<size_t>(g)], fresh.tables[static_cast<size_t>(g)], g, stream.get());
      stream.sync();
      ++checked;

      // Kept: every batch-level field (counts, composites' presence, the same array views);
      // the group's (Scope::Group) rows keep their shapes; the RecoverSSM table is the new one.
      const Metadata& was = before[static_cast<size_t>(g)];
      auto& now = const_cast<Metadata&>(updated);
      auto& old = const_cast<Metadata&>(was);
      EXPECT_EQ(updated.target, Target::Cuda) << where;
      for (const OutputSpec& spec : kOutputs) {
        if (!spec.is_output()) continue;
        const FieldRef x = spec.field(now), y = spec.field(old);
        ASSERT_EQ(static_cast<bool>(x), static_cast<bool>(y)) << where << ": " << spec.name;
        if (!x) continue;
        if (x.type == FieldType::Table) {
          if (y.table().data != nullptr) {
            EXPECT_EQ(x.table().data, fresh.tables[static_cast<size_t>(g)].data) << where;
          }
          continue;
        }
        if (x.type != FieldType::Array) {
          EXPECT_TRUE(diff_one(spec, x, y).empty()) << where << ": " << spec.name << " changed";
          continue;
        }
        const Array& p = x.array();
        const Array& q = y.array();
        EXPECT_TRUE(p.present == q.present && p.rows == q.rows && p.cols == q.cols &&
                    p.ndim == q.ndim && (spec.scope == Scope::Group || p.data == q.data))
            << where << ": " << spec.name << (spec.scope == Scope::Group ? "" : " was not kept");
      }

      // Equal to a fresh (host-target) build with the new table ...
      const Step hs2 = r2.host_step();
      const auto ht2 = r2.host_tables();
      const auto want2 = read_back(build_step(host, r2, hs2, ht2, false, nullptr));
      const auto got2 = read_back(updated);
      std::string report = mismatch(got2.groups[0], want2.groups[static_cast<size_t>(g)], kind);
      // ... and the other groups still equal the build with the original tables.
      const Step hs = r.host_step();
      const auto ht = r.host_tables();
      const auto want = read_back(build_step(host, r, hs, ht, false, nullptr));
      const auto got = read_back(before);
      for (int32_t h = 0; h < G && report.empty(); ++h)
        if (h != g)
          report = mismatch(got.groups[static_cast<size_t>(h)], want.groups[static_cast<size_t>(h)],
                            kind);
      if (!report.empty()) {
        ++failures;
        ADD_FAILURE() << where << ": " << report << "\n  " << case_json(r, where).dump();
      }
    }
  }
  EXPECT_GE(checked, 250);
}

INSTANTIATE_TEST_SUITE_P(Update, UpdateBlockTableGpu, kAllKinds, kind_param_name);

}  // namespace
}  // namespace linmeta::gputest
