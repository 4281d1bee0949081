// The builder's output block, laid out from the output table (linmeta/outputs.hpp):
// [batch-level eager buffers][group 0 buffers][group 1 buffers]... Each array row of the
// builder's kind has an eager buffer and, with FULL graphs, a staged one (always per group).
#pragma once

#include <array>
#include <cstdint>

#include "capacity.hpp"
#include "linmeta/outputs.hpp"

namespace linmeta::detail {

/// One buffer: a row of the output table, eager or FULL-graph staged.
struct Buf {
  Out out = Out::Count;
  bool staged = false;
};

struct BufferLayout {
  std::array<std::array<int64_t, 2>, kNumOutputs> offset{};    ///< bytes in its region
  std::array<std::array<int64_t, 2>, kNumOutputs> capacity{};  ///< elements
  int64_t batch_bytes = 0;
  int64_t group_bytes = 0;
  int32_t num_groups = 1;

  [[nodiscard]] static bool per_group(Buf b) {
    return b.staged || output_spec(b.out).scope == Scope::Group;
  }
  [[nodiscard]] int64_t capacity_of(Buf b) const {
    return capacity[static_cast<size_t>(b.out)][b.staged ? 1 : 0];
  }
  [[nodiscard]] int64_t total_bytes() const { return batch_bytes + group_bytes * num_groups; }
  /// Byte offset of buffer `b` in the block, for group 0.
  [[nodiscard]] int64_t dst(Buf b) const {
    const int64_t off = offset[static_cast<size_t>(b.out)][b.staged ? 1 : 0];
    return per_group(b) ? batch_bytes + off : off;
  }
  [[nodiscard]] int64_t at(Buf b, int32_t group) const {
    return dst(b) + (per_group(b) ? group * group_bytes : 0);
  }

  static int64_t elements(Cap cap, const Capacity& k, bool full_cuda_graph) {
    const int64_t R = k.rows, T = k.tokens, S = k.spec_cols;
    const int64_t G = full_cuda_graph ? k.graph_rows : 0;
    const int64_t D = full_cuda_graph ? k.graph_bs : 0;
    switch (cap) {
      case Cap::None:
      case Cap::View:
      case Cap::Host:
      case Cap::Input:
        return 0;
      case Cap::Rows:
        return R;
      case Cap::RowsPlus1:
        return R + 1;
      case Cap::SpecRows:
        return R * S;
      case Cap::Tokens:
        return T;
      case Cap::Chunks2:
        return 2 * static_cast<int64_t>(k.chunks);
      case Cap::Conv:
        return k.conv;
      case Cap::MambaChunks:
        return k.mamba_chunks;
      case Cap::MambaChunksPlus1:
        return k.mamba_chunks + 1;
      case Cap::Graph:
        return G;
      case Cap::GraphPlus1:
        return full_cuda_graph ? G + 1 : 0;
      case Cap::GraphSpec:
        return G * S;
      case Cap::GraphTokens:
        return D;
      case Cap::RowsConv:
        return R * kSglangMaxConvWindow;
    }
    return 0;
  }

  /// Buffers for the rows of builder kind `kind` (plus the internal rows).
  static BufferLayout of(const Capacity& k, BuilderKind kind, bool full_cuda_graph,
                         int32_t num_groups) {
    BufferLayout l;
    l.num_groups = num_groups;
    int64_t group = 0, batch = 0;
    for (const OutputSpec& spec : kOutputs) {
      for (const bool staged : {false, true}) {
        const Buf b{spec.id, staged};
        const int64_t n =
            spec.has(kind) ? elements(staged ? spec.staged : spec.eager, k, full_cuda_graph) : 0;
        const auto i = static_cast<size_t>(spec.id);
        l.capacity[i][staged ? 1 : 0] = n;
        int64_t& cursor = per_group(b) ? group : batch;
        l.offset[i][staged ? 1 : 0] = cursor;
        cursor += (n * dtype_size(spec.dtype) + 127) / 128 * 128;
      }
    }
    l.batch_bytes = batch;
    l.group_bytes = group;
    return l;
  }
};

}  // namespace linmeta::detail
