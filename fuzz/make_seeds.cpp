// linmeta_fuzz_seeds CASES.jsonl OUT_DIR: writes one fuzz program per case (SPEC §10)
// into OUT_DIR (the seed corpus of linmeta_fuzz): the case's configuration, its build
// call, then an update_block_table of group 0; plus the edge programs below.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "case_file.hpp"
#include "fuzz_program.hpp"

namespace linmeta::fuzz {
namespace {

FuzzProgram program_of(const cases::Case& c) {
  FuzzProgram p;
  FuzzConfig& f = p.config;
  f.flags = static_cast<uint8_t>((c.kind == BuilderKind::Kda ? FuzzConfig::Kda : 0) |
                                 (c.config.full_cuda_graph ? FuzzConfig::FullGraph : 0) |
                                 (c.config.chunk_metadata ? FuzzConfig::ChunkMetadata : 0) |
                                 (c.config.use_recoverssm ? FuzzConfig::RecoverSsm : 0));
  f.num_spec = c.config.num_spec;
  f.max_num_seqs = c.config.max_num_seqs;
  f.max_num_batched_tokens = c.config.max_num_batched_tokens;
  f.max_cudagraph_capture_size = c.config.max_cudagraph_capture_size;
  f.mamba_cache_mode = static_cast<int32_t>(c.config.mamba_cache_mode);
  f.block_size = c.config.block_size;
  f.num_speculative_blocks = c.config.num_speculative_blocks;
  f.num_prefill_checkpoint_blocks = c.config.num_prefill_checkpoint_blocks;
  f.num_groups = static_cast<int32_t>(c.tables.size());

  FuzzCall& k = p.calls.emplace_back();
  k.op = c.multi_group ? (c.capture ? Op::CaptureGroups : Op::BuildGroups)
                       : (c.capture ? Op::Capture : Op::Build);
  k.num_reqs = c.num_reqs;
  const size_t n = rows_of(c.num_reqs);
  k.qsl0 = c.qsl.at(0);
  for (size_t r = 0; r < n; ++r) k.qsl_steps.push_back(c.qsl.at(r + 1) - c.qsl.at(r));
  k.tokens_extra = c.num_actual_tokens - c.qsl.back();
  k.seq_ub.assign(c.seq_lens_ub.begin(), c.seq_lens_ub.begin() + static_cast<ptrdiff_t>(n));
  bool differs = false;
  for (size_t r = 0; r < n; ++r) {
    k.seq_delta.push_back(c.seq_lens.at(r) - c.seq_lens_ub.at(r));
    differs = differs || k.seq_delta.back() != 0;
  }
  uint8_t flags = differs ? FuzzCall::DeviceSeqDiffers : 0;
  if (!differs) k.seq_delta.clear();
  if (!c.is_prefilling.empty()) {
    flags |= FuzzCall::HasPrefilling;
    k.prefilling.assign(c.is_prefilling.begin(), c.is_prefilling.end());
  }
  if (c.has_drafts) {
    flags |= FuzzCall::HasDrafts;
    k.drafts = c.drafts;
  }
  if (c.has_accepted) {
    flags |= FuzzCall::HasAccepted;
    k.accepted = c.accepted;
  }
  k.flags = flags;
  k.table.width = c.width;

  FuzzCall& u = p.calls.emplace_back();
  u.op = Op::Update;
  u.table.width = c.width;
  u.table.salt = 1;
  return p;
}

/// A two-row spec step (ql 3, 2 drafts each) over a table of `width` columns.
FuzzCall spec_call(int32_t width) {
  FuzzCall k;
  k.op = Op::Build;
  k.flags = FuzzCall::HasDrafts | FuzzCall::HasAccepted | FuzzCall::HasPrefilling;
  k.num_reqs = 2;
  k.qsl_steps = {3, 3};
  k.seq_ub = {10, 12};
  k.prefilling = {0, 0};
  k.drafts = {2, 2};
  k.accepted = {1, 2};
  k.table.width = width;
  return k;
}

/// Programs at the edges issue 13 found (tests/host/hardening_test.cpp has each as a
/// test): seeds near the limits, for the fuzzer to mutate.
std::vector<FuzzProgram> edge_programs() {
  std::vector<FuzzProgram> out;
  FuzzConfig spec;
  spec.num_spec = 2;
  spec.num_speculative_blocks = 2;
  {  // item 2: an upper bound of INT32_MAX with block_size 1 (align mode)
    FuzzProgram p{spec, {spec_call(4)}};
    p.config.mamba_cache_mode = static_cast<int32_t>(CacheMode::Align);
    p.config.block_size = 1;
    p.calls[0].seq_ub = {INT32_MAX, 12};
    p.calls[0].flags = static_cast<uint8_t>(p.calls[0].flags | FuzzCall::DeviceSeqDiffers);
    p.calls[0].seq_delta = {INT32_MIN + 10, 0};
    out.push_back(p);
  }
  {  // item 4: query_start_loc [0, INT32_MAX, INT32_MIN]
    FuzzProgram p{spec, {spec_call(3)}};
    p.calls[0].qsl_steps = {INT32_MAX, 1};
    out.push_back(p);
  }
  {  // item 5: drafts whose int32 sum wraps to 0
    FuzzProgram p{spec, {spec_call(3)}};
    p.calls[0].drafts = {INT32_MAX, INT32_MAX};
    out.push_back(p);
  }
  {  // item 6: configuration fields at INT32_MAX
    FuzzProgram p{spec, {spec_call(3)}};
    p.config.max_num_seqs = INT32_MAX;
    p.config.num_spec = INT32_MAX;
    out.push_back(p);
  }
  {  // item 7: KDA RecoverSSM without accepted counts, then a re-gather
    FuzzProgram p{spec, {spec_call(3)}};
    p.config.flags = FuzzConfig::Kda | FuzzConfig::RecoverSsm | FuzzConfig::FullGraph;
    p.config.num_speculative_blocks = 0;
    p.calls[0].flags &= static_cast<uint8_t>(~FuzzCall::HasAccepted);
    p.calls[0].accepted.clear();
    FuzzCall u;
    u.op = Op::Update;
    u.table.width = 3;
    u.table.salt = 5;
    p.calls.push_back(u);
    out.push_back(p);
  }
  return out;
}

}  // namespace

/// The bytes of `p`, checked to decode back to the same program.
std::vector<uint8_t> encode_checked(const FuzzProgram& p) {
  auto bytes = encode(p);
  if (encode(decode(bytes.data(), bytes.size())) != bytes)
    throw std::runtime_error("a seed does not decode to the program it encodes");
  return bytes;
}

}  // namespace linmeta::fuzz

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s CASES.jsonl OUT_DIR\n", argv[0]);
    return 2;
  }
  try {
    const std::filesystem::path out(argv[2]);
    std::filesystem::create_directories(out);
    int count = 0;
    for (const auto& j : linmeta::cases::read_jsonl(argv[1])) {
      const auto bytes =
          linmeta::fuzz::encode_checked(linmeta::fuzz::program_of(linmeta::cases::parse_case(j)));
      std::ofstream f(out / ("case-" + std::to_string(count++)), std::ios::binary);
      f.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    }
    for (const auto& p : linmeta::fuzz::edge_programs()) {
      const auto bytes = linmeta::fuzz::encode_checked(p);
      std::ofstream f(out / ("edge-" + std::to_string(count++)), std::ios::binary);
      f.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    }
    std::printf("linmeta_fuzz_seeds: %d seeds in %s\n", count, argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "linmeta_fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
