// vllm-0.34 prefill checkpoints (rules R5 / K4 / M4 of docs/semantics.md): vLLM's shared
// compute_mamba_prefill_checkpoints for one row, with the settings a single-KV-cache-group
// engine resolves: prefix-cache hash block = cache-hit alignment = the Mamba block size, no
// EAGLE block drop, no hash look-ahead. Every quantity is computed in 64 bits with Python's
// integer semantics (floor division, non-negative remainders), as vLLM computes them: any
// int32 inputs give vLLM's answer, none overflows.
#pragma once

#include <cstdint>

namespace linmeta::detail {

/// Python's a // b (b > 0).
constexpr int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
/// Python's -(-a // b) (b > 0).
constexpr int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }
/// Python's a % b (b > 0): in [0, b).
constexpr int64_t py_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }

/// vllm-0.34 GDN: FlashInfer's prefill emits states every N tokens, N a multiple of its
/// 64-token chunk; a checkpoint plan exists only on such grids (rule R5).
inline constexpr int32_t kFlashInferCheckpointAlign = 64;

struct CheckpointSite {
  int32_t offset = 0;  ///< into the row's query; 0: none
  int32_t col = -1;    ///< block-table column of the checkpoint's state; -1: none
};

/// Row with `seq` computed+scheduled tokens and `q` scheduled ones; `block` = Mamba block
/// size (also the hash block), `alignment` = the layer's checkpoint offset grid (> 0).
constexpr CheckpointSite hash_block_checkpoint(int64_t seq, int64_t q, int64_t block,
                                               int64_t alignment) {
  const int64_t start = seq - q;
  // The last hash-block boundary that leaves a token for the logits.
  const int64_t position = floor_div(seq - 1, block) * block;
  const int64_t pos = position > 0 ? position : 0;
  const int64_t col = ceil_div(seq, block) - 2;
  const bool valid = py_mod(start, block) == 0 && col > floor_div(start - 1, block) &&
                     start + block <= pos && start < pos && pos < seq &&
                     py_mod(pos - start, alignment) == 0;
  if (!valid) return {};
  // 0 < pos - start < q and col < ceil(seq / block): both fit int32.
  return {static_cast<int32_t>(pos - start), static_cast<int32_t>(col)};
}

static_assert(hash_block_checkpoint(200, 200, 64, 16).offset == 192);
static_assert(hash_block_checkpoint(200, 200, 64, 16).col == 2);
static_assert(hash_block_checkpoint(64, 64, 64, 16).offset == 0);    // nothing past the block
static_assert(hash_block_checkpoint(300, 100, 64, 16).offset == 0);  // starts mid-block
// Near INT32_MAX (issue 27 item 1): vLLM's Python integers give offset 64 here.
static_assert(hash_block_checkpoint(INT32_MAX, 127, 64, 16).offset == 64);
static_assert(hash_block_checkpoint(INT32_MAX, 127, 64, 16).col == 33554430);
static_assert(hash_block_checkpoint(INT32_MAX, INT32_MAX, INT32_MAX, 16).offset == 0);
static_assert(floor_div(-1, 16) == -1 && ceil_div(17, 16) == 2 && ceil_div(0, 16) == 0);
static_assert(py_mod(-5, 64) == 59 && py_mod(64, 64) == 0);

}  // namespace linmeta::detail
