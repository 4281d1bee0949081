// Order statistics of a sample of timings.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <vector>

namespace linmeta::bench {

struct Summary {
  double median = 0;
  double p99 = 0;
  double mean = 0;
  double min = 0;
  double max = 0;
  size_t count = 0;
};

/// Median (mean of the middle two for an even count), nearest-rank p99, mean, min, max.
inline Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.count = n;
  s.median = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  const auto rank = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(n)));
  s.p99 = v[std::clamp<size_t>(rank, 1, n) - 1];
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(n);
  s.min = v.front();
  s.max = v.back();
  return s;
}

}  // namespace linmeta::bench
