// CUDA-graph capture of builds: a captured build is exactly one kernel node, plus
// one host->device copy node when the step arena is too large for the kernel
// parameters (for 1 and for 16 KV-cache groups), and replaying the graph after
// eager builds overwrote the outputs restores the captured step's outputs.
#include <tuple>

#include "gpu_support.hpp"

namespace linmeta::gputest {
namespace {

Config capture_config(BuilderKind kind, bool large) {
  Config c;
  c.num_spec = 2;
  c.max_num_seqs = large ? 2048 : 16;
  c.max_num_batched_tokens = large ? 8192 : 2048;
  c.full_cuda_graph = true;
  c.mamba_cache_mode = CacheMode::Align;
  c.block_size = 16;
  c.num_speculative_blocks = 2;
  c.chunk_metadata = kind == BuilderKind::Gdn;
  if (kind == BuilderKind::Kda) c.num_prefill_checkpoint_blocks = 1;
  return c;
}

/// One step of the test: host data, device inputs, host-target reference.
struct TestStep {
  RandomStep r;
  bool capture_api = false;  ///< build(_groups)_for_cudagraph_capture
  DeviceStep dev;
  HostMetadata want;
  HostMetadata views;  ///< the cuda build's metadata (device memory), nums owned
  Graph graph;
};

std::span<const Metadata> build(MetadataBuilder& b, const RandomStep& r, const Step& s,
                                std::span<const BlockTable> tables, bool capture_api,
                                cudaStream_t stream) {
  RandomStep shape = r;  // build_step picks the capture flavour from r.capture
  shape.capture = capture_api;
  return build_step(b, shape, s, tables, b.num_groups() == 1, stream);
}

using CaptureParam = std::tuple<BuilderKind, int32_t /*groups*/, bool /*large mixed step*/>;
class CaptureGpu : public GpuParamTest<CaptureParam> {};

/// 500 spec rows and 1500 two-token prefill chunks: an arena of ~12K words,
/// beyond the kernel parameters, so the build takes the copy path.
RandomStep large_mixed(std::mt19937& rng, const Config& cfg, BuilderKind kind, int32_t G) {
  std::vector<int32_t> ql, drafts;
  std::vector<char> prefilling;
  for (int i = 0; i < 500; ++i) ql.push_back(3), drafts.push_back(2), prefilling.push_back(0);
  for (int i = 0; i < 1500; ++i) ql.push_back(2), drafts.push_back(-1), prefilling.push_back(1);
  return make_step(rng, cfg, kind, G, ql, drafts, prefilling, 7);
}

TEST_P(CaptureGpu, OneLaunchAndReplayRestoresTheCapturedStep) {
  const auto [kind, G, large] = GetParam();
  const Config cfg = capture_config(kind, large);
  const uint32_t seed = testing::test_seed(0xcafeu + static_cast<uint32_t>(G));
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937 rng(seed);
  const std::vector<char> no(6, 0);
  // Spec decodes only (FULL-graph staged, persistent buffers), two padding rows.
  auto spec_only = [&] {
    return make_step(rng, cfg, kind, G, {3, 3, 2, 3, 0, 0}, {2, 2, 1, 2, -1, -1}, no, 3);
  };
  // Spec decodes and prefills (eager buffers).
  auto mixed = [&] {
    return large ? large_mixed(rng, cfg, kind, G)
                 : make_step(rng, cfg, kind, G, {3, 2, 40, 130}, {2, 1, -1, -1}, {0, 0, 1, 1}, 5);
  };
  // Captured: A (spec only), C (mixed), E (spec only, capture flavour of the build).
  // Eager, after the captures: B (spec only) and D (mixed) overwrite every output.
  std::vector<TestStep> captured(3), eager(2);
  captured[0].r = spec_only();
  captured[1].r = mixed();
  captured[2].r = spec_only();
  captured[2].capture_api = true;
  eager[0].r = spec_only();
  eager[1].r = mixed();

  BuilderOptions ho;
  ho.num_groups = G;
  BuilderOptions co = ho;
  co.target = Target::Cuda;
  MetadataBuilder host(kind, cfg, ho);
  MetadataBuilder cuda(kind, cfg, co);
  for (auto* list : {&captured, &eager})
    for (auto& t : *list) {
      t.dev.upload(t.r);
      const Step hs = t.r.host_step();
      const auto ht = t.r.host_tables();
      t.want = read_back(build(host, t.r, hs, ht, t.capture_api, nullptr));
    }

  StreamHandle stream;
  for (auto& t : captured) {
    t.graph.capture(stream.get(), [&] {
      const auto ms = build(cuda, t.r, t.dev.step, t.dev.tables, t.capture_api, stream.get());
      t.views.groups.assign(ms.begin(), ms.end());
      t.views.own_host_arrays();
    });
    const auto types = t.graph.node_types();
    const int copies = arena_was_copied(cuda) ? 1 : 0;
    EXPECT_EQ(t.graph.num_nodes(), static_cast<size_t>(1 + copies))
        << "a captured build of " << G << " group(s), arena " << cuda.last_upload_bytes()
        << " bytes";
    EXPECT_EQ(types.count(cudaGraphNodeTypeMemcpy) ? types.at(cudaGraphNodeTypeMemcpy) : 0, copies);
    EXPECT_EQ(types.count(cudaGraphNodeTypeKernel) ? types.at(cudaGraphNodeTypeKernel) : 0, 1);
    if (large && &t == &captured[1]) {
      EXPECT_EQ(copies, 1) << "the large step should take the copy path";
    }
  }

  // Eager builds reuse the same output buffers.
  for (auto& t : eager) {
    const auto ms = build(cuda, t.r, t.dev.step, t.dev.tables, false, stream.get());
    stream.sync();
    const auto got = read_back(ms);
    for (int g = 0; g < G; ++g)
      EXPECT_EQ(
          mismatch(got.groups[static_cast<size_t>(g)], t.want.groups[static_cast<size_t>(g)], kind),
          "")
          << "eager build, group " << g;
  }
  // Meaningful only when the eager builds overwrote the captured steps' outputs.
  for (size_t i = 0; i < captured.size(); ++i) {
    const auto before = read_back(captured[i].views.groups);
    EXPECT_FALSE(diff(before.groups[0], captured[i].want.groups[0]).empty())
        << "captured step " << i << ": outputs were not overwritten by the eager builds";
  }

  // Replays, forwards then backwards: each restores its own step.
  for (int pass = 0; pass < 2; ++pass)
    for (size_t k = 0; k < captured.size(); ++k) {
      const size_t i = pass == 0 ? k : captured.size() - 1 - k;
      captured[i].graph.launch(stream.get());
      stream.sync();
      const auto got = read_back(captured[i].views.groups);
      for (int g = 0; g < G; ++g)
        EXPECT_EQ(mismatch(got.groups[static_cast<size_t>(g)],
                           captured[i].want.groups[static_cast<size_t>(g)], kind),
                  "")
            << "replay of captured step " << i << " (pass " << pass << "), group " << g;
    }
}

INSTANTIATE_TEST_SUITE_P(Capture, CaptureGpu,
                         ::testing::Combine(::testing::Values(BuilderKind::Gdn, BuilderKind::Kda),
                                            ::testing::Values(1, 16), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<CaptureParam>& i) {
                           return std::string(kind_name(std::get<0>(i.param))) + "_G" +
                                  std::to_string(std::get<1>(i.param)) +
                                  (std::get<2>(i.param) ? "_copy_path" : "_inline");
                         });

}  // namespace
}  // namespace linmeta::gputest
