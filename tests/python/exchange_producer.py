"""An array producer that publishes the DLPack C exchange API (dlpack.h 1.3,
``__dlpack_c_exchange_api__``), built with ctypes over numpy arrays: the import path torch >=
2.11's tensors take (python/src/binding/dlpack_exchange.hpp), tested without such a torch.

``producer_class(...)`` makes a class whose instances wrap a numpy array and describe it only
through the exchange table (no ``__dlpack__``, buffer protocol or array interface): what
linmeta reads of one is what the table's ``dltensor_from_py_object_no_sync`` wrote."""

from __future__ import annotations

import ctypes

import numpy as np


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class Header(ctypes.Structure):
    pass


Header._fields_ = [("version", DLPackVersion), ("prev_api", ctypes.POINTER(Header))]

FROM_PY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(DLTensor))
STREAM = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32,
                          ctypes.POINTER(ctypes.c_void_p))


class ExchangeAPI(ctypes.Structure):
    _fields_ = [("header", Header), ("managed_tensor_allocator", ctypes.c_void_p),
                ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
                ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
                ("dltensor_from_py_object_no_sync", FROM_PY),
                ("current_work_stream", STREAM)]


_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}  # DLDataTypeCode: int, uint, float, bool
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_KEEP = []  # the tables and their callbacks live as long as the process (dlpack.h)


def producer_class(name="ExchangeArray", major=1, strides=True, byte_offset=0, fail=False,
                   capsule_name=b"dlpack_exchange_api"):
    """A producer class. `major`: the table's DLPack major version; `strides`: False leaves
    DLTensor.strides null (a compact array); `byte_offset`: the data pointer moved back by
    that many bytes and byte_offset set (the same elements); `fail`: the export fails (-1);
    `capsule_name`: the capsule's name."""

    def from_py(obj, out):
        if fail:  # (a ctypes callback cannot leave a Python error set: only the -1)
            return -1
        a = obj.array
        t = out.contents
        t.data = a.__array_interface__["data"][0] - byte_offset if a.size else None
        t.device = DLDevice(1, 0)  # kDLCPU
        t.ndim = a.ndim
        t.dtype = DLDataType(_CODES[a.dtype.kind], a.dtype.itemsize * 8, 1)
        obj.shape_c = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
        obj.strides_c = (ctypes.c_int64 * max(a.ndim, 1))(*(s // a.itemsize for s in a.strides))
        t.shape = ctypes.cast(obj.shape_c, ctypes.POINTER(ctypes.c_int64))
        t.strides = (ctypes.cast(obj.strides_c, ctypes.POINTER(ctypes.c_int64)) if strides
                     else None)
        t.byte_offset = byte_offset
        return 0

    def stream(device_type, device_id, out):
        out[0] = None
        return 0

    api = ExchangeAPI()
    api.header.version = DLPackVersion(major, 3)
    api.dltensor_from_py_object_no_sync = FROM_PY(from_py)
    api.current_work_stream = STREAM(stream)
    _KEEP.append(api)
    capsule = _capsule_new(ctypes.addressof(api), capsule_name, None)

    def init(self, array):
        self.array = np.asarray(array)

    return type(name, (), {"__init__": init, "__dlpack_c_exchange_api__": capsule})
