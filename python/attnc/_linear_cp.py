"""attnc.distributed.linear_attention_cp: linear attention over a sequence
held in contiguous shards across the ranks of a torch.distributed process
group, one pass each way: every rank runs its shard from a zero state, the
ranks all-gather their shards' final states and state transforms, each
scans them to its initial state and adds that state's contribution to its
output; backward, an all-gather of the initial states' gradients and the
reverse scan give each rank its final state's gradient for its one
backward pass. The torch-free parts (which definitions, the mods'
evaluator, the scans) are in _linear_cp_plan. See docs/distributed.md."""

from __future__ import annotations

import torch
import torch.distributed as dist

from . import _lib
from . import _linear_cp_plan as lplan
from . import torch as _attnc_torch

__all__ = ["linear_attention_cp"]

_LWHERE = "attnc.distributed.linear_attention_cp"
_linear_support = {}


def _group_info(group):
    if not dist.is_available() or not dist.is_initialized():
        raise _lib.UserError(
            f"{_LWHERE}: torch.distributed is not initialised (launch with "
            "torchrun and call torch.distributed.init_process_group)")
    return dist.get_world_size(group), dist.get_rank(group)


def _support_of(name):
    definition = _attnc_torch._definition(name)
    entry = _linear_support.get(name)
    if entry is None or entry[0] is not definition:
        entry = _linear_support[name] = (
            definition, lplan.linear_cp_support(definition, _LWHERE))
    return entry[1]


def _decays(support, decay, inputs, q_dim, v, layout):
    """(G, A): the cumulative log decay G_t = Σ_{s<=t} g_s within this shard
    [B,H,T] float32 (None without a decay_mod) and the shard's state
    transform A = exp(G_T) [B,H] float32, from the decay_mod evaluated in
    torch (summed in float64), so that autograd reaches the decay and the
    custom inputs through torch's own ops."""
    b, h = v.shape[0], v.shape[2 if layout == "bshd" else 1]
    g = lplan.decay_log(
        support, lplan.backend_of(torch), decay, inputs or {}, b, h,
        int(q_dim), lambda n: torch.arange(n, device=v.device))
    if g is None:
        return None, v.new_ones((b, h), dtype=torch.float32)
    t = v.shape[1 if layout == "bshd" else 2]
    if not isinstance(g, torch.Tensor):
        g = torch.tensor(float(g), device=v.device)
    cum = torch.cumsum(g.to(torch.float64).expand(b, h, t), -1)
    return cum.to(torch.float32), torch.exp(cum[..., -1]).to(torch.float32)


def _scale(support, cum, q, v, inputs, layout):
    """exp(G_t)·Π f [B,H,T] float32 where q_mod(x) = x·Π f, or None for
    exp(G_t) = 1 and q_mod(x) = x (a number where it is one)."""
    b, h = v.shape[0], v.shape[2 if layout == "bshd" else 1]
    f = lplan.q_scale(support, lplan.backend_of(torch), inputs or {}, b, h,
                      int(q.shape[-1]),
                      lambda n: torch.arange(n, device=v.device))
    decayed = None if cum is None else torch.exp(cum)
    if f is None:
        return decayed
    if decayed is None:
        return f
    return decayed * f


def _contribution(support, out, q, v, state, cum, inputs, layout):
    """out + exp(G_t)·q_mod(q_t)·S_in, the passed state's contribution to
    the shard's output (the rest of out is the shard's from a zero state):
    one batched matrix product of q (its heads grouped: value heads of one q
    head side by side in the product's columns) with S_in in q's dtype
    (float32 accumulation), scaled per token and added to out in one
    elementwise pass. Torch ops, so autograd gives the gradients: dS_in =
    Σ_t (exp(G_t)·q_mod(q_t))ᵀ dO_t, dq += exp(G_t)·dO_t·S_inᵀ through
    q_mod, and the decay's and the inputs' through G and the scale."""
    bshd = layout == "bshd"
    b, t, h, dv = ((v.shape[0], v.shape[1], v.shape[2], v.shape[3]) if bshd
                   else (v.shape[0], v.shape[2], v.shape[1], v.shape[3]))
    hq, d = q.shape[2 if bshd else 1], q.shape[-1]
    qh = q.transpose(1, 2) if bshd else q  # [B,Hq,T,D]
    if support.q_scale is not None:
        scale = _scale(support, cum, q, v, inputs, layout)
    else:  # q_mod evaluated on q itself, per value head, in float32
        qf = qh.float()
        if hq != h:
            qf = qf[:, :, None].expand(b, hq, h // hq, t, d).reshape(
                b, h, t, d)
        qh = lplan.q_mod_values(
            support, lplan.backend_of(torch), qf, inputs or {}, b, h, int(d),
            lambda n: torch.arange(n, device=v.device)).to(q.dtype)
        hq = h
        scale = None if cum is None else torch.exp(cum)
    g = h // hq
    s = state.to(qh.dtype)
    if g > 1:
        s = s.view(b, hq, g, d, dv).permute(0, 1, 3, 2, 4).reshape(
            b, hq, d, g * dv)
    p = torch.matmul(qh, s).view(b, hq, t, g, dv)
    o5 = (out.view(b, t, hq, g, dv).permute(0, 2, 1, 3, 4) if bshd
          else out.view(b, hq, g, t, dv).permute(0, 1, 3, 2, 4))
    if scale is None:
        res = o5 + p
    else:
        if not isinstance(scale, torch.Tensor):
            scale = torch.tensor(float(scale), device=v.device)
        scale = scale.expand(b, h, t).reshape(b, hq, g, t).permute(
            0, 1, 3, 2)[..., None]
        if out.dtype == torch.bfloat16:  # one rounding of o, in one pass
            res = torch.addcmul(o5, p, scale.to(out.dtype))
        else:  # float16's range: the product in float32
            res = (o5.float() + p.float() * scale).to(out.dtype)
    res = (res.permute(0, 2, 1, 3, 4) if bshd
           else res.permute(0, 1, 3, 2, 4))
    return res.reshape(out.shape)


def _state_in(parts, rank, shape):
    """The scan of the gathered (S_r, A_r) up to rank: its initial state
    (zeros for rank 0) and the transforms."""
    finals = [p[..., :-1].reshape(shape) for p in parts]
    transforms = [p[..., -1] for p in parts]
    state = lplan.initial_state(transforms, finals, rank,
                                lambda a, s: a[..., None, None] * s)
    return (torch.zeros(shape, dtype=torch.float32, device=parts[0].device)
            if state is None else state), transforms


def _pack(final, transform):
    b, h = transform.shape
    return torch.cat([final.reshape(b, h, -1).to(torch.float32),
                      transform[..., None]], -1).contiguous()


class _StatePass(torch.autograd.Function):
    """S_in of this rank from every rank's (S_r, A_r). Forward: one
    all-gather of the packed pairs, then the scan S_in(j+1) = A_j·S_in(j) +
    S_j. Backward: one all-gather of every rank's dS_in, then the reverse
    scan dS_j = dS_in(j+1) + A_{j+1}·dS_{j+1}, which gives this rank the
    gradient of its final state (the dfinal of its one backward pass) and
    of its A (<dS_r, S_in(r)>). Every rank joins both collectives."""

    @staticmethod
    def forward(ctx, final, transform, group, world, rank):
        parts = _gather(_pack(final, transform), group, world)
        state, transforms = _state_in(parts, rank, final.shape)
        ctx.group, ctx.world, ctx.rank = group, world, rank
        ctx.save_for_backward(state, torch.stack(transforms))
        return state

    @staticmethod
    def backward(ctx, dstate):
        state, transforms = ctx.saved_tensors
        grads = _gather(dstate.contiguous(), ctx.group, ctx.world)
        dfinal = lplan.final_state_grad(list(transforms), grads, ctx.rank,
                                        lambda a, s: a[..., None, None] * s)
        if dfinal is None:  # the last rank's S is nobody's input
            return (torch.zeros_like(state), transforms[0].new_zeros(
                transforms[0].shape), None, None, None)
        return dfinal, (dfinal * state).sum((-1, -2)), None, None, None


class _Tie(torch.autograd.Function):
    """out unchanged, made to depend on the passed state: rank 0's output
    does not read it, but its backward must still run the state passing's
    backward (a collective every rank joins), which brings back the
    gradient of its final state from the later ranks."""

    @staticmethod
    def forward(ctx, out, state):
        ctx.shape, ctx.dtype = state.shape, state.dtype
        return out.view_as(out)

    @staticmethod
    def backward(ctx, dout):
        return dout, torch.zeros(ctx.shape, dtype=ctx.dtype,
                                 device=dout.device)


def _gather(x, group, world):
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x, group=group)
    return parts


def linear_attention_cp(q, k, v, definition, decay=None, group=None,
                        inputs=None, initial_state=None, layout=None,
                        return_final_state=False):
    """Linear attention of the whole sequence held in contiguous shards
    across group's ranks (rank r holds tokens [r·T/W, (r+1)·T/W): shard(x,
    dim, causal_layout="contiguous"); the shards may differ in length),
    differentiable in q, k, v, the decay, a first rank's initial state and
    learnable custom inputs. Arguments as attnc.torch.linear_attention's
    for this rank's shard (layout "bshd" by default: q, k [B,T/W,Hq|Hk,D], v
    [B,T/W,H,DV], decay and per_row inputs [B,H,T/W]; per_head and scalar
    inputs whole); initial_state [B,H,D,DV] float32, the sequence's, read
    on rank 0 only. Returns this rank's rows of the output (and, with
    return_final_state, the state after this rank's shard: the last rank's
    is the sequence's).

    One pass each way, every rank at once: each rank runs its shard from a
    zero state (rank 0 from initial_state) for its output and final state
    S_r, all-gathers (S_r, A_r = exp(Σ g_t)) and scans them to its initial
    state S_in, and adds S_in's contribution exp(G_t)·q_mod(q_t)·S_in to
    its output. The backward all-gathers the dS_in of every rank and scans
    them back to each rank's final-state gradient, then runs the shard's
    one backward with it. If any rank's call needs gradients, every rank's
    must, and every rank must call backward. Refused (NotSupportedYet):
    mods reading the token index t, a decay that is not one number per
    token."""
    lay = layout if layout is not None else "bshd"
    if lay not in ("bshd", "bhsd"):
        raise _lib.InvalidArgument(
            f"{_LWHERE}: layout '{lay}' is not one of 'bshd', 'bhsd'")
    name = _attnc_torch.register(definition)
    support = _support_of(name)
    world, rank = _group_info(group)
    run = _attnc_torch.linear_attention
    grads = torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad
        for t in [q, k, v, decay, initial_state] + list(
            (inputs or {}).values()))
    if world == 1:
        return run(q, k, v, name, decay, inputs, initial_state, lay,
                   return_final_state)
    out, final = run(q, k, v, name, decay, inputs,
                     initial_state if rank == 0 else None, lay, True)
    cum, transform = _decays(support, decay, inputs, q.shape[-1], v, lay)
    if grads:
        if not (final.requires_grad or transform.requires_grad):
            # Every rank's state passing must be in its autograd graph (its
            # backward is a collective), also where nothing of this rank's
            # (A_r, S_r) requires grad.
            final = final.detach().requires_grad_()
        state = _StatePass.apply(final, transform, group, world, rank)
    else:
        state, _ = _state_in(_gather(_pack(final, transform), group, world),
                             rank, final.shape)
    if rank == 0:
        if grads:
            out = _Tie.apply(out, state)
        return (out, final) if return_final_state else out
    out = _contribution(support, out, q, v, state, cum, inputs, lay)
    if not return_final_state:
        return out
    return out, transform[..., None, None] * state + final
