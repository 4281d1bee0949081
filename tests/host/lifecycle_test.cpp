// A builder's lifecycle: moved-from builders, and a build whose submission fails.
#include <gtest/gtest.h>

#include <memory>
#include <utility>

#include "case_file.hpp"
#include "host_step.hpp"
#include "linmeta/linmeta.hpp"
#include "submit_hook.hpp"

namespace linmeta {
namespace {

using testing::HostStep;

template <class F>
void expect_moved_from_error(F&& call) {
  try {
    call();
    ADD_FAILURE() << "no error from a moved-from builder";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("moved from"), std::string::npos) << e.what();
  }
}

TEST(Lifecycle, EveryCallOnAMovedFromBuilderThrows) {
  HostStep s;
  s.lens({1, 3}).seq({5, 3}).prefilling({0, 1}).iota_table(2);
  MetadataBuilder a(BuilderKind::Gdn, Config{}, testing::host_options());
  const Metadata first = a.build(s.step());
  MetadataBuilder b(std::move(a));
  EXPECT_EQ(b.build(s.step()).num_prefills, 1);  // the moved-to builder works
  const BlockTable table = s.block_table();
  expect_moved_from_error([&] { (void)a.build(s.step()); });
  expect_moved_from_error([&] { (void)a.build_for_cudagraph_capture(s.step()); });
  expect_moved_from_error([&] { (void)a.build_groups(s.step(), {&table, 1}); });
  expect_moved_from_error([&] {
    (void)a.build_groups_for_cudagraph_capture(s.step(), {&table, 1});
  });
  expect_moved_from_error([&] { (void)a.update_block_table(first, table); });
  expect_moved_from_error([&] { (void)a.config(); });
  expect_moved_from_error([&] { (void)a.kind(); });
  expect_moved_from_error([&] { (void)a.target(); });
  expect_moved_from_error([&] { (void)a.num_groups(); });
  expect_moved_from_error([&] { (void)a.last_timing(); });
  expect_moved_from_error([&] { (void)a.last_upload_bytes(); });
  expect_moved_from_error([&] { (void)a.last_launch_param_bytes(); });
  expect_moved_from_error([&] { (void)a.pinned_bytes(); });
  expect_moved_from_error([&] { (void)a.buffer_bytes(); });
  // Move-assigning a live builder into it makes it usable again.
  a = std::move(b);
  EXPECT_EQ(a.build(s.step()).num_prefills, 1);
}

// A build whose submission throws leaves the last built step as it was: the metadata the
// previous build returned (its views and counts), and update_block_table on that step.
TEST(Lifecycle, AFailedSubmissionLeavesTheLastBuiltStep) {
  HostStep first, second;
  first.lens({1, 5}).seq({6, 5}).prefilling({0, 1}).iota_table(2);
  second.lens({3, 1, 1}).seq({3, 7, 8}).prefilling({1, 0, 0}).iota_table(2, 8, 900);
  Config c;
  c.max_num_batched_tokens = 64;
  MetadataBuilder builder(BuilderKind::Gdn, c, testing::host_options());
  const Metadata& returned = builder.build(first.step());
  const Metadata kept = returned;
  const cases::json kept_json = cases::to_json(kept, BuilderKind::Gdn);
  {  // a CUDA error or a full capture-slot ring
    const testing::SubmitHook failing(builder,
                                      [] { throw Error("linmeta: injected submission failure"); });
    EXPECT_THROW(builder.build(second.step()), Error);
    EXPECT_TRUE(returned == kept) << "the metadata of the last build changed";
    EXPECT_EQ(cases::to_json(returned, BuilderKind::Gdn), kept_json);
  }
  // update_block_table still belongs to the first step (its plan, its metadata).
  HostStep other = first;
  other.iota_table(2, 8, 5000);
  const Metadata updated = builder.update_block_table(kept, other.block_table());
  EXPECT_EQ(updated.num_prefills, 1);
}

}  // namespace
}  // namespace linmeta
