"""Hostile inputs for every Python entry point of linmeta, and the worker that runs them.

Each case is one call that must raise TypeError or ValueError (linmeta.Error is a ValueError)
whose message names the argument (`match`, a regular expression), or, for odd but valid
inputs, must succeed. Cases are grouped by entry point and argument ("gdn.build:seq_lens");
tests/python/test_hostile_inputs.py asserts every group's outcomes.

A crash must fail the run, not end it: run as a script (``python hostile_cases.py START``)
this module is a worker that runs CASES[START:] in order, printing a JSON line before and
after each one, with faulthandler on. The test runs workers in subprocesses; when one dies
(a signal), the case it had started is recorded as a crash and a new worker goes on with the
next case.

Entry points: GdnMetadataBuilder / KdaMetadataBuilder .build, .build_for_cudagraph_capture,
.build_groups, .build_groups_for_cudagraph_capture, .update_block_table and the
constructors' keyword arguments; linmeta.vllm's GDN, KDA and KDA+RecoverSSM builders' build,
build_for_cudagraph_capture and update_block_table through the stand-in vLLM of
the seed oracle (vllm_oracle_util.ORACLE_DIR; skipped when it is not there). Inputs: torch meta / sparse / strided /
expanded / 0-d / 2-D tensors and wrong dtypes, the same as numpy arrays (also big-endian,
structured, object, datetime, unaligned), Python objects that are no arrays, objects with odd
__array_interface__ / __cuda_array_interface__ dicts (every key missing or of a wrong type,
typestr garbage, item sizes 0 and 32, null / unaligned / out-of-range pointers, strides
shorter or longer than the shape, shapes near 2^62 and 2^63, negative strides, masks), raw
DLPack capsules made with ctypes (null data, negative or huge shapes, other dtypes and
devices, unaligned data, wrong capsule names, a capsule used twice), and odd scalars and
streams.
"""

from __future__ import annotations

import ctypes
import faulthandler
import json
import os
import sys
import tempfile
import traceback

import numpy as np

try:
    import torch
except ImportError:  # numpy-only environments: the torch variants are left out
    torch = None

import linmeta

HERE = os.path.dirname(os.path.abspath(__file__))
I32 = np.int32

RAISE = "raise"  # the call must raise TypeError / ValueError matching the case's pattern
OK = "ok"  # the call must succeed
ANY = "any"  # either (a platform-dependent outcome), as long as nothing crashes


class Case:
    __slots__ = ("group", "name", "run", "expect", "match")

    def __init__(self, group, name, run, expect, match):
        self.group, self.name, self.run, self.expect, self.match = group, name, run, expect, match

    @property
    def id(self):
        return f"{self.group}/{self.name}"


# ------------------------------------------------------------------------ odd array objects


class Iface:
    """An object with the given __array_interface__ (or __cuda_array_interface__) value; it
    holds `keep` (the memory its pointer points at) alive."""

    def __init__(self, value, keep=None, cuda=False):
        self._keep = keep
        if cuda:
            self.__cuda_array_interface__ = value
        else:
            self.__array_interface__ = value


class RaisingIface:
    @property
    def __array_interface__(self):
        raise RuntimeError("no interface today")


class BadIndex:
    def __index__(self):
        raise RuntimeError("no index today")


class DlpackReturning:
    """An object whose __dlpack__ returns `value` (or raises it when it is an exception)."""

    def __init__(self, value):
        self.value = value

    def __dlpack__(self, *args, **kwargs):
        if isinstance(self.value, BaseException):
            raise self.value
        return self.value

    def __dlpack_device__(self):
        return (1, 0)


class StreamLike:
    def __init__(self, value):
        self.cuda_stream = value


def iface(valid, **over):
    """An Iface over numpy array `valid`'s memory with keys of its interface replaced (a value
    of `DROP` removes the key)."""
    d = dict(valid.__array_interface__)
    d.setdefault("strides", None)
    for k, v in over.items():
        if v is DROP:
            d.pop(k, None)
        else:
            d[k] = v
    return Iface(d, keep=valid)


DROP = object()


def _ptr(valid):
    return valid.__array_interface__["data"][0]


# ------------------------------------------------------------------------- DLPack capsules


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_KEEP = []  # the capsules' memory: never freed (the capsules have no deleter)


def capsule(valid, *, data=None, shape=None, strides=None, ndim=None, code=0, bits=32,
            lanes=1, device=(1, 0), byte_offset=0, name=b"dltensor", versioned=False,
            read_only=False):
    """A raw DLPack capsule over numpy array `valid` (its data, shape and C-contiguous
    strides unless given; strides=False: none)."""
    shape = list(valid.shape) if shape is None else list(shape)
    ndim = len(shape) if ndim is None else ndim
    shape_arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    if strides is False:
        strides_arr = None
    else:
        strides = [s // valid.itemsize for s in valid.strides] if strides is None else strides
        strides_arr = (ctypes.c_int64 * max(len(strides), 1))(*strides)
    t = DLTensor()
    t.data = _ptr(valid) if data is None else data
    t.device = DLDevice(*device)
    t.ndim = ndim
    t.dtype = DLDataType(code, bits, lanes)
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    t.strides = (
        ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64)) if strides_arr is not None else None
    )
    t.byte_offset = byte_offset
    if versioned:
        mt = DLManagedTensorVersioned(1, 0, None, None, 1 if read_only else 0, t)
        name = b"dltensor_versioned" if name == b"dltensor" else name
    else:
        mt = DLManagedTensor(t, None, None)
    _KEEP.append((valid, shape_arr, strides_arr, mt, name))
    return _PyCapsule_New(ctypes.addressof(mt), name, None)


def _used_capsule(valid):
    c = capsule(valid)
    try:
        linmeta._linmeta._import_info(c)  # consumes it (renamed "used_dltensor")
    except Exception:  # noqa: BLE001 - then it is a plain bad capsule, as intended
        pass
    return c


# -------------------------------------------------------------------------- array variants

_DLPACK_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}


def array_variants(kind, required):
    """(label, make, expect) for an array argument of kind "i32" (1-D int32), "bool" (1-D
    bool) or "table" (2-D int32). make(v) makes the input from `v`, a fresh numpy array the
    argument accepts (the labels depend on the kind only: the parent process lists the cases
    without making any input)."""
    out = []

    def add(label, make, expect=RAISE):
        out.append((label, make, expect))

    item = 1 if kind == "bool" else 4
    two_d = kind == "table"
    wrong_np = ["float32", "float64", "uint8", "int16", "int64", "complex128"]
    wrong_np.append("int32" if kind == "bool" else "bool")
    for dt in wrong_np:
        add(f"numpy-{dt}", lambda v, dt=dt: v.astype(dt))
    add("numpy-big-endian", lambda v: v.astype(v.dtype.newbyteorder(">")),
        RAISE if item > 1 else OK)
    add("numpy-structured", lambda v: np.zeros(v.shape, dtype=[("a", v.dtype)]))
    add("numpy-object", lambda v: v.astype(object))
    add("numpy-datetime", lambda v: np.zeros(v.shape, dtype="M8[s]"))
    add("numpy-0d", lambda v: np.array(v.flat[0]))
    add("numpy-3d", lambda v: v.reshape(v.shape + (1,) * (3 - v.ndim)))
    add("numpy-read-only", _read_only, OK)
    add("numpy-memoryview", lambda v: memoryview(v), OK)
    if two_d:
        add("numpy-column-strided", lambda v: np.repeat(v, 2, axis=1)[:, ::2])
        add("numpy-transposed", lambda v: np.ascontiguousarray(v.T).T)
        add("numpy-rows-reversed", lambda v: v[::-1])
        add("numpy-1d", lambda v: v[0].copy())
        add("numpy-too-few-rows", lambda v: v[:1].copy())
        add("numpy-zero-width", lambda v: v[:, :0], ANY)
        add("numpy-row-stride-0",
            lambda v: np.lib.stride_tricks.as_strided(v, strides=(0, v.itemsize)))
    else:
        add("numpy-strided", lambda v: np.repeat(v, 2)[::2])
        add("numpy-reversed", lambda v: v[::-1].copy()[::-1])
        add("numpy-stride-0", lambda v: np.lib.stride_tricks.as_strided(v, strides=(0,)))
        add("numpy-2d", lambda v: v.reshape(-1, 1))
        add("numpy-too-long", lambda v: np.concatenate([v, v[:1]]))
        add("numpy-too-short", lambda v: v[:-1].copy())
        add("numpy-empty", lambda v: v[:0].copy())
    if item > 1:
        add("numpy-unaligned", _unaligned)
    else:  # a uint8 array viewed as bool: byte 2 is no bool readers agree on
        add("numpy-bool-byte-2", lambda v: _odd_bool_bytes(v.view(np.uint8)).view(np.bool_))
    if torch is not None:
        add_torch_variants(add, kind)
    # Python objects that are no arrays (or arrays of bytes).
    # None: an optional argument left out (which some steps need: e.g. num_accepted_tokens
    # with spec rows, is_prefilling for KDA RecoverSSM).
    add("none", lambda v: None, RAISE if required else ANY)
    add("list", lambda v: v.tolist())
    add("int", lambda v: 5)
    add("float", lambda v: 1.5)
    add("str", lambda v: "abc")
    add("bytes", lambda v: v.tobytes() if item > 1 else b"\x00" * 7)
    add("object", lambda v: object())
    add("raising-interface", lambda v: RaisingIface())
    add_interface_variants(add, kind)
    add_dlpack_variants(add, kind)
    return out


def _read_only(v):
    v = v.copy()
    v.flags.writeable = False
    return v


def _unaligned(v):
    raw = np.zeros(v.nbytes + v.itemsize, dtype=np.uint8)
    out = np.frombuffer(raw.data, dtype=v.dtype, count=v.size, offset=1).reshape(v.shape)
    out[...] = v
    return out


def add_torch_variants(add, kind):
    def t(v):
        return torch.from_numpy(v.copy())

    add("torch-ok", t, OK)
    add("torch-meta", lambda v: torch.empty(v.shape, dtype=t(v).dtype, device="meta"))
    add("torch-meta-int64", lambda v: torch.empty(v.shape, dtype=torch.int64, device="meta"))
    add("torch-meta-0d", lambda v: torch.empty((), dtype=t(v).dtype, device="meta"))
    add("torch-meta-empty",
        lambda v: torch.empty((0,) * v.ndim, dtype=t(v).dtype, device="meta"))
    add("torch-meta-float", lambda v: torch.empty(v.shape, device="meta"))
    add("torch-sparse", lambda v: t(v).to_sparse())
    if kind != "bool":
        add("torch-sparse-float", lambda v: t(v).float().to_sparse())
    add("torch-0d", lambda v: t(v).reshape(-1)[0].clone())
    add("torch-3d", lambda v: t(v).reshape(v.shape + (1,) * (3 - v.ndim)))
    wrong = [torch.float32, torch.float64, torch.float16, torch.uint8, torch.int8, torch.int16,
             torch.int64, torch.complex64]
    wrong.append(torch.int32 if kind == "bool" else torch.bool)
    for dt in wrong:
        add(f"torch-{str(dt).split('.')[-1]}", lambda v, dt=dt: t(v).to(dt))
    add("torch-requires-grad-float", lambda v: t(v).float().requires_grad_())
    # Subclasses (and Parameters without the reader) take DLPack: no bool before torch 2.0.
    add("torch-parameter", lambda v: torch.nn.Parameter(t(v), requires_grad=False),
        OK if kind != "bool" else ANY)
    add("torch-subclass", lambda v: t(v).as_subclass(_TensorSub), OK if kind != "bool" else ANY)
    if kind == "table":
        add("torch-column-strided", lambda v: t(v).repeat_interleave(2, dim=1)[:, ::2])
        add("torch-transposed", lambda v: t(v).t().contiguous().t())
        add("torch-expanded-rows", lambda v: t(v)[:1].expand(v.shape[0], -1))
    else:
        add("torch-strided", lambda v: t(v).repeat_interleave(2)[::2])
        add("torch-expanded", lambda v: t(v)[:1].expand(v.shape[0]))
        add("torch-2d", lambda v: t(v).reshape(-1, 1))
    add("torch-storage-offset", lambda v: torch.cat([t(v)[:1], t(v)])[1:], OK)
    # Raw memory that is not the tensor's values: the negative bit (a lazy negation), the
    # conjugate bit (complex only), bool bytes other than 0 / 1; nested tensors (no strides).
    if kind != "bool" and hasattr(torch, "_neg_view"):
        add("torch-negative-bit", lambda v: torch._neg_view(-t(v)))
    add("torch-conjugate-bit", lambda v: t(v).to(torch.complex64).conj())
    if kind == "bool":
        add("torch-bool-byte-2",
            lambda v: torch.from_numpy(_odd_bool_bytes(v.view(np.uint8))).view(torch.bool))
    if hasattr(torch, "nested"):
        add("torch-nested", _nested)


if torch is not None:

    class _TensorSub(torch.Tensor):
        pass


def _odd_bool_bytes(raw):
    """A copy of uint8 array `raw` with byte 2 in its first element."""
    raw = raw.copy()
    raw[0] = 2
    return raw


def _nested(v):
    import warnings

    with warnings.catch_warnings():  # torch 1.13: a prototype
        warnings.simplefilter("ignore")
        return torch.nested.nested_tensor([torch.from_numpy(v.copy())])


def _strides(v):
    return tuple(v.strides)


def add_interface_variants(add, kind):
    item = 1 if kind == "bool" else 4
    ndim = 2 if kind == "table" else 1
    add("iface-ok", lambda v: iface(v), OK)
    add("iface-version-2", lambda v: iface(v, version=2), OK)
    add("iface-no-version", lambda v: iface(v, version=DROP), OK)
    add("iface-read-only", lambda v: iface(v, data=(_ptr(v), True)), OK)
    add("iface-shape-list", lambda v: iface(v, shape=list(v.shape)), OK)
    add("iface-explicit-strides", lambda v: iface(v, strides=_strides(v)), OK)
    add("iface-strides-list", lambda v: iface(v, strides=list(_strides(v))), OK)
    add("iface-native-order",
        lambda v: iface(v, typestr="=" + v.__array_interface__["typestr"][1:]), OK)
    add("iface-numpy-int-shape", lambda v: iface(v, shape=tuple(np.int64(s) for s in v.shape)),
        OK)
    add("iface-descr-garbage", lambda v: iface(v, descr=object()), OK)
    add("iface-mask-none", lambda v: iface(v, mask=None), OK)
    # The interface itself.
    add("iface-not-a-dict", lambda v: Iface(list(v.__array_interface__.items()), v))
    add("iface-none", lambda v: Iface(None, v))
    add("iface-empty-dict", lambda v: Iface({}, v))
    for key in ("typestr", "shape", "data"):
        add(f"iface-missing-{key}", lambda v, key=key: iface(v, **{key: DROP}))
    # Wrong types, key by key (a function of the valid array: its pointer, typestr, strides).
    wrong_types = {
        "version": lambda v: ["3", 3.0, None, [3], True],
        "typestr": lambda v: [None, 4, v.__array_interface__["typestr"].encode(), ["<", "i", "4"]],
        "shape": lambda v: [None, 5, "5", {0: 5}, (1.5,) * ndim, ("4",) * ndim, ((4,),) * ndim,
                            (True,) * ndim, (BadIndex(),) * ndim],
        "data": lambda v: [_ptr(v), None, [_ptr(v), False], (_ptr(v),), (), (_ptr(v), False, 0),
                           ("0x10", False), (1.5, False), (True, False), (_ptr(v), None),
                           (_ptr(v), "no"), (_ptr(v), 1.5), memoryview(b"abcd")],
        "strides": lambda v: [5, "4", (4.0,) * ndim, (None,) * ndim, {0: item},
                              (BadIndex(),) * ndim],
        "mask": lambda v: [object(), np.ones(v.shape, bool), True],
    }
    counts = {"version": 5, "typestr": 4, "shape": 9, "data": 13, "strides": 6, "mask": 3}
    for key, values in wrong_types.items():
        for i in range(counts[key]):
            add(f"iface-{key}-wrong-type-{i}",
                lambda v, key=key, values=values, i=i: iface(v, **{key: values(v)[i]}))
    # typestr garbage.
    garbage = ["", "<", "<i", "i4", "<i4x", "<iX", "<i0", "<i3", "<i32", "<i64", "<i256",
               "<i99999999999999999999", "<i-4", "xi4", "<q4", "<V4", "<U4", "<O8", "<M8[s]",
               "<m8", "|b4", "<b2", "<f4", "<f8", "<c8", "<c16", "<u4", "<i8", "<i2", "|u1",
               "<i\u00e94", "<i4\x00", "\ud800i4"]
    garbage += ["<i4", "|i1"] if kind == "bool" else ["|b1", ">i4", ">u4"]
    for i, ts in enumerate(garbage):
        add(f"iface-typestr-{i}", lambda v, ts=ts: iface(v, typestr=ts))
    # Item sizes 0 and 32 with explicit strides (once a division by zero / an 8-bit overflow).
    for ts in ("<i0", "<i32", "<i64", "<f32", "<c32", "|b0"):
        add(f"iface-itemsize-{ts}-strided",
            lambda v, ts=ts: iface(v, typestr=ts, strides=_strides(v)))
    # Pointers.
    add("iface-null-data", lambda v: iface(v, data=(0, False)))
    add("iface-null-data-read-only", lambda v: iface(v, data=(0, True)))
    add("iface-null-page", lambda v: iface(v, data=(8, False)))
    add("iface-null-page-top", lambda v: iface(v, data=(4096 - v.itemsize, False)))
    if item > 1:
        add("iface-unaligned", lambda v: iface(v, data=(_ptr(v) + 1, False)))
    add("iface-negative-pointer", lambda v: iface(v, data=(-_ptr(v), False)))
    add("iface-pointer-2^64", lambda v: iface(v, data=(1 << 64, False)))
    add("iface-pointer-wraps", lambda v: iface(v, data=((1 << 64) - v.itemsize, False)))
    add("iface-empty-null-data", lambda v: iface(v, data=(0, False), shape=(0,) * ndim))
    # Shapes and strides.
    add("iface-strides-empty", lambda v: iface(v, strides=()))
    add("iface-strides-short", lambda v: iface(v, strides=_strides(v)[:-1]))
    add("iface-strides-long", lambda v: iface(v, strides=_strides(v) + (v.itemsize,)))
    add("iface-strides-not-multiple", lambda v: iface(v, strides=(v.itemsize + 1,) * ndim),
        RAISE if item > 1 else ANY)
    add("iface-strides-zero", lambda v: iface(v, strides=(0,) * ndim))
    add("iface-strides-negative", lambda v: iface(v, strides=tuple(-s for s in _strides(v))))
    add("iface-shape-negative", lambda v: iface(v, shape=(-1,) * ndim))
    add("iface-shape-0d", lambda v: iface(v, shape=(), strides=None))
    add("iface-shape-65d", lambda v: iface(v, shape=(1,) * 65))
    add("iface-shape-3d", lambda v: iface(v, shape=v.shape + (1,) * (3 - ndim), strides=None))
    for e in (62, 63, 64):
        add(f"iface-shape-2^{e}", lambda v, e=e: iface(v, shape=(1 << e,) + v.shape[1:]))
    add("iface-shape-2^62-negative-strides",
        lambda v: iface(v, shape=(1 << 62,) + v.shape[1:],
                        strides=(-v.strides[0],) + v.strides[1:]))
    add("iface-stride-2^62", lambda v: iface(v, strides=(1 << 62,) + v.strides[1:]))
    add("iface-stride-2^63", lambda v: iface(v, strides=(1 << 63,) + v.strides[1:]))
    add("iface-stride-minus-2^63", lambda v: iface(v, strides=(-(1 << 63),) + v.strides[1:]))
    if ndim == 2:
        add("iface-rows-2^40", lambda v: iface(v, shape=(1 << 40, v.shape[1])), OK)
        add("iface-row-stride-2^60", lambda v: iface(v, strides=(1 << 60, v.itemsize)))
        add("iface-width-2^31", lambda v: iface(v, shape=(v.shape[0], 1 << 31)))
        add("iface-width-2^62", lambda v: iface(v, shape=(v.shape[0], 1 << 62)))
    else:
        add("iface-length-2^40", lambda v: iface(v, shape=(1 << 40,)))
    # __cuda_array_interface__ (never read as device memory here: rejected before, or host
    # memory on machines with CUDA, where a host builder accepts unregistered memory).
    def cai(v, **over):
        d = dict(v.__array_interface__, version=3, strides=None, stream=None)
        d.update(over)
        return Iface(d, v, cuda=True)

    add("cai-host-memory", lambda v: cai(v), ANY)
    add("cai-null-data", lambda v: cai(v, data=(0, False)))
    add("cai-stream-str", lambda v: cai(v, stream="1"))
    add("cai-stream-float", lambda v: cai(v, stream=1.5))
    add("cai-stream-2^70", lambda v: cai(v, stream=1 << 70))
    add("cai-mask", lambda v: cai(v, mask=object()))
    add("cai-typestr", lambda v: cai(v, typestr="<iX"))
    add("cai-version-str", lambda v: cai(v, version="3"))
    add("cai-not-a-dict", lambda v: Iface(5, v, cuda=True))


def add_dlpack_variants(add, kind):
    def cap(v, **kw):
        kw.setdefault("code", _DLPACK_CODES[v.dtype.kind])
        kw.setdefault("bits", v.itemsize * 8)
        return capsule(v, **kw)

    def ones(v):
        return [1] * (v.ndim - 1)

    add("dlpack-ok", lambda v: cap(v), OK)
    add("dlpack-no-strides", lambda v: cap(v, strides=False), OK)
    add("dlpack-versioned-read-only", lambda v: cap(v, versioned=True, read_only=True), OK)
    add("dlpack-null-data", lambda v: cap(v, data=0))
    add("dlpack-null-page", lambda v: cap(v, data=16))
    if kind != "bool":
        add("dlpack-unaligned", lambda v: cap(v, byte_offset=1))
    add("dlpack-negative-shape", lambda v: cap(v, shape=[-1] + list(v.shape[1:])))
    add("dlpack-shape-2^62", lambda v: cap(v, shape=[1 << 62] + list(v.shape[1:])))
    add("dlpack-shape-2^62-negative-stride",
        lambda v: cap(v, shape=[1 << 62] + list(v.shape[1:]), strides=[-1] + ones(v)))
    add("dlpack-stride-2^62", lambda v: cap(v, strides=[1 << 62] + ones(v)))
    add("dlpack-0d-null", lambda v: cap(v, data=0, shape=[]))
    add("dlpack-3d", lambda v: cap(v, shape=list(v.shape) + [1] * (3 - v.ndim), strides=False))
    add("dlpack-ndim-65", lambda v: cap(v, shape=[1] * 65, strides=False))
    add("dlpack-lanes-4", lambda v: cap(v, lanes=4))
    add("dlpack-bits-0", lambda v: cap(v, bits=0))
    add("dlpack-bits-255", lambda v: cap(v, bits=255))
    add("dlpack-code-99", lambda v: cap(v, code=99))
    add("dlpack-float", lambda v: cap(v, code=2))
    add("dlpack-device-cuda-managed", lambda v: cap(v, device=(13, 0)))
    add("dlpack-device-vulkan", lambda v: cap(v, device=(7, 0)))
    add("dlpack-device-cuda-99", lambda v: cap(v, device=(2, 99)))
    add("dlpack-wrong-capsule-name", lambda v: cap(v, name=b"tensor"))
    add("dlpack-used-capsule", _used_capsule)
    add("dlpack-method-raises", lambda v: DlpackReturning(RuntimeError("no capsule today")))
    add("dlpack-method-returns-int", lambda v: DlpackReturning(5))
    add("dlpack-method-returns-none", lambda v: DlpackReturning(None))


# ----------------------------------------------------------------------------- the plain API


def step_arrays():
    """A valid step of the spec builders below: two spec rows (k = 2) and a padding row, with
    every optional array."""
    return dict(
        query_start_loc_cpu=np.array([0, 3, 6, 6], I32),
        query_start_loc=np.array([0, 3, 6, 6], I32),
        seq_lens=np.array([20, 30, 0], I32),
        seq_lens_cpu_upper_bound=np.array([20, 30, 0], I32),
        is_prefilling=np.zeros(3, np.bool_),
        num_decode_draft_tokens_cpu=np.array([2, 2, -1], I32),
        num_accepted_tokens=np.array([1, 3, 1], I32),
    )


def table():
    return np.arange(100, 112, dtype=I32).reshape(3, 4)


ARRAY_ARGS = {  # name: (kind, required)
    "query_start_loc_cpu": ("i32", True),
    "query_start_loc": ("i32", False),
    "seq_lens": ("i32", True),
    "seq_lens_cpu_upper_bound": ("i32", True),
    "is_prefilling": ("bool", False),
    "num_decode_draft_tokens_cpu": ("i32", False),
    "num_accepted_tokens": ("i32", False),
}

SCALAR_VARIANTS = {
    "num_actual_tokens": [
        ("none", None, RAISE), ("float", 6.0, RAISE), ("str", "6", RAISE), ("list", [6], RAISE),
        ("2^31", 1 << 31, RAISE), ("2^63", 1 << 63, RAISE), ("-2^63-1", -(1 << 63) - 1, RAISE),
        ("negative", -1, RAISE), ("too-few", 5, RAISE), ("numpy-int", np.int64(6), OK),
        ("bad-index", BadIndex(), RAISE), ("int32-array", np.array([6], I32), RAISE),
    ],
    "num_reqs": [
        ("float", 3.0, RAISE), ("str", "3", RAISE), ("negative", -1, RAISE),
        ("2^31", 1 << 31, RAISE), ("2^64", 1 << 64, RAISE), ("too-many", 4, RAISE),
        ("numpy-int", np.int32(3), OK), ("bad-index", BadIndex(), RAISE),
    ],
    "stream": [
        ("str", "0", RAISE), ("float", 0.0, RAISE), ("negative", -1, RAISE),
        ("2^64", 1 << 64, RAISE), ("object", object(), RAISE),
        ("cuda-stream-str", StreamLike("0"), RAISE), ("cuda-stream-none", StreamLike(None), RAISE),
        ("list", [0], RAISE), ("zero", 0, OK), ("none", None, OK),
    ],
}

# The spec builders' configuration: every array argument is read (k = 2, FULL graphs).
SPEC_CONFIG = dict(num_spec=2, max_num_seqs=8, max_num_batched_tokens=64, full_cuda_graph=True)


def _builder(kind, **over):
    cfg = dict(SPEC_CONFIG, **over)
    if kind == "kda-recoverssm":
        cfg["use_recoverssm"] = True
    if kind == "mamba2":
        cfg["chunk_size"] = 64
    return linmeta.MetadataBuilder(kind.split("-")[0], **cfg)


def plain_cases():
    out = []
    entries = [
        ("gdn.build", "gdn", "build", False),
        ("gdn.build_for_cudagraph_capture", "gdn", "build_for_cudagraph_capture", False),
        ("gdn.build_groups", "gdn", "build_groups", True),
        ("gdn.build_groups_for_cudagraph_capture", "gdn", "build_groups_for_cudagraph_capture",
         True),
        ("kda.build", "kda", "build", False),
        ("kda-recoverssm.build", "kda-recoverssm", "build", False),
        ("kda-recoverssm.build_for_cudagraph_capture", "kda-recoverssm",
         "build_for_cudagraph_capture", False),
        ("kda.build_groups", "kda", "build_groups", True),
        ("mamba2.build", "mamba2", "build", False),
        ("mamba2.build_for_cudagraph_capture", "mamba2", "build_for_cudagraph_capture", False),
        ("mamba2.build_groups", "mamba2", "build_groups", True),
        ("mamba1.build", "mamba1", "build", False),
        ("short_conv.build", "short_conv", "build", False),
        ("linear.build", "linear", "build", False),
        ("bailing_linear.build", "bailing_linear", "build", False),
        ("bailing_linear.build_for_cudagraph_capture", "bailing_linear",
         "build_for_cudagraph_capture", False),
        ("ple_short_conv.build", "ple_short_conv", "build", False),
        ("ple_short_conv.build_for_cudagraph_capture", "ple_short_conv",
         "build_for_cudagraph_capture", False),
    ]
    for entry, kind, method, groups in entries:
        builders = {}

        def call(arg, value, kind=kind, method=method, groups=groups, builders=builders):
            if kind not in builders:
                builders[kind] = _builder(kind, num_groups=2 if groups else 1)
            b = builders[kind]
            kw = step_arrays()
            kw["num_actual_tokens"] = 6
            if groups:
                kw["block_tables"] = [table(), table()]
            else:
                kw["block_table"] = table()
            if arg.startswith("block_tables["):
                kw["block_tables"][int(arg[-2])] = value
            else:
                kw[arg] = value
            getattr(b, method)(**kw)

        array_args = dict(ARRAY_ARGS)
        array_args["block_tables[0]" if groups else "block_table"] = ("table", True)
        if groups:
            array_args["block_tables[1]"] = ("table", True)
        for arg, (kind_, required) in array_args.items():
            valid = table if kind_ == "table" else (lambda arg=arg: step_arrays()[arg])
            for label, make, expect in array_variants(kind_, required):
                out.append(Case(f"{entry}:{arg}", label,
                                lambda call=call, arg=arg, make=make, valid=valid:
                                call(arg, make(valid())),
                                expect, _pattern(arg)))
        for arg, variants in SCALAR_VARIANTS.items():
            for label, value, expect in variants:
                out.append(Case(f"{entry}:{arg}", label,
                                lambda call=call, arg=arg, value=value: call(arg, value),
                                expect, _pattern(arg)))
        if groups:
            for label, make, expect in [
                ("none", lambda: None, RAISE), ("int", lambda: 5, RAISE),
                ("str", lambda: "ab", RAISE), ("empty", lambda: [], RAISE),
                ("one", lambda: [table()], RAISE), ("three", lambda: [table()] * 3, RAISE),
                ("generator", lambda: (t for t in [table(), table()]), RAISE),
                ("dict", lambda: {0: table(), 1: table()}, RAISE),
                ("huge-len", lambda: _HugeSequence(table()), RAISE),
                ("raising-len", lambda: _RaisingSequence(), RAISE),
                ("raising-items", lambda: _RaisingItems(), RAISE),
                ("numpy-3d", lambda: np.stack([table(), table()]), OK),
                ("tuple", lambda: (table(), table()), OK),
            ]:
                out.append(Case(f"{entry}:block_tables", label,
                                lambda call=call, make=make: call("block_tables", make()),
                                expect, "block_tables"))
    out += update_block_table_cases()
    out += constructor_cases()
    return out


class _HugeSequence:
    """A sequence that claims 2^40 items (each the same table)."""

    def __init__(self, item):
        self.item = item

    def __len__(self):
        return 1 << 40

    def __getitem__(self, i):
        return self.item


class _RaisingSequence:
    def __len__(self):
        raise RuntimeError("no length today")

    def __getitem__(self, i):
        raise IndexError(i)


class _RaisingItems:
    def __len__(self):
        return 2

    def __getitem__(self, i):
        raise RuntimeError("no item today")


def _pattern(arg):
    """The regular expression a message about argument `arg` must match."""
    return {
        "block_tables[0]": r"block_tables\[0\]",
        "block_tables[1]": r"block_tables\[1\]",
        "num_reqs": r"num_reqs|query_start_loc_cpu",  # too many: names both
        "num_actual_tokens": "num_actual_tokens",
    }.get(arg, arg)


def update_block_table_cases():
    out = []
    state = {}

    def setup():
        if not state:
            b = _builder("gdn", num_groups=2)
            kw = step_arrays()
            md = b.build_groups(block_tables=[table(), table()], num_actual_tokens=6, **kw)[0]
            other = _builder("gdn").build(block_table=table(), num_actual_tokens=6, **kw)
            state.update(b=b, md=md, other=other)
        return state

    def call(metadata=None, block_table=None, group=1, stream=0, **_):
        s = setup()
        s["b"].update_block_table(s["md"] if metadata is None else metadata(s),
                                  table() if block_table is None else block_table, group, stream)

    out.append(Case("update_block_table:ok", "ok", lambda: call(), OK, ""))
    for label, make, expect in array_variants("table", True):
        if label == "none":  # block_table=None: the default of call() above
            out.append(Case("update_block_table:block_table", label,
                            lambda: setup()["b"].update_block_table(setup()["md"], None),
                            RAISE, "block_table"))
            continue
        out.append(Case("update_block_table:block_table", label,
                        lambda make=make: call(block_table=make(table())), expect,
                        "block_table"))
    for label, make in [
        ("none", lambda s: None), ("int", lambda s: 5), ("dict", lambda s: {}),
        ("other-builders", lambda s: s["other"]), ("the-builder", lambda s: s["b"]),
    ]:
        if label == "none":
            run = lambda: setup()["b"].update_block_table(None, table())  # noqa: E731
        else:
            run = lambda make=make: call(metadata=make)  # noqa: E731
        out.append(Case("update_block_table:metadata", label, run, RAISE, "metadata"))
    for label, g, expect in [
        ("negative", -1, RAISE), ("too-large", 2, RAISE), ("2^31", 1 << 31, RAISE),
        ("float", 1.0, RAISE), ("str", "1", RAISE), ("none", None, RAISE),
        ("numpy-int", np.int64(1), OK),
    ]:
        out.append(Case("update_block_table:group", label,
                        lambda g=g: call(group=g), expect, "group"))
    for label, value, expect in SCALAR_VARIANTS["stream"]:
        out.append(Case("update_block_table:stream", label,
                        lambda value=value: call(stream=value), expect, "stream"))
    return out


CTOR_INTS = ["num_spec", "max_num_seqs", "max_num_batched_tokens", "block_size",
             "num_speculative_blocks", "num_prefill_checkpoint_blocks", "num_groups",
             "staging_slots", "capture_slots", "chunk_size"]
CTOR_UNSETTABLE = ["max_cudagraph_capture_size", "prefill_checkpoint_alignment"]
CTOR_BOOLS = ["full_cuda_graph", "chunk_metadata", "use_recoverssm",
              "programmatic_dependent_launch"]
CTOR_STRS = ["mamba_cache_mode", "profile", "target", "array_type"]


def constructor_cases():
    out = []
    int_values = [("none", None), ("float", 2.0), ("str", "2"), ("list", [2]),
                  ("2^31", 1 << 31), ("-2^31-1", -(1 << 31) - 1), ("2^64", 1 << 64),
                  ("object", object()), ("bad-index", BadIndex()), ("array", np.array([2]))]
    bool_values = [("none", None), ("int", 2), ("one", 1), ("str", "yes"), ("float", 1.0),
                   ("list", [])]
    str_values = [("none", None), ("int", 5), ("bytes", b"none"), ("garbage", "bogus"),
                  ("nul", "no\x00ne"), ("surrogate", "\ud800")]
    library = [("max_num_seqs", 0), ("max_num_seqs", -1), ("max_num_seqs", (1 << 31) - 1),
               ("max_num_batched_tokens", (1 << 31) - 1), ("num_spec", -1),
               ("num_spec", (1 << 31) - 1), ("block_size", 0), ("num_groups", 0),
               ("num_groups", (1 << 31) - 1), ("num_prefill_checkpoint_blocks", -1),
               ("max_cudagraph_capture_size", -3), ("prefill_checkpoint_alignment", -1),
               ("chunk_size", -1), ("chunk_size", 0)]
    for cls_name in ("GdnMetadataBuilder", "KdaMetadataBuilder", "Mamba2MetadataBuilder"):
        def make(kw, cls_name=cls_name):
            if cls_name == "Mamba2MetadataBuilder":
                kw = dict({"chunk_size": 64}, **kw)
            getattr(linmeta, cls_name)(**kw)

        group = f"{cls_name}()"
        for arg in CTOR_INTS:
            for label, v in int_values:
                out.append(Case(f"{group}:{arg}", label, lambda arg=arg, v=v: make({arg: v}),
                                RAISE, arg))
        for arg in CTOR_UNSETTABLE:  # None: unset
            for label, v in int_values[1:]:
                out.append(Case(f"{group}:{arg}", label, lambda arg=arg, v=v: make({arg: v}),
                                RAISE, arg))
        for arg in CTOR_BOOLS:
            for label, v in bool_values:
                out.append(Case(f"{group}:{arg}", label, lambda arg=arg, v=v: make({arg: v}),
                                RAISE, arg))
            out.append(Case(f"{group}:{arg}", "numpy-bool",
                            lambda arg=arg: make({arg: np.bool_(False)}), OK, arg))
        for arg in CTOR_STRS + ["prefill_backend"]:
            for label, v in str_values:
                if arg == "prefill_backend" and v is None:
                    continue  # None: the default backend
                out.append(Case(f"{group}:{arg}", label, lambda arg=arg, v=v: make({arg: v}),
                                RAISE, arg))
        for i, (arg, v) in enumerate(library):
            if arg == "chunk_size" and v == 0 and cls_name != "Mamba2MetadataBuilder":
                continue  # 0: unset, which only Mamba2 refuses
            out.append(Case(f"{group}:{arg}", f"value-{i}", lambda arg=arg, v=v: make({arg: v}),
                            RAISE, arg))
        out.append(Case(f"{group}:unknown", "keyword", lambda: make({"num_specs": 2}), RAISE,
                        "num_specs|incompatible"))
    return out


# ------------------------------------------------------------------------------ linmeta.vllm


def vllm_missing():
    """Why linmeta.vllm's entry points cannot be fed here (they run through the seed oracle's
    stand-in vLLM), None when they can."""
    if torch is None:
        return "needs torch"
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    import vllm_oracle_util as u

    return None if u.oracle_available() else u.ORACLE_MISSING


def vllm_available():
    return vllm_missing() is None


_VLLM = {}


def _vllm_context(name):
    """(builders, common metadata per group, accepted, drafts, results) of public case `name`
    run once through linmeta.vllm's builders (one per KV-cache group)."""
    if name not in _VLLM:
        import vllm_oracle_util as u

        seeds, runner, lv = u.load()
        case = next(c for c in u.load_cases() if c["name"].startswith(name))
        ours, _, _, (builders, _, ms) = u.run_case(seeds, runner, lv, case)
        accepted, drafts = u.step_counts(case["step"])
        _VLLM[name] = (builders, ms, accepted, drafts, ours)
    return _VLLM[name]


VLLM_FIELDS = {  # CommonAttentionMetadata field: (kind, required, the message's name)
    "query_start_loc_cpu": ("i32", True, "query_start_loc_cpu"),
    "query_start_loc": ("i32", False, "query_start_loc"),
    "seq_lens": ("i32", True, "seq_lens"),
    "seq_lens_cpu_upper_bound": ("i32", False, "seq_lens_cpu_upper_bound"),
    "is_prefilling": ("bool", False, "is_prefilling"),
    "block_table_tensor": ("table", True, "block_table"),
}

VLLM_ENTRIES = [  # (group prefix, public case, capture)
    ("vllm.gdn.build", "E3 ", False),
    ("vllm.kda.build", "K4 ", False),
    ("vllm.kda-recoverssm.build", "K7 ", False),
    ("vllm.gdn.build_for_cudagraph_capture", "E7 ", True),
    ("vllm.kda.build_for_cudagraph_capture", "T-kda cudagraph_capture", True),
    ("vllm.kda-recoverssm.build_for_cudagraph_capture", "T-kda recoverssm_spec_cudagraph", True),
]


def _vllm_valid(name, field):
    """A numpy copy of the valid value of `field` in public case `name` (its shape and dtype
    for the variants)."""
    builders, ms, accepted, drafts, _ = _vllm_context(name)
    value = {"num_accepted_tokens": accepted, "num_decode_draft_tokens_cpu": drafts}.get(field)
    if value is None:
        value = getattr(ms[0], field)
    if value is None and field == "is_prefilling":
        value = torch.zeros(ms[0].num_reqs, dtype=torch.bool)
    return value.numpy().copy()


def _vllm_expect(label, field, required, expect):
    """array_variants' expectation as the adapter reads the field."""
    if label == "none" and not required:
        return ANY  # the upper bound: vLLM's exact copy is read instead; others: optional
    if label == "torch-int64" and field in ("num_accepted_tokens", "num_decode_draft_tokens_cpu"):
        return OK  # vLLM's int64 counts: converted
    if label in ("numpy-too-long", "iface-length-2^40", "iface-rows-2^40"):
        return ANY  # num_reqs is given: longer arrays are read as far as needed
    return expect


def vllm_cases():
    out = []
    for prefix, name, capture in VLLM_ENTRIES:
        def call(field, value, name=name, capture=capture):
            builders, ms, accepted, drafts, _ = _vllm_context(name)
            b, m = builders[0], ms[0]
            if field in ("num_accepted_tokens", "num_decode_draft_tokens_cpu"):
                kw = dict(num_accepted_tokens=accepted, num_decode_draft_tokens_cpu=drafts)
                kw[field] = value
                return b.build(0, m, **kw)
            m2 = m.replace(**{field: value})
            if capture:
                return b.build_for_cudagraph_capture(m2)
            return b.build(0, m2, num_accepted_tokens=accepted, num_decode_draft_tokens_cpu=drafts)

        fields = dict(VLLM_FIELDS)
        if not capture:
            fields["num_accepted_tokens"] = ("i32", False, "num_accepted_tokens")
            fields["num_decode_draft_tokens_cpu"] = ("i32", False, "num_decode_draft_tokens_cpu")
        for field, (kind, required, msg) in fields.items():
            for label, make, expect in array_variants(kind, required):
                out.append(Case(f"{prefix}:{field}", label,
                                lambda call=call, field=field, make=make, name=name:
                                call(field, make(_vllm_valid(name, field))),
                                _vllm_expect(label, field, required, expect), msg))
        if capture:
            continue  # vLLM's capture build compares the counts below in Python first
        for field, values in (("num_actual_tokens", [("none", None), ("float", 6.5),
                                                     ("str", "6"), ("2^31", 1 << 31)]),
                              ("num_reqs", [("float", 2.5), ("str", "3"), ("-1", -1),
                                            ("2^31", 1 << 31)])):
            for label, v in values:
                out.append(Case(f"{prefix}:{field}", label,
                                lambda call=call, field=field, v=v: call(field, v), RAISE,
                                field))
    # update_block_table: GDN's C++ path (the last of two groups), KDA's Python one.
    for prefix, name in (("vllm.gdn.update_block_table", "G1 "),
                         ("vllm.kda.update_block_table", "K1 ")):
        def update(value, name=name):
            builders, ms, accepted, drafts, _ = _vllm_context(name)
            md = builders[0].build(0, ms[0], num_accepted_tokens=accepted,
                                   num_decode_draft_tokens_cpu=drafts)  # the step to update
            g = len(builders) - 1
            return builders[g].update_block_table(md, value, ms[g].slot_mapping)

        for label, make, expect in array_variants("table", True):
            out.append(Case(f"{prefix}:blk_table", label,
                            lambda update=update, make=make, name=name:
                            update(make(_vllm_valid(name, "block_table_tensor"))),
                            _vllm_expect(label, "blk_table", True, expect), "blk_table"))
    return out


# ------------------------------------------- linmeta.vllm: engine, re-entry, reuse, threads


class Reenter:
    """An array (`t`'s memory) whose __array_interface__ or __dlpack__ first calls `inner`,
    keeping what it raised."""

    def __init__(self, t, inner, dlpack):
        self._t, self._inner, self._dlpack, self.raised = t, inner, dlpack, None

    def _enter(self):
        try:
            self._inner()
        except Exception as e:  # noqa: BLE001 - read by the case
            self.raised = e

    @property
    def __array_interface__(self):
        if self._dlpack:
            raise AttributeError("__array_interface__")
        self._enter()
        return self._t.numpy().__array_interface__

    def __dlpack__(self, *args, **kwargs):
        if not self._dlpack:
            raise AttributeError("__dlpack__")
        self._enter()
        return self._t.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        if not self._dlpack:
            raise AttributeError("__dlpack_device__")
        return self._t.__dlpack_device__()


def in_two_threads(run):
    """run(0) and run(1) in two threads, with a GIL switch interval of a microsecond (a
    switch inside nearly every call that runs Python code)."""
    import threading

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)


def _fresh_gdn(name, m, accepted, drafts):
    """The step of `m` built by a new linmeta.vllm GDN builder of public case `name`'s
    configuration."""
    import vllm_oracle_util as u

    seeds, runner, lv = u.load()
    case = next(c for c in u.load_cases() if c["name"].startswith(name))
    b = lv.GDNAttentionMetadataBuilder(*u.vllm_objects(runner, case["config"], 1)[0],
                                       torch.device("cpu"))
    return b.build(0, m, accepted, drafts)


def _same(got, want, what):
    import vllm_oracle_util as u

    d = u.diff(got, want)
    if d:
        raise AssertionError(f"{what}: {d[:3]}")


def _reentry(dlpack):
    """A build whose host input builds again with the same builder object: the inner call is
    refused (linmeta.Error), the outer is its own step's."""
    builders, ms, accepted, drafts, _ = _vllm_context("E3 ")
    b, m = builders[0], ms[0]
    bad = Reenter(m.seq_lens_cpu_upper_bound, lambda: b.build(0, m, accepted, drafts), dlpack)
    md = b.build(0, m.replace(seq_lens_cpu_upper_bound=bad), accepted, drafts)
    if not (isinstance(bad.raised, linmeta.Error) and "entered while" in str(bad.raised)):
        raise AssertionError(f"the re-entered build was not refused: {bad.raised!r}")
    _same(md, _fresh_gdn("E3 ", m, accepted, drafts), "the outer build")


def _in_place_reuse(seed):
    """Steps written into the same tensors (vLLM's persistent buffers): every build reads
    them afresh and equals a new builder's (fixed seed: the sequence lengths grow by random
    amounts, the accepted counts are random)."""
    import random

    rng = random.Random(seed)
    builders, ms, accepted, drafts, _ = _vllm_context("E3 ")
    b, m = builders[0], ms[0]
    acc = accepted.clone()
    lens, upper = m.seq_lens.clone(), m.seq_lens_cpu_upper_bound.clone()
    m = m.replace(seq_lens=lens, seq_lens_cpu_upper_bound=upper)
    for step in range(12):
        grow = torch.tensor([rng.randint(0, 9) for _ in range(len(lens))], dtype=torch.int32)
        lens += grow
        upper.copy_(lens)
        acc.copy_(torch.tensor([rng.randint(1, 3) for _ in range(len(acc))], dtype=torch.int32))
        _same(b.build(0, m, acc, drafts), _fresh_gdn("E3 ", m, acc, drafts), f"step {step}")


def _two_threads(shared):
    """Two threads build (each 30 times) with their own builder objects of one configuration
    (shared=False: every build its own step's) or with one builder object (shared=True: a
    build either returns its own step's or is refused with the re-entry error)."""
    builders, ms, accepted, drafts, _ = _vllm_context("E3 ")
    import vllm_oracle_util as u

    seeds, runner, lv = u.load()
    case = next(c for c in u.load_cases() if c["name"].startswith("E3 "))
    own = [lv.GDNAttentionMetadataBuilder(*u.vllm_objects(runner, case["config"], 1)[0],
                                          torch.device("cpu")) for _ in range(2)]
    m = ms[0]
    steps = [m, m.replace(seq_lens=m.seq_lens + 7, seq_lens_cpu_upper_bound=m.seq_lens + 7)]
    steps = [s.replace(seq_lens_cpu_upper_bound=Reenter(s.seq_lens_cpu_upper_bound,
                                                         lambda: None, False))
             for s in steps]  # read through Python code: GIL switches inside the builds
    want = [_fresh_gdn("E3 ", s, accepted, drafts).num_prefill_tokens for s in steps]
    want = [(w, _fresh_gdn("E3 ", s, accepted, drafts).spec_state_indices_tensor.tolist())
            for w, s in zip(want, steps)]
    bad = []

    def run(i):
        b = own[0] if shared else own[i]
        for _ in range(30):
            try:
                md = b.build(0, steps[i], accepted, drafts)
            except linmeta.Error as e:
                if not shared or "entered while" not in str(e):
                    bad.append(repr(e))
                continue
            got = (md.num_prefill_tokens, md.spec_state_indices_tensor.tolist())
            if got != want[i]:
                bad.append(f"thread {i} got another step's metadata")

    in_two_threads(run)
    if bad:
        raise AssertionError(bad[:3])


def vllm_engine_cases():
    """linmeta._linmeta.vllm.Engine's builder argument; re-entry from an input's
    __array_interface__ / __dlpack__; inputs reused in place across steps; two threads."""
    out = []

    def engine(builder):
        from linmeta.vllm.local import local_class

        return linmeta._linmeta.vllm.Engine(builder, local_class("gdn"), {}, {})

    for label, make in (("object", object), ("none", lambda: None), ("int", lambda: 5),
                        ("two-groups", lambda: linmeta.MetadataBuilder("gdn", num_groups=2))):
        out.append(Case("vllm.Engine:builder", label, lambda make=make: engine(make()), RAISE,
                        "MetadataBuilder|one KV-cache group"))
    for label, dlpack in (("array-interface", False), ("dlpack", True)):
        out.append(Case("vllm.gdn.build:reentry", label, lambda d=dlpack: _reentry(d), OK, ""))
    for seed in (40, 41):
        out.append(Case("vllm.gdn.build:in-place-reuse", f"seed-{seed}",
                        lambda seed=seed: _in_place_reuse(seed), OK, ""))
    for label, shared in (("own-builders", False), ("one-builder", True)):
        out.append(Case("vllm.gdn.build:two-threads", label,
                        lambda shared=shared: _two_threads(shared), OK, ""))
    return out


# ----------------------------------------------------------------------------------- running


def all_cases():
    cases = plain_cases()
    if vllm_available():
        cases += vllm_cases() + vllm_engine_cases()
    return cases


def run_one(case):
    """The outcome of one case as a dict: {"ok": True} or {"raised": type, "message": ...}."""
    try:
        case.run()
    except Exception as e:  # noqa: BLE001 - every outcome is reported
        return {
            "raised": type(e).__name__,
            "accepted": isinstance(e, (TypeError, ValueError)),
            "message": str(e)[:2000],
            "where": traceback.format_exc(limit=-3)[-2000:],
        }
    return {"ok": True}


def run_cases(cases, start, out):
    """Runs cases[start:], writing a JSON line to `out` before and after each."""
    for i in range(start, len(cases)):
        out.write(json.dumps({"i": i, "start": cases[i].id}) + "\n")
        out.flush()
        result = run_one(cases[i])
        result["i"] = i
        out.write(json.dumps(result) + "\n")
        out.flush()
    out.write(json.dumps({"done": len(cases)}) + "\n")
    out.flush()


def _signal_name(status):
    import signal

    try:
        return signal.Signals(os.WTERMSIG(status)).name
    except ValueError:
        return str(os.WTERMSIG(status))


def supervise(cases, start, out):
    """Runs cases[start:] in forked children (the imports are done once, here): when a child
    dies, the case it had started is reported as a crash, with its stderr (faulthandler's
    traceback), and a new child goes on with the next case."""
    i = start
    while True:
        r, w = os.pipe()
        fd, err_path = tempfile.mkstemp(prefix="linmeta-hostile-")
        os.close(fd)
        pid = os.fork()
        if pid == 0:  # the child
            try:
                os.close(r)
                fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(fd, 2)
                faulthandler.enable()
                with os.fdopen(w, "w") as child_out:
                    run_cases(cases, i, child_out)
            finally:
                os._exit(0)
        os.close(w)
        started, done = None, False
        with os.fdopen(r) as child_in:
            for line in child_in:
                out.write(line)
                out.flush()
                msg = json.loads(line)
                if "done" in msg:
                    done = True
                elif "start" in msg:
                    started = msg["i"]
                else:
                    started = None
        _, status = os.waitpid(pid, 0)
        try:
            with open(err_path, errors="replace") as f:
                stderr = f.read()[-3000:]
            os.unlink(err_path)
        except OSError:
            stderr = ""
        if done:
            return
        if started is None:
            raise RuntimeError(f"hostile_cases: a worker child ended outside a case:\n{stderr}")
        why = (f"signal {_signal_name(status)}" if os.WIFSIGNALED(status)
               else f"exit status {os.WEXITSTATUS(status)}")
        out.write(json.dumps({"i": started, "crash": why, "stderr": stderr}) + "\n")
        out.flush()
        i = started + 1


def worker(start):
    faulthandler.enable()
    cases = all_cases()
    if hasattr(os, "fork"):
        supervise(cases, start, sys.stdout)
    else:  # the test restarts a worker after a crash
        run_cases(cases, start, sys.stdout)


if __name__ == "__main__":
    worker(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
