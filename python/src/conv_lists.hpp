// vLLM's causal-conv1d host lists (compute_causal_conv1d_metadata's mlist / offsetlist) from
// the programs per sequence: one place for the rule, shared by linmeta._linmeta's
// fill_conv_lists and linmeta._torch_reader's conv_lists (which makes them as torch tensors).
// Header-only and torch-free: the reader module does not link the main module.
#pragma once

#include <algorithm>
#include <cstdint>

namespace linmeta::py {

/// The number of programs: the sum of the non-negative counts.
inline int64_t conv_programs(const int32_t* nums, int64_t n) {
  int64_t tot = 0;
  for (int64_t i = 0; i < n; ++i) tot += std::max(nums[i], 0);
  return tot;
}

/// mlist[p] = the sequence of program p, offsetlist[p] = its chunk within the sequence, for
/// the conv_programs(nums, n) programs.
inline void write_conv_lists(const int32_t* nums, int64_t n, int64_t* mlist, int32_t* offsetlist) {
  int64_t p = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int32_t c = 0; c < nums[i]; ++c, ++p) {
      mlist[p] = i;
      offsetlist[p] = c;
    }
}

}  // namespace linmeta::py
