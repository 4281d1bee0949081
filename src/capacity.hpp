// Capacities derived from the configuration: they size every preallocated array.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kinds/kind_rules.hpp"
#include "linmeta/config.hpp"

namespace linmeta::detail {

struct Capacity {
  int32_t rows;          ///< R = max_num_seqs
  int32_t tokens;        ///< T = max_num_batched_tokens
  int32_t graph_bs;      ///< D = decode_cudagraph_max_bs of the builder kind
  int32_t graph_rows;    ///< rows of the persistent request-indexed buffers: max(D, R)
  int32_t spec_cols;     ///< S: state slots per spec (GDN / KDA) or decode (Mamba) row
  int32_t chunks;        ///< FLA chunks: sum ceil(len / 64) <= T / 64 + R
  int32_t conv;          ///< conv1d program arrays: 2 * max(1024, T / 8 + R)
  int32_t conv_total;    ///< conv1d programs of a step: T / 8 + R
  int32_t mamba_chunks;  ///< Mamba2 SSD chunks (<= 2 segments of 1 + ceil(len / C) per row)

  static Capacity of(const Config& c, BuilderKind kind) {
    Capacity k{};
    k.rows = c.max_num_seqs;
    k.tokens = c.max_num_batched_tokens;
    k.graph_bs = c.decode_cudagraph_max_bs(kind);
    k.graph_rows = std::max(k.graph_bs, k.rows);
    const KindRules& rules = kind_rules(kind);
    k.spec_cols = recoverssm_on(c, rules) ? 1 : c.num_spec + 1;
    k.chunks = k.tokens / kFlaChunkSize + k.rows;
    k.conv_total = k.tokens / kConvBlock + k.rows;
    k.conv = 2 * std::max(1024, k.conv_total);
    k.mamba_chunks = rules.ssd_chunks ? k.tokens / c.chunk_size + 4 * k.rows : 0;
    return k;
  }
};

}  // namespace linmeta::detail
