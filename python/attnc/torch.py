"""PyTorch ops over attnc: attnc.torch.attention, a torch.library custom op
with autograd (attnc's backward kernels, learnable custom inputs included),
fake (meta) shapes for torch.compile, and CUDA-graph-safe calls."""

import threading
from typing import Optional

import torch

from . import _lib
from ._attention import Attention
from ._definition import Definition, example

# Definitions by name: the op's arguments must be plain values, so a
# definition crosses the op boundary as its name and is looked up here.
# attention() fills it; a different definition passed under a name already
# known replaces the earlier one (and its compiled objects).
_definitions = {}
# Attention objects by (name, dtype, head_dim, head_dim_v, layout, device).
_attentions = {}
_lock = threading.Lock()
# Called with a name whose definition register() replaced (under _lock):
# other op families (linear attention) drop their objects of it too.
_on_replace = []


def register(definition) -> str:
    """Makes definition known to the ops by its name (what attention() does
    with a Definition) and returns the name."""
    if isinstance(definition, str):
        return definition
    if not isinstance(definition, Definition):
        raise _lib.InvalidArgument(
            "attnc.torch: argument 'definition': a "
            f"{type(definition).__name__}; expected an attnc.Definition or "
            "an example's name")
    name = definition.name
    if _definitions.get(name) is not definition:
        with _lock:
            _definitions[name] = definition
            for key in [k for k in _attentions if k[0] == name]:
                del _attentions[key]
            for forget in _on_replace:
                forget(name)
    return name


def _definition(name: str) -> Definition:
    found = _definitions.get(name)
    if found is None:
        found = example(name)  # a UserError listing the names if unknown
        _definitions[name] = found
    return found


def _device_index(t: torch.Tensor) -> int:
    if t.device.type != "cuda":
        raise _lib.InvalidArgument(
            f"attnc.torch: q is on {t.device}; attnc runs on CUDA tensors")
    index = t.device.index if t.device.index is not None else 0
    if index != 0:
        raise _lib.NotSupportedYet(
            f"attnc.torch: q is on cuda:{index}; attnc runs on device 0 only "
            "so far (set CUDA_VISIBLE_DEVICES to pick the card)")
    return index


def attention_object(name: str, dtype, head_dim: int, head_dim_v: int,
                     layout: str, device: int) -> Attention:
    """The cached Attention for a call's signature (made on first use)."""
    key = (name, dtype, head_dim, head_dim_v, layout, device)
    att = _attentions.get(key)
    if att is None:
        with _lock:
            att = _attentions.get(key)
            if att is None:
                att = Attention(_definition(name), dtype=dtype,
                                head_dim=head_dim, head_dim_v=head_dim_v,
                                layout=layout)
                _attentions[key] = att
    return att


def _object_for(q, v, name, layout) -> Attention:
    # int(): under dynamic shapes a head dim is a SymInt; kernels are per
    # head dim, so it is specialised (guarded) here.
    return attention_object(name, q.dtype, int(q.shape[-1]),
                            int(v.shape[-1]), layout, _device_index(q))


def _rows(q, layout):
    """(B, H, Sq) of q."""
    if layout == "bhsd":
        return q.shape[0], q.shape[1], q.shape[2]
    return q.shape[0], q.shape[2], q.shape[1]


def _split(names: str):
    """The op's input names: one string, '\n'-separated (custom ops take no
    list of strings)."""
    return names.split("\n") if names else []


def _values(att: Attention, names: str, values):
    """The call's custom inputs: scalars as numbers read on the host (they
    cross the op as 0-d CPU tensors, so a new value is a new tensor value,
    not a new graph), tensors as they are."""
    if not names:
        return None
    decl = att._decl
    inputs = {}
    for name, value in zip(_split(names), values):
        d = decl.get(name)
        if d is not None and d.shape == "scalar":
            inputs[name] = value.item()
        else:
            inputs[name] = value
    return inputs


def _stream(t: torch.Tensor) -> int:
    """The raw handle of the current stream of t's device (no Stream
    object: this is on every call's path)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(t.device.index or 0)
    return torch.cuda.current_stream(t.device).cuda_stream


def _grad_names(att: Attention):
    return [i.name for i in att.inputs if i.requires_grad]


def _grad_shape(att: Attention, name, heads):
    shape = {i.name: i.shape for i in att.inputs}[name]
    return (heads,) if shape == "per_head" else (1,)


@torch.library.custom_op("attnc::attention_fwd", mutates_args=())
def _attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   definition: str, layout: str, input_names: str,
                   input_values: list[torch.Tensor]
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    att = _object_for(q, v, definition, layout)
    out = q.new_empty(q.shape[:-1] + (v.shape[-1],))
    b, h, s = _rows(q, layout)
    finals = q.new_empty((len(att.final_names), b, h, s), dtype=torch.float32)
    att.forward(q, k, v, out, finals if att.final_names else None,
                _values(att, input_names, input_values),
                stream=_stream(q))
    return out, finals


@_attention_fwd.register_fake
def _(q, k, v, definition, layout, input_names, input_values):
    att = _object_for(q, v, definition, layout)
    b, h, s = _rows(q, layout)
    out = q.new_empty(q.shape[:-1] + (v.shape[-1],))
    finals = q.new_empty((len(att.final_names), b, h, s), dtype=torch.float32)
    return out, finals


@torch.library.custom_op("attnc::attention_bwd", mutates_args=())
def _attention_bwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   out: torch.Tensor, dout: torch.Tensor,
                   finals: torch.Tensor, definition: str, layout: str,
                   input_names: str, input_values: list[torch.Tensor]
                   ) -> list[torch.Tensor]:
    att = _object_for(q, v, definition, layout)
    dq, dk, dv = (torch.empty_like(q), torch.empty_like(k),
                  torch.empty_like(v))
    heads = _rows(q, layout)[1]
    grads = {n: q.new_empty(_grad_shape(att, n, heads), dtype=torch.float32)
             for n in _grad_names(att)}
    if dout.stride(-1) != 1:
        dout = dout.contiguous()
    att.backward(q, k, v, out, dout, finals if att.final_names else None,
                 dq, dk, dv, _values(att, input_names, input_values), grads,
                 stream=_stream(q))
    return [dq, dk, dv] + list(grads.values())


@_attention_bwd.register_fake
def _(q, k, v, out, dout, finals, definition, layout, input_names,
      input_values):
    att = _object_for(q, v, definition, layout)
    heads = _rows(q, layout)[1]
    grads = [q.new_empty(_grad_shape(att, n, heads), dtype=torch.float32)
             for n in _grad_names(att)]
    return [torch.empty_like(q), torch.empty_like(k),
            torch.empty_like(v)] + grads


def _input_gradients(ctx, values, names, grads):
    """Autograd's gradients of the custom-input values: the kernel's grads
    (for the inputs called names) where the caller's value wanted one, in
    the value's shape and device; None elsewhere."""
    by_name = dict(zip(names, grads))
    dvalues = []
    for name, value, wants in zip(_split(ctx.input_names), values,
                                  ctx.wants_grad):
        g = by_name.get(name)
        dvalues.append(None if g is None or not wants
                       else g.reshape(value.shape).to(value.device))
    return dvalues


def _setup_context(ctx, inputs, output):
    q, k, v, definition, layout, input_names, input_values = inputs
    out, finals = output
    ctx.definition, ctx.layout = definition, layout
    ctx.input_names = input_names
    # Read here, where the inputs are the caller's: saved tensors may come
    # back detached (under torch.compile's AOT autograd).
    ctx.wants_grad = [t.requires_grad for t in input_values]
    ctx.save_for_backward(q, k, v, out, finals, *input_values)


def _backward(ctx, dout, dfinals):
    # The finals (LSE) are outputs without a gradient: attnc's backward
    # kernels take dO only, so a loss must not depend on them.
    q, k, v, out, finals, *values = ctx.saved_tensors
    result = _attention_bwd(q, k, v, out, dout, finals, ctx.definition,
                            ctx.layout, ctx.input_names, values)
    dq, dk, dv = result[:3]
    att = _object_for(q, v, ctx.definition, ctx.layout)
    dvalues = _input_gradients(ctx, values, _grad_names(att), result[3:])
    return dq, dk, dv, None, None, None, dvalues


_attention_fwd.register_autograd(_backward, setup_context=_setup_context)


def _as_tensor(value):
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _lib.InvalidArgument(
            "attnc.torch.attention: argument 'inputs': values are numbers or "
            f"tensors, not {type(value).__name__}")
    # A Python number becomes a 0-d CPU tensor; see docs/python.md on why a
    # tensor is the better way to pass a scalar that changes under
    # torch.compile.
    dtype = torch.int32 if isinstance(value, int) else torch.float32
    return torch.tensor(value, dtype=dtype)


def _check_layout(where: str, layout) -> None:
    if layout not in ("bhsd", "bshd"):
        raise _lib.InvalidArgument(
            f"{where}: argument 'layout': {layout!r} is not 'bhsd' or 'bshd'")


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, definition,
              inputs: Optional[dict] = None, layout: str = "bhsd",
              return_finals: bool = False):
    """out = attention(q, k, v) for definition (an attnc.Definition or an
    example's name), differentiable in q, k, v and in tensor custom inputs
    that require grad where the definition declares requiresGrad.

    layout "bhsd" (q [B,H,Sq,D], as scaled_dot_product_attention) or "bshd"
    ([B,Sq,H,D]). inputs maps custom-input names to numbers or tensors; a
    scalar input is best given as a 0-d CPU tensor (a new value then never
    recompiles under torch.compile). With return_finals, (out, finals):
    finals is [F,B,H,Sq] float32, the definition's final rowscales (the
    softmax's LSE), without a gradient."""
    _check_layout("attnc.torch.attention", layout)
    name = register(definition)
    names = list(inputs.keys()) if inputs else []
    values = [_as_tensor(inputs[n]) for n in names]
    out, finals = _attention_fwd(q, k, v, name, layout, "\n".join(names),
                                 values)
    return (out, finals) if return_finals else out


from ._torch_linear import linear_attention  # noqa: E402,F401  (needs the helpers above)
