// SPEC §4: split_decodes_and_prefills with decode_threshold = 1.
#pragma once

#include <cstdint>
#include <span>

namespace linmeta::detail {

struct Split {
  int32_t num_decodes = 0;
  int32_t num_prefills = 0;
  int32_t num_decode_tokens = 0;
  int32_t num_prefill_tokens = 0;
};

/// `is_prefilling` (may be empty when treat_short_extends_as_decodes) marks rows
/// that count as prefills whatever their length.
template <class IsPrefilling>
Split split_decodes_and_prefills(std::span<const int32_t> qsl, int32_t num_actual_tokens,
                                 bool treat_short_extends_as_decodes,
                                 IsPrefilling&& is_prefilling) {
  const auto n = static_cast<int32_t>(qsl.size()) - 1;
  auto ql = [&](int32_t r) { return qsl[r + 1] - qsl[r]; };
  if (treat_short_extends_as_decodes) {
    int32_t max_ql = 0;
    for (int32_t r = 0; r < n; ++r) max_ql = ql(r) > max_ql ? ql(r) : max_ql;
    if (max_ql <= 1) return {n, 0, num_actual_tokens, 0};
  }
  if (ql(0) > 1) return {0, n, 0, num_actual_tokens};
  for (int32_t r = 0; r < n; ++r) {
    const bool prefill = ql(r) > 1 || (!treat_short_extends_as_decodes && is_prefilling(r));
    if (prefill) return {r, n - r, qsl[r], num_actual_tokens - qsl[r]};
  }
  return {n, 0, num_actual_tokens, 0};
}

}  // namespace linmeta::detail
