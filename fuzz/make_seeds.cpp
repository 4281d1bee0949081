// linmeta_fuzz_seeds CASES.jsonl OUT_DIR: writes one fuzz program per case (SPEC §10)
// into OUT_DIR (the seed corpus of linmeta_fuzz): the case's configuration, its build
// call, then an update_block_table of group 0.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>

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

}  // namespace
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
          linmeta::fuzz::encode(linmeta::fuzz::program_of(linmeta::cases::parse_case(j)));
      std::ofstream f(out / ("case-" + std::to_string(count++)), std::ios::binary);
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
