// Packing a StepPlan: the step arena (uploaded once), the finish jobs, and where
// each output lives. The FULL-graph staging rules (SPEC §7 D, §8) are decided here.
#pragma once

#include <cstdint>

#include "../kernels/finish_job.cuh"
#include "buffer_layout.hpp"
#include "linmeta/metadata.hpp"
#include "step_plan.hpp"

namespace linmeta::detail {

/// Where one output array lives: buffer, first element, shape.
struct FieldView {
  Buf buf = Buf::Count;
  int64_t offset = 0;  ///< elements into the buffer
  int64_t rows = 0;
  int32_t cols = 1;
  int32_t ndim = 1;
  bool present = false;
};

struct StepViews {
  FieldView has_initial_state, chunk_indices, chunk_offsets, prefill_qsl, prefill_state,
      prefill_has_initial_state, spec_qsl, ns_qsl, spec_state, ns_state, masks, spec_tok, ns_tok,
      accepted, conv_batch, conv_chunk, cp_offsets, cp_state, request_indices, num_computed;
};

struct PackedStep {
  int32_t arena_words = 0;
  FinishParams params;  ///< jobs and arena offsets; pointers are set by the target
  StepViews views;
};

/// Columns of a spec state row gathered from `table` (SPEC §3).
[[nodiscard]] int32_t spec_columns(const Config& config, const StepPlan& plan,
                                   const BlockTable& table);

/// Upper bound of the arena size in int32 words.
[[nodiscard]] int32_t arena_capacity_words(const Config& config);

/// Writes the arena into `arena` and fills `out` (jobs for `num_groups` groups).
void pack_step(const StepPlan& plan, const Config& config, BuilderKind kind,
               const BufferLayout& layout, int32_t num_groups, int32_t* arena, PackedStep& out);

/// Lays the grid out: block ranges of the jobs for groups [group_begin, +group_count).
void assign_blocks(FinishParams& params);

/// Keeps only the block-table gathers of `params` (update_block_table).
void keep_gathers_only(FinishParams& params);

/// The Metadata of group `group`: views into `base` (the output block).
Metadata materialize(const StepPlan& plan, const StepViews& views, const BufferLayout& layout,
                     const char* base, int32_t group, Target target, const BlockTable& raw_table,
                     const Config& config);

}  // namespace linmeta::detail
