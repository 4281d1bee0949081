// Packing a StepPlan into the step arena: the data arrays the finish jobs read, the
// typed job list, the block ranges and the block-table references, plus where each
// output lives. The FULL-graph staging rules (SPEC §7 D, §8, M3) are applied here.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "../kernels/finish_job.cuh"
#include "buffer_layout.hpp"
#include "kinds/kind_rules.hpp"
#include "linmeta/metadata.hpp"
#include "step_plan.hpp"

namespace linmeta::detail {

/// Where an output's data lives.
enum class Source : int32_t {
  Buffer,    ///< a buffer of the builder's output block (`buf`)
  Plan,      ///< host memory of the plan (`host`)
  Input,     ///< one of the step's own arrays (`input`)
  External,  ///< caller memory at `host` (the SGLang kinds' step arrays and graph buffers)
};
/// The step arrays an output may be (Cap::Input rows).
enum class StepInput : int32_t { SeqLens, Accepted, QueryStartLoc, BlockTable, Drafts };

/// One row of the output table in one step: a scalar's value, a composite's presence, or
/// where an array lives and its length (its shape's other dimension comes from the table).
struct FieldView {
  bool present = false;
  int64_t value = 0;  ///< counts, optional ints and flags
  Source source = Source::Buffer;
  Buf buf;                               ///< Source::Buffer
  const void* host = nullptr;            ///< Source::Plan
  StepInput input = StepInput::SeqLens;  ///< Source::Input
  int64_t offset = 0;                    ///< rows into the buffer
  int64_t rows = 0;
  DType dtype = DType::Int32;
  bool column = false;  ///< a Slots row's first column as a 1-D array
  int32_t cols = 0;     ///< > 0: a 2-D array [rows, cols] whatever the row's shape
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

/// Whether the build keeps the step's device seq_lens for update_block_table's gathers:
/// the aligned gather reads them (SPEC §3), and so does a kind whose staged gather pads the
/// rows whose seq_len is 0 (Bailing, docs/semantics.md L2).
[[nodiscard]] inline bool regather_reads_seq_lens(const Config& c, BuilderKind kind) {
  return c.mamba_cache_mode == CacheMode::Align ||
         (kind_rules(kind).staged_pads_empty_rows && c.full_cuda_graph);
}

/// Columns of a state row gathered from `table` (SPEC §3): Shape::Slots fields.
[[nodiscard]] int32_t spec_columns(const Config& config, const StepPlan& plan,
                                   const BlockTable& table);

/// Arena words the largest step can need: the packer run in count mode over a plan
/// with every array at its capacity.
[[nodiscard]] int32_t arena_capacity_words(const Config& config, BuilderKind kind,
                                           int32_t num_groups);

/// Packs `plan` for the groups [group_begin, group_begin + tables.size()). Checks every
/// write against the arena's capacity and every job against its buffer's (InternalError).
void pack_step(const StepPlan& plan, const Config& config, BuilderKind kind,
               const BufferLayout& layout, std::span<const TableRef> tables, int32_t group_begin,
               PackMode mode, ArenaSpan arena, PackedStep& out);

/// The arrays of the step an Input view may refer to.
struct StepArrays {
  const int32_t* seq_lens = nullptr;
  const int32_t* accepted = nullptr;
  const int32_t* query_start_loc = nullptr;
  BlockTable table;                 ///< this group's raw table
  const int32_t* drafts = nullptr;  ///< host num_decode_draft_tokens
};

/// Sets the fields of `m` of the table rows `which` selects (Scope::Group ones only, or all)
/// for group `group`: views into `base` (the output block), plan or step memory.
enum class Rows : int32_t { All, GroupScoped };
void materialize(Metadata& m, BuilderKind kind, const StepPlan& plan, const StepViews& views,
                 const BufferLayout& layout, const char* base, int32_t group,
                 const StepArrays& inputs, const Config& config, Rows which);

}  // namespace linmeta::detail
