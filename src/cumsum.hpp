// Host cumulative sums behind the FLA chunk (SPEC §5) and conv1d (SPEC §6) metadata.
#pragma once

#include <cstdint>
#include <vector>

namespace linmeta::detail {

/// out[0] = 0, out[i + 1] = out[i] + ceil((cu[i + 1] - cu[i]) / block), for the
/// `n` sequences of the cumulative lengths `cu` (read as cu[i] + shift).
/// Optionally stores each ceil into `nums`. Returns the total.
inline int32_t ceil_cumsum(const int32_t* cu, int32_t n, int32_t block, int32_t* out,
                           int32_t* nums = nullptr) {
  out[0] = 0;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t c = (cu[i + 1] - cu[i] + block - 1) / block;
    if (nums != nullptr) nums[i] = c;
    out[i + 1] = out[i] + c;
  }
  return out[n];
}

}  // namespace linmeta::detail
