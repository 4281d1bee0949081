// Issue 13 reproducers whose fix lives in the redesigned core (kernels/finish_job.cuh,
// src/builder.cpp): items 1 (device-side 64-bit clamped gather) and 3 (update_block_table
// keeps what a re-gather needs in the builder's own buffers), and the debug-build
// detection of one builder used from two threads.
#include <gtest/gtest.h>

#include <atomic>
#include <climits>
#include <memory>
#include <string>
#include <thread>

#include "case_file.hpp"
#include "host_step.hpp"

namespace linmeta {
namespace {

using testing::HostStep;
using testing::Ints;

Config align_config(int32_t k, int32_t block_size) {
  Config c;
  c.num_spec = k;
  c.num_speculative_blocks = k;  // the gather window = the spec columns
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 1024;
  c.mamba_cache_mode = CacheMode::Align;
  c.block_size = block_size;
  return c;
}

/// Row r of the spec state indices stays inside block-table row r of the iota table
/// (bt[r, c] = 100 + 8r + c, width w) and is one window: consecutive columns.
void expect_window_in_row(const Array& a, int32_t row, int32_t width, int32_t expected_first_col) {
  ASSERT_TRUE(a.present);
  for (int32_t j = 0; j < a.cols; ++j) {
    const int64_t v = a.at(int64_t{row} * a.cols + j);
    EXPECT_EQ(v, 100 + 8 * row + expected_first_col + j) << "row " << row << " column " << j;
    EXPECT_LT(v - 100 - 8 * row, width);
  }
}

// ---- item 1: device seq_lens outside the contract ------------------------------------

TEST(RedesignHardening, DeviceSeqLenOfIntMaxStaysInsideTheRow) {
  // block_size 1: start = INT_MAX - 1, and start + col overflowed int32 in the clamp.
  for (bool graph : {false, true}) {
    Config c = align_config(2, 1);
    c.full_cuda_graph = graph;
    HostStep s;
    s.lens({3, 3}).seq({5, 6}).draft_counts({2, 2}).accepted_counts({1, 1}).iota_table(8);
    s.seq_lens = {INT_MAX, 6};
    GdnMetadataBuilder b(c, testing::host_options());
    const Metadata& m = b.build(s.step());
    // The window is clamped as a whole: the last 3 columns of the row.
    expect_window_in_row(m.spec_state_indices_tensor, 0, 8, 5);
    expect_window_in_row(m.spec_state_indices_tensor, 1, 8, 5);  // (6 - 1) / 1 = 5
  }
}

TEST(RedesignHardening, DeviceSeqLenAboveTheBoundClampsPerWindow) {
  // A device value above the host bound used to clamp each column on its own, so
  // every spec column collapsed onto the row's last slot.
  HostStep s;
  s.lens({3, 3}).seq({17, 40}).draft_counts({2, 2}).accepted_counts({1, 1}).iota_table(6);
  s.seq_lens = {1000, 40};  // row 0: start 62, far past width 6
  GdnMetadataBuilder b(align_config(2, 16), testing::host_options());
  const Metadata& m = b.build(s.step());
  expect_window_in_row(m.spec_state_indices_tensor, 0, 6, 3);  // columns 3, 4, 5
  expect_window_in_row(m.spec_state_indices_tensor, 1, 6, 2);  // (40 - 1) / 16 = 2
}

TEST(RedesignHardening, DeviceSeqLenOfIntMinGathersFromColumnZero) {
  // seq_lens - 1 overflowed for INT_MIN; a negative seq_len gathers from column 0
  // (SPEC §3: max(..., 0)).
  HostStep s;
  s.lens({3, 3}).seq({17, 40}).draft_counts({2, 2}).accepted_counts({1, 1}).iota_table(6);
  s.seq_lens = {INT_MIN, -5};
  GdnMetadataBuilder b(align_config(2, 16), testing::host_options());
  const Metadata& m = b.build(s.step());
  expect_window_in_row(m.spec_state_indices_tensor, 0, 6, 0);
  expect_window_in_row(m.spec_state_indices_tensor, 1, 6, 0);
}

TEST(RedesignHardening, NumComputedOfExtremeDeviceSeqLensIsDefined) {
  // num_computed = seq_lens - ql overflowed int32 for seq_lens near INT_MIN
  // (has_initial_state of GDN prefills, KDA RecoverSSM align num_computed_tokens).
  HostStep s;
  s.lens({5, 7}).seq({5, 7}).prefilling({1, 1}).iota_table(4);
  s.seq_lens = {INT_MIN, INT_MAX};
  GdnMetadataBuilder gdn(align_config(0, 16), testing::host_options());
  const Metadata& g = gdn.build(s.step());
  EXPECT_EQ(testing::vec(g.has_initial_state), (Ints{0, 1}));

  Config kc = align_config(2, 16);
  kc.num_speculative_blocks = 0;
  kc.use_recoverssm = true;
  kc.chunk_metadata = false;
  HostStep k;
  k.lens({3, 1}).seq({30, 40}).prefilling({0, 0}).draft_counts({2, -1}).iota_table(4);
  k.seq_lens = {INT_MIN, INT_MIN + 1};
  KdaMetadataBuilder kda(kc, testing::host_options());
  const Metadata& m = kda.build(k.step());
  ASSERT_TRUE(m.recoverssm_commit && m.recoverssm_commit->align);
  EXPECT_EQ(m.recoverssm_commit->align->num_computed_tokens.size(), 2);
}

// ---- item 3: update_block_table after the caller released the step's arrays ----------

TEST(RedesignHardening, UpdateBlockTableDoesNotReadTheReleasedSeqLens) {
  for (BuilderKind kind : {BuilderKind::Gdn, BuilderKind::Kda}) {
    SCOPED_TRACE(kind == BuilderKind::Gdn ? "gdn" : "kda");
    Config c = align_config(2, 16);
    c.chunk_metadata = kind == BuilderKind::Gdn;
    HostStep s;
    s.lens({3, 3, 5}).seq({17, 40, 70}).prefilling({0, 0, 1}).draft_counts({2, 2, -1});
    s.accepted_counts({1, 2, 1}).iota_table(8);
    HostStep other = s;
    other.iota_table(8, 8, 5000);
    MetadataBuilder b(kind, c, testing::host_options());
    MetadataBuilder ref(kind, c, testing::host_options());
    const auto expected = cases::to_json(ref.build(other.step()), kind);

    // The caller's device seq_lens live in memory it releases after the build ran.
    auto released = std::make_unique<int32_t[]>(3);
    std::copy(s.seq_lens.begin(), s.seq_lens.end(), released.get());
    Step step = s.step();
    step.seq_lens = released.get();
    const Metadata built = b.build(step);
    // Reused memory: other values (a read would gather other columns) ...
    for (int i = 0; i < 3; ++i) released[i] = 1000000;
    EXPECT_EQ(cases::to_json(b.update_block_table(built, other.block_table()), kind), expected);
    // ... or freed (a read is an ASan heap-use-after-free in the asan preset).
    released.reset();
    EXPECT_EQ(cases::to_json(b.update_block_table(built, other.block_table()), kind), expected);
  }
}

// ---- item 9: one builder from two threads, detected in debug builds ------------------

TEST(RedesignHardening, OneBuilderFromTwoThreadsIsDetectedInDebugBuilds) {
#ifdef NDEBUG
  GTEST_SKIP() << "the detection exists in debug builds only";
#endif
  // Needs builder.cpp's DebugReentryGuard hook (src/reentry_guard.hpp). Both threads
  // build until one of them is turned away; every call either builds or throws that
  // error, and no race is left for ThreadSanitizer to report.
  Config c = align_config(2, 16);
  HostStep s;
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
