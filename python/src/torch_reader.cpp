// linmeta._torch_reader: reads torch tensors from their at::Tensor, for linmeta._linmeta's
// input imports (python/src/arrays.cpp), reads torch's current CUDA stream, and makes the
// vLLM adapter's conv1d host lists as new CPU tensors. Built only against a torch found at
// build time (python/CMakeLists.txt); the module records that torch's version
// (torch.__version__ of the build), and the main module uses it only when the running torch
// has the very same version: at::Tensor's layout is not a stable ABI.
#include "torch_reader.hpp"

#include <ATen/EmptyTensor.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/version.h>

#include <cstring>

#include "conv_lists.hpp"

#ifdef LINMETA_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#ifndef LINMETA_TORCH_VERSION
#error "LINMETA_TORCH_VERSION (torch.__version__ at build time) must be defined"
#endif

namespace {

using linmeta::py::TorchTensorInfo;

/// The dtypes an input can have, as DLPack codes (0 int, 1 uint, 6 bool) and bits; others
/// (floats etc.) take the generic path, which names the dtype in its error.
struct DtypeRow {
  c10::ScalarType type;
  uint8_t code, bits;
};
constexpr DtypeRow kDtypes[] = {
    {c10::ScalarType::Int, 0, 32}, {c10::ScalarType::Long, 0, 64}, {c10::ScalarType::Short, 0, 16},
    {c10::ScalarType::Char, 0, 8}, {c10::ScalarType::Byte, 1, 8},  {c10::ScalarType::Bool, 6, 8},
};

bool dlpack_dtype(c10::ScalarType t, TorchTensorInfo* out) {
  for (const DtypeRow& row : kDtypes)
    if (row.type == t) {
      out->code = row.code;
      out->bits = row.bits;
      return true;
    }
  return false;
}

int read_tensor(PyObject* obj, TorchTensorInfo* out) {
  try {
    // Subclasses may have other semantics (and wrapper subclasses no storage): generic path.
    if (!THPVariable_CheckExact(obj)) return 0;
    const at::Tensor& t = THPVariable_Unpack(obj);
    if (!t.defined() || t.layout() != c10::kStrided || !t.has_storage() || t.is_neg() ||
        t.is_conj())
      return 0;
    const c10::Device dev = t.device();
    if (dev.is_cpu()) {
      out->device_type = 1;
      out->device_id = 0;
    } else if (dev.is_cuda()) {
      out->device_type = 2;
      out->device_id = dev.index();
    } else {
      return 0;
    }
    if (!dlpack_dtype(t.scalar_type(), out)) return 0;
    const int64_t nd = t.dim();
    out->ndim = static_cast<int32_t>(nd);
    const c10::IntArrayRef sizes = t.sizes();
    const c10::IntArrayRef strides = t.strides();
    out->shape[0] = out->shape[1] = 0;
    out->strides[0] = out->strides[1] = 0;
    for (int64_t i = 0; i < nd && i < 2; ++i) {
      out->shape[i] = sizes[static_cast<size_t>(i)];
      out->strides[i] = strides[static_cast<size_t>(i)];
    }
    // What torch.Tensor.data_ptr() returns (linmeta only reads inputs).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
    out->data = t.const_data_ptr();
#else
    out->data = t.data_ptr();
#endif
    return 1;
  } catch (...) {
    return 0;
  }
}

/// A new contiguous CPU tensor (what torch.empty makes, without the Python argument parsing
/// and the dispatcher).
at::Tensor empty_host(int64_t n, c10::ScalarType type) {
  return at::Tensor(at::detail::empty_cpu({n}, type, /*pin_memory=*/false, c10::nullopt));
}

PyObject* conv_lists(const int32_t* nums, int64_t n) {
  try {
    const int64_t tot = linmeta::py::conv_programs(nums, n);
    at::Tensor nums_copy = empty_host(n, c10::ScalarType::Int);
    at::Tensor mlist = empty_host(tot, c10::ScalarType::Long);
    at::Tensor offsetlist = empty_host(tot, c10::ScalarType::Int);
    if (n > 0) std::memcpy(nums_copy.data_ptr(), nums, static_cast<size_t>(n) * sizeof(int32_t));
    linmeta::py::write_conv_lists(nums, n, static_cast<int64_t*>(mlist.data_ptr()),
                                  static_cast<int32_t*>(offsetlist.data_ptr()));
    PyObject* out = PyTuple_New(3);
    if (out == nullptr) return nullptr;
    at::Tensor* parts[3] = {&nums_copy, &mlist, &offsetlist};
    for (Py_ssize_t i = 0; i < 3; ++i) {
      PyObject* t = THPVariable_Wrap(std::move(*parts[i]));
      if (t == nullptr) {
        Py_DECREF(out);
        return nullptr;
      }
      PyTuple_SET_ITEM(out, i, t);
    }
    return out;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

#ifdef LINMETA_TORCH_CUDA
int current_stream(int32_t device, uintptr_t* out) {
  try {
    const auto index = static_cast<c10::DeviceIndex>(device);
    *out = reinterpret_cast<uintptr_t>(c10::cuda::getCurrentCUDAStream(index).stream());
    return 1;
  } catch (...) {
    return 0;
  }
}
#endif

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "linmeta._torch_reader",
    "Reads torch tensors for linmeta's input imports, makes vLLM's conv1d host lists (internal).",
    -1,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr};

/// Adds `fn` to module `m` as a capsule named `capsule`, attribute `name`; false (the module
/// released, the Python error set) when that fails.
bool add_capsule(PyObject* m, const char* name, void* fn, const char* capsule) {
  PyObject* cap = PyCapsule_New(fn, capsule, nullptr);
  if (cap != nullptr && PyModule_AddObject(m, name, cap) == 0) return true;
  Py_XDECREF(cap);
  Py_DECREF(m);
  return false;
}

}  // namespace

PyMODINIT_FUNC PyInit__torch_reader() {
  PyObject* m = PyModule_Create(&module_def);
  if (m == nullptr) return nullptr;
  if (PyModule_AddStringConstant(m, "torch_version", LINMETA_TORCH_VERSION) != 0) {
    Py_DECREF(m);
    return nullptr;
  }
  if (!add_capsule(m, "read", reinterpret_cast<void*>(&read_tensor),
                   linmeta::py::kTorchReaderCapsule) ||
      !add_capsule(m, "conv_lists", reinterpret_cast<void*>(&conv_lists),
                   linmeta::py::kTorchConvListsCapsule))
    return nullptr;
#ifdef LINMETA_TORCH_CUDA
  if (!add_capsule(m, "current_stream", reinterpret_cast<void*>(&current_stream),
                   linmeta::py::kTorchStreamCapsule))
    return nullptr;
#endif
  return m;
}
