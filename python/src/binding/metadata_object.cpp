#include "metadata_object.hpp"

#include <nanobind/stl/string.h>

#include <string>

#include "gc_slots.hpp"
#include "linmeta/names.hpp"

namespace linmeta::py {

namespace {

/// A composite's dict as types.SimpleNamespace, recursively (nums_dict stays a dict).
nb::object as_namespace(const OutputSpec& spec, nb::object value) {
  if (!nb::isinstance<nb::dict>(value) || spec.id == Out::NumsDict) return value;
  static nb::object* ns = new nb::object(nb::module_::import_("types").attr("SimpleNamespace"));
  nb::dict d = nb::borrow<nb::dict>(value);
  nb::dict out;
  for (auto [k, v] : d) {
    nb::object item = nb::borrow(v);
    if (nb::isinstance<nb::dict>(item)) {
      const std::string child = std::string(spec.name) + "." + nb::cast<std::string>(k);
      if (const OutputSpec* row = find_output(child)) item = as_namespace(*row, item);
    }
    out[k] = item;
  }
  return (*ns)(**out);
}

}  // namespace

int PyMetadata::traverse(visitproc visit, void* arg) const {
  Py_VISIT(builder_.ptr());
  for (const nb::object& o : keep_) Py_VISIT(o.ptr());
  for (const nb::object& o : cache_) Py_VISIT(o.ptr());
  return exporter_.traverse(visit, arg);
}

void PyMetadata::clear() {
  for (nb::object& o : cache_) o = nb::object();
  exporter_.clear();
}

PyMetadata::PyMetadata(const Metadata& m, BuilderKind kind, nb::object builder, int32_t group,
                       int32_t num_reqs, int32_t device_id, ArrayType type,
                       const CallerArrays& inputs)
    : m_(m),
      kind_(kind),
      builder_(builder),
      group_(group),
      num_reqs_(num_reqs),
      exporter_(builder, device_id, type),
      keep_{nb::borrow(inputs.seq_lens), nb::borrow(inputs.accepted),
            nb::borrow(inputs.query_start_loc), nb::borrow(inputs.block_table),
            nb::borrow(inputs.drafts)},
      in_(inputs) {
  in_.seq_lens = keep_[0];
  in_.accepted = keep_[1];
  in_.query_start_loc = keep_[2];
  in_.block_table = keep_[3];
  in_.drafts = keep_[4];
}

nb::object PyMetadata::get(Out id) {
  const OutputSpec& spec = output_spec(id);
  if (!spec.has(kind_)) return nb::none();
  nb::object& slot = cache_[static_cast<size_t>(id)];
  if (!slot.is_valid()) slot = as_namespace(spec, exporter_.value(spec, m_, in_));
  return slot;
}

void PyMetadata::bind(nb::module_& m) {
  auto cls = nb::class_<PyMetadata>(
      m, "Metadata", nb::type_slots(GcSlots<PyMetadata>::slots),
      "One build's metadata of one KV-cache group. A property per field of vLLM's metadata "
      "dataclasses (linmeta.OUTPUT_FIELDS); None where absent or where the builder kind has "
      "no such field. Arrays are views of the builder's persistent buffers (DLPack, torch or "
      "numpy, as the builder's array_type says), valid until the builder's next build; "
      "seq_lens and query_start_loc are the caller's own arrays; composites are "
      "types.SimpleNamespace objects (nums_dict: vLLM's {8: {...}} dict).");
  nb::list fields;
  for (const OutputSpec& spec : kOutputs) {
    if (!spec.is_output()) continue;
    nb::list kinds;
    for (const auto& [kind, name] : names::kBuilderKinds)
      if (spec.has(kind)) kinds.append(nb::str(name.data(), name.size()));
    fields.append(nb::make_tuple(spec.name, dtype_name(spec.dtype),
                                 spec.scope == Scope::Group ? "group" : "batch", nb::tuple(kinds)));
    if (spec.nested()) continue;
    const Out id = spec.id;
    cls.def_prop_ro(spec.name, [id](PyMetadata& s) { return s.get(id); });
  }
  m.attr("OUTPUT_FIELDS") = nb::tuple(fields);
  cls.def_prop_ro("group", &PyMetadata::group, "The KV-cache group this metadata was built for.")
      .def_prop_ro("num_reqs", &PyMetadata::num_reqs, "Rows of the step (padding included).")
      .def_prop_ro(
          "kind",
          [](const PyMetadata& s) { return std::string(names::builder_kind_name(s.kind())); },
          "The builder kind (one of linmeta.BUILDER_KINDS).")
      .def_prop_ro(
          "step_id", [](const PyMetadata& s) { return s.metadata().step_id; },
          "Which build made this metadata (update_block_table takes only the last one's).")
      .def_prop_ro(
          "builder", [](const PyMetadata& s) { return s.builder(); },
          "The builder that owns the buffers.")
      .def("__repr__", [](const PyMetadata& s) {
        const Metadata& md = s.metadata();
        return std::string("Metadata(") + std::string(names::builder_kind_name(s.kind())) +
               ", num_prefills=" + std::to_string(md.num_prefills) +
               ", num_decodes=" + std::to_string(md.num_decodes) +
               ", num_spec_decodes=" + std::to_string(md.num_spec_decodes) +
               ", group=" + std::to_string(s.group()) + ")";
      });
}

}  // namespace linmeta::py
