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
travel over the same keys. Per-token inputs the mask reads (document
ids) are bounded per tile of positions (one all_reduce per forward), so
the plan skips and trims by them too; pairs of one position shift are
joined into one call. Used by attnc.distributed.ring_attention."""

from __future__ import annotations

import json
import math

import torch
import torch.distributed as dist

from . import _lib
from . import _ring_plan as plan
from . import _ring_positions as pos
from . import torch as _attnc_torch
from ._ring_schedule import _Grad, _Plan
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


def _stream_of(t):
    """The current stream of t's device (0 for a CPU tensor): a BlockMask
    is made on, and kept for, one stream."""
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda \
        else 0


def _rows(t, a, b):
    if a == 0 and b == t.shape[2]:
        return t
    return t[:, :, a:b].contiguous()


def _view(t, a, b):
    """Tokens [a, b) of a bhsd tensor, a view (the kernels take strides)."""
    return t if a == 0 and b == t.shape[2] else t[:, :, a:b]


def _tokens(t, a, b):
    if a == 0 and b == t.shape[-1]:
        return t
    return t[..., a:b].contiguous()


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
        # The per-token inputs the mask reads: their values bound the
        # boxes (document ids: which documents a tile of rows or keys
        # holds), which the plan then skips and trims by.
        read = pos.mask_inputs(self.graph)
        self.bounded = [n for n in support.query_inputs + support.key_inputs
                        if n in read]
        self._plans = {}
        self._tiles = {}
        self._mask_read = pos.mask_inputs(self.graph)
        # BlockMasks of the masked blocks (_block_mask), made once per
        # block, shape and scalars; False once a call refused one.
        self._masks = {}

    def _tile_index(self, chunk, tile, device):
        """The global tile of each of this rank's local tiles."""
        key = (chunk, tile, device)
        got = self._tiles.get(key)
        if got is None:
            segs = pos.segments(plan.rank_chunks(self.layout, self.world,
                                                 self.rank), chunk)
            got = self._tiles[key] = torch.tensor(
                [s.pos // tile + j for s in segs
                 for j in range(s.length // tile)], device=device)
        return got

    def _bounds_start(self, inputs, n_local, chunk, device):
        """Queues the bounds of the mask's per-token inputs per tile of
        positions over the whole sequence (each rank's tiles, one
        all_reduce) and their copy to the host, behind the work queued
        before (the inputs' producers); None when the mask reads none.
        _bounds_finish reads them: only it waits, and only for the work
        queued before this call, not for what is queued after it."""
        names = [n for n in self.bounded
                 if inputs and isinstance(inputs.get(n), torch.Tensor)]
        if not names:
            return None
        tile = pos.TILE if chunk % pos.TILE == 0 else chunk
        seen, rows = {}, []
        for name in names:
            t = inputs[name]
            key = (t.data_ptr(), tuple(t.shape), t.stride(), t.dtype)
            if key not in seen:
                x = t.reshape(-1, n_local // tile, tile).double()
                seen[key] = torch.stack([x.amin(dim=(0, 2)),
                                         -x.amax(dim=(0, 2))])
            rows.append(seen[key])
        # NaN: unknown (-inf low, +inf high); min over ranks, as every
        # rank leaves the tiles it does not hold at +inf.
        vals = torch.nan_to_num(torch.stack(rows), nan=-math.inf,
                                posinf=math.inf, neginf=-math.inf)
        buf = torch.full((len(names), 2, n_local * self.world // tile),
                         math.inf, dtype=torch.float64, device=device)
        buf.index_copy_(2, self._tile_index(chunk, tile, device), vals)
        dist.all_reduce(buf, op=dist.ReduceOp.MIN, group=self.group)
        done = None
        if buf.is_cuda:
            host = torch.empty(buf.shape, dtype=buf.dtype, pin_memory=True)
            host.copy_(buf, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
            buf = host
        return names, tile, buf, done

    def _bounds_finish(self, started):
        """(query TokenBounds, key TokenBounds, a key of their values) of
        _bounds_start's bounds, or Nones when it queued none. Waits for
        the work queued before _bounds_start (the plan depends on them)."""
        if started is None:
            return None, None, None
        names, tile, buf, done = started
        if done is not None:
            done.synchronize()
        host = buf.tolist()
        q_table, k_table = {}, {}
        for name, (lows, negs) in zip(names, host):
            table = q_table if name in self.support.query_inputs else k_table
            table[name] = ([x if math.isfinite(x) else None for x in lows],
                           [-x if math.isfinite(x) else None for x in negs])
        key = tuple(x for row in host for half in row for x in half)
        return (pos.TokenBounds(tile, q_table) if q_table else None,
                pos.TokenBounds(tile, k_table) if k_table else None, key)

    def _chunk(self, q):
        return plan.check_layout(self.where, self.layout, self.world,
                                 q.shape[2] * self.world)

    def _plan(self, q, inputs, bounds=(None, None, None)) -> _Plan:
        """The plan of a call: by positions alone (the per-token inputs'
        bounds unread: no wait for the queued work), or by positions and
        bounds, _bounds_finish's (q_bounds, k_bounds, their values' key).
        Cached by the chunk length (the shapes), the scalar inputs and the
        bounds' values: what the plan is a function of (the ring is one
        definition's, so one mask)."""
        chunk = self._chunk(q)
        scalars = {n: x for n, x in (inputs or {}).items()
                   if isinstance(x, (int, float)) and not isinstance(x, bool)}
        q_bounds, k_bounds, values = bounds
        key = (chunk, tuple(sorted(scalars.items())), values)
        got = self._plans.get(key)
        if got is None:
            if len(self._plans) > 64:  # bounds of many batches
                self._plans.clear()
            boxes = pos.MaskBoxes(self.graph, scalars, q_bounds, k_bounds)
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

    def _block_mask(self, b, q, call, backward):
        """The BlockMask of masked block b's forward call (its inputs
        `call`), made once and kept, or None (a backward, a full block, a
        mask that reads a tensor, or masks refused before). Without one,
        each call classifies the mask again whenever the stream's last
        call had other offsets or shapes (the runtime keeps one
        classification per stream), which a rank's alternating home and
        remote blocks always have: 2 H200s, 2026-11-28, window 256 over
        16k tokens a GPU, contiguous forward 0.62 -> 0.40 ms. The backward
        keeps classifying: with kept for_backward masks as well, forward+
        backward took 2.18 ms contiguous (2.19 before) and 3.18 ms zig-zag
        (2.71 before), the forward's gain lost in the backward."""
        if backward or b.kind != "masked" or self._masks is False:
            return None
        scalars = []
        for name in self._mask_read | {pos.Q_OFFSET, pos.KV_OFFSET}:
            x = call.get(name)
            if isinstance(x, torch.Tensor):
                return None  # device data: classified per call
            scalars.append((name, x))
        key = (b.q1 - b.q0, b.k1 - b.k0, q.shape[0], q.shape[1],
               tuple(sorted(scalars, key=lambda e: e[0])), backward,
               q.device, _stream_of(q))
        got = self._masks.get(key)
        if got is None:
            if len(self._masks) > 256:
                self._masks.clear()
            try:
                got = self.att.make_block_mask(
                    q.shape[0], q.shape[1], b.q1 - b.q0, b.k1 - b.k0,
                    inputs={n: x for n, x in scalars if x is not None},
                    for_backward=backward)
            except (_lib.UserError, _lib.NotSupportedYet):
                self._masks = False  # the calls classify, as before
                return None
            self._masks[key] = got
        return got

    def _run(self, b, q, call, backward, args):
        """The attention call of block b (forward or backward, args its
        tensors) with its kept BlockMask, or without one when the call
        refuses it (a tile other than the mask's): then never again."""
        mask = self._block_mask(b, q, call, backward)
        att = self._att(b)
        run = att.backward if backward else att.forward
        if mask is None:
            run(*args, call)
            return
        try:
            run(*args, call, block_mask=mask)
        except _lib.UserError:
            self._masks = False
            run(*args, call)

    def _block_forward(self, b, q, kv, base, inputs, out, finals):
        """Runs block b; its out rows go to out's rows when out is given
        (a view: the kernels take strided bhsd tensors) and its finals to
        finals' columns. Returns the part (q0, q1, o, f) otherwise."""
        qb = _view(q, b.q0, b.q1)
        kb, vb = (_view(t, b.k0 - base, b.k1 - base) for t in kv[:2])
        bsz, heads = q.shape[0], q.shape[1]
        rows = b.q1 - b.q0
        whole = out is not None and rows == q.shape[2]
        if out is not None:
            o = _view(out, b.q0, b.q1)
        else:
            o = q.new_empty((bsz, heads, rows, kv[1].shape[-1]))
        f = finals if whole else torch.empty(
            (self.n_finals, bsz, heads, rows), dtype=torch.float32,
            device=q.device)
        self._run(b, q, self._inputs(inputs, b, kv[2:], base), False,
                  (qb, kb, vb, o, f if self.n_finals else None))
        if out is not None:
            if not whole:
                finals[..., b.q0:b.q1] = f
            return None
        return (b.q0, b.q1, o, f)

    def _block_backward(self, b, q, kv, base, out, dout, finals, inputs, dq,
                        dk, dv):
        """Runs block b's backward; dq, dk, dv are where its gradients go
        (_Grad, or a float32 accumulator over the travelling keys)."""
        qb, ob, dob = (_view(t, b.q0, b.q1) for t in (q, out, dout))
        fb = _tokens(finals, b.q0, b.q1) if self.n_finals else None
        kb, vb = (_view(t, b.k0 - base, b.k1 - base) for t in kv[:2])
        gq = dq.target(b) if isinstance(dq, _Grad) else torch.empty_like(qb)
        gk, gv = (g.target(b) if isinstance(g, _Grad) else torch.empty_like(x)
                  for g, x in ((dk, kb), (dv, vb)))
        self._run(b, q, self._inputs(inputs, b, kv[2:], base), True,
                  (qb, kb, vb, ob, dob, fb, gq, gk, gv))
        for g, got, lo, hi in ((dq, gq, b.q0, b.q1), (dk, gk, b.k0, b.k1),
                               (dv, gv, b.k0, b.k1)):
            if isinstance(g, _Grad):
                g.add(b, got)
            else:
                g[:, :, lo - base:hi - base] += got

    # -- the merge ------------------------------------------------------------

    def _merge(self, sched, parts, out, finals):
        """Merges the parts (block -> (o, f) over its rows) into out and
        finals, whose rows the direct blocks wrote, by sched's runs: one
        derived merge of every share of a run (at most 8 at once, so each
        is rounded once; out is written in place, which the merge allows:
        each row's columns are read from every part before they are
        written), or a copy of a lone part; rows no block covers get the
        merge's identity (out 0, finals -inf)."""
        has = self.n_finals > 0
        for a, b, wrote, cover in sched.runs:
            if not cover:
                out[:, :, a:b] = 0
                finals[..., a:b] = -math.inf
                continue
            here = [(out[:, :, a:b], finals[..., a:b].contiguous())] \
                if wrote else []
            for x in cover:
                o, f = parts[x]
                here.append((o[:, :, a - x.q0:b - x.q0],
                             f[..., a - x.q0:b - x.q0].contiguous()))
            target = out[:, :, a:b]
            while len(here) > 1:
                merged = []
                for i in range(0, len(here), plan.MAX_WORLD):
                    group = here[i:i + plan.MAX_WORLD]
                    if len(group) == 1:
                        merged.append(group[0])
                        continue
                    last = len(here) <= plan.MAX_WORLD
                    o = target if last else group[0][0].new_empty(
                        group[0][0].shape)
                    f = torch.empty(group[0][1].shape, dtype=torch.float32,
                                    device=o.device)
                    self.att.merge_results(
                        [g[0] for g in group],
                        [g[1] for g in group] if has else None,
                        o, f if has else None)
                    merged.append((o, f))
                here = merged
            if here[0][0] is not target:
                target.copy_(here[0][0])
            finals[..., a:b] = here[0][1]

    # -- the ring -------------------------------------------------------------

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

    def forward(self, q, k, v, inputs, backward_follows=True):
        """(out, finals, what the backward plans by). The forward plans by
        positions alone: reading the per-token inputs' bounds waits for
        the work queued before the call (2 H100s, 2026-11-28: document
        forward 1.86 ms by positions, 2.35 ms by bounds read first), which
        only the backward's smaller transfers pay back (forward+backward
        11.08 -> 7.67 ms). So when a backward follows, the bounds are
        queued before the forward's kernels and read by the backward
        (_bounds_finish), whose host then waits for no more than the work
        queued before this forward."""
        p = self._plan(q, inputs)
        later = (self._bounds_start(inputs, q.shape[2], self._chunk(q),
                                    q.device) if backward_follows else None)
        sched = p.schedule(self.rank)
        kv, base = self._travelling(k, v, inputs), 0
        like = kv
        bsz, heads, n = q.shape[0], q.shape[1], q.shape[2]
        out = q.new_empty((bsz, heads, n, v.shape[-1]))
        finals = torch.empty((self.n_finals, bsz, heads, n),
                             dtype=torch.float32, device=q.device)
        parts = {}
        for t, blocks in enumerate(sched.steps):
            pending, got = self._next(p, kv, base, t, like)
            if blocks and kv is None:
                raise _lib.InternalError(
                    f"{self.where}: step {t} has blocks but no keys")
            for b in blocks:
                direct = b in sched.direct
                part = self._block_forward(
                    b, q, kv, base, inputs, out if direct else None, finals)
                if part is not None:
                    parts[b] = part[2:]
            if pending is not None:
                _wait(pending)
            if t < self.world - 1:
                kv, base = got if got is not None else (None, 0)
        self._merge(sched, parts, out, finals)
        return out, finals, (p if later is None else later)

    def backward(self, q, k, v, out, finals, dout, inputs, state=None):
        """dq, dk, dv; state: the forward's (its plan, or the bounds it
        queued, which plan the backward: any set of blocks that covers
        every kept element gives the gradients from the merged out and
        finals)."""
        world, rank = self.world, self.rank
        if isinstance(state, _Plan):
            p = state
        else:
            if state is None:  # no forward's: the bounds, read now
                state = self._bounds_start(inputs, q.shape[2],
                                           self._chunk(q), q.device)
            p = self._plan(q, inputs, self._bounds_finish(state))
        sched = p.schedule(rank)
        dout = dout.contiguous()
        kv, base = self._travelling(k, v, inputs), 0
        like = kv
        dq = _Grad(q, sched.direct, sched.mine, lambda b: (b.q0, b.q1))
        home = p.blocks[rank][rank]
        keys = lambda b: (b.k0, b.k1)
        extra = [p.travel[rank]] if p.travel[rank] is not None else []
        own = [_Grad(t, sched.key_direct, home, keys, extra) for t in (k, v)]
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
            for b in sched.steps[t]:
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
            own[0].add_span(a, b, acc_in[0])
            own[1].add_span(a, b, acc_in[1])
        return dq.result(), own[0].result(), own[1].result()
