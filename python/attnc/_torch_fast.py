"""attnc.torch.attention's eager forward in one FFI call: per call shape
(definition, the three tensors' dtype, device, shape and strides, whether
the finals are wanted, the custom inputs' names and kinds) a plan holds the
resolved attention object and an attnc_forward_call packed once, so a
repeat call allocates its outputs (torch.empty_strided with the plan's
shape, strides, dtype and device: one dispatcher call, where
q.new_empty takes two), writes their data pointers, q's, k's and v's, the
scalar values and the stream, and calls attnc_attention_forward_call with
one pointer. The first call of a shape
takes every check of the generic path (the same messages); the C++ runtime
checks every call (docs/python.md, Overhead).

A definition with finals (mha's LSE) needs them written even when the
caller returns none (the runtime requires them); such a call writes them
into a scratch buffer of its plan, one per stream, instead of allocating
them: successive calls on one stream write it in stream order and nothing
reads it. Under CUDA-graph capture a call allocates them afresh (the
graph's pool keeps them as long as the graph), since a replay must never
write into a scratch buffer that a dropped plan gave back; whether the
stream is capturing is asked of CUDA only on a stream other than the
legacy default one (raw handle 0), which never captures."""

import ctypes
import threading

import torch

from . import _fastpack, _lib
from ._tensors import INPUT_SIZE, TENSOR_SIZE

_call = _fastpack.c_forward_call
# The same call without ctypes where the extension attnc._fastcall is
# there (docs/python.md, Overhead): it writes the data pointers and the
# stream itself. None: _call, the words written here.
_forward_call = _lib.forward_call
_backward = _lib.declare("attnc_attention_backward",
                         [ctypes.c_void_p] * 10
                         + [ctypes.c_void_p, ctypes.c_size_t,
                            ctypes.c_void_p, ctypes.c_size_t,
                            ctypes.c_void_p])

# attnc_forward_call's words (attnc_c.h): att, q, k, v, out, finals,
# inputs, num_inputs, mask, stream.
_CallWords = _fastpack.CallWords
_STREAM_WORD = _fastpack.STREAM_WORD

# Plans are per thread: a call writes its plan's buffers and reads them in
# C without the GIL, so another thread must not rewrite them meanwhile.
# _tables lists every thread's table, so a replaced definition (forget)
# drops its plans everywhere.
_local = threading.local()
_tables = []
_tables_lock = threading.Lock()
_MAX_PLANS = 256

_Tensor = torch.Tensor
_F32 = torch.float32
_empty_strided = torch.empty_strided
_empty_like = getattr(torch, "empty_like", None)
_current_device = getattr(torch._C, "_cuda_getDevice",
                          torch.cuda.current_device)
_raw_stream = _fastpack._raw_stream_function()
# Whether the current stream is capturing a CUDA graph (a raw call where
# torch has it: this is on the scratch finals' path).
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing",
                     lambda: torch.cuda.is_current_stream_capturing())


class _Plan:
    """One call shape's packed call; see the module's docstring."""

    __slots__ = ("att", "packed", "words", "floats", "ints", "call",
                 "call_at", "device", "dtype", "torch_device", "out_shape",
                 "out_strides", "finals_shape", "finals_strides",
                 "finals_passed", "returns_finals", "inputs", "scratch")


def _contiguous(shape):
    """The strides of a contiguous tensor of shape, as torch makes them."""
    strides, n = [], 1
    for size in reversed(shape):
        strides.append(n)
        n *= max(size, 1)
    return tuple(reversed(strides))


def _table():
    table = getattr(_local, "plans", None)
    if table is None:
        table = _local.plans = {}
        with _tables_lock:
            _tables.append(table)
    return table


def forget(name=None) -> None:
    """Drops every thread's plans (of definition name: a replaced one)."""
    with _tables_lock:
        for table in _tables:
            for key in [k for k in table if name is None or k[0] == name]:
                del table[key]


def _input_key(inputs):
    """The custom inputs' part of a plan's key: names in the call's order,
    a number's type, a tensor's dtype, device, shape and strides."""
    key = []
    for name, value in inputs.items():
        if isinstance(value, _Tensor):
            key.append((name, value.dtype, value.get_device(), value.shape,
                        value.stride()))
        else:
            key.append((name, type(value)))
    return tuple(key)


def _build(key, name, q, k, v, inputs, want_finals, resolve):
    """The plan of a new call shape, every argument checked as the generic
    path checks it; None where the generic path must take the call (its
    checks give the message: a CPU tensor, an undeclared input, a number
    for a tensor input, a non-number)."""
    if q.get_device() < 0:
        return None
    att = resolve(q, v, name)
    values = {}
    if inputs:
        for n, value in inputs.items():
            decl = att._decl.get(n)
            if decl is None:
                return None
            kind = type(value)
            tensor = isinstance(value, _Tensor)
            if decl.shape == "scalar":
                if tensor:
                    if value.numel() != 1:
                        return None
                    value = value.item()
                elif kind is not float and kind is not int:
                    return None
            elif not tensor:
                return None
            values[n] = value
    items = _fastpack.fast_inputs(att, values, _Tensor)
    if items is None:
        return None
    out = q.new_empty(q.shape[:-1] + (v.shape[-1],))
    finals_shape = (len(att.final_names), q.shape[0], q.shape[1], q.shape[2])
    # The runtime requires the finals of a definition that has them
    # (mha's LSE), whether or not the caller returns them.
    finals_passed = bool(att.final_names)
    tensors = [q, k, v, out]
    if finals_passed:
        tensors.append(q.new_empty(finals_shape, dtype=_F32))
    packed = _fastpack._build(
        "attnc.Attention.forward", ("q", "k", "v", "out", "finals"), tensors,
        items, (), 0)
    p = _Plan()
    p.att, p.packed = att, packed
    p.words, p.floats, p.ints = packed.words, packed.floats, packed.ints
    base = packed.base
    call = _CallWords(att._handle, base, base + TENSOR_SIZE,
                      base + 2 * TENSOR_SIZE, base + 3 * TENSOR_SIZE,
                      base + 4 * TENSOR_SIZE if finals_passed else 0,
                      packed.at_inputs or 0, len(items), 0, 0)
    p.call, p.call_at = call, ctypes.addressof(call)
    p.device = q.get_device()
    p.dtype, p.torch_device = q.dtype, q.device
    p.out_shape = tuple(out.shape)
    # A repeat call's outputs are laid out as the packed ones.
    p.out_strides = tuple(out.stride())
    p.finals_shape = (finals_shape if want_finals or finals_passed
                      else None)
    p.finals_strides = (tuple(tensors[4].stride()) if finals_passed
                        else _contiguous(finals_shape))
    p.returns_finals = want_finals
    p.finals_passed = finals_passed
    # Unreturned finals by raw stream handle (see the module's docstring).
    p.scratch = {}
    # Per input in the call's order: (0 f32 | 1 i32 | 2 tensor, the word
    # or float index its value goes to).
    plan_inputs = []
    slots = packed.ptr_slots[len(tensors):]
    fi = ii = ti = 0
    for _, kind, _, _ in items:
        if kind == 0:
            plan_inputs.append((0, packed.f32_slots[fi]))
            fi += 1
        elif kind == 1:
            plan_inputs.append((1, packed.i32_slots[ii]))
            ii += 1
        else:
            plan_inputs.append((2, slots[ti]))
            ti += 1
    p.inputs = tuple(plan_inputs)
    table = _table()
    if len(table) >= _MAX_PLANS:  # shapes of a long-running process
        table.clear()
    table[key] = p
    return p


def forward(name, q, k, v, inputs, want_finals, resolve):
    """(out, finals or None) of an eager dense call without a block mask
    (bhsd), or None where the generic path must take it. q, k, v are plain
    torch tensors; inputs maps names to numbers or tensors (or is empty);
    resolve(q, v, name) gives the call's Attention (attnc.torch's cache)."""
    device = q.get_device()
    key = (name, q.dtype, k.dtype, v.dtype, device, k.get_device(),
           v.get_device(), q.shape, q.stride(), k.shape, k.stride(),
           v.shape, v.stride(), want_finals,
           _input_key(inputs) if inputs else None)
    table = getattr(_local, "plans", None)
    p = None if table is None else table.get(key)
    if p is None:
        p = _build(key, name, q, k, v, inputs, want_finals, resolve)
        if p is None:
            return None
    if device != _current_device():  # the plan's: the key holds q's device
        return _fastpack.run_on(device, _launch, p, q, k, v, inputs, device)
    return _launch(p, q, k, v, inputs, device)


def _launch(p, q, k, v, inputs, device):
    out = _empty_strided(p.out_shape, p.out_strides, dtype=p.dtype,
                         device=p.torch_device)
    stream = _raw_stream(device)
    finals = None
    finals_at = 0
    if p.returns_finals:
        finals = _empty_strided(p.finals_shape, p.finals_strides, dtype=_F32,
                                device=p.torch_device)
        if p.finals_passed:
            finals_at = finals.data_ptr()
    elif p.finals_passed:
        scratch = p.scratch.get(stream)
        # The legacy default stream (raw handle 0, eager code's usual one)
        # is never capturing: CUDA refuses to capture it, and so does
        # torch.cuda.graph. Only another stream's call asks (a CUDA call).
        if scratch is None or (stream and _capturing()):
            capturing = bool(stream) and _capturing()
            scratch = q.new_empty(p.finals_shape, dtype=_F32)
            if not capturing:
                p.scratch[stream] = scratch
        finals_at = scratch.data_ptr()
    if inputs:
        for (kind, at), value in zip(p.inputs, inputs.values()):
            if kind == 0:
                p.floats[at] = float(value)
            elif kind == 1:
                p.ints[at] = int(value)
            else:
                p.words[at] = value.data_ptr()
    if _forward_call is not None:
        # attnc._fastcall writes the five data pointers and the stream.
        status = _forward_call(p.call_at, q.data_ptr(), k.data_ptr(),
                               v.data_ptr(), out.data_ptr(), finals_at,
                               stream)
    else:
        w = p.words
        w[0] = q.data_ptr()
        w[4] = k.data_ptr()
        w[8] = v.data_ptr()
        w[12] = out.data_ptr()
        if finals_at:
            w[16] = finals_at
        p.call[_STREAM_WORD] = stream
        status = _call(p.call_at)
    if status:
        _lib.check(status)
    return out, finals


# -- under autograd: the forward's plan, and the backward packed per plan ----

def forward_with_plan(name, q, k, v, resolve):
    """(out, finals, plan) of an eager dense call without custom inputs
    that returns its finals (the autograd path's forward), or None where
    the generic path must take it; the plan then packs its backward."""
    key = (name, q.dtype, k.dtype, v.dtype, q.get_device(), k.get_device(),
           v.get_device(), q.shape, q.stride(), k.shape, k.stride(),
           v.shape, v.stride(), True, None)  # forward's key
    table = getattr(_local, "plans", None)
    p = None if table is None else table.get(key)
    if p is None:
        p = _build(key, name, q, k, v, None, True, resolve)
        if p is None:
            return None
    device = p.device
    if device != _current_device():
        out, finals = _fastpack.run_on(device, _launch, p, q, k, v, None,
                                       device)
    else:
        out, finals = _launch(p, q, k, v, None, device)
    return out, finals, p


class _Backward:
    """One (forward plan, dout layout)'s packed attnc_attention_backward:
    its arguments but the stream, and where each tensor's pointer goes."""

    __slots__ = ("packed", "words", "args", "finals_passed")


# Backward packs are per thread (autograd runs a device's backward on that
# device's own thread), keyed by the forward's plan: q, k, v, out and the
# finals are the forward's, dq, dk and dv are like q, k and v, so only
# dout's dtype and strides are new.
_bwd_local = threading.local()


def backward(p, q, k, v, out, dout, finals):
    """(dq, dk, dv) of a call that forward_with_plan ran with plan p (its
    saved q, k, v, out and finals); dout like out, its last dimension
    contiguous. Runs on p's device."""
    if p.device != _current_device():
        return _fastpack.run_on(p.device, backward, p, q, k, v, out, dout,
                                finals)
    # empty_like keeps q's, k's and v's strides (the forward's key).
    dq, dk, dv = _empty_like(q), _empty_like(k), _empty_like(v)
    table = getattr(_bwd_local, "packs", None)
    if table is None:
        table = _bwd_local.packs = {}
    key = (p, dout.dtype, dout.stride())
    b = table.get(key)
    tensors = ((q, k, v, out, dout, finals, dq, dk, dv) if p.finals_passed
               else (q, k, v, out, dout, dq, dk, dv))
    if b is None:
        b = _pack_backward(p, tensors)
        if len(table) >= _MAX_PLANS:
            table.clear()
        table[key] = b
    w = b.words
    at = 0
    for t in tensors:
        w[at] = t.data_ptr()
        at += 4
    status = _backward(*b.args, _raw_stream(p.device))
    if status:
        _lib.check(status)
    return dq, dk, dv


def _pack_backward(p, tensors):
    names = (("q", "k", "v", "out", "dout", "finals", "dq", "dk", "dv")
             if p.finals_passed else
             ("q", "k", "v", "out", "dout", "dq", "dk", "dv"))
    packed = _fastpack._build("attnc.Attention.backward", names, tensors, (),
                              (), 0)
    b = _Backward()
    b.packed, b.words = packed, packed.words
    base = packed.base
    addresses = [base + TENSOR_SIZE * i for i in range(len(tensors))]
    if not p.finals_passed:
        addresses.insert(5, None)
    b.args = (p.att._handle, *addresses, None, 0, None, 0)
    b.finals_passed = p.finals_passed
    return b


# Word offsets above assume attnc_tensor's data pointer first and 32 bytes
# a tensor (checked against ctypes' layout in attnc._attention).
assert TENSOR_SIZE == 32 and INPUT_SIZE == 56
