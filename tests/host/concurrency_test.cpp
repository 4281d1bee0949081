// Concurrency contract (docs/ARCHITECTURE.md "Threads"): builders share nothing, so
// two builders on two threads are independent; one builder must not be used from two
// threads at once, which debug builds detect (src/reentry_guard.hpp). The tsan preset
// (Debug) runs this file alone under ThreadSanitizer.
#include <gtest/gtest.h>

#include <atomic>
#include <exception>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "case_file.hpp"
#include "common/test_seed.hpp"
#include "host_configs.hpp"
#include "host_step.hpp"
#include "random_step.hpp"
#include "src/reentry_guard.hpp"
#include "submit_hook.hpp"

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
  uint32_t seed;
  Config config;
  int32_t groups;
  std::vector<RandomStep> steps;
};

Workload workload(BuilderKind kind, uint32_t fixed_seed, int32_t groups, int32_t num_steps) {
  const uint32_t seed = testing::test_seed(fixed_seed);
  std::mt19937 rng(seed);
  Workload w{kind, seed, testing::random_config(rng, kind), groups, {}};
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
    SCOPED_TRACE(testing::seed_note(a.seed) + " and " + testing::seed_note(b.seed));
    auto run = [](const Workload& w) { return run_steps(w.kind, w.config, w.groups, w.steps); };
    auto fa = std::async(std::launch::async, run, std::cref(a));
    auto fb = std::async(std::launch::async, run, std::cref(b));
    const auto ra = fa.get();
    const auto rb = fb.get();
    EXPECT_EQ(ra, run(a));
    EXPECT_EQ(rb, run(b));
  }
}

/// Releases a thread parked on `leave` when it goes out of scope (early exits too).
struct Leave {
  std::promise<void>& leave;
  ~Leave() { leave.set_value(); }
};

/// A first thread enters `guard` as "build" and stays inside while this thread enters it as
/// "update_block_table": the error that entry threw, or "" when it got in.
template <class Guard>
std::string second_entry_error(Guard& guard) {
  std::promise<void> entered, leave;
  std::thread first([&] {
    const auto scope = guard.enter("build");
    entered.set_value();
    leave.get_future().wait();
  });
  entered.get_future().wait();
  std::string error;
  {
    const Leave release{leave};
    try {
      const auto scope = guard.enter("update_block_table");
    } catch (const Error& e) {
      error = e.what();
    }
  }
  first.join();
  return error;
}

TEST(Concurrency, ReentryGuardRejectsASecondThreadWhileTheFirstIsInside) {
  detail::ReentryGuard guard;
  const std::string what = second_entry_error(guard);
  EXPECT_NE(what.find("update_block_table entered while another call"), std::string::npos)
      << "the second entry was not detected: \"" << what << "\"";
  EXPECT_NE(what.find("two threads"), std::string::npos) << what;
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

// The guard a builder carries is the real one in debug builds and an empty type whose
// entries never collide in release builds: a second thread gets in while the first is inside.
TEST(Concurrency, ReleaseBuildsCarryNoGuard) {
  static_assert(std::is_empty_v<detail::NoReentryGuard>);
#ifdef NDEBUG
  static_assert(std::is_same_v<detail::DebugReentryGuard, detail::NoReentryGuard>);
  const bool release = true;
#else
  static_assert(std::is_same_v<detail::DebugReentryGuard, detail::ReentryGuard>);
  const bool release = false;
#endif
  detail::NoReentryGuard none;
  EXPECT_EQ(second_entry_error(none), "") << "NoReentryGuard detected a second entry";
  detail::DebugReentryGuard guard;  // what MetadataBuilder::Impl holds in this build
  const std::string error = second_entry_error(guard);
  if (release)
    EXPECT_EQ(error, "") << "a release build detected a second entry";
  else
    EXPECT_NE(error.find("two threads"), std::string::npos) << "not detected: \"" << error << "\"";
}

// One builder entered by a second thread while a first thread's build() is inside it, made
// certain by a hook that parks the first build in its submission (past the re-entry guard)
// until the second thread's calls have returned: both calls are turned away in debug builds,
// the parked build then finishes as if alone, and the builder works afterwards.
TEST(Concurrency, OverlappingCallsOnOneBuilderAreDetectedInDebugBuilds) {
#ifdef NDEBUG
  GTEST_SKIP() << "the detection exists in debug builds only (the tsan preset runs it); "
                  "ReleaseBuildsCarryNoGuard checks release builds";
#endif
  const Config c = testing::gdn_config(2, CacheMode::Align);
  testing::HostStep s;
  s.lens({3, 3}).seq({17, 40}).draft_counts({2, 2}).accepted_counts({1, 1}).iota_table(6);
  const Step step = s.step();
  GdnMetadataBuilder ref(c, testing::host_options());
  const cases::json expected = cases::to_json(ref.build(step), BuilderKind::Gdn);

  GdnMetadataBuilder b(c, testing::host_options());
  const Metadata before = b.build(step);  // a last built step for update_block_table
  std::promise<void> parked, leave;
  std::atomic<bool> park{true};
  std::string update_error, build_error, first_error;
  cases::json first_result;
  {
    const testing::SubmitHook hook(b, [&] {
      if (park.exchange(false)) {  // the first submission only
        parked.set_value();
        leave.get_future().wait();
      }
    });
    std::thread first([&] {
      try {
        first_result = cases::to_json(b.build(step), BuilderKind::Gdn);
      } catch (const std::exception& e) {  // never parked: let the test go on and fail
        first_error = e.what();
        if (park.exchange(false)) parked.set_value();
      }
    });
    parked.get_future().wait();
    {
      const Leave release{leave};
      try {
        b.update_block_table(before, s.block_table());
      } catch (const Error& e) {
        update_error = e.what();
      }
      try {
        b.build(step);
      } catch (const Error& e) {
        build_error = e.what();
      }
    }
    first.join();
  }
  EXPECT_NE(update_error.find("update_block_table entered while another call"), std::string::npos)
      << "not detected: \"" << update_error << "\"";
  EXPECT_NE(build_error.find("build entered while another call"), std::string::npos)
      << "not detected: \"" << build_error << "\"";
  EXPECT_NE(build_error.find("two threads"), std::string::npos) << build_error;
  EXPECT_EQ(first_error, "");
  EXPECT_EQ(first_result, expected);
  EXPECT_EQ(cases::to_json(b.build(step), BuilderKind::Gdn), expected);  // the guard is free
}

}  // namespace
}  // namespace linmeta
