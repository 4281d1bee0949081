#include "workloads.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace linmeta::bench {

namespace {

const char* mode_name(CacheMode m) {
  switch (m) {
    case CacheMode::None:
      return "none";
    case CacheMode::All:
      return "all";
    case CacheMode::Align:
      return "align";
  }
  return "?";
}

int32_t round_up(int32_t x, int32_t m) { return (x + m - 1) / m * m; }

struct Make {
  BuilderKind kind = BuilderKind::Gdn;
  const char* mix = "";  ///< name component; "{k}" is replaced by num_spec
  int32_t k = 0;
  StepShape shape;
  CacheMode mode = CacheMode::None;
  int32_t groups = 1;
  bool fullgraph = true;
  bool recoverssm = false;
  double vllm_py_us = 0;
  bool headline = false;

  [[nodiscard]] Workload operator()() const {
    Workload w;
    w.kind = kind;
    w.groups = groups;
    w.shape = shape;
    w.vllm_py_us = vllm_py_us;
    w.headline = headline;
    const int32_t rows = shape.rows();
    const int32_t tokens =
        shape.spec_rows * (k + 1) + shape.decode_rows + shape.prefill_rows * shape.prefill_len;
    Config& c = w.config;
    c.num_spec = k;
    c.max_num_seqs = rows <= 256 ? 256 : rows <= 512 ? 512 : round_up(rows, 1024);
    c.max_num_batched_tokens = std::max(8192, round_up(tokens, 8192));
    c.full_cuda_graph = fullgraph;
    c.mamba_cache_mode = mode;
    c.block_size = 64;
    c.num_speculative_blocks = recoverssm ? 0 : k;
    c.chunk_metadata = kind == BuilderKind::Gdn;
    c.use_recoverssm = recoverssm;
    c.num_prefill_checkpoint_blocks = kind == BuilderKind::Kda && mode == CacheMode::Align ? 1 : 0;
    w.name = fmt::format("{}/{}/B{}/{}/G{}/{}", kind == BuilderKind::Gdn ? "gdn" : "kda",
                         fmt::format(fmt::runtime(mix), fmt::arg("k", k)), rows, mode_name(mode),
                         groups, fullgraph ? "fullgraph" : "nograph");
    return w;
  }
};

StepShape decode(int32_t n) { return {.decode_rows = n}; }
StepShape spec(int32_t n) { return {.spec_rows = n}; }
/// Chunked prefills of 2048 tokens next to `spec_rows` spec decodes and `decode_rows` decodes.
StepShape mixed(int32_t spec_rows, int32_t decode_rows, int32_t prefills) {
  return {.spec_rows = spec_rows,
          .decode_rows = decode_rows,
          .prefill_rows = prefills,
          .prefill_len = 2048};
}

}  // namespace

std::vector<Workload> all_workloads() {
  using enum CacheMode;
  constexpr auto Gdn = BuilderKind::Gdn;
  constexpr auto Kda = BuilderKind::Kda;
  // Reference host times of vLLM's Python builder on an H200 (microseconds per step).
  constexpr double kPyDecode256 = 132, kPySpec256 = 861, kPySpec256G4 = 1265;
  std::vector<Workload> w;
  auto add = [&w](const Make& m) { w.push_back(m()); };

  // Decode only (no speculative decoding).
  for (int32_t b : {1, 64, 256, 1024})
    add({.kind = Gdn,
         .mix = "decode",
         .shape = decode(b),
         .vllm_py_us = b == 256 ? kPyDecode256 : 0});
  add({.kind = Gdn, .mix = "decode", .shape = decode(256), .fullgraph = false});
  add({.kind = Gdn, .mix = "decode", .shape = decode(256), .mode = Align});
  add({.kind = Gdn, .mix = "decode", .shape = decode(256), .groups = 4});

  // Pure spec decode, align mode (k aligned state slots per row).
  for (int32_t k : {1, 3, 7})
    for (int32_t b : {1, 64, 256})
      add({.kind = Gdn,
           .mix = "spec-k{k}",
           .k = k,
           .shape = spec(b),
           .mode = Align,
           .vllm_py_us = k == 3 && b == 256 ? kPySpec256 : 0});
  add({.kind = Gdn, .mix = "spec-k{k}", .k = 3, .shape = spec(256), .mode = None});
  add({.kind = Gdn,
       .mix = "spec-k{k}",
       .k = 3,
       .shape = spec(256),
       .mode = Align,
       .fullgraph = false});

  // KV-cache groups (build_groups); G4 is the headline (GLM-5.3-Flash).
  for (int32_t g : {4, 16, 48})
    add({.kind = Gdn,
         .mix = "spec-k{k}",
         .k = 3,
         .shape = spec(256),
         .mode = Align,
         .groups = g,
         .vllm_py_us = g == 4 ? kPySpec256G4 : 0,
         .headline = g == 4});
  add({.kind = Gdn,
       .mix = "spec-k{k}",
       .k = 3,
       .shape = spec(256),
       .mode = Align,
       .groups = 4,
       .fullgraph = false});

  // Spec decode next to chunked prefills; decode + prefill without spec; prefill only.
  add({.kind = Gdn, .mix = "spec-k{k}+prefill", .k = 3, .shape = mixed(32, 0, 4), .mode = Align});
  add({.kind = Gdn,
       .mix = "spec-k{k}+prefill",
       .k = 3,
       .shape = mixed(32, 0, 4),
       .mode = Align,
       .groups = 4});
  add({.kind = Gdn,
       .mix = "spec-k{k}+prefill",
       .k = 3,
       .shape = mixed(32, 0, 4),
       .mode = None,
       .fullgraph = false});
  add({.kind = Gdn, .mix = "decode+prefill", .shape = mixed(0, 256, 4)});
  add({.kind = Gdn,
       .mix = "decode+prefill",
       .shape = mixed(0, 256, 4),
       .mode = Align,
       .groups = 4});
  add({.kind = Gdn, .mix = "prefill", .shape = mixed(0, 0, 4), .fullgraph = false});

  // KDA: regular spec decode, RecoverSSM (S = 1), prefill checkpoints (align).
  add({.kind = Kda, .mix = "decode", .shape = decode(256)});
  add({.kind = Kda, .mix = "spec-k{k}", .k = 3, .shape = spec(256), .mode = Align});
  add({.kind = Kda,
       .mix = "recoverssm-k{k}",
       .k = 3,
       .shape = spec(256),
       .mode = Align,
       .recoverssm = true});
  add({.kind = Kda,
       .mix = "recoverssm-k{k}",
       .k = 3,
       .shape = spec(256),
       .mode = Align,
       .groups = 4,
       .recoverssm = true});
  add({.kind = Kda,
       .mix = "recoverssm-k{k}+prefill",
       .k = 3,
       .shape = mixed(32, 0, 4),
       .mode = Align,
       .recoverssm = true});
  add({.kind = Kda,
       .mix = "recoverssm-k{k}+prefill",
       .k = 3,
       .shape = mixed(32, 0, 4),
       .mode = None,
       .fullgraph = false,
       .recoverssm = true});
  add({.kind = Kda,
       .mix = "decode+prefill",
       .shape = mixed(0, 256, 4),
       .mode = Align,
       .groups = 4});
  return w;
}

StepData make_step(const Workload& w) {
  const Config& c = w.config;
  const StepShape& sh = w.shape;
  const int32_t k = c.num_spec;
  StepData d;
  d.config = c;
  d.kind = w.kind;
  d.num_reqs = sh.rows();
  d.has_drafts = k > 0;
  d.has_accepted = k > 0;
  d.is_prefilling.assign(static_cast<size_t>(d.num_reqs), 0);
  d.qsl.push_back(0);
  for (int32_t r = 0; r < d.num_reqs; ++r) {
    const bool is_spec = r < sh.spec_rows;
    const bool is_decode = !is_spec && r < sh.spec_rows + sh.decode_rows;
    const int32_t p = r - sh.spec_rows - sh.decode_rows;  // prefill index
    const bool is_prefill = p >= 0 && p < sh.prefill_rows;
    int32_t q = 0, computed = 0;
    if (is_spec || is_decode) {
      q = is_spec ? k + 1 : 1;
      computed = 1000 + (r * 613) % 4096;  // spread over many block-table columns
    } else if (is_prefill) {
      q = sh.prefill_len;
      // Alternate fresh prompts and continued chunks; 4144 % 64 = 48 gives KDA checkpoint tails.
      computed = p % 2 == 0 ? 0 : 4096 + 48;
    }
    d.qsl.push_back(d.qsl.back() + q);
    const int32_t seq = q == 0 ? 0 : computed + q;
    d.seq_ub.push_back(seq);
    d.seq_lens.push_back(seq);
    d.drafts.push_back(is_spec ? k : -1);
    d.accepted.push_back(is_spec ? 1 + r % (k + 1) : 1);
    d.is_prefilling[static_cast<size_t>(r)] = is_prefill ? 1 : 0;
  }
  d.num_actual_tokens = d.qsl.back();

  int32_t need = k + 1;
  for (int32_t seq : d.seq_ub) {
    need = std::max(need, (seq > 0 ? (seq - 1) / c.block_size : 0) + c.num_speculative_blocks + 1);
    need = std::max(need, seq / c.block_size + 1);
  }
  d.width = need + 1;
  d.row_stride = d.width;
  for (int32_t g = 0; g < w.groups; ++g) {
    std::vector<int32_t> t(static_cast<size_t>(d.num_reqs) * static_cast<size_t>(d.width));
    for (size_t i = 0; i < t.size(); ++i)
      t[i] = 1 + static_cast<int32_t>(
                     (static_cast<int64_t>(g) * 7919 + static_cast<int64_t>(i) * 31) % 1000003);
    d.tables.push_back(std::move(t));
  }
  return d;
}

}  // namespace linmeta::bench
