// SGLang steps for the host tests of the SGLang kinds (linmeta/sglang.hpp): a step's memory
// (host vectors: the host target's "device" memory too) and a few steps of every entry.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "linmeta/sglang.hpp"
#include "linmeta/step.hpp"

namespace linmeta::test {

/// One SGLang step and the memory it points to.
struct SglStep {
  SglangStep s;
  std::vector<int32_t> map, ext, prefix, state, qsl, rnt_buf, rns_buf, rpt_buf;
  std::vector<int64_t> rpi, seq, track_indices, track_seqlens, track_buf, rnt, rns;
  std::vector<int64_t> cache_buf;  ///< ShortConv's _cache_indices_buf
  std::unique_ptr<bool[]> mask;
  // KDA's prefill-graph tables of one bucket (KDAPrefillGraphMetadata's buffers).
  std::vector<int32_t> pg_packed, pg_host, pg_cache;
  std::vector<uint8_t> pg_initial;  ///< bool
  std::vector<int64_t> pg_track_dst;
  Step step;

  SglStep() = default;
  SglStep(const SglStep&) = delete;
  SglStep& operator=(const SglStep&) = delete;

  /// bs rows of request rows 1..bs mapped to slots 100 + row.
  void rows(int32_t bs, int32_t pool = 64) {
    map.assign(static_cast<size_t>(pool), 0);
    rpi.resize(static_cast<size_t>(bs));
    for (int32_t r = 0; r < bs; ++r) {
      rpi[static_cast<size_t>(r)] = r + 1;
      map[static_cast<size_t>(r + 1)] = 100 + r;
    }
    seq.assign(static_cast<size_t>(bs), 50);
    s.batch_size = bs;
    s.num_tokens = bs;
    s.mamba_map = map.data();
    s.mamba_map_len = static_cast<int64_t>(map.size());
    s.req_pool_indices = rpi.data();
    s.seq_lens = seq;
    s.cache_chunk_size = 32;
    s.conv_window = 3;
    step.sglang = &s;
  }
  /// An extend of rows (prefix, extend).
  void extend(const std::vector<std::pair<int32_t, int32_t>>& rows_, SglangMode mode) {
    rows(static_cast<int32_t>(rows_.size()));
    s.forward_mode = s.logical_mode = mode;
    ext.clear();
    prefix.clear();
    for (const auto& [p, e] : rows_) {
      prefix.push_back(p);
      ext.push_back(e);
    }
    s.extend_seq_lens = ext;
    s.extend_prefix_lens = prefix;
    const int64_t total = std::accumulate(ext.begin(), ext.end(), int64_t{0});
    s.extend_num_tokens = static_cast<int32_t>(std::min<int64_t>(total, INT32_MAX));
    s.num_tokens = s.extend_num_tokens;
  }
  /// Tracking of every row whose extend reaches the grid G (host lists).
  void track() {
    const auto n = static_cast<size_t>(s.batch_size);
    mask = std::make_unique<bool[]>(n);
    track_indices.assign(n, -1);
    track_seqlens.assign(n, -1);
    for (size_t r = 0; r < n; ++r) {
      const bool on = r < ext.size() && ext[r] >= s.cache_chunk_size;
      mask[r] = on;
      if (on) {
        track_indices[r] = 200 + static_cast<int64_t>(r);
        track_seqlens[r] = int64_t{prefix[r]} + ext[r] - static_cast<int64_t>(r % 3);
      }
    }
    s.track = true;
    s.track_lists = true;
    s.track_mask = std::span<const bool>(mask.get(), n);
    s.track_indices = track_indices.data();
    s.track_seqlens = track_seqlens;
  }
  /// The PrefillGraph entry on a bucket of num_tokens tokens and max_seqs sequences, its
  /// buffers as KDAPrefillGraphMetadata.allocate makes them (packed and host 0, cache_indices
  /// -1, has_initial_state False, track_dst 0).
  void prefill_graph(int32_t num_tokens, int32_t max_seqs, bool track_tables) {
    const SglangPrefillGraphLayout l = SglangPrefillGraphLayout::of(num_tokens, max_seqs);
    const auto rows = static_cast<size_t>(max_seqs);
    pg_packed.assign(static_cast<size_t>(l.total), 0);
    pg_host.assign(static_cast<size_t>(l.total), 0);
    pg_cache.assign(rows, -1);
    pg_initial.assign(rows, 0);
    pg_track_dst.assign(rows, 0);
    s.entry = SglangEntry::PrefillGraph;
    s.prefill_graph = {num_tokens,
                       max_seqs,
                       track_tables,
                       pg_packed.data(),
                       l.total,
                       pg_host.data(),
                       pg_cache.data(),
                       reinterpret_cast<bool*>(pg_initial.data()),
                       pg_track_dst.data()};
  }
  /// The prefill-graph buffers' contents.
  struct Buffers {
    std::vector<int32_t> packed, host, cache;
    std::vector<uint8_t> initial;
    std::vector<int64_t> track_dst;
    bool operator==(const Buffers&) const = default;
  };
  [[nodiscard]] Buffers buffers() const {
    return {pg_packed, pg_host, pg_cache, pg_initial, pg_track_dst};
  }
  /// A graph entry's static buffers (graph_max_bs 64, k draft tokens), filled with -7777.
  void graph(SglangEntry entry, int32_t k = 1) {
    const auto bs = static_cast<size_t>(s.batch_size);
    s.entry = entry;
    state.assign(bs, -7777);
    qsl.assign(bs + 1, -7777);
    track_buf.assign(64, -7777);
    for (auto* v : {&rnt_buf, &rns_buf, &rpt_buf}) v->assign(bs * static_cast<size_t>(k), -7777);
    s.graph = {state.data(),   qsl.data(),     track_buf.data(),
               rnt_buf.data(), rns_buf.data(), rpt_buf.data()};
  }
};

}  // namespace linmeta::test
