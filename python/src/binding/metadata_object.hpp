// linmeta.Metadata: one build's metadata of one KV-cache group, with a read-only property per
// top-level row of the output table (linmeta/outputs.hpp). Arrays are views of the builder's
// persistent buffers (exported on first read, then cached), composites SimpleNamespace
// objects of their members (nums_dict the dict vLLM's builders return).
#pragma once

#include <nanobind/nanobind.h>

#include <array>

#include "fields.hpp"
#include "linmeta/metadata.hpp"
#include "linmeta/outputs.hpp"

namespace linmeta::py {

class PyMetadata {
 public:
  /// `inputs`: the Python objects of the step's caller arrays (kept alive here).
  PyMetadata(const Metadata& m, BuilderKind kind, nb::object builder, int32_t group,
             int32_t num_reqs, int32_t device_id, ArrayType type, const CallerArrays& inputs);

  [[nodiscard]] const Metadata& metadata() const { return m_; }
  [[nodiscard]] const nb::object& builder() const { return builder_; }
  [[nodiscard]] BuilderKind kind() const { return kind_; }
  [[nodiscard]] int32_t group() const { return group_; }
  /// Rows of the step (padding rows included).
  [[nodiscard]] int32_t num_reqs() const { return num_reqs_; }
  [[nodiscard]] const CallerArrays& inputs() const { return in_; }

  /// The Python value of row `id` (None when absent or not a field of this builder kind).
  nb::object get(Out id);

  static void bind(nb::module_& m);

  /// tp_traverse / tp_clear: the objects held (a cycle may run through them: a caller that
  /// keeps a Metadata on a subclass of its builder).
  int traverse(visitproc visit, void* arg) const;
  void clear();

 private:
  Metadata m_;
  BuilderKind kind_;
  nb::object builder_;
  int32_t group_;
  int32_t num_reqs_;
  FieldExporter exporter_;
  std::array<nb::object, 5> keep_;  ///< the objects behind in_
  CallerArrays in_;
  std::array<nb::object, kNumOutputs> cache_{};
};

}  // namespace linmeta::py
