// The small configurations of the hand-written host tests: 8 rows, 1024 tokens, block 16.
#pragma once

#include <cstdint>

#include "linmeta/linmeta.hpp"

namespace linmeta::testing {

/// GDN (and the base of the others): num_spec k, a state window of k + 1 columns
/// (num_speculative_blocks = k).
inline Config gdn_config(int32_t num_spec, CacheMode mode = CacheMode::None,
                         bool full_graph = false) {
  Config c;
  c.num_spec = num_spec;
  c.num_speculative_blocks = num_spec;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 1024;
  c.full_cuda_graph = full_graph;
  c.mamba_cache_mode = mode;
  c.block_size = 16;
  return c;
}

/// KDA: no chunk metadata; under RecoverSSM one state column (num_speculative_blocks = 0).
inline Config kda_config(int32_t num_spec, bool recoverssm = false,
                         CacheMode mode = CacheMode::None) {
  Config c = gdn_config(num_spec, mode);
  c.chunk_metadata = false;
  c.use_recoverssm = recoverssm;
  c.num_speculative_blocks = recoverssm ? 0 : num_spec;
  return c;
}

}  // namespace linmeta::testing
