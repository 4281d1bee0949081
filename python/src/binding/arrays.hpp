// Array exchange for the Python bindings: zero-copy import of step inputs
// (DLPack, the buffer protocol, __cuda_array_interface__, __array_interface__)
// and DLPack export of the builder's output views.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>

#include "linmeta/builder.hpp"

namespace linmeta::py {

namespace nb = nanobind;

/// DLPack device types used here (dlpack.h's DLDeviceType).
inline constexpr int32_t kDLCPU = 1;
inline constexpr int32_t kDLCUDA = 2;
inline constexpr int32_t kDLCUDAHost = 3;
inline constexpr int32_t kDLCUDAManaged = 13;

inline constexpr nb::dlpack::dtype kInt32{static_cast<uint8_t>(nb::dlpack::dtype_code::Int), 32, 1};
inline constexpr nb::dlpack::dtype kInt64{static_cast<uint8_t>(nb::dlpack::dtype_code::Int), 64, 1};
inline constexpr nb::dlpack::dtype kBool{static_cast<uint8_t>(nb::dlpack::dtype_code::Bool), 8, 1};

/// How output arrays are handed to Python.
enum class ArrayType : int32_t {
  DLPack,  ///< nanobind ndarray objects (__dlpack__, __dlpack_device__, buffer protocol)
  Numpy,   ///< numpy.ndarray views (host target only)
  Torch,   ///< torch.Tensor views
};

ArrayType parse_array_type(const std::string& s);
const char* array_type_name(ArrayType t);

/// An imported input array: a view of the caller's memory, kept alive by `nd` / `keep`.
struct ImportedArray {
  bool present = false;
  const void* data = nullptr;
  int32_t ndim = 0;
  int64_t shape[2]{0, 0};
  int64_t strides[2]{0, 0};  ///< in elements
  nb::dlpack::dtype dtype{};
  int32_t device_type = 0;
  int32_t device_id = 0;
  nb::ndarray<nb::ro> nd;  ///< DLPack / buffer-protocol imports
  nb::object keep;         ///< the other imports: the object owning the memory
};

/// Imports `obj` without copying; None gives an absent array. `consumer` is the
/// stream the build runs on: a __cuda_array_interface__ producer stream is
/// ordered before it. Raises TypeError for objects that are no array. In order: an object
/// whose type publishes the DLPack C exchange API (torch >= 2.10's tensors) is read with one
/// C call (dlpack_exchange.hpp); a plain torch tensor of an older torch through its public
/// attributes (dtype, shape, stride(), data_ptr(), device); anything else through DLPack,
/// the buffer protocol or the array interfaces.
ImportedArray import_array(nb::handle obj, const char* name, Stream consumer);

/// import_array into `a`, an ImportedArray as default-constructed (the import is built in
/// place, e.g. in a PreparedStep's vector, without moving the struct around).
void import_array_into(ImportedArray& a, nb::handle obj, const char* name, Stream consumer);

/// What one input must be.
struct Requirement {
  bool device = false;   ///< "device" array (target memory) rather than a host array
  bool boolean = false;  ///< bool instead of int32
  int32_t ndim = 1;
};

/// Where the builder's target memory is.
struct TargetMemory {
  Target target = Target::Host;
  int32_t device_id = 0;  ///< cuda target: the device the builder allocated on
};

/// Checks dtype (TypeError), dimensionality, memory and strides (linmeta.Error).
/// 1-D arrays must be contiguous; 2-D arrays need stride(1) == 1.
void require(const ImportedArray& a, const char* name, const Requirement& req,
             const TargetMemory& mem);

/// Human-readable dtype ("int32", "bool", ...).
std::string dtype_name(nb::dlpack::dtype dt);

/// A view of memory owned by `owner` as an ndarray of `type` (no copy).
nb::object export_array(const void* data, int32_t ndim, int64_t rows, int64_t cols,
                        nb::dlpack::dtype dtype, int32_t device_type, int32_t device_id,
                        nb::handle owner, ArrayType type);

/// An int32 copy of `obj` where it is a torch tensor of dtype int64 (obj.to(torch.int32): on
/// its device, in torch's current stream); a null object for anything else. A copy per call:
/// the caller's tensor may have changed in place since the last.
nb::object int32_copy_of_int64(nb::handle obj);

/// A new view object over the memory of `view` (an export_array result of `type`): torch
/// tensor.detach(), numpy ndarray.view(); DLPack ndarrays, which have no in-place view
/// operations, are handed back as they are. What a caller does to the new object's shape or
/// strides (squeeze_, t_, as_strided_, resize_) reaches no other object.
nb::object fresh_view(nb::handle view, ArrayType type);

/// `s` as an interned Python str: dict and attribute lookups with it find the interned
/// names of classes and instances by identity, without comparing characters.
inline nb::str interned(const char* s) {
  PyObject* o = PyUnicode_InternFromString(s);
  if (o == nullptr) throw nb::python_error();
  return nb::steal<nb::str>(o);
}

/// Throws linmeta::Error (Python: linmeta.Error, a ValueError) with "linmeta: " + message.
[[noreturn]] void raise_error(const std::string& message);

}  // namespace linmeta::py
