"""attnc.torch.linear_attention: a torch.library custom op over
attnc.LinearAttention, with autograd (q, k, v, the decay, the initial state
and learnable custom inputs), fake shapes for torch.compile, the final
state as a second output, and packed batches (cu_seqlens: forward_varlen
and backward_varlen, one state a sequence)."""

import threading
from typing import List, Optional, Tuple

import torch

from . import _fastpack, _linear_args, _torch_args
from ._linear import LinearAttention
from .torch import (_Call, _as_tensor, _current_device, _definition,
                    _device_index, _grad_names, _input_gradients,
                    _is_compiling, _on_device, _on_replace, _plain, _values,
                    register)

# LinearAttention objects by (name, dtype, head_dim, head_dim_v, layout,
# device); attnc.torch.register drops a replaced definition's objects.
_linears = {}
_lock = threading.Lock()


def _forget(name):
    for key in [k for k in _linears if k[0] == name]:
        del _linears[key]


_on_replace.append(_forget)


def _object_for(q, v, name, layout) -> LinearAttention:
    if layout == "thd":  # the packed calls take [T,heads,dim] in any layout
        layout = "bshd"
    key = (name, q.dtype, int(q.shape[-1]), int(v.shape[-1]), layout,
           q.get_device())
    att = _linears.get(key)
    if att is None:
        _device_index(q)
        # Made with its device current: without an arch an object builds
        # for the device current when it is made.
        with _lock, _on_device(key[5]):
            att = _linears.get(key)
            if att is None:
                att = LinearAttention(_definition(name), dtype=q.dtype,
                                      head_dim=key[2], head_dim_v=key[3],
                                      layout=layout)
                _linears[key] = att
    return att


def _shape(q, v, layout):
    """(B, T, H) of v (the value heads: the state's heads); a packed batch
    ("thd") is one row of T tokens."""
    if layout == "thd":
        return 1, v.shape[0], v.shape[1]
    if layout == "bshd":
        return v.shape[0], v.shape[1], v.shape[2]
    return v.shape[0], v.shape[2], v.shape[1]


def _grad_buffer(att, name, q, v, layout):
    b, t, h = _shape(q, v, layout)
    shape = att._decl[name].shape
    dims = {"scalar": (1,), "per_head": (h,), "per_row": (b, h, t)}[shape]
    return q.new_empty(dims, dtype=torch.float32)


def _state_shape(q, v, layout, cu_seqlens=None):
    """[B,H,D,DV]; B the sequences of cu_seqlens for a packed batch."""
    b, _, h = _shape(q, v, layout)
    if cu_seqlens is not None:
        b = cu_seqlens.shape[0] - 1
    return (b, h, q.shape[-1], v.shape[-1])


def _run_forward(att, layout, q, k, v, decay, initial_state, inputs,
                 cu_seqlens=None):
    index = q.get_device()
    if index != _current_device() and index >= 0:  # as attention's calls
        return _fastpack.run_on(index, _run_forward, att, layout, q, k, v,
                                decay, initial_state, inputs, cu_seqlens)
    out = torch.empty_like(v)
    final = q.new_empty(_state_shape(q, v, layout, cu_seqlens),
                        dtype=torch.float32)
    decay = decay if att.uses_decay else None
    if cu_seqlens is not None:
        att.forward_varlen(q, k, v, out, cu_seqlens, decay, inputs,
                           initial_state=initial_state, final_state=final)
    else:
        att.forward(q, k, v, out, decay, inputs,
                    initial_state=initial_state, final_state=final)
    return out, final


def _run_backward(att, layout, q, k, v, decay, initial_state, dout, dfinal,
                  inputs, cu_seqlens=None):
    """dq, dk, dv, ddecay (None without a decay), dinit (None without an
    initial state) and the input gradients by name, with q's device
    current."""
    index = q.get_device()
    if index != _current_device() and index >= 0:
        return _fastpack.run_on(index, _run_backward, att, layout, q, k, v,
                                decay, initial_state, dout, dfinal, inputs,
                                cu_seqlens)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    ddecay = torch.empty_like(decay) if att.uses_decay else None
    dinit = (q.new_empty(_state_shape(q, v, layout, cu_seqlens),
                         dtype=torch.float32)
             if initial_state is not None else None)
    grads = {n: _grad_buffer(att, n, q, v, layout) for n in _grad_names(att)}
    if dout.stride(-1) != 1:
        dout = dout.contiguous()
    if dfinal is not None and not dfinal.is_contiguous():
        dfinal = dfinal.contiguous()
    decay = decay if att.uses_decay else None
    if cu_seqlens is not None:
        att.backward_varlen(q, k, v, decay, dout, cu_seqlens, dq, dk, dv,
                            inputs, grads, initial_state=initial_state,
                            dfinal_state=dfinal, ddecay=ddecay,
                            dinitial_state=dinit)
    else:
        att.backward(q, k, v, decay, dout, dq, dk, dv, inputs, grads,
                     initial_state=initial_state, dfinal_state=dfinal,
                     ddecay=ddecay, dinitial_state=dinit)
    return dq, dk, dv, ddecay, dinit, grads


@torch.library.custom_op("attnc::linear_fwd", mutates_args=())
def _linear_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                decay: Optional[torch.Tensor],
                initial_state: Optional[torch.Tensor],
                cu_seqlens: Optional[torch.Tensor], definition: str,
                layout: str, input_names: str,
                input_values: List[torch.Tensor]
                ) -> Tuple[torch.Tensor, torch.Tensor]:
    att = _object_for(q, v, definition, layout)
    return _run_forward(att, layout, q, k, v, decay, initial_state,
                        _values(att, input_names, input_values), cu_seqlens)


@_linear_fwd.register_fake
def _(q, k, v, decay, initial_state, cu_seqlens, definition, layout,
      input_names, input_values):
    return (torch.empty_like(v),
            q.new_empty(_state_shape(q, v, layout, cu_seqlens),
                        dtype=torch.float32))


@torch.library.custom_op("attnc::linear_bwd", mutates_args=())
def _linear_bwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                decay: Optional[torch.Tensor],
                initial_state: Optional[torch.Tensor],
                cu_seqlens: Optional[torch.Tensor], dout: torch.Tensor,
                dfinal: Optional[torch.Tensor], definition: str, layout: str,
                input_names: str, input_values: List[torch.Tensor]
                ) -> List[torch.Tensor]:
    att = _object_for(q, v, definition, layout)
    dq, dk, dv, ddecay, dinit, grads = _run_backward(
        att, layout, q, k, v, decay, initial_state, dout, dfinal,
        _values(att, input_names, input_values), cu_seqlens)
    empty = q.new_empty((0,), dtype=torch.float32)
    return [dq, dk, dv, empty if ddecay is None else ddecay,
            empty if dinit is None else dinit] + list(grads.values())


@_linear_bwd.register_fake
def _(q, k, v, decay, initial_state, cu_seqlens, dout, dfinal, definition,
      layout, input_names, input_values):
    att = _object_for(q, v, definition, layout)
    empty = q.new_empty((0,), dtype=torch.float32)
    return [torch.empty_like(q), torch.empty_like(k), torch.empty_like(v),
            torch.empty_like(decay) if att.uses_decay else empty,
            q.new_empty(_state_shape(q, v, layout, cu_seqlens),
                        dtype=torch.float32)
            if initial_state is not None else empty] + [
        _grad_buffer(att, n, q, v, layout) for n in _grad_names(att)]


def _setup_context(ctx, inputs, output):
    (q, k, v, decay, initial_state, cu_seqlens, definition, layout,
     input_names, input_values) = inputs
    ctx.definition, ctx.layout, ctx.input_names = definition, layout, input_names
    ctx.wants_grad = [t.requires_grad for t in input_values]
    ctx.has_decay = decay is not None
    ctx.has_initial = initial_state is not None
    ctx.save_for_backward(q, k, v, decay, initial_state, cu_seqlens,
                          *input_values)


def _backward(ctx, dout, dfinal):
    q, k, v, decay, initial_state, cu_seqlens, *values = ctx.saved_tensors
    if dfinal is not None and not dfinal.is_contiguous():
        dfinal = dfinal.contiguous()
    result = _linear_bwd(q, k, v, decay, initial_state, cu_seqlens, dout,
                         dfinal, ctx.definition, ctx.layout, ctx.input_names,
                         values)
    dq, dk, dv, ddecay, dinit = result[:5]
    att = _object_for(q, v, ctx.definition, ctx.layout)
    dvalues = _input_gradients(ctx, values, _grad_names(att), result[5:])
    return (dq, dk, dv,
            ddecay if ctx.has_decay and ddecay.numel() else None,
            dinit if ctx.has_initial else None,
            None, None, None, None, dvalues)


_linear_fwd.register_autograd(_backward, setup_context=_setup_context)


class _EagerLinear(torch.autograd.Function):
    """linear_attention's eager calls: the op's implementation without
    torch.library's dispatch (as attnc.torch.attention's)."""

    @staticmethod
    def forward(ctx, call, q, k, v, decay, initial_state, *tensor_values):
        out, final = _run_forward(call.att, call.layout, q, k, v, decay,
                                  initial_state, call.inputs(tensor_values),
                                  call.cu_seqlens)
        ctx.call = call
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(q, k, v, decay, initial_state, *tensor_values)
        return out, final

    @staticmethod
    def backward(ctx, dout, dfinal):
        q, k, v, decay, initial_state, *values = ctx.saved_tensors
        call = ctx.call
        if dout is None:  # a loss on the final state only
            dout = torch.zeros_like(v)
        dq, dk, dv, ddecay, dinit, grads = _run_backward(
            call.att, call.layout, q, k, v, decay, initial_state, dout,
            dfinal, call.inputs(values), call.cu_seqlens)
        dvalues = []
        for name, value, wants in zip(call.tensor_names, values,
                                      ctx.needs_input_grad[6:]):
            g = grads.get(name)
            dvalues.append(None if g is None or not wants
                           else g.reshape(value.shape).to(value.device))
        return (None, dq, dk, dv, ddecay if decay is not None else None,
                dinit, *dvalues)


class _LinearCall(_Call):
    """_Call (whose slots are attention's) with a packed batch's offsets."""

    __slots__ = ("cu_seqlens",)


def _eager(name, q, k, v, decay, initial_state, inputs, layout, cu_seqlens):
    call = _LinearCall()
    call.att = _object_for(q, v, name, layout)
    call.layout, call.mask, call.varlen = layout, None, None
    call.cu_seqlens = cu_seqlens
    numbers, tensor_names, tensor_values = None, [], []
    if inputs:
        numbers = {}
        for n, value in inputs.items():
            if isinstance(value, torch.Tensor):
                tensor_names.append(n)
                tensor_values.append(value)
            else:
                _torch_args.check_input_value(
                    "attnc.torch.linear_attention", n, value)
                numbers[n] = value
    call.numbers, call.tensor_names = numbers, tensor_names
    if torch.is_grad_enabled() and any(
            t is not None and t.requires_grad
            for t in [q, k, v, decay, initial_state] + tensor_values):
        return _EagerLinear.apply(call, q, k, v, decay, initial_state,
                                  *tensor_values)
    return _run_forward(call.att, layout, q, k, v, decay, initial_state,
                        call.inputs(tensor_values), cu_seqlens)


def _device_number(t):
    """get_device()'s number (-1 for the CPU) from t.device, which
    torch.compile traces as a constant."""
    return t.device.index if t.device.type == "cuda" else -1


_OFFSET_DTYPES = {torch.int32: "torch.int32", torch.int64: "torch.int64"}


def _packed_offsets(q, k, v, cu_seqlens, initial_state):
    """cu_seqlens as int32 after the checks a packed call needs before it
    allocates (attnc._linear_args); int64 offsets (flash-linear-attention's)
    are converted on the device."""
    dtype = _OFFSET_DTYPES.get(cu_seqlens.dtype)
    if dtype is None:  # only to name it in the error
        dtype = str(cu_seqlens.dtype)
    _linear_args.packed_sequences(
        tuple(q.shape), tuple(k.shape), tuple(v.shape),
        tuple(cu_seqlens.shape), dtype,
        _device_number(cu_seqlens), _device_number(q),
        None if initial_state is None else tuple(initial_state.shape))
    if cu_seqlens.dtype != torch.int32:
        cu_seqlens = cu_seqlens.to(torch.int32)
    return cu_seqlens


def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     definition, decay: Optional[torch.Tensor] = None,
                     inputs: Optional[dict] = None,
                     initial_state: Optional[torch.Tensor] = None,
                     layout: Optional[str] = None,
                     return_final_state: bool = False,
                     cu_seqlens: Optional[torch.Tensor] = None):
    """out = linear_attention(q, k, v, definition, decay) for a linear
    definition (an attnc.Definition or an example's name: "simple_gla",
    "mamba2", "retention_linear"), differentiable in q, k, v, decay,
    initial_state and learnable custom inputs.

    layout "bshd" (the default without cu_seqlens): q, k [B,T,Hq|Hk,D], v
    [B,T,H,DV] (as flash-linear-attention); "bhsd": heads before T. decay
    [B,H,T] float32 where the definition reads it (None otherwise);
    initial_state [B,H,D,DV] float32. With return_final_state, (out,
    final_state [B,H,D,DV] float32), and a loss may depend on the final
    state too.

    cu_seqlens (int32 or int64 [B+1] on q's device, offsets from 0 to T)
    makes the call a packed batch, layout "thd": q [T,Hq,D], k [T,Hk,D], v
    [T,H,DV] hold B sequences end to end, each run on its own (its chunks
    start at its first token, its mods see t from its start); decay and
    per-token inputs [1,H,T]; initial_state and the final state [B,H,D,DV],
    one a sequence. The offsets are read on the device only."""
    layout = _linear_args.layout_of(layout, cu_seqlens is not None)
    if cu_seqlens is not None:
        cu_seqlens = _packed_offsets(q, k, v, cu_seqlens, initial_state)
    name = register(definition)
    if not _is_compiling() and _plain(q, k, v):
        out, final = _eager(name, q, k, v, decay, initial_state, inputs,
                            layout, cu_seqlens)
        return (out, final) if return_final_state else out
    names = list(inputs.keys()) if inputs else []
    values = [_as_tensor(inputs[n]) for n in names]
    out, final = _linear_fwd(q, k, v, decay, initial_state, cu_seqlens, name,
                             layout, "\n".join(names), values)
    return (out, final) if return_final_state else out
