// SGLang 0.5.23's MambaAttnBackendBase: the common part of every SGLang kind (docs/sglang.md,
// "The common part", "Graph entries"). Rows are SGLang's, never reordered; a row's state slot
// is mamba_map[req_pool_indices[row]], gathered on the target.
#include "sglang_family.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "../validate.hpp"
#include "linmeta/names.hpp"
#include "linmeta/sglang.hpp"

namespace linmeta::detail {

namespace {

bool decode_or_idle(SglangMode m) { return m == SglangMode::Decode || m == SglangMode::Idle; }

void check_mode(SglangMode m, const char* field) {
  if (static_cast<int32_t>(m) < 0 || static_cast<int32_t>(m) > 5)
    reject(fmt::format("sglang.{} = {} is no ForwardMode the linear-attention backends serve",
                       field, static_cast<int32_t>(m)));
}

void sized(const char* field, size_t size, int32_t bs, bool optional) {
  if (optional && size == 0) return;
  if (size != static_cast<size_t>(bs))
    reject(fmt::format("sglang.{} has {} entries, expected batch_size = {}", field, size, bs));
}

}  // namespace

void validate_sglang_step(const Config& c, const SglangStep& s) {
  const int32_t bs = s.batch_size;
  if (bs < 1 || bs > c.max_num_seqs)
    reject(fmt::format("sglang.batch_size = {} is outside [1, max_num_seqs = {}]", bs,
                       c.max_num_seqs));
  if (static_cast<int32_t>(s.entry) < 0 || static_cast<int32_t>(s.entry) > 4)
    reject(fmt::format("sglang.entry = {} is no entry point", static_cast<int32_t>(s.entry)));
  check_mode(s.forward_mode, "forward_mode");
  check_mode(s.logical_mode, "logical_mode");
  if (s.num_tokens < 0 || s.num_tokens > c.max_num_batched_tokens)
    reject(fmt::format("sglang.num_tokens = {} is outside [0, max_num_batched_tokens = {}]",
                       s.num_tokens, c.max_num_batched_tokens));
  if (s.mamba_map == nullptr || s.mamba_map_len < 1)
    reject("sglang.mamba_map (the request -> state slot map) is null or empty");
  if (s.req_pool_indices == nullptr) reject("sglang.req_pool_indices (device) is null");
  if (s.has_spec_info && s.draft_token_num < 1)
    reject(fmt::format("sglang.draft_token_num = {} must be positive", s.draft_token_num));
  sized("extend_seq_lens", s.extend_seq_lens.size(), bs, true);
  sized("extend_prefix_lens", s.extend_prefix_lens.size(), bs, true);
  sized("seq_lens", s.seq_lens.size(), bs, true);
  int64_t total = 0;
  for (size_t r = 0; r < s.extend_seq_lens.size(); ++r) {
    if (s.extend_seq_lens[r] < 0)
      reject(fmt::format("sglang.extend_seq_lens[{}] = {} is negative", r, s.extend_seq_lens[r]));
    total += s.extend_seq_lens[r];
  }
  if (total > c.max_num_batched_tokens)
    reject(fmt::format("sglang.extend_seq_lens sum to {} > max_num_batched_tokens = {}", total,
                       c.max_num_batched_tokens));
  for (size_t r = 0; r < s.extend_prefix_lens.size(); ++r)
    if (s.extend_prefix_lens[r] < 0)
      reject(fmt::format("sglang.extend_prefix_lens[{}] = {} is negative", r,
                         s.extend_prefix_lens[r]));
  if (s.track) {
    sized("track_mask", s.track_mask.size(), bs, false);
    sized("track_seqlens", s.track_seqlens.size(), bs, true);
    if (s.conv_window < 1 || s.conv_window > kSglangMaxConvWindow)
      reject(fmt::format("sglang.conv_window = {} is outside [1, {}]", s.conv_window,
                         kSglangMaxConvWindow));
    if (s.cache_chunk_size < 1)
      reject(fmt::format("sglang.cache_chunk_size = {} must be positive", s.cache_chunk_size));
  }
  if (s.cache_indices_buf_len < 0)
    reject(fmt::format("sglang.cache_indices_buf_len = {} is negative", s.cache_indices_buf_len));
  if (s.retrieve_rows < 0 || s.retrieve_rows > bs ||
      static_cast<int64_t>(s.retrieve_rows) * s.draft_token_num > c.max_num_batched_tokens)
    reject(fmt::format(
        "sglang.retrieve_rows = {} is outside [0, batch_size = {}] (or its rows of {} tokens "
        "exceed max_num_batched_tokens)",
        s.retrieve_rows, bs, s.draft_token_num));
  if (s.original_batch_size < -1)
    reject(fmt::format("sglang.original_batch_size = {} is negative", s.original_batch_size));
}

void plan_extend_qsl(SglangPlan& g, const SglangStep& s) {
  const int32_t bs = g.bs;
  g.qsl_len = bs + 1;
  g.qsl[0] = 0;
  for (int32_t r = 0; r < bs; ++r) g.qsl[r + 1] = g.qsl[r] + s.extend_seq_lens[r];
}

void plan_extend_track(const Config& c, BuilderKind kind, SglangPlan& g, const SglangStep& s) {
  if (s.track_seqlens.empty())
    reject(
        "sglang.track_seqlens is required: conv-state tracking needs mamba_track_seqlens on an "
        "extend batch");
  if (s.extend_prefix_lens.empty() || s.extend_seq_lens.empty())
    reject("sglang: tracking an extend needs extend_seq_lens and extend_prefix_lens");
  if (s.track_indices == nullptr) reject("sglang.track_indices (device) is null");
  const int64_t C = c.chunk_size, G = s.cache_chunk_size, W = s.conv_window;
  const int64_t last = static_cast<int64_t>(g.qsl[g.bs]) - 1;
  const bool grid = kind_rules(kind).sglang_flat_chunk_grid;
  std::fill_n(g.chunk_idx.begin(), g.bs, -1);
  int32_t h_offset = 0;  // exclusive cumsum of ceil(extend_len / C) (per-sequence grids)
  for (int32_t r = 0; r < g.bs; ++r) {
    const int32_t ext = s.extend_seq_lens[r];
    const int32_t offset = h_offset;
    h_offset += static_cast<int32_t>((ext + C - 1) / C);
    if (!s.track_mask[r]) continue;
    const int64_t len = s.track_seqlens[r] - s.extend_prefix_lens[r];
    if (len < 0 || len > ext)
      reject(fmt::format(
          "sglang.track_seqlens[{}] = {} tracks outside the row's extend (prefix {}, extend {})", r,
          s.track_seqlens[r], s.extend_prefix_lens[r], ext));
    const int32_t t = g.n_tracked++;
    g.tracked[t] = r;
    const int64_t start = g.qsl[r] + floor_div(len, G) * G - W;
    g.conv_start[t] = static_cast<int32_t>(start);
    for (int64_t j = 0; j < W; ++j)
      g.conv[t * W + j] = static_cast<int32_t>(std::min(std::max(start + j, int64_t{0}), last));
    if (len % C == 0) {
      g.final_rows[g.n_final++] = r;
      continue;
    }
    const int64_t chunk = len / C;
    g.chunk_idx[r] = static_cast<int32_t>(chunk);
    g.unaligned[g.n_unaligned++] = r;
    const int64_t end = g.qsl[r] + chunk * C;
    if (grid && end % C != 0) {
      g.re_rows[g.n_re] = r;
      g.re_end[g.n_re++] = static_cast<int32_t>(end);
    } else {
      g.h_rows[g.n_h] = r;
      g.h_src[g.n_h++] = static_cast<int32_t>(grid ? end / C : offset + chunk);
    }
  }
  g.track_extend = true;
}

namespace {

/// _forward_metadata: the eager entry.
void plan_eager(Ctx& x, SglangPlan& g, const SglangStep& s) {
  g.n_real = g.bs;
  if (decode_or_idle(s.logical_mode)) {
    g.qsl_len = g.bs + 1;
    for (int32_t r = 0; r <= g.bs; ++r) g.qsl[r] = r;
    return;
  }
  // The logical mode is an extend (draft-extend-v2 and target verify included).
  const bool extend_meta = !s.extend_seq_lens.empty();
  if (s.forward_mode == SglangMode::DraftExtendV2 && !extend_meta) return;  // None
  if (s.forward_mode == SglangMode::TargetVerify) {
    if (!s.has_spec_info) reject("sglang: a target-verify step needs spec_info");
    const int32_t k = s.draft_token_num;
    g.qsl_len = s.num_tokens / k + 1;
    if (g.qsl_len > x.c.max_num_seqs + 1)
      reject(fmt::format("sglang.num_tokens = {} verifies more than max_num_seqs rows of {} tokens",
                         s.num_tokens, k));
    for (int32_t i = 0; i < g.qsl_len; ++i) g.qsl[i] = i * k;
    if (s.topk > 1) {
      g.retrieve_next_token = g.retrieve_parent_token = s.retrieve_next_token != nullptr;
      g.retrieve_next_sibling = s.retrieve_next_sibling != nullptr;
    }
    return;
  }
  if (!extend_meta)
    reject("sglang.extend_seq_lens (extend_seq_lens_cpu) is required on an extend step");
  plan_extend_qsl(g, s);
  g.logical_num_tokens = g.qsl[g.bs];
  if (g.has_track_mask) plan_extend_track(x.c, x.kind, g, s);
}

/// _replay_metadata (CUDA-graph capture and replay) and _capture_metadata (CPU-graph capture).
void plan_graph(SglangPlan& g, const SglangStep& s) {
  const SglangGraphBuffers& b = s.graph;
  if (b.state_indices == nullptr || b.query_start_loc == nullptr)
    reject("sglang.graph: a graph entry writes state_indices and query_start_loc (null)");
  g.graph = true;
  const bool verify = s.forward_mode == SglangMode::TargetVerify;
  if (!decode_or_idle(s.forward_mode) && !verify)
    reject(fmt::format("sglang: invalid forward mode {} for a graph entry",
                       static_cast<int32_t>(s.forward_mode)));
  if (verify && !s.has_spec_info) reject("sglang: a target-verify step needs spec_info");
  const int32_t k = verify ? s.draft_token_num : 1;
  int32_t pad = 0;
  if (s.entry == SglangEntry::GraphReplay) {
    pad = s.num_padding;
    if (pad < 0)  // counted: the rows of the graph's seq_len fill value (1)
      pad = static_cast<int32_t>(std::count(s.seq_lens.begin(), s.seq_lens.end(), int64_t{1}));
    if (pad > g.bs)
      reject(fmt::format("sglang.num_padding = {} exceeds batch_size = {}", pad, g.bs));
  }
  if (s.entry == SglangEntry::CpuGraphCapture) {
    if (verify)
      reject("sglang: the CPU-graph state has no verify buffers (SGLang's capture fails)");
    g.plain = true;
  }
  const int32_t real = g.bs - pad;
  g.n_real = real;
  g.qsl_len = g.bs + 1;
  for (int32_t r = 0; r <= g.bs; ++r) g.qsl[r] = std::min(r, real) * k;
  if (s.entry == SglangEntry::CpuGraphCapture) return;
  if (s.track_indices != nullptr) {
    if (b.track_indices == nullptr)
      reject("sglang.graph.track_indices (mamba_track_indices_buf) is null on a tracked batch");
    g.track_indices = true;
  }
  if (verify && s.topk > 1) {
    if (b.retrieve_next_token == nullptr || b.retrieve_next_sibling == nullptr ||
        b.retrieve_parent_token == nullptr)
      reject("sglang.graph: tree verify hands out the retrieve_* buffers (null)");
    g.retrieve_next_token = g.retrieve_next_sibling = g.retrieve_parent_token = true;
  }
}

}  // namespace

void plan_sglang_common(Ctx& x) {
  if (x.s.sglang == nullptr)
    reject(fmt::format("the {} builder takes an SGLang step (Step::sglang is null)",
                       names::builder_kind_name(x.kind)));
  const SglangStep& s = *x.s.sglang;
  validate_sglang_step(x.c, s);
  if (s.entry == SglangEntry::PrefillGraph)
    reject(
        fmt::format("sglang.entry = PrefillGraph (KDA's prefill-graph tables) is not the {} "
                    "kind's: sglang_kda serves it",
                    names::builder_kind_name(x.kind)));
  StepPlan& p = x.p;
  SglangPlan& g = p.sgl;
  g.step = &s;
  g.bs = s.batch_size;
  p.num_reqs = g.bs;
  if (s.entry == SglangEntry::Eager) {
    g.track_indices = s.track_indices != nullptr;
    g.has_track_mask = any_tracked(s);
    g.cpu_track = s.track_lists &&
                  (s.forward_mode == SglangMode::Extend || s.forward_mode == SglangMode::Mixed) &&
                  s.extend_seq_lens.size() == static_cast<size_t>(g.bs) &&
                  s.extend_prefix_lens.size() == static_cast<size_t>(g.bs);
    plan_eager(x, g, s);
  } else {
    plan_graph(g, s);
  }
}

void sglang_check_config(const Config& c) {
  if (c.chunk_size <= 0)
    reject(
        fmt::format("config.chunk_size = {} must be positive for SGLang's backends (the model's "
                    "mamba_chunk_size)",
                    c.chunk_size));
  if (c.mamba_cache_mode != CacheMode::None || c.full_cuda_graph || c.num_spec != 0 ||
      c.prefill_backend != PrefillBackend::Triton || c.prefill_checkpoint_alignment != 0 ||
      !c.chunk_metadata)
    reject(
        "the SGLang builders have none of vLLM's options: leave mamba_cache_mode, "
        "full_cuda_graph, num_spec, prefill_backend, prefill_checkpoint_alignment and "
        "chunk_metadata at their defaults (SGLang's engine constants are SglangStep fields; "
        "the profile is not read)");
}

void sglang_largest(StepPlan& p) {
  SglangPlan& g = p.sgl;
  const auto R = static_cast<int32_t>(g.tracked.size());
  g.bs = R;
  g.qsl_len = R + 1;
  g.track_indices = g.retrieve_next_token = g.retrieve_next_sibling = true;
  g.retrieve_parent_token = g.track_extend = g.mask_indices = g.mixed = true;
  g.n_tracked = g.n_final = g.n_h = g.n_re = g.n_unaligned = R;
  g.prep_initial_states = g.conv_table = true;
  g.n_chunks = static_cast<int32_t>(g.chunk_indices.size());
  g.prefill_graph = g.pg_track_dst = true;
  g.pg_len = static_cast<int32_t>(g.pg_table.size());
  g.pg_rows = g.pg_slots = R;
}

bool any_tracked(const SglangStep& s) {
  return s.track && std::find(s.track_mask.begin(), s.track_mask.end(), true) != s.track_mask.end();
}

bool plan_initial_states(SglangPlan& g, const SglangStep& s, int32_t n) {
  bool any = false;
  for (int32_t r = 0; r < n; ++r) {
    g.initial[r] = s.extend_prefix_lens[r] > 0 ? 1 : 0;
    any = any || g.initial[r] != 0;
  }
  return any;
}

void plan_tracked_rows(SglangPlan& g, const SglangStep& s) {
  if (g.track_extend) return;
  g.n_tracked = 0;
  for (int32_t r = 0; r < g.bs; ++r)
    if (s.track_mask[static_cast<size_t>(r)]) g.tracked[g.n_tracked++] = r;
}

void plan_track_mask_indices(SglangPlan& g, const SglangStep& s) {
  if (!g.has_track_mask) return;
  if (s.track_indices == nullptr) reject("sglang.track_indices (device) is null");
  g.mask_indices = true;
  plan_tracked_rows(g, s);
}

void pack_track_mask_indices(Packer& k, bool destinations) {
  const SglangPlan& g = k.p.sgl;
  const int32_t rows = k.put(g.tracked.data(), g.n_tracked);
  k.emit(Out::SglMambaTrackMaskIndices, false, g.n_tracked,
         CopyValues{.src = rows, .n_real = g.n_tracked, .add = 0}, DType::Int64);
  if (!destinations) return;
  k.emit(Out::SglConvStatesMaskIndices, false, g.n_tracked,
         SglangCopy{.refs = k.sglang_refs_at,
                    .rows = rows,
                    .src = static_cast<int32_t>(SglangSource::TrackIndices)},
         DType::Int64);
}

int32_t pack_sglang_refs(Packer& k, const SglangStep& s) {
  k.align_even();
  const int32_t refs = k.reserve(kSglangRefsWords, [&](int32_t* dst) {
    SglangRefs r{s.mamba_map,
                 s.mamba_map_len,
                 s.req_pool_indices,
                 {s.track_indices, s.retrieve_next_token, s.retrieve_next_sibling}};
    std::memcpy(dst, &r, sizeof r);
  });
  k.sglang_refs_at = refs;
  return refs;
}

void pack_sglang_common(Packer& k) {
  const SglangPlan& g = k.p.sgl;
  const SglangStep* s = g.step;
  static const SglangStep kNone{};
  if (s == nullptr) s = &kNone;  // count mode
  const SglangGraphBuffers& b = s->graph;
  k.set(Out::Sglang);
  k.set(Out::SglKindMetadata, g.plain ? 0 : 1);
  k.set(Out::SglIsTargetVerify, g.is_target_verify ? 1 : 0);
  k.set(Out::SglDraftTokenNum, g.draft_token_num);
  k.set(Out::SglHasMambaTrackMask, g.has_track_mask ? 1 : 0);
  if (!g.plain) {  // the counts of the kinds with a dataclass of their own (rows SML)
    k.set(Out::SglNumPrefills, g.num_prefills);
    k.set(Out::SglNumPrefillTokens, g.num_prefill_tokens);
    k.set(Out::SglNumDecodes, g.num_decodes);
  }
  const int32_t refs = pack_sglang_refs(k, *s);
  const int32_t bs = g.bs;
  const int32_t qsl = k.put(g.qsl.data(), g.qsl_len);
  const int32_t rdraft = s->draft_token_num;
  if (g.graph) {
    if (bs - g.n_real > 0 || k.counting())
      k.emit_to(nullptr, bs - g.n_real, SglangZeroRows{.refs = refs, .begin = g.n_real});
    k.emit_to(b.state_indices, bs,
              SglangSlots{.refs = refs, .rows = kIdentity, .n_real = g.n_real});
    k.external(Out::SglMambaCacheIndices, b.state_indices, bs, DType::Int32);
    k.emit_to(b.query_start_loc, g.qsl_len, CopyValues{.src = qsl, .n_real = g.qsl_len, .add = 0});
    k.external(Out::SglQueryStartLoc, b.query_start_loc, g.qsl_len, DType::Int32);
    if (g.track_indices) {
      k.emit_to(b.track_indices, bs,
                SglangCopy{.refs = refs,
                           .rows = kIdentity,
                           .src = static_cast<int32_t>(SglangSource::TrackIndices)},
                DType::Int64);
      k.external(Out::SglMambaTrackIndices, b.track_indices, bs, DType::Int64);
    }
    if (g.retrieve_next_token) {
      if (s->retrieve_next_token != nullptr) {
        const int32_t n = s->retrieve_rows * rdraft;
        k.emit_to(b.retrieve_next_token, n,
                  SglangCopy{.refs = refs,
                             .rows = kIdentity,
                             .src = static_cast<int32_t>(SglangSource::RetrieveNextToken)});
        k.emit_to(b.retrieve_next_sibling, n,
                  SglangCopy{.refs = refs,
                             .rows = kIdentity,
                             .src = static_cast<int32_t>(SglangSource::RetrieveNextSibling)});
      }
      k.external(Out::SglRetrieveNextToken, b.retrieve_next_token, bs, DType::Int32, rdraft);
      k.external(Out::SglRetrieveNextSibling, b.retrieve_next_sibling, bs, DType::Int32, rdraft);
      k.external(Out::SglRetrieveParentToken, b.retrieve_parent_token, bs, DType::Int32, rdraft);
    }
    return;
  }
  k.emit(Out::SglMambaCacheIndices, false, bs,
         SglangSlots{.refs = refs, .rows = kIdentity, .n_real = bs});
  if (g.qsl_len > 0)
    k.emit(Out::SglQueryStartLoc, false, g.qsl_len,
           CopyValues{.src = qsl, .n_real = g.qsl_len, .add = 0});
  const auto has = [&](Out o) { return output_spec(o).has(k.kind); };
  if (g.logical_num_tokens >= 0 && has(Out::SglLogicalNumTokens))
    k.set(Out::SglLogicalNumTokens, g.logical_num_tokens);
  if (g.track_indices) k.external(Out::SglMambaTrackIndices, s->track_indices, bs, DType::Int64);
  const int32_t rrows = s->retrieve_rows;
  if (g.retrieve_next_token)
    k.external(Out::SglRetrieveNextToken, s->retrieve_next_token, rrows, DType::Int64, rdraft);
  if (g.retrieve_next_sibling)
    k.external(Out::SglRetrieveNextSibling, s->retrieve_next_sibling, rrows, DType::Int64, rdraft);
  if (g.retrieve_parent_token) {
    // torch.empty_like(retrieve_next_token): a buffer of its shape, filled by the kernel.
    FieldView& v = k.emit(Out::SglRetrieveParentToken, false, 0, Arange{}, DType::Int64);
    v.rows = rrows;
    v.cols = rdraft;
  }
  if (!g.track_extend && !k.counting()) return;
  const int32_t W = k.counting() ? kSglangMaxConvWindow : s->conv_window;
  auto rows_of = [&](std::span<const int32_t> rows, int32_t n) { return k.put(rows.data(), n); };
  if (has(Out::SglTrackConvIndices)) {
    const int32_t conv = k.put(g.conv.data(), g.n_tracked * W);
    FieldView& cv =
        k.emit(Out::SglTrackConvIndices, false, g.n_tracked * W,
               CopyValues{.src = conv, .n_real = g.n_tracked * W, .add = 0}, DType::Int64);
    cv.rows = g.n_tracked;
    cv.cols = W;
  }
  const auto track_src = static_cast<int32_t>(SglangSource::TrackIndices);
  const int32_t fin = rows_of(g.final_rows, g.n_final);
  k.emit(Out::SglTrackSsmFinalSrc, false, g.n_final,
         SglangSlots{.refs = refs, .rows = fin, .n_real = g.n_final});
  k.emit(Out::SglTrackSsmFinalDst, false, g.n_final,
         SglangCopy{.refs = refs, .rows = fin, .src = track_src}, DType::Int64);
  if (has(Out::SglTrackChunkIdx)) {
    k.emit(Out::SglTrackChunkIdx, false, bs,
           CopyValues{.src = k.put(g.chunk_idx.data(), bs), .n_real = bs, .add = 0});
    k.emit(
        Out::SglTrackSsmHBatchSrc, false, g.n_unaligned,
        CopyValues{.src = rows_of(g.unaligned, g.n_unaligned), .n_real = g.n_unaligned, .add = 0},
        DType::Int64);
  }
  const int32_t h = rows_of(g.h_rows, g.n_h);
  k.emit(Out::SglTrackSsmHSrc, false, g.n_h,
         CopyValues{.src = rows_of(g.h_src, g.n_h), .n_real = g.n_h, .add = 0}, DType::Int64);
  k.emit(Out::SglTrackSsmHDst, false, g.n_h, SglangCopy{.refs = refs, .rows = h, .src = track_src},
         DType::Int64);
  if (kind_rules(k.kind).sglang_flat_chunk_grid) {
    const int32_t re = rows_of(g.re_rows, g.n_re);
    k.emit(Out::SglTrackSsmSeqIdx, false, g.n_re, CopyValues{.src = re, .n_real = g.n_re, .add = 0},
           DType::Int64);
    k.emit(Out::SglTrackSsmEndLocs, false, g.n_re,
           CopyValues{.src = rows_of(g.re_end, g.n_re), .n_real = g.n_re, .add = 0}, DType::Int64);
    k.emit(Out::SglTrackSsmRecomputeDst, false, g.n_re,
           SglangCopy{.refs = refs, .rows = re, .src = track_src}, DType::Int64);
  }
}

}  // namespace linmeta::detail
