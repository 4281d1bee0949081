#include "arrays.hpp"

#include <cuda_runtime_api.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dlpack_exchange.hpp"
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

[[noreturn]] void raise_type(const std::string& message) {
  throw nb::type_error(("linmeta: " + message).c_str());
}

/// Parses an array-interface typestr ("<i4", "|b1", ...) into a DLPack dtype: a byte order
/// ('<', '|', '=', or '>' for one-byte items), a kind (i u f b c) and an item size of 1, 2, 4,
/// 8 or 16 bytes. Anything else raises TypeError naming `name`.
nb::dlpack::dtype parse_typestr(nb::handle typestr, const char* name, const char* which) {
  if (!PyUnicode_Check(typestr.ptr()))
    raise_type(std::string(name) + ": " + which + "['typestr'] must be a str, got " +
               obj_type_name(typestr));
  Py_ssize_t len = 0;
  const char* c = PyUnicode_AsUTF8AndSize(typestr.ptr(), &len);
  if (c == nullptr) throw nb::python_error();  // a str that is no UTF-8 (lone surrogates)
  const std::string s(c, static_cast<size_t>(len));
  auto unsupported = [&](const char* why) {
    std::string shown;  // control characters escaped (a NUL would end the message)
    for (const char ch : s) {
      if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) {
        char esc[8];
        std::snprintf(esc, sizeof esc, "\\x%02x",
                      static_cast<unsigned>(static_cast<unsigned char>(ch)));
        shown += esc;
      } else {
        shown += ch;
      }
    }
    raise_type(std::string(name) + ": unsupported typestr '" + shown + "' in " + which + " (" +
               why + ")");
  };
  if (s.size() < 3 || s.size() > 4) unsupported("expected e.g. '<i4' or '|b1'");
  const char order = s[0];
  const char kind = s[1];
  if (order != '<' && order != '>' && order != '|' && order != '=')
    unsupported("byte order must be '<', '>', '|' or '='");
  int64_t bytes = 0;
  for (size_t i = 2; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') unsupported("the item size must be a decimal number");
    bytes = bytes * 10 + (s[i] - '0');
  }
  if (bytes != 1 && bytes != 2 && bytes != 4 && bytes != 8 && bytes != 16)
    unsupported("item size must be 1, 2, 4, 8 or 16 bytes");
  if (order == '>' && bytes > 1) unsupported("big-endian data: x86-64 and aarch64 hosts read <");
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
      if (bytes != 1) unsupported("booleans are one byte");
      break;
    case 'c':
      dt.code = static_cast<uint8_t>(dtype_code::Complex);
      break;
    default:
      unsupported("kind must be i, u, f, b or c");
  }
  dt.bits = static_cast<uint8_t>(bytes * 8);  // at most 128
  dt.lanes = 1;
  return dt;
}

/// d[key], or a null object when absent (or None when `none_is_absent`).
nb::object dict_get(const nb::dict& d, const char* key, bool none_is_absent = true) {
  PyObject* v = PyDict_GetItemString(d.ptr(), key);  // borrowed; never raises for str keys
  if (v == nullptr || (none_is_absent && v == Py_None)) return {};
  return nb::borrow(v);
}

/// A Python int (or an object with __index__) as int64; TypeError naming `what` for other
/// objects, linmeta.Error when it does not fit.
int64_t interface_int(nb::handle v, const std::string& what) {
  if (PyBool_Check(v.ptr()) || !PyIndex_Check(v.ptr()))
    raise_type(what + " must be an int, got " + obj_type_name(v));
  nb::object i = nb::steal(PyNumber_Index(v.ptr()));
  if (!i.is_valid()) throw nb::python_error();
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (x == -1 && PyErr_Occurred()) throw nb::python_error();
  if (overflow != 0)
    raise_error(what + " = " + nb::cast<std::string>(nb::str(i)) + " does not fit in 64 bits");
  return x;
}

/// A shape or strides value (a tuple, or a list) as a tuple: its entries cannot change while
/// they are read (an entry's __index__ may run Python code).
nb::object interface_sequence(nb::handle v, const std::string& what) {
  if (PyTuple_Check(v.ptr())) return nb::borrow(v);
  if (!PyList_Check(v.ptr()))
    raise_type(what + " must be a tuple of ints, got " + obj_type_name(v));
  nb::object t = nb::steal(PyList_AsTuple(v.ptr()));
  if (!t.is_valid()) throw nb::python_error();
  return t;
}

cudaStream_t producer_stream(int64_t v) {
  if (v == 1) return cudaStreamLegacy;
  if (v == 2) return cudaStreamPerThread;
  return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(v));
}

void cuda_or_raise(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) raise_error(what + ": " + cudaGetErrorString(e));
}

/// __cuda_array_interface__ v3: work on `consumer` must follow the producer's stream
/// (`what`: the argument's interface, for errors). The handle itself cannot be checked: a
/// stream that does not exist is undefined behaviour in the CUDA runtime.
void order_after(int64_t producer, Stream consumer, const std::string& what) {
  const cudaStream_t p = producer_stream(producer);
  const auto c = reinterpret_cast<cudaStream_t>(consumer);
  if (p == c || (p == cudaStreamLegacy && c == nullptr)) return;
  cudaEvent_t ev = nullptr;
  cuda_or_raise(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), what + ": cudaEventCreate");
  const cudaError_t r1 = cudaEventRecord(ev, p);
  const cudaError_t r2 = r1 == cudaSuccess ? cudaStreamWaitEvent(c, ev, 0) : r1;
  cudaEventDestroy(ev);
  cuda_or_raise(r2, what + ": ordering the producer stream before the build's");
}

/// Imports an __array_interface__ / __cuda_array_interface__ dict (numpy's protocol, versions
/// 2 and 3; CUDA's, versions 0 to 3): every key is type-checked (TypeError) and every value
/// range-checked (linmeta.Error) before it is used; the view itself is checked by
/// check_view() as every import's.
ImportedArray from_interface(nb::handle obj, nb::handle iface, const char* name, bool cuda,
                             Stream consumer) {
  const std::string which = std::string(cuda ? "__cuda_array_interface__" : "__array_interface__");
  const std::string arg = std::string(name) + ": " + which;
  if (!PyDict_Check(iface.ptr())) raise_type(arg + " must be a dict, got " + obj_type_name(iface));
  const nb::dict d = nb::borrow<nb::dict>(iface);
  ImportedArray a;
  a.keep = nb::borrow(obj);
  if (const nb::object v = dict_get(d, "version", false); v.is_valid())
    (void)interface_int(v, arg + "['version']");  // any version: the keys below are checked
  const nb::object typestr = dict_get(d, "typestr", false);
  if (!typestr.is_valid()) raise_type(arg + " has no 'typestr'");
  a.dtype = parse_typestr(typestr, name, which.c_str());
  const int64_t itemsize = a.dtype.bits / 8;  // 1 to 16 (parse_typestr)

  const nb::object shape_obj = dict_get(d, "shape", false);
  if (!shape_obj.is_valid()) raise_type(arg + " has no 'shape'");
  const nb::object shape = interface_sequence(shape_obj, arg + "['shape']");
  const Py_ssize_t ndim = PyTuple_GET_SIZE(shape.ptr());
  if (ndim > 64) raise_error(arg + " has " + std::to_string(ndim) + " dimensions");
  a.ndim = static_cast<int32_t>(ndim);
  for (Py_ssize_t i = 0; i < ndim; ++i) {
    const std::string what = arg + "['shape'][" + std::to_string(i) + "]";
    const int64_t extent = interface_int(PyTuple_GET_ITEM(shape.ptr(), i), what);
    if (extent < 0) raise_error(what + " = " + std::to_string(extent) + " is negative");
    if (i < 2) a.shape[i] = extent;
  }

  if (dict_get(d, "mask").is_valid())
    raise_type(std::string(name) + ": masked arrays are not supported (" + which +
               "['mask'] is set)");

  const nb::object data = dict_get(d, "data");
  if (!data.is_valid() || !PyTuple_Check(data.ptr()) || PyTuple_GET_SIZE(data.ptr()) != 2)
    raise_type(arg + "['data'] must be a (pointer, read_only) tuple, got " +
               (data.is_valid() ? obj_type_name(data) : std::string("none")) +
               (data.is_valid() && PyTuple_Check(data.ptr())
                    ? " of " + std::to_string(PyTuple_GET_SIZE(data.ptr())) + " items"
                    : std::string()) +
               " (buffer-object data is not supported)");
  nb::handle ptr_obj = PyTuple_GET_ITEM(data.ptr(), 0);
  nb::handle read_only = PyTuple_GET_ITEM(data.ptr(), 1);
  if (!PyLong_Check(ptr_obj.ptr()) || PyBool_Check(ptr_obj.ptr()))
    raise_type(arg + "['data'][0] (the pointer) must be an int, got " + obj_type_name(ptr_obj));
  if (!PyLong_Check(read_only.ptr()))  // bool (or int) read-only flag; inputs are only read
    raise_type(arg + "['data'][1] (the read-only flag) must be a bool, got " +
               obj_type_name(read_only));
  const unsigned long long ptr = PyLong_AsUnsignedLongLong(ptr_obj.ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    raise_error(arg + "['data'][0] = " + nb::cast<std::string>(nb::str(ptr_obj)) +
                " is not a pointer (out of range)");
  }
  a.data = reinterpret_cast<const void*>(static_cast<uintptr_t>(ptr));

  if (const nb::object st = dict_get(d, "strides"); st.is_valid()) {
    const nb::object strides = interface_sequence(st, arg + "['strides']");
    const Py_ssize_t n = PyTuple_GET_SIZE(strides.ptr());
    if (n != ndim)
      raise_error(arg + "['strides'] has " + std::to_string(n) + " entries for " +
                  std::to_string(ndim) + " dimensions");
    for (Py_ssize_t i = 0; i < n && i < 2; ++i) {
      const std::string what = arg + "['strides'][" + std::to_string(i) + "]";
      const int64_t bytes = interface_int(PyTuple_GET_ITEM(strides.ptr(), i), what);
      if (bytes % itemsize != 0)
        raise_error(what + " = " + std::to_string(bytes) +
                    " bytes is not a multiple of the element size (" + std::to_string(itemsize) +
                    " bytes)");
      a.strides[i] = bytes / itemsize;
    }
  } else if (a.ndim == 2) {  // C-contiguous
    a.strides[0] = a.shape[1];
    a.strides[1] = 1;
  } else {
    a.strides[0] = 1;
  }
  a.present = true;
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
  if (const nb::object stream = dict_get(d, "stream"); stream.is_valid())
    order_after(interface_int(stream, arg + "['stream']"), consumer, arg + "['stream']");
  return a;
}

/// The most bytes one view may span (256 TiB): more than any host or device memory, and
/// than the 47- to 49-bit address spaces of x86-64, aarch64 and CUDA's unified addressing.
constexpr int64_t kMaxSpanBytes = int64_t{1} << 48;

std::string hex(uintptr_t p) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(p));
  return buf;
}

/// Checks that an imported view describes memory a reader can address: non-negative extents,
/// and for a non-empty array of at most two dimensions (nothing reads others: every use
/// checks the dimensionality) a data pointer past the null page, aligned to its elements,
/// whose elements' byte offsets (shape, strides and item size, overflow-checked 64-bit
/// arithmetic) neither wrap around the address space nor span more than kMaxSpanBytes. Raises
/// linmeta.Error naming `name`. What is at those addresses cannot be checked: the producer vouches
/// for it.
void check_view(const ImportedArray& a, const char* name) {
  if (a.ndim < 0) raise_error(std::string(name) + ": ndim = " + std::to_string(a.ndim));
  const int32_t nd = a.ndim < 2 ? a.ndim : 2;
  bool empty = false;
  for (int32_t i = 0; i < nd; ++i) {
    if (a.shape[i] < 0)
      raise_error(std::string(name) + ": shape[" + std::to_string(i) +
                  "] = " + std::to_string(a.shape[i]) + " is negative");
    empty = empty || a.shape[i] == 0;
  }
  if (empty || a.ndim > 2) return;
  const auto p = reinterpret_cast<uintptr_t>(a.data);
  if (p == 0)
    raise_error(std::string(name) +
                ": the array has no memory (a null data pointer, e.g. a torch 'meta' tensor)");
  if (p < 4096)
    raise_error(std::string(name) + ": data pointer " + hex(p) +
                " is in the null page (no memory there)");
  const int64_t bits = int64_t{a.dtype.bits} * int64_t{a.dtype.lanes};
  const int64_t itemsize = bits > 0 ? (bits + 7) / 8 : 1;
  if ((itemsize & (itemsize - 1)) == 0 && itemsize <= 16 &&
      p % static_cast<uintptr_t>(itemsize) != 0)
    raise_error(std::string(name) + ": data pointer " + hex(p) + " is not aligned to its " +
                std::to_string(itemsize) + "-byte elements");
  // Byte offsets of the first and one past the last element, relative to the pointer.
  int64_t lo = 0;
  int64_t hi = itemsize;
  bool ok = true;
  for (int32_t i = 0; i < nd && ok; ++i) {
    int64_t span = 0;
    ok = !__builtin_mul_overflow(a.shape[i] - 1, a.strides[i], &span) &&
         !__builtin_mul_overflow(span, itemsize, &span) &&
         !__builtin_add_overflow(span > 0 ? hi : lo, span, span > 0 ? &hi : &lo);
  }
  ok = ok && (lo == 0 || static_cast<uint64_t>(-(lo + 1)) < p) &&  // p + lo >= 0 (lo <= 0)
       static_cast<uint64_t>(hi) <= UINTPTR_MAX - p &&             // p + hi does not wrap
       hi - lo <= kMaxSpanBytes;
  if (!ok) {
    std::string dims;
    for (int32_t i = 0; i < nd; ++i)
      dims += (i > 0 ? ", " : "") + std::to_string(a.shape[i]) + " (stride " +
              std::to_string(a.strides[i]) + ")";
    raise_error(std::string(name) + ": shape [" + dims + "] of " + std::to_string(itemsize) +
                "-byte elements at " + hex(p) + " spans more than 2^48 bytes (no memory is that " +
                "large)");
  }
}

/// torch's Tensor type and dtype objects, looked up once torch has been imported
/// by someone (linmeta never imports torch to read an input).
struct TorchObjects {
  PyTypeObject* tensor = nullptr;
  nb::object int32, int64, boolean, uint8, int8, int16;
  nb::object s_dtype, s_shape, s_stride, s_data_ptr, s_get_device, s_is_cpu, s_is_cuda, s_device;
  nb::object s_is_neg, s_is_nested, s_to, s_detach;
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
  t->s_dtype = interned("dtype");
  t->s_shape = interned("shape");
  t->s_stride = interned("stride");
  t->s_data_ptr = interned("data_ptr");
  t->s_get_device = interned("get_device");
  t->s_is_cpu = interned("is_cpu");
  t->s_is_cuda = interned("is_cuda");
  t->s_device = interned("device");
  t->s_is_neg = interned("is_neg");
  t->s_is_nested = interned("is_nested");
  t->s_to = interned("to");
  t->s_detach = interned("detach");
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

/// Whether torch tensor `obj` is on device type `type` ("cpu", "cuda"): its property
/// `prop` (is_cpu, is_cuda), or where a torch has no such property, tensor.device.type.
bool torch_on(nb::handle obj, nb::handle prop, const char* type) {
  nb::object v = nb::steal(PyObject_GetAttr(obj.ptr(), prop.ptr()));
  if (v.is_valid()) return v.ptr() == Py_True;
  PyErr_Clear();
  nb::object dev = nb::steal(PyObject_GetAttrString(obj.ptr(), "device"));
  nb::object kind = dev.is_valid() ? nb::steal(PyObject_GetAttrString(dev.ptr(), "type")) : dev;
  if (!kind.is_valid()) throw nb::python_error();
  return PyUnicode_Check(kind.ptr()) && PyUnicode_CompareWithASCIIString(kind.ptr(), type) == 0;
}

/// Refuses a torch tensor whose negative bit is set (a lazy negation such as torch._neg_view:
/// its memory holds the values negated, which a pointer read would take as they are). The
/// conjugate bit needs a complex dtype, which every input refuses by its dtype.
void refuse_negative_bit(nb::handle obj, const char* name) {
  const TorchObjects* t = torch_objects();
  if (t == nullptr || !PyObject_TypeCheck(obj.ptr(), t->tensor)) return;
  const nb::object neg = call0_or_null(obj, t->s_is_neg);  // torch < 1.10: no negative bit
  if (neg.ptr() == Py_True)
    raise_error(std::string(name) +
                ": a torch tensor with the negative bit set (a lazy negation: its memory holds "
                "the values negated); pass tensor.resolve_neg()");
}

/// The fast path for plain torch.Tensor inputs: pointer, shape, strides, dtype and device
/// read from the tensor itself (no DLPack capsule per input). Returns false for anything
/// else (subclasses, non-strided layouts, other dtypes), which takes the generic path. A
/// tensor on a device other than the CPU or CUDA (meta, ...) raises linmeta.Error.
bool import_torch_tensor(nb::handle obj, ImportedArray& a, const char* name) {
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
  // A nested tensor has no shape (torch < 2) or no strides: refused by name.
  auto refuse_nested = [&] {
    nb::object nested = nb::steal(PyObject_GetAttr(obj.ptr(), t->s_is_nested.ptr()));
    if (!nested.is_valid()) PyErr_Clear();
    if (nested.ptr() == Py_True) {
      PyErr_Clear();
      raise_type(std::string(name) +
                 ": a nested torch tensor (torch.nested) has no strided memory; pass a strided "
                 "tensor");
    }
  };
  nb::object shape = nb::steal(PyObject_GetAttr(obj.ptr(), t->s_shape.ptr()));
  if (!shape.is_valid()) {
    nb::python_error e;  // fetched: the nested test runs Python code
    refuse_nested();
    throw e;
  }
  // Tensors of other layouts (sparse, mkldnn) have no strides or no data pointer: stride() or
  // data_ptr() raises, and the generic path names what is wrong.
  nb::object stride = call0_or_null(obj, t->s_stride);
  if (!stride.is_valid()) {
    refuse_nested();
    return false;
  }
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
  // get_device() is -1 for the CPU but also for devices without an index (meta: no memory at
  // all), and an index for any indexed device: the device type says which memory it is.
  if (device < 0 ? !torch_on(obj, t->s_is_cpu, "cpu") : !torch_on(obj, t->s_is_cuda, "cuda")) {
    nb::object where = nb::steal(PyObject_GetAttr(obj.ptr(), t->s_device.ptr()));
    if (!where.is_valid()) throw nb::python_error();
    raise_error(std::string(name) +
                " must be in host (cpu) or CUDA memory, got a torch tensor on " + "device '" +
                nb::cast<std::string>(nb::str(where)) + "'" +
                (device < 0 && p == 0 ? " (no memory)" : ""));
  }
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
  if (dt.lanes != 1) {  // appended: GCC 12's -Wrestrict misfires on "x" + std::string at -O3
    out += 'x';
    out += std::to_string(dt.lanes);
  }
  return out;
}

void import_array_into(ImportedArray& a, nb::handle obj, const char* name, Stream consumer) {
  if (!obj.is_valid() || obj.is_none()) return;
  if (import_exchange(obj, a) || import_torch_tensor(obj, a, name)) {
    refuse_negative_bit(obj, name);
    check_view(a, name);
    return;
  }
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
    check_view(a, name);
    return;
  }
  PyErr_Clear();
  std::string why;
  try {
    if (nb::hasattr(obj, "__cuda_array_interface__")) {
      a = from_interface(obj, obj.attr("__cuda_array_interface__"), name, true, consumer);
      check_view(a, name);
      return;
    }
    if (nb::hasattr(obj, "__array_interface__")) {
      a = from_interface(obj, obj.attr("__array_interface__"), name, false, consumer);
      check_view(a, name);
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

nb::object int32_copy_of_int64(nb::handle obj) {
  const TorchObjects* t = torch_objects();
  if (t == nullptr || !obj.is_valid() || !PyObject_TypeCheck(obj.ptr(), t->tensor)) return {};
  nb::object dt = nb::steal(PyObject_GetAttr(obj.ptr(), t->s_dtype.ptr()));
  if (!dt.is_valid()) throw nb::python_error();
  if (!dt.is(t->int64)) return {};
  PyObject* args[2] = {obj.ptr(), t->int32.ptr()};
  PyObject* r =
      PyObject_VectorcallMethod(t->s_to.ptr(), args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
  if (r == nullptr) throw nb::python_error();
  return nb::steal(r);
}

nb::object fresh_view(nb::handle view, ArrayType type) {
  if (type == ArrayType::DLPack) return nb::borrow(view);          // no in-place view operations
  static const nb::handle view_name = interned("view").release();  // never released
  const TorchObjects* t = type == ArrayType::Torch ? torch_objects() : nullptr;
  const nb::handle method = t != nullptr ? nb::handle(t->s_detach) : nb::handle(view_name);
  PyObject* args[1] = {view.ptr()};
  PyObject* r =
      PyObject_VectorcallMethod(method.ptr(), args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
  if (r == nullptr) throw nb::python_error();
  return nb::steal(r);
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
