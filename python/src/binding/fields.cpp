#include "fields.hpp"

#include <cstring>
#include <functional>
#include <string>

namespace linmeta::py {

nb::dlpack::dtype dlpack_dtype(DType t) {
  if (t == DType::Bool) return {static_cast<uint8_t>(nb::dlpack::dtype_code::Bool), 8, 1};
  return {static_cast<uint8_t>(nb::dlpack::dtype_code::Int),
          static_cast<uint8_t>(8 * dtype_size(t)), 1};
}

nb::object first_rows(nb::handle obj, int64_t rows) {
  nb::object s = nb::steal(PySlice_New(nb::int_(0).ptr(), nb::int_(rows).ptr(), nullptr));
  if (!s.is_valid()) throw nb::python_error();
  PyObject* v = PyObject_GetItem(obj.ptr(), s.ptr());
  if (v == nullptr) throw nb::python_error();
  return nb::steal(v);
}

size_t FieldExporter::KeyHash::operator()(const Key& k) const {
  size_t h = std::hash<uintptr_t>{}(k.ptr);
  h ^= std::hash<int64_t>{}(k.rows) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  return h ^ (static_cast<size_t>(k.cols) * 31 + static_cast<size_t>(k.ndim) * 7 +
              static_cast<size_t>(k.dtype) * 3 + (k.host ? 5 : 0));
}

FieldExporter::FieldExporter(nb::object owner, int32_t device_id, ArrayType type, bool fresh_views)
    : owner_(std::move(owner)), device_id_(device_id), type_(type), fresh_views_(fresh_views) {}

int FieldExporter::traverse(visitproc visit, void* arg) const {
  Py_VISIT(owner_.ptr());
  for (const auto& [key, view] : views_) Py_VISIT(view.ptr());
  for (const std::vector<View>& row : recent_)
    for (const View& v : row) Py_VISIT(v.view.ptr());
  for (const View& v : result_views_) Py_VISIT(v.view.ptr());
  return 0;
}

void FieldExporter::clear() {
  views_.clear();
  for (std::vector<View>& row : recent_) row.clear();
  result_views_.clear();
}

nb::object FieldExporter::handed_out(const Key& key, const nb::object& view) {
  if (!fresh_views_) return view;
  for (const View& v : result_views_)
    if (v.key == key) return v.view;
  nb::object fresh = fresh_view(view, type_);
  result_views_.push_back({key, fresh});
  return fresh;
}

nb::object FieldExporter::array(Out id, const Array& a, bool device, const CallerArrays& in) {
  if (!a.present) return nb::none();
  // The caller's own arrays (seq_lens, query_start_loc, passed-through accepted and draft
  // counts):
  // the caller's objects, as vLLM's builders return them. The builder's buffers never
  // alias caller memory, so the address tells.
  if (a.data != nullptr) {
    // vLLM's replayssm_seq_lens_d is seq_lens[:num_reqs], a new view object: so in the
    // engine's results (fresh_views; torch tensors); the generic object hands the caller's.
    if (a.data == in.seq_lens_data && in.seq_lens.is_valid())
      return id == Out::ReplaySsmSeqLensD && fresh_views_ ? first_rows(in.seq_lens, a.rows)
                                                          : nb::borrow(in.seq_lens);
    if (a.data == in.accepted_data && in.accepted.is_valid()) return nb::borrow(in.accepted);
    if (a.data == in.query_start_loc_data && in.query_start_loc.is_valid())
      return nb::borrow(in.query_start_loc);
    if (a.data == in.drafts_data && in.drafts.is_valid()) return nb::borrow(in.drafts);
  }
  const Key key{reinterpret_cast<uintptr_t>(a.data), a.rows, a.cols, a.ndim, a.dtype, !device};
  std::vector<View>& row = recent_[static_cast<size_t>(id)];
  for (auto v = row.rbegin(); v != row.rend(); ++v)
    if (v->key == key) return handed_out(key, v->view);
  auto it = views_.find(key);
  if (it == views_.end()) {
    if (views_.size() >= kMaxViews) {  // start again, every row's list too
      views_.clear();
      for (std::vector<View>& r : recent_) r.clear();
    }
    nb::object view =
        export_array(a.data, a.ndim, a.rows, a.cols, dlpack_dtype(a.dtype),
                     device ? kDLCUDA : kDLCPU, device ? device_id_ : 0, owner_, type_);
    ++made_;
    it = views_.emplace(key, std::move(view)).first;
  }
  if (row.size() >= kMaxViewsPerRow) row.clear();
  row.push_back({key, it->second});
  return handed_out(key, it->second);
}

nb::object FieldExporter::value(const OutputSpec& spec, const Metadata& m, const CallerArrays& in) {
  const FieldRef r = spec.field(const_cast<Metadata&>(m));
  if (!r) return nb::none();
  switch (r.type) {
    case FieldType::Count:
      return nb::int_(r.count());
    case FieldType::OptionalInt:
      return r.present() ? nb::object(nb::int_(*r.optional_int())) : nb::none();
    case FieldType::Flag:
      return nb::bool_(r.flag());
    case FieldType::Table:
      return in.block_table.is_valid() ? nb::borrow(in.block_table) : nb::none();
    case FieldType::Array: {
      const Array& a = r.array();
      if (spec.shape != Shape::List)
        return array(spec.id, a, m.target == Target::Cuda && !spec.host_memory(), in);
      if (!a.present) return nb::none();
      nb::list l;  // a new list each time, as vLLM's (SGLang's bool lists: of bools)
      for (int64_t i = 0; i < a.size(); ++i)
        l.append(a.dtype == DType::Bool ? nb::object(nb::bool_(a.at(i) != 0))
                                        : nb::object(nb::int_(a.at(i))));
      return l;
    }
    case FieldType::Composite:
      return composite(spec, m, in);
  }
  return nb::none();
}

const std::vector<FieldExporter::Member>& FieldExporter::members(const OutputSpec& composite) {
  const auto i = static_cast<size_t>(composite.id);
  if (!members_made_[i]) {
    // The rows named "<composite.name>.<leaf>", after the parent in the table.
    const size_t prefix = std::strlen(composite.name);
    for (const OutputSpec& row : kOutputs)
      if (row.is_output() && std::strncmp(row.name, composite.name, prefix) == 0 &&
          row.name[prefix] == '.' && std::strchr(row.name + prefix + 1, '.') == nullptr)
        members_[i].push_back({&row, interned(row.name + prefix + 1)});
    members_made_[i] = true;
  }
  return members_[i];
}

nb::object FieldExporter::composite(const OutputSpec& spec, const Metadata& m,
                                    const CallerArrays& in) {
  const FieldRef r = spec.field(const_cast<Metadata&>(m));
  if (!r || !r.present()) return nb::none();
  nb::dict d;
  for (const Member& member : members(spec)) d[member.name] = value(*member.spec, m, in);
  // vLLM's compute_causal_conv1d_metadata returns {BLOCK_M: {...}}.
  if (spec.id == Out::NumsDict) {
    nb::dict outer;
    outer[nb::int_(kConvBlock)] = d;
    return outer;
  }
  return d;
}

}  // namespace linmeta::py
