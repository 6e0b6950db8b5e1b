"""attnc.distributed: context-parallel (ring) attention over
torch.distributed for any attnc variant whose results merge.

Each rank of a process group holds a shard of the sequence ([B,H,S/W,D],
layout "bhsd"); the key/value shards travel around the ring by NCCL
point-to-point sends while the current shard's attention runs; each rank
merges its partial results by the rule attnc derives from the online
function (log-sum-exp for softmax, a sum for sigmoid). The backward runs
attnc's backward per key shard with the merged out and finals (nothing is
recomputed) while dK/dV accumulators travel back to their owners. With a
causal mask the sequence is sharded "zigzag" (rank r holds chunks r and
2W-1-r of 2W, which balances the work): a ring step's chunk pairs are then
the diagonal (the rank's own shard, run with the mask), fully visible (run
with the definition's maskless twin) or empty (skipped).
Linear attention (linear_attention_cp) passes its state instead: each rank
holds a contiguous shard and runs it from a zero state, all-gathers the
shards' final states and state transforms, scans them to its true initial
state and adds that state's contribution to its output (one pass each way,
every rank at once). See docs/distributed.md."""

from __future__ import annotations

import math
import threading

import torch
import torch.distributed as dist

from . import _lib
from . import _linear_cp_plan as lplan
from . import _ring_plan as plan
from . import torch as _attnc_torch

__all__ = ["linear_attention_cp", "ring_attention", "shard", "unshard"]

_WHERE = "attnc.distributed.ring_attention"
_rings = {}
_twins = {}
_lock = threading.Lock()


def _group_info(group):
    if not dist.is_available() or not dist.is_initialized():
        raise _lib.UserError(
            f"{_WHERE}: torch.distributed is not initialised (launch with "
            "torchrun and call torch.distributed.init_process_group)")
    return dist.get_world_size(group), dist.get_rank(group)


def _peer(group, rank):
    """The global rank of group's rank (P2POp takes global ranks)."""
    if group is None or group is dist.group.WORLD:
        return rank
    return dist.get_global_rank(group, rank)


def shard(x, dim=2, group=None, causal_layout="zigzag"):
    """This rank's shard of the whole-sequence tensor x (the sequence along
    dim): chunks r and 2W-1-r of 2W for "zigzag", chunk r of W for
    "contiguous"; a new contiguous tensor."""
    world, rank = _group_info(group)
    ranges = plan.shard_ranges(causal_layout, world, rank, x.shape[dim])
    return torch.cat([x.narrow(dim, a, b - a) for a, b in ranges],
                     dim).contiguous()


def unshard(x, dim=2, group=None, causal_layout="zigzag"):
    """The whole-sequence tensor from every rank's shard x (an all-gather;
    the inverse of shard)."""
    world, rank = _group_info(group)
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x.contiguous(), group=group)
    n = x.shape[dim] * world
    pieces = []
    for r in range(world):
        offset = 0
        for a, b in plan.shard_ranges(causal_layout, world, r, n):
            pieces.append((a, parts[r].narrow(dim, offset, b - a)))
            offset += b - a
    return torch.cat([p for _, p in sorted(pieces, key=lambda e: e[0])],
                     dim)


def _exchange(send, recv, group, world, rank):
    """Sends send's tensors to the next rank and receives recv's from the
    previous one, asynchronously: NCCL runs them on its own stream, after
    the work already queued on the current stream, so the attention
    launched next overlaps them. Returns the requests."""
    nxt, prv = _peer(group, (rank + 1) % world), _peer(group,
                                                       (rank - 1) % world)
    ops = [dist.P2POp(dist.isend, t, nxt, group) for t in send]
    ops += [dist.P2POp(dist.irecv, t, prv, group) for t in recv]
    return dist.batch_isend_irecv(ops)


def _wait(requests):
    """The current stream waits for requests (the host does not)."""
    for req in requests:
        req.wait()


def _rows(t, a, b, n):
    """t's entries [a, b) along its last-but-one dim of n (q, k, out),
    contiguous; t itself when that is all of it."""
    if a == 0 and b == n:
        return t
    return t[:, :, a:b].contiguous()


def _tokens(t, a, b, n):
    """A per-token input's entries [a, b) along its last dim of n."""
    if a == 0 and b == n:
        return t
    return t[..., a:b].contiguous()


class _Ring:
    """What one definition's ring attention keeps for a signature and a
    process group: the attention objects (with the mask and without), the
    merge kind, the inputs' roles."""

    def __init__(self, definition, name, q, v, group, layout):
        self.support = plan.ring_support(definition, _WHERE)
        if self.support.grad_inputs:
            raise _lib.NotSupportedYet(
                f"{_WHERE}: '{name}': gradients of custom inputs "
                f"({', '.join(self.support.grad_inputs)}) across ranks are "
                "not built yet")
        device = q.get_device()
        d, dv = int(q.shape[-1]), int(v.shape[-1])
        self.att = _attnc_torch.attention_object(name, q.dtype, d, dv,
                                                 "bhsd", device)
        kind, reason = self.att.merge_kind()
        if kind == "none":
            raise _lib.UserError(
                f"{_WHERE}: '{name}': its results cannot be merged "
                f"({reason}); ring attention needs the derived merge of "
                "partial results")
        self.merge = kind
        self.full_att = self.att
        if self.support.mask == "causal":
            twin = _twins.get(name)
            if twin is None or twin[0] is not definition:
                twin = _twins[name] = (definition,
                                       plan.maskless_twin(definition))
            twin_name = _attnc_torch.register(twin[1])
            self.full_att = _attnc_torch.attention_object(
                twin_name, q.dtype, d, dv, "bhsd", device)
        self.world, self.rank = _group_info(group)
        self.group = group
        # Without a mask every pair is visible, whatever the layout.
        self.layout = layout if self.support.mask == "causal" else \
            "contiguous"
        self.causal = self.support.mask == "causal"
        self.n_finals = len(self.att.final_names)

    # -- one block ------------------------------------------------------------

    def _inputs(self, inputs, b, n_q, n_k):
        """The custom inputs of block b: shared ones as they are, per-query
        ones sliced to its rows, per-key ones (received with the keys) to
        its columns."""
        if not inputs:
            return None
        call = {}
        for name, value in inputs.items():
            if name in self.support.query_inputs:
                value = _tokens(value, b.q0, b.q1, n_q)
            elif name in self.support.key_inputs:
                value = _tokens(value, b.k0, b.k1, n_k)
            call[name] = value
        return call

    def _block_forward(self, b, q, kv, inputs):
        n_q, n_k = q.shape[2], kv[0].shape[2]
        att = self.att if b.kind == "causal" else self.full_att
        qb = _rows(q, b.q0, b.q1, n_q)
        kb, vb = (_rows(t, b.k0, b.k1, n_k) for t in kv[:2])
        bsz, heads = q.shape[0], q.shape[1]
        o = q.new_empty((bsz, heads, b.q1 - b.q0, kv[1].shape[-1]))
        f = q.new_empty((self.n_finals, bsz, heads, b.q1 - b.q0),
                        dtype=torch.float32)
        att.forward(qb, kb, vb, o, f if self.n_finals else None,
                    self._inputs(inputs, b, n_q, n_k))
        if b.q0 == 0 and b.q1 == n_q:
            return o, f
        # Rows the block does not cover: the merge's identity (out 0, first
        # final -inf).
        full_o = q.new_zeros((bsz, heads, n_q, o.shape[-1]))
        full_o[:, :, b.q0:b.q1] = o
        full_f = torch.full((self.n_finals, bsz, heads, n_q), -math.inf,
                            dtype=torch.float32, device=q.device)
        full_f[..., b.q0:b.q1] = f
        return full_o, full_f

    def _block_backward(self, b, q, kv, out, dout, finals, inputs, dq, dk,
                        dv):
        n_q, n_k = q.shape[2], kv[0].shape[2]
        att = self.att if b.kind == "causal" else self.full_att
        qb, ob, dob = (_rows(t, b.q0, b.q1, n_q) for t in (q, out, dout))
        fb = (_tokens(finals, b.q0, b.q1, n_q) if self.n_finals else None)
        kb, vb = (_rows(t, b.k0, b.k1, n_k) for t in kv[:2])
        gq, gk, gv = (torch.empty_like(t) for t in (qb, kb, vb))
        att.backward(qb, kb, vb, ob, dob, fb, gq, gk, gv,
                     self._inputs(inputs, b, n_q, n_k))
        dq[:, :, b.q0:b.q1] += gq
        dk[:, :, b.k0:b.k1] += gk
        dv[:, :, b.k0:b.k1] += gv

    def _blocks(self, src, chunk):
        return plan.step_blocks(self.layout, self.world, self.rank, src,
                                self.causal, chunk)

    def _chunk(self, q):
        return plan.check_layout(_WHERE, self.layout, self.world,
                                 q.shape[2] * self.world)

    def _travelling(self, k, v, inputs):
        """What moves around the ring with a key shard."""
        return [k, v] + [inputs[n].contiguous() for n in
                         self.support.key_inputs if inputs and n in inputs]

    def _with_keys(self, inputs, kv):
        if not self.support.key_inputs or not inputs:
            return inputs
        moved = dict(inputs)
        names = [n for n in self.support.key_inputs if n in inputs]
        moved.update(zip(names, kv[2:]))
        return moved

    # -- the ring ---------------------------------------------------------------

    def forward(self, q, k, v, inputs):
        world, rank = self.world, self.rank
        chunk = self._chunk(q)
        kv = self._travelling(k, v, inputs)
        parts = []
        for t in range(world):
            src = plan.source(rank, t, world)
            pending = None
            if t < world - 1:
                nxt = [torch.empty_like(x) for x in kv]
                pending = _exchange(kv, nxt, self.group, world, rank)
            for b in self._blocks(src, chunk):
                parts.append(self._block_forward(
                    b, q, kv, self._with_keys(inputs, kv)))
            if pending is not None:
                _wait(pending)
                kv = nxt
        if len(parts) == 1:
            return parts[0]
        out = torch.empty_like(parts[0][0])
        finals = torch.empty_like(parts[0][1])
        has = self.n_finals > 0
        self.att.merge_results([p[0] for p in parts],
                               [p[1] for p in parts] if has else None, out,
                               finals if has else None)
        return out, finals

    def backward(self, q, k, v, out, finals, dout, inputs):
        world, rank = self.world, self.rank
        chunk = self._chunk(q)
        dout = dout.contiguous()
        kv = self._travelling(k, v, inputs)
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        incoming, in_flight, sent = None, None, None
        for t in range(world):
            src = plan.source(rank, t, world)
            pending = None
            if t < world - 1:
                nxt = [torch.empty_like(x) for x in kv]
                pending = _exchange(kv, nxt, self.group, world, rank)
            # This step's share of the dK/dV of src's keys, in float32.
            dk = torch.zeros(kv[0].shape, dtype=torch.float32,
                             device=q.device)
            dv = torch.zeros(kv[1].shape, dtype=torch.float32,
                             device=q.device)
            for b in self._blocks(src, chunk):
                self._block_backward(b, q, kv, out, dout, finals,
                                     self._with_keys(inputs, kv), dq, dk, dv)
            if in_flight is not None:
                # The previous ranks' shares of src's dK/dV, received while
                # this step ran.
                _wait(in_flight)
                dk += incoming[0]
                dv += incoming[1]
            if world > 1:
                sent = [dk, dv]
                incoming = [torch.empty_like(dk), torch.empty_like(dv)]
                in_flight = _exchange(sent, incoming, self.group, world,
                                      rank)
            else:
                incoming = [dk, dv]
            if pending is not None:
                _wait(pending)
                kv = nxt
        if in_flight is not None:
            _wait(in_flight)  # the owner's accumulators, back home
        return (dq.to(q.dtype), incoming[0].to(k.dtype),
                incoming[1].to(v.dtype))


class _RingFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ring, inputs, q, k, v):
        out, finals = ring.forward(q, k, v, inputs)
        ctx.ring, ctx.inputs = ring, inputs
        ctx.save_for_backward(q, k, v, out, finals)
        ctx.mark_non_differentiable(finals)
        return out, finals

    @staticmethod
    def backward(ctx, dout, dfinals):
        q, k, v, out, finals = ctx.saved_tensors
        dq, dk, dv = ctx.ring.backward(q, k, v, out, finals, dout,
                                       ctx.inputs)
        return None, None, dq, dk, dv


def _check(q, k, v, inputs):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or not t.is_cuda or t.dim() != 4:
            raise _lib.InvalidArgument(
                f"{_WHERE}: argument '{name}': expected a 4-D CUDA tensor "
                "[B, H, S_local, D] (layout bhsd)")
    if k.shape[2] != q.shape[2] or v.shape[2] != q.shape[2]:
        raise _lib.InvalidArgument(
            f"{_WHERE}: q, k and v hold {q.shape[2]}, {k.shape[2]} and "
            f"{v.shape[2]} tokens; each rank holds the same tokens of all "
            "three")
    for name, value in (inputs or {}).items():
        if isinstance(value, torch.Tensor) and value.requires_grad:
            raise _lib.NotSupportedYet(
                f"{_WHERE}: argument 'inputs[{name!r}]' requires grad; "
                "gradients of custom inputs across ranks are not built yet")


def ring_attention(q, k, v, definition, group=None, causal_layout="zigzag",
                   inputs=None, return_finals=False):
    """Attention of the whole sequence held in shards across group's ranks
    (torch.distributed, NCCL): q, k, v are this rank's shard [B, H, S/W, D]
    (shard() cuts a whole tensor; with a causal mask the shards must be
    causal_layout's, "zigzag" by default, or "contiguous"). Returns this
    rank's rows of the output (and, with return_finals, of the finals,
    [F, B, H, S/W] float32), differentiable in q, k, v.

    inputs: custom inputs; per-query ones (per_row, per_query_token) are
    this rank's shard like q, per-key ones (per_key, per_key_token) like
    k (they travel with it), scalars and per-head ones whole. Refused:
    variants whose results do not merge (UserError), linear attention,
    masks other than causal and score_mods reading q_idx/kv_idx (positions
    differ per shard: give them as per-token inputs), input gradients
    (NotSupportedYet)."""
    _check(q, k, v, inputs)
    name = (definition if isinstance(definition, str)
            else _attnc_torch.register(definition))
    world, rank = _group_info(group)
    key = (name, q.dtype, q.shape[-1], v.shape[-1], q.get_device(),
           causal_layout, id(group), world)
    ring = _rings.get(key)
    if ring is None:
        if causal_layout not in plan.LAYOUTS:
            plan.check_layout(_WHERE, causal_layout, world, 0)
        with _lock:
            ring = _Ring(_attnc_torch._definition(name), name, q, v, group,
                         causal_layout)
            _rings[key] = ring
    q, k, v = (t if t.is_contiguous() else t.contiguous() for t in (q, k, v))
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad
                                    or v.requires_grad):
        out, finals = _RingFunction.apply(ring, inputs, q, k, v)
    else:
        out, finals = ring.forward(q, k, v, inputs)
    return (out, finals) if return_finals else out


# -- linear attention: state passing -----------------------------------------

_LWHERE = "attnc.distributed.linear_attention_cp"
_linear_support = {}


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
