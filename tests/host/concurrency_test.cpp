// Concurrency contract (docs/ARCHITECTURE.md "Threads"): builders share nothing, so
// two builders on two threads are independent; one builder must not be used from two
// threads at once, which debug builds detect (src/reentry_guard.hpp). The tsan preset
// (Debug) runs this file alone under ThreadSanitizer.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "case_file.hpp"
#include "host_configs.hpp"
#include "host_step.hpp"
#include "random_step.hpp"
#include "src/reentry_guard.hpp"

namespace linmeta {
namespace {

using testing::RandomStep;

/// The JSON of every step's metadata (all groups), built by one builder.
std::vector<cases::json> run_steps(BuilderKind kind, const Config& config, int32_t groups,
                                   const std::vector<RandomStep>& steps) {
  BuilderOptions o;
  o.target = Target::Host;
  o.num_groups = groups;
  MetadataBuilder b(kind, config, o);
  std::vector<cases::json> out;
  for (const RandomStep& r : steps) {
    const Step s = r.host_step();
    const auto tables = r.host_tables();
    const auto ms =
        r.capture ? b.build_groups_for_cudagraph_capture(s, tables) : b.build_groups(s, tables);
    for (const Metadata& m : ms) out.push_back(cases::to_json(m, kind));
    out.push_back(cases::to_json(b.update_block_table(ms[0], tables.back(), 0), kind));
  }
  return out;
}

struct Workload {
  BuilderKind kind;
  Config config;
  int32_t groups;
  std::vector<RandomStep> steps;
};

Workload workload(BuilderKind kind, uint32_t seed, int32_t groups, int32_t num_steps) {
  std::mt19937 rng(seed);
  Workload w{kind, testing::random_config(rng, kind), groups, {}};
  w.config.max_num_batched_tokens = 16384;  // every random step fits one builder
  const testing::RandomStepOptions o{kind, groups, 1000, true};
  for (int32_t i = 0; i < num_steps; ++i) w.steps.push_back(testing::random_step(rng, w.config, o));
  return w;
}

TEST(Concurrency, TwoBuildersOnTwoThreadsAreIndependent) {
  // Both builder kinds at once, and two builders of one kind: each thread's results
  // equal the same steps built alone.
  const std::vector<std::pair<Workload, Workload>> pairs = {
      {workload(BuilderKind::Gdn, 11, 2, 60), workload(BuilderKind::Kda, 12, 3, 60)},
      {workload(BuilderKind::Gdn, 13, 1, 60), workload(BuilderKind::Gdn, 14, 4, 60)},
      {workload(BuilderKind::Kda, 15, 1, 60), workload(BuilderKind::Kda, 16, 2, 60)},
  };
  for (const auto& [a, b] : pairs) {
    auto run = [](const Workload& w) { return run_steps(w.kind, w.config, w.groups, w.steps); };
    auto fa = std::async(std::launch::async, run, std::cref(a));
    auto fb = std::async(std::launch::async, run, std::cref(b));
    const auto ra = fa.get();
    const auto rb = fb.get();
    EXPECT_EQ(ra, run(a));
    EXPECT_EQ(rb, run(b));
  }
}

TEST(Concurrency, ReentryGuardRejectsASecondThreadWhileTheFirstIsInside) {
  detail::ReentryGuard guard;
  std::promise<void> entered, leave;
  std::thread first([&] {
    const auto scope = guard.enter("build");
    entered.set_value();
    leave.get_future().wait();
  });
  entered.get_future().wait();
  try {
    const auto scope = guard.enter("update_block_table");
    ADD_FAILURE() << "the second entry was not detected";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("update_block_table entered while another call"), std::string::npos)
        << what;
    EXPECT_NE(what.find("two threads"), std::string::npos) << what;
  }
  leave.set_value();
  first.join();
  EXPECT_NO_THROW({ const auto scope = guard.enter("build"); });  // free again
}

TEST(Concurrency, ReentryGuardRejectsANestedEntryAndFreesOnUnwind) {
  detail::ReentryGuard guard;
  {
    const auto scope = guard.enter("build");
    EXPECT_THROW({ const auto again = guard.enter("build"); }, Error);
  }
  try {
    const auto scope = guard.enter("build");
    throw Error("a failing build");
  } catch (const Error&) {
  }
  EXPECT_NO_THROW({ const auto scope = guard.enter("build"); });
}

TEST(Concurrency, ReleaseBuildsCarryNoGuard) {
  static_assert(std::is_empty_v<detail::NoReentryGuard>);
#ifdef NDEBUG
  static_assert(std::is_same_v<detail::DebugReentryGuard, detail::NoReentryGuard>);
#else
  static_assert(std::is_same_v<detail::DebugReentryGuard, detail::ReentryGuard>);
#endif
  detail::NoReentryGuard none;
  const auto a = none.enter("build");
  const auto b = none.enter("build");  // no state, no detection
  SUCCEED();
}

TEST(Concurrency, OneBuilderFromTwoThreadsIsDetectedInDebugBuilds) {
#ifdef NDEBUG
  GTEST_SKIP() << "the detection exists in debug builds only";
#endif
  // Needs builder.cpp's DebugReentryGuard hook (src/reentry_guard.hpp). Both threads
  // build until one of them is turned away; every call either builds or throws that
  // error, and no race is left for ThreadSanitizer to report.
  const Config c = testing::gdn_config(2, CacheMode::Align);
  testing::HostStep s;
  s.lens({3, 3}).seq({17, 40}).draft_counts({2, 2}).accepted_counts({1, 1}).iota_table(6);
  GdnMetadataBuilder b(c, testing::host_options());
  std::atomic<int> detected{0}, other_errors{0};
  auto hammer = [&] {
    const Step step = s.step();
    for (int i = 0; i < 200000 && detected.load() == 0; ++i) {
      try {
        b.build(step);
      } catch (const Error& e) {
        if (std::string(e.what()).find("two threads") != std::string::npos)
          detected.fetch_add(1);
        else
          other_errors.fetch_add(1);
      }
    }
  };
  std::thread t1(hammer), t2(hammer);
  t1.join();
  t2.join();
  EXPECT_GT(detected.load(), 0);
  EXPECT_EQ(other_errors.load(), 0);
}

}  // namespace
}  // namespace linmeta
