// Random valid SGLang steps (linmeta/sglang.hpp) for the tests of every kind of the Sglang
// family, host and GPU alike: every entry point (eager, CUDA-graph capture, replay with the
// padding given or counted, CPU-graph capture), every mode (decode, idle, extend, MIXED, a
// DP-relabelled decode, draft extend with and without extend metadata, target verify as a
// chain and as a tree), prefix-cache tracking on (host lists) and off, batch sizes 1..256
// skewed small, request rows outside the map. Rows follow SGLang's layout (docs/sglang.md):
// a MIXED step is the prefills, then the running decodes as 1-token extends; graph padding
// rows carry seq_len 1. The step's memory is an SglStep (sglang_step.hpp): host vectors,
// which a GPU test copies to the device.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "linmeta/config.hpp"
#include "linmeta/sglang.hpp"
#include "random_step.hpp"
#include "sglang_step.hpp"

namespace linmeta::test {

/// Every kind of the Sglang family (config.hpp's list: kinds added later are included).
inline std::vector<BuilderKind> sglang_kinds() {
  std::vector<BuilderKind> out;
  for (int32_t i = 0; i < kNumBuilderKinds; ++i)
    if (in_family(static_cast<BuilderKind>(i), BuilderFamily::Sglang))
      out.push_back(static_cast<BuilderKind>(i));
  return out;
}

/// One builder pair's configuration and the backend's engine constants: what stays fixed
/// over the random steps of one SGLang backend object.
struct SglangRandomEngine {
  Config config;             ///< chunk_size C (the model's mamba_chunk_size), capacities
  int32_t cache_chunk_size;  ///< G: mamba_cache_chunk_size(), a multiple of C
  int32_t conv_window;       ///< W
  int32_t graph_max_bs;      ///< mamba_track_indices_buf's length
  /// ShortConv's needs_extend_host_mirrors (the other kinds ignore it).
  bool host_mirrors = true;
  /// Tree drafts (speculative_eagle_topk > 1) exist: SGLang's Lightning backend refuses them
  /// at construction, so its engines never verify a tree.
  bool tree_drafts = true;
  /// A draft extend without extend metadata is built (SGLang's Lightning fails on one: its
  /// prepare_decode reads the query_start_loc that is None there).
  bool draft_extend_none = true;
  /// KDA's breakable prefill-graph tables (SglangEntry::PrefillGraph: sglang_kda only).
  bool prefill_graph = false;
};

/// `e` as an engine of `kind` can be (for_kind(random_sglang_engine(rng), kind)).
inline SglangRandomEngine for_kind(SglangRandomEngine e, BuilderKind kind) {
  e.tree_drafts = e.draft_extend_none = kind != BuilderKind::SglangLightning;
  e.prefill_graph = kind == BuilderKind::SglangKda;
  return e;
}

inline SglangRandomEngine random_sglang_engine(std::mt19937& rng, int32_t max_rows = 256) {
  using testing::coin;
  using testing::pick;
  SglangRandomEngine e;
  e.config.max_num_seqs = max_rows;
  e.config.max_num_batched_tokens = 1 << 15;
  e.config.chunk_size = pick(rng, {8, 16, 64, 128, 256});
  e.cache_chunk_size = e.config.chunk_size * pick(rng, {1, 1, 2, 4});
  e.conv_window = coin(rng, 0.8) ? pick(rng, {3, 3, 1, 2}) : testing::uniform(rng, 4, 16);
  e.graph_max_bs = max_rows;
  e.host_mirrors = coin(rng, 0.7);
  return e;
}

namespace sgl_random {

inline int32_t batch_size(std::mt19937& rng, int32_t top) {
  const int32_t x = testing::uniform(rng, 0, 99);
  const int32_t hi = x < 50 ? 8 : x < 80 ? 32 : x < 93 ? 96 : top;
  return testing::uniform(rng, 1, std::min(hi, top));
}

/// An extend length (chunk-aligned, tiny, ordinary or long) within `budget` tokens.
inline int32_t extend_len(std::mt19937& rng, int32_t C, int32_t budget) {
  const int32_t x = testing::uniform(rng, 0, 99);
  const int32_t n = x < 20   ? C * testing::uniform(rng, 1, 12)
                    : x < 35 ? testing::uniform(rng, 1, 3)
                    : x < 92 ? testing::uniform(rng, 1, 400)
                             : testing::uniform(rng, 401, 3000);
  return std::clamp(n, 1, std::max(1, budget));
}

inline int32_t prefix_len(std::mt19937& rng, int32_t C) {
  const int32_t x = testing::uniform(rng, 0, 99);
  return x < 40 ? 0 : x < 60 ? C * testing::uniform(rng, 1, 40) : testing::uniform(rng, 1, 1500);
}

/// ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend's (mask, seqlen) of a row,
/// its branching point taken at random (tests/sglang/sglang_steps.py's _prefill_track).
inline std::pair<bool, int64_t> prefill_track(std::mt19937& rng, int32_t prefix, int32_t ext,
                                              int32_t C, int32_t G) {
  if (ext < G) return {false, -1};
  const int64_t aligned = prefix + static_cast<int64_t>(ext / G) * G;
  int64_t seqlen = prefix + ext;
  if (prefix + static_cast<int64_t>(ext / C) * C != aligned) seqlen = aligned + 1;
  if (testing::coin(rng, 0.2)) {
    const int64_t branch = prefix + static_cast<int64_t>(testing::uniform(rng, 1, ext / G)) * G;
    if (prefix < branch && branch < seqlen) seqlen = branch + 1;
  }
  return {true, seqlen};
}

inline int32_t fill_value(std::mt19937& rng) { return -7777 - testing::uniform(rng, 0, 999); }

/// The request -> slot map of a `pool`-row request pool and `real` distinct request rows
/// (then `pad` padding rows: row 0, or a stale row); now and then a row outside the map.
inline void pool_rows(std::mt19937& rng, SglStep& st, int32_t real, int32_t pad,
                      std::vector<std::string>& tags) {
  using testing::coin;
  using testing::uniform;
  const int32_t pool = 2 * (real + pad) + 16 + uniform(rng, 0, 64);
  st.map.resize(static_cast<size_t>(pool));
  for (auto& x : st.map) x = uniform(rng, 0, 1 << 20);
  std::vector<int64_t> rows(static_cast<size_t>(pool - 1));
  std::iota(rows.begin(), rows.end(), int64_t{1});
  std::shuffle(rows.begin(), rows.end(), rng);
  st.rpi.assign(rows.begin(), rows.begin() + real);
  for (int32_t i = 0; i < pad; ++i)
    st.rpi.push_back(coin(rng, 0.7) ? 0 : uniform(rng, 1, pool - 1));
  if (coin(rng, 0.05)) {  // a row outside the map: slot -1 (defined, docs/sglang.md)
    st.rpi[static_cast<size_t>(uniform(rng, 0, real - 1))] =
        coin(rng) ? pool + uniform(rng, 0, 100) : -uniform(rng, 1, 5);
    tags.emplace_back("row_outside_map");
  }
}

/// The step's pointers and spans at st's vectors (once they hold their final contents).
inline void host_spans(SglStep& st) {
  SglangStep& s = st.s;
  s.mamba_map = st.map.data();
  s.mamba_map_len = static_cast<int64_t>(st.map.size());
  s.req_pool_indices = st.rpi.data();
  s.seq_lens = st.seq;
  s.extend_seq_lens = st.ext;
  s.extend_prefix_lens = st.prefix;
  if (st.mask) {
    s.track = true;
    s.track_mask = std::span<const bool>(st.mask.get(), static_cast<size_t>(s.batch_size));
    s.track_indices = st.track_indices.data();
    s.track_seqlens = st.track_seqlens;
  }
  if (!st.cache_buf.empty()) {
    s.cache_indices_buf = st.cache_buf.data();
    s.cache_indices_buf_len = static_cast<int64_t>(st.cache_buf.size());
  }
  st.step = Step{};
  st.step.sglang = &s;
}

/// KDA's prefill-graph entry (KDAPrefillGraphMetadata.fill on a bucket): an extend of at most
/// the bucket's sequences and tokens, SGLang's default sequence cap (128) or a smaller one, the
/// bucket's buffers filled at random (a fill writes all of them but track_dst past the batch),
/// tracking (host lists) on buckets with track tables, DP padding now and then.
inline std::vector<std::string> prefill_graph_step(std::mt19937& rng, const SglangRandomEngine& e,
                                                   SglStep& st) {
  using testing::coin;
  using testing::uniform;
  const int32_t C = e.config.chunk_size, G = e.cache_chunk_size;
  SglangStep& s = st.s;
  const int32_t cap = std::min(e.config.max_num_seqs, testing::pick(rng, {128, 128, 16, 4}));
  const int32_t bs = batch_size(rng, cap);
  std::vector<std::string> tags{"prefill_graph/extend"};
  pool_rows(rng, st, bs, 0, tags);
  int32_t budget = e.config.max_num_batched_tokens - bs - 512;
  for (int32_t i = 0; i < bs; ++i) {
    const int32_t x = extend_len(rng, C, budget + 1);
    budget -= x - 1;
    st.prefix.push_back(prefix_len(rng, C));
    st.ext.push_back(x);
    st.seq.push_back(static_cast<int64_t>(st.prefix.back()) + x);
  }
  const int32_t total = std::accumulate(st.ext.begin(), st.ext.end(), 0);
  const int32_t tokens = total + (coin(rng, 0.6) ? 0 : uniform(rng, 1, 512));
  const bool track_tables = coin(rng, 0.5);
  st.prefill_graph(tokens, std::max(1, std::min(tokens, cap)), track_tables);
  for (auto* v : {&st.pg_packed, &st.pg_host, &st.pg_cache})
    for (auto& x : *v) x = fill_value(rng);
  for (auto& x : st.pg_initial) x = static_cast<uint8_t>(uniform(rng, 0, 1));
  for (auto& x : st.pg_track_dst) x = fill_value(rng);
  s.forward_mode = s.logical_mode = SglangMode::Extend;
  s.batch_size = bs;
  s.extend_num_tokens = s.num_tokens = total;
  if (coin(rng, 0.2)) {
    s.original_batch_size = uniform(rng, 0, bs);
    tags.emplace_back("original_batch_size");
  }
  if (track_tables && coin(rng, 0.7)) {
    st.mask = std::make_unique<bool[]>(static_cast<size_t>(bs));
    for (int32_t i = 0; i < bs; ++i) {
      const auto [on, seqlen] = prefill_track(rng, st.prefix[static_cast<size_t>(i)],
                                              st.ext[static_cast<size_t>(i)], C, G);
      st.mask[static_cast<size_t>(i)] = on;
      st.track_indices.push_back(on || coin(rng) ? uniform(rng, 1, 1 << 20) : -1);
      st.track_seqlens.push_back(seqlen);
    }
  }
  return tags;
}

}  // namespace sgl_random

/// Fills `st` (its previous contents dropped) with a random valid step for the engine `e`
/// and returns what it exercises: "entry/mode" first ("eager/mixed", "replay/verify_tree",
/// ...), then tags ("track=on", "padding=counted", ...).
inline std::vector<std::string> random_sglang_step(std::mt19937& rng, const SglangRandomEngine& e,
                                                   SglStep& st) {
  using testing::coin;
  using testing::uniform;
  namespace r = sgl_random;
  const int32_t C = e.config.chunk_size, G = e.cache_chunk_size;
  const int32_t max_tokens = e.config.max_num_batched_tokens;
  st.s = SglangStep{};
  SglangStep& s = st.s;
  s.cache_chunk_size = G;
  s.conv_window = e.conv_window;
  s.host_mirrors = e.host_mirrors;
  for (auto* v : {&st.ext, &st.prefix, &st.state, &st.qsl, &st.rnt_buf, &st.rns_buf, &st.rpt_buf})
    v->clear();
  for (auto* v : {&st.rpi, &st.seq, &st.track_indices, &st.track_seqlens, &st.track_buf, &st.rnt,
                  &st.rns, &st.cache_buf})
    v->clear();
  st.mask.reset();

  for (auto* v : {&st.pg_packed, &st.pg_host, &st.pg_cache}) v->clear();
  st.pg_initial.clear();
  st.pg_track_dst.clear();
  if (e.prefill_graph && coin(rng, 0.12)) {
    std::vector<std::string> tags = r::prefill_graph_step(rng, e, st);
    r::host_spans(st);
    tags.emplace_back(s.track ? "track=on" : "track=off");
    return tags;
  }

  // Entry and mode.
  const int32_t ex = uniform(rng, 0, 99);
  s.entry = ex < 50   ? SglangEntry::Eager
            : ex < 62 ? SglangEntry::GraphCapture
            : ex < 90 ? SglangEntry::GraphReplay
                      : SglangEntry::CpuGraphCapture;
  const bool graph = s.entry != SglangEntry::Eager;
  std::string mode;
  if (!graph) {
    const int32_t m = uniform(rng, 0, 99);
    mode = m < 18   ? "decode"
           : m < 22 ? "idle"
           : m < 44 ? "extend"
           : m < 62 ? "mixed"
           : m < 70 ? "dp_decode"
           : m < 79 ? "draft_extend"
           : m < 80 ? "draft_extend_none"
           : m < 90 ? "verify_chain"
                    : "verify_tree";
  } else {
    const int32_t m = uniform(rng, 0, 99);
    const bool cpu = s.entry == SglangEntry::CpuGraphCapture;  // no verify buffers
    mode = m < (cpu ? 92 : 60)    ? "decode"
           : m < (cpu ? 100 : 68) ? "idle"
           : m < 84               ? "verify_chain"
                                  : "verify_tree";
  }
  if (mode == "verify_tree" && !e.tree_drafts) mode = "verify_chain";
  if (mode == "draft_extend_none" && !e.draft_extend_none) mode = "draft_extend";
  const bool verify = mode.starts_with("verify");
  const bool spec = verify || mode.starts_with("draft_extend");
  const int32_t k = spec ? uniform(rng, 1, 8) : 1;
  if (spec) {
    s.has_spec_info = true;
    s.draft_token_num = k;
  }
  s.topk = mode == "verify_tree" ? testing::pick(rng, {2, 4})
           : verify              ? testing::pick(rng, {0, 1})
                                 : 0;
  s.forward_mode = mode == "decode"             ? SglangMode::Decode
                   : mode == "idle"             ? SglangMode::Idle
                   : mode == "extend"           ? SglangMode::Extend
                   : mode == "mixed"            ? SglangMode::Mixed
                   : mode == "dp_decode"        ? SglangMode::Extend
                   : mode.starts_with("draft_") ? SglangMode::DraftExtendV2
                                                : SglangMode::TargetVerify;
  s.logical_mode = mode == "dp_decode" ? SglangMode::Decode : s.forward_mode;

  // Rows: `real` rows of the scheduler, then padding (graph replay, a DP-relabelled decode).
  const int32_t bs = r::batch_size(rng, e.config.max_num_seqs);
  int32_t real = bs;
  if (s.entry == SglangEntry::GraphReplay && coin(rng, 0.6)) real = uniform(rng, 1, bs);
  if (mode == "dp_decode" && bs > 1 && coin(rng, 0.5))
    real = bs - uniform(rng, 1, std::min(3, bs - 1));
  const int32_t pad = bs - real;
  s.batch_size = bs;

  // The request -> slot map and the rows' request-pool rows (distinct; padding: row 0, or a
  // stale row that a replay zeroes).
  std::vector<std::string> tags;
  r::pool_rows(rng, st, real, pad, tags);

  // Lengths.
  const bool extend_lists =
      mode == "extend" || mode == "mixed" || mode == "dp_decode" || mode == "draft_extend";
  std::vector<std::pair<int32_t, int32_t>> pe;  // (prefix, extend) of every row
  int32_t budget = max_tokens - bs;
  const int32_t prefills = mode == "mixed" ? uniform(rng, 1, std::min(4, real)) : real;
  for (int32_t i = 0; i < bs; ++i) {
    int32_t p = 0, x = 1;
    if (i >= real) {
      p = 0;  // padding: seq_len 1
    } else if ((mode == "extend" || mode == "mixed") && i < prefills) {
      p = r::prefix_len(rng, C);
      x = r::extend_len(rng, C, budget + 1);
      budget -= x - 1;
    } else if (mode == "draft_extend") {
      p = uniform(rng, 1, 3000);
      x = uniform(rng, 1, k);
    } else if (verify) {
      p = uniform(rng, 1, 3000);
      x = k;
    } else {  // decode rows (a graph's real row of length 1 counts as padding when counted)
      p = graph && coin(rng, 0.03) ? 0 : uniform(rng, 1, 3000);
    }
    pe.emplace_back(p, x);
    st.seq.push_back(static_cast<int64_t>(p) + x);
  }
  if (extend_lists) {
    for (const auto& [p, x] : pe) {
      st.prefix.push_back(p);
      st.ext.push_back(x);
    }
    s.extend_num_tokens = std::accumulate(st.ext.begin(), st.ext.end(), 0);
  }
  s.num_tokens = verify ? bs * k : extend_lists ? s.extend_num_tokens : mode == "idle" ? 0 : bs;

  // Tree verify's retrieve tensors [real, k].
  if (mode == "verify_tree") {
    for (int32_t i = 0; i < real * k; ++i) {
      st.rnt.push_back(uniform(rng, -1, k - 1));
      st.rns.push_back(uniform(rng, -1, k - 1));
    }
    s.retrieve_rows = real;
  }

  // Prefix-cache tracking (host lists): extend rows that reach G; a decode's random mask.
  const bool track_extend = (mode == "extend" || mode == "mixed") && coin(rng, 0.6);
  const bool track_decode = (mode == "decode" || mode == "idle") && coin(rng, 0.35);
  if (track_extend || track_decode) {
    st.mask = std::make_unique<bool[]>(static_cast<size_t>(bs));
    for (int32_t i = 0; i < bs; ++i) {
      bool on = false;
      int64_t seqlen = -1;
      if (track_extend && i < prefills) {
        std::tie(on, seqlen) = r::prefill_track(rng, pe[static_cast<size_t>(i)].first,
                                                pe[static_cast<size_t>(i)].second, C, G);
      } else if (track_decode) {
        on = coin(rng, 0.3);
      }
      st.mask[static_cast<size_t>(i)] = on;
      st.track_indices.push_back(on || coin(rng) ? uniform(rng, 1, 1 << 20) : -1);
      st.track_seqlens.push_back(seqlen);
    }
    if (!track_extend) st.track_seqlens.clear();     // SGLang's decode: mamba_track_seqlens None
    s.track_lists = track_extend && coin(rng, 0.5);  // the scheduler's host lists, or copies
  }

  // Graph entries: the backend's static buffers of this batch size, filled at random.
  if (graph) {
    st.state.assign(static_cast<size_t>(bs), 0);
    st.qsl.assign(static_cast<size_t>(bs) + 1, 0);
    st.track_buf.assign(static_cast<size_t>(e.graph_max_bs), 0);
    for (auto* v : {&st.rnt_buf, &st.rns_buf, &st.rpt_buf})
      v->assign(static_cast<size_t>(bs * k), 0);
    for (auto* v : {&st.state, &st.qsl, &st.rnt_buf, &st.rns_buf, &st.rpt_buf})
      for (auto& x : *v) x = r::fill_value(rng);
    for (auto& x : st.track_buf) x = r::fill_value(rng);
  }

  // ShortConv's _cache_indices_buf (made with the graph state: any entry may find it), at
  // times shorter than the batch (SGLang then casts afresh).
  if (coin(rng, 0.6)) {
    st.cache_buf.resize(static_cast<size_t>(uniform(rng, 1, e.graph_max_bs)));
    for (auto& x : st.cache_buf) x = r::fill_value(rng);
    tags.emplace_back(st.cache_buf.size() >= static_cast<size_t>(bs) ? "cache_buf=fits"
                                                                     : "cache_buf=short");
  }

  // Pointers and spans, now that the vectors hold their final contents.
  r::host_spans(st);
  if (!st.rnt.empty()) {
    s.retrieve_next_token = st.rnt.data();
    s.retrieve_next_sibling = st.rns.data();
  }
  if (graph) {
    const bool cpu = s.entry == SglangEntry::CpuGraphCapture;
    const bool tree = mode == "verify_tree";
    s.graph = {st.state.data(),
               st.qsl.data(),
               cpu ? nullptr : st.track_buf.data(),
               tree ? st.rnt_buf.data() : nullptr,
               tree ? st.rns_buf.data() : nullptr,
               tree ? st.rpt_buf.data() : nullptr};
  }
  if (s.entry == SglangEntry::GraphReplay) {
    const bool given = coin(rng, 0.7);
    s.num_padding = given ? pad : -1;
    tags.emplace_back(given ? "padding=given" : "padding=counted");
    if (pad > 0) tags.emplace_back("padded_rows");
  }
  const char* entries[] = {"eager", "capture", "replay", "cpu_capture"};
  std::string label = entries[static_cast<int>(s.entry)];
  label.append("/").append(mode);
  tags.insert(tags.begin(), std::move(label));
  tags.emplace_back(s.track ? "track=on" : "track=off");
  if (bs > 64) tags.emplace_back("bs>64");
  return tags;
}

/// The labels every long enough run of random_sglang_step must produce.
inline std::vector<std::string> sglang_required_labels(bool tree_drafts = true,
                                                       bool draft_extend_none = true,
                                                       bool prefill_graph = false) {
  std::vector<std::string> out;
  const auto add = [&](const char* entry, const char* mode) {
    const std::string_view m(mode);
    if ((tree_drafts || m != "verify_tree") && (draft_extend_none || m != "draft_extend_none"))
      out.emplace_back(entry).append("/").append(mode);
  };
  for (const char* m : {"decode", "idle", "extend", "mixed", "dp_decode", "draft_extend",
                        "draft_extend_none", "verify_chain", "verify_tree"})
    add("eager", m);
  for (const char* entry : {"capture", "replay"})
    for (const char* m : {"decode", "idle", "verify_chain", "verify_tree"}) add(entry, m);
  for (const char* m : {"decode", "idle"}) add("cpu_capture", m);
  for (const char* t : {"padding=given", "padding=counted", "padded_rows", "track=on", "track=off",
                        "bs>64", "row_outside_map", "cache_buf=fits", "cache_buf=short"})
    out.emplace_back(t);
  if (prefill_graph)
    for (const char* t : {"prefill_graph/extend", "original_batch_size"}) out.emplace_back(t);
  return out;
}

/// The labels of a long enough run for an engine of `kind` (for_kind's shapes).
inline std::vector<std::string> sglang_required_labels(BuilderKind kind) {
  const SglangRandomEngine e = for_kind(SglangRandomEngine{}, kind);
  return sglang_required_labels(e.tree_drafts, e.draft_extend_none, e.prefill_graph);
}

/// The step in a line, for failure messages (with the seed, enough to find it again).
inline std::string describe(const SglangStep& s) {
  std::ostringstream out;
  out << "entry " << static_cast<int>(s.entry) << " mode " << static_cast<int>(s.forward_mode)
      << "/" << static_cast<int>(s.logical_mode) << " bs " << s.batch_size << " tokens "
      << s.num_tokens << " extend_tokens " << s.extend_num_tokens << " k " << s.draft_token_num
      << " topk " << s.topk << " retrieve_rows " << s.retrieve_rows << " num_padding "
      << s.num_padding << " track " << s.track << " G " << s.cache_chunk_size << " W "
      << s.conv_window;
  const auto list = [&](const char* name, auto span) {
    out << " " << name << " [";
    for (size_t i = 0; i < span.size() && i < 24; ++i)
      out << (i > 0 ? "," : "") << static_cast<int64_t>(span[i]);
    out << (span.size() > 24 ? ",...]" : "]");
  };
  list("ext", s.extend_seq_lens);
  list("prefix", s.extend_prefix_lens);
  list("seq", s.seq_lens);
  list("track_mask", s.track_mask);
  list("track_seqlens", s.track_seqlens);
  return out.str();
}

}  // namespace linmeta::test
