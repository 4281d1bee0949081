#include <algorithm>
#include <iterator>
#include <sstream>

#include "bench.hpp"
#include "case_file.hpp"
#include "linmeta/names.hpp"

namespace linmeta::bench {

namespace {

int32_t round_up(int32_t x, int32_t m) { return (x + m - 1) / m * m; }

/// Rows in vLLM's order (spec decodes, decodes, prefills), all query lengths and seq_lens set.
void fill_rows(Workload& w, int32_t k) {
  testing::RandomStep& d = w.step;
  d.num_reqs = w.spec_rows + w.decode_rows + w.prefill_rows;
  d.has_drafts = d.has_accepted = k > 0;
  d.qsl.assign(1, 0);
  for (int32_t r = 0; r < d.num_reqs; ++r) {
    const bool spec = r < w.spec_rows, prefill = r >= w.spec_rows + w.decode_rows;
    const int32_t p = r - w.spec_rows - w.decode_rows;  // prefill index
    const int32_t q = spec ? k + 1 : prefill ? w.prefill_len : 1;
    // Decodes spread over many block-table columns; prefills alternate fresh prompts and
    // continued chunks (4144 % 64 = 48 gives KDA checkpoint tails, 4144 % 256 = 48 a Mamba2
    // chunk that finishes the one the computed tokens left open).
    const int32_t computed = !prefill ? 1000 + (r * 613) % 4096 : p % 2 == 0 ? 0 : 4096 + 48;
    d.qsl.push_back(d.qsl.back() + q);
    d.seq_ub.push_back(computed + q);
    d.seq_lens.push_back(computed + q);
    d.drafts.push_back(spec ? k : -1);
    d.accepted.push_back(spec ? 1 + r % (k + 1) : 1);
    d.is_prefilling.push_back(prefill ? 1 : 0);
  }
  d.num_actual_tokens = d.qsl.back();
}

/// Block tables wide enough for every row's aligned gather, distinct per group.
void fill_tables(testing::RandomStep& d, int32_t groups) {
  const Config& c = d.config;
  int32_t need = c.num_spec + 1;
  for (int32_t seq : d.seq_ub)
    need = std::max({need, (seq > 0 ? (seq - 1) / c.block_size : 0) + c.num_speculative_blocks + 1,
                     seq / c.block_size + 1});
  d.width = need + 1;
  d.row_stride = d.width;
  for (int64_t g = 0; g < groups; ++g) {
    std::vector<int32_t> t(static_cast<size_t>(d.num_reqs) * static_cast<size_t>(d.width));
    for (size_t i = 0; i < t.size(); ++i)
      t[i] = 1 + static_cast<int32_t>((g * 7919 + static_cast<int64_t>(i) * 31) % 1000003);
    d.tables.push_back(std::move(t));
  }
}

}  // namespace

const std::vector<std::string>& builtin_names() {
  static const std::vector<std::string> names = [] {
    std::istringstream in(R"(
gdn/decode/B1/none/G1/fullgraph gdn/decode/B64/none/G1/fullgraph
gdn/decode/B256/none/G1/fullgraph gdn/decode/B1024/none/G1/fullgraph
gdn/decode/B256/none/G1/nograph gdn/decode/B256/align/G1/fullgraph
gdn/decode/B256/none/G4/fullgraph gdn/spec-k1/B1/align/G1/fullgraph
gdn/spec-k1/B64/align/G1/fullgraph gdn/spec-k1/B256/align/G1/fullgraph
gdn/spec-k3/B1/align/G1/fullgraph gdn/spec-k3/B64/align/G1/fullgraph
gdn/spec-k3/B256/align/G1/fullgraph gdn/spec-k7/B1/align/G1/fullgraph
gdn/spec-k7/B64/align/G1/fullgraph gdn/spec-k7/B256/align/G1/fullgraph
gdn/spec-k3/B256/none/G1/fullgraph gdn/spec-k3/B256/align/G1/nograph
gdn/spec-k3/B256/align/G4/fullgraph gdn/spec-k3/B256/align/G16/fullgraph
gdn/spec-k3/B256/align/G48/fullgraph gdn/spec-k3/B256/align/G4/nograph
gdn/spec-k3+prefill/B36/align/G1/fullgraph gdn/spec-k3+prefill/B36/align/G4/fullgraph
gdn/spec-k3+prefill/B36/none/G1/nograph gdn/decode+prefill/B260/none/G1/fullgraph
gdn/decode+prefill/B260/align/G4/fullgraph gdn/prefill/B4/none/G1/nograph
gdn/spec-k3/B8/align/G4/fullgraph
kda/decode/B256/none/G1/fullgraph kda/spec-k3/B256/align/G1/fullgraph
kda/recoverssm-k3/B256/align/G1/fullgraph kda/recoverssm-k3/B256/align/G4/fullgraph
kda/recoverssm-k3+prefill/B36/align/G1/fullgraph kda/recoverssm-k3+prefill/B36/none/G1/nograph
kda/decode+prefill/B260/align/G4/fullgraph
mamba2/decode/B256/none/G1/fullgraph mamba2/decode/B256/align/G1/fullgraph
mamba2/spec-k3/B256/align/G1/fullgraph mamba2/prefill4096/B8/none/G1/nograph
mamba2/prefill4096/B8/align/G1/nograph mamba1/decode/B256/none/G1/fullgraph
mamba1/prefill4096/B8/none/G1/nograph short_conv/decode/B256/none/G1/fullgraph
short_conv/prefill4096/B8/none/G1/nograph linear/decode/B256/none/G1/fullgraph
linear/prefill4096/B8/none/G1/nograph ple_short_conv/decode/B256/none/G1/fullgraph
ple_short_conv/spec-k3/B256/align/G1/fullgraph ple_short_conv/prefill4096/B8/none/G1/nograph
bailing_linear/decode/B256/none/G1/fullgraph bailing_linear/prefill4096/B8/none/G1/nograph)");
    return std::vector<std::string>(std::istream_iterator<std::string>(in), {});
  }();
  return names;
}

Workload make_workload(const std::string& name) {
  auto bad = [&name]() -> Error {
    return Error("not a workload name: '" + name + "' (see --list and docs/bench.md)");
  };
  std::vector<std::string> part;  // builder, mix, B<rows>, mode, G<groups>, graph
  std::istringstream in(name);
  for (std::string s; std::getline(in, s, '/');) part.push_back(s);
  // The number after `prefix` in `s` (1 to 5 digits).
  auto number = [&](const std::string& s, std::string_view prefix) {
    const std::string digits = s.substr(std::min(s.size(), prefix.size()));
    if (!s.starts_with(prefix) || digits.empty() || digits.size() > 5 ||
        !std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      throw bad();
    return static_cast<int32_t>(std::stoi(digits));
  };
  if (part.size() != 6 || (part[5] != "fullgraph" && part[5] != "nograph")) throw bad();
  const auto kind = names::parse(names::kBuilderKinds, part[0]);
  const auto mode = names::parse(names::kCacheModes, part[3]);
  // The row mix: "<mix>", "<mix>+prefill[L]" or "prefill[L]" (L tokens per prefill, 2048).
  const size_t plus = part[1].find("+prefill");
  const std::string mix = part[1].substr(0, plus);
  const std::string prefill = plus == std::string::npos ? "" : part[1].substr(plus + 1);
  const bool only_prefill = mix.starts_with("prefill"),
             recoverssm = mix.starts_with("recoverssm-k");
  const std::string& pre = only_prefill ? mix : prefill;
  const int32_t len = pre.size() > 7 ? number(pre, "prefill") : 2048;
  const int32_t k = mix.starts_with("spec-k")         ? number(mix, "spec-k")
                    : recoverssm                      ? number(mix, "recoverssm-k")
                    : mix == "decode" || only_prefill ? 0
                                                      : throw bad();
  const int32_t rows = number(part[2], "B"), groups = number(part[4], "G");
  const int32_t prefills = only_prefill ? rows : plus != std::string::npos ? 4 : 0;
  if (!kind || !mode || k > 9 || (only_prefill && plus != std::string::npos) || groups < 1 ||
      rows < 1 || rows < prefills || len < 1 || int64_t{prefills} * len > kMaxNumBatchedTokens ||
      (recoverssm && kind != BuilderKind::Kda))
    throw bad();
  Workload w;
  w.name = name;
  w.prefill_rows = prefills;
  w.prefill_len = prefills > 0 ? len : 0;
  (mix == "decode" ? w.decode_rows : w.spec_rows) = only_prefill ? 0 : rows - prefills;
  testing::RandomStep& d = w.step;
  d.kind = *kind;
  Config& c = d.config;
  c.num_spec = k;
  c.max_num_seqs = rows <= 256 ? 256 : rows <= 512 ? 512 : round_up(rows, 1024);
  c.full_cuda_graph = part[5] == "fullgraph";
  c.mamba_cache_mode = *mode;
  c.block_size = 64;
  c.num_speculative_blocks = recoverssm ? 0 : k;
  c.chunk_metadata = d.kind == BuilderKind::Gdn;
  c.use_recoverssm = recoverssm;
  const bool checkpoints = d.kind == BuilderKind::Kda || d.kind == BuilderKind::Mamba2;
  c.num_prefill_checkpoint_blocks = checkpoints && c.mamba_cache_mode == CacheMode::Align ? 1 : 0;
  // The Mamba family: vLLM 0.34's builders, Mamba2 with 256-token SSD chunks.
  c.profile = is_gdn_family(d.kind) ? Profile::Seed : Profile::Vllm034;
  c.chunk_size = d.kind == BuilderKind::Mamba2 ? 256 : 0;
  fill_rows(w, k);
  c.max_num_batched_tokens = std::max(8192, round_up(d.num_actual_tokens, 8192));
  fill_tables(d, groups);
  return w;
}

std::vector<Workload> case_workloads(const std::string& path) {
  std::vector<Workload> out;
  for (const auto& line : cases::read_lines(path)) {
    if (!line.error.empty())
      throw Error(path + ":" + std::to_string(line.number) + ": " + line.error);
    cases::Case c;
    try {
      c = cases::parse_case(line.value);
    } catch (const std::exception& e) {
      throw Error(path + ":" + std::to_string(line.number) + ": invalid case: " + e.what());
    }
    if (c.error && c.error->rejects_input()) continue;
    Workload w;
    w.name = std::to_string(line.number) + ":" + c.name;
    testing::RandomStep& d = w.step;
    d.config = c.config, d.kind = c.kind, d.capture = c.capture, d.num_reqs = c.num_reqs;
    d.num_actual_tokens = c.num_actual_tokens, d.qsl = c.qsl, d.seq_lens = c.seq_lens;
    d.seq_ub = c.seq_lens_ub, d.drafts = c.drafts, d.accepted = c.accepted;
    d.is_prefilling = c.is_prefilling, d.has_drafts = c.has_drafts, d.has_accepted = c.has_accepted;
    d.width = c.width, d.row_stride = c.width, d.tables = c.tables;
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace linmeta::bench
