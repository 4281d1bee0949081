// One step through linmeta on the host target (no GPU needed): three spec-decode rows (k = 2)
// in align mode, SPEC example E6. Every consumer project under examples/ builds this file.
#include <cstdio>
#include <linmeta/linmeta.hpp>
#include <vector>

int main() {
  linmeta::Config cfg;
  cfg.num_spec = 2;  // speculative tokens k
  cfg.max_num_seqs = 8;
  cfg.max_num_batched_tokens = 64;
  cfg.mamba_cache_mode = linmeta::CacheMode::Align;
  cfg.block_size = 16;
  cfg.num_speculative_blocks = 2;
  linmeta::GdnMetadataBuilder builder(cfg, {.target = linmeta::Target::Host});

  // On the host target the "device" arrays are host memory too.
  const std::vector<int32_t> qsl = {0, 3, 6, 9}, seq_lens = {16, 17, 33}, drafts = {2, 2, 2},
                             accepted = {1, 1, 1};
  std::vector<int32_t> table(3 * 6);  // [3 rows, 6 blocks]: 100, 101, ... 117
  for (size_t i = 0; i < table.size(); ++i) table[i] = 100 + static_cast<int32_t>(i);

  linmeta::Step step;
  step.num_reqs = 3;
  step.num_actual_tokens = 9;
  step.query_start_loc_cpu = qsl;
  step.seq_lens_cpu_upper_bound = seq_lens;
  step.num_decode_draft_tokens = drafts;
  step.query_start_loc = qsl.data();
  step.seq_lens = seq_lens.data();
  step.num_accepted_tokens = accepted.data();
  step.block_table = {table.data(), 6, 6};

  const linmeta::Metadata& md = builder.build(step);
  const auto& s = md.spec_state_indices_tensor;  // [3, 1 + num_speculative_blocks]
  const int32_t* slots = s.as<int32_t>();        // host memory on the host target
  std::printf("num_spec_decodes %d, spec_state_indices_tensor [%lld, %d]:", md.num_spec_decodes,
              static_cast<long long>(s.rows), s.cols);
  for (int64_t i = 0; i < s.size(); ++i) std::printf(" %d", slots[i]);
  std::printf("\n");
  // Expected (SPEC E6): row r gathers its aligned window of 3 blocks.
  const int32_t expected[] = {100, 101, 102, 107, 108, 109, 114, 115, 116};
  bool ok = md.num_spec_decodes == 3 && s.size() == 9;
  for (int i = 0; ok && i < 9; ++i) ok = slots[i] == expected[i];
  std::printf("%s (linmeta %s)\n", ok ? "host step: ok" : "host step: WRONG", LINMETA_VERSION);
  return ok ? 0 : 1;
}
