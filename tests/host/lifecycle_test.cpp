// A builder's lifecycle: moved-from builders.
#include <gtest/gtest.h>

#include <utility>

#include "host_step.hpp"
#include "linmeta/linmeta.hpp"

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
  expect_moved_from_error([&] { (void)a.build_groups_for_cudagraph_capture(s.step(), {&table, 1}); });
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

}  // namespace
}  // namespace linmeta
