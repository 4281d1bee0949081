// SPEC §4: vLLM's split_decodes_and_prefills (v1/attention/backends/utils.py) over the host
// query_start_loc, without require_uniform.
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

/// Rows up to the first one with more than `decode_threshold` tokens (or, unless
/// treat_short_extends_as_decodes, the first `is_prefilling(r)` row) are decodes; the rest
/// prefills. Token counts: the decode rows' tokens, and num_actual_tokens minus those.
/// `is_prefilling` is only called when treat_short_extends_as_decodes is false.
template <class IsPrefilling>
Split split_decodes_and_prefills(std::span<const int32_t> qsl, int32_t num_actual_tokens,
                                 int32_t decode_threshold, bool treat_short_extends_as_decodes,
                                 IsPrefilling&& is_prefilling) {
  const auto n = static_cast<int32_t>(qsl.size()) - 1;
  auto ql = [&](int32_t r) { return qsl[r + 1] - qsl[r]; };
  if (treat_short_extends_as_decodes) {
    int32_t max_ql = 0;
    for (int32_t r = 0; r < n; ++r) max_ql = ql(r) > max_ql ? ql(r) : max_ql;
    if (max_ql <= decode_threshold) return {n, 0, num_actual_tokens, 0};
  }
  if (ql(0) > decode_threshold) return {0, n, 0, num_actual_tokens};
  for (int32_t r = 0; r < n; ++r) {
    const bool prefill =
        ql(r) > decode_threshold || (!treat_short_extends_as_decodes && is_prefilling(r));
    if (prefill) return {r, n - r, qsl[r], num_actual_tokens - qsl[r]};
  }
  return {n, 0, num_actual_tokens, 0};
}

}  // namespace linmeta::detail
