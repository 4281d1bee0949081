// A reference of SGLang 0.5.23's KDAPrefillGraphMetadata.fill (kda_prefill_graph.py, with
// build_track_rows and kda_backend's _prefill_graph_cache_indices), written from SGLang's
// Python for the tests and sharing no code with the core: what the bucket's buffers hold
// after the PrefillGraph entry of a valid step.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "linmeta/sglang.hpp"

namespace linmeta::test {

struct PrefillGraphBuffers {
  std::vector<int32_t> packed;  ///< also the host staging
  std::vector<int32_t> cache_indices;
  std::vector<uint8_t> has_initial_state;
  std::vector<int64_t> track_dst;
};

/// Python's floor division.
inline int64_t py_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

/// The buffers after SGLang's fill of `s` on its bucket (`chunk`: the model's
/// mamba_chunk_size; `track_dst`: the buffer's contents before, kept past the batch and when
/// no row is tracked). Host memory: map, request rows and track indices are read directly.
inline PrefillGraphBuffers reference_prefill_graph(const SglangStep& s, int32_t chunk,
                                                   std::vector<int64_t> track_dst) {
  const SglangPrefillGraph& pg = s.prefill_graph;
  const int64_t S = pg.max_seqs, bs = s.batch_size;
  const int64_t max_chunks = (pg.num_tokens + 63) / 64 + S;
  const int64_t max_blocks = (pg.num_tokens + 7) / 8 + S;
  std::vector<int64_t> lens(s.extend_seq_lens.begin(), s.extend_seq_lens.end());
  int64_t total = 0;
  for (int64_t v : lens) total += v;
  std::vector<int32_t> host;
  // cu_seqlens
  std::vector<int64_t> cu(static_cast<size_t>(S + 1), total);
  cu[0] = 0;
  for (int64_t r = 0; r < bs; ++r) cu[r + 1] = cu[r] + lens[r];
  for (int64_t v : cu) host.push_back(static_cast<int32_t>(v));
  const auto pairs = [&](int64_t block, int64_t rows, int32_t pad0, int32_t pad1) {
    int64_t n = 0;
    for (int64_t r = 0; r < bs; ++r)
      for (int64_t j = 0; j < (lens[r] + block - 1) / block; ++j, ++n) {
        host.push_back(static_cast<int32_t>(r));
        host.push_back(static_cast<int32_t>(j));
      }
    for (; n < rows; ++n) {
      host.push_back(pad0);
      host.push_back(pad1);
    }
  };
  pairs(64, max_chunks, 0, 1 << 20);
  std::vector<int64_t> offsets(static_cast<size_t>(S + 1), 0);
  for (int64_t r = 0; r < bs; ++r) offsets[r + 1] = offsets[r] + (lens[r] + 63) / 64;
  for (int64_t i = bs + 1; i <= S; ++i) offsets[i] = offsets[bs];
  for (int64_t v : offsets) host.push_back(static_cast<int32_t>(v));
  pairs(8, max_blocks, -1, 0);
  std::vector<int32_t> chunk_idx(static_cast<size_t>(S), -1), mode(static_cast<size_t>(S), 0),
      conv_start(static_cast<size_t>(S), 0);
  const bool tracked =
      s.track && std::any_of(s.track_mask.begin(), s.track_mask.end(), [](bool b) { return b; });
  if (tracked) {
    for (int64_t r = 0; r < bs; ++r) {
      if (!s.track_mask[r]) continue;
      const int64_t len = s.track_seqlens[r] - s.extend_prefix_lens[r];
      if (len % chunk == 0) {
        mode[r] = 1;  // TRACK_FINAL_STATE
      } else {
        chunk_idx[r] = static_cast<int32_t>(len / chunk);
        mode[r] = 2;  // TRACK_CHUNK_STATE
      }
      const int64_t aligned = py_floordiv(len, s.cache_chunk_size) * s.cache_chunk_size;
      conv_start[r] = static_cast<int32_t>(cu[r] + aligned - s.conv_window);
    }
    for (int64_t r = 0; r < bs; ++r) track_dst[r] = s.track_indices[r];
  }
  for (auto* v : {&chunk_idx, &mode, &conv_start}) host.insert(host.end(), v->begin(), v->end());
  host.push_back(static_cast<int32_t>(total));
  PrefillGraphBuffers out;
  out.packed = std::move(host);
  // _prefill_graph_cache_indices: mapping[req_pool_indices], -1 past _original_batch_size;
  // then -1 past the batch. A request row outside the map: -1 (linmeta's defined answer).
  const int64_t real =
      s.original_batch_size >= 0 ? std::min<int64_t>(bs, s.original_batch_size) : bs;
  out.cache_indices.assign(static_cast<size_t>(S), -1);
  for (int64_t r = 0; r < real; ++r) {
    const int64_t req = s.req_pool_indices[r];
    out.cache_indices[r] = req >= 0 && req < s.mamba_map_len ? s.mamba_map[req] : -1;
  }
  out.has_initial_state.assign(static_cast<size_t>(S), 0);
  for (int64_t r = 0; r < bs; ++r) out.has_initial_state[r] = s.extend_prefix_lens[r] > 0;
  out.track_dst = std::move(track_dst);
  return out;
}

}  // namespace linmeta::test
