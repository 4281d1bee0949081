// linmeta_fuzz_seeds OUT_DIR CASES.jsonl...: writes one fuzz program per case (SPEC §10) of
// every case file into OUT_DIR (the seed corpus of linmeta_fuzz), plus the edge programs
// below. A case's program: its configuration and build call, an update_block_table of group
// 0, the builder moved out and back, the same step built again with another table, then
// update_block_table given the stale metadata, a tampered step_id and the metadata of the reference
// builder (all three must be rejected), and an update of the last group.
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

FuzzCall update(int32_t width, int32_t group, Given given, int32_t salt, int32_t tamper = 0) {
  FuzzCall u;
  u.op = Op::Update;
  u.table.width = width;
  u.table.salt = salt;
  u.group = group;
  u.given = given;
  u.tamper = tamper;
  return u;
}

FuzzProgram program_of(const cases::Case& c) {
  FuzzProgram p;
  p.config.kind = static_cast<int32_t>(c.kind);
  p.config.num_groups = static_cast<int32_t>(c.tables.size());
  p.config.config = c.config;

  FuzzCall k;
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

  const int32_t last_group = p.config.num_groups - 1;
  p.calls.push_back(k);
  p.calls.push_back(update(c.width, 0, Given::Current, 1));
  FuzzCall move;
  move.op = Op::Move;
  p.calls.push_back(move);
  FuzzCall again = k;
  again.table.salt = 2;
  p.calls.push_back(again);
  p.calls.push_back(update(c.width, 0, Given::Previous, 3));
  p.calls.push_back(update(c.width, 0, Given::Tampered, 4, -1));
  p.calls.push_back(update(c.width, 0, Given::OtherBuilder, 5));
  p.calls.push_back(update(c.width, last_group, Given::Current, 6));
  return p;
}

// ---- edge programs --------------------------------------------------------------

FuzzConfig config_of(BuilderKind kind, Profile profile, CacheMode mode = CacheMode::None) {
  FuzzConfig f;
  f.kind = static_cast<int32_t>(kind);
  f.config.profile = profile;
  f.config.mamba_cache_mode = mode;
  f.config.max_num_seqs = 8;
  f.config.max_num_batched_tokens = 8192;
  return f;
}

/// A step of rows with query lengths `ql`, upper bounds (and device seq_lens) `seq` and
/// is_prefilling `pre` (empty: absent), over a table of `width` columns.
FuzzCall step_call(std::vector<int32_t> ql, std::vector<int32_t> seq, std::vector<uint8_t> pre,
                   int32_t width) {
  FuzzCall k;
  k.num_reqs = static_cast<int32_t>(ql.size());
  k.qsl_steps = std::move(ql);
  k.seq_ub = std::move(seq);
  if (!pre.empty()) {
    k.flags |= FuzzCall::HasPrefilling;
    k.prefilling = std::move(pre);
  }
  k.table.width = width;
  return k;
}

/// A two-row spec step (ql 3, 2 drafts each) over a table of `width` columns.
FuzzCall spec_call(int32_t width) {
  FuzzCall k = step_call({3, 3}, {10, 12}, {0, 0}, width);
  k.flags |= FuzzCall::HasDrafts | FuzzCall::HasAccepted;
  k.drafts = {2, 2};
  k.accepted = {1, 2};
  return k;
}

/// The step, an update of it, the step again, then updates given stale, tampered, foreign and
/// forged metadata.
void with_updates(FuzzProgram& p, int32_t width) {
  const FuzzCall first = p.calls.at(0);
  p.calls.push_back(update(width, 0, Given::Current, 11));
  FuzzCall again = first;
  again.table.salt = 12;
  p.calls.push_back(again);
  p.calls.push_back(update(width, 0, Given::Previous, 13));
  p.calls.push_back(update(width, 0, Given::Tampered, 14, 1));
  p.calls.push_back(update(width, 0, Given::OtherBuilder, 15));
  p.calls.push_back(update(width, 0, Given::Forged, 16));
}

std::vector<FuzzProgram> edge_programs() {
  std::vector<FuzzProgram> out;
  auto add = [&](FuzzConfig c, std::vector<FuzzCall> calls, int32_t update_width = 0) {
    FuzzProgram p{c, std::move(calls)};
    if (update_width > 0) with_updates(p, update_width);
    out.push_back(std::move(p));
  };
  FuzzConfig spec = config_of(BuilderKind::Gdn, Profile::Seed);
  spec.config.num_spec = 2;
  spec.config.num_speculative_blocks = 2;

  // Issue 13's edges (tests/host/hardening_test.cpp has each as a test).
  {  // item 2: an upper bound of INT32_MAX with block_size 1 (align mode)
    FuzzConfig c = spec;
    c.config.mamba_cache_mode = CacheMode::Align;
    c.config.block_size = 1;
    FuzzCall k = spec_call(4);
    k.seq_ub = {INT32_MAX, 12};
    k.flags |= FuzzCall::DeviceSeqDiffers;
    k.seq_delta = {INT32_MIN + 10, 0};
    add(c, {k});
  }
  {  // item 4: query_start_loc [0, INT32_MAX, INT32_MIN]
    FuzzCall k = spec_call(3);
    k.qsl_steps = {INT32_MAX, 1};
    add(spec, {k});
  }
  {  // item 5: drafts whose int32 sum wraps to 0
    FuzzCall k = spec_call(3);
    k.drafts = {INT32_MAX, INT32_MAX};
    add(spec, {k});
  }
  {  // item 6: configuration fields at INT32_MAX
    FuzzConfig c = spec;
    c.config.max_num_seqs = INT32_MAX;
    c.config.num_spec = INT32_MAX;
    add(c, {spec_call(3)});
  }
  {  // item 7: KDA RecoverSSM without accepted counts, then a re-gather
    FuzzConfig c = spec;
    c.kind = static_cast<int32_t>(BuilderKind::Kda);
    c.config.use_recoverssm = true;
    c.config.full_cuda_graph = true;
    c.config.num_speculative_blocks = 0;
    FuzzCall k = spec_call(3);
    k.flags &= static_cast<uint8_t>(~FuzzCall::HasAccepted);
    k.accepted.clear();
    add(c, {k}, 3);
  }
  {  // device values over the whole int32 range: seq_lens and accepted counts
    FuzzConfig c = spec;
    c.config.mamba_cache_mode = CacheMode::Align;
    FuzzCall k = spec_call(8);
    k.flags |= FuzzCall::DeviceSeqDiffers;
    k.seq_delta = {INT32_MIN, INT32_MAX - 12};
    k.accepted = {INT32_MIN, INT32_MAX};
    add(c, {k}, 8);
  }

  // The vllm-0.34 checkpoint path (align mode, checkpoint blocks, long prefills).
  FuzzConfig gdn = config_of(BuilderKind::Gdn, Profile::Vllm034, CacheMode::Align);
  gdn.config.num_prefill_checkpoint_blocks = 1;
  {  // GDN + Triton, block 16: a decode and a 200-token prefill (checkpoint at 192)
    add(gdn, {step_call({1, 200}, {50, 200}, {0, 1}, 16)}, 16);
  }
  {  // a long prefill: 4000 tokens, checkpoint column 248
    add(gdn, {step_call({4000}, {4000}, {1}, 256)}, 256);
  }
  {  // GDN + FlashInfer on a 64-token grid: flashinfer_checkpoint_plan
    FuzzConfig c = gdn;
    c.config.prefill_backend = PrefillBackend::FlashInfer;
    c.config.block_size = 64;
    add(c, {step_call({1, 300, 130}, {9, 300, 130}, {0, 1, 1}, 8)}, 8);
  }
  {  // an upper bound near INT32_MAX: the checkpoint rule in 64 bits (a table too narrow for
     // its column: rejected after the rule ran)
    FuzzConfig c = gdn;
    c.config.block_size = 64;
    add(c, {step_call({127}, {INT32_MAX}, {1}, 8)});
  }
  {  // ... and with a block so large that the gather fits
    FuzzConfig c = gdn;
    c.config.block_size = 1 << 24;
    add(c, {step_call({127}, {INT32_MAX}, {1}, 130)}, 130);
  }
  {  // KDA + FlashKDA (vllm-0.34) checkpoints
    FuzzConfig c = gdn;
    c.kind = static_cast<int32_t>(BuilderKind::Kda);
    c.config.prefill_backend = PrefillBackend::FlashKda;
    add(c, {step_call({1, 200}, {30, 200}, {0, 1}, 16)}, 16);
  }
  {  // KDA seed profile: the FlashKDA checkpoint rule
    FuzzConfig c = config_of(BuilderKind::Kda, Profile::Seed, CacheMode::Align);
    c.config.block_size = 64;
    c.config.num_prefill_checkpoint_blocks = 1;
    c.config.prefill_backend = PrefillBackend::FlashKda;
    add(c, {step_call({1, 200}, {30, 200}, {0, 1}, 4)}, 4);
  }
  {  // KDA + FlashInfer (vllm-0.34): its prefill query_start_loc and sequence order
    FuzzConfig c = config_of(BuilderKind::Kda, Profile::Vllm034);
    c.config.prefill_backend = PrefillBackend::FlashInfer;
    add(c, {step_call({1, 40, 90, 40}, {7, 40, 90, 60}, {0, 1, 1, 1}, 1)}, 1);
  }
  {  // KDA RecoverSSM (vllm-0.34, align): the commit metadata with its align block
    FuzzConfig c = config_of(BuilderKind::Kda, Profile::Vllm034, CacheMode::Align);
    c.config.num_spec = 2;
    c.config.use_recoverssm = true;
    c.config.prefill_backend = PrefillBackend::FlashKda;
    FuzzCall k = step_call({3, 1, 20}, {40, 41, 20}, {0, 0, 1}, 4);
    k.flags |= FuzzCall::HasDrafts;
    k.drafts = {2, -1, -1};
    add(c, {k}, 4);
  }
  {  // GDN vllm-0.34 spec decoding with FULL graphs, staged
    FuzzConfig c = config_of(BuilderKind::Gdn, Profile::Vllm034);
    c.config.num_spec = 2;
    c.config.num_speculative_blocks = 2;
    c.config.full_cuda_graph = true;
    add(c, {spec_call(3)}, 3);
  }

  // The Mamba family (vllm-0.34 only).
  {  // Mamba2, align, chunk 64: a decode and a 300-token prefill with its checkpoint
    FuzzConfig c = config_of(BuilderKind::Mamba2, Profile::Vllm034, CacheMode::Align);
    c.config.block_size = 64;
    c.config.chunk_size = 64;
    c.config.num_prefill_checkpoint_blocks = 1;
    add(c, {step_call({1, 300}, {40, 300}, {0, 1}, 8)}, 8);
  }
  {  // Mamba2, prior state, chunk 32, speculative decode rows with accepted counts
    FuzzConfig c = config_of(BuilderKind::Mamba2, Profile::Vllm034);
    c.config.chunk_size = 32;
    c.config.num_spec = 2;
    FuzzCall k = step_call({3, 100}, {20, 1000}, {0, 1}, 3);
    k.flags |= FuzzCall::HasDrafts | FuzzCall::HasAccepted;
    k.drafts = {2, -1};
    k.accepted = {2, 1};
    add(c, {k}, 3);
  }
  {  // Mamba1 with FULL graphs: a mixed step, then a decode-only (staged) one
    FuzzConfig c = config_of(BuilderKind::Mamba1, Profile::Vllm034);
    c.config.full_cuda_graph = true;
    add(c, {step_call({1, 50}, {10, 50}, {0, 1}, 1), step_call({1, 1}, {11, 51}, {0, 0}, 1)}, 1);
  }
  {  // ShortConv, align
    FuzzConfig c = config_of(BuilderKind::ShortConv, Profile::Vllm034, CacheMode::Align);
    add(c, {step_call({1, 40}, {33, 40}, {0, 1}, 4)}, 4);
  }
  {  // linear attention
    FuzzConfig c = config_of(BuilderKind::Linear, Profile::Vllm034);
    add(c, {step_call({1, 30}, {9, 30}, {}, 1)}, 1);
  }
  {  // Bailing with FULL graphs: a mixed step, then a decode-only (staged, padded) one
    FuzzConfig c = config_of(BuilderKind::BailingLinear, Profile::Vllm034);
    c.config.full_cuda_graph = true;
    add(c, {step_call({1, 30}, {9, 30}, {}, 1), step_call({1, 1, 0}, {10, 31, 0}, {}, 1)}, 1);
  }

  // build_groups against single-group builds, and every kind of update_block_table.
  {
    FuzzConfig c = spec;
    c.num_groups = 3;
    FuzzCall k = spec_call(3);
    k.op = Op::BuildGroups;
    k.table.width_step = 1;  // widths 3, 4, 5
    FuzzCall again = k;
    again.table.salt = 21;
    add(c, {k, update(4, 1, Given::Current, 22), update(4, 1, Given::OtherGroup, 23), again,
            update(3, 2, Given::Previous, 24), update(3, 2, Given::Tampered, 25, -1),
            update(3, 2, Given::Tampered, 26, 0), update(3, 0, Given::OtherBuilder, 27),
            update(3, 0, Given::Forged, 28), update(3, 3, Given::Current, 29)});
  }
  {  // Mamba2 groups with checkpoints
    FuzzConfig c = config_of(BuilderKind::Mamba2, Profile::Vllm034, CacheMode::Align);
    c.num_groups = 2;
    c.config.block_size = 64;
    c.config.chunk_size = 64;
    c.config.num_prefill_checkpoint_blocks = 1;
    FuzzCall k = step_call({1, 300}, {40, 300}, {0, 1}, 8);
    k.op = Op::BuildGroups;
    add(c, {k, update(8, 1, Given::Current, 31)});
  }
  // Every edge program again with device seq_lens and accepted counts at the int32 extremes.
  const size_t edges = out.size();
  for (size_t i = 0; i < edges; ++i) {
    FuzzProgram p = out[i];
    for (FuzzCall& k : p.calls)
      if (k.op != Op::Update && k.op != Op::Move) k.flags |= FuzzCall::ExtremeDevice;
    out.push_back(std::move(p));
  }
  return out;
}

/// The bytes of `p`, checked to decode back to the same program.
std::vector<uint8_t> encode_checked(const FuzzProgram& p) {
  auto bytes = encode(p);
  if (encode(decode(bytes.data(), bytes.size())) != bytes)
    throw std::runtime_error("a seed does not decode to the program it encodes");
  return bytes;
}

void write(const std::filesystem::path& file, const FuzzProgram& p) {
  const auto bytes = encode_checked(p);
  std::ofstream f(file, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + file.string());
}

}  // namespace
}  // namespace linmeta::fuzz

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s OUT_DIR CASES.jsonl...\n", argv[0]);
    return 2;
  }
  try {
    const std::filesystem::path out(argv[1]);
    std::filesystem::create_directories(out);
    int count = 0;
    for (int i = 2; i < argc; ++i) {
      const std::string stem = std::filesystem::path(argv[i]).stem().string();
      int line = 0;
      for (const auto& j : linmeta::cases::read_jsonl(argv[i]))
        linmeta::fuzz::write(out / (stem + "-" + std::to_string(line++)),
                             linmeta::fuzz::program_of(linmeta::cases::parse_case(j)));
      count += line;
    }
    int edges = 0;
    for (const auto& p : linmeta::fuzz::edge_programs())
      linmeta::fuzz::write(out / ("edge-" + std::to_string(edges++)), p);
    std::printf("linmeta_fuzz_seeds: %d case seeds and %d edge seeds in %s\n", count, edges,
                argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "linmeta_fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
