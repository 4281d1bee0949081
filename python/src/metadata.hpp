// The Python Metadata object: counts plus lazily exported, cached DLPack views of
// the builder's persistent buffers (owner: the Python builder object).
#pragma once

#include <array>

#include "arrays.hpp"
#include "linmeta/metadata.hpp"
#include "linmeta/outputs.hpp"

namespace linmeta::py {

/// KDA RecoverSSM commit metadata (align mode part).
struct PyRecoverSsmAlign {
  nb::object block_table;  ///< the caller's raw block table of this group
  nb::object num_computed_tokens;
  int32_t block_size = 0;
};

/// KDA RecoverSSM commit metadata.
struct PyRecoverSsmCommit {
  nb::object state_indices;
  nb::object query_start_loc;
  nb::object request_indices;
  nb::object align;  ///< PyRecoverSsmAlign or None
};

/// KDA prefill checkpoints.
struct PyCheckpoint {
  nb::object checkpoint_offsets;
  nb::object state_indices;
};

/// vllm-0.34 GDN + FlashInfer: where the prefill kernel emits checkpoints.
struct PyFlashInferCheckpointPlan {
  int32_t every_n_tokens = 0;
  int32_t num_checkpoints = 0;
  nb::object cu_starts;
  nb::object rows;
};

/// The scalar fields of Metadata (counts and optional ints) as Python values, by vLLM name:
/// the Metadata properties and the vLLM session both iterate this list.
struct ScalarField {
  const char* name;
  nb::object (*get)(const Metadata& m);  ///< a Python int, or None for an absent optional
};
extern const std::array<ScalarField, 10> kScalarFields;

/// The DLPack element type of an output dtype.
nb::dlpack::dtype dlpack_dtype(DType t);

/// Composite fields built from several table rows (the export cache follows the
/// output table's rows, linmeta/outputs.hpp, then these).
enum class Composite : int32_t {
  NumsDict,
  RecoverSsmCommit,
  Checkpoint,
  FlashInferCheckpointPlan,
  Count
};
inline constexpr size_t kCacheSlots = kNumOutputs + static_cast<size_t>(Composite::Count);

class PyMetadata {
 public:
  PyMetadata(const Metadata& m, nb::object builder, nb::object table, int32_t group,
             int32_t num_reqs, int32_t device_id, ArrayType array_type)
      : m_(m),
        builder_(std::move(builder)),
        table_(std::move(table)),
        group_(group),
        num_reqs_(num_reqs),
        device_id_(device_id),
        array_type_(array_type) {}

  [[nodiscard]] const Metadata& metadata() const { return m_; }
  [[nodiscard]] const nb::object& builder() const { return builder_; }
  [[nodiscard]] int32_t group() const { return group_; }
  [[nodiscard]] int32_t num_reqs() const { return num_reqs_; }

  /// The Python value of an output-table row (None when absent), exported once.
  nb::object get(Out f);
  /// The Python value of a composite field, built once.
  nb::object get(Composite f);

  static void bind(nb::module_& m);

 private:
  nb::object compute(Composite f);
  nb::object view(const Array& a, bool host_memory = false, int64_t rows = -1);

  Metadata m_;
  nb::object builder_;  ///< owner of every exported view
  nb::object table_;    ///< the caller's block table of this group
  int32_t group_;
  int32_t num_reqs_;
  int32_t device_id_;
  ArrayType array_type_;
  std::array<nb::object, kCacheSlots> cache_{};
};

}  // namespace linmeta::py
