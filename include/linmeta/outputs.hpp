// The output table: one row for every array a build can produce. Buffer layout,
// per-step views, the for_each_array visitor, the Python field list and the replay
// tool's JSON all iterate this table; nothing else lists the fields.
//
// Adding an output: a row here (and its Metadata member), then its packing rule in
// src/pack.cpp. docs/ARCHITECTURE.md walks through an example.
#pragma once

#include <cstdint>

#include "linmeta/array.hpp"
#include "linmeta/metadata.hpp"

namespace linmeta {

/// Where a field's eager buffer lives: shared by the groups of a step, or one per group.
/// FULL-graph staged buffers are always one per group (each group's graphs read its own).
enum class Scope : int32_t { Batch, Group };

/// Capacity formulas (elements), from the configuration: R = max_num_seqs,
/// T = max_num_batched_tokens, S = state slots per spec row, G = max(R, D) rows of the
/// FULL-graph buffers, D = decode_cudagraph_max_bs.
enum class Cap : int32_t {
  None,        ///< no buffer of this kind
  View,        ///< no buffer: a slice of another field's buffer
  Rows,        ///< R
  RowsPlus1,   ///< R + 1
  SpecRows,    ///< R * S
  Tokens,      ///< T
  Chunks2,     ///< 2 * (T / 64 + R): [chunks, 2]
  Conv,        ///< 2 * max(1024, T / 8 + R)
  Graph,       ///< G
  GraphPlus1,  ///< G + 1
  GraphSpec,   ///< G * S
  GraphTokens  ///< D
};

/// X(id, name, dtype, scope, eager capacity, staged capacity, accessor): `name` is vLLM's
/// (dotted for nested fields), `dtype` the widest element type the buffer holds, the
/// accessor the Metadata member (nullptr when its parent is absent). Non-output rows
/// (internal state the kernel keeps between calls) have an empty accessor path.
#define LINMETA_OUTPUTS(X)                                                                       \
  X(HasInitialState, "has_initial_state", Bool, Batch, Rows, None, &m.has_initial_state)         \
  X(ChunkIndices, "chunk_indices", Int32, Batch, Chunks2, None, &m.chunk_indices)                \
  X(ChunkOffsets, "chunk_offsets", Int64, Batch, RowsPlus1, None, &m.chunk_offsets)              \
  X(PrefillQueryStartLoc, "prefill_query_start_loc", Int32, Batch, RowsPlus1, None,              \
    &m.prefill_query_start_loc)                                                                  \
  X(PrefillStateIndices, "prefill_state_indices", Int32, Group, View, None,                      \
    &m.prefill_state_indices)                                                                    \
  X(PrefillHasInitialState, "prefill_has_initial_state", Bool, Batch, View, None,                \
    &m.prefill_has_initial_state)                                                                \
  X(SpecQueryStartLoc, "spec_query_start_loc", Int32, Batch, RowsPlus1, GraphPlus1,              \
    &m.spec_query_start_loc)                                                                     \
  X(NonSpecQueryStartLoc, "non_spec_query_start_loc", Int32, Batch, RowsPlus1, GraphPlus1,       \
    &m.non_spec_query_start_loc)                                                                 \
  X(SpecStateIndices, "spec_state_indices_tensor", Int32, Group, SpecRows, GraphSpec,            \
    &m.spec_state_indices_tensor)                                                                \
  X(NonSpecStateIndices, "non_spec_state_indices_tensor", Int32, Group, Rows, Graph,             \
    &m.non_spec_state_indices_tensor)                                                            \
  X(SpecSequenceMasks, "spec_sequence_masks", Bool, Batch, Rows, Graph, &m.spec_sequence_masks)  \
  X(SpecTokenIndx, "spec_token_indx", Int64, Batch, Tokens, GraphTokens, &m.spec_token_indx)     \
  X(NonSpecTokenIndx, "non_spec_token_indx", Int64, Batch, Tokens, GraphTokens,                  \
    &m.non_spec_token_indx)                                                                      \
  X(NumAcceptedTokens, "num_accepted_tokens", Int32, Batch, Rows, Graph, &m.num_accepted_tokens) \
  X(BatchPtr, "batch_ptr", Int32, Batch, Conv, None, m.conv1d ? &m.conv1d->batch_ptr : nullptr)  \
  X(TokenChunkOffsetPtr, "token_chunk_offset_ptr", Int32, Batch, Conv, None,                     \
    m.conv1d ? &m.conv1d->token_chunk_offset_ptr : nullptr)                                      \
  X(RecoverSsmRequestIndices, "recoverssm_commit.request_indices", Int32, Batch, Rows, None,     \
    m.recoverssm_commit ? &m.recoverssm_commit->request_indices : nullptr)                       \
  X(RecoverSsmNumComputed, "recoverssm_commit.align.num_computed_tokens", Int32, Batch, Rows,    \
    None,                                                                                        \
    m.recoverssm_commit&& m.recoverssm_commit->align                                             \
        ? &m.recoverssm_commit->align->num_computed_tokens                                       \
        : nullptr)                                                                               \
  X(CheckpointOffsets, "checkpoint.checkpoint_offsets", Int32, Batch, Rows, None,                \
    m.checkpoint ? &m.checkpoint->checkpoint_offsets : nullptr)                                  \
  X(CheckpointStateIndices, "checkpoint.state_indices", Int32, Group, Rows, None,                \
    m.checkpoint ? &m.checkpoint->state_indices : nullptr)                                       \
  X(AlignedStart, "", Int32, Batch, Rows, None, nullptr)

/// Row ids of the output table.
enum class Out : int32_t {
#define LINMETA_OUT_ID(id, ...) id,
  LINMETA_OUTPUTS(LINMETA_OUT_ID)
#undef LINMETA_OUT_ID
      Count
};
inline constexpr int32_t kNumOutputs = static_cast<int32_t>(Out::Count);

struct OutputSpec {
  Out id;
  const char* name;  ///< vLLM's name; empty for internal rows
  DType dtype;
  Scope scope;
  Cap eager;
  Cap staged;
  Array* (*field)(Metadata& m);  ///< the Metadata member, or nullptr

  [[nodiscard]] constexpr bool is_output() const { return name[0] != '\0'; }
};

inline constexpr OutputSpec kOutputs[] = {
#define LINMETA_OUT_ROW(id, name, dtype, scope, eager, staged, access)                             \
  {Out::id, name, DType::dtype, Scope::scope, Cap::eager, Cap::staged, [](Metadata& m) -> Array* { \
     static_cast<void>(m);                                                                         \
     return access;                                                                                \
   }},
    LINMETA_OUTPUTS(LINMETA_OUT_ROW)
#undef LINMETA_OUT_ROW
};
static_assert(sizeof(kOutputs) / sizeof(kOutputs[0]) == kNumOutputs);

[[nodiscard]] constexpr const OutputSpec& output_spec(Out id) {
  return kOutputs[static_cast<int32_t>(id)];
}

/// Calls f(const OutputSpec&, const Array&) for every output field of `m` whose
/// parent is present (absent arrays included: check `array.present`), in table order.
template <class F>
void for_each_array(const Metadata& m, F&& f) {
  // The accessors only take addresses: nothing is modified.
  auto& mutable_m = const_cast<Metadata&>(m);
  for (const OutputSpec& spec : kOutputs) {
    if (!spec.is_output()) continue;
    if (const Array* a = spec.field(mutable_m)) f(spec, *a);
  }
}

}  // namespace linmeta
