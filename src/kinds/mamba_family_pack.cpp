// Packing the Mamba family's fields (docs/semantics.md M3–M5).
#include <cstdint>

#include "../packer.hpp"
#include "kind_rules.hpp"
#include "mamba_family.hpp"

namespace linmeta::detail {

void pack_mamba_gathers(Packer& k) {
  const int32_t n = k.p.num_reqs;
  const int32_t nd = k.p.num_decodes, np = k.p.num_prefills;
  const int32_t S = k.p.spec_state_cols;
  // Staged: the persistent [D, S] buffer's first num_reqs rows (= the decode rows: a step
  // with no prefills has only decode rows).
  const int32_t rows = k.p.stage_decode ? n : nd;
  k.emit(Out::StateIndicesTensorD, k.p.stage_decode, rows * S,
         GatherState{
             .rows = kIdentity, .n_real = nd, .n_rows = rows, .cols = 0, .pad = StatePad::Null})
      .rows = rows;
  k.emit(Out::StateIndicesTensorP, false, np,
         GatherState{
             .rows = k.ns_rows_at, .n_real = np, .n_rows = np, .cols = 1, .pad = StatePad::Null});
}

void pack_mamba_accepted(Packer& k, bool stage_qsl_d) {
  const int32_t n = k.p.num_reqs;
  const int32_t nd = k.p.num_decodes;
  switch (k.p.mamba.accepted) {
    case MambaAccepted::None:
      break;
    case MambaAccepted::Passthrough:  // a capture build's are the query lengths
      if (k.p.mamba.accepted_from_query_lens)
        k.emit(Out::NumAcceptedTokens, false, n, AcceptedCounts{.rows = kIdentity, .n_real = n});
      else
        k.input(Out::NumAcceptedTokens, StepInput::Accepted, n);
      break;
    case MambaAccepted::DecodeRows:
      k.emit(Out::NumAcceptedTokens, k.p.stage_decode, k.p.stage_decode ? n : nd,
             AcceptedCounts{.rows = kIdentity, .n_real = nd});
      k.emit(Out::QueryStartLocD, k.p.stage_decode && stage_qsl_d, nd + 1,
             CopyValues{.src = k.qsl_at, .n_real = nd + 1, .add = 0});
      break;
  }
}

void pack_mamba_fields(Packer& k) {
  const int32_t n = k.p.num_reqs;
  const int32_t nd = k.p.num_decodes, np = k.p.num_prefills;
  k.input(Out::SeqLens, StepInput::SeqLens, n);
  pack_mamba_accepted(k, false);
  if (np > 0) {
    k.emit(Out::HasInitialStatesP, false, np, InitialState{.rows = k.ns_rows_at}, DType::Bool);
    k.emit(Out::QueryStartLocP, false, np + 1,
           CopyValues{.src = k.qsl_at + nd, .n_real = np + 1, .add = -k.p.num_decode_tokens});
  }
  // M6: ReplaySSM's Triton path, over the decode rows (staged: the [:num_reqs] rows).
  if (k.c.use_replayssm && nd > 0) {
    k.set(Out::ReplaySsmRows, k.p.stage_decode ? n : nd);
    if (k.c.mamba_cache_mode == CacheMode::Align) {
      k.input(Out::ReplaySsmSeqLensD, StepInput::SeqLens, n);
      k.set(Out::ReplaySsmAlignBlockSize, k.c.block_size);
    }
  }
  const KindRules& rules = kind_rules(k.kind);
  if (rules.pack_extra != nullptr) rules.pack_extra(k);
}

}  // namespace linmeta::detail
