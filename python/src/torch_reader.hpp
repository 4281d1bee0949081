// The C interface between linmeta._linmeta and the optional module linmeta._torch_reader,
// which reads a torch.Tensor's pointer, shape, strides, dtype and device straight from its
// at::Tensor (compiled against the torch it was built with; python/CMakeLists.txt). This
// header includes no torch: the main module stays independent of torch's headers and ABI.
#pragma once

#include <Python.h>

#include <cstdint>

namespace linmeta::py {

/// What the reader fills for a plain strided torch.Tensor.
struct TorchTensorInfo {
  const void* data;  ///< data_ptr(): storage data + storage offset
  int32_t ndim;      ///< dim(); shape / strides hold the first two
  int64_t shape[2];
  int64_t strides[2];  ///< in elements
  uint8_t code;        ///< DLPack dtype code (0 int, 1 uint, 6 bool)
  uint8_t bits;
  int32_t device_type;  ///< DLPack device type: 1 CPU, 2 CUDA
  int32_t device_id;
};

/// Returns 1 when `obj` is a plain torch.Tensor (exactly torch.Tensor or nn.Parameter) with
/// storage, strided layout, an integer or bool dtype and a CPU or CUDA device, and fills
/// `out`; 0 for anything else (the caller takes the generic path, which names what is wrong).
/// Never raises; needs the GIL.
using TorchReadFn = int (*)(PyObject* obj, TorchTensorInfo* out);

/// The name of the PyCapsule holding the TorchReadFn (attribute "read" of the module); a
/// new layout of TorchTensorInfo gets a new name.
inline constexpr const char* kTorchReaderCapsule = "linmeta._torch_reader.read_v1";

/// Returns 1 and torch's current CUDA stream of `device` (what
/// torch.cuda.current_stream(device).cuda_stream returns) in `out`, 0 when it cannot. Only in
/// modules built against a CUDA build of torch (attribute "current_stream").
using TorchStreamFn = int (*)(int32_t device, uintptr_t* out);
inline constexpr const char* kTorchStreamCapsule = "linmeta._torch_reader.current_stream_v1";

/// vLLM's causal-conv1d host lists as new CPU torch tensors, as its
/// compute_causal_conv1d_metadata makes them: (nums int32 [n], a copy of `nums`; mlist int64
/// and offsetlist int32 [sum of the non-negative counts], conv_lists.hpp). Returns a new
/// 3-tuple, or null with the Python error set. Needs the GIL (attribute "conv_lists").
using TorchConvListsFn = PyObject* (*)(const int32_t* nums, int64_t n);
inline constexpr const char* kTorchConvListsCapsule = "linmeta._torch_reader.conv_lists_v1";

}  // namespace linmeta::py
