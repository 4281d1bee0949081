// The random SGLang steps (sglang_random_step.hpp) on the host target, for every kind of the
// Sglang family: each is valid (builds), the run covers every entry, mode and tag, the graph
// entries hand out the backend's buffers, and KDA's prefill-graph entry fills the bucket's
// buffers as SGLang's code does (sglang_prefill_graph_ref.hpp). The GPU tests compare these steps'
// host and cuda builds (tests/gpu/sglang_gpu_test.cpp).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

#include "common/test_seed.hpp"
#include "linmeta/builder.hpp"
#include "linmeta/error.hpp"
#include "linmeta/names.hpp"
#include "sglang_prefill_graph_ref.hpp"
#include "sglang_random_step.hpp"

namespace linmeta {
namespace {

TEST(SglangRandom, EveryRandomStepBuildsAndTheRunCoversEveryShape) {
  for (const BuilderKind kind : test::sglang_kinds()) {
    const std::string name(names::builder_kind_name(kind));
    const uint32_t seed = testing::test_seed(0x5617u + static_cast<uint32_t>(kind));
    SCOPED_TRACE(name + ": " + testing::seed_note(seed));
    std::mt19937 rng(seed);
    std::map<std::string, int> seen;
    int failures = 0;
    for (int engine = 0; engine < 12 && failures < 5; ++engine) {
      const test::SglangRandomEngine e = test::for_kind(test::random_sglang_engine(rng), kind);
      MetadataBuilder b(kind, e.config);
      test::SglStep st;
      for (int i = 0; i < 250 && failures < 5; ++i) {
        for (const auto& label : test::random_sglang_step(rng, e, st)) ++seen[label];
        try {
          const std::vector<int64_t> track_dst = st.pg_track_dst;
          const Metadata& m = b.build(st.step);
          ASSERT_TRUE(m.sglang.has_value());
          if (st.s.entry == SglangEntry::PrefillGraph) {
            const test::PrefillGraphBuffers want =
                test::reference_prefill_graph(st.s, e.config.chunk_size, track_dst);
            EXPECT_EQ(st.pg_packed, want.packed) << test::describe(st.s);
            EXPECT_EQ(st.pg_host, want.packed) << test::describe(st.s);
            EXPECT_EQ(st.pg_cache, want.cache_indices) << test::describe(st.s);
            EXPECT_EQ(st.pg_initial, want.has_initial_state) << test::describe(st.s);
            EXPECT_EQ(st.pg_track_dst, want.track_dst) << test::describe(st.s);
          } else if (st.s.entry != SglangEntry::Eager) {
            EXPECT_EQ(m.sglang->mamba_cache_indices.data, st.s.graph.state_indices);
            EXPECT_EQ(m.sglang->query_start_loc.data, st.s.graph.query_start_loc);
          }
        } catch (const Error& err) {
          ++failures;
          ADD_FAILURE() << "engine " << engine << " step " << i << ": " << err.what() << "\n  "
                        << test::describe(st.s);
        }
      }
    }
    for (const auto& label : test::sglang_required_labels(kind))
      EXPECT_TRUE(seen.contains(label)) << "not exercised: " << label;
  }
}

}  // namespace
}  // namespace linmeta
