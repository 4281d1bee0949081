// The inputs of one scheduler step (SPEC §1).
#pragma once

#include <cstdint>
#include <span>

namespace linmeta {

struct SglangStep;  // linmeta/sglang.hpp

/// A [rows, width] int32 block table; row r starts at data + r * row_stride
/// (1 <= width <= row_stride <= INT32_MAX). On the cuda target `data` is device
/// memory, on the host target host memory.
struct BlockTable {
  const int32_t* data = nullptr;
  int32_t width = 0;
  int64_t row_stride = 0;

  bool operator==(const BlockTable&) const = default;
};

/// One scheduler step. Host spans are read during build() only; "device" pointers
/// are device memory on the cuda target and host memory on the host target, and
/// are read by the work build() enqueues.
struct Step {
  int32_t num_reqs = 0;
  /// Padded token count (>= query_start_loc[num_reqs]).
  int32_t num_actual_tokens = 0;

  // Host arrays.
  std::span<const int32_t> query_start_loc_cpu;       ///< [num_reqs + 1]
  std::span<const int32_t> seq_lens_cpu_upper_bound;  ///< [num_reqs]
  std::span<const bool> is_prefilling;                ///< [num_reqs] or empty (absent)
  /// [num_reqs] or empty (absent): -1 (not a spec-decode row) or 0..num_spec.
  std::span<const int32_t> num_decode_draft_tokens;

  // Device arrays (target memory).
  /// [num_reqs + 1], same values as the host copy. Not read: linmeta derives every
  /// query-length quantity from query_start_loc_cpu (optional).
  const int32_t* query_start_loc = nullptr;
  const int32_t* seq_lens = nullptr;  ///< [num_reqs], exact
  /// [num_reqs] or null (absent). Read by spec-decode builds, except capture builds
  /// (query lengths) and KDA RecoverSSM (all ones, SPEC §8).
  const int32_t* num_accepted_tokens = nullptr;
  BlockTable block_table;  ///< this group's table, [num_reqs, width]

  /// The SGLang kinds' step (linmeta/sglang.hpp); they read nothing else of the Step.
  const SglangStep* sglang = nullptr;
};

}  // namespace linmeta
