"""A call's C structs for torch tensors, packed once per call shape and then
only patched: the data pointers and scalar values are what changes from
one call to the next of a training step, so a call writes those few words
into a buffer kept from the first call of its shape."""

from __future__ import annotations

import ctypes
import sys
import threading

from . import _lib
from ._tensors import INPUT_SIZE, NAMED_SIZE, TENSOR_SIZE, pack, view

# The runtime runs a call in the calling thread's current context (device
# 0's primary one where none is current; runtime/lib/CudaDriver.cpp:
# currentDevice), and an object keeps to the context of its first call. So
# a call's tensors must be on the current device: attnc.torch makes their
# device current for the call (one object per device), the raw objects
# refuse a call whose tensors are elsewhere (check_current).

# attnc_input_kind (attnc_c.h).
_F32, _I32, _TENSOR = 0, 1, 2

# Buffers are per thread: a call releases the GIL inside the C function
# while it reads its buffer, and another thread's call of the same shape
# must not rewrite it meanwhile.
_local = threading.local()


def _cache():
    cache = getattr(_local, "packs", None)
    if cache is None:
        cache = _local.packs = {}
    return cache


def call_device(where: str, named) -> int:
    """The CUDA device index of a call's tensors (named: (argument,
    object with get_device()) pairs, None entries skipped; 0 when none):
    InvalidArgument for a CPU tensor or tensors on different devices."""
    first_name, first = None, None
    for name, t in named:
        if t is None:
            continue
        index = t.get_device()
        if index < 0:
            raise _lib.InvalidArgument(
                f"{where}: argument '{name}': a tensor on {t.device}; attnc "
                "runs on CUDA tensors")
        if first is None:
            first_name, first = name, index
        elif index != first:
            raise _lib.InvalidArgument(
                f"{where}: argument '{name}' is on cuda:{index} and "
                f"argument '{first_name}' on cuda:{first}; a call's tensors "
                "must be on one device")
    return 0 if first is None else first


def check_current(where: str, index: int, current: int) -> None:
    """A raw object's call on tensors of device index while device current
    is current: the runtime would launch in current's context, where the
    tensors' memory is not the device's own (InvalidArgument)."""
    if index >= 0 and index != current:
        raise _lib.InvalidArgument(
            f"{where}: the tensors are on cuda:{index} and the current "
            f"device is cuda:{current}; attnc runs a call in the current "
            f"device's context: make cuda:{index} current for the call "
            f"(with torch.cuda.device({index}): ...), and use one object "
            "per device (attnc.torch does both)")


def run_on(index: int, fn, *args):
    """fn(*args) with cuda:index current for its duration (as it is for
    index < 0 or the current device): attnc.torch's calls run on their
    tensors' device, whatever the caller's current one, and leave that as
    it was."""
    if index < 0 or index == current_device():
        return fn(*args)
    with sys.modules["torch"].cuda.device(index):
        return fn(*args)


def _raw_stream_function():
    torch = sys.modules["torch"]
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda device: torch.cuda.current_stream(device).cuda_stream


def current_device() -> int:
    """PyTorch's current CUDA device (the raw call where torch has it: this
    is on every raw call's path)."""
    global current_device
    torch = sys.modules["torch"]
    raw = getattr(torch._C, "_cuda_getDevice", None)
    current_device = raw if raw is not None else torch.cuda.current_device
    return current_device()


def stream_of(device: int) -> int:
    """The raw handle of PyTorch's current stream on device (no Stream
    object where torch has the raw call: this is on every call's path)."""
    global stream_of
    stream_of = _raw_stream_function()
    return stream_of(device)


class Packed:
    """One call shape's buffer: where each changing word goes."""

    __slots__ = ("buf", "base", "at_inputs", "at_grads", "words", "floats",
                 "ints", "ptr_slots", "f32_slots", "i32_slots", "calls")


# attnc_forward_call (attnc_c.h) as ten words: att, q, k, v, out, finals,
# inputs, num_inputs, mask, stream.
CallWords = ctypes.c_uint64 * 10
MASK_WORD, STREAM_WORD = 8, 9
c_forward_call = _lib.declare("attnc_attention_forward_call",
                              [ctypes.c_void_p])


def forward_call(p, handle, n_inputs, mask, stream, q, k, v, out,
                 finals) -> int:
    """attnc_attention_forward_call (its status) of packed forward p (q, k,
    v, out and finals, where not None, at p.base; n_inputs inputs) for the
    attention handle, with mask (a block mask handle or None) and stream,
    writing the five tensors' data pointers: one pointer argument (the
    extension attnc._fastcall where it is there, else ctypes), where
    attnc_attention_forward's nine cost microseconds to convert. The call's
    words are kept in p per handle (a shape's packing serves every object
    called with it)."""
    calls = p.calls
    if calls is None:
        calls = p.calls = {}
    found = calls.get(handle)
    if found is None:
        base = p.base
        call = CallWords(handle, base, base + TENSOR_SIZE,
                         base + 2 * TENSOR_SIZE, base + 3 * TENSOR_SIZE,
                         0 if finals is None else base + 4 * TENSOR_SIZE,
                         p.at_inputs or 0, n_inputs, 0, 0)
        found = calls[handle] = (call, ctypes.addressof(call))
    call, at = found
    call[MASK_WORD] = mask or 0
    ext = _lib.forward_call
    if ext is not None:
        return ext(at, q.data_ptr(), k.data_ptr(), v.data_ptr(),
                   out.data_ptr(), 0 if finals is None else finals.data_ptr(),
                   stream)
    words = p.words
    words[0] = q.data_ptr()
    words[4] = k.data_ptr()
    words[8] = v.data_ptr()
    words[12] = out.data_ptr()
    if finals is not None:
        words[16] = finals.data_ptr()
    call[STREAM_WORD] = stream
    return c_forward_call(at)


def _meta(t):
    return (t.dtype, t.get_device(), t.shape, t.stride())


def _build(where, names, tensors, inputs, grads, stream):
    """The first call of a shape: every tensor checked and viewed as the
    generic path does (the same messages), then packed."""
    call_device(where, list(zip(names, tensors))
                + [(f"inputs[{i[0]!r}]", i[2]) for i in inputs
                   if not isinstance(i[2], (int, float))]
                + [(f"grads[{g[0]!r}]", g[2]) for g in grads])
    views = [view(t, where, n, stream) for n, t in zip(names, tensors)]
    entries = []
    for name, kind, value, address in inputs:
        if isinstance(value, (int, float)):
            entries.append((address, kind, float(value) if kind == 0 else 0.0,
                            int(value) if kind == 1 else 0, None))
        else:
            entries.append((address, kind, 0.0, 0,
                            view(value, where, f"inputs[{name!r}]", stream)))
    named = [(address, view(t, where, f"grads[{name!r}]", stream))
             for name, address, t in grads]
    buf, base, at_inputs, at_grads = pack(views, entries, named)
    p = Packed()
    p.buf, p.base, p.at_inputs, p.at_grads = buf, base, at_inputs, at_grads
    p.calls = None
    mv = memoryview(buf).cast("B")  # ctypes' "<c" casts only via bytes
    p.words, p.floats, p.ints = mv.cast("Q"), mv.cast("f"), mv.cast("i")
    ptr, f32, i32 = [], [], []
    for i in range(len(tensors)):
        ptr.append(TENSOR_SIZE * i // 8)
    inputs_at = TENSOR_SIZE * len(tensors)
    for j, (_, kind, value, _) in enumerate(inputs):
        at = inputs_at + INPUT_SIZE * j
        if kind == 0:
            f32.append((at + 12) // 4)
        elif kind == 1:
            i32.append((at + 16) // 4)
        else:
            ptr.append((at + 24) // 8)
    grads_at = inputs_at + INPUT_SIZE * len(inputs)
    for j in range(len(grads)):
        ptr.append((grads_at + NAMED_SIZE * j + 8) // 8)
    p.ptr_slots, p.f32_slots, p.i32_slots = ptr, f32, i32
    return p


def fast_inputs(obj, inputs, tensor_type):
    """inputs (name -> number or tensor) of obj's call as pack_torch's
    items (a number's kind, f32 or i32, as declared), or None where the
    generic path must take the call (a name the definition does not declare, a
    number for a tensor input, an object other than a torch tensor: its
    checks give the message)."""
    if not inputs:
        return ()
    items = []
    for name, value in inputs.items():
        address = obj._name_at.get(name)
        if address is None:
            return None
        decl = obj._decl[name]
        kind = type(value)
        if kind is float or kind is int:
            if decl.shape != "scalar":
                return None
            items.append((name, _I32 if decl.dtype == "int32" else _F32,
                          value, address))
        elif isinstance(value, tensor_type):
            items.append((name, _TENSOR, value, address))
        else:
            return None
    return items


def fast_grads(obj, grads, tensor_type):
    """grads (name -> torch tensor) as pack_torch's items, or None."""
    if not grads:
        return ()
    items = []
    for name, value in grads.items():
        address = obj._name_at.get(name)
        if address is None or not isinstance(value, tensor_type):
            return None
        items.append((name, address, value))
    return items


def pack_torch(where, names, tensors, inputs=(), grads=(), stream=0,
               pointers=True):
    """The packed call for torch tensors: names/tensors the call's tensor
    arguments in order; inputs (name, kind, number or tensor, name
    address), kind 0 f32, 1 i32, 2 tensor; grads (name, name address,
    tensor). Tensor i's attnc_tensor is at .base + 32 * i, the inputs at
    .at_inputs, the grads at .at_grads. Valid until this thread's next call
    of the same shape. pointers=False leaves the tensors' data pointers of
    a repeat call to the caller (forward_call writes them)."""
    key = [(t.dtype, t.get_device(), t.shape, t.stride()) for t in tensors]
    if inputs:
        for name, kind, value, address in inputs:
            key.append((address, kind, None if kind != 2 else _meta(value)))
    if grads:
        for name, address, t in grads:
            key.append((address, _meta(t)))
    key = tuple(key)
    cache = _cache()
    p = cache.get(key)
    if p is None:
        p = _build(where, names, tensors, inputs, grads, stream)
        if len(cache) > 256:  # shapes of a long-running process
            cache.clear()
        cache[key] = p
        return p
    if not inputs and not grads:
        if pointers:
            words, slots = p.words, p.ptr_slots
            for i, t in enumerate(tensors):
                words[slots[i]] = t.data_ptr()
        return p
    words = p.words
    slots = p.ptr_slots
    i = 0
    for t in tensors:
        words[slots[i]] = t.data_ptr()
        i += 1
    fi = ii = 0
    for name, kind, value, address in inputs:
        if kind == 2:
            words[slots[i]] = value.data_ptr()
            i += 1
        elif kind == 0:
            p.floats[p.f32_slots[fi]] = float(value)
            fi += 1
        else:
            p.ints[p.i32_slots[ii]] = int(value)
            ii += 1
    for name, address, t in grads:
        words[slots[i]] = t.data_ptr()
        i += 1
    return p
