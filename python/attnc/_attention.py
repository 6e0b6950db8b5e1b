"""attnc.Attention: a definition compiled for a signature, called on device
tensors (zero copy) on the caller's stream."""

from __future__ import annotations

import ctypes
import sys
from typing import NamedTuple

from . import _block_mask, _fastpack, _lib, _merge
from ._paged import PagedCalls
from ._fastpack import fast_grads, fast_inputs
from ._tensors import (BF16, F16, I32, INPUT_SIZE, NAMED_SIZE, TENSOR_SIZE,
                       CTensor, pack, view)

_SHAPE_NAMES = ("scalar", "per_head", "per_row", "per_key", "full",
                "per_query_token", "per_key_token")
_LAYOUTS = {"bshd": 0, "bhsd": 1, "thd": 2}
_ARCHS = {None: 0, "sm_80": 80, "sm_86": 86, "sm_89": 89, "sm_90a": 90}
_ARCH_NAMES = {80: "sm_80", 86: "sm_86", 89: "sm_89", 90: "sm_90a"}
_DTYPES = {"float16": F16, "f16": F16, "half": F16, "torch.float16": F16,
           "bfloat16": BF16, "bf16": BF16, "torch.bfloat16": BF16}

_INPUT_F32, _INPUT_I32, _INPUT_TENSOR = 0, 1, 2
_FORWARD_NAMES = ("q", "k", "v", "out", "finals")
_BACKWARD_NAMES = ("q", "k", "v", "out", "dout", "finals", "dq", "dk", "dv")
_VARLEN_FORWARD_NAMES = _FORWARD_NAMES + ("cu_seqlens_q", "cu_seqlens_kv")


class _Signature(ctypes.Structure):
    _fields_ = [
        ("dtype", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("head_dim_v", ctypes.c_int32),
        ("layout", ctypes.c_int32),
        ("arch", ctypes.c_int32),
        ("needs_backward", ctypes.c_int32),
        ("skeleton", ctypes.c_char_p),
        ("config", ctypes.c_char_p),
        ("backward_config", ctypes.c_char_p),
        ("tune_file", ctypes.c_char_p),
        ("tune", ctypes.c_int32),
        ("backend", ctypes.c_char_p),
    ]


class _Input(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("kind", ctypes.c_int32),
        ("f32", ctypes.c_float),
        ("i32", ctypes.c_int32),
        ("tensor", CTensor),
    ]


class _NamedTensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("tensor", CTensor)]


class _Varlen(ctypes.Structure):
    _fields_ = [
        ("cu_seqlens_q", CTensor),
        ("cu_seqlens_kv", CTensor),
        ("max_seqlen_q", ctypes.c_int64),
        ("max_seqlen_kv", ctypes.c_int64),
    ]


# The calls write these structs with struct (_tensors.pack); ctypes' layout
# of the same declarations must agree.
if ((ctypes.sizeof(CTensor), ctypes.sizeof(_Input), _Input.tensor.offset,
     ctypes.sizeof(_NamedTensor), _NamedTensor.tensor.offset)
        != (TENSOR_SIZE, INPUT_SIZE, 24, NAMED_SIZE, 8)):
    raise ImportError("attnc: the C structs' layout is not the one "
                      "_tensors.pack writes")


class _InputInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("shape", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("requires_grad", ctypes.c_int32),
    ]


class InputInfo(NamedTuple):
    """A custom input as the definition declares it."""

    name: str
    shape: str  # "scalar", "per_head", "per_row", ...
    dtype: str  # "float32" or "int32"
    requires_grad: bool


_vp, _sz = ctypes.c_void_p, ctypes.c_size_t
_create = _lib.declare("attnc_attention_create", [_vp, _vp, _vp])
_release = _lib.declare("attnc_attention_release", [_vp], None)
_input_count = _lib.declare("attnc_attention_input_count", [_vp, _vp])
_input_info = _lib.declare("attnc_attention_input_info", [_vp, _sz, _vp])
_final_count = _lib.declare("attnc_attention_final_count", [_vp, _vp])
_final_name = _lib.declare("attnc_attention_final_name", [_vp, _sz, _vp])
_arch = _lib.declare("attnc_attention_arch", [_vp, _vp])
_forward = _lib.declare("attnc_attention_forward", [_vp] * 6 + [_vp, _sz, _vp])
_backward = _lib.declare(
    "attnc_attention_backward", [_vp] * 10 + [_vp, _sz, _vp, _sz, _vp])
_forward_masked = _lib.declare(
    "attnc_attention_forward_masked", [_vp] * 6 + [_vp, _sz, _vp, _vp])
_backward_masked = _lib.declare(
    "attnc_attention_backward_masked",
    [_vp] * 10 + [_vp, _sz, _vp, _sz, _vp, _vp])
_forward_varlen = _lib.declare(
    "attnc_attention_forward_varlen", [_vp] * 7 + [_vp, _sz, _vp])
_backward_varlen = _lib.declare(
    "attnc_attention_backward_varlen", [_vp] * 11 + [_vp, _sz, _vp, _sz, _vp])


def current_stream() -> int:
    """The stream a call runs on when none is given: PyTorch's current
    stream when torch is imported and has initialised CUDA, else 0 (the
    default stream)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        # The raw handle without a Stream object (a few microseconds less),
        # of the current device: the runtime launches in its context
        # (runtime/lib/CudaDriver.cpp).
        device = torch.cuda.current_device()
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return raw(device)
        return torch.cuda.current_stream(device).cuda_stream
    return 0


def _stream(stream) -> int:
    if stream is None:
        return current_stream()
    if isinstance(stream, int):
        return stream
    for attribute in ("cuda_stream", "ptr", "handle"):
        value = getattr(stream, attribute, None)
        if isinstance(value, int):
            return value
    raise _lib.InvalidArgument(
        f"attnc: argument 'stream': a {type(stream).__name__}; expected an "
        "int (a CUstream), an object with .cuda_stream (torch.cuda.Stream) "
        "or None")


def _dtype_code(dtype, where="attnc.Attention") -> int:
    code = _DTYPES.get(str(dtype))
    if code is None:
        raise _lib.InvalidArgument(
            f"{where}: argument 'dtype': {dtype!r} is not float16 or "
            "bfloat16")
    return code


def _read_inputs(handle, count_fn, info_fn):
    """The custom inputs an object's definition declares."""
    count = ctypes.c_size_t()
    _lib.check(count_fn(handle, ctypes.byref(count)))
    infos = []
    for i in range(count.value):
        info = _InputInfo()
        _lib.check(info_fn(handle, i, ctypes.byref(info)))
        infos.append(InputInfo(
            info.name.decode(), _SHAPE_NAMES[info.shape],
            "int32" if info.dtype == I32 else "float32",
            bool(info.requires_grad)))
    return tuple(infos)


def _name_address(obj, name, keep):
    """The address of name's NUL-terminated bytes (obj's declared names
    live as long as obj; others as long as keep)."""
    address = obj._name_at.get(name)
    if address is None:
        text = ctypes.create_string_buffer(str(name).encode())
        keep.append(text)
        address = ctypes.addressof(text)
    return address


def input_entries(obj, where, inputs, stream, keep):
    """The call's attnc_input entries (see _tensors.pack) for inputs (name
    -> number or tensor): a number's kind follows obj's declaration."""
    if not inputs:
        return ()
    entries = []
    for name, value in inputs.items():
        address = _name_address(obj, name, keep)
        decl = obj._decl.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if decl is not None and decl.shape != "scalar":
                raise _lib.InvalidArgument(
                    f"{where}: argument 'inputs[{name!r}]': a number for "
                    f"the {decl.shape} input '{name}'; expected a tensor")
            if (decl.dtype == "int32" if decl is not None
                    else isinstance(value, int)):
                entries.append((address, _INPUT_I32, 0.0, int(value), None))
            else:
                entries.append((address, _INPUT_F32, float(value), 0, None))
            continue
        entries.append((address, _INPUT_TENSOR, 0.0, 0,
                        view(value, where, f"inputs[{name!r}]", stream)))
    return entries


def grad_entries(obj, where, grads, stream, keep):
    """The call's attnc_named_tensor entries for grads (name -> tensor)."""
    if not grads:
        return ()
    return [(_name_address(obj, name, keep),
             view(value, where, f"grads[{name!r}]", stream))
            for name, value in grads.items()]


def fast_call(tensors, stream, where="attnc"):
    """(torch module, stream) when every tensor of a call is a CUDA torch
    tensor (None entries aside), so _fastpack can pack it; None: the
    generic path takes it. stream None: the current stream of the tensors'
    device. InvalidArgument when the tensors are not on the current device
    (the runtime launches in its context; q's device is checked here, the
    others against q's when the call shape is packed)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    tensor_type = torch.Tensor
    first = None
    for t in tensors:
        if t is None:
            continue
        if not (isinstance(t, tensor_type) and t.is_cuda):
            return None
        if first is None:
            first = t
    index = first.get_device()
    _fastpack.check_current(where, index, _fastpack.current_device())
    if stream is None:
        return torch, _fastpack.stream_of(index)
    return torch, _stream(stream)


def pack_call(obj, where, stream, names, objs, inputs, grads):
    """A call's packed structs, for obj (an Attention or LinearAttention):
    (what keeps them alive, the address of each of objs' attnc_tensors
    (None for an absent one), of the inputs, of the grads, the number of
    inputs and of grads, the stream). Torch tensors take _fastpack's
    patched buffers; anything else is viewed and checked here."""
    fast = fast_call(objs, stream, where)
    if fast is not None:
        items = fast_inputs(obj, inputs, fast[0].Tensor)
        named = fast_grads(obj, grads, fast[0].Tensor)
        if items is not None and named is not None:
            s = fast[1]
            present = [(n, t) for n, t in zip(names, objs) if t is not None]
            p = _fastpack.pack_torch(where, [n for n, _ in present],
                                     [t for _, t in present], items, named,
                                     s)
            a, i = [], 0
            for t in objs:
                a.append(None if t is None else p.base + 32 * i)
                i += t is not None
            return (p, a, p.at_inputs, p.at_grads, len(items), len(named),
                    s)
    s = _stream(stream)
    tensors, at = [], []
    for name, t in zip(names, objs):
        if t is None:
            at.append(None)
        else:
            at.append(32 * len(tensors))
            tensors.append(view(t, where, name, s))
    keep = []
    entries = input_entries(obj, where, inputs, s, keep)
    named = grad_entries(obj, where, grads, s, keep)
    buf, base, at_inputs, at_grads = pack(tensors, entries, named)
    a = [None if x is None else base + x for x in at]
    return ((buf, keep), a, at_inputs, at_grads, len(entries), len(named),
            s)


def _text(value):
    return None if value is None else str(value).encode()


def constructor_args(where, definition, layout, layouts, arch):
    """The definition's handle, once definition, layout (one of layouts)
    and arch are checked; InvalidArgument naming the one that is wrong."""
    handle = getattr(definition, "handle", None)
    if not handle:
        raise _lib.InvalidArgument(
            f"{where}: argument 'definition': a "
            f"{type(definition).__name__}; expected an attnc.Definition")
    if layout not in layouts:
        names = [repr(n) for n in layouts]
        raise _lib.InvalidArgument(
            f"{where}: argument 'layout': {layout!r} is not one of "
            f"{', '.join(names)}")
    if arch not in _ARCHS:
        raise _lib.InvalidArgument(
            f"{where}: argument 'arch': {arch!r} is not None, "
            "'sm_80', 'sm_86', 'sm_89' or 'sm_90a'")
    return handle


def read_declared_inputs(obj, input_count, input_info):
    """obj.inputs, obj._decl by name, and the declared names as C strings
    made once (calls pass their addresses: obj._name_at)."""
    obj.inputs = _read_inputs(obj._handle, input_count, input_info)
    obj._decl = {i.name: i for i in obj.inputs}
    obj._name_text = [ctypes.create_string_buffer(i.name.encode())
                      for i in obj.inputs]
    obj._name_at = {i.name: ctypes.addressof(t)
                    for i, t in zip(obj.inputs, obj._name_text)}


class Attention(PagedCalls):
    """A definition compiled for a signature (C++ attn::runtime::Attention).

    dtype: "float16"/"bfloat16" (or the torch dtypes); layout: "bshd"
    ([B,S,H,D]), "bhsd" ([B,H,S,D]) or "thd" (the varlen calls); arch: None
    for the current device's, or "sm_80", "sm_86", "sm_89", "sm_90a"
    (compiles with no GPU). The kernel is compiled (or read from the cache)
    here. Calls run in the context of the first one's current device: on
    cuda:N make and call the object with N current."""

    def __init__(self, definition, dtype="float16", head_dim=128,
                 head_dim_v=None, layout="bshd", arch=None, skeleton=None,
                 config=None, backward_config=None, needs_backward=False,
                 tune_file=None, tune=False, backend=None):
        self._handle = None
        handle = constructor_args("attnc.Attention", definition, layout,
                                  _LAYOUTS, arch)
        sig = _Signature(
            dtype=_dtype_code(dtype), head_dim=int(head_dim),
            head_dim_v=int(head_dim if head_dim_v is None else head_dim_v),
            layout=_LAYOUTS[layout], arch=_ARCHS[arch],
            needs_backward=int(bool(needs_backward)),
            skeleton=_text(skeleton), config=_text(config),
            backward_config=_text(backward_config),
            tune_file=_text(tune_file), tune=int(bool(tune)),
            backend=_text(backend))
        out = ctypes.c_void_p()
        _lib.check(_create(handle, ctypes.byref(sig), ctypes.byref(out)))
        self._handle = out.value
        self.definition = definition
        self.layout = layout
        self.head_dim = int(head_dim)
        self.head_dim_v = sig.head_dim_v
        read_declared_inputs(self, _input_count, _input_info)
        self.final_names = self._read_finals()
        code = ctypes.c_int32()
        _lib.check(_arch(self._handle, ctypes.byref(code)))
        self.arch = _ARCH_NAMES[code.value]

    def _read_finals(self):
        count = ctypes.c_size_t()
        _lib.check(_final_count(self._handle, ctypes.byref(count)))
        names = []
        for i in range(count.value):
            name = ctypes.c_char_p()
            _lib.check(_final_name(self._handle, i, ctypes.byref(name)))
            names.append(name.value.decode())
        return tuple(names)

    def __del__(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            _release(handle)

    def __repr__(self):
        return (f"attnc.Attention({self.definition.name!r}, "
                f"head_dim={self.head_dim}, head_dim_v={self.head_dim_v}, "
                f"layout={self.layout!r}, arch={self.arch!r})")

    # -- calls -------------------------------------------------------------

    def forward(self, q, k, v, out, finals=None, inputs=None, stream=None,
                block_mask=None):
        """out (and finals, [F,B,H,Sq] float32, the final rowscales named
        by final_names) = attention(q, k, v) on stream (None: the current
        stream of the tensors' device, see current_stream). block_mask: a
        BlockMask of this attention's mask and the call's shape; no
        classification runs."""
        where = "attnc.Attention.forward"
        mask = _block_mask.mask_handle(where, block_mask)
        fast = fast_call((q, k, v, out, finals), stream, where)
        if fast is not None:
            items = fast_inputs(self, inputs, fast[0].Tensor)
            if items is not None:
                s = fast[1]
                tensors = [q, k, v, out]
                if finals is not None:
                    tensors.append(finals)
                p = _fastpack.pack_torch(where, _FORWARD_NAMES, tensors,
                                         items, (), s, False)
                status = _fastpack.forward_call(p, self._handle, len(items),
                                                mask, s, q, k, v, out, finals)
                if status:
                    _lib.check(status)
                return
        s = _stream(stream)
        tensors = [view(q, where, "q", s), view(k, where, "k", s),
                   view(v, where, "v", s), view(out, where, "out", s)]
        if finals is not None:
            tensors.append(view(finals, where, "finals", s))
        keep = []
        entries = input_entries(self, where, inputs, s, keep)
        buf, base, at_inputs, _ = pack(tensors, entries)
        self._launch_forward(base, finals is not None, at_inputs,
                             len(entries), mask, s)

    def forward_torch(self, q, k, v, out, finals, inputs, block_mask, stream,
                      tensor_type):
        """forward for attnc.torch: torch tensors (q, k, v of type
        tensor_type, out and finals made for them), a BlockMask or None,
        the raw stream. A tensor on another device than the packing of its
        call shape was checked for is a new call shape, checked anew."""
        items = fast_inputs(self, inputs, tensor_type) if inputs else ()
        if items is None:
            self.forward(q, k, v, out, finals, inputs, stream, block_mask)
            return
        if finals is None:
            p = _fastpack.pack_torch("attnc.Attention.forward",
                                     _FORWARD_NAMES, (q, k, v, out), items,
                                     (), stream, False)
        else:
            p = _fastpack.pack_torch("attnc.Attention.forward",
                                     _FORWARD_NAMES, (q, k, v, out, finals),
                                     items, (), stream, False)
        status = _fastpack.forward_call(
            p, self._handle, len(items),
            None if block_mask is None else block_mask._handle, stream,
            q, k, v, out, finals)
        if status:
            _lib.check(status)

    def _launch_forward(self, base, has_finals, at_inputs, n_inputs, mask,
                        s):
        at_finals = base + 128 if has_finals else None
        if mask is not None:
            _lib.check(_forward_masked(
                self._handle, base, base + 32, base + 64, base + 96,
                at_finals, at_inputs, n_inputs, mask, s))
            return
        _lib.check(_forward(self._handle, base, base + 32, base + 64,
                            base + 96, at_finals, at_inputs, n_inputs, s))

    def backward(self, q, k, v, out, dout, finals, dq, dk, dv, inputs=None,
                 grads=None, stream=None, block_mask=None):
        """dq, dk, dv and grads (input name -> float32 tensor, for each input
        that requires a gradient) of sum(out * dout). out may be None when
        the variant's backward does not read it. block_mask: one made with
        for_backward=True."""
        where = "attnc.Attention.backward"
        mask = _block_mask.mask_handle(where, block_mask)
        keep, a, at_inputs, at_grads, n_in, n_grads, s = pack_call(
            self, where, stream, _BACKWARD_NAMES,
            (q, k, v, out, dout, finals, dq, dk, dv), inputs, grads)
        if mask is not None:
            _lib.check(_backward_masked(self._handle, *a, at_inputs, n_in,
                                        at_grads, n_grads, mask, s))
            return
        _lib.check(_backward(self._handle, *a, at_inputs, n_in, at_grads,
                             n_grads, s))

    def merge_kind(self):
        """(kind, reason): how this variant's results merge ("sum",
        "log-sum-exp", or "none" and why not; attnc._merge)."""
        return _merge.merge_kind(self)

    def merge_results(self, outs, finals, out, out_finals=None, stream=None):
        """out (and out_finals) = the merge of 2 to 8 partial results of
        disjoint key sets (outs[i] with finals[i]) by the derived rule; a
        UserError saying why for a variant whose results do not merge."""
        _merge.merge_results(self, outs, finals, out, out_finals, stream)

    # -- block masks ---------------------------------------------------------

    def make_block_mask(self, batch, heads, seq_q, seq_kv, inputs=None,
                        for_backward=False, heads_kv=None, stream=None):
        """The block classification of this attention's mask for calls of
        [batch, heads, seq_q, seq_kv] with inputs, made on stream: an
        attnc.BlockMask to pass as block_mask= to any number of forward
        calls (and, with for_backward, backward calls) of that shape, of
        this or another Attention of the same mask and signature."""
        where = "attnc.Attention.make_block_mask"
        s = _stream(stream)
        keep = []
        entries = input_entries(self, where, inputs, s, keep)
        buf, _, at_inputs, _ = pack([], entries)
        return _block_mask.make(self, where, batch, heads, seq_q, seq_kv,
                                entries, for_backward, heads_kv, s,
                                at_inputs if entries else None)

    def refresh_block_mask(self, block_mask, inputs=None, stream=None):
        """Classifies block_mask (one make_block_mask made for this mask)
        again with new inputs, into its own memory."""
        where = "attnc.Attention.refresh_block_mask"
        s = _stream(stream)
        keep = []
        entries = input_entries(self, where, inputs, s, keep)
        buf, _, at_inputs, _ = pack([], entries)
        _block_mask.refresh(self, where, block_mask, entries, s,
                            at_inputs if entries else None)

    def block_mask_from_lists(self, batch, heads, seq_q, seq_kv,
                              kv_num_blocks, kv_indices,
                              full_kv_num_blocks=None, full_kv_indices=None,
                              block_q=128, block_kv=128, for_backward=False,
                              heads_kv=None):
        """A BlockMask from FlexAttention's lists (host int32: nested
        sequences, NumPy arrays or torch tensors): kv_num_blocks [B,H,QB]
        and kv_indices [B,H,QB,KB] of the partial blocks, and optionally
        the full blocks' lists (no mask evaluation there); B and H are the
        call's or 1. Every field is checked (the message names it)."""
        return _block_mask.from_lists(
            self, "attnc.Attention.block_mask_from_lists", batch, heads,
            seq_q, seq_kv, kv_num_blocks, kv_indices, full_kv_num_blocks,
            full_kv_indices, block_q, block_kv, for_backward, heads_kv)

    @staticmethod
    def _check_cu_seqlens(where, cu_seqlens_q, cu_seqlens_kv):
        for name, t in (("cu_seqlens_q", cu_seqlens_q),
                        ("cu_seqlens_kv", cu_seqlens_kv)):
            if t is None:
                raise _lib.InvalidArgument(
                    f"{where}: argument '{name}': None; expected an int32 "
                    "device tensor of B+1 entries")

    @staticmethod
    def _varlen(at_cu, max_seqlen_q, max_seqlen_kv):
        """The batch's attnc_varlen: the two cu_seqlens attnc_tensors packed
        at at_cu (their shapes live in the same buffer) and the longest
        lengths."""
        batch = _Varlen()
        ctypes.memmove(ctypes.addressof(batch), at_cu,
                       2 * ctypes.sizeof(CTensor))
        batch.max_seqlen_q = int(max_seqlen_q)
        batch.max_seqlen_kv = int(max_seqlen_kv)
        return batch

    def forward_varlen(self, q, k, v, out, finals, cu_seqlens_q,
                       cu_seqlens_kv, max_seqlen_q, max_seqlen_kv,
                       inputs=None, stream=None):
        """The forward of a packed variable-length batch (layout "thd"):
        q/out [Tq,H,D], k/v [Tkv,Hkv,D], finals [F,H,Tq], int32 cu_seqlens
        of B+1 entries."""
        where = "attnc.Attention.forward_varlen"
        self._check_cu_seqlens(where, cu_seqlens_q, cu_seqlens_kv)
        tensors = (q, k, v, out, finals, cu_seqlens_q, cu_seqlens_kv)
        fast = fast_call(tensors, stream, where)
        items = None
        if fast is not None:
            items = fast_inputs(self, inputs, fast[0].Tensor)
        if items is not None:
            s = fast[1]
            present = [(n, t) for n, t in zip(_VARLEN_FORWARD_NAMES, tensors)
                       if t is not None]
            p = _fastpack.pack_torch(where, [n for n, _ in present],
                                     [t for _, t in present], items, (), s)
            base, at_inputs, n_inputs = p.base, p.at_inputs, len(items)
        else:
            s = _stream(stream)
            views = [view(t, where, n, s)
                     for n, t in zip(_VARLEN_FORWARD_NAMES, tensors)
                     if t is not None]
            keep = []
            entries = input_entries(self, where, inputs, s, keep)
            p = pack(views, entries)
            base, at_inputs, n_inputs = p[1], p[2], len(entries)
        at_cu = base + 32 * (4 if finals is None else 5)
        batch = self._varlen(at_cu, max_seqlen_q, max_seqlen_kv)
        _lib.check(_forward_varlen(
            self._handle, base, base + 32, base + 64, base + 96,
            base + 128 if finals is not None else None, ctypes.byref(batch),
            at_inputs, n_inputs, s))

    def backward_varlen(self, q, k, v, out, dout, finals, dq, dk, dv,
                        cu_seqlens_q, cu_seqlens_kv, max_seqlen_q,
                        max_seqlen_kv, inputs=None, grads=None, stream=None):
        """The backward of a packed variable-length batch."""
        where = "attnc.Attention.backward_varlen"
        self._check_cu_seqlens(where, cu_seqlens_q, cu_seqlens_kv)
        keep, a, at_inputs, at_grads, n_in, n_grads, s = pack_call(
            self, where, stream, _BACKWARD_NAMES + ("cu_seqlens_q",
                                                    "cu_seqlens_kv"),
            (q, k, v, out, dout, finals, dq, dk, dv, cu_seqlens_q,
             cu_seqlens_kv), inputs, grads)
        batch = self._varlen(a[9], max_seqlen_q, max_seqlen_kv)
        _lib.check(_backward_varlen(
            self._handle, *a[:9], ctypes.byref(batch), at_inputs,
            n_in, at_grads, n_grads, s))
