// Random valid steps (tools/common/random_step.hpp) give field-for-field identical
// metadata on the cuda and host targets, for every builder kind, both profiles (GDN, KDA),
// every configuration knob, 1 to 48 KV-cache groups, capture builds, strided block tables,
// PDL launches on and off. LINMETA_RANDOM_STEPS sets the steps per builder kind (default
// 20000), LINMETA_TEST_SEED draws other steps (tests/common/test_seed.hpp).
#include <chrono>
#include <iostream>

#include "gpu_support.hpp"

namespace linmeta::gputest {
namespace {

using linmeta::testing::coin;
using linmeta::testing::pick;
using linmeta::testing::random_config;
using linmeta::testing::random_step;
using linmeta::testing::RandomStepOptions;
using linmeta::testing::uniform;

/// What the run exercised; every entry of required() must be seen.
class Coverage {
 public:
  void add(const std::string& what) { ++seen_[what]; }
  void record(const RandomStep& r, int32_t groups, bool single_api) {
    const Config& c = r.config;
    const char* modes[] = {"none", "all", "align"};
    add(std::string("cache_mode=") + modes[static_cast<int>(c.mamba_cache_mode)]);
    add(c.num_spec > 0 ? "spec=on" : "spec=off");
    add(c.full_cuda_graph ? "full_cuda_graph=on" : "full_cuda_graph=off");
    add("block_size=" + std::to_string(c.block_size));
    add("groups=" + std::to_string(groups));
    add(single_api ? "api=build" : "api=build_groups");
    if (c.max_cudagraph_capture_size > 0) add("max_cudagraph_capture_size");
    if (r.capture) add("capture_build");
    if (is_gdn_family(r.kind))
      add(c.profile == Profile::Seed ? "profile=seed" : "profile=vllm-0.34");
    if (r.kind == BuilderKind::Kda) add(c.use_recoverssm ? "recoverssm=on" : "recoverssm=off");
    if (r.kind == BuilderKind::Kda || r.kind == BuilderKind::Mamba2 ||
        (r.kind == BuilderKind::Gdn && c.profile == Profile::Vllm034))
      add(c.num_prefill_checkpoint_blocks > 0 ? "checkpoints=on" : "checkpoints=off");
    if (r.kind == BuilderKind::Gdn && c.profile == Profile::Seed)
      add(c.chunk_metadata ? "chunk_metadata=on" : "chunk_metadata=off");
    if (r.kind == BuilderKind::Gdn || is_linear_attention(r.kind))
      if (r.is_prefilling.empty()) add("is_prefilling=absent");
    if (c.num_spec > 0 && !r.capture) add(r.has_drafts ? "drafts=given" : "drafts=absent");
    bool pad = false, long_prefill = false, lag = false;
    for (int32_t i = 0; i < r.num_reqs; ++i) {
      const auto u = static_cast<size_t>(i);
      const int32_t ql = r.qsl[u + 1] - r.qsl[u];
      pad = pad || (ql == 0 && r.seq_ub[u] == 0);
      long_prefill = long_prefill || ql >= 2048;
      lag = lag || r.seq_lens[u] < r.seq_ub[u];
    }
    if (pad) add("padding_rows");
    if (r.num_actual_tokens > r.qsl.back()) add("padded_tokens");
    if (long_prefill) add("long_prefill");
    if (lag) add("async_spec_seq_len_below_bound");
    if (r.row_stride > r.width) add(groups > 1 ? "strided_table_build_groups" : "strided_table");
  }
  [[nodiscard]] std::vector<std::string> missing(BuilderKind kind) const {
    std::vector<std::string> need = {"cache_mode=none",
                                     "cache_mode=all",
                                     "cache_mode=align",
                                     "spec=on",
                                     "spec=off",
                                     "full_cuda_graph=on",
                                     "full_cuda_graph=off",
                                     "block_size=16",
                                     "block_size=64",
                                     "block_size=256",
                                     "groups=1",
                                     "groups=2",
                                     "groups=4",
                                     "groups=16",
                                     "groups=48",
                                     "api=build",
                                     "api=build_groups",
                                     "max_cudagraph_capture_size",
                                     "capture_build",
                                     "drafts=given",
                                     "drafts=absent",
                                     "padding_rows",
                                     "padded_tokens",
                                     "long_prefill",
                                     "async_spec_seq_len_below_bound",
                                     "strided_table",
                                     "strided_table_build_groups",
                                     "pdl=on",
                                     "pdl=off"};
    auto also = [&](std::initializer_list<const char*> more) {
      for (const char* m : more) need.emplace_back(m);
    };
    if (is_gdn_family(kind)) {
      also({"profile=seed", "profile=vllm-0.34", "checkpoints=on", "checkpoints=off"});
    } else {
      // vLLM 0.34's cache modes are none | align.
      std::erase(need, std::string("cache_mode=all"));
    }
    // No Mamba state: no cache mode but none (Inkling, I2).
    if (in_family(kind, BuilderFamily::Attention))
      std::erase(need, std::string("cache_mode=align"));
    if (kind == BuilderKind::Kda) also({"recoverssm=on", "recoverssm=off"});
    if (kind == BuilderKind::Gdn) also({"chunk_metadata=on", "chunk_metadata=off"});
    if (kind == BuilderKind::Mamba2) also({"checkpoints=on", "checkpoints=off"});
    if (kind == BuilderKind::Gdn || is_linear_attention(kind)) also({"is_prefilling=absent"});
    std::vector<std::string> out;
    for (const auto& n : need)
      if (!seen_.contains(n)) out.push_back(n);
    return out;
  }
  [[nodiscard]] std::string summary() const {
    std::string s;
    for (const auto& [k, v] : seen_) s += "  " + k + ": " + std::to_string(v) + "\n";
    return s;
  }

 private:
  std::map<std::string, int> seen_;
};

int32_t pick_groups(std::mt19937& rng) {
  const int32_t x = uniform(rng, 0, 99);
  return x < 45 ? 1 : x < 65 ? 2 : x < 82 ? 4 : x < 94 ? 16 : 48;
}

class RandomEquivalenceGpu : public GpuParamTest<BuilderKind> {};

TEST_P(RandomEquivalenceGpu, CudaTargetMatchesHostTarget) {
  const BuilderKind kind = GetParam();
  const int total = env_int("LINMETA_RANDOM_STEPS", 20000);
  const uint32_t seed = testing::test_seed(0x6d6e1u + 0x1000u * static_cast<uint32_t>(kind));
  SCOPED_TRACE(testing::seed_note(seed));
  std::mt19937 rng(seed);
  StreamHandle stream;
  DeviceStep dev(size_t{64} << 20);  // generous: regrows only for a larger step
  Coverage cov;
  int done = 0, configs = 0, failures = 0, errors = 0;
  const auto t0 = std::chrono::steady_clock::now();

  while (done < total && failures < 5) {
    Config cfg = random_config(rng, kind, coin(rng) ? Profile::Seed : Profile::Vllm034);
    // Room for every row shape of this config, so that random_step keeps the
    // config and one builder pair serves all its steps.
    cfg.max_num_batched_tokens =
        std::max(cfg.max_num_batched_tokens, cfg.max_num_seqs * (cfg.num_spec + 1) + 16);
    const int32_t G = pick_groups(rng);
    BuilderOptions ho, co;
    ho.target = Target::Host;
    co.target = Target::Cuda;
    ho.num_groups = co.num_groups = G;
    co.programmatic_dependent_launch = coin(rng);
    cov.add(co.programmatic_dependent_launch ? "pdl=on" : "pdl=off");
    MetadataBuilder host(kind, cfg, ho);
    MetadataBuilder cuda(kind, cfg, co);
    ++configs;
    const int steps = std::min(total - done, G >= 16 ? uniform(rng, 4, 12) : uniform(rng, 10, 40));
    for (int i = 0; i < steps && failures < 5; ++i, ++done) {
      RandomStepOptions o;
      o.kind = kind;
      o.num_groups = G;
      o.max_prefill_len = coin(rng, 0.25) ? 8192 : 3000;
      RandomStep r = random_step(rng, cfg, o);
      ASSERT_EQ(r.config.max_num_batched_tokens, cfg.max_num_batched_tokens);
      if (r.row_stride == r.width && coin(rng, 0.15)) restride(r, r.width + uniform(rng, 1, 9));
      const bool single = G == 1 && coin(rng);
      cov.record(r, G, single);

      dev.upload(r);
      const Step hs = r.host_step();
      const auto htables = r.host_tables();
      std::span<const Metadata> hm, cm;
      std::string herr, cerr;
      try {
        hm = build_step(host, r, hs, htables, single, nullptr);
      } catch (const Error& e) {
        herr = e.what();
      }
      try {
        cm = build_step(cuda, r, dev.step, dev.tables, single, stream.get());
      } catch (const Error& e) {
        cerr = e.what();
      }
      const std::string where = std::string(kind_name(kind)) + " seed " + std::to_string(seed) +
                                " step " + std::to_string(done) + " (G=" + std::to_string(G) + ")";
      if (!herr.empty() || !cerr.empty()) {
        ++errors;
        if (herr != cerr) {
          ++failures;
          ADD_FAILURE() << where << ": host error '" << herr << "', cuda error '" << cerr << "'\n  "
                        << case_json(r, where).dump();
        }
        continue;
      }
      stream.sync();
      const HostMetadata got = read_back(cm);
      ASSERT_EQ(got.groups.size(), hm.size());
      for (size_t g = 0; g < hm.size(); ++g) {
        // Full to_json comparison for the first and last group; the structural
        // diff (a superset of to_json's fields) for every group.
        const bool full = g == 0 || g + 1 == hm.size();
        std::string report =
            full ? mismatch(got.groups[g], hm[g], kind)
                 : (diff(got.groups[g], hm[g]).empty() ? std::string()
                                                       : mismatch(got.groups[g], hm[g], kind));
        if (!report.empty()) {
          ++failures;
          ADD_FAILURE() << where << " group " << g << ": " << report << "\n  "
                        << case_json(r, where).dump();
          break;
        }
      }
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[ RANDOM   ] " << kind_name(kind) << ": " << done << " steps, " << configs
            << " configs, " << errors << " rejected by both targets, " << secs << " s\n";
  EXPECT_EQ(errors, 0) << "random valid steps were rejected (same error on both targets)";
  if (total >= 10000) {  // reduced runs (sanitizers) may miss a rare knob
    const auto missing = cov.missing(kind);
    EXPECT_TRUE(missing.empty()) << "not exercised: " << join(missing) << "\ncoverage:\n"
                                 << cov.summary();
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, RandomEquivalenceGpu, kAllKinds, kind_param_name);

}  // namespace
}  // namespace linmeta::gputest
