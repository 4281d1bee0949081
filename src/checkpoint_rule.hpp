// vllm-0.34 prefill checkpoints (rules R5 / K4 of docs/semantics.md): vLLM's shared
// compute_mamba_prefill_checkpoints for one row, with the settings a single-KV-cache-group
// engine resolves: prefix-cache hash block = cache-hit alignment = the Mamba block size, no
// EAGLE block drop, no hash look-ahead.
#pragma once

#include <cstdint>

namespace linmeta::detail {

/// Python's floor division (b > 0).
constexpr int32_t floor_div(int32_t a, int32_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
constexpr int32_t ceil_div(int32_t a, int32_t b) { return -floor_div(-a, b); }

struct CheckpointSite {
  int32_t offset = 0;  ///< into the row's query; 0: none
  int32_t col = -1;    ///< block-table column of the checkpoint's state; -1: none
};

/// Row with `seq` computed+scheduled tokens and `q` scheduled ones; `block` = Mamba block
/// size (also the hash block), `alignment` = the layer's checkpoint offset grid.
constexpr CheckpointSite hash_block_checkpoint(int32_t seq, int32_t q, int32_t block,
                                               int32_t alignment) {
  const int32_t start = seq - q;
  // The last hash-block boundary that leaves a token for the logits.
  const int32_t position = floor_div(seq - 1, block) * block;
  const int32_t pos = position > 0 ? position : 0;
  const int32_t col = ceil_div(seq, block) - 2;
  const bool valid = start % block == 0 && col > floor_div(start - 1, block) &&
                     start + block <= pos && start < pos && pos < seq &&
                     (pos - start) % alignment == 0;
  if (!valid) return {};
  return {pos - start, col};
}

static_assert(hash_block_checkpoint(200, 200, 64, 16).offset == 192);
static_assert(hash_block_checkpoint(200, 200, 64, 16).col == 2);
static_assert(hash_block_checkpoint(64, 64, 64, 16).offset == 0);    // nothing past the block
static_assert(hash_block_checkpoint(300, 100, 64, 16).offset == 0);  // starts mid-block
static_assert(floor_div(-1, 16) == -1 && ceil_div(17, 16) == 2 && ceil_div(0, 16) == 0);

}  // namespace linmeta::detail
