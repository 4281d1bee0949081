// Random valid scheduler steps for equivalence tests and the bench: decodes and
// spec decodes first (interleaved), then prefills, then zero-length padding rows,
// with async-spec rows whose device seq_len is below the host upper bound.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "linmeta/linmeta.hpp"

namespace linmeta::testing {

struct RandomStepOptions {
  BuilderKind kind = BuilderKind::Gdn;
  int32_t num_groups = 1;
  int32_t max_prefill_len = 3000;
  bool allow_capture = true;
  /// Probability that every spec row of a step drafts 0 tokens (rule R1/K1 of the
  /// vllm-0.34 profile); 0 draws nothing, leaving the random stream as it was.
  double zero_drafts = 0;
  /// Rows of every step (cut to what the step's kind allows: max_num_seqs, or a capture
  /// batch's limit); 0 draws a row count, as before.
  int32_t num_reqs = 0;
};

/// A step with host copies of every array; `step()` views them given the
/// addresses of the "device" copies (host addresses on the host target).
struct RandomStep {
  Config config;
  BuilderKind kind = BuilderKind::Gdn;
  bool capture = false;
  int32_t num_reqs = 0;
  int32_t num_actual_tokens = 0;
  std::vector<int32_t> qsl, seq_lens, seq_ub, drafts, accepted;
  std::vector<char> is_prefilling;  // empty = absent
  bool has_drafts = false, has_accepted = false;
  int32_t width = 0;
  int64_t row_stride = 0;
  std::vector<std::vector<int32_t>> tables;  // [num_groups][num_reqs * row_stride]

  [[nodiscard]] Step step(const int32_t* dev_qsl, const int32_t* dev_seq_lens,
                          const int32_t* dev_accepted, const int32_t* dev_table0) const {
    Step s;
    s.num_reqs = num_reqs;
    s.num_actual_tokens = num_actual_tokens;
    s.query_start_loc_cpu = qsl;
    s.seq_lens_cpu_upper_bound = seq_ub;
    if (!is_prefilling.empty())
      s.is_prefilling = {reinterpret_cast<const bool*>(is_prefilling.data()), is_prefilling.size()};
    if (has_drafts) s.num_decode_draft_tokens = drafts;
    s.query_start_loc = dev_qsl;
    s.seq_lens = dev_seq_lens;
    s.num_accepted_tokens = has_accepted ? dev_accepted : nullptr;
    s.block_table = {dev_table0, width, row_stride};
    return s;
  }
  /// The step over the host arrays themselves (host target).
  [[nodiscard]] Step host_step() const {
    return step(qsl.data(), seq_lens.data(), accepted.data(), tables[0].data());
  }
  [[nodiscard]] std::vector<BlockTable> host_tables() const {
    std::vector<BlockTable> out;
    for (const auto& t : tables) out.push_back({t.data(), width, row_stride});
    return out;
  }
};

inline int32_t pick(std::mt19937& rng, std::initializer_list<int32_t> values) {
  std::uniform_int_distribution<size_t> d(0, values.size() - 1);
  return *(values.begin() + d(rng));
}

inline int32_t uniform(std::mt19937& rng, int32_t lo, int32_t hi) {
  return std::uniform_int_distribution<int32_t>(lo, hi)(rng);
}

inline bool coin(std::mt19937& rng, double p = 0.5) { return std::bernoulli_distribution(p)(rng); }

/// The vllm-0.34 profile's knobs on top of a seed configuration (docs/semantics.md):
/// no "all" cache mode, a prefill backend (GDN, KDA), and prefill checkpoints (align mode)
/// where the layer exports them: KDA under FlashKDA, GDN and Mamba2 on a random grid (GDN
/// FlashInfer's 64-multiples get a checkpoint plan; GLM-5-Next's 16 with Triton does not).
inline void make_vllm034(std::mt19937& rng, BuilderKind kind, Config& c) {
  c.profile = Profile::Vllm034;
  if (c.mamba_cache_mode == CacheMode::All) c.mamba_cache_mode = CacheMode::Align;
  c.chunk_metadata = kind == BuilderKind::Gdn;
  const bool align = c.mamba_cache_mode == CacheMode::Align;
  if (kind == BuilderKind::Gdn) {
    c.prefill_backend = coin(rng) ? PrefillBackend::FlashInfer : PrefillBackend::Triton;
    c.num_prefill_checkpoint_blocks = align && coin(rng, 0.7) ? 1 : 0;
    if (c.num_prefill_checkpoint_blocks > 0) {
      c.prefill_checkpoint_alignment = pick(rng, {0, 16, 64, c.block_size});
      // The default grid (0: the block size) is FlashInfer's; a GDN layer on another backend
      // exports checkpoints only on a grid of its own (GLM-5-Next: 16), as vLLM's configs do.
      if (c.prefill_checkpoint_alignment == 0 && c.prefill_backend != PrefillBackend::FlashInfer)
        c.prefill_checkpoint_alignment = c.block_size;
    }
  } else if (kind == BuilderKind::Kda) {
    c.prefill_backend = static_cast<PrefillBackend>(uniform(rng, 0, 2));
    if (c.prefill_backend != PrefillBackend::FlashKda) c.num_prefill_checkpoint_blocks = 0;
  } else {
    c.prefill_backend = PrefillBackend::Triton;
    c.use_recoverssm = false;
    c.num_prefill_checkpoint_blocks = 0;
    if (kind == BuilderKind::Mamba2) {
      c.chunk_size = pick(rng, {64, 128, 256});
      c.num_prefill_checkpoint_blocks = align && coin(rng, 0.7) ? 1 : 0;
      if (c.num_prefill_checkpoint_blocks > 0)
        c.prefill_checkpoint_alignment = pick(rng, {0, 1, 16});
    }
    if (kind == BuilderKind::PleShortConv && align && coin(rng, 0.5)) {
      c.num_prefill_checkpoint_blocks = 1;
      c.prefill_checkpoint_alignment = pick(rng, {1, 16, c.block_size});
    }
    // ReplaySSM's Triton path (M6): the Mamba base builders without speculative decoding.
    c.use_replayssm = is_mamba_base(kind) && c.num_spec == 0 && coin(rng, 0.5);
    if (kind == BuilderKind::Inkling) {  // a sliding-window KV cache: no Mamba state (I2)
      c.mamba_cache_mode = CacheMode::None;
      c.num_speculative_blocks = 0;
    }
  }
}

/// A random configuration for `kind` (seed profile unless `profile` says otherwise; the Mamba
/// family has only the vllm-0.34 profile).
inline Config random_config(std::mt19937& rng, BuilderKind kind, Profile profile = Profile::Seed) {
  Config c;
  c.num_spec = pick(rng, {0, 1, 2, 3, 7});
  c.max_num_seqs = pick(rng, {4, 16, 64, 256});
  c.max_num_batched_tokens = pick(rng, {2048, 8192});
  c.full_cuda_graph = coin(rng, 0.6);
  c.max_cudagraph_capture_size = coin(rng, 0.3) ? uniform(rng, 1, 512) : 0;
  c.mamba_cache_mode = static_cast<CacheMode>(uniform(rng, 0, 2));
  c.block_size = pick(rng, {16, 64, 256});
  c.chunk_metadata = kind == BuilderKind::Gdn && coin(rng, 0.9);
  if (kind == BuilderKind::Kda) {
    c.use_recoverssm = c.num_spec > 0 && coin(rng);
    c.num_prefill_checkpoint_blocks = coin(rng) ? 1 : 0;
  }
  c.num_speculative_blocks = c.use_recoverssm ? 0 : c.num_spec;
  if (profile == Profile::Vllm034 || !is_gdn_family(kind)) make_vllm034(rng, kind, c);
  return c;
}

/// A random valid step for `config`; r.config may raise max_num_batched_tokens
/// when the rows need more tokens than it allows.
inline RandomStep random_step(std::mt19937& rng, const Config& config, const RandomStepOptions& o) {
  RandomStep r;
  r.config = config;
  r.kind = o.kind;
  const int32_t k = config.num_spec;
  const int32_t D = config.decode_cudagraph_max_bs(o.kind);
  const bool v034 = config.profile == Profile::Vllm034;
  const bool mamba = is_mamba_base(o.kind);
  // PLE ShortConv's capture limit on tokens: max_num_seqs * (k + 1), capped.
  int32_t ple_tokens = config.max_num_seqs * (k + 1);
  if (config.max_cudagraph_capture_size > 0)
    ple_tokens = std::min(ple_tokens, config.max_cudagraph_capture_size);
  const bool ple = o.kind == BuilderKind::PleShortConv;
  r.capture = o.allow_capture && config.full_cuda_graph && coin(rng, 0.1) && D >= k + 1 &&
              (!ple || ple_tokens >= k + 1);

  // Row roles: decodes and spec decodes first (interleaved), then prefills, then padding.
  enum Role { Decode, Spec, Prefill, Pad };
  const int32_t capture_rows = !mamba ? D / (k + 1) : ple ? std::min(D, ple_tokens / (k + 1)) : D;
  const int32_t max_rows =
      r.capture ? std::min(config.max_num_seqs, capture_rows) : config.max_num_seqs;
  const int32_t n = o.num_reqs > 0 ? std::min(o.num_reqs, max_rows) : uniform(rng, 1, max_rows);
  const int32_t pads = coin(rng, 0.4) ? uniform(rng, 0, std::min(n - 1, 8)) : 0;
  const int32_t shape = uniform(rng, 0, 4);  // decode, spec, prefill, decode+prefill, any
  std::vector<Role> roles;
  for (int32_t i = 0; i < n - pads; ++i) {
    const int32_t x = uniform(rng, 0, 2);
    Role role = shape == 0   ? Decode
                : shape == 1 ? (k > 0 ? Spec : Decode)
                : shape == 2 ? Prefill
                : shape == 3 ? (x == 0 ? Prefill : Decode)
                             : (x == 0            ? Decode
                                : x == 1 && k > 0 ? Spec
                                                  : Prefill);
    if (r.capture) role = k > 0 && (mamba || coin(rng, 0.8)) ? Spec : Decode;
    roles.push_back(role);
  }
  std::stable_partition(roles.begin(), roles.end(), [](Role x) { return x != Prefill; });
  roles.resize(static_cast<size_t>(n), Pad);

  // Query lengths: fixed ones first, then prefills grow into the token budget.
  std::vector<int32_t> q(static_cast<size_t>(n), 0);
  r.drafts.assign(static_cast<size_t>(n), -1);
  const bool no_drafts = o.zero_drafts > 0 && coin(rng, o.zero_drafts);
  int32_t fixed = 0;
  for (int32_t i = 0; i < n; ++i) {
    const auto u = static_cast<size_t>(i);
    if (roles[u] == Decode || roles[u] == Prefill) q[u] = 1;
    if (roles[u] == Spec) {
      r.drafts[u] = no_drafts ? 0 : uniform(rng, coin(rng, 0.1) ? 0 : std::min(1, k), k);
      // A Mamba capture batch is uniform: num_spec + 1 tokens per row.
      if (r.capture && mamba) r.drafts[u] = k;
      q[u] = r.drafts[u] + 1;
    }
    fixed += q[u];
  }
  // A GDN / KDA capture batch holds at most D tokens; a Mamba one D rows (PLE: and
  // ple_tokens tokens).
  int32_t cap = !r.capture ? config.max_num_batched_tokens
                : !mamba   ? D
                : ple      ? std::min(ple_tokens, config.max_num_batched_tokens)
                           : config.max_num_batched_tokens;
  if (fixed > cap) {
    r.capture = false;
    cap = std::max(config.max_num_batched_tokens, fixed + 16);
  }
  r.config.max_num_batched_tokens =
      r.capture ? config.max_num_batched_tokens : std::max(config.max_num_batched_tokens, cap);
  int32_t budget = cap - fixed - (coin(rng, 0.5) ? uniform(rng, 0, std::min(16, cap - fixed)) : 0);
  for (int32_t i = 0; i < n; ++i)
    if (roles[static_cast<size_t>(i)] == Prefill) {
      const int32_t extra = std::min(budget, uniform(rng, 0, o.max_prefill_len - 1));
      q[static_cast<size_t>(i)] += extra;
      budget -= extra;
    }

  r.num_reqs = n;
  r.qsl.assign(1, 0);
  r.has_drafts = k > 0 && !r.capture && coin(rng, 0.9);
  // Bailing decodes speculatively only when handed accepted counts (L2): both ways.
  r.has_accepted = k > 0 && !r.capture && (o.kind != BuilderKind::BailingLinear || coin(rng));
  const bool with_prefilling = o.kind == BuilderKind::Kda || mamba || coin(rng, 0.7);
  for (int32_t i = 0; i < n; ++i) {
    const auto u = static_cast<size_t>(i);
    const Role role = roles[u];
    r.qsl.push_back(r.qsl.back() + q[u]);
    int32_t computed = uniform(rng, 1, 5000);
    if (role == Prefill && coin(rng)) computed = 0;  // a fresh prompt
    if (role == Decode && coin(rng, 0.05)) computed = 0;
    // vllm-0.34 checkpoints need prefills that resume on a block boundary.
    if (v034 && role == Prefill && computed > 0 && coin(rng, 0.4))
      computed = config.block_size * uniform(rng, 1, 8);
    const int32_t seq = role == Pad ? 0 : computed + q[u];
    r.seq_ub.push_back(seq);
    // Async spec decode: the device seq_len trails the optimistic host bound.
    const int32_t lag = role == Spec && coin(rng, 0.3) ? uniform(rng, 0, q[u] - 1) : 0;
    r.seq_lens.push_back(seq - lag);
    r.accepted.push_back(role == Spec ? uniform(rng, 1, q[u]) : 1);
    // A one-token chunk or a draft-padded prompt tail with prior state is still prefilling
    // (the Mamba builders' decode-path rule M2).
    const bool tail = mamba && role == Spec && !r.capture;
    bool prefilling = role == Prefill || ((role == Decode || tail) && coin(rng, 0.05));
    // A resumed request recomputing past its prompt: long, yet not prefilling.
    if (v034 && role == Prefill && computed > 0 && coin(rng, 0.1)) prefilling = false;
    r.is_prefilling.push_back(prefilling ? 1 : 0);
  }
  if (!with_prefilling) r.is_prefilling.clear();
  r.num_actual_tokens = std::min(cap, r.qsl.back() + (coin(rng, 0.3) ? uniform(rng, 0, 16) : 0));

  // Block tables wide enough for the aligned gather and checkpoints, sometimes strided.
  int32_t need = k + 1;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t seq = r.seq_ub[static_cast<size_t>(i)];
    need = std::max(
        need, (seq > 0 ? (seq - 1) / config.block_size : 0) + config.num_speculative_blocks + 1);
    need = std::max(need, seq / config.block_size + 1);
  }
  r.width = need + uniform(rng, 0, 2);
  r.row_stride = r.width + (coin(rng, 0.3) ? uniform(rng, 1, 5) : 0);
  for (int32_t g = 0; g < o.num_groups; ++g) {
    std::vector<int32_t> t(static_cast<size_t>(n * r.row_stride), -7);  // -7: never read
    for (int32_t i = 0; i < n; ++i)
      for (int32_t col = 0; col < r.width; ++col)
        t[static_cast<size_t>(i * r.row_stride + col)] = uniform(rng, 1, 1 << 20);
    r.tables.push_back(std::move(t));
  }
  return r;
}

}  // namespace linmeta::testing
