"""Device tensors as the C interface's views: torch tensors, objects with
__cuda_array_interface__ and DLPack producers, all zero copy."""

from __future__ import annotations

import ctypes
import struct
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


# A tensor as the call packs it: (data, dtype code, shape, strides or None,
# what keeps the memory alive during the call or None). A tuple, not an
# object: calls are per-microsecond work (docs/python.md gives the budget).
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
    return (data, dtype, shape, strides, capsule)


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
    return (cai["data"][0] or 0, dtype, shape, strides, None)


def view(obj, where: str, argument: str, stream: int = 0) -> tuple:
    t = _view(obj, where, argument, stream)
    if len(t[2]) > MAX_NDIM:
        raise _bad(where, argument,
                   f"{len(t[2])} dimensions; at most {MAX_NDIM}")
    return t


MAX_NDIM = 8  # ATTNC_MAX_NDIM


def _view(obj, where, argument, stream):
    """obj as a packed tensor (see above): a torch tensor (read directly), an object with
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
        return (obj.data_ptr(), dtype, obj.shape, obj.stride(), None)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_cai(cai, where, argument)
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj, where, argument, stream)
    raise _bad(where, argument,
               f"a {type(obj).__name__}: expected a torch tensor or an object "
               "with __cuda_array_interface__ or __dlpack__")


# The C layouts (attnc_c.h) that pack writes, checked against ctypes' own
# layout of the same structs when attnc._attention loads.
TENSOR_SIZE, INPUT_SIZE, NAMED_SIZE = 32, 56, 40
_TENSOR_FMT = "QiiQQ"   # attnc_tensor
_INPUT_FMT = "Qifi4x"   # attnc_input up to its tensor (24 bytes)
_NAMED_FMT = "Q"        # attnc_named_tensor up to its tensor
_NO_TENSOR_FMT = "32x"
_BUFFERS = {}


def _buffer(size: int):
    """A zeroed buffer of at least size bytes (types cached by size class:
    making a ctypes array type per call would cost more than the call)."""
    size = (size + 255) & ~255
    kind = _BUFFERS.get(size)
    if kind is None:
        kind = _BUFFERS[size] = ctypes.c_char * size
    return kind()


def _dims(t):
    return len(t[2]) * (1 if t[3] is None else 2)


def pack(tensors, inputs=(), grads=()):
    """One buffer with the call's C structs, written by one struct.pack_into:
    the attnc_tensors of tensors, then the attnc_inputs (entries: name
    address, kind, f32, i32, tensor or None), then the attnc_named_tensors
    (name address, tensor), then every shape and stride. Returns (buffer,
    its address, the inputs' address, the grads' address); tensor i's
    attnc_tensor is at address + 32 * i."""
    n_dims = 0
    for t in tensors:
        n_dims += _dims(t)
    for entry in inputs:
        if entry[4] is not None:
            n_dims += _dims(entry[4])
    for entry in grads:
        n_dims += _dims(entry[1])
    inputs_at = TENSOR_SIZE * len(tensors)
    grads_at = inputs_at + INPUT_SIZE * len(inputs)
    dims_at = grads_at + NAMED_SIZE * len(grads)
    buf = _buffer(dims_at + 8 * n_dims)
    base = ctypes.addressof(buf)
    fmt = ["<"]
    head = []
    dims = []
    cursor = base + dims_at

    def put(t):
        nonlocal cursor
        shape, strides = t[2], t[3]
        n = len(shape)
        shape_at = cursor
        dims.extend(shape)
        cursor += 8 * n
        strides_at = 0
        if strides is not None:
            strides_at = cursor
            dims.extend(strides)
            cursor += 8 * n
        fmt.append(_TENSOR_FMT)
        head.extend((t[0], t[1], n, shape_at, strides_at))

    for t in tensors:
        put(t)
    for name, kind, f32, i32, t in inputs:
        fmt.append(_INPUT_FMT)
        head.extend((name, kind, f32, i32))
        if t is None:
            fmt.append(_NO_TENSOR_FMT)
        else:
            put(t)
    for name, t in grads:
        fmt.append(_NAMED_FMT)
        head.append(name)
        put(t)
    fmt.append(f"{len(dims)}q")
    struct.pack_into("".join(fmt), buf, 0, *head, *dims)
    return (buf, base, base + inputs_at if inputs else None,
            base + grads_at if grads else None)
