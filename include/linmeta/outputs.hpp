// The output table: one row for every field a build can produce — counts and other
// scalars, arrays, composites (vLLM's nested dataclasses and nums_dict) and their members.
// Buffer layout, per-step views, update_block_table, the field visitor, the Python
// properties and field lists, the replay tool's JSON and the tests' comparisons all
// iterate this table; nothing else lists the fields.
//
// Adding an output: a row here and its Metadata member, then its rule in src/pack.cpp (and,
// for new data, src/planner.cpp). docs/ARCHITECTURE.md walks through an example.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "linmeta/array.hpp"
#include "linmeta/metadata.hpp"

namespace linmeta {

/// Where a field's eager buffer lives: shared by the groups of a step, or one per group.
/// FULL-graph staged buffers are always one per group (each group's graphs read its own).
/// update_block_table re-gathers exactly the Group rows.
enum class Scope : int32_t { Batch, Group };

/// The shape of an array field: 1-D, [n, 2], or [n, S] with S the state slots per row of
/// the group's block table (num_spec + 1, fewer for a narrower table in cache mode none);
/// List: 1-D host data that vLLM holds as a Python list of ints.
enum class Shape : int32_t { Vec, Pairs, Slots, List };

/// Capacity formulas (elements), from the configuration: R = max_num_seqs,
/// T = max_num_batched_tokens, S = state slots per spec row, G = max(R, D) rows of the
/// FULL-graph buffers, D = decode_cudagraph_max_bs, C = chunk_size (Mamba2).
enum class Cap : int32_t {
  None,              ///< no buffer of this kind (scalars, composites)
  View,              ///< no buffer: a view of another field's buffer
  Host,              ///< no buffer: host memory of the builder's plan
  Input,             ///< no buffer: the caller's own array (seq_lens, query_start_loc, table)
  Rows,              ///< R
  RowsPlus1,         ///< R + 1
  SpecRows,          ///< R * S
  Tokens,            ///< T
  Chunks2,           ///< 2 * (T / 64 + R): [chunks, 2]
  Conv,              ///< 2 * max(1024, T / 8 + R)
  MambaChunks,       ///< T / C + 4 R
  MambaChunksPlus1,  ///< T / C + 4 R + 1
  Graph,             ///< G
  GraphPlus1,        ///< G + 1
  GraphSpec,         ///< G * S
  GraphTokens,       ///< D
  RowsConv           ///< R * kSglangMaxConvWindow (SGLang's track_conv_indices)
};

/// Which builders fill a field: a mask of BuilderKind bits.
namespace kinds {
inline constexpr uint32_t G = 1U << static_cast<int>(BuilderKind::Gdn);
inline constexpr uint32_t K = 1U << static_cast<int>(BuilderKind::Kda);
inline constexpr uint32_t M2 = 1U << static_cast<int>(BuilderKind::Mamba2);
inline constexpr uint32_t M1 = 1U << static_cast<int>(BuilderKind::Mamba1);
inline constexpr uint32_t SC = 1U << static_cast<int>(BuilderKind::ShortConv);
inline constexpr uint32_t L = 1U << static_cast<int>(BuilderKind::Linear);
inline constexpr uint32_t BL = 1U << static_cast<int>(BuilderKind::BailingLinear);
inline constexpr uint32_t PSC = 1U << static_cast<int>(BuilderKind::PleShortConv);
inline constexpr uint32_t INK = 1U << static_cast<int>(BuilderKind::Inkling);
inline constexpr uint32_t SM2 = 1U << static_cast<int>(BuilderKind::SglangMamba2);
inline constexpr uint32_t SGD = 1U << static_cast<int>(BuilderKind::SglangGdn);
inline constexpr uint32_t SLT = 1U << static_cast<int>(BuilderKind::SglangLightning);
inline constexpr uint32_t SKD = 1U << static_cast<int>(BuilderKind::SglangKda);
inline constexpr uint32_t SCV = 1U << static_cast<int>(BuilderKind::SglangShortConv);
/// the SGLang kinds (Metadata::sglang)
inline constexpr uint32_t SGL = SM2 | SGD | SLT | SKD | SCV;
inline constexpr uint32_t SGK = SGD | SKD | SCV;  ///< SGLang's plain ForwardMetadata kinds
inline constexpr uint32_t SMG = SM2 | SGD | SKD;  ///< SGLang's Mamba2, GDN and KDA
inline constexpr uint32_t SNL = SMG | SCV;        ///< every SGLang kind but Lightning
inline constexpr uint32_t SML = SM2 | SLT;        ///< SGLang's own dataclasses (Mamba2, Lightning)
inline constexpr uint32_t GK = G | K;             ///< GDN and KDA
inline constexpr uint32_t GKP = GK | PSC;         ///< the speculative split's fields
inline constexpr uint32_t MB = M2 | M1 | SC | PSC;  ///< the Mamba base builders
inline constexpr uint32_t LA = L | BL;              ///< linear attention
inline constexpr uint32_t LAP = LA | PSC;           ///< query_start_loc, state_indices_tensor
inline constexpr uint32_t MBBL = MB | BL;           ///< the Mamba base builders and Bailing
inline constexpr uint32_t GKMB = GK | MB;
inline constexpr uint32_t GKMBBL = GKMB | BL;
inline constexpr uint32_t MBL = MB | LA;
inline constexpr uint32_t All = GK | MB | LA;  ///< the kinds with step counts (not Inkling)
}  // namespace kinds
[[nodiscard]] constexpr uint32_t kind_bit(BuilderKind k) { return 1U << static_cast<int>(k); }

/// The rows of a prefill checkpoint composite (vLLM's MambaPrefillCheckpointMetadata),
/// named `name`, the Metadata member `parent`.
#define LINMETA_CHECKPOINT_ROWS(X, Id, name, kinds, parent)                        \
  X(Id, name, kinds, Int32, Vec, Batch, None, None, &m.parent)                     \
  X(Id##Offsets, name ".checkpoint_offsets", kinds, Int32, Vec, Batch, Rows, None, \
    m.parent ? &m.parent->checkpoint_offsets : nullptr)                            \
  X(Id##StateIndices, name ".state_indices", kinds, Int32, Vec, Group, Rows, None, \
    m.parent ? &m.parent->state_indices : nullptr)                                 \
  X(Id##HostOffsets, name ".offsets", kinds, Int32, List, Batch, Host, None,       \
    m.parent ? &m.parent->offsets : nullptr)                                       \
  X(Id##QueryLens, name ".query_lens", kinds, Int32, List, Batch, Host, None,      \
    m.parent ? &m.parent->query_lens : nullptr)                                    \
  X(Id##RequestRows, name ".request_rows", kinds, Int64, Vec, Batch, Rows, None,   \
    m.parent ? &m.parent->request_rows : nullptr)                                  \
  X(Id##BlockCols, name ".block_cols", kinds, Int64, Vec, Batch, Rows, None,       \
    m.parent ? &m.parent->block_cols : nullptr)

#define LINMETA_SGL(x) m.sglang ? &m.sglang->x : nullptr
#define LINMETA_SGL_MIXED(x) \
  m.sglang&& m.sglang->mixed_metadata ? &m.sglang->mixed_metadata->x : nullptr
/// The SGLang kinds' rows (linmeta/sglang.hpp): SGLang's field names under "sglang.".
#define LINMETA_SGLANG_ROWS(X)                                                                     \
  X(Sglang, "sglang", SGL, Int32, Vec, Batch, None, None, &m.sglang)                               \
  X(SglKindMetadata, "sglang.kind_metadata", SML, Bool, Vec, Batch, None, None,                    \
    LINMETA_SGL(kind_metadata))                                                                    \
  X(SglQueryStartLoc, "sglang.query_start_loc", SGL, Int32, Vec, Batch, RowsPlus1, None,           \
    LINMETA_SGL(query_start_loc))                                                                  \
  X(SglMambaCacheIndices, "sglang.mamba_cache_indices", SGL, Int32, Vec, Batch, Rows, None,        \
    LINMETA_SGL(mamba_cache_indices))                                                              \
  X(SglMambaTrackIndices, "sglang.mamba_track_indices", SGL, Int64, Vec, Batch, Input, None,       \
    LINMETA_SGL(mamba_track_indices))                                                              \
  X(SglConvBlockTable, "sglang.conv_block_table", SGD, Int32, Pairs, Batch, Conv, None,            \
    LINMETA_SGL(conv_block_table))                                                                 \
  X(SglLogicalNumTokens, "sglang.logical_num_tokens", SGK, Int32, Vec, Batch, None, None,          \
    LINMETA_SGL(logical_num_tokens))                                                               \
  X(SglRetrieveNextToken, "sglang.retrieve_next_token", SNL, Int64, Vec, Batch, Input, None,       \
    LINMETA_SGL(retrieve_next_token))                                                              \
  X(SglRetrieveNextSibling, "sglang.retrieve_next_sibling", SNL, Int64, Vec, Batch, Input, None,   \
    LINMETA_SGL(retrieve_next_sibling))                                                            \
  X(SglRetrieveParentToken, "sglang.retrieve_parent_token", SNL, Int64, Vec, Batch, Tokens, None,  \
    LINMETA_SGL(retrieve_parent_token))                                                            \
  X(SglTrackConvIndices, "sglang.track_conv_indices", SNL, Int64, Vec, Batch, RowsConv, None,      \
    LINMETA_SGL(track_conv_indices))                                                               \
  X(SglTrackSsmHSrc, "sglang.track_ssm_h_src", SGL, Int64, Vec, Batch, Rows, None,                 \
    LINMETA_SGL(track_ssm_h_src))                                                                  \
  X(SglTrackSsmHDst, "sglang.track_ssm_h_dst", SGL, Int64, Vec, Batch, Rows, None,                 \
    LINMETA_SGL(track_ssm_h_dst))                                                                  \
  X(SglTrackSsmFinalSrc, "sglang.track_ssm_final_src", SGL, Int32, Vec, Batch, Rows, None,         \
    LINMETA_SGL(track_ssm_final_src))                                                              \
  X(SglTrackSsmFinalDst, "sglang.track_ssm_final_dst", SGL, Int64, Vec, Batch, Rows, None,         \
    LINMETA_SGL(track_ssm_final_dst))                                                              \
  X(SglTrackChunkIdx, "sglang.track_chunk_idx", SGK, Int32, Vec, Batch, Rows, None,                \
    LINMETA_SGL(track_chunk_idx))                                                                  \
  X(SglTrackSsmHBatchSrc, "sglang.track_ssm_h_batch_src", SGK, Int64, Vec, Batch, Rows, None,      \
    LINMETA_SGL(track_ssm_h_batch_src))                                                            \
  X(SglTrackSsmSeqIdx, "sglang.track_ssm_seq_idx", SM2, Int64, Vec, Batch, Rows, None,             \
    LINMETA_SGL(track_ssm_seq_idx))                                                                \
  X(SglTrackSsmEndLocs, "sglang.track_ssm_end_locs", SM2, Int64, Vec, Batch, Rows, None,           \
    LINMETA_SGL(track_ssm_end_locs))                                                               \
  X(SglTrackSsmRecomputeDst, "sglang.track_ssm_recompute_dst", SM2, Int64, Vec, Batch, Rows, None, \
    LINMETA_SGL(track_ssm_recompute_dst))                                                          \
  X(SglIsTargetVerify, "sglang.is_target_verify", SGL, Bool, Vec, Batch, None, None,               \
    LINMETA_SGL(is_target_verify))                                                                 \
  X(SglDraftTokenNum, "sglang.draft_token_num", SGL, Int32, Vec, Batch, None, None,                \
    LINMETA_SGL(draft_token_num))                                                                  \
  X(SglHasMambaTrackMask, "sglang.has_mamba_track_mask", SGL, Bool, Vec, Batch, None, None,        \
    LINMETA_SGL(has_mamba_track_mask))                                                             \
  X(SglMambaTrackMaskIndices, "sglang.mamba_track_mask_indices", SNL, Int64, Vec, Batch, Rows,     \
    None, LINMETA_SGL(mamba_track_mask_indices))                                                   \
  X(SglConvStatesMaskIndices, "sglang.conv_states_mask_indices", SMG, Int64, Vec, Batch, Rows,     \
    None, LINMETA_SGL(conv_states_mask_indices))                                                   \
  X(SglNumPrefills, "sglang.num_prefills", SML, Int32, Vec, Batch, None, None,                     \
    LINMETA_SGL(num_prefills))                                                                     \
  X(SglNumPrefillTokens, "sglang.num_prefill_tokens", SML, Int32, Vec, Batch, None, None,          \
    LINMETA_SGL(num_prefill_tokens))                                                               \
  X(SglNumDecodes, "sglang.num_decodes", SML, Int32, Vec, Batch, None, None,                       \
    LINMETA_SGL(num_decodes))                                                                      \
  X(SglBatchSize, "sglang.batch_size", SLT, Int32, Vec, Batch, None, None,                         \
    LINMETA_SGL(batch_size))                                                                       \
  X(SglHasInitialStatesLt, "sglang.has_initial_states", SLT, Int64, Vec, Batch, Rows, None,        \
    LINMETA_SGL(has_initial_states))                                                               \
  X(SglQLengths, "sglang.q_lengths", SLT, Int32, Vec, Batch, Rows, None, LINMETA_SGL(q_lengths))   \
  X(SglCacheIndices, "sglang.cache_indices", SCV, Int64, Vec, Batch, Rows, None,                   \
    LINMETA_SGL(cache_indices))                                                                    \
  X(SglHasInitialState, "sglang.has_initial_state", SCV, Bool, Vec, Batch, Rows, None,             \
    LINMETA_SGL(has_initial_state))                                                                \
  X(SglHasPrefixCpu, "sglang.has_prefix_cpu", SCV, Bool, List, Batch, Host, None,                  \
    LINMETA_SGL(has_prefix_cpu))                                                                   \
  X(SglMixed, "sglang.mixed_metadata", SM2, Int32, Vec, Batch, None, None,                         \
    LINMETA_SGL(mixed_metadata))                                                                   \
  X(SglHasInitialStates, "sglang.mixed_metadata.has_initial_states", SM2, Bool, Vec, Batch, Rows,  \
    None, LINMETA_SGL_MIXED(has_initial_states))                                                   \
  X(SglPrepInitialStates, "sglang.mixed_metadata.prep_initial_states", SM2, Bool, Vec, Batch,      \
    None, None, LINMETA_SGL_MIXED(prep_initial_states))                                            \
  X(SglChunkSize, "sglang.mixed_metadata.chunk_size", SM2, Int32, Vec, Batch, None, None,          \
    LINMETA_SGL_MIXED(chunk_size))                                                                 \
  X(SglSeqIdx, "sglang.mixed_metadata.seq_idx", SM2, Int32, Vec, Batch, Tokens, None,              \
    LINMETA_SGL_MIXED(seq_idx))                                                                    \
  X(SglChunkIndices, "sglang.mixed_metadata.chunk_indices", SM2, Int32, Vec, Batch, MambaChunks,   \
    None, LINMETA_SGL_MIXED(chunk_indices))                                                        \
  X(SglChunkOffsets, "sglang.mixed_metadata.chunk_offsets", SM2, Int32, Vec, Batch, MambaChunks,   \
    None, LINMETA_SGL_MIXED(chunk_offsets))                                                        \
  X(SglExtendSeqLensCpu, "sglang.mixed_metadata.extend_seq_lens_cpu", SM2, Int32, List, Batch,     \
    Host, None, LINMETA_SGL_MIXED(extend_seq_lens_cpu))

/// X(id, name, kinds, dtype, shape, scope, eager capacity, staged capacity, member):
/// `name` is vLLM's (dotted inside composites), `kinds` the builders that have the field,
/// `dtype` the widest element type an array holds (scalars: Int32, flags: Bool), the member
/// the Metadata field (nullptr when its parent composite is absent; its C++ type says what
/// the row is: int32_t count, std::optional<int32_t>, bool flag, Array, BlockTable, or
/// std::optional<composite>). Parents precede their members. The last row is internal
/// (state the kernel keeps for update_block_table): no name, no member.
#define LINMETA_OUTPUTS(X)                                                                         \
  X(NumPrefills, "num_prefills", All, Int32, Vec, Batch, None, None, &m.num_prefills)              \
  X(NumPrefillTokens, "num_prefill_tokens", All, Int32, Vec, Batch, None, None,                    \
    &m.num_prefill_tokens)                                                                         \
  X(NumDecodes, "num_decodes", All, Int32, Vec, Batch, None, None, &m.num_decodes)                 \
  X(NumDecodeTokens, "num_decode_tokens", All, Int32, Vec, Batch, None, None,                      \
    &m.num_decode_tokens)                                                                          \
  X(NumSpecDecodes, "num_spec_decodes", GKP, Int32, Vec, Batch, None, None, &m.num_spec_decodes)   \
  X(NumSpecDecodeTokens, "num_spec_decode_tokens", GKP, Int32, Vec, Batch, None, None,             \
    &m.num_spec_decode_tokens)                                                                     \
  X(NumActualTokens, "num_actual_tokens", GKP, Int32, Vec, Batch, None, None,                      \
    &m.num_actual_tokens)                                                                          \
  X(NumReqs, "num_reqs", MB, Int32, Vec, Batch, None, None, &m.num_reqs)                           \
  X(HasInitialState, "has_initial_state", GK, Bool, Vec, Batch, Rows, None, &m.has_initial_state)  \
  X(ChunkIndices, "chunk_indices", GK, Int32, Pairs, Batch, Chunks2, None, &m.chunk_indices)       \
  X(ChunkOffsets, "chunk_offsets", GK, Int64, Vec, Batch, RowsPlus1, None, &m.chunk_offsets)       \
  X(PrefillQueryStartLoc, "prefill_query_start_loc", GK, Int32, Vec, Batch, RowsPlus1, None,       \
    &m.prefill_query_start_loc)                                                                    \
  X(PrefillStateIndices, "prefill_state_indices", GK, Int32, Vec, Group, View, None,               \
    &m.prefill_state_indices)                                                                      \
  X(PrefillHasInitialState, "prefill_has_initial_state", GK, Bool, Vec, Batch, View, None,         \
    &m.prefill_has_initial_state)                                                                  \
  X(SpecQueryStartLoc, "spec_query_start_loc", GKP, Int32, Vec, Batch, RowsPlus1, GraphPlus1,      \
    &m.spec_query_start_loc)                                                                       \
  X(NonSpecQueryStartLoc, "non_spec_query_start_loc", GKP, Int32, Vec, Batch, RowsPlus1,           \
    GraphPlus1, &m.non_spec_query_start_loc)                                                       \
  X(SpecStateIndices, "spec_state_indices_tensor", GKP, Int32, Slots, Group, SpecRows, GraphSpec,  \
    &m.spec_state_indices_tensor)                                                                  \
  X(NonSpecStateIndices, "non_spec_state_indices_tensor", GK, Int32, Vec, Group, Rows, Graph,      \
    &m.non_spec_state_indices_tensor)                                                              \
  X(SpecSequenceMasks, "spec_sequence_masks", GKP, Bool, Vec, Batch, Rows, Graph,                  \
    &m.spec_sequence_masks)                                                                        \
  X(SpecSequenceMasksCpu, "spec_sequence_masks_cpu", G, Bool, Vec, Batch, Host, None,              \
    &m.spec_sequence_masks_cpu)                                                                    \
  X(SpecTokenIndx, "spec_token_indx", GKP, Int64, Vec, Batch, Tokens, GraphTokens,                 \
    &m.spec_token_indx)                                                                            \
  X(NonSpecTokenIndx, "non_spec_token_indx", GKP, Int64, Vec, Batch, Tokens, GraphTokens,          \
    &m.non_spec_token_indx)                                                                        \
  X(NumAcceptedTokens, "num_accepted_tokens", GKMBBL, Int32, Vec, Batch, Rows, Graph,              \
    &m.num_accepted_tokens)                                                                        \
  X(UniformSpecSequenceLength, "uniform_spec_sequence_length", GK, Int32, Vec, Batch, None, None,  \
    &m.uniform_spec_sequence_length)                                                               \
  X(BatchPtr, "batch_ptr", GKMB, Int32, Vec, Batch, Conv, None, &m.batch_ptr)                      \
  X(TokenChunkOffsetPtr, "token_chunk_offset_ptr", GKMB, Int32, Vec, Batch, Conv, None,            \
    &m.token_chunk_offset_ptr)                                                                     \
  X(NumsDict, "nums_dict", GKMB, Int32, Vec, Batch, None, None, &m.conv1d)                         \
  X(NumsDictNums, "nums_dict.nums", GKMB, Int32, Vec, Batch, Host, None,                           \
    m.conv1d ? &m.conv1d->nums : nullptr)                                                          \
  X(NumsDictTot, "nums_dict.tot", GKMB, Int32, Vec, Batch, None, None,                             \
    m.conv1d ? &m.conv1d->tot : nullptr)                                                           \
  X(NumsDictMlist, "nums_dict.mlist", GKMB, Int64, Vec, Batch, Host, None,                         \
    m.conv1d ? &m.conv1d->mlist : nullptr)                                                         \
  X(NumsDictMlistLen, "nums_dict.mlist_len", GKMB, Int32, Vec, Batch, None, None,                  \
    m.conv1d ? &m.conv1d->mlist_len : nullptr)                                                     \
  X(NumsDictOffsetlist, "nums_dict.offsetlist", GKMB, Int32, Vec, Batch, Host, None,               \
    m.conv1d ? &m.conv1d->offsetlist : nullptr)                                                    \
  X(NumsDictBatchPtr, "nums_dict.batch_ptr", GKMB, Int32, Vec, Batch, View, None,                  \
    m.conv1d ? &m.conv1d->batch_ptr : nullptr)                                                     \
  X(NumsDictTokenChunkOffsetPtr, "nums_dict.token_chunk_offset_ptr", GKMB, Int32, Vec, Batch,      \
    View, None, m.conv1d ? &m.conv1d->token_chunk_offset_ptr : nullptr)                            \
  LINMETA_CHECKPOINT_ROWS(X, Checkpoint, "checkpoint", GKP, checkpoint)                            \
  X(RecoverSsmCommit, "recoverssm_commit", K, Int32, Vec, Batch, None, None, &m.recoverssm_commit) \
  X(RecoverSsmStateIndices, "recoverssm_commit.state_indices", K, Int32, Slots, Group, View, None, \
    m.recoverssm_commit ? &m.recoverssm_commit->state_indices : nullptr)                           \
  X(RecoverSsmQueryStartLoc, "recoverssm_commit.query_start_loc", K, Int32, Vec, Batch, View,      \
    None, m.recoverssm_commit ? &m.recoverssm_commit->query_start_loc : nullptr)                   \
  X(RecoverSsmRequestIndices, "recoverssm_commit.request_indices", K, Int32, Vec, Batch, Rows,     \
    None, m.recoverssm_commit ? &m.recoverssm_commit->request_indices : nullptr)                   \
  X(RecoverSsmAlign, "recoverssm_commit.align", K, Int32, Vec, Batch, None, None,                  \
    m.recoverssm_commit ? &m.recoverssm_commit->align : nullptr)                                   \
  X(RecoverSsmBlockTable, "recoverssm_commit.align.block_table", K, Int32, Vec, Group, Input,      \
    None,                                                                                          \
    m.recoverssm_commit&& m.recoverssm_commit->align ? &m.recoverssm_commit->align->block_table    \
                                                     : nullptr)                                    \
  X(RecoverSsmNumComputed, "recoverssm_commit.align.num_computed_tokens", K, Int32, Vec, Batch,    \
    Rows, None,                                                                                    \
    m.recoverssm_commit&& m.recoverssm_commit->align                                               \
        ? &m.recoverssm_commit->align->num_computed_tokens                                         \
        : nullptr)                                                                                 \
  X(RecoverSsmBlockSize, "recoverssm_commit.align.block_size", K, Int32, Vec, Batch, None, None,   \
    m.recoverssm_commit&& m.recoverssm_commit->align ? &m.recoverssm_commit->align->block_size     \
                                                     : nullptr)                                    \
  X(FlashInferCheckpointPlan, "flashinfer_checkpoint_plan", G, Int32, Vec, Batch, None, None,      \
    &m.flashinfer_checkpoint_plan)                                                                 \
  X(FlashInferCheckpointEveryN, "flashinfer_checkpoint_plan.every_n_tokens", G, Int32, Vec, Batch, \
    None, None,                                                                                    \
    m.flashinfer_checkpoint_plan ? &m.flashinfer_checkpoint_plan->every_n_tokens : nullptr)        \
  X(FlashInferCheckpointCount, "flashinfer_checkpoint_plan.num_checkpoints", G, Int32, Vec, Batch, \
    None, None,                                                                                    \
    m.flashinfer_checkpoint_plan ? &m.flashinfer_checkpoint_plan->num_checkpoints : nullptr)       \
  X(FlashInferCheckpointCuStarts, "flashinfer_checkpoint_plan.cu_starts", G, Int64, Vec, Batch,    \
    RowsPlus1, None,                                                                               \
    m.flashinfer_checkpoint_plan ? &m.flashinfer_checkpoint_plan->cu_starts : nullptr)             \
  X(FlashInferCheckpointRows, "flashinfer_checkpoint_plan.rows", G, Int64, Vec, Batch, Rows, None, \
    m.flashinfer_checkpoint_plan ? &m.flashinfer_checkpoint_plan->rows : nullptr)                  \
  X(SpecTokenStart, "spec_token_start", K, Int32, Vec, Batch, None, None, &m.spec_token_start)     \
  X(NonSpecTokenStart, "non_spec_token_start", K, Int32, Vec, Batch, None, None,                   \
    &m.non_spec_token_start)                                                                       \
  X(FlashInferPrefillQueryStartLoc, "flashinfer_prefill_query_start_loc", K, Int64, Vec, Batch,    \
    RowsPlus1, None, &m.flashinfer_prefill_query_start_loc)                                        \
  X(FlashInferPrefillSeqOrder, "flashinfer_prefill_seq_order", K, Int32, Vec, Batch, Rows, None,   \
    &m.flashinfer_prefill_seq_order)                                                               \
  X(HasInitialStatesP, "has_initial_states_p", MB, Bool, Vec, Batch, Rows, None,                   \
    &m.has_initial_states_p)                                                                       \
  X(QueryStartLocP, "query_start_loc_p", MB, Int32, Vec, Batch, RowsPlus1, None,                   \
    &m.query_start_loc_p)                                                                          \
  X(StateIndicesTensorP, "state_indices_tensor_p", MBBL, Int32, Vec, Group, Rows, None,            \
    &m.state_indices_tensor_p)                                                                     \
  X(StateIndicesTensorD, "state_indices_tensor_d", MBBL, Int32, Slots, Group, SpecRows, GraphSpec, \
    &m.state_indices_tensor_d)                                                                     \
  X(QueryStartLocD, "query_start_loc_d", MBBL, Int32, Vec, Batch, RowsPlus1, GraphPlus1,           \
    &m.query_start_loc_d)                                                                          \
  X(SeqLens, "seq_lens", MBL, Int32, Vec, Batch, Input, None, &m.seq_lens)                         \
  X(PrepInitialStates, "prep_initial_states", M2, Bool, Vec, Batch, None, None,                    \
    &m.prep_initial_states)                                                                        \
  X(ChunkSize, "chunk_size", M2, Int32, Vec, Batch, None, None, &m.chunk_size)                     \
  X(CuChunkSeqlenP, "cu_chunk_seqlen_p", MB, Int32, Vec, Batch, MambaChunksPlus1, None,            \
    &m.cu_chunk_seqlen_p)                                                                          \
  X(LastChunkIndicesP, "last_chunk_indices_p", MB, Int32, Vec, Batch, Rows, None,                  \
    &m.last_chunk_indices_p)                                                                       \
  X(SeqIdxP, "seq_idx_p", M2, Int32, Vec, Batch, MambaChunks, None, &m.seq_idx_p)                  \
  X(CheckpointChunkIdx, "checkpoint_chunk_idx", M2, Int64, Vec, Batch, Rows, None,                 \
    &m.checkpoint_chunk_idx)                                                                       \
  LINMETA_CHECKPOINT_ROWS(X, CheckpointMeta, "checkpoint_meta", M2, checkpoint_meta)               \
  X(QueryStartLoc, "query_start_loc", LAP, Int32, Vec, Batch, Input, None, &m.query_start_loc)     \
  X(StateIndicesTensor, "state_indices_tensor", LAP, Int32, Vec, Group, Rows, Graph,               \
    &m.state_indices_tensor)                                                                       \
  X(SpecQueryLen, "spec_query_len", PSC, Int32, Vec, Batch, None, None, &m.spec_query_len)         \
  X(MaxPrefillQueryLen, "max_prefill_query_len", PSC, Int32, Vec, Batch, None, None,               \
    &m.max_prefill_query_len)                                                                      \
  X(HasInitialStatesD, "has_initial_states_d", PSC, Bool, Vec, Batch, Rows, Graph,                 \
    &m.has_initial_states_d)                                                                       \
  X(NumDecodeDraftTokensCpu, "num_decode_draft_tokens_cpu", PSC, Int32, Vec, Batch, Host, None,    \
    &m.num_decode_draft_tokens_cpu)                                                                \
  X(ReplaySsmRows, "replayssm_rows", MB, Int32, Vec, Batch, None, None, &m.replayssm_rows)         \
  X(ReplaySsmSeqLensD, "replayssm_seq_lens_d", MB, Int32, Vec, Batch, Input, None,                 \
    &m.replayssm_seq_lens_d)                                                                       \
  X(ReplaySsmAlignBlockSize, "replayssm_align_block_size", MB, Int32, Vec, Batch, None, None,      \
    &m.replayssm_align_block_size)                                                                 \
  X(BlockTable, "block_table", INK, Int32, Vec, Group, Input, None, &m.block_table)                \
  X(SeqIdx, "seq_idx", INK, Int32, Vec, Batch, Tokens, None, &m.seq_idx)                           \
  X(QueryStart, "query_start", INK, Int32, Vec, Batch, Tokens, None, &m.query_start)               \
  LINMETA_SGLANG_ROWS(X)                                                                           \
  X(KeptSeqLens, "", All, Int32, Vec, Batch, Rows, None, nullptr)

/// Row ids of the output table.
enum class Out : int32_t {
#define LINMETA_OUT_ID(id, ...) id,
  LINMETA_OUTPUTS(LINMETA_OUT_ID)
#undef LINMETA_OUT_ID
      Count
};
inline constexpr int32_t kNumOutputs = static_cast<int32_t>(Out::Count);

/// What a row of the table is, from its Metadata member's C++ type.
enum class FieldType : int32_t {
  Count,        ///< int32_t
  OptionalInt,  ///< std::optional<int32_t>: None when absent
  Flag,         ///< bool
  Array,        ///< Array: None when not present
  Table,        ///< BlockTable: the caller's block table
  Composite     ///< std::optional<a struct of further rows>: None when absent
};

/// A row's member in one Metadata: `ptr` is null when the row's parent composite is absent.
struct FieldRef {
  FieldType type = FieldType::Array;
  void* ptr = nullptr;
  /// Composites: whether present, and making it present (default members) or absent.
  bool (*composite_present)(const void*) = nullptr;
  void (*composite_set)(void*, bool) = nullptr;

  [[nodiscard]] explicit operator bool() const { return ptr != nullptr; }
  [[nodiscard]] int32_t& count() const { return *static_cast<int32_t*>(ptr); }
  [[nodiscard]] std::optional<int32_t>& optional_int() const {
    return *static_cast<std::optional<int32_t>*>(ptr);
  }
  [[nodiscard]] bool& flag() const { return *static_cast<bool*>(ptr); }
  [[nodiscard]] Array& array() const { return *static_cast<Array*>(ptr); }
  [[nodiscard]] BlockTable& table() const { return *static_cast<BlockTable*>(ptr); }
  /// Whether the field holds a value (a present array, a set optional, a present
  /// composite; counts, flags and tables always do).
  [[nodiscard]] bool present() const {
    switch (type) {
      case FieldType::OptionalInt:
        return optional_int().has_value();
      case FieldType::Array:
        return array().present;
      case FieldType::Composite:
        return composite_present(ptr);
      default:
        return true;
    }
  }
};

namespace detail {
inline FieldRef field_ref(int32_t* p) { return {FieldType::Count, p}; }
inline FieldRef field_ref(std::optional<int32_t>* p) { return {FieldType::OptionalInt, p}; }
inline FieldRef field_ref(bool* p) { return {FieldType::Flag, p}; }
inline FieldRef field_ref(Array* p) { return {FieldType::Array, p}; }
inline FieldRef field_ref(BlockTable* p) { return {FieldType::Table, p}; }
template <class T>
FieldRef field_ref(std::optional<T>* p) {
  return {FieldType::Composite, p,
          [](const void* q) { return static_cast<const std::optional<T>*>(q)->has_value(); },
          [](void* q, bool on) {
            auto& o = *static_cast<std::optional<T>*>(q);
            if (on && !o)
              o.emplace();
            else if (!on)
              o.reset();
          }};
}
inline FieldRef field_ref(std::nullptr_t) { return {}; }
}  // namespace detail

struct OutputSpec {
  Out id;
  const char* name;  ///< vLLM's name, dotted inside composites; empty for internal rows
  uint32_t kinds;    ///< kinds::* mask of the builders that have the field
  DType dtype;
  Shape shape;
  Scope scope;
  Cap eager;
  Cap staged;
  FieldRef (*field)(Metadata& m);  ///< the Metadata member

  [[nodiscard]] constexpr bool is_output() const { return name[0] != '\0'; }
  [[nodiscard]] constexpr bool has(BuilderKind kind) const { return (kinds & kind_bit(kind)) != 0; }
  /// A member of a composite (a dotted name).
  [[nodiscard]] bool nested() const { return std::strchr(name, '.') != nullptr; }
  /// The last component of the name ("state_indices" of "checkpoint.state_indices").
  [[nodiscard]] const char* leaf() const {
    const char* dot = std::strrchr(name, '.');
    return dot != nullptr ? dot + 1 : name;
  }
  /// Array memory: the caller's (Input), the plan's host memory (Host), else the target's.
  [[nodiscard]] constexpr bool host_memory() const { return eager == Cap::Host; }
  [[nodiscard]] constexpr bool caller_memory() const { return eager == Cap::Input; }
};

inline constexpr OutputSpec kOutputs[] = {
#define LINMETA_OUT_ROW(id, name, kinds_, dtype, shape, scope, eager, staged, member) \
  {Out::id,                                                                           \
   name,                                                                              \
   kinds::kinds_,                                                                     \
   DType::dtype,                                                                      \
   Shape::shape,                                                                      \
   Scope::scope,                                                                      \
   Cap::eager,                                                                        \
   Cap::staged,                                                                       \
   [](Metadata& m) -> FieldRef {                                                      \
     static_cast<void>(m);                                                            \
     return detail::field_ref(member);                                                \
   }},
    LINMETA_OUTPUTS(LINMETA_OUT_ROW)
#undef LINMETA_OUT_ROW
};
static_assert(sizeof(kOutputs) / sizeof(kOutputs[0]) == kNumOutputs);

[[nodiscard]] constexpr const OutputSpec& output_spec(Out id) {
  return kOutputs[static_cast<int32_t>(id)];
}

/// The output row named `name` (vLLM's name, "a.b" for member b of composite a), or null.
[[nodiscard]] inline const OutputSpec* find_output(std::string_view name) {
  for (const OutputSpec& row : kOutputs)
    if (row.is_output() && name == row.name) return &row;
  return nullptr;
}

/// Calls f(const OutputSpec&, FieldRef) for every output field of builder kind `kind`
/// whose parent is present in `m` (absent fields included: check `FieldRef::present()`),
/// in table order (parents before their members). The FieldRef points into `m`.
template <class M, class F>
void for_each_field(M& m, BuilderKind kind, F&& f) {
  auto& mutable_m = const_cast<Metadata&>(static_cast<const Metadata&>(m));
  for (const OutputSpec& spec : kOutputs) {
    if (!spec.is_output() || !spec.has(kind)) continue;
    if (const FieldRef r = spec.field(mutable_m)) f(spec, r);
  }
}

/// Calls f(const OutputSpec&, const Array&) for every array field of builder kind `kind`
/// whose parent is present (absent arrays included: check `array.present`), in table order.
template <class F>
void for_each_array(const Metadata& m, BuilderKind kind, F&& f) {
  for_each_field(m, kind, [&](const OutputSpec& spec, const FieldRef& r) {
    if (r.type == FieldType::Array) f(spec, static_cast<const Array&>(r.array()));
  });
}

}  // namespace linmeta
