#include "validate.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "capacity.hpp"
#include "kinds/kind_rules.hpp"
#include "linmeta/error.hpp"
#include "linmeta/names.hpp"

namespace linmeta {

namespace {

[[noreturn]] void fail(const std::string& msg) { throw Error("linmeta: " + msg); }

std::string_view kind_name(BuilderKind kind) { return names::builder_kind_name(kind); }

/// What each profile and builder kind supports (docs/semantics.md): the shared rules, with
/// the kind's own (KindRules::check_config, check_config_v034) in their place.
void validate_profile(const Config& c, BuilderKind kind) {
  const detail::KindRules& k = detail::kind_rules(kind);
  const std::string_view backend = names::prefill_backend_name(c.prefill_backend);
  if (!k.seed_profile) {
    // The Mamba and linear families exist in the vllm-0.34 profile only, with none of the
    // GDN / KDA options.
    if (c.profile != Profile::Vllm034)
      fail(
          fmt::format("the {} builder follows vLLM 0.34's rules only: config.profile must be "
                      "vllm-0.34",
                      kind_name(kind)));
    if (c.prefill_backend != PrefillBackend::Triton)
      fail(fmt::format("config.prefill_backend = {} is a GDN / KDA option; the {} builder has none",
                       backend, kind_name(kind)));
  }
  if (c.use_replayssm && !k.replayssm)
    fail(fmt::format(
        "config.use_replayssm is an option of vLLM's Mamba base builders; the {} builder has none",
        kind_name(kind)));
  // vLLM 0.34 runs ReplaySSM's speculative decoding on FlashInfer only (VllmConfig's
  // validate_mamba_cached_kernel), whose scratch linmeta does not serve.
  if (c.use_replayssm && c.num_spec > 0)
    fail(fmt::format(
        "config.use_replayssm with num_spec = {}: vLLM 0.34's ReplaySSM speculative decoding "
        "is FlashInfer's, which linmeta leaves to vLLM (the Triton path has num_spec = 0)",
        c.num_spec));
  if (!k.ssd_chunks && c.chunk_size != 0)
    fail(fmt::format("config.chunk_size = {} is a Mamba2 option; the {} builder has none",
                     c.chunk_size, kind_name(kind)));
  if (c.num_prefill_checkpoint_blocks > 0 && !k.checkpoints)
    fail(fmt::format(
        "config.num_prefill_checkpoint_blocks = {}: the {} builder has no prefill checkpoints",
        c.num_prefill_checkpoint_blocks, kind_name(kind)));
  if (k.check_config != nullptr) k.check_config(c);
  if (c.profile == Profile::Seed) {
    if (c.prefill_backend == PrefillBackend::FlashInfer)
      fail(
          "config.prefill_backend = flashinfer is a vllm-0.34 profile option (the seed profile "
          "takes chunk_metadata)");
    if (c.prefill_checkpoint_alignment != 0)
      fail(fmt::format(
          "config.prefill_checkpoint_alignment = {} is a vllm-0.34 profile option (the seed "
          "profile has its fixed checkpoint rule)",
          c.prefill_checkpoint_alignment));
    return;
  }
  // R3: vLLM 0.34's MambaCacheMode is "none" | "align".
  if (c.mamba_cache_mode == CacheMode::All)
    fail("config.mamba_cache_mode = all does not exist in the vllm-0.34 profile (none | align)");
  if (k.check_config_v034 != nullptr) k.check_config_v034(c);
}

}  // namespace

void validate_config(const Config& c, BuilderKind kind) {
  if (static_cast<int32_t>(kind) < 0 || static_cast<int32_t>(kind) >= kNumBuilderKinds)
    fail(fmt::format("builder kind = {} is none of {}", static_cast<int32_t>(kind),
                     names::choices(names::kBuilderKinds)));
  auto positive = [](const char* field, int32_t v) {
    if (v <= 0) fail(fmt::format("config.{} = {} must be positive", field, v));
  };
  auto non_negative = [](const char* field, int32_t v) {
    if (v < 0) fail(fmt::format("config.{} = {} must be >= 0", field, v));
  };
  auto at_most = [](const char* field, int32_t v, const char* bound, int32_t most) {
    if (v > most) fail(fmt::format("config.{} = {} exceeds {} = {}", field, v, bound, most));
  };
  non_negative("num_spec", c.num_spec);
  at_most("num_spec", c.num_spec, "kMaxNumSpec", kMaxNumSpec);
  positive("max_num_seqs", c.max_num_seqs);
  at_most("max_num_seqs", c.max_num_seqs, "kMaxNumSeqs", kMaxNumSeqs);
  positive("max_num_batched_tokens", c.max_num_batched_tokens);
  at_most("max_num_batched_tokens", c.max_num_batched_tokens, "kMaxNumBatchedTokens",
          kMaxNumBatchedTokens);
  positive("block_size", c.block_size);
  non_negative("num_speculative_blocks", c.num_speculative_blocks);
  non_negative("num_prefill_checkpoint_blocks", c.num_prefill_checkpoint_blocks);
  non_negative("prefill_checkpoint_alignment", c.prefill_checkpoint_alignment);
  non_negative("chunk_size", c.chunk_size);
  non_negative("max_cudagraph_capture_size", c.max_cudagraph_capture_size);
  const auto mode = static_cast<int32_t>(c.mamba_cache_mode);
  if (c.mamba_cache_mode != CacheMode::None && c.mamba_cache_mode != CacheMode::All &&
      c.mamba_cache_mode != CacheMode::Align)
    fail(fmt::format("config.mamba_cache_mode = {} is none of none (0), all (1), align (2)", mode));
  if (c.profile != Profile::Seed && c.profile != Profile::Vllm034)
    fail(fmt::format("config.profile = {} is none of seed (0), vllm-0.34 (1)",
                     static_cast<int32_t>(c.profile)));
  if (c.prefill_backend != PrefillBackend::Triton &&
      c.prefill_backend != PrefillBackend::FlashInfer &&
      c.prefill_backend != PrefillBackend::FlashKda)
    fail(fmt::format(
        "config.prefill_backend = {} is none of triton (0), flashinfer (1), flashkda (2)",
        static_cast<int32_t>(c.prefill_backend)));
  if (!detail::kind_rules(kind).recoverssm && c.use_recoverssm)
    fail(fmt::format("config.use_recoverssm is a KDA option; the {} builder does not support it",
                     kind_name(kind)));
  validate_profile(c, kind);
  // The bounds above keep every capacity within int32.
  const auto cap = detail::Capacity::of(c, kind);
  if (c.mamba_cache_mode == CacheMode::Align && detail::kind_rules(kind).aligned_spec_slots &&
      static_cast<int64_t>(c.num_speculative_blocks) + 1 < cap.spec_cols)
    fail(fmt::format(
        "config.num_speculative_blocks = {} gathers {} aligned state slots, fewer than the {} a "
        "spec row needs (num_spec + 1)",
        c.num_speculative_blocks, static_cast<int64_t>(c.num_speculative_blocks) + 1,
        cap.spec_cols));
}

namespace detail {

void reject(const std::string& message) { fail(message); }

int32_t longest_query(const Step& s) {
  int32_t longest = 0;
  const auto& q = s.query_start_loc_cpu;
  for (int32_t r = 0; r < s.num_reqs; ++r) longest = std::max(longest, q[r + 1] - q[r]);
  return longest;
}

void validate_step(const Config& c, BuilderKind kind, const Step& s, bool capture,
                   std::span<const BlockTable> tables) {
  const int32_t n = s.num_reqs;
  if (n < 1) fail(fmt::format("num_reqs = {} must be at least 1", n));
  if (n > c.max_num_seqs)
    fail(fmt::format("num_reqs = {} exceeds the capacity max_num_seqs = {}", n, c.max_num_seqs));
  if (s.query_start_loc_cpu.size() != static_cast<size_t>(n) + 1)
    fail(fmt::format("query_start_loc_cpu has {} entries, expected num_reqs + 1 = {}",
                     s.query_start_loc_cpu.size(), n + 1));
  auto sized = [n](const char* field, size_t size, bool optional) {
    if (optional && size == 0) return;
    if (size != static_cast<size_t>(n))
      fail(fmt::format("{} has {} entries, expected num_reqs = {}", field, size, n));
  };
  sized("seq_lens_cpu_upper_bound", s.seq_lens_cpu_upper_bound.size(), false);
  sized("is_prefilling", s.is_prefilling.size(), true);
  sized("num_decode_draft_tokens", s.num_decode_draft_tokens.size(), true);

  // Row checks run as reductions; the offending row is searched for only on failure.
  const auto& q = s.query_start_loc_cpu;
  if (q[0] != 0) fail(fmt::format("query_start_loc_cpu[0] = {} must be 0", q[0]));
  // Compared, not subtracted: the difference of two arbitrary int32 values wraps (a
  // [0, INT32_MAX, INT32_MIN] prefix would pass as "increasing"). A non-decreasing qsl
  // from 0 up to num_actual_tokens <= max_num_batched_tokens keeps every later query
  // length and cumsum within int32.
  bool decreases = false;
  for (int32_t r = 0; r < n; ++r) decreases |= q[r + 1] < q[r];
  if (decreases)
    for (int32_t r = 0; r < n; ++r)
      if (q[r + 1] < q[r])
        fail(fmt::format("query_start_loc_cpu decreases at row {}: [{}] = {} > [{}] = {}", r, r,
                         q[r], r + 1, q[r + 1]));
  if (s.num_actual_tokens < q[n])
    fail(fmt::format("num_actual_tokens = {} is below the query total query_start_loc_cpu[{}] = {}",
                     s.num_actual_tokens, n, q[n]));
  if (s.num_actual_tokens > c.max_num_batched_tokens)
    fail(fmt::format("num_actual_tokens = {} exceeds the capacity max_num_batched_tokens = {}",
                     s.num_actual_tokens, c.max_num_batched_tokens));
  auto check_min = [](std::span<const int32_t> v, int32_t lowest, const char* field,
                      const char* what) {
    int32_t least = lowest;
    for (const int32_t x : v) least = std::min(least, x);
    if (least >= lowest) return;
    const auto r =
        std::find_if(v.begin(), v.end(), [&](int32_t x) { return x < lowest; }) - v.begin();
    fail(fmt::format("{}[{}] = {} {}", field, r, v[static_cast<size_t>(r)], what));
  };
  check_min(s.seq_lens_cpu_upper_bound, 0, "seq_lens_cpu_upper_bound", "is negative");
  check_min(s.num_decode_draft_tokens, -1, "num_decode_draft_tokens", "is below -1");
  // A row drafts at most num_spec tokens (read only when speculative decoding is on).
  if (c.num_spec > 0) {
    int32_t most = 0;
    for (const int32_t x : s.num_decode_draft_tokens) most = std::max(most, x);
    if (most > c.num_spec) {
      const auto& d = s.num_decode_draft_tokens;
      const auto r = std::find(d.begin(), d.end(), most) - d.begin();
      fail(fmt::format("num_decode_draft_tokens[{}] = {} exceeds num_spec = {}", r, most,
                       c.num_spec));
    }
  }
  const KindRules& k = kind_rules(kind);
  if (capture && k.check_capture != nullptr) k.check_capture(c, kind, s);
  if (s.seq_lens == nullptr) fail("seq_lens (device) is null");
  if (k.device_query_start_loc && s.query_start_loc == nullptr)
    fail(fmt::format("query_start_loc (device) is null: the {} builder's metadata holds it",
                     kind_name(kind)));

  validate_tables(tables);
}

void validate_tables(std::span<const BlockTable> tables, int32_t first_group) {
  for (size_t i = 0; i < tables.size(); ++i) {
    const BlockTable& t = tables[i];
    const int64_t g = first_group + static_cast<int64_t>(i);
    if (t.data == nullptr) fail(fmt::format("block_table of group {} is null", g));
    if (t.width < 1 || t.row_stride < t.width)
      fail(
          fmt::format("block_table of group {}: width = {} and row_stride = {} (need 1 <= width "
                      "<= row_stride)",
                      g, t.width, t.row_stride));
    // Row offsets are row * row_stride in int64: a stride no memory can hold would wrap.
    if (t.row_stride > INT32_MAX)
      fail(fmt::format("block_table of group {}: row_stride = {} exceeds INT32_MAX", g,
                       t.row_stride));
  }
}

void check_spec_row_length(const Config& c, BuilderKind kind, int32_t row, int32_t query_len) {
  if (query_len <= c.num_spec + 1) return;
  if (recoverssm_on(c, kind_rules(kind)))
    fail(
        fmt::format("KDA RecoverSSM speculative decode query length exceeds its activation "
                    "capacity: row {} has query length {} > num_spec + 1 = {}",
                    row, query_len, c.num_spec + 1));
  fail(fmt::format("spec-decode row {} has query length {} > num_spec + 1 = {}", row, query_len,
                   c.num_spec + 1));
}

void require_is_prefilling(const Step& s, const char* why) {
  if (s.is_prefilling.empty()) fail(fmt::format("is_prefilling is required {}", why));
}

bool reads_accepted(const Config& c, BuilderKind kind, bool capture) {
  return !capture && !recoverssm_on(c, kind_rules(kind));
}

void require_accepted(const Config& c, BuilderKind kind, const Step& s, bool capture) {
  if (reads_accepted(c, kind, capture) && s.num_accepted_tokens == nullptr)
    fail("num_accepted_tokens (device) is null but the step has spec-decode rows");
}

void check_table_widths(std::span<const BlockTable> tables, const WidthNeed& need,
                        int32_t first_group) {
  for (size_t i = 0; i < tables.size(); ++i)
    if (tables[i].width < need.cols)
      fail(fmt::format(
          "block_table of group {} is too narrow: row {} reads {} columns for {} but "
          "width = {}",
          first_group + static_cast<int64_t>(i), need.row, need.cols, need.what, tables[i].width));
}

}  // namespace detail
}  // namespace linmeta
