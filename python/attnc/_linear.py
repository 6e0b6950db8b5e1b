"""attnc.LinearAttention: a linear-attention definition compiled for a
signature, called on device tensors (zero copy) on the caller's stream."""

from __future__ import annotations

import ctypes

from . import _lib
from ._attention import (_ARCHS, _dtype_code, _text, constructor_args,
                         pack_call, read_declared_inputs)


class _LinearSignature(ctypes.Structure):
    _fields_ = [
        ("dtype", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("head_dim_v", ctypes.c_int32),
        ("layout", ctypes.c_int32),
        ("arch", ctypes.c_int32),
        ("tune", ctypes.c_int32),
        ("skeleton", ctypes.c_char_p),
        ("config", ctypes.c_char_p),
        ("tune_file", ctypes.c_char_p),
    ]


_vp, _sz = ctypes.c_void_p, ctypes.c_size_t
_create = _lib.declare("attnc_linear_attention_create", [_vp, _vp, _vp])
_release = _lib.declare("attnc_linear_attention_release", [_vp], None)
_input_count = _lib.declare("attnc_linear_attention_input_count", [_vp, _vp])
_input_info = _lib.declare("attnc_linear_attention_input_info",
                           [_vp, _sz, _vp])
_uses_decay = _lib.declare("attnc_linear_attention_uses_decay", [_vp, _vp])
_forward = _lib.declare("attnc_linear_attention_forward",
                        [_vp] * 6 + [_vp, _sz, _vp, _vp, _vp])
_backward = _lib.declare("attnc_linear_attention_backward",
                         [_vp] * 13 + [_vp, _sz, _vp, _sz, _vp])
_forward_varlen = _lib.declare("attnc_linear_attention_forward_varlen",
                               [_vp] * 7 + [_vp, _sz, _vp, _vp, _vp])
_backward_varlen = _lib.declare("attnc_linear_attention_backward_varlen",
                                [_vp] * 14 + [_vp, _sz, _vp, _sz, _vp])
_LAYOUTS = {"bshd": 0, "bhsd": 1}


class LinearAttention:
    """A linear-attention definition compiled for a signature (C++
    attn::runtime::LinearAttention, docs/linear.md): q [B,T,Hq,D], k
    [B,T,Hk,D], v and out [B,T,H,DV] for layout "bshd" (heads before T for
    "bhsd"); decay [B,H,T] float32 where uses_decay; states [B,H,D,DV]
    float32. The _varlen calls take a packed batch of sequences laid end to
    end (docs/linear.md)."""

    def __init__(self, definition, dtype="float16", head_dim=128,
                 head_dim_v=None, layout="bshd", arch=None, skeleton=None,
                 config=None, tune_file=None, tune=False):
        self._handle = None
        handle = constructor_args("attnc.LinearAttention", definition, layout,
                                  _LAYOUTS, arch)
        sig = _LinearSignature(
            dtype=_dtype_code(dtype, "attnc.LinearAttention"),
            head_dim=int(head_dim),
            head_dim_v=int(head_dim if head_dim_v is None else head_dim_v),
            layout=_LAYOUTS[layout], arch=_ARCHS[arch], tune=int(bool(tune)),
            skeleton=_text(skeleton), config=_text(config),
            tune_file=_text(tune_file))
        out = ctypes.c_void_p()
        _lib.check(_create(handle, ctypes.byref(sig), ctypes.byref(out)))
        self._handle = out.value
        self.definition = definition
        self.layout = layout
        self.arch = arch
        read_declared_inputs(self, _input_count, _input_info)
        uses = ctypes.c_int32()
        _lib.check(_uses_decay(self._handle, ctypes.byref(uses)))
        self.uses_decay = bool(uses.value)

    def __del__(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            _release(handle)

    def __repr__(self):
        return (f"attnc.LinearAttention({self.definition.name!r}, "
                f"layout={self.layout!r})")

    def forward(self, q, k, v, out, decay=None, inputs=None,
                initial_state=None, final_state=None, stream=None):
        """out (and final_state, when given) of the recurrence on stream."""
        keep, a, at_inputs, _, n_in, _, s = pack_call(
            self, "attnc.LinearAttention.forward", stream, _FORWARD_NAMES,
            (q, k, v, out, decay, initial_state, final_state), inputs, None)
        _lib.check(_forward(self._handle, *a[:5], at_inputs, n_in, a[5],
                            a[6], s))

    def backward(self, q, k, v, decay, dout, dq, dk, dv, inputs=None,
                 grads=None, initial_state=None, dfinal_state=None,
                 ddecay=None, dinitial_state=None, stream=None):
        """dq, dk, dv (and ddecay, dinitial_state and the input gradients
        in grads, where given) of sum(out * dout)."""
        keep, a, at_inputs, at_grads, n_in, n_grads, s = pack_call(
            self, "attnc.LinearAttention.backward", stream, _BACKWARD_NAMES,
            (q, k, v, decay, dout, initial_state, dfinal_state, dq, dk, dv,
             ddecay, dinitial_state), inputs, grads)
        _lib.check(_backward(self._handle, *a, at_inputs, n_in, at_grads,
                             n_grads, s))

    def forward_varlen(self, q, k, v, out, cu_seqlens, decay=None,
                       inputs=None, initial_state=None, final_state=None,
                       stream=None):
        """out (and final_state, when given) of a packed batch: q [T,Hq,D],
        k [T,Hk,D], v and out [T,H,DV] (T the tokens of all sequences),
        cu_seqlens int32 [B+1] on the device, decay [1,H,T] float32,
        per-token inputs [1,H,T], states [B,H,D,DV] float32 (one per
        sequence)."""
        keep, a, at_inputs, _, n_in, _, s = pack_call(
            self, "attnc.LinearAttention.forward_varlen", stream,
            _FORWARD_VARLEN_NAMES,
            (q, k, v, out, decay, cu_seqlens, initial_state, final_state),
            inputs, None)
        _lib.check(_forward_varlen(self._handle, *a[:6], at_inputs, n_in,
                                   a[6], a[7], s))

    def backward_varlen(self, q, k, v, decay, dout, cu_seqlens, dq, dk, dv,
                        inputs=None, grads=None, initial_state=None,
                        dfinal_state=None, ddecay=None, dinitial_state=None,
                        stream=None):
        """The gradients of forward_varlen, as backward's (ddecay [1,H,T],
        dinitial_state [B,H,D,DV]); each sequence's are those of that
        sequence run alone."""
        keep, a, at_inputs, at_grads, n_in, n_grads, s = pack_call(
            self, "attnc.LinearAttention.backward_varlen", stream,
            _BACKWARD_VARLEN_NAMES,
            (q, k, v, decay, dout, cu_seqlens, initial_state, dfinal_state,
             dq, dk, dv, ddecay, dinitial_state), inputs, grads)
        _lib.check(_backward_varlen(self._handle, *a, at_inputs, n_in,
                                    at_grads, n_grads, s))


_FORWARD_NAMES = ("q", "k", "v", "out", "decay", "initial_state",
                  "final_state")
_BACKWARD_NAMES = ("q", "k", "v", "decay", "dout", "initial_state",
                   "dfinal_state", "dq", "dk", "dv", "ddecay",
                   "dinitial_state")
_FORWARD_VARLEN_NAMES = ("q", "k", "v", "out", "decay", "cu_seqlens",
                         "initial_state", "final_state")
_BACKWARD_VARLEN_NAMES = ("q", "k", "v", "decay", "dout", "cu_seqlens",
                          "initial_state", "dfinal_state", "dq", "dk", "dv",
                          "ddecay", "dinitial_state")
