// Input import through the DLPack C exchange API (dlpack.h 1.3, `DLPackExchangeAPI`): a
// producer type publishes a table of C functions as the PyCapsule "dlpack_exchange_api" in
// its `__dlpack_c_exchange_api__` attribute (torch.Tensor from torch 2.10 on), and a consumer
// reads an object's pointer, shape, strides, dtype and device with one C call, without a
// Python call or a capsule per array. The fastest of the import paths of arrays.hpp, taken
// first for every object whose type publishes the table. The same table names the
// producer's current work stream (torch: torch.cuda.current_stream()), the stream a consumer
// launches on.
#pragma once

#include <nanobind/nanobind.h>

#include "arrays.hpp"

namespace linmeta::py {

/// Imports `obj` into `a` (a default-constructed ImportedArray) through its type's DLPack C
/// exchange API. Returns false, with no Python error set, when the type publishes none (or
/// one of another major version, or without the non-owning export this needs) or when the
/// producer cannot describe `obj` (the other imports then fill `a`, or name what is wrong).
bool import_exchange(nb::handle obj, ImportedArray& a);

/// The current work stream on CUDA device `device_id` of the producer of `obj` (its type's
/// DLPack C exchange API; torch: torch.cuda.current_stream(device_id), the legacy default
/// stream being null). Returns false where the type publishes no such API; a producer that
/// fails raises its Python error.
bool producer_stream(nb::handle obj, int32_t device_id, Stream& out);

}  // namespace linmeta::py
