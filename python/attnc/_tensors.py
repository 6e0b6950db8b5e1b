"""Device tensors as the C interface's views: torch tensors, objects with
__cuda_array_interface__ and DLPack producers, all zero copy."""

from __future__ import annotations

import ctypes
import sys

from . import _lib

F16, BF16, F32, I32 = 0, 1, 2, 3
DTYPE_NAMES = {F16: "float16", BF16: "bfloat16", F32: "float32", I32: "int32"}


class CTensor(ctypes.Structure):
    # shape and strides are int64_t pointers in C; c_void_p here lets them
    # be set from plain addresses (one int64 array holds all of a call's).
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
    ]


class View:
    """What a call needs of one tensor (and what keeps its memory alive
    while the call runs: a DLPack capsule, say)."""

    __slots__ = ("data", "dtype", "shape", "strides", "keep")

    def __init__(self, data, dtype, shape, strides, keep=None):
        self.data = data
        self.dtype = dtype
        self.shape = tuple(shape)
        self.strides = None if strides is None else tuple(strides)
        self.keep = keep


_TORCH_DTYPES = None


def _torch_dtypes(torch):
    global _TORCH_DTYPES
    if _TORCH_DTYPES is None:
        _TORCH_DTYPES = {
            torch.float16: F16,
            torch.bfloat16: BF16,
            torch.float32: F32,
            torch.int32: I32,
        }
    return _TORCH_DTYPES


def _bad(where: str, argument: str, what: str):
    return _lib.InvalidArgument(f"{where}: argument '{argument}': {what}")


# __cuda_array_interface__ type strings (bfloat16 has none).
_TYPESTRS = {"<f2": F16, "<f4": F32, "<i4": I32}
_ITEMSIZE = {F16: 2, BF16: 2, F32: 4, I32: 4}

# DLPack (dlpack.h): device types and dtype codes.
_KDLCUDA = 2
_DL_CODES = {(2, 16): F16, (4, 16): BF16, (2, 32): F32, (0, 32): I32}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
    ]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _from_dlpack(obj, where, argument, stream):
    device = obj.__dlpack_device__()
    if int(device[0]) != _KDLCUDA:
        raise _bad(where, argument,
                   f"a DLPack tensor on device type {int(device[0])}; attnc "
                   "runs on CUDA device tensors (kDLCUDA)")
    # The producer orders its work before `stream` (DLPack's contract);
    # 1 is CUDA's legacy default stream, 0 is not allowed.
    capsule = obj.__dlpack__(stream=stream or 1)
    address = _capsule_pointer(capsule, b"dltensor")
    # DLManagedTensor begins with its DLTensor.
    t = _DLTensor.from_address(address)
    dtype = _DL_CODES.get((t.dtype.code, t.dtype.bits))
    if dtype is None or t.dtype.lanes != 1:
        raise _bad(where, argument,
                   f"DLPack dtype (code {t.dtype.code}, bits {t.dtype.bits}, "
                   f"lanes {t.dtype.lanes}) is not float16, bfloat16, float32 "
                   "or int32")
    shape = [t.shape[i] for i in range(t.ndim)]
    strides = None if not t.strides else [t.strides[i] for i in range(t.ndim)]
    data = (t.data or 0) + t.byte_offset
    return View(data, dtype, shape, strides, keep=capsule)


def _from_cai(cai, where, argument):
    dtype = _TYPESTRS.get(cai.get("typestr"))
    if dtype is None:
        raise _bad(where, argument,
                   f"__cuda_array_interface__ typestr {cai.get('typestr')!r} "
                   "is not <f2, <f4 or <i4")
    shape = tuple(cai["shape"])
    strides = cai.get("strides")
    if strides is not None:
        size = _ITEMSIZE[dtype]
        if any(s % size for s in strides):
            raise _bad(where, argument,
                       f"strides {tuple(strides)} (bytes) are not multiples "
                       f"of the element size {size}")
        strides = [s // size for s in strides]
    return View(cai["data"][0] or 0, dtype, shape, strides)


def view(obj, where: str, argument: str, stream: int = 0) -> View:
    """obj as a View: a torch tensor (read directly), an object with
    __cuda_array_interface__, or a DLPack producer (__dlpack__)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        if not obj.is_cuda:
            raise _bad(where, argument,
                       f"a tensor on {obj.device}; attnc runs on CUDA tensors")
        dtype = _torch_dtypes(torch).get(obj.dtype)
        if dtype is None:
            raise _bad(where, argument,
                       f"dtype {obj.dtype} is not float16, bfloat16, float32 "
                       "or int32")
        return View(obj.data_ptr(), dtype, obj.shape, obj.stride())
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_cai(cai, where, argument)
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj, where, argument, stream)
    raise _bad(where, argument,
               f"a {type(obj).__name__}: expected a torch tensor or an object "
               "with __cuda_array_interface__ or __dlpack__")


class Pack:
    """A call's tensors laid out for C: one CTensor array and one int64 array
    with every shape and stride, so a call makes two ctypes objects."""

    __slots__ = ("tensors", "dims", "keep", "base")

    def __init__(self, views):
        numbers = []
        for v in views:
            numbers.extend(v.shape)
            if v.strides is not None:
                numbers.extend(v.strides)
        self.dims = (ctypes.c_int64 * max(len(numbers), 1))(*numbers)
        self.tensors = (CTensor * max(len(views), 1))()
        self.keep = views
        dims = ctypes.addressof(self.dims)
        at = 0
        for i, v in enumerate(views):
            t = self.tensors[i]
            t.data = v.data
            t.dtype = v.dtype
            n = len(v.shape)
            t.ndim = n
            t.shape = dims + 8 * at
            at += n
            if v.strides is not None:
                t.strides = dims + 8 * at
                at += n
        self.base = ctypes.addressof(self.tensors)

    def address(self, i: int) -> int:
        """The address of the i-th view's CTensor."""
        return self.base + i * ctypes.sizeof(CTensor)
