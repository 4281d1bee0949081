#include "arrays.hpp"

#include <cuda_runtime_api.h>
#include <nanobind/stl/string.h>

#include <cstdlib>
#include <string>

#include "linmeta/error.hpp"

namespace linmeta::py {

namespace {

using nb::dlpack::dtype_code;

std::string obj_type_name(nb::handle obj) {
  return nb::cast<std::string>(
      nb::str(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr())))));
}

std::string device_name(int32_t type, int32_t id) {
  switch (type) {
    case kDLCPU:
      return "host (cpu) memory";
    case kDLCUDA:
      return "CUDA device " + std::to_string(id) + " memory";
    case kDLCUDAHost:
      return "pinned host memory";
    case kDLCUDAManaged:
      return "CUDA managed memory";
    default:
      return "memory of DLPack device type " + std::to_string(type);
  }
}

/// Parses an array-interface typestr ("<i4", "|b1", ...) into a DLPack dtype.
nb::dlpack::dtype parse_typestr(const std::string& s, const char* name) {
  if (s.size() < 3)
    throw nb::type_error(
        ("linmeta: " + std::string(name) + ": unsupported typestr '" + s + "'").c_str());
  const char order = s[0];
  const char kind = s[1];
  const int bytes = std::stoi(s.substr(2));
  const bool little = true;  // x86-64 / aarch64 hosts
  if (bytes > 1 &&
      ((order == '>' && little) || (order != '<' && order != '>' && order != '=' && order != '|')))
    throw nb::type_error(
        ("linmeta: " + std::string(name) + ": unsupported byte order in typestr '" + s + "'")
            .c_str());
  nb::dlpack::dtype dt{};
  switch (kind) {
    case 'i':
      dt.code = static_cast<uint8_t>(dtype_code::Int);
      break;
    case 'u':
      dt.code = static_cast<uint8_t>(dtype_code::UInt);
      break;
    case 'f':
      dt.code = static_cast<uint8_t>(dtype_code::Float);
      break;
    case 'b':
      dt.code = static_cast<uint8_t>(dtype_code::Bool);
      break;
    case 'c':
      dt.code = static_cast<uint8_t>(dtype_code::Complex);
      break;
    default:
      throw nb::type_error(
          ("linmeta: " + std::string(name) + ": unsupported typestr '" + s + "'").c_str());
  }
  dt.bits = static_cast<uint8_t>(bytes * 8);
  dt.lanes = 1;
  return dt;
}

cudaStream_t producer_stream(int64_t v) {
  if (v == 1) return cudaStreamLegacy;
  if (v == 2) return cudaStreamPerThread;
  return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(v));
}

void cuda_or_raise(cudaError_t e, const char* what) {
  if (e != cudaSuccess) raise_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// __cuda_array_interface__ v3: work on `consumer` must follow the producer's stream.
void order_after(int64_t producer, Stream consumer) {
  const cudaStream_t p = producer_stream(producer);
  const auto c = reinterpret_cast<cudaStream_t>(consumer);
  if (p == c || (p == cudaStreamLegacy && c == nullptr)) return;
  cudaEvent_t ev = nullptr;
  cuda_or_raise(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
  const cudaError_t r1 = cudaEventRecord(ev, p);
  const cudaError_t r2 = r1 == cudaSuccess ? cudaStreamWaitEvent(c, ev, 0) : r1;
  cudaEventDestroy(ev);
  cuda_or_raise(r2, "ordering a __cuda_array_interface__ producer stream");
}

ImportedArray from_interface(nb::handle obj, nb::handle iface, const char* name, bool cuda,
                             Stream consumer) {
  const char* which = cuda ? "__cuda_array_interface__" : "__array_interface__";
  if (!nb::isinstance<nb::dict>(iface))
    throw nb::type_error(
        ("linmeta: " + std::string(name) + ": " + which + " is not a dict").c_str());
  nb::dict d = nb::borrow<nb::dict>(iface);
  ImportedArray a;
  a.present = true;
  a.keep = nb::borrow(obj);
  a.dtype = parse_typestr(nb::cast<std::string>(d["typestr"]), name);
  nb::tuple shape = nb::cast<nb::tuple>(d["shape"]);
  a.ndim = static_cast<int32_t>(nb::len(shape));
  for (int32_t i = 0; i < a.ndim && i < 2; ++i)
    a.shape[i] = nb::cast<int64_t>(shape[static_cast<size_t>(i)]);
  if (d.contains("mask") && !d["mask"].is_none())
    throw nb::type_error(
        ("linmeta: " + std::string(name) + ": masked arrays are not supported").c_str());
  nb::object data = d["data"];
  if (!nb::isinstance<nb::tuple>(data))
    throw nb::type_error(("linmeta: " + std::string(name) + ": " + which +
                          " without a (pointer, read_only) data tuple is not supported")
                             .c_str());
  const auto ptr = nb::cast<uintptr_t>(nb::cast<nb::tuple>(data)[0]);
  a.data = reinterpret_cast<const void*>(ptr);
  const int64_t itemsize = (a.dtype.bits + 7) / 8;
  const bool has_strides = d.contains("strides") && !d["strides"].is_none();
  if (has_strides) {
    nb::tuple st = nb::cast<nb::tuple>(d["strides"]);
    for (int32_t i = 0; i < a.ndim && i < 2; ++i) {
      const auto bytes = nb::cast<int64_t>(st[static_cast<size_t>(i)]);
      if (bytes % itemsize != 0)
        raise_error(std::string(name) + ": stride of " + std::to_string(bytes) +
                    " bytes is not a multiple of the element size");
      a.strides[i] = bytes / itemsize;
    }
  } else if (a.ndim == 2) {
    a.strides[0] = a.shape[1];
    a.strides[1] = 1;
  } else {
    a.strides[0] = 1;
  }
  if (!cuda) {
    a.device_type = kDLCPU;
    return a;
  }
  a.device_type = kDLCUDA;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) cudaGetLastError();
  a.device_id = dev;
  if (ptr != 0) {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, a.data) == cudaSuccess) {
      if (attr.type == cudaMemoryTypeManaged) a.device_type = kDLCUDAManaged;
      if (attr.type == cudaMemoryTypeHost) a.device_type = kDLCUDAHost;
      if (attr.type == cudaMemoryTypeUnregistered) a.device_type = kDLCPU;
      a.device_id = attr.device;
    } else {
      cudaGetLastError();
    }
  }
  if (d.contains("stream") && !d["stream"].is_none())
    order_after(nb::cast<int64_t>(d["stream"]), consumer);
  return a;
}

/// torch's Tensor type and dtype objects, looked up once torch has been imported
/// by someone (linmeta never imports torch to read an input).
struct TorchObjects {
  PyTypeObject* tensor = nullptr;
  nb::object int32, int64, boolean, uint8, int8, int16;
  nb::object s_dtype, s_shape, s_stride, s_data_ptr, s_get_device;
};

/// torch's objects once torch_objects() found them (never destroyed: the objects must not be
/// released after the interpreter is gone).
TorchObjects* torch_objects_found = nullptr;

/// torch_objects()'s lookup, until it finds torch.
[[gnu::noinline]] const TorchObjects* find_torch_objects() {
  PyObject* mod = PyImport_GetModule(nb::str("torch").ptr());  // no import: only if loaded
  if (mod == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  nb::object torch = nb::steal(mod);
  if (!nb::hasattr(torch, "Tensor")) return nullptr;
  auto* t = new TorchObjects;
  t->tensor = reinterpret_cast<PyTypeObject*>(torch.attr("Tensor").ptr());
  t->int32 = torch.attr("int32");
  t->int64 = torch.attr("int64");
  t->boolean = torch.attr("bool");
  t->uint8 = torch.attr("uint8");
  t->int8 = torch.attr("int8");
  t->int16 = torch.attr("int16");
  t->s_dtype = nb::str("dtype");
  t->s_shape = nb::str("shape");
  t->s_stride = nb::str("stride");
  t->s_data_ptr = nb::str("data_ptr");
  t->s_get_device = nb::str("get_device");
  torch_objects_found = t;
  return t;
}

/// torch's Tensor type and dtypes, or null while torch is not imported (inline: every import
/// of an input asks).
inline const TorchObjects* torch_objects() {
  return torch_objects_found != nullptr ? torch_objects_found : find_torch_objects();
}

/// obj.name(), or a null object (the Python error cleared) when it raises.
nb::object call0_or_null(nb::handle obj, nb::handle name) {
  PyObject* args[1] = {obj.ptr()};
  PyObject* r =
      PyObject_VectorcallMethod(name.ptr(), args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
  if (r == nullptr) PyErr_Clear();
  return nb::steal(r);
}

/// The fast path for plain torch.Tensor inputs: pointer, shape, strides, dtype and device
/// read from the tensor itself (no DLPack capsule per input). Returns false for anything
/// else (subclasses, non-strided layouts, other dtypes), which takes the generic path.
bool import_torch_tensor(nb::handle obj, ImportedArray& a) {
  const TorchObjects* t = torch_objects();
  if (t == nullptr) return false;
  if (Py_TYPE(obj.ptr()) != t->tensor) return false;
  nb::object dt = nb::steal(PyObject_GetAttr(obj.ptr(), t->s_dtype.ptr()));
  if (!dt.is_valid()) throw nb::python_error();
  nb::dlpack::dtype d{};
  d.lanes = 1;
  if (dt.is(t->int32)) {
    d.code = static_cast<uint8_t>(dtype_code::Int);
    d.bits = 32;
  } else if (dt.is(t->int64)) {
    d.code = static_cast<uint8_t>(dtype_code::Int);
    d.bits = 64;
  } else if (dt.is(t->boolean)) {
    d.code = static_cast<uint8_t>(dtype_code::Bool);
    d.bits = 8;
  } else if (dt.is(t->uint8)) {
    d.code = static_cast<uint8_t>(dtype_code::UInt);
    d.bits = 8;
  } else if (dt.is(t->int8)) {
    d.code = static_cast<uint8_t>(dtype_code::Int);
    d.bits = 8;
  } else if (dt.is(t->int16)) {
    d.code = static_cast<uint8_t>(dtype_code::Int);
    d.bits = 16;
  } else {
    return false;  // floats etc.: the generic path names the dtype in its error
  }
  nb::object shape = nb::steal(PyObject_GetAttr(obj.ptr(), t->s_shape.ptr()));
  if (!shape.is_valid()) throw nb::python_error();
  // Tensors of other layouts (sparse, mkldnn, nested) have no strides or no data pointer:
  // stride() or data_ptr() raises, and the generic path names what is wrong.
  nb::object stride = call0_or_null(obj, t->s_stride);
  if (!stride.is_valid()) return false;
  if (!PyTuple_Check(shape.ptr()) || !PyTuple_Check(stride.ptr())) return false;
  const Py_ssize_t ndim = PyTuple_GET_SIZE(shape.ptr());
  a.ndim = static_cast<int32_t>(ndim);
  for (Py_ssize_t i = 0; i < ndim && i < 2; ++i) {
    a.shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape.ptr(), i));
    a.strides[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(stride.ptr(), i));
  }
  nb::object ptr = call0_or_null(obj, t->s_data_ptr);
  nb::object dev = call0_or_null(obj, t->s_get_device);
  if (!ptr.is_valid() || !dev.is_valid()) return false;
  const auto p = PyLong_AsUnsignedLongLong(ptr.ptr());
  const long long device = PyLong_AsLongLong(dev.ptr());
  if (PyErr_Occurred()) throw nb::python_error();
  a.present = true;
  a.data = reinterpret_cast<const void*>(static_cast<uintptr_t>(p));
  a.dtype = d;
  a.device_type = device < 0 ? kDLCPU : kDLCUDA;
  a.device_id = device < 0 ? 0 : static_cast<int32_t>(device);
  a.keep = nb::borrow(obj);
  return true;
}

}  // namespace

void raise_error(const std::string& message) { throw Error("linmeta: " + message); }

ArrayType parse_array_type(const std::string& s) {
  if (s == "dlpack") return ArrayType::DLPack;
  if (s == "numpy") return ArrayType::Numpy;
  if (s == "torch") return ArrayType::Torch;
  raise_error("array_type = '" + s + "' must be 'dlpack', 'numpy' or 'torch'");
}

const char* array_type_name(ArrayType t) {
  switch (t) {
    case ArrayType::Numpy:
      return "numpy";
    case ArrayType::Torch:
      return "torch";
    default:
      return "dlpack";
  }
}

std::string dtype_name(nb::dlpack::dtype dt) {
  std::string base;
  switch (static_cast<dtype_code>(dt.code)) {
    case dtype_code::Int:
      base = "int";
      break;
    case dtype_code::UInt:
      base = "uint";
      break;
    case dtype_code::Float:
      base = "float";
      break;
    case dtype_code::Bfloat:
      base = "bfloat";
      break;
    case dtype_code::Complex:
      base = "complex";
      break;
    case dtype_code::Bool:
      return "bool";
    default:
      base = "dtype(code " + std::to_string(dt.code) + ")";
      break;
  }
  std::string out = base + std::to_string(dt.bits);
  if (dt.lanes != 1) out += "x" + std::to_string(dt.lanes);
  return out;
}

void import_array_into(ImportedArray& a, nb::handle obj, const char* name, Stream consumer) {
  if (!obj.is_valid() || obj.is_none()) return;
  if (import_torch_tensor(obj, a)) return;
  nb::ndarray<nb::ro> nd;
  bool cast = false;
  try {
    cast = nb::try_cast(obj, nd, /*convert=*/false);
  } catch (nb::python_error&) {  // its __dlpack__ raised: try the interfaces below
    cast = false;
  }
  if (cast) {
    a.present = true;
    a.data = nd.data();
    a.ndim = static_cast<int32_t>(nd.ndim());
    for (int32_t i = 0; i < a.ndim && i < 2; ++i) {
      a.shape[i] = static_cast<int64_t>(nd.shape(static_cast<size_t>(i)));
      a.strides[i] = nd.stride(static_cast<size_t>(i));
    }
    a.dtype = nd.dtype();
    a.device_type = nd.device_type();
    a.device_id = nd.device_id();
    a.nd = std::move(nd);
    return;
  }
  PyErr_Clear();
  std::string why;
  try {
    if (nb::hasattr(obj, "__cuda_array_interface__")) {
      a = from_interface(obj, obj.attr("__cuda_array_interface__"), name, true, consumer);
      return;
    }
    if (nb::hasattr(obj, "__array_interface__")) {
      a = from_interface(obj, obj.attr("__array_interface__"), name, false, consumer);
      return;
    }
  } catch (nb::python_error& e) {  // e.g. a sparse torch.Tensor: its interfaces raise
    why = std::string(" (") + e.what() + ")";
  }
  throw nb::type_error(
      ("linmeta: " + std::string(name) +
       ": expected an array (a DLPack, __cuda_array_interface__, __array_interface__ or "
       "buffer-protocol object such as a torch.Tensor or numpy.ndarray), got " +
       obj_type_name(obj) + why)
          .c_str());
}

ImportedArray import_array(nb::handle obj, const char* name, Stream consumer) {
  ImportedArray a;
  import_array_into(a, obj, name, consumer);
  return a;
}

void require(const ImportedArray& a, const char* name, const Requirement& req,
             const TargetMemory& mem) {
  const nb::dlpack::dtype want = req.boolean ? kBool : kInt32;
  if (a.dtype != want)
    throw nb::type_error(
        ("linmeta: " + std::string(name) + ": expected dtype " + dtype_name(want) + ", got " +
         dtype_name(a.dtype) +
         (req.boolean ? "" : " (convert with .to(torch.int32) / .astype(numpy.int32))"))
            .c_str());
  if (a.ndim != req.ndim)
    raise_error(std::string(name) + ": expected a " + std::to_string(req.ndim) + "-D array, got " +
                std::to_string(a.ndim) + "-D");
  const bool on_device = req.device && mem.target == Target::Cuda;
  bool ok;
  if (on_device)
    ok = (a.device_type == kDLCUDA && a.device_id == mem.device_id) ||
         a.device_type == kDLCUDAManaged;
  else
    ok = a.device_type == kDLCPU || a.device_type == kDLCUDAHost;
  if (!ok) {
    const std::string want_mem =
        on_device ? device_name(kDLCUDA, mem.device_id) : std::string("host (cpu) memory");
    std::string why = on_device    ? " (the cuda builder's device arrays)"
                      : req.device ? " (the host builder takes every array in host memory)"
                                   : " (a host array of the step)";
    raise_error(std::string(name) + " must be in " + want_mem + why + ", got " +
                device_name(a.device_type, a.device_id));
  }
  if (req.ndim == 1) {
    if (a.shape[0] > 1 && a.strides[0] != 1)
      raise_error(std::string(name) + " must be contiguous (stride 1), got stride " +
                  std::to_string(a.strides[0]));
  } else {
    if (a.shape[1] > 1 && a.strides[1] != 1)
      raise_error(std::string(name) +
                  " must have contiguous rows (stride(1) == 1), got stride(1) = " +
                  std::to_string(a.strides[1]));
    if (a.shape[0] > 1 && a.strides[0] < a.shape[1])
      raise_error(std::string(name) + ": row stride " + std::to_string(a.strides[0]) +
                  " is smaller than the width " + std::to_string(a.shape[1]));
  }
}

nb::object export_array(const void* data, int32_t ndim, int64_t rows, int64_t cols,
                        nb::dlpack::dtype dtype, int32_t device_type, int32_t device_id,
                        nb::handle owner, ArrayType type) {
  const size_t shape[2] = {static_cast<size_t>(rows < 0 ? 0 : rows),
                           static_cast<size_t>(cols < 0 ? 0 : cols)};
  const bool torch_bool =
      type == ArrayType::Torch && dtype.code == static_cast<uint8_t>(dtype_code::Bool);
  // torch < 2.0 (Debian's 1.13) has no bool DLPack: bool arrays travel as uint8 and are
  // re-viewed as torch.bool (same element size; works on every torch version).
  const nb::dlpack::dtype wire =
      torch_bool ? nb::dlpack::dtype{static_cast<uint8_t>(dtype_code::UInt), 8, 1} : dtype;
  nb::ndarray<> nd(const_cast<void*>(data), static_cast<size_t>(ndim), shape, owner, nullptr, wire,
                   device_type, device_id);
  switch (type) {
    case ArrayType::Torch: {
      nb::object t = nb::cast(nb::ndarray<nb::pytorch>(nd), nb::rv_policy::reference);
      if (!torch_bool) return t;
      const TorchObjects* to = torch_objects();
      nb::object torch_bool_dtype =
          to != nullptr ? to->boolean : nb::module_::import_("torch").attr("bool");
      return t.attr("view")(torch_bool_dtype);
    }
    case ArrayType::Numpy:
      return nb::cast(nb::ndarray<nb::numpy>(nd), nb::rv_policy::reference);
    default:
      return nb::cast(nb::ndarray<nb::array_api>(nd), nb::rv_policy::reference);
  }
}

}  // namespace linmeta::py
