"""attnc.distributed's ring for definitions that read absolute positions
(sliding windows, prefix-LM, document masks, score_mods of q_idx/kv_idx):
each call of a ring step runs the definition's positioned twin with the
global positions of its first query and key as two scalar inputs
(_ring_positions), so the kernels' mask and block classification see the
whole sequence's q_idx and kv_idx. The plan cuts each step into the pairs
of shard segments (one per layout chunk) the mask does not empty, trimmed
to the rows and keys that may be kept; a key shard travels only as far as
the keys some other rank reads (a sliding window sends the shard's last
window keys, and nothing the other way), and its dK/dV accumulators
travel over the same keys. Used by attnc.distributed.ring_attention."""

from __future__ import annotations

import json
import math

import torch

from . import _lib
from . import _ring_plan as plan
from . import _ring_positions as pos
from . import torch as _attnc_torch
from .distributed import _exchange, _group_info, _wait

_twins = {}


def _twin(definition, make, suffix):
    """make(definition) registered under its name, made once per
    definition (suffix: what tells the twins of one definition apart)."""
    key = (definition.name, suffix)
    got = _twins.get(key)
    if got is None or got[0] is not definition:
        got = _twins[key] = (definition, make(definition))
    return _attnc_torch.register(got[1])


def _rows(t, a, b):
    if a == 0 and b == t.shape[2]:
        return t
    return t[:, :, a:b].contiguous()


def _tokens(t, a, b):
    if a == 0 and b == t.shape[-1]:
        return t
    return t[..., a:b].contiguous()


class _Plan:
    """A ring's blocks and travelling key ranges for one chunk length and
    one set of scalar inputs."""

    def __init__(self, boxes, layout, world, chunk):
        chunks = [plan.rank_chunks(layout, world, r) for r in range(world)]
        self.blocks = [[pos.step_blocks(boxes, chunks[r], chunks[s], chunk)
                        for s in range(world)] for r in range(world)]
        self.travel = [pos.travel_range([self.blocks[r][s]
                                         for r in range(world) if r != s])
                       for s in range(world)]


class PositionsRing:
    """Ring attention of a definition that reads positions (mask
    "positions" in ring_support): its positioned twin and that twin's
    maskless twin (for pairs the mask keeps whole), and the plans."""

    def __init__(self, definition, name, q, v, group, layout, support,
                 where):
        self.support, self.where = support, where
        if support.grad_inputs:
            raise _lib.NotSupportedYet(
                f"{where}: '{name}': gradients of custom inputs "
                f"({', '.join(support.grad_inputs)}) across ranks are not "
                "built yet")
        self.graph = json.loads(definition.ir_json())
        device = q.get_device()
        d, dv = int(q.shape[-1]), int(v.shape[-1])
        twin = _twin(definition, pos.positioned_twin, "positions")
        self.att = _attnc_torch.attention_object(twin, q.dtype, d, dv,
                                                 "bhsd", device)
        kind, reason = self.att.merge_kind()
        if kind == "none":
            raise _lib.UserError(
                f"{where}: '{name}': its results cannot be merged "
                f"({reason}); ring attention needs the derived merge of "
                "partial results")
        self.full_att = self.att
        if pos.mask_root(self.graph) is not None:
            full = _twin(definition, lambda de: plan.maskless_twin(
                pos.positioned_twin(de)), "positions, no mask")
            self.full_att = _attnc_torch.attention_object(
                full, q.dtype, d, dv, "bhsd", device)
        self.world, self.rank = _group_info(group)
        self.group, self.layout = group, layout
        self.n_finals = len(self.att.final_names)
        self._plans = {}

    def _plan(self, n_local, inputs) -> _Plan:
        chunk = plan.check_layout(self.where, self.layout, self.world,
                                  n_local * self.world)
        scalars = {n: x for n, x in (inputs or {}).items()
                   if isinstance(x, (int, float)) and not isinstance(x, bool)}
        key = (chunk, tuple(sorted(scalars.items())))
        got = self._plans.get(key)
        if got is None:
            boxes = pos.MaskBoxes(self.graph, scalars)
            got = self._plans[key] = _Plan(boxes, self.layout, self.world,
                                           chunk)
        return got

    # -- one block ------------------------------------------------------------

    def _inputs(self, inputs, b, keys, base):
        call = {pos.Q_OFFSET: b.q_pos, pos.KV_OFFSET: b.k_pos}
        key_names = [n for n in self.support.key_inputs
                     if inputs and n in inputs]
        moved = dict(zip(key_names, keys))
        for name, value in (inputs or {}).items():
            if name in self.support.query_inputs:
                value = _tokens(value, b.q0, b.q1)
            elif name in moved:
                value = _tokens(moved[name], b.k0 - base, b.k1 - base)
            call[name] = value
        return call

    def _att(self, b):
        return self.att if b.kind == "masked" else self.full_att

    def _block_forward(self, b, q, kv, base, inputs):
        qb = _rows(q, b.q0, b.q1)
        kb, vb = (_rows(t, b.k0 - base, b.k1 - base) for t in kv[:2])
        bsz, heads = q.shape[0], q.shape[1]
        o = q.new_empty((bsz, heads, b.q1 - b.q0, kv[1].shape[-1]))
        f = q.new_empty((self.n_finals, bsz, heads, b.q1 - b.q0),
                        dtype=torch.float32)
        self._att(b).forward(qb, kb, vb, o, f if self.n_finals else None,
                             self._inputs(inputs, b, kv[2:], base))
        return (b.q0, b.q1, o, f)

    def _block_backward(self, b, q, kv, base, out, dout, finals, inputs, dq,
                        dk, dv):
        qb, ob, dob = (_rows(t, b.q0, b.q1) for t in (q, out, dout))
        fb = _tokens(finals, b.q0, b.q1) if self.n_finals else None
        kb, vb = (_rows(t, b.k0 - base, b.k1 - base) for t in kv[:2])
        gq, gk, gv = (torch.empty_like(t) for t in (qb, kb, vb))
        self._att(b).backward(qb, kb, vb, ob, dob, fb, gq, gk, gv,
                              self._inputs(inputs, b, kv[2:], base))
        dq[:, :, b.q0:b.q1] += gq
        dk[:, :, b.k0 - base:b.k1 - base] += gk
        dv[:, :, b.k0 - base:b.k1 - base] += gv

    # -- the merge --------------------------------------------------------------

    def _merge(self, parts, q, dv_dim):
        """out and finals of the rank's rows from the parts (q0, q1, o, f):
        per run of rows covered by the same parts, a copy of one part or
        the derived merge of several (at most 8 at once); rows no part
        covers hold the merge's identity (out 0, finals -inf)."""
        bsz, heads, n = q.shape[0], q.shape[1], q.shape[2]
        out = q.new_zeros((bsz, heads, n, dv_dim))
        finals = torch.full((self.n_finals, bsz, heads, n), -math.inf,
                            dtype=torch.float32, device=q.device)
        cuts = sorted({0, n} | {p[0] for p in parts} | {p[1] for p in parts})
        for a, b in zip(cuts, cuts[1:]):
            here = [(o[:, :, a - q0:b - q0], f[..., a - q0:b - q0])
                    for q0, q1, o, f in parts if q0 <= a and b <= q1]
            if not here:
                continue
            while len(here) > 1:
                merged = []
                for i in range(0, len(here), plan.MAX_WORLD):
                    group = here[i:i + plan.MAX_WORLD]
                    if len(group) == 1:
                        merged.append(group[0])
                        continue
                    o = q.new_empty((bsz, heads, b - a, dv_dim))
                    f = torch.empty((self.n_finals, bsz, heads, b - a),
                                    dtype=torch.float32, device=q.device)
                    has = self.n_finals > 0
                    self.att.merge_results(
                        [g[0].contiguous() for g in group],
                        [g[1].contiguous() for g in group] if has else None,
                        o, f if has else None)
                    merged.append((o, f))
                here = merged
            out[:, :, a:b] = here[0][0]
            finals[..., a:b] = here[0][1]
        return out, finals

    # -- the ring ---------------------------------------------------------------

    def _travelling(self, k, v, inputs):
        return [k, v] + [inputs[n].contiguous() for n in
                         self.support.key_inputs if inputs and n in inputs]

    @staticmethod
    def _slice(kv, a, b):
        """The travelling tensors' keys [a, b) (keys along dim 2 of k and
        v, along the last dim of the per-key inputs)."""
        return [_rows(kv[0], a, b), _rows(kv[1], a, b)] + \
            [_tokens(t, a, b) for t in kv[2:]]

    def _next(self, p, kv, base, t, like):
        """Starts step t's sends and receives of key shards: this step's
        shard on to the next rank (the keys of it some rank reads), the
        next step's from the previous one (like: the rank's own travelling
        tensors, whose shapes they have but for the keys). Returns
        (requests, the tensors being received and their first key, or
        None)."""
        world, rank = self.world, self.rank
        if t >= world - 1:
            return None, None
        send, recv, got = [], [], None
        out = p.travel[plan.source(rank, t, world)]
        if out is not None and kv is not None:
            a, b = out
            send = self._slice(kv, a - base, b - base)
        incoming = p.travel[plan.source(rank, t + 1, world)]
        if incoming is not None:
            a, b = incoming
            recv = [x.new_empty(x.shape[:-2] + (b - a, x.shape[-1]))
                    if i < 2 else x.new_empty(x.shape[:-1] + (b - a,))
                    for i, x in enumerate(like)]
            got = (recv, a)
        if not send and not recv:
            return None, got
        return _exchange(send, recv, self.group, world, rank), got

    def forward(self, q, k, v, inputs):
        p = self._plan(q.shape[2], inputs)
        kv, base = self._travelling(k, v, inputs), 0
        like = kv
        parts = []
        for t in range(self.world):
            src = plan.source(self.rank, t, self.world)
            pending, got = self._next(p, kv, base, t, like)
            blocks = p.blocks[self.rank][src]
            if blocks and kv is None:
                raise _lib.InternalError(
                    f"{self.where}: step {t} has blocks but no keys")
            for b in blocks:
                parts.append(self._block_forward(b, q, kv, base, inputs))
            if pending is not None:
                _wait(pending)
            if t < self.world - 1:
                kv, base = got if got is not None else (None, 0)
        return self._merge(parts, q, v.shape[-1])

    def backward(self, q, k, v, out, finals, dout, inputs):
        world, rank = self.world, self.rank
        p = self._plan(q.shape[2], inputs)
        dout = dout.contiguous()
        kv, base = self._travelling(k, v, inputs), 0
        like = kv
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        own = [torch.zeros(k.shape, dtype=torch.float32, device=q.device),
               torch.zeros(v.shape, dtype=torch.float32, device=q.device)]
        acc_in, acc_flight = None, None
        for t in range(world):
            src = plan.source(rank, t, world)
            pending, got = self._next(p, kv, base, t, like)
            dk = dv = None
            if t == 0:
                dk, dv = own
            elif p.travel[src] is not None:
                a, b = p.travel[src]
                dk = q.new_zeros(k.shape[:2] + (b - a, k.shape[-1]),
                                 dtype=torch.float32)
                dv = q.new_zeros(v.shape[:2] + (b - a, v.shape[-1]),
                                 dtype=torch.float32)
            for b in p.blocks[rank][src]:
                self._block_backward(b, q, kv, base, out, dout, finals,
                                     inputs, dq, dk, dv)
            if acc_flight is not None:
                _wait(acc_flight)
            if acc_in is not None:
                # The previous ranks' shares of src's dK/dV.
                dk += acc_in[0]
                dv += acc_in[1]
            acc_in, acc_flight = None, None
            # This step's accumulators on to the next rank (at the last
            # step, to src's owner); the next step's source's (at the last
            # step, this rank's own) from the previous rank.
            send = [dk, dv] if t >= 1 and p.travel[src] is not None else []
            nxt = plan.source(rank, t + 1, world)
            recv = []
            if t >= 1 and p.travel[nxt] is not None:
                a, b = p.travel[nxt]
                acc_in = [q.new_empty(k.shape[:2] + (b - a, k.shape[-1]),
                                      dtype=torch.float32),
                          q.new_empty(v.shape[:2] + (b - a, v.shape[-1]),
                                      dtype=torch.float32)]
                recv = acc_in
            if send or recv:
                acc_flight = _exchange(send, recv, self.group, world, rank)
            if pending is not None:
                _wait(pending)
            if t < world - 1:
                kv, base = got if got is not None else (None, 0)
        if acc_flight is not None:
            _wait(acc_flight)
        if acc_in is not None:  # this rank's keys' shares, back home
            a, b = p.travel[rank]
            own[0][:, :, a:b] += acc_in[0]
            own[1][:, :, a:b] += acc_in[1]
        return (dq.to(q.dtype), own[0].to(k.dtype), own[1].to(v.dtype))
