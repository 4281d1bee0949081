#include "dlpack_exchange.hpp"

#include <cstdint>
#include <utility>
#include <vector>

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

/// The usable table of `type`: its __dlpack_c_exchange_api__ capsule, the table of major
/// version 1 in its chain, with the non-owning export and the stream query; else null
/// (Python error cleared).
const DLPackExchangeAPI* find_api(PyTypeObject* type) {
  PyObject* cap =
      PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), "__dlpack_c_exchange_api__");
  if (cap == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  void* p = PyCapsule_IsValid(cap, "dlpack_exchange_api") != 0
                ? PyCapsule_GetPointer(cap, "dlpack_exchange_api")
                : nullptr;
  Py_DECREF(cap);  // the table lives as long as the process (dlpack.h), not the capsule
  for (auto* h = static_cast<const DLPackExchangeAPIHeader*>(p); h != nullptr; h = h->prev_api) {
    if (h->version.major != kDLPackMajor) continue;
    const auto* api = reinterpret_cast<const DLPackExchangeAPI*>(h);
    return api->dltensor_from_py_object_no_sync != nullptr && api->current_work_stream != nullptr
               ? api
               : nullptr;
  }
  return nullptr;
}

/// The types seen so far and their tables (null: none), a strong reference to each type so
/// that its address stays its own. Never destroyed (no reference may be released after the
/// interpreter is gone); read and written with the GIL held.
constexpr size_t kMaxTypes = 16;
auto* const seen_types = new std::vector<std::pair<nb::object, const DLPackExchangeAPI*>>();

/// `type`'s table, looked up once per type (types past kMaxTypes each time).
const DLPackExchangeAPI* api_of(PyTypeObject* type) {
  for (const auto& [t, api] : *seen_types)
    if (t.ptr() == reinterpret_cast<PyObject*>(type)) return api;
  const DLPackExchangeAPI* api = find_api(type);
  if (seen_types->size() < kMaxTypes)
    seen_types->emplace_back(nb::borrow(reinterpret_cast<PyObject*>(type)), api);
  return api;
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
