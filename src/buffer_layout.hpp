// The builder's output block: every array a build writes, at fixed offsets.
// Layout: [batch-level arrays][group 0 arrays][group 1 arrays]...
#pragma once

#include <array>
#include <cstdint>

#include "capacity.hpp"

namespace linmeta::detail {

enum class Buf : int32_t {
  // Per group: persistent FULL-graph buffers (SPEC §7 D) ...
  GraphSpecState,
  GraphNonSpecState,
  GraphMasks,
  GraphSpecTok,
  GraphNonSpecTok,
  GraphSpecQsl,
  GraphNonSpecQsl,
  GraphAccepted,
  // ... and the eager arrays that depend on the block table.
  SpecState,
  NonSpecState,
  CheckpointState,
  // Batch level (shared by the groups of a step).
  Masks,
  SpecQsl,
  NonSpecQsl,
  PrefillQsl,
  Accepted,
  HasInitialState,
  SpecTok,
  NonSpecTok,
  ChunkIndices,
  ChunkOffsets,
  ConvBatch,
  ConvChunk,
  NumComputed,
  RequestIndices,
  CheckpointOffsets,
  Count
};

inline constexpr int32_t kFirstBatchBuf = static_cast<int32_t>(Buf::Masks);
inline constexpr int32_t kNumBufs = static_cast<int32_t>(Buf::Count);

[[nodiscard]] inline bool per_group(Buf b) { return static_cast<int32_t>(b) < kFirstBatchBuf; }

struct BufferLayout {
  std::array<int64_t, kNumBufs> offset{};    ///< bytes, within the batch or a group region
  std::array<int64_t, kNumBufs> capacity{};  ///< elements
  int64_t batch_bytes = 0;
  int64_t group_bytes = 0;
  int32_t num_groups = 1;

  [[nodiscard]] int64_t total_bytes() const { return batch_bytes + group_bytes * num_groups; }
  /// Byte offset of buffer `b` in the block, for group 0.
  [[nodiscard]] int64_t dst(Buf b) const {
    return per_group(b) ? batch_bytes + offset[static_cast<int32_t>(b)]
                        : offset[static_cast<int32_t>(b)];
  }
  [[nodiscard]] int64_t at(Buf b, int32_t group) const {
    return dst(b) + (per_group(b) ? group * group_bytes : 0);
  }

  static BufferLayout of(const Capacity& k, bool full_cuda_graph, int32_t num_groups) {
    BufferLayout l;
    l.num_groups = num_groups;
    const int64_t R = k.rows, T = k.tokens, S = k.spec_cols;
    const int64_t G = full_cuda_graph ? k.graph_rows : 0;
    const int64_t GT = full_cuda_graph ? k.graph_bs : 0;
    auto set = [&](Buf b, int64_t n) { l.capacity[static_cast<int32_t>(b)] = n; };
    set(Buf::GraphSpecState, G * S);
    set(Buf::GraphNonSpecState, G);
    set(Buf::GraphMasks, G);
    set(Buf::GraphSpecTok, GT);
    set(Buf::GraphNonSpecTok, GT);
    set(Buf::GraphSpecQsl, G + 1);
    set(Buf::GraphNonSpecQsl, G + 1);
    set(Buf::GraphAccepted, G);
    set(Buf::SpecState, R * S);
    set(Buf::NonSpecState, R);
    set(Buf::CheckpointState, R);
    set(Buf::Masks, R);
    set(Buf::SpecQsl, R + 1);
    set(Buf::NonSpecQsl, R + 1);
    set(Buf::PrefillQsl, R + 1);
    set(Buf::Accepted, R);
    set(Buf::HasInitialState, R);
    set(Buf::SpecTok, T);
    set(Buf::NonSpecTok, T);
    set(Buf::ChunkIndices, 2 * static_cast<int64_t>(k.chunks));
    set(Buf::ChunkOffsets, R + 1);
    set(Buf::ConvBatch, k.conv);
    set(Buf::ConvChunk, k.conv);
    set(Buf::NumComputed, R);
    set(Buf::RequestIndices, R);
    set(Buf::CheckpointOffsets, R);
    int64_t group = 0, batch = 0;
    for (int32_t i = 0; i < kNumBufs; ++i) {
      const auto b = static_cast<Buf>(i);
      const bool is_bool = b == Buf::GraphMasks || b == Buf::Masks || b == Buf::HasInitialState;
      const int64_t bytes = (l.capacity[i] * (is_bool ? 1 : 4) + 127) / 128 * 128;
      int64_t& cursor = per_group(b) ? group : batch;
      l.offset[i] = cursor;
      cursor += bytes;
    }
    l.batch_bytes = batch;
    l.group_bytes = group;
    return l;
  }
};

}  // namespace linmeta::detail
