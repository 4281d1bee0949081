// Inkling (vLLM 0.34's InklingSconvMetadataBuilder, models/inkling/{nvidia,amd}/
// sconv_swa_attn.py, with ops/sconv.py's sconv_seq_metadata), docs/semantics.md I1–I2: each
// padded token's request and that request's first token, and the step's block table. No
// state slots and no decode / prefill split; its capture build is a plain build.
#include "../packer.hpp"
#include "../plan_context.hpp"
#include "../validate.hpp"
#include "kind_rules.hpp"

namespace linmeta::detail {

namespace {

/// I2: the short-conv cache is a sliding-window KV cache, not Mamba state: no cache mode.
void check_config(const Config& c) {
  if (c.mamba_cache_mode != CacheMode::None)
    reject(
        "config.mamba_cache_mode: the inkling builder has no Mamba state (vLLM's builder does not "
        "read the cache mode): leave it none");
}

/// Nothing beyond the shared plan (query_start_loc, the real and padded token counts).
void plan(Ctx&) {}

/// I1: block_table is the caller's table of this group.
void pack_gathers(Packer& k) { k.input(Out::BlockTable, StepInput::BlockTable, k.p.num_reqs); }

/// I1: seq_idx and query_start over the padded tokens, 0 past the real ones.
void pack_fields(Packer& k) {
  const int32_t n = k.p.num_reqs, padded = k.p.num_actual_tokens, real = k.p.total_tokens;
  k.emit(Out::SeqIdx, false, padded, TokenOwner{.n_rows = n, .n_real = real, .first = 0});
  k.emit(Out::QueryStart, false, padded, TokenOwner{.n_rows = n, .n_real = real, .first = 1});
}

}  // namespace

extern constinit const KindRules kInklingRules = [] {
  KindRules r{.kind = BuilderKind::Inkling,
              .check_config = check_config,
              .plan = plan,
              .pack_gathers = pack_gathers,
              .pack_fields = pack_fields};
  return r;
}();

}  // namespace linmeta::detail
