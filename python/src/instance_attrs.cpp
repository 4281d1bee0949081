#include "instance_attrs.hpp"

#include <stdexcept>

namespace nb = nanobind;

namespace linmeta::py {

namespace {

/// Whether `type` has a version tag and it is `tag`: then the type is unchanged since the
/// tag was read (a type's tags never repeat; modifying it drops its tag until a lookup gives
/// it a new one). Before 3.14 the tag is current only with Py_TPFLAGS_VALID_VERSION_TAG set
/// (before 3.11 a modified type kept its old number); 3.14 no longer sets that flag.
bool has_tag(PyTypeObject* type, unsigned int tag) {
  if (tag == 0 || type->tp_version_tag != tag) return false;
#if PY_VERSION_HEX < 0x030E0000
  return PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG) != 0;
#else
  return true;
#endif
}

}  // namespace

InstanceAttrs::InstanceAttrs(std::span<const char* const> names) {
  if (names.size() > 64) throw std::invalid_argument("InstanceAttrs: at most 64 names");
  for (const char* n : names) {
    PyObject* s = PyUnicode_InternFromString(n);  // interned: dict lookups compare pointers
    if (s == nullptr) throw nb::python_error();
    names_.push_back(nb::steal<nb::str>(s));
  }
}

void InstanceAttrs::learn(PyTypeObject* type) {
  type_ = nb::borrow(reinterpret_cast<PyObject*>(type));
  tag_ = 0;
  from_dict_ = 0;
  bool has_dict = type->tp_dictoffset != 0;
#ifdef Py_TPFLAGS_MANAGED_DICT
  has_dict = has_dict || PyType_HasFeature(type, Py_TPFLAGS_MANAGED_DICT);
#endif
  if (type->tp_getattro != PyObject_GenericGetAttr || !has_dict) return;
  uint64_t from_dict = 0;
  for (size_t i = 0; i < names_.size(); ++i) {
    // The type's attribute of that name (never raises); a data descriptor (property, slot
    // member) takes precedence over the instance __dict__, anything else does not.
    PyObject* d = _PyType_Lookup(type, names_[i].ptr());
    if (d == nullptr || Py_TYPE(d)->tp_descr_set == nullptr) from_dict |= uint64_t{1} << i;
  }
  // The lookups gave the type a version tag unless it cannot have one: then every call
  // learns anew, and takes getattr.
  if (!has_tag(type, type->tp_version_tag)) return;
  tag_ = type->tp_version_tag;
  from_dict_ = from_dict;
}

void InstanceAttrs::read(nb::handle obj, std::span<nb::object> out, uint64_t optional) {
  PyTypeObject* type = Py_TYPE(obj.ptr());
  if (type_.ptr() != reinterpret_cast<PyObject*>(type) || !has_tag(type, tag_)) learn(type);
  // A local copy: a getattr below may run Python code that reads another type's attributes
  // through this object (re-learning it).
  const uint64_t from_dict = from_dict_;
  nb::object dict;
  if (from_dict != 0) {
    PyObject* d = PyObject_GenericGetDict(obj.ptr(), nullptr);
    if (d == nullptr) throw nb::python_error();
    dict = nb::steal(d);
  }
  for (size_t i = 0; i < names_.size() && i < out.size(); ++i) {
    PyObject* name = names_[i].ptr();
    if (dict.is_valid() && (from_dict >> i & 1) != 0) {
      PyObject* v = PyDict_GetItemWithError(dict.ptr(), name);
      if (v != nullptr) {
        out[i] = nb::borrow(v);
        continue;
      }
      if (PyErr_Occurred()) throw nb::python_error();
    }
    PyObject* v = PyObject_GetAttr(obj.ptr(), name);
    if (v == nullptr) {
      if ((optional >> i & 1) == 0 || !PyErr_ExceptionMatches(PyExc_AttributeError))
        throw nb::python_error();
      PyErr_Clear();
      out[i] = nb::none();
      continue;
    }
    out[i] = nb::steal(v);
  }
}

}  // namespace linmeta::py
