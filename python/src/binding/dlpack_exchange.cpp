#include "dlpack_exchange.hpp"

#include <cstdint>

namespace linmeta::py {

namespace {

// dlpack.h 1.3's exchange table, as far as it is read here (the layout of its C structs;
// DLTensor is nanobind's nb::dlpack::dltensor, the same struct).
struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};
struct DLPackExchangeAPIHeader {
  DLPackVersion version;
  DLPackExchangeAPIHeader* prev_api;
};
struct DLPackExchangeAPI {
  DLPackExchangeAPIHeader header;
  void* managed_tensor_allocator;
  void* managed_tensor_from_py_object_no_sync;
  void* managed_tensor_to_py_object_no_sync;
  /// Fills a non-owning DLTensor (its shape and strides valid until control returns to the
  /// producer): 0, or -1 with a Python error set. May be null.
  int (*dltensor_from_py_object_no_sync)(void* py_object, nb::dlpack::dltensor* out);
  /// The producer's current stream of a device: 0, or -1 with a Python error set.
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void** out_stream);
};
constexpr uint32_t kDLPackMajor = 1;

/// The usable table of `type`: its __dlpack_c_exchange_api__ capsule (looked up in the type's
/// MRO, without raising where it has none: CPython's attribute cache makes that a few loads),
/// the table of major version 1 in its chain, with the non-owning export and the stream query;
/// else null. Looked up on every call: nothing is cached per type (a cache would hold each
/// type alive, or go stale when the attribute changes).
const DLPackExchangeAPI* api_of(PyTypeObject* type) {
  static PyObject* const name = interned("__dlpack_c_exchange_api__").release().ptr();
  PyObject* cap = _PyType_Lookup(type, name);  // borrowed; null (no error set) when absent
  if (cap == nullptr || PyCapsule_IsValid(cap, "dlpack_exchange_api") == 0) return nullptr;
  // The table lives as long as the process (dlpack.h), not the capsule.
  const void* p = PyCapsule_GetPointer(cap, "dlpack_exchange_api");
  for (auto* h = static_cast<const DLPackExchangeAPIHeader*>(p); h != nullptr; h = h->prev_api) {
    if (h->version.major != kDLPackMajor) continue;
    const auto* api = reinterpret_cast<const DLPackExchangeAPI*>(h);
    return api->dltensor_from_py_object_no_sync != nullptr && api->current_work_stream != nullptr
               ? api
               : nullptr;
  }
  return nullptr;
}

}  // namespace

bool import_exchange(nb::handle obj, ImportedArray& a) {
  const DLPackExchangeAPI* api = api_of(Py_TYPE(obj.ptr()));
  if (api == nullptr) return false;
  nb::dlpack::dltensor t;
  if (api->dltensor_from_py_object_no_sync(obj.ptr(), &t) != 0) {
    PyErr_Clear();  // e.g. a sparse torch tensor: the generic import names what is wrong
    return false;
  }
  int64_t compact = 1;  // the stride of a C-contiguous array (strides may be null)
  for (int32_t i = t.ndim - 1; i >= 0; --i) {
    if (i < 2) {
      a.shape[i] = t.shape[i];
      a.strides[i] = t.strides != nullptr ? t.strides[i] : compact;
    }
    if (t.strides == nullptr && __builtin_mul_overflow(compact, t.shape[i], &compact))
      return false;  // no memory is that large: the generic import names the shape
  }
  a.ndim = t.ndim;
  a.present = true;
  a.data = static_cast<const char*>(t.data) + t.byte_offset;
  a.dtype = t.dtype;
  a.device_type = t.device.device_type;
  a.device_id = t.device.device_id;
  a.keep = nb::borrow(obj);  // the producer's object owns the memory
  return true;
}

bool producer_stream(nb::handle obj, int32_t device_id, Stream& out) {
  const DLPackExchangeAPI* api = api_of(Py_TYPE(obj.ptr()));
  if (api == nullptr) return false;
  void* s = nullptr;
  if (api->current_work_stream(kDLCUDA, device_id, &s) != 0) throw nb::python_error();
  out = static_cast<Stream>(s);
  return true;
}

}  // namespace linmeta::py
