// A Metadata's fields as Python values, through the output table (linmeta/outputs.hpp):
// counts and optional ints as int / None, flags as bool, arrays as views of the builder's
// buffers (one export per address, shape and dtype, then the same object), arrays in the
// caller's memory as the caller's own objects, composites as dicts of their members (vLLM's
// nums_dict keyed by its BLOCK_M, 8). Shared by the generic Metadata object and the vLLM
// session.
#pragma once

#include <nanobind/nanobind.h>

#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "arrays.hpp"
#include "linmeta/outputs.hpp"

namespace linmeta::py {

namespace nb = nanobind;

/// The DLPack element type of an output dtype.
nb::dlpack::dtype dlpack_dtype(DType t);

/// `obj[:rows]`: a new view of an array object's first rows (Python's slicing).
nb::object first_rows(nb::handle obj, int64_t rows);

/// The caller's arrays of one call, for the output rows in the caller's memory
/// (Cap::Input: seq_lens, query_start_loc, a passed-through num_accepted_tokens, a table).
struct CallerArrays {
  nb::handle seq_lens, accepted, query_start_loc, block_table, drafts;
  const void* seq_lens_data = nullptr;
  const void* accepted_data = nullptr;
  const void* query_start_loc_data = nullptr;
  const void* drafts_data = nullptr;  ///< host num_decode_draft_tokens
};

class FieldExporter {
 public:
  /// Views keep `owner` (the Python builder, owner of the buffers) alive; `device_id` is the
  /// CUDA device of the cuda target. An exporter belongs to an object that holds the
  /// builder (a Metadata object, a vLLM engine), never to the builder itself: its cached
  /// views reference the builder. `fresh_views`: every value() hands out a new view object
  /// (fresh_view) over the memory of the cached one, so that what a caller does in place to
  /// one object's shape or strides reaches no later result; else the cached object itself.
  FieldExporter(nb::object owner, int32_t device_id, ArrayType type, bool fresh_views = false);

  /// The value of output row `spec` in `m` (whose parent composite must be present), or
  /// None when the row is absent.
  nb::object value(const OutputSpec& spec, const Metadata& m, const CallerArrays& in);
  /// A composite's members as a dict (None when absent).
  nb::object composite(const OutputSpec& spec, const Metadata& m, const CallerArrays& in);
  /// Number of views made so far (each export is counted once).
  [[nodiscard]] size_t views_made() const { return made_; }

  /// Starts one result (fresh_views): rows of one result that show the same memory get the
  /// same new view object, as vLLM's results carry one tensor in two places (nums_dict's
  /// batch_ptr is the result's batch_ptr).
  void begin_result() { result_views_.clear(); }

  /// Visits every Python object held (tp_traverse of the object holding the exporter).
  int traverse(visitproc visit, void* arg) const;
  /// Drops the cached views (tp_clear of the object holding the exporter).
  void clear();

 private:
  nb::object array(Out id, const Array& a, bool device, const CallerArrays& in);

  /// A composite's member rows (its direct children in the table) with their names.
  struct Member {
    const OutputSpec* spec;
    nb::str name;  ///< the leaf name, interned
  };
  const std::vector<Member>& members(const OutputSpec& composite);

  struct Key {
    uintptr_t ptr;
    int64_t rows;
    int32_t cols;
    int32_t ndim;
    DType dtype;
    bool host;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  struct View {
    Key key;
    nb::object view;
  };
  /// `view` (cached), or with fresh_views this result's new view object over its memory.
  nb::object handed_out(const Key& key, const nb::object& view);

  static constexpr size_t kMaxViews = 4096;
  /// Views remembered per row: one per group, buffer (eager, FULL-graph staged) and row
  /// count seen lately; past this many the row's list starts again.
  static constexpr size_t kMaxViewsPerRow = 64;

  nb::object owner_;
  int32_t device_id_;
  ArrayType type_;
  bool fresh_views_;
  /// Every view by what it shows: one object per memory, shape and dtype (rows that show
  /// the same memory, as a composite's member and a field, get the same object).
  std::unordered_map<Key, nb::object, KeyHash> views_;
  /// Each row's views of views_, searched newest first: a step's are among the first few,
  /// found without hashing.
  std::array<std::vector<View>, kNumOutputs> recent_;
  std::vector<View> result_views_;  ///< fresh_views: this result's new view objects
  std::array<std::vector<Member>, kNumOutputs> members_;  ///< by composite, made at first use
  std::array<bool, kNumOutputs> members_made_{};
  size_t made_ = 0;
};

}  // namespace linmeta::py
