// What the planning steps share (src/planner.cpp and the kinds' planning, src/kinds/): one
// step's inputs, the configuration, the kind's row and the plan being filled.
#pragma once

#include <cstdint>
#include <span>

#include "capacity.hpp"
#include "kinds/kind_rules.hpp"
#include "step_plan.hpp"

namespace linmeta::detail {

struct Ctx {
  const Config& c;
  BuilderKind kind;
  const KindRules& rules;
  const Step& s;
  bool capture;
  std::span<const BlockTable> tables;
  Capacity cap;
  StepPlan& p;

  const int32_t* drafts = nullptr;   ///< the step's drafts, ql - 1 for a capture, or null
  const bool* prefilling = nullptr;  ///< is_prefilling, all false when absent

  [[nodiscard]] bool v034() const { return c.profile == Profile::Vllm034; }
};

/// The cumulative query lengths of `rows` ([rows.n + 1], from 0).
void fill_cumsum(const StepPlan& p, const RowList& rows, Cumsum& out);

/// vLLM's compute_causal_conv1d_metadata over `n` sequences with cumulative lengths `cu`
/// (read as differences): programs per sequence, their offsets and the host lists.
void plan_conv1d(StepPlan& p, const int32_t* cu, int32_t n);
/// Prefill checkpoints over the rows p.checkpoint.rows (SPEC §8, R5, K4, M4).
void plan_checkpoints(Ctx& x);
/// The grid checkpoint offsets lie on (vllm-0.34): Config::prefill_checkpoint_alignment, or
/// the builder's default (GDN the block size, KDA FlashKDA's 16, Mamba2 1).
[[nodiscard]] int32_t checkpoint_alignment(const Config& c, BuilderKind kind);
}  // namespace linmeta::detail
