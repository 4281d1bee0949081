// Device values outside the contract (docs/semantics.md §1): the device seq_lens are never
// validated (the host cannot read them), so values past the host upper bound, INT_MAX and
// INT_MIN must still gather inside each row of the block table and give defined counts
// (kernels/finish_job.cuh: clamped windows, 64-bit arithmetic). The GPU test
// AdversarialDeviceInputsGpu covers the same on the cuda target.
#include <gtest/gtest.h>

#include <climits>

#include "host_configs.hpp"
#include "host_step.hpp"

namespace linmeta {
namespace {

using testing::HostStep;
using testing::Ints;

/// Align mode with a gather window of k + 1 columns and the given block size.
Config align_config(int32_t k, int32_t block_size) {
  Config c = testing::gdn_config(k, CacheMode::Align);
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

TEST(DeviceValues, SeqLenOfIntMaxStaysInsideTheRow) {
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

TEST(DeviceValues, SeqLenAboveTheBoundClampsPerWindow) {
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

TEST(DeviceValues, SeqLenOfIntMinGathersFromColumnZero) {
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

TEST(DeviceValues, NumComputedOfExtremeSeqLensIsDefined) {
  // num_computed = seq_lens - ql overflowed int32 for seq_lens near INT_MIN
  // (has_initial_state of GDN prefills, KDA RecoverSSM align num_computed_tokens).
  HostStep s;
  s.lens({5, 7}).seq({5, 7}).prefilling({1, 1}).iota_table(4);
  s.seq_lens = {INT_MIN, INT_MAX};
  GdnMetadataBuilder gdn(align_config(0, 16), testing::host_options());
  const Metadata& g = gdn.build(s.step());
  EXPECT_EQ(testing::vec(g.has_initial_state), (Ints{0, 1}));

  const Config kc = testing::kda_config(2, /*recoverssm=*/true, CacheMode::Align);
  HostStep k;
  k.lens({3, 1}).seq({30, 40}).prefilling({0, 0}).draft_counts({2, -1}).iota_table(4);
  k.seq_lens = {INT_MIN, INT_MIN + 1};
  KdaMetadataBuilder kda(kc, testing::host_options());
  const Metadata& m = kda.build(k.step());
  ASSERT_TRUE(m.recoverssm_commit && m.recoverssm_commit->align);
  EXPECT_EQ(m.recoverssm_commit->align->num_computed_tokens.size(), 2);
}

}  // namespace
}  // namespace linmeta
