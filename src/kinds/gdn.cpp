// GDN (vLLM's GDNAttentionMetadataBuilder, gdn_attn.py; Qwen3-Next, Qwen3.5, GLM-5-Next):
// the GDN family's rules (gdn_family.cpp), in both profiles, with the Triton or FlashInfer
// prefill backend.
#include "../validate.hpp"
#include "gdn_family.hpp"
#include "kind_rules.hpp"

namespace linmeta::detail {

namespace {

void check_config(const Config& c) {
  // A backend GDN does not have, in either profile.
  if (c.prefill_backend == PrefillBackend::FlashKda)
    reject("config.prefill_backend = flashkda is a KDA backend; GDN takes triton or flashinfer");
}

void check_config_v034(const Config& c) {
  if (!c.chunk_metadata)
    reject(
        "config.chunk_metadata = false: in the vllm-0.34 profile chunk metadata follows "
        "prefill_backend (flashinfer builds none)");
}

}  // namespace

extern constinit const KindRules kGdnRules = [] {
  KindRules r = gdn_family_row(BuilderKind::Gdn);
  r.check_config = check_config;
  r.check_config_v034 = check_config_v034;
  return r;
}();

}  // namespace linmeta::detail
