// Packing the GDN family's fields (SPEC §7, rules R2–R5, K2–K6): the state gathers, masks,
// token indices, cumulative lengths, accepted counts and prefill extras of GDN and KDA.
// The kinds differ only where a `kda(k)` test says so.
#include <algorithm>
#include <cstdint>

#include "../packer.hpp"
#include "gdn_family.hpp"

namespace linmeta::detail {

namespace {

bool kda(const Packer& k) { return k.kind == BuilderKind::Kda; }

// Rows staged into the persistent buffers: the request count, cut to the buffer
// (the reference slices a [D]-sized tensor with [:num_reqs]).
void gdn_gathers(Packer& k) {
  const int32_t B = k.p.num_reqs;
  const int32_t D = k.c.decode_cudagraph_max_bs(k.kind);
  const int32_t S = k.p.spec_state_cols;
  const int32_t N = k.p.num_spec_decodes;
  if (k.p.path != Path::NoSpec) {
    const int32_t rows = k.p.stage_spec ? (kda(k) ? B : std::min(B, D)) : N;
    // cols 0: each group's own spec columns (a table narrower than S gives fewer).
    k.emit(Out::SpecStateIndices, k.p.stage_spec, rows * S,
           GatherState{
               .rows = k.sp_rows_at, .n_real = N, .n_rows = rows, .cols = 0, .pad = StatePad::Null})
        .rows = rows;
  }
  if (k.p.ns_state) {
    const int32_t rows = k.p.stage_decode ? std::min(B, D) : k.p.ns_rows.n;
    const int32_t real = k.p.stage_decode ? k.p.num_decodes : k.p.ns_rows.n;
    k.emit(Out::NonSpecStateIndices, k.p.stage_decode, rows,
           GatherState{.rows = k.ns_rows_at,
                       .n_real = real,
                       .n_rows = rows,
                       .cols = 1,
                       .pad = StatePad::Null});
    // Decodes peeled off the front in a mixed non-spec batch (SPEC §7 C).
    if (k.p.gdn.prefill_fields)
      k.view(Out::PrefillStateIndices) =
          Packer::slice(k.view(Out::NonSpecStateIndices), k.p.gdn.peel_rows);
  }
  // The reference hands the spec fields themselves to the RecoverSSM commit metadata.
  if (k.p.gdn.recoverssm_commit) {
    k.set(Out::RecoverSsmCommit);
    k.view(Out::RecoverSsmStateIndices) = k.view(Out::SpecStateIndices);
    if (k.p.gdn.commit_align) {
      k.set(Out::RecoverSsmAlign);
      k.input(Out::RecoverSsmBlockTable, StepInput::BlockTable, B);
    }
  }
}

void masks_and_tokens(Packer& k) {
  const int32_t B = k.p.num_reqs;
  const int32_t D = k.c.decode_cudagraph_max_bs(k.kind);
  if (k.p.gdn.mask_output) {
    k.host(Out::SpecSequenceMasksCpu, k.p.gdn.mask_host, B);
    if (k.p.stage_spec)
      k.emit(Out::SpecSequenceMasks, true, std::min(B, D),
             CopyMask{.src = k.mask_at, .n_real = k.p.num_spec_decodes}, DType::Bool);
    else
      k.emit(Out::SpecSequenceMasks, false, B, CopyMask{.src = k.mask_at, .n_real = B},
             DType::Bool);
  }
  if (k.p.tokens == StepPlan::Tokens::Arange) {  // int32, as the reference's torch.arange
    k.emit(Out::SpecTokenIndx, k.p.stage_spec, k.p.arange_len, Arange{});
    k.emit(Out::NonSpecTokenIndx, k.p.stage_spec, 0, Arange{});
  } else if (k.p.tokens == StepPlan::Tokens::Partition) {
    k.token_partition();
  }
}

void cumsums_and_accepted(Packer& k) {
  const int32_t B = k.p.num_reqs;
  const int32_t D = k.c.decode_cudagraph_max_bs(k.kind);
  const int32_t N = k.p.num_spec_decodes;
  if (k.p.path != Path::NoSpec) {
    const bool st = k.p.stage_spec;
    // Staged: the reference slices [:B + 1] / [:B] of [D + 1] / [D] buffers, also where KDA
    // RecoverSSM stages more than D rows of state indices (N <= D: every spec row has tokens).
    const int32_t rows = st ? std::min(B, D) : N;
    k.emit(Out::SpecQueryStartLoc, st, rows + 1,
           CopyValues{.src = k.sp_qsl_at, .n_real = N + 1, .add = 0});
    k.emit(Out::NumAcceptedTokens, st, rows, AcceptedCounts{.rows = k.sp_rows_at, .n_real = N});
    if (k.p.gdn.recoverssm_commit)
      k.view(Out::RecoverSsmQueryStartLoc) = k.view(Out::SpecQueryStartLoc);
  }
  if (k.p.ns_qsl_output) {
    const int32_t ns = k.p.ns_qsl.n;
    const bool st = k.p.stage_decode && !kda(k);
    const int32_t rows = st ? std::min(B, D) : ns;
    const int32_t real = st ? k.p.num_decodes : ns;
    k.emit(Out::NonSpecQueryStartLoc, st, rows + 1,
           CopyValues{.src = k.ns_qsl_at, .n_real = real + 1, .add = 0});
  }
}

void prefill(Packer& k) {
  const int32_t ns = k.p.ns_rows.n;
  if (k.p.has_initial_state)
    k.emit(Out::HasInitialState, false, ns, InitialState{.rows = k.ns_rows_at}, DType::Bool);
  if (!k.p.gdn.prefill_fields) return;
  // Decodes peeled off the front in a mixed non-spec batch (SPEC §7 C).
  const int32_t peel = k.p.gdn.peel_rows;
  k.view(Out::PrefillHasInitialState) = Packer::slice(k.view(Out::HasInitialState), peel);
  if (peel > 0)
    k.emit(Out::PrefillQueryStartLoc, false, ns - peel + 1,
           CopyValues{
               .src = k.ns_qsl_at + peel, .n_real = ns - peel + 1, .add = -k.p.gdn.peel_tokens});
  else
    k.view(Out::PrefillQueryStartLoc) = k.view(Out::NonSpecQueryStartLoc);
  if (k.p.gdn.chunks) {
    const int32_t offsets = k.put(k.p.gdn.chunk_offsets.data(), k.p.gdn.chunk_seqs + 1);
    const int32_t starts = k.put(k.p.gdn.chunk_starts.data(), k.p.gdn.chunk_nonempty + 1);
    const int32_t chunks = k.p.gdn.chunk_offsets[static_cast<size_t>(k.p.gdn.chunk_seqs)];
    k.emit(Out::ChunkIndices, false, chunks,
           ChunkIndexPairs{.n_nonempty = k.p.gdn.chunk_nonempty, .starts = starts});
    k.emit(Out::ChunkOffsets, false, k.p.gdn.chunk_seqs + 1,
           CopyValues{.src = offsets, .n_real = k.p.gdn.chunk_seqs + 1, .add = 0}, DType::Int64);
  }
}

/// vllm-0.34 FlashInfer prefill fields (docs/semantics.md R5, K6), int64 as vLLM's.
void flashinfer_extras(Packer& k) {
  if (k.p.gdn.fi_checkpoint_plan) {
    const int32_t n = k.p.gdn.fi_prefill_rows + 1;
    k.set(Out::FlashInferCheckpointPlan);
    k.set(Out::FlashInferCheckpointEveryN, k.p.gdn.fi_every_n);
    k.set(Out::FlashInferCheckpointCount,
          k.p.gdn.fi_cu_starts[static_cast<size_t>(k.p.gdn.fi_prefill_rows)]);
    k.emit(Out::FlashInferCheckpointCuStarts, false, n,
           CopyValues{.src = k.put(k.p.gdn.fi_cu_starts.data(), n), .n_real = n, .add = 0},
           DType::Int64);
    const int32_t rows = k.p.ns_rows.n;
    k.emit(Out::FlashInferCheckpointRows, false, rows,
           CopyValues{.src = k.put(k.p.gdn.fi_rows.data(), rows), .n_real = rows, .add = 0},
           DType::Int64);
  }
  if (k.p.gdn.fi_prefill_qsl) {
    const int32_t n = k.p.ns_qsl.n + 1;
    k.emit(Out::FlashInferPrefillQueryStartLoc, false, n,
           CopyValues{.src = k.ns_qsl_at, .n_real = n, .add = 0}, DType::Int64);
  }
  if (k.p.gdn.fi_seq_order) {
    const int32_t n = k.p.ns_qsl.n;
    k.emit(Out::FlashInferPrefillSeqOrder, false, n,
           CopyValues{.src = k.put(k.p.gdn.fi_order.data(), n), .n_real = n, .add = 0});
  }
}

void kda_extras(Packer& k) {
  if (k.p.gdn.request_indices)
    k.emit(Out::RecoverSsmRequestIndices, false, k.p.sp_rows.n,
           CopyValues{.src = k.sp_rows_at, .n_real = k.p.sp_rows.n, .add = 0});
  if (k.p.gdn.commit_align) {
    k.emit(Out::RecoverSsmNumComputed, false, k.p.num_reqs, ComputedTokens{});
    k.set(Out::RecoverSsmBlockSize, k.c.block_size);
  }
}

}  // namespace

void pack_gdn_gathers(Packer& k) { gdn_gathers(k); }

void pack_gdn_fields(Packer& k) {
  masks_and_tokens(k);
  cumsums_and_accepted(k);
  prefill(k);
  kda_extras(k);  // KDA's RecoverSSM fields (never planned for GDN)
  flashinfer_extras(k);
}

}  // namespace linmeta::detail
