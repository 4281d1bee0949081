// The part every SGLang kind shares (docs/sglang.md "The common part"): SGLang 0.5.23's
// MambaAttnBackendBase._forward_metadata (eager), _replay_metadata (CUDA-graph capture and
// replay) and _capture_metadata (CPU-graph capture), planned and packed once. A kind's own
// file (sglang_mamba2.cpp, ...) adds what its subclass adds.
#pragma once

#include <cstdint>
#include <string>

#include "../packer.hpp"
#include "../plan_context.hpp"
#include "kind_rules.hpp"

namespace linmeta::detail {

/// The shapes, pointers and values every entry reads (throws linmeta::Error naming the field).
void validate_sglang_step(const Config& c, const SglangStep& s);
/// query_start_loc of an extend: the exclusive cumsum of the extend lengths and the total.
void plan_extend_qsl(SglangPlan& g, const SglangStep& s);
/// _init_track_conv_indices and _init_track_ssm_indices (build_prefill_track_plan) over the
/// tracked rows of an extend (the rows whose host mask is set; after plan_extend_qsl).
void plan_extend_track(const Config& c, BuilderKind kind, SglangPlan& g, const SglangStep& s);
/// The step's device arrays (SglangRefs) into the arena, for the jobs; returns their offset.
int32_t pack_sglang_refs(Packer& k, const SglangStep& s);

/// Validates the step (throws linmeta::Error naming the field) and plans the common part:
/// query_start_loc, the slots, tracking, verify's retrieve arrays.
void plan_sglang_common(Ctx& x);
/// Packs the common part's fields (the composite Metadata::sglang and its arrays; those only
/// some kinds keep, where the kind's output rows have them).
void pack_sglang_common(Packer& k);

/// mamba_track_mask is set and marks a row (SGLang's has_mamba_track_mask).
[[nodiscard]] bool any_tracked(const SglangStep& s);
/// has_initial_state(s) = extend_prefix_lens > 0 of the first n rows into p.sgl.initial;
/// whether any row has one.
bool plan_initial_states(SglangPlan& g, const SglangStep& s, int32_t n);
/// The tracked rows (the host mask's) into p.sgl.tracked, when tracking planned none.
void plan_tracked_rows(SglangPlan& g, const SglangStep& s);
/// GDN's and KDA's rule: on a step with a tracked row, the tracked rows and their
/// destinations (the common part's host rows, else SGLang's mask.nonzero(): the same rows).
void plan_track_mask_indices(SglangPlan& g, const SglangStep& s);
/// mamba_track_mask_indices (the tracked rows) and, with `destinations`,
/// conv_states_mask_indices (their destinations, gathered from the step's mamba_track_indices).
void pack_track_mask_indices(Packer& k, bool destinations = true);

/// Every SGLang array at its capacity (count mode).
void sglang_largest(StepPlan& p);
/// The SGLang kinds' configuration: chunk_size (the model's mamba_chunk_size) and the
/// capacities; none of vLLM's options.
void sglang_check_config(const Config& c);

/// The row every SGLang kind starts from: a step of its own, chunk_size, no vLLM profile.
[[nodiscard]] constexpr KindRules sglang_family_row(BuilderKind kind) {
  return KindRules{.kind = kind,
                   .seed_profile = true,
                   .ssd_chunks = true,
                   .check_config = sglang_check_config,
                   .own_step = true,
                   .largest = sglang_largest};
}

/// Python's floor division (SGLang's `//` on integers).
[[nodiscard]] constexpr int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

}  // namespace linmeta::detail
