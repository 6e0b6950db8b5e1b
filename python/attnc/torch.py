"""PyTorch ops over attnc: attnc.torch.attention, a torch.library custom op
with autograd (attnc's backward kernels, learnable custom inputs included),
fake (meta) shapes for torch.compile, and CUDA-graph-safe calls. Eager
calls skip torch.library's dispatch: they run the same implementation
through a torch.autograd.Function (docs/python.md, Overhead)."""

import threading
from typing import List, Optional, Tuple

import torch

from . import _block_mask, _fastpack, _lib, _torch_args, _torch_fast
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
            _torch_fast.forget(name)
    return name


def _definition(name: str) -> Definition:
    found = _definitions.get(name)
    if found is None:
        found = example(name)  # a UserError listing the names if unknown
        _definitions[name] = found
    return found


def _device_index(t: torch.Tensor) -> int:
    """The device of a call's tensors (q's; the packing checks the rest):
    InvalidArgument for a CPU tensor."""
    index = t.get_device()
    if index < 0:
        _fastpack.call_device("attnc.torch", [("q", t)])
    return index


# torch's current device, by the raw call where torch has it (on every
# call's path: torch.cuda.current_device adds a lazy-initialisation check).
_current_device = getattr(torch._C, "_cuda_getDevice",
                          torch.cuda.current_device)


def _on_device(index: int):
    """A context manager making cuda:index current (its primary context on
    this thread, where the runtime then launches) for a call's duration."""
    return torch.cuda.device(index)


def attention_object(name: str, dtype, head_dim: int, head_dim_v: int,
                     layout: str, device: int) -> Attention:
    """The cached Attention for a call's signature (made on first use), one
    per device: an object runs in the context of its first call, and
    without an arch builds for the device current when it is made."""
    key = (name, dtype, head_dim, head_dim_v, layout, device)
    att = _attentions.get(key)
    if att is None:
        with _lock, _on_device(device):
            att = _attentions.get(key)
            if att is None:
                att = Attention(_definition(name), dtype=dtype,
                                head_dim=head_dim, head_dim_v=head_dim_v,
                                layout=layout)
                _attentions[key] = att
    return att


def _object_for(q, v, name, layout) -> Attention:
    # A plain dict hit on the hot path; int(): under dynamic shapes a head
    # dim is a SymInt, and kernels are per head dim, so it is specialised
    # (guarded) here.
    d, dv = int(q.shape[-1]), int(v.shape[-1])
    att = _attentions.get((name, q.dtype, d, dv, layout, q.get_device()))
    if att is not None:
        return att
    return attention_object(name, q.dtype, d, dv, layout, _device_index(q))


def _resolve(q, v, name) -> Attention:
    """The dense bhsd call's object (_torch_fast's resolver)."""
    return _object_for(q, v, name, "bhsd")


def _rows(q, layout):
    """(B, H, Sq) of q."""
    if layout == "bhsd":
        return q.shape[0], q.shape[1], q.shape[2]
    return q.shape[0], q.shape[2], q.shape[1]


def _heads(q, layout):
    return q.shape[2] if layout == "bshd" else q.shape[1]


def _finals_shape(att, q, layout):
    """[F,B,H,Sq], or [F,H,Tq] for a packed batch."""
    if layout == "thd":
        return (len(att.final_names), q.shape[1], q.shape[0])
    b, h, s = _rows(q, layout)
    return (len(att.final_names), b, h, s)


def _split(names: str):
    """The op's input names: one string, '\n'-separated (custom ops take no
    list of strings)."""
    return names.split("\n") if names else []


def _scalar_or_tensor(att, name, value):
    """A custom input's value as the call passes it: a scalar input's
    tensor read on the host (a 0-d CPU tensor: no synchronisation)."""
    d = att._decl.get(name)
    if d is not None and d.shape == "scalar":
        return value.item()
    return value


def _values(att: Attention, names: str, values):
    """The call's custom inputs: scalars as numbers read on the host (they
    cross the op as 0-d CPU tensors, so a new value is a new tensor value,
    not a new graph), tensors as they are."""
    if not names:
        return None
    return {name: _scalar_or_tensor(att, name, value)
            for name, value in zip(_split(names), values)}


def _stream(t: torch.Tensor) -> int:
    """The raw handle of the current stream of t's device."""
    return _fastpack.stream_of(t.get_device())


def _grad_names(att: Attention):
    return [i.name for i in att.inputs if i.requires_grad]


def _grad_shape(att: Attention, name, heads):
    shape = {i.name: i.shape for i in att.inputs}[name]
    return (heads,) if shape == "per_head" else (1,)


def _varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    if cu_seqlens_q is None:
        return None
    return (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)


def _run_forward(att, layout, q, k, v, inputs, mask, varlen):
    """(out, finals) of one call; inputs: name -> number or tensor (None
    for none), mask a BlockMask or None, varlen (cu_seqlens_q,
    cu_seqlens_k, max_seqlen_q, max_seqlen_k) or None. Runs with q's
    device current (att is that device's object)."""
    index = q.get_device()
    if index != _current_device() and index >= 0:
        return _fastpack.run_on(index, _run_forward, att, layout, q, k, v,
                                inputs, mask, varlen)
    out = q.new_empty(q.shape[:-1] + (v.shape[-1],))
    finals = q.new_empty(_finals_shape(att, q, layout), dtype=_F32)
    f = finals if att.final_names else None
    if varlen is None:
        att.forward_torch(q, k, v, out, f, inputs, mask,
                          _raw_stream(q.get_device()), _Tensor)
    else:
        att.forward_varlen(q, k, v, out, f, *varlen, inputs)
    return out, finals


def _run_backward(att, layout, q, k, v, out, dout, finals, inputs, mask,
                  varlen):
    """(dq, dk, dv, {input name: gradient}) of one call, with q's device
    current."""
    index = q.get_device()
    if index != _current_device() and index >= 0:
        return _fastpack.run_on(index, _run_backward, att, layout, q, k, v,
                                out, dout, finals, inputs, mask, varlen)
    dq, dk, dv = (torch.empty_like(q), torch.empty_like(k),
                  torch.empty_like(v))
    heads = _heads(q, layout)
    grads = {n: q.new_empty(_grad_shape(att, n, heads), dtype=torch.float32)
             for n in _grad_names(att)}
    if dout.stride(-1) != 1:
        dout = dout.contiguous()
    f = finals if att.final_names else None
    if varlen is None:
        att.backward(q, k, v, out, dout, f, dq, dk, dv, inputs, grads,
                     block_mask=mask)
    else:
        att.backward_varlen(q, k, v, out, dout, f, dq, dk, dv, *varlen,
                            inputs, grads)
    return dq, dk, dv, grads


# -- the op (torch.compile, FakeTensor, any dispatch mode) --------------------

@torch.library.custom_op("attnc::attention_fwd", mutates_args=())
def _attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   definition: str, layout: str, input_names: str,
                   input_values: List[torch.Tensor],
                   cu_seqlens_q: Optional[torch.Tensor],
                   cu_seqlens_k: Optional[torch.Tensor], max_seqlen_q: int,
                   max_seqlen_k: int, block_mask: int
                   ) -> Tuple[torch.Tensor, torch.Tensor]:
    att = _object_for(q, v, definition, layout)
    mask = _block_mask.by_id("attnc.torch.attention", block_mask)
    return _run_forward(att, layout, q, k, v,
                        _values(att, input_names, input_values), mask,
                        _varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                max_seqlen_k))


@_attention_fwd.register_fake
def _(q, k, v, definition, layout, input_names, input_values, cu_seqlens_q,
      cu_seqlens_k, max_seqlen_q, max_seqlen_k, block_mask):
    att = _object_for(q, v, definition, layout)
    out = q.new_empty(q.shape[:-1] + (v.shape[-1],))
    finals = q.new_empty(_finals_shape(att, q, layout), dtype=torch.float32)
    return out, finals


@torch.library.custom_op("attnc::attention_bwd", mutates_args=())
def _attention_bwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   out: torch.Tensor, dout: torch.Tensor,
                   finals: torch.Tensor, definition: str, layout: str,
                   input_names: str, input_values: List[torch.Tensor],
                   cu_seqlens_q: Optional[torch.Tensor],
                   cu_seqlens_k: Optional[torch.Tensor], max_seqlen_q: int,
                   max_seqlen_k: int, block_mask: int
                   ) -> List[torch.Tensor]:
    att = _object_for(q, v, definition, layout)
    mask = _block_mask.by_id("attnc.torch.attention", block_mask)
    dq, dk, dv, grads = _run_backward(
        att, layout, q, k, v, out, dout, finals,
        _values(att, input_names, input_values), mask,
        _varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k))
    return [dq, dk, dv] + list(grads.values())


@_attention_bwd.register_fake
def _(q, k, v, out, dout, finals, definition, layout, input_names,
      input_values, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
      block_mask):
    att = _object_for(q, v, definition, layout)
    heads = _heads(q, layout)
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
    (q, k, v, definition, layout, input_names, input_values, cu_seqlens_q,
     cu_seqlens_k, max_seqlen_q, max_seqlen_k, block_mask) = inputs
    out, finals = output
    ctx.definition, ctx.layout = definition, layout
    ctx.input_names = input_names
    ctx.lengths = (max_seqlen_q, max_seqlen_k)
    ctx.block_mask = block_mask
    # Read here, where the inputs are the caller's: saved tensors may come
    # back detached (under torch.compile's AOT autograd).
    ctx.wants_grad = [t.requires_grad for t in input_values]
    ctx.save_for_backward(q, k, v, out, finals, cu_seqlens_q, cu_seqlens_k,
                          *input_values)


def _backward(ctx, dout, dfinals):
    # The finals (LSE) are outputs without a gradient: attnc's backward
    # kernels take dO only, so a loss must not depend on them.
    q, k, v, out, finals, cu_q, cu_k, *values = ctx.saved_tensors
    result = _attention_bwd(q, k, v, out, dout, finals, ctx.definition,
                            ctx.layout, ctx.input_names, values, cu_q, cu_k,
                            ctx.lengths[0], ctx.lengths[1], ctx.block_mask)
    dq, dk, dv = result[:3]
    att = _object_for(q, v, ctx.definition, ctx.layout)
    dvalues = _input_gradients(ctx, values, _grad_names(att), result[3:])
    return (dq, dk, dv, None, None, None, dvalues, None, None, None, None,
            None)


_attention_fwd.register_autograd(_backward, setup_context=_setup_context)


# -- eager calls: the same implementation without torch.library's dispatch --

class _Call:
    """What an eager call's forward and backward share besides tensors."""

    __slots__ = ("att", "name", "layout", "mask", "varlen", "numbers",
                 "tensor_names", "raw", "return_finals")

    def inputs(self, tensor_values):
        """The custom inputs as _run_forward takes them."""
        if not self.tensor_names:
            return self.numbers
        inputs = dict(self.numbers) if self.numbers else {}
        att = self.att
        for name, value in zip(self.tensor_names, tensor_values):
            inputs[name] = _scalar_or_tensor(att, name, value)
        return inputs


def _dense_call(att, name, return_finals):
    """The _Call of a dense bhsd call without custom inputs or a block mask:
    nothing in it changes from one call to the next, so att keeps one per
    return_finals (the autograd path's per-call Python then is the
    Function's own)."""
    cache = att.__dict__.setdefault("_torch_dense_calls", {})
    call = cache.get((name, return_finals))
    if call is None:
        call = _Call()
        call.att, call.name, call.layout = att, name, "bhsd"
        call.mask = call.varlen = call.numbers = call.raw = None
        call.tensor_names, call.return_finals = (), return_finals
        cache[(name, return_finals)] = call
    return call


class _EagerAttention(torch.autograd.Function):
    """An eager call under autograd. The finals (LSE) are saved for the
    backward, not an output unless the call returns them: an output costs
    autograd's bookkeeping on every call."""

    @staticmethod
    def forward(ctx, call, q, k, v, *tensor_values):
        fast = None
        ctx.plan = None
        if call.mask is None and call.varlen is None and call.layout == "bhsd":
            if call.raw:
                fast = _torch_fast.forward(call.name, q, k, v, call.raw, True,
                                           _resolve)
            else:  # the backward too is packed once, per forward plan
                fast = _torch_fast.forward_with_plan(call.name, q, k, v,
                                                     _resolve)
                if fast is not None:
                    ctx.plan = fast[2]
                    fast = fast[:2]
        if fast is not None:
            out, finals = fast
        else:
            out, finals = _run_forward(call.att, call.layout, q, k, v,
                                       call.inputs(tensor_values), call.mask,
                                       call.varlen)
        ctx.call = call
        ctx.save_for_backward(q, k, v, out, finals, *tensor_values)
        if call.return_finals:
            ctx.mark_non_differentiable(finals)
            return out, finals
        return out

    @staticmethod
    def backward(ctx, dout, dfinals=None):
        q, k, v, out, finals, *values = ctx.saved_tensors
        if ctx.plan is not None:
            if dout.stride(-1) != 1:
                dout = dout.contiguous()
            dq, dk, dv = _torch_fast.backward(ctx.plan, q, k, v, out, dout,
                                              finals)
            return (None, dq, dk, dv)
        call = ctx.call
        dq, dk, dv, grads = _run_backward(call.att, call.layout, q, k, v, out,
                                          dout, finals, call.inputs(values),
                                          call.mask, call.varlen)
        dvalues = []
        for name, value, wants in zip(call.tensor_names, values,
                                      ctx.needs_input_grad[4:]):
            g = grads.get(name)
            dvalues.append(None if g is None or not wants
                           else g.reshape(value.shape).to(value.device))
        return (None, dq, dk, dv, *dvalues)


_Tensor = torch.Tensor
_F32 = torch.float32
_raw_stream = _fastpack._raw_stream_function()
_is_compiling = torch.compiler.is_compiling
# Dispatch modes, FakeTensorMode's included (without the count, every call
# takes the op).
_dispatch_modes = getattr(torch._C, "_len_torch_dispatch_stack", lambda: 1)
_function_modes = getattr(torch._C, "_is_torch_function_mode_enabled", None)
_grad_enabled = torch.is_grad_enabled


def _plain(q, k, v) -> bool:
    """Whether a call may skip torch.library: plain tensors (no FakeTensor
    or other subclass) and no dispatch or function mode (FakeTensorMode,
    a FLOP counter) that must see the op."""
    return (type(q) is _Tensor and type(k) is _Tensor and type(v) is _Tensor
            and _dispatch_modes() == 0
            and not (_function_modes is not None and _function_modes()))


def _input_wants_grad(inputs) -> bool:
    """Whether a tensor custom input requires grad."""
    for value in inputs.values():
        if isinstance(value, _Tensor) and value.requires_grad:
            return True
    return False


def _eager(name, q, k, v, inputs, layout, mask, varlen, return_finals):
    """(out, finals) of an eager call (finals None where autograd runs it
    and return_finals is off)."""
    att = _attentions.get((name, q.dtype, q.shape[-1], v.shape[-1], layout,
                           q.get_device()))
    if att is None:
        att = _object_for(q, v, name, layout)
    numbers, tensor_names, tensor_values = None, (), ()
    if inputs:
        numbers, tensor_names, tensor_values = {}, [], []
        for n, value in inputs.items():
            if isinstance(value, _Tensor):
                tensor_names.append(n)
                tensor_values.append(value)
            else:
                _torch_args.check_input_value("attnc.torch.attention", n,
                                              value)
                numbers[n] = value
    if _grad_enabled() and (q.requires_grad or k.requires_grad
                            or v.requires_grad
                            or any(t.requires_grad for t in tensor_values)):
        _torch_args.check_mask_for_backward("attnc.torch.attention", mask,
                                            True)
        call = _Call()
        call.att, call.layout, call.mask, call.varlen = (att, layout, mask,
                                                         varlen)
        call.name, call.raw = name, inputs
        call.numbers, call.tensor_names = numbers, tensor_names
        call.return_finals = return_finals
        result = _EagerAttention.apply(call, q, k, v, *tensor_values)
        return result if return_finals else (result, None)
    if tensor_names:
        for n, value in zip(tensor_names, tensor_values):
            numbers[n] = _scalar_or_tensor(att, n, value)
    return _run_forward(att, layout, q, k, v, numbers, mask, varlen)


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


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, definition,
              inputs: Optional[dict] = None, layout: Optional[str] = None,
              return_finals: bool = False, block_mask=None,
              cu_seqlens_q: Optional[torch.Tensor] = None,
              cu_seqlens_k: Optional[torch.Tensor] = None,
              max_seqlen_q: Optional[int] = None,
              max_seqlen_k: Optional[int] = None):
    """out = attention(q, k, v) for definition (an attnc.Definition or an
    example's name), differentiable in q, k, v and in tensor custom inputs
    that require grad where the definition declares requiresGrad.

    layout "bhsd" (q [B,H,Sq,D], as scaled_dot_product_attention; the
    default) or "bshd" ([B,Sq,H,D]); a packed variable-length batch is
    "thd" (the default when cu_seqlens_q is given): q [Tq,H,D], k and v
    [Tk,Hk,D], int32 cu_seqlens_q/cu_seqlens_k of B+1 offsets on the
    device and the longest lengths max_seqlen_q/max_seqlen_k. block_mask:
    an attnc.BlockMask of the definition's mask for this call's shape
    (made with for_backward=True where gradients are asked for); the call
    launches no classification. inputs maps custom-input names to numbers
    or tensors; a scalar input is best given as a 0-d CPU tensor (a new
    value then never recompiles under torch.compile). With return_finals,
    (out, finals): finals is [F,B,H,Sq] ([F,H,Tq] packed) float32, the
    definition's final rowscales (the softmax's LSE), without a
    gradient."""
    where = "attnc.torch.attention"
    if ((layout is None or layout == "bhsd") and block_mask is None
            and cu_seqlens_q is None and cu_seqlens_k is None
            and max_seqlen_q is None and max_seqlen_k is None):
        layout = "bhsd"  # the common call, without the checks' call
        if (not _is_compiling() and type(q) is _Tensor
                and type(k) is _Tensor and type(v) is _Tensor
                and _dispatch_modes() == 0
                and not (_function_modes is not None and _function_modes())
                and not (_grad_enabled()
                         and (q.requires_grad or k.requires_grad
                              or v.requires_grad
                              or (inputs and _input_wants_grad(inputs))))):
            # An eager call that no gradient needs: one packed C call for a
            # call shape seen before (attnc/_torch_fast.py).
            name = (definition if type(definition) is str
                    else register(definition))
            fast = _torch_fast.forward(name, q, k, v, inputs, return_finals,
                                      _resolve)
            if fast is not None:
                return fast if return_finals else fast[0]
        elif (not inputs and not _is_compiling() and type(q) is _Tensor
                and type(k) is _Tensor and type(v) is _Tensor
                and _dispatch_modes() == 0
                and not (_function_modes is not None and _function_modes())):
            # An eager call under autograd without custom inputs: the
            # Function straight away, its forward the packed call.
            name = (definition if type(definition) is str
                    else register(definition))
            att = _attentions.get((name, q.dtype, q.shape[-1], v.shape[-1],
                                   "bhsd", q.get_device()))
            if att is not None:
                return _EagerAttention.apply(
                    _dense_call(att, name, return_finals), q, k, v)
    else:
        layout = _torch_args.check_call(where, layout, cu_seqlens_q,
                                        cu_seqlens_k, max_seqlen_q,
                                        max_seqlen_k, block_mask)
    name = definition if type(definition) is str else register(definition)
    varlen = (None if cu_seqlens_q is None else
              (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k))
    if (not _is_compiling() and type(q) is _Tensor and type(k) is _Tensor
            and type(v) is _Tensor and _dispatch_modes() == 0
            and not (_function_modes is not None and _function_modes())):
        # What _plain checks, inline: this is every eager call's path.
        out, finals = _eager(name, q, k, v, inputs, layout, block_mask,
                             varlen, return_finals)
        return (out, finals) if return_finals else out
    names = list(inputs.keys()) if inputs else []
    values = [_as_tensor(inputs[n]) for n in names]
    mask_id = 0
    if block_mask is not None:
        _torch_args.check_mask_for_backward(
            where, block_mask,
            torch.is_grad_enabled() and (q.requires_grad or k.requires_grad
                                         or v.requires_grad))
        mask_id = block_mask.torch_id
    out, finals = _attention_fwd(q, k, v, name, layout, "\n".join(names),
                                 values, cu_seqlens_q, cu_seqlens_k,
                                 max_seqlen_q or 0, max_seqlen_k or 0,
                                 mask_id)
    return (out, finals) if return_finals else out


from ._torch_linear import linear_attention  # noqa: E402,F401  (needs the helpers above)
from ._torch_paged import (  # noqa: E402,F401  (needs the helpers above)
    paged_append, paged_decode, paged_kv, paged_prefill, plan_paged_decode,
    plan_paged_prefill)
from ._torch_paged_varlen import (  # noqa: E402,F401
    paged_decode_varlen, plan_paged_decode_varlen)
from ._torch_block_mask import create_block_mask  # noqa: E402,F401
