// Packing a StepPlan into the step arena: the data arrays the finish jobs read, the
// typed job list, the block ranges and the block-table references, plus where each
// output lives. The FULL-graph staging rules (SPEC §7 D, §8) are applied here.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "../kernels/finish_job.cuh"
#include "buffer_layout.hpp"
#include "linmeta/metadata.hpp"
#include "step_plan.hpp"

namespace linmeta::detail {

/// Where one output array lives: buffer, first element, shape, element type.
struct FieldView {
  Buf buf;
  int64_t offset = 0;  ///< rows into the buffer
  int64_t rows = 0;
  int32_t cols = 1;
  int32_t ndim = 1;
  DType dtype = DType::Int32;
  bool present = false;
};

using StepViews = std::array<FieldView, kNumOutputs>;

/// What a pack produces for a launch: the header (offsets and counts; the target sets
/// the pointers) and the views of every output.
struct PackedStep {
  int32_t arena_words = 0;
  LaunchHeader header{};
  StepViews views{};
};

/// A whole build, or only the block-table gathers of the last plan (update_block_table).
enum class PackMode : int32_t { Build, GathersOnly };

/// Host memory to pack into; `data == nullptr` counts words without writing.
struct ArenaSpan {
  int32_t* data = nullptr;
  int32_t capacity = 0;  ///< words
};

/// Columns of a spec state row gathered from `table` (SPEC §3).
[[nodiscard]] int32_t spec_columns(const Config& config, const StepPlan& plan,
                                   const BlockTable& table);

/// Arena words the largest step can need: the packer run in count mode over a plan
/// with every array at its capacity.
[[nodiscard]] int32_t arena_capacity_words(const Config& config, BuilderKind kind,
                                           int32_t num_groups);

/// Packs `plan` for the groups [group_begin, group_begin + tables.size()). Checks every
/// write against the arena's capacity and every job against its buffer's.
void pack_step(const StepPlan& plan, const Config& config, BuilderKind kind,
               const BufferLayout& layout, std::span<const TableRef> tables, int32_t group_begin,
               PackMode mode, ArenaSpan arena, PackedStep& out);

/// The Metadata of group `group`: views into `base` (the output block).
Metadata materialize(const StepPlan& plan, const StepViews& views, const BufferLayout& layout,
                     const char* base, int32_t group, Target target, const BlockTable& raw_table,
                     const Config& config);

}  // namespace linmeta::detail
