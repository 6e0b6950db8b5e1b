"""The ring's per-rank bookkeeping for attnc.distributed_positions: which
blocks of a plan a rank runs at each step, which of them write their rows
(or keys) into the result directly, the forward's merge as runs of rows,
and the float32 sums of the gradients' shares that are not written
directly."""

from __future__ import annotations

import torch

from . import _ring_plan as plan
from . import _ring_positions as pos


class _Grad:
    """A gradient of a rank's tensor (bhsd, tokens along dim 2) in its
    dtype: the direct blocks' kernels write their tokens into it (no
    copy); the other shares are summed in float32 over the span of their
    tokens, and added to it once at the end (each kernel's result is
    rounded once, the sum once, as with one float32 accumulator)."""

    def __init__(self, like, direct, blocks, span, extra=()):
        self.out = torch.empty_like(like)
        self.span, self.direct = span, set(direct)
        others = [span(b) for b in blocks if b not in self.direct]
        others += list(extra)
        self.lo = min((a for a, _ in others), default=0)
        self.hi = max((b for _, b in others), default=0)
        shape = like.shape[:2] + (self.hi - self.lo, like.shape[-1])
        self.acc = torch.zeros(shape, dtype=torch.float32,
                               device=like.device) if others else None

    def target(self, b):
        """Where block b's kernel writes its share."""
        a, e = self.span(b)
        if b in self.direct:
            return self.out[:, :, a:e]
        return self.out.new_empty(self.out.shape[:2] + (e - a,
                                                        self.out.shape[-1]))

    def add(self, b, got):
        if b not in self.direct:
            self.add_span(*self.span(b), got)

    def add_span(self, a, e, got):
        self.acc[:, :, a - self.lo:e - self.lo] += got

    def result(self):
        n = self.out.shape[2]
        spans = [self.span(b) for b in self.direct]
        cuts = sorted({0, n, self.lo, self.hi} | {a for a, _ in spans}
                      | {e for _, e in spans})
        for a, e in zip(cuts, cuts[1:]):
            written = any(x <= a and e <= y for x, y in spans)
            summed = self.acc is not None and self.lo <= a and e <= self.hi
            if written and summed:
                self.out[:, :, a:e] = (self.out[:, :, a:e].float()
                                       + self.acc[:, :, a - self.lo:
                                                  e - self.lo])
            elif summed:
                self.out[:, :, a:e] = self.acc[:, :, a - self.lo:e - self.lo]
            elif not written:
                self.out[:, :, a:e] = 0
        return self.out


def _direct(blocks, span=lambda b: (b.q0, b.q1)):
    """The blocks that write their rows (span: which tokens of which
    tensor) into the result directly: the largest first, then each that
    shares no token with one chosen (the others' shares are merged or
    added into those tokens afterwards)."""
    chosen = []
    for b in sorted(blocks, key=lambda b: span(b)[0] - span(b)[1]):
        lo, hi = span(b)
        if all(hi <= span(c)[0] or span(c)[1] <= lo for c in chosen):
            chosen.append(b)
    return chosen


class _Schedule:
    """What one rank runs of a plan, worked out once: its blocks per step,
    those written into the result directly, and the forward's merge as
    runs of rows [a, b) with whether a direct block wrote them and which
    other blocks' parts cover them."""

    def __init__(self, p, rank, world, n):
        self.steps = [p.blocks[rank][plan.source(rank, t, world)]
                      for t in range(world)]
        self.mine = [b for blocks in self.steps for b in blocks]
        self.direct = set(_direct(self.mine))
        parts = [b for b in self.mine if b not in self.direct]
        spans = [(b.q0, b.q1) for b in self.mine]
        cuts = sorted({0, n} | {a for a, _ in spans} | {b for _, b in spans})
        self.runs = []
        for a, b in zip(cuts, cuts[1:]):
            wrote = any(d.q0 <= a and b <= d.q1 for d in self.direct)
            cover = [x for x in parts if x.q0 <= a and b <= x.q1]
            if cover or not wrote:
                self.runs.append((a, b, wrote, cover))
        home = p.blocks[rank][rank]
        self.key_direct = _direct(home, lambda b: (b.k0, b.k1))


class _Plan:
    """A ring's blocks and travelling key ranges for one chunk length, one
    set of scalar inputs and one set of bounds of the mask's per-token
    inputs (_ring_positions.ring_plan), and each rank's schedule."""

    def __init__(self, boxes, layout, world, chunk):
        self.world, self.n = world, plan.num_chunks(layout, world) // world \
            * chunk
        self.blocks, self.travel = pos.ring_plan(boxes, layout, world, chunk)
        self._schedules = {}

    def schedule(self, rank) -> _Schedule:
        got = self._schedules.get(rank)
        if got is None:
            got = self._schedules[rank] = _Schedule(self, rank, self.world,
                                                    self.n)
        return got
