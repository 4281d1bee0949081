// Mamba2 (vLLM 0.34's Mamba2AttentionMetadataBuilder, mamba2_attn.py): the Mamba family's
// rules plus its SSD chunk size, prefill checkpoints over the prefill rows (M4) and the SSD
// chunk metadata (M5).
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "../checkpoint_rule.hpp"
#include "../packer.hpp"
#include "../plan_context.hpp"
#include "../validate.hpp"
#include "kind_rules.hpp"
#include "linmeta/error.hpp"
#include "mamba_family.hpp"

namespace linmeta::detail {

namespace {

void check_config(const Config& c) {
  if (c.chunk_size <= 0)
    reject(
        fmt::format("config.chunk_size = {} must be positive for Mamba2 (vLLM's "
                    "model_config.get_mamba_chunk_size())",
                    c.chunk_size));
}

/// M5 (Mamba2): vLLM's _compute_chunk_metadata over the prefill rows. Each row's query is
/// cut into chunks that never cross a sequence or a multiple of chunk_size in the row's
/// absolute token positions; a checkpoint splits the row into two segments so that a chunk
/// ends exactly on it. Python's integer semantics throughout (a host upper bound below the
/// query length gives a negative computed count, as in vLLM).
void plan_chunks(Ctx& x) {
  StepPlan& p = x.p;
  const int64_t C = x.c.chunk_size;
  const int32_t first = p.num_decodes;
  int64_t pos = 0;
  int32_t chunks = 0;
  const auto capacity = static_cast<int32_t>(p.mamba.seq_idx.size());
  auto chunk = [&](int32_t seq, int64_t len) {
    if (chunks == capacity) throw InternalError("Mamba2 chunk metadata exceeds its capacity");
    p.mamba.seq_idx[chunks] = seq;
    p.mamba.cu_chunk[chunks] = static_cast<int32_t>(pos);
    ++chunks;
    pos += len;
  };
  // One segment: `tokens` tokens after `computed` ones; returns its last chunk.
  auto segment = [&](int32_t seq, int64_t computed, int64_t tokens) {
    if (py_mod(computed, C) != 0) {  // finish the chunk the computed tokens left open
      const int64_t len = std::min(ceil_div(computed, C) * C - computed, tokens);
      chunk(seq, len);
      tokens -= len;
    }
    for (int64_t i = ceil_div(tokens, C); i > 0; --i) {
      const int64_t len = std::min(C, tokens);
      chunk(seq, len);
      tokens -= len;
    }
    return chunks - 1;
  };
  bool any_checkpoint = false;
  for (int32_t i = 0; i < p.num_prefills; ++i) {
    const int32_t r = first + i;
    const int64_t q = p.ql(r);
    const int64_t computed = static_cast<int64_t>(x.s.seq_lens_cpu_upper_bound[r]) - q;
    const int64_t ckpt = p.checkpoint.present ? p.checkpoint.offsets[i] : 0;
    p.mamba.ckpt_chunk[i] = 0;  // vLLM's max(idx, 0): 0 where the row has no checkpoint
    if (ckpt != 0) {
      p.mamba.ckpt_chunk[i] = segment(i, computed, ckpt);
      any_checkpoint = true;
    }
    p.mamba.last_chunk[i] = segment(i, computed + ckpt, q - ckpt);
  }
  p.mamba.cu_chunk[chunks] = static_cast<int32_t>(pos);
  p.mamba.num_chunks = chunks;
  p.mamba.chunks = true;
  p.mamba.checkpoint_chunks = any_checkpoint;
}

/// M4 / M5: prep_initial_states, checkpoints over the prefill rows, the SSD chunks.
void plan_prefill(Ctx& x) {
  StepPlan& p = x.p;
  const int32_t* ub = x.s.seq_lens_cpu_upper_bound.data();
  for (int32_t r = p.num_decodes; r < p.num_reqs; ++r)
    p.mamba.prep_initial_states = p.mamba.prep_initial_states || ub[r] > p.ql(r);
  p.checkpoint.rows = p.ns_rows;
  plan_checkpoints(x);
  plan_chunks(x);
}

/// M5: the chunk size, prep_initial_states and the chunk arrays.
void pack_extra(Packer& k) {
  const int32_t np = k.p.num_prefills;
  k.set(Out::PrepInitialStates, k.p.mamba.prep_initial_states ? 1 : 0);
  k.set(Out::ChunkSize, k.c.chunk_size);
  if (!k.p.mamba.chunks) return;
  const int32_t chunks = k.p.mamba.num_chunks;
  k.emit(Out::CuChunkSeqlenP, false, chunks + 1,
         CopyValues{
             .src = k.put(k.p.mamba.cu_chunk.data(), chunks + 1), .n_real = chunks + 1, .add = 0});
  k.emit(Out::SeqIdxP, false, chunks,
         CopyValues{.src = k.put(k.p.mamba.seq_idx.data(), chunks), .n_real = chunks, .add = 0});
  k.emit(Out::LastChunkIndicesP, false, np,
         CopyValues{.src = k.put(k.p.mamba.last_chunk.data(), np), .n_real = np, .add = 0});
  if (k.p.mamba.checkpoint_chunks)
    k.emit(Out::CheckpointChunkIdx, false, np,
           CopyValues{.src = k.put(k.p.mamba.ckpt_chunk.data(), np), .n_real = np, .add = 0},
           DType::Int64);
}

void largest(StepPlan& p) {
  p.mamba.chunks = p.mamba.checkpoint_chunks = true;
  p.mamba.num_chunks = static_cast<int32_t>(p.mamba.seq_idx.size());
}

}  // namespace

extern constinit const KindRules kMamba2Rules = [] {
  KindRules r = mamba_family_row(BuilderKind::Mamba2);
  r.ssd_chunks = true;
  r.checkpoints = true;
  r.checkpoint_alignment = 1;  // vLLM's Mamba2 layer
  r.check_config = check_config;
  r.largest = largest;
  r.checkpoint_meta = true;
  r.mamba_counts = true;
  r.plan_prefill = plan_prefill;
  r.pack_extra = pack_extra;
  return r;
}();

}  // namespace linmeta::detail
