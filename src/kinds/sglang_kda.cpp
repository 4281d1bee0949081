// SGLang 0.5.23's KDAAttnBackend (attention/linear/kda_backend.py), docs/sglang.md "KDA": the
// common part's ForwardMetadata as GDN's (per-sequence chunk grids, the tracked rows and
// their destinations on a tracked step), without GDN's conv block table; its graph entries
// and CPU-graph capture are the common part's. The breakable prefill-graph tables
// (SglangEntry::PrefillGraph: KDAPrefillGraphMetadata.fill, kda_prefill_graph.py) are KDA's
// own: planned here from the host lists, written into the bucket's buffers in the one launch.
// FlashInfer's checkpoint plan (and its prefill-graph wrapper) is not served: the plugin
// leaves it to SGLang.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "../cumsum.hpp"
#include "kind_rules.hpp"
#include "linmeta/sglang.hpp"
#include "sglang_family.hpp"

namespace linmeta::detail {

namespace {

static_assert(kSglangConvBlock == kConvBlock, "CAUSAL_CONV1D_FWD_BLOCK_M is the conv1d block");

/// (sequence, index) rows, counts[r] = ceil(len_r / block) indices per sequence, into the
/// [rows, 2] table at `out`, the tail padded with (pad0, pad1) (_write_pairs).
void write_pairs(int32_t* out, std::span<const int32_t> lens, int32_t block, int64_t rows,
                 int32_t pad0, int32_t pad1) {
  int64_t n = 0;
  for (size_t r = 0; r < lens.size(); ++r) {
    const int32_t count = (lens[r] + block - 1) / block;
    if (n + count > rows) throw InternalError("sglang prefill graph: a pair table overflowed");
    for (int32_t j = 0; j < count; ++j, ++n) {
      out[2 * n] = static_cast<int32_t>(r);
      out[2 * n + 1] = j;
    }
  }
  for (; n < rows; ++n) {
    out[2 * n] = pad0;
    out[2 * n + 1] = pad1;
  }
}

/// KDAPrefillGraphMetadata.fill (and _write_host_tables, build_track_rows): the bucket's
/// bounds checked, the packed host tables, the rows of the device tables.
void plan_prefill_graph(Ctx& x) {
  const SglangStep& s = *x.s.sglang;
  validate_sglang_step(x.c, s);
  const SglangPrefillGraph& pg = s.prefill_graph;
  SglangPlan& g = x.p.sgl;
  g.step = &s;
  g.bs = s.batch_size;
  x.p.num_reqs = g.bs;
  if (pg.packed == nullptr || pg.cache_indices == nullptr || pg.has_initial_state == nullptr)
    reject(
        "sglang.prefill_graph: packed, cache_indices and has_initial_state (the bucket's "
        "buffers) must not be null");
  if (pg.num_tokens < 0 || pg.num_tokens > x.c.max_num_batched_tokens)
    reject(fmt::format(
        "sglang.prefill_graph.num_tokens = {} is outside [0, max_num_batched_tokens = {}]",
        pg.num_tokens, x.c.max_num_batched_tokens));
  if (pg.max_seqs < 1 || pg.max_seqs > x.c.max_num_seqs)
    reject(fmt::format("sglang.prefill_graph.max_seqs = {} is outside [1, max_num_seqs = {}]",
                       pg.max_seqs, x.c.max_num_seqs));
  const SglangPrefillGraphLayout l = SglangPrefillGraphLayout::of(pg.num_tokens, pg.max_seqs);
  if (pg.packed_len != l.total)
    reject(fmt::format(
        "sglang.prefill_graph.packed_len = {}: a bucket of {} tokens and {} sequences packs {} "
        "words",
        pg.packed_len, pg.num_tokens, pg.max_seqs, l.total));
  if (s.extend_seq_lens.empty() || s.extend_prefix_lens.empty())
    reject(
        "sglang.extend_seq_lens and extend_prefix_lens (extend_seq_lens_cpu, "
        "extend_prefix_lens_cpu) are required by the prefill-graph tables");
  const int32_t bs = g.bs;
  if (bs > pg.max_seqs)
    reject(fmt::format(
        "sglang.batch_size = {} sequences exceed the bucket's prefill_graph.max_seqs = {}", bs,
        pg.max_seqs));
  plan_extend_qsl(g, s);
  const int32_t total = g.qsl[bs];
  if (total > pg.num_tokens)
    reject(
        fmt::format("sglang.extend_seq_lens sum to {} tokens, more than the bucket's "
                    "prefill_graph.num_tokens = {}",
                    total, pg.num_tokens));
  if (s.track && !pg.track)
    reject(
        "sglang.track: a prefix-cache tracked batch on a bucket without track tables "
        "(prefill_graph.track is false)");
  g.has_track_mask = any_tracked(s);
  if (g.has_track_mask) {
    if (pg.track_dst == nullptr)
      reject("sglang.prefill_graph.track_dst is null on a tracked batch");
    plan_extend_track(x.c, x.kind, g, s);  // build_track_rows
  }
  g.prefill_graph = true;
  g.pg_len = static_cast<int32_t>(l.total);
  g.pg_rows = pg.max_seqs;
  g.pg_slots = s.original_batch_size >= 0 ? std::min(bs, s.original_batch_size) : bs;
  g.pg_track_dst = g.has_track_mask;
  plan_initial_states(g, s, bs);

  // _write_host_tables, in packed order. Padded sequences are empty and sit at the end.
  int32_t* t = g.pg_table.data();
  const int32_t S = pg.max_seqs;
  for (int32_t i = 0; i <= S; ++i) t[l.cu_seqlens + i] = g.qsl[std::min(i, bs)];
  write_pairs(t + l.chunk_indices, s.extend_seq_lens, kSglangKdaChunk, l.max_chunks, 0,
              kSglangPadChunk);
  int32_t* offsets = t + l.chunk_offsets;
  ceil_cumsum(g.qsl.data(), bs, kSglangKdaChunk, offsets, nullptr);
  std::fill(offsets + bs + 1, offsets + S + 1, offsets[bs]);
  write_pairs(t + l.conv_block_table, s.extend_seq_lens, kSglangConvBlock, l.max_conv_blocks,
              kPadSlotId, 0);
  int32_t* chunk_idx = t + l.track_chunk_idx;
  int32_t* mode = t + l.track_mode;
  int32_t* conv_start = t + l.track_conv_start;
  std::fill_n(chunk_idx, S, -1);
  std::fill_n(mode, S, 0);
  std::fill_n(conv_start, S, 0);
  if (g.has_track_mask) {
    for (int32_t i = 0; i < g.n_unaligned; ++i) {
      const int32_t r = g.unaligned[i];
      chunk_idx[r] = g.chunk_idx[r];
      mode[r] = kSglangTrackChunkState;
    }
    for (int32_t i = 0; i < g.n_final; ++i) mode[g.final_rows[i]] = kSglangTrackFinalState;
    for (int32_t i = 0; i < g.n_tracked; ++i) conv_start[g.tracked[i]] = g.conv_start[i];
  }
  t[l.num_logical_tokens] = total;
}

void plan(Ctx& x) {
  if (x.s.sglang != nullptr && x.s.sglang->entry == SglangEntry::PrefillGraph)
    return plan_prefill_graph(x);
  plan_sglang_common(x);
  SglangPlan& g = x.p.sgl;
  if (g.plain || g.graph) return;
  plan_track_mask_indices(g, *g.step);
}

/// The bucket's tables: the packed host tables (one copy into `packed`, and SGLang's host
/// staging written on the host), the slots (-1 past the batch and past
/// original_batch_size), has_initial_state (False past the batch), track_dst[:bs].
void pack_prefill_graph(Packer& k) {
  const SglangPlan& g = k.p.sgl;
  static const SglangStep kNone{};
  const SglangStep& s = g.step != nullptr ? *g.step : kNone;  // count mode: none
  const SglangPrefillGraph& pg = s.prefill_graph;
  k.set(Out::Sglang);  // present, every field at its default: the tables are the bucket's
  const int32_t refs = pack_sglang_refs(k, s);
  const int32_t table = k.put(g.pg_table.data(), g.pg_len);
  k.emit_to(pg.packed, g.pg_len, CopyValues{.src = table, .n_real = g.pg_len, .add = 0});
  k.emit_to(pg.cache_indices, g.pg_rows,
            SglangSlots{.refs = refs, .rows = kIdentity, .n_real = g.pg_slots});
  k.emit_to(pg.has_initial_state, g.pg_rows,
            CopyMask{.src = k.put(g.initial.data(), g.bs), .n_real = g.bs}, DType::Bool);
  if (g.pg_track_dst)
    k.emit_to(pg.track_dst, g.bs,
              SglangCopy{.refs = refs,
                         .rows = kIdentity,
                         .src = static_cast<int32_t>(SglangSource::TrackIndices)},
              DType::Int64);
  // SGLang's numpy staging holds the same words (written here, on the host, after every
  // check: a step that fails before this leaves it untouched).
  if (!k.counting() && pg.host != nullptr)
    std::memcpy(pg.host, g.pg_table.data(), sizeof(int32_t) * static_cast<size_t>(g.pg_len));
}

void pack_gathers(Packer&) {}

void pack_fields(Packer& k) {
  if (k.p.sgl.prefill_graph || k.counting()) pack_prefill_graph(k);
  if (k.p.sgl.prefill_graph) return;
  pack_sglang_common(k);
  if (k.p.sgl.mask_indices || k.counting()) pack_track_mask_indices(k);
}

}  // namespace

extern constinit const KindRules kSglangKdaRules = [] {
  KindRules r = sglang_family_row(BuilderKind::SglangKda);
  r.plan = plan;
  r.pack_gathers = pack_gathers;
  r.pack_fields = pack_fields;
  return r;
}();

}  // namespace linmeta::detail
