// One row per builder kind: everything the validator, capacity, planner and packer ask of a
// kind. Each row lives in its kind's own file under src/kinds/ (beside the rules only that
// kind has); kind_table.cpp lists the rows of LINMETA_BUILDER_KINDS. Rules a family of kinds
// shares live in the family's files (gdn_family, mamba_family, linear_family), which read
// the rows' flags instead of naming kinds. docs/ARCHITECTURE.md, "Adding a builder kind".
#pragma once

#include <cstddef>
#include <cstdint>

#include "linmeta/config.hpp"
#include "linmeta/step.hpp"

namespace linmeta::detail {

struct Ctx;
class Packer;
struct StepPlan;

/// A row names the fields where its kind differs from these defaults (designated
/// initializers, in this order).
struct KindRules {
  BuilderKind kind;

  // ---- configuration (validate_config)
  /// Takes the seed profile and a prefill backend (the Mamba and linear families are
  /// vLLM 0.34's builders only, with the Triton backend).
  bool seed_profile = false;
  /// Takes config.use_recoverssm (KDA): a spec row then gathers one state slot.
  bool recoverssm = false;
  /// Takes config.use_replayssm (the Mamba base builders' ReplaySSM fields, M6).
  bool replayssm = false;
  /// Takes config.chunk_size (Mamba2's SSD chunks): positive, else it must be 0.
  bool ssd_chunks = false;
  /// Has prefill checkpoints (config.num_prefill_checkpoint_blocks > 0).
  bool checkpoints = false;
  /// The checkpoint grid when config.prefill_checkpoint_alignment is unset (0: block_size).
  int32_t checkpoint_alignment = 0;
  /// Align mode gathers num_speculative_blocks + 1 state slots per row, at least the spec
  /// columns (every kind with a spec state gather).
  bool aligned_spec_slots = true;
  /// The kind's own configuration rules, in any profile, after the shared ones (or null).
  void (*check_config)(const Config&) = nullptr;
  /// The kind's own rules of the vllm-0.34 profile, after every other (or null).
  void (*check_config_v034)(const Config&) = nullptr;

  // ---- a step (validate_step)
  /// vLLM's build_for_cudagraph_capture assertions (null: a plain build).
  void (*check_capture)(const Config&, BuilderKind, const Step&) = nullptr;
  /// The metadata holds the device query_start_loc: it must not be null.
  bool device_query_start_loc = false;

  // ---- planning (plan_step) and packing (pack_step)
  /// The kind reads a step of its own (the SGLang kinds: Step::sglang): plan_step skips the
  /// shared validation and inputs, and `plan` validates the whole step.
  bool own_step = false;
  void (*plan)(Ctx&) = nullptr;
  /// The block-table gathers (also update_block_table's), then every other field.
  void (*pack_gathers)(Packer&) = nullptr;
  void (*pack_fields)(Packer&) = nullptr;
  /// The arrays a kind's largest step fills beyond the shared ones (count mode), or null.
  void (*largest)(StepPlan&) = nullptr;
  /// The largest step takes the mixed spec path (the kind has spec rows of its own).
  bool spec_path = false;
  /// Prefill checkpoints are the metadata's prefill_checkpoint_meta (Mamba2) rather than
  /// prefill_checkpoint.
  bool checkpoint_meta = false;
  /// FULL graphs stage a decode step's state gather with PAD_SLOT_ID on rows whose device
  /// seq_len is 0 (Bailing, L2): update_block_table re-gathers from the kept seq_lens.
  bool staged_pads_empty_rows = false;

  // ---- the Mamba family (mamba_family.cpp)
  /// vLLM 0.34's runner hands build() the step's accepted and draft counts (M1).
  bool mamba_counts = false;
  /// Causal-conv1d metadata over the prefill rows (M4).
  bool mamba_conv1d = false;
  /// The kind's own prefill metadata, after the family's, on a step with prefills (or null).
  void (*plan_prefill)(Ctx&) = nullptr;
  /// The kind's own fields, after the family's (or null).
  void (*pack_extra)(Packer&) = nullptr;

  // ---- the SGLang kinds (sglang_family.cpp)
  /// Prefix-cache tracking reads SSM states off one chunk grid over the flattened batch
  /// (SGLang's Mamba2), recomputing those off it; else per-sequence chunk grids.
  bool sglang_flat_chunk_grid = false;
};

/// The rows in BuilderKind order (kind_table.cpp).
extern const KindRules* const kKindRows[kNumBuilderKinds];

/// The row of `kind` (a valid kind: validate_config checks it first).
[[nodiscard]] inline const KindRules& kind_rules(BuilderKind kind) {
  return *kKindRows[static_cast<size_t>(kind)];
}

/// KDA RecoverSSM (config.use_recoverssm on a kind that takes it).
[[nodiscard]] inline bool recoverssm_on(const Config& c, const KindRules& k) {
  return k.recoverssm && c.use_recoverssm;
}

}  // namespace linmeta::detail
