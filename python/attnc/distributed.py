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
with the definition's maskless twin) or empty (skipped). A mask or
score_mod that reads positions otherwise runs per pair of shard segments
with their global positions as kernel arguments (distributed_positions).
Linear attention (linear_attention_cp) passes its state instead: each rank
holds a contiguous shard and runs it from a zero state, all-gathers the
shards' final states and state transforms, scans them to its true initial
state and adds that state's contribution to its output (one pass each way,
every rank at once). See docs/distributed.md."""

from __future__ import annotations

import threading

import torch
import torch.distributed as dist

from . import _lib
from . import _ring_plan as plan
from . import torch as _attnc_torch
from ._linear_cp import linear_attention_cp

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


_send_groups = {}  # id of the default group -> (it, its twin for sends)


def _send_group(group):
    """The group the ring's sends and receives use: for the default NCCL
    group, a twin of it whose NCCL stream has high priority, made once.
    Under a normal-priority stream, once the previous call's work is done
    the send/recv kernel and the next attention kernel are ready together,
    and (as far as measured: calls in a loop lose ~1 ms that one call
    after a barrier does not) the attention's CTAs take the SMs first, so
    the transfer ends after the step it should hide under (2 H200s, 16k
    tokens a GPU, causal forward 7.9 -> 7.0 ms). Only the default group:
    making a group is collective over every rank of the job, which a
    subgroup's call is not; a subgroup may be made with that option by its
    caller. Other backends (gloo) are used as they are."""
    if group is not None and group is not dist.group.WORLD:
        return group
    world = dist.group.WORLD
    got = _send_groups.get(id(world))
    if got is not None and got[0] is world:
        return got[1]
    twin = group
    if dist.get_backend(world) == "nccl":
        opts = dist.ProcessGroupNCCL.Options(is_high_priority_stream=True)
        twin = dist.new_group(backend="nccl", pg_options=opts)
    _send_groups[id(world)] = (world, twin)
    return twin


def _exchange(send, recv, group, world, rank):
    """Sends send's tensors to the next rank and receives recv's from the
    previous one, asynchronously: NCCL runs them on its own stream (of
    high priority, _send_group), after the work already queued on the
    current stream, so the attention launched next overlaps them. Returns
    the requests."""
    nxt, prv = _peer(group, (rank + 1) % world), _peer(group,
                                                       (rank - 1) % world)
    group = _send_group(group)
    ops = [dist.P2POp(dist.isend, t, nxt, group) for t in send]
    ops += [dist.P2POp(dist.irecv, t, prv, group) for t in recv]
    return dist.batch_isend_irecv(ops)


def _wait(requests):
    """The current stream waits for requests (the host does not)."""
    for req in requests:
        req.wait()


def _view(t, a, b, n):
    """t's entries [a, b) along its last-but-one dim of n (q, k, v, out of
    layout bhsd): a view, as the kernels and the merge take strides."""
    if a == 0 and b == n:
        return t
    return t[:, :, a:b]


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
        self._schedules = {}  # chunk length -> plan.ForwardSchedule

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

    def _block_forward(self, b, q, kv, inputs, out=None, finals=None):
        """Runs block b (q, k, v as views of its rows and keys); its result
        goes to out and finals where given (the direct block: all rows),
        else to a new part over its rows only. Returns (o, f)."""
        n_q, n_k = q.shape[2], kv[0].shape[2]
        att = self.att if b.kind == "causal" else self.full_att
        qb = _view(q, b.q0, b.q1, n_q)
        kb, vb = (_view(t, b.k0, b.k1, n_k) for t in kv[:2])
        if out is None:
            bsz, heads, rows = q.shape[0], q.shape[1], b.q1 - b.q0
            out = q.new_empty((bsz, heads, rows, kv[1].shape[-1]))
            finals = q.new_empty((self.n_finals, bsz, heads, rows),
                                 dtype=torch.float32)
        att.forward(qb, kb, vb, out, finals if self.n_finals else None,
                    self._inputs(inputs, b, n_q, n_k))
        return out, finals

    def _block_backward(self, b, q, kv, out, dout, finals, inputs, dq, dk,
                        dv):
        n_q, n_k = q.shape[2], kv[0].shape[2]
        att = self.att if b.kind == "causal" else self.full_att
        qb, ob, dob = (_view(t, b.q0, b.q1, n_q) for t in (q, out, dout))
        fb = (_tokens(finals, b.q0, b.q1, n_q) if self.n_finals else None)
        kb, vb = (_view(t, b.k0, b.k1, n_k) for t in kv[:2])
        gq, gk, gv = (torch.empty_like(t) for t in (qb, kb, vb))
        att.backward(qb, kb, vb, ob, dob, fb, gq, gk, gv,
                     self._inputs(inputs, b, n_q, n_k))
        dq[:, :, b.q0:b.q1] += gq
        dk[:, :, b.k0:b.k1] += gk
        dv[:, :, b.k0:b.k1] += gv

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

    def _schedule(self, chunk):
        got = self._schedules.get(chunk)
        if got is None:
            got = self._schedules[chunk] = plan.forward_schedule(
                self.layout, self.world, self.rank, self.causal, chunk)
        return got

    def _merge(self, runs, parts, out, finals):
        """Merges the parts ((step, index) -> (first row, o, f)) into out
        and finals, which the direct block wrote, run by run: one derived
        merge of every result of a run's rows (so each is rounded once),
        written into out in place (each row's columns are read from every
        part before they are written; the finals go to a new tensor, as
        the merge's threads of a row all read the parts' finals)."""
        has = self.n_finals > 0
        n = out.shape[2]
        for run in runs:
            a, e = run.a, run.b
            target = _view(out, a, e, n)
            outs = [target]
            fins = [finals if a == 0 and e == n else
                    finals[..., a:e].contiguous()]
            for key in run.parts:
                q0, o, f = parts[key]
                rows = o.shape[2]
                outs.append(_view(o, a - q0, e - q0, rows))
                fins.append(_tokens(f, a - q0, e - q0, rows))
            merged = torch.empty_like(fins[0]) if has else None
            self.att.merge_results(outs, fins if has else None, target,
                                   merged)
            if has:
                finals[..., a:e] = merged

    def forward(self, q, k, v, inputs, backward_follows=True):
        del backward_follows  # this ring's plan reads no inputs' values
        world, rank = self.world, self.rank
        sched = self._schedule(self._chunk(q))
        bsz, heads, n = q.shape[0], q.shape[1], q.shape[2]
        out = q.new_empty((bsz, heads, n, v.shape[-1]))
        finals = q.new_empty((self.n_finals, bsz, heads, n),
                             dtype=torch.float32)
        kv = self._travelling(k, v, inputs)
        parts = {}
        for t, (_, blocks) in enumerate(sched.steps):
            pending = None
            if t < world - 1:
                nxt = [torch.empty_like(x) for x in kv]
                pending = _exchange(kv, nxt, self.group, world, rank)
            call = self._with_keys(inputs, kv)
            for i, b in enumerate(blocks):
                if t == 0:  # the own shard's block: every row, direct
                    self._block_forward(b, q, kv, call, out, finals)
                else:
                    parts[t, i] = (b.q0,) + self._block_forward(b, q, kv,
                                                                call)
            if pending is not None:
                _wait(pending)
                kv = nxt
        self._merge(sched.runs, parts, out, finals)
        return out, finals, None

    def backward(self, q, k, v, out, finals, dout, inputs, state=None):
        world, rank = self.world, self.rank
        sched = self._schedule(self._chunk(q))
        dout = dout.contiguous()
        kv = self._travelling(k, v, inputs)
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        incoming, in_flight, sent = None, None, None
        for t, (_, blocks) in enumerate(sched.steps):
            pending = None
            if t < world - 1:
                nxt = [torch.empty_like(x) for x in kv]
                pending = _exchange(kv, nxt, self.group, world, rank)
            # This step's share of the dK/dV of src's keys, in float32.
            dk = torch.zeros(kv[0].shape, dtype=torch.float32,
                             device=q.device)
            dv = torch.zeros(kv[1].shape, dtype=torch.float32,
                             device=q.device)
            # A long causal block in square pieces (plan.backward_blocks).
            for b in plan.backward_blocks(blocks):
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
        out, finals, state = ring.forward(q, k, v, inputs)
        # state: what the forward planned (the positions ring's plan, made
        # from the inputs' bounds), which the backward runs again.
        ctx.ring, ctx.inputs, ctx.state = ring, inputs, state
        ctx.save_for_backward(q, k, v, out, finals)
        ctx.mark_non_differentiable(finals)
        return out, finals

    @staticmethod
    def backward(ctx, dout, dfinals):
        q, k, v, out, finals = ctx.saved_tensors
        dq, dk, dv = ctx.ring.backward(q, k, v, out, finals, dout,
                                       ctx.inputs, ctx.state)
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
    k (they travel with it), scalars and per-head ones whole. Masks and
    score_mods that read q_idx/kv_idx otherwise than a causal mask (sliding
    windows, prefix-LM, documents, ALiBi by index) see the whole sequence's
    positions (attnc.distributed_positions): each call passes the global
    position of its first query and key to the kernels. Refused: variants
    whose results do not merge (UserError), linear attention, full
    [B,H,Sq,Skv] inputs, input gradients (NotSupportedYet)."""
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
            definition = _attnc_torch._definition(name)
            support = plan.ring_support(definition, _WHERE)
            if support.mask == "positions":
                from .distributed_positions import PositionsRing
                ring = PositionsRing(definition, name, q, v, group,
                                     causal_layout, support, _WHERE)
            else:
                ring = _Ring(definition, name, q, v, group, causal_layout)
            _rings[key] = ring
    q, k, v = (t if t.is_contiguous() else t.contiguous() for t in (q, k, v))
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad
                                    or v.requires_grad):
        out, finals = _RingFunction.apply(ring, inputs, q, k, v)
    else:
        out, finals, _ = ring.forward(q, k, v, inputs, backward_follows=False)
    return (out, finals) if return_finals else out
