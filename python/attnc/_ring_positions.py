"""Ring attention for masks and score_mods that read absolute positions
(sliding windows, prefix-LM, document masks, ALiBi by index), without
torch or a GPU: the definition's positioned twin, whose q_idx and kv_idx
are the call's local indices plus two runtime scalar inputs (the global
position of the call's first query and first key), and the plan of each
ring step (which query rows and keys of each pair of shard segments run,
with which offsets, and which keys of a shard travel at all), from an
interval classification of the mask over position boxes (sound: a box
called empty holds no kept element, one called full no masked one),
given bounds of the per-token inputs the mask reads (TokenBounds), with
the pairs of one position shift joined into one call (coalesce).

The offsets are kernel arguments, so one compiled kernel serves every
shard and step; the skeletons, the block classification and the mask
reuse see them as any scalar input (mask_block_class reads them, the
reuse key holds them). attnc.distributed runs the plan;
tests/python/test_ring_positions.py checks it against a float64 model."""

from __future__ import annotations

import json
import math
from typing import NamedTuple

from . import _lib
from . import _ring_plan as plan

Q_OFFSET = "ring_q_offset"
KV_OFFSET = "ring_kv_offset"
POSITIONS_SUFFIX = "__ring_pos"
# The granularity of the trimming of a pair's rows and keys (the kernels'
# tiles are 64 or 128 wide; a finer cut would not skip more work).
TILE = 128


# -- which definitions need positions ----------------------------------------

def _index_reads(nodes, roots) -> bool:
    seen, todo = set(), list(roots)
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        n = nodes[i]
        if n.get("op") == "param" and n.get("param") == "index" and \
                n.get("name") in ("q_idx", "kv_idx"):
            return True
        todo.extend(n.get("args", ()))
    return False


def reads_positions(graph: dict) -> bool:
    """Whether any function of the IR graph (a parsed ir_json) reads q_idx
    or kv_idx."""
    nodes = graph["nodes"]
    return any(_index_reads(nodes, [r["node"] for r in f["results"]])
               for f in graph["functions"])


def mask_inputs(graph: dict) -> set:
    """The names of the inputs the mask_mod reads."""
    root = mask_root(graph)
    nodes, names = graph["nodes"], set()
    seen, todo = set(), [] if root is None else [root]
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        n = nodes[i]
        if n.get("op") == "param" and n.get("param") == "input":
            names.add(n.get("name"))
        todo.extend(n.get("args", ()))
    return names


def mask_root(graph: dict):
    """The node of the mask_mod's result, or None without a mask."""
    for f in graph["functions"]:
        if f["name"] == "mask_mod":
            return f["results"][0]["node"]
    return None


# -- the positioned twin -----------------------------------------------------

def positioned_graph(graph: dict) -> dict:
    """graph with every read of q_idx replaced by q_idx + ring_q_offset and
    of kv_idx by kv_idx + ring_kv_offset (two i32 scalar inputs appended
    to its inputs), named NAME__ring_pos. Custom inputs still load at the
    local indices: per-token inputs are sharded with the sequence."""
    where = "attnc.distributed.ring_attention"
    names = {d["name"] for d in graph.get("inputs", ())}
    for taken in (Q_OFFSET, KV_OFFSET):
        if taken in names:
            raise _lib.UserError(
                f"{where}: '{graph['name']}' declares an input named "
                f"'{taken}', which the ring's position offsets use")
    out = dict(graph)
    out["name"] = graph["name"] + POSITIONS_SUFFIX
    out["inputs"] = list(graph.get("inputs", ())) + [
        {"name": n, "shape": "scalar", "type": "i32", "sample_lo": 0.0,
         "sample_hi": 4096.0, "requires_grad": False}
        for n in (Q_OFFSET, KV_OFFSET)]
    # The offsets first, then the nodes in their order, each index read
    # followed by its sum with the offset (which its users then read).
    nodes = [{"name": n, "op": "param", "param": "input", "space": "const",
              "type": "i32"} for n in (Q_OFFSET, KV_OFFSET)]
    remap = {}
    for i, n in enumerate(graph["nodes"]):
        m = dict(n)
        if "args" in m:
            m["args"] = [remap[a] for a in m["args"]]
        nodes.append(m)
        remap[i] = len(nodes) - 1
        if n.get("op") == "param" and n.get("param") == "index" and \
                n.get("name") in ("q_idx", "kv_idx"):
            offset = 0 if n["name"] == "q_idx" else 1
            nodes.append({"op": "add", "args": [remap[i], offset],
                          "space": n["space"], "type": n["type"]})
            remap[i] = len(nodes) - 1
    out["nodes"] = nodes
    out["functions"] = [
        {"name": f["name"],
         "results": [dict(r, node=remap[r["node"]]) for r in f["results"]]}
        for f in graph["functions"]]
    return out


def positioned_twin(definition):
    """definition's positioned twin, a Definition (see positioned_graph)."""
    from ._tools import from_ir_json

    graph = json.loads(definition.ir_json())
    return from_ir_json(json.dumps(positioned_graph(graph)))


# -- the interval classification of a mask over a box ------------------------

_BOTH = frozenset((False, True))
_TRUE = frozenset((True,))
_FALSE = frozenset((False,))


def _span(values):
    return (min(values), max(values))


def _cmp(op, a, b):
    """The truth set of a op b over intervals a and b (None: unknown)."""
    if a is None or b is None:
        return _BOTH
    (alo, ahi), (blo, bhi) = a, b
    if op == "lt":
        return _TRUE if ahi < blo else _FALSE if alo >= bhi else _BOTH
    if op == "le":
        return _TRUE if ahi <= blo else _FALSE if alo > bhi else _BOTH
    if op == "gt":
        return _cmp("lt", b, a)
    if op == "ge":
        return _cmp("le", b, a)
    same = alo == ahi == blo == bhi
    apart = ahi < blo or bhi < alo
    if op == "eq":
        return _TRUE if same else _FALSE if apart else _BOTH
    return _FALSE if same else _TRUE if apart else _BOTH  # ne


def _numeric(op, args):
    """The interval of a numeric op over its operands' (None: unknown)."""
    if any(a is None for a in args):
        return None
    if op in ("add", "sub", "mul", "min", "max"):
        (alo, ahi), (blo, bhi) = args
        if op == "add":
            return (alo + blo, ahi + bhi)
        if op == "sub":
            return (alo - bhi, ahi - blo)
        if op == "min":
            return (min(alo, blo), min(ahi, bhi))
        if op == "max":
            return (max(alo, blo), max(ahi, bhi))
        return _span([x * y for x in (alo, ahi) for y in (blo, bhi)])
    if op in ("div", "floordiv"):
        (alo, ahi), (blo, bhi) = args
        if blo <= 0 <= bhi:
            return None
        lo, hi = _span([x / y for x in (alo, ahi) for y in (blo, bhi)])
        return (math.floor(lo), math.floor(hi)) if op == "floordiv" else \
            (lo, hi)
    if op == "neg":
        lo, hi = args[0]
        return (-hi, -lo)
    if op == "abs":
        lo, hi = args[0]
        if lo >= 0:
            return (lo, hi)
        return (0, max(-lo, hi)) if hi >= 0 else (-hi, -lo)
    if op == "relu":
        lo, hi = args[0]
        return (max(lo, 0), max(hi, 0))
    if op == "to_float":
        return args[0]
    return None  # exp, mod, ...: not needed to bound a mask's positions


def classify_box(graph: dict, root: int, q_lo: int, q_hi: int, k_lo: int,
                 k_hi: int, values=None) -> str:
    """"empty", "full" or "partial": the mask (node root of graph) over
    queries [q_lo, q_hi] x keys [k_lo, k_hi] (positions as the mask reads
    them). values: input name -> (lo, hi) bounds of its values over the
    box (scalars: (x, x)); inputs without one, b and h are unknown."""
    values = values or {}
    nodes = graph["nodes"]
    memo = {}

    def ev(i):
        if i in memo:
            return memo[i]
        n = nodes[i]
        op = n.get("op")
        if op == "const":
            v = float(n["value"])
            r = (v, v) if math.isfinite(v) else None
        elif op == "param":
            name = n.get("name")
            if n.get("param") == "index" and name == "q_idx":
                r = (q_lo, q_hi)
            elif n.get("param") == "index" and name == "kv_idx":
                r = (k_lo, k_hi)
            elif n.get("param") == "input" and name in values:
                r = tuple(values[name])
            else:
                r = None
        else:
            args = [ev(a) for a in n.get("args", ())]
            if op in ("lt", "le", "gt", "ge", "eq", "ne"):
                r = _cmp(op, *args)
            elif op == "and":
                r = (_FALSE if _FALSE == args[0] or _FALSE == args[1] else
                     _TRUE if _TRUE == args[0] == args[1] else _BOTH)
            elif op == "or":
                r = (_TRUE if _TRUE == args[0] or _TRUE == args[1] else
                     _FALSE if _FALSE == args[0] == args[1] else _BOTH)
            elif op == "not":
                r = frozenset(not x for x in args[0])
            elif op == "select":
                c, x, y = args
                if c == _TRUE:
                    r = x
                elif c == _FALSE:
                    r = y
                elif isinstance(x, frozenset):
                    r = x | y
                else:
                    r = None if x is None or y is None else \
                        (min(x[0], y[0]), max(x[1], y[1]))
            else:
                r = _numeric(op, args)
        memo[i] = r
        return r

    got = ev(root)
    if not isinstance(got, frozenset):
        raise _lib.InternalError(
            "attnc.distributed: the mask's result is not a boolean")
    return "full" if got == _TRUE else "empty" if got == _FALSE else \
        "partial"


# -- the plan of a ring step --------------------------------------------------

class Segment(NamedTuple):
    """A run of a shard's tokens that are consecutive in the sequence:
    local tokens [local, local + length) are positions [pos, pos + length)."""

    local: int
    pos: int
    length: int


def segments(chunks, chunk: int) -> list[Segment]:
    """A shard's segments from its chunk ids in local order."""
    return [Segment(i * chunk, c * chunk, chunk) for i, c in enumerate(chunks)]


class PosBlock(NamedTuple):
    """One attention call: rows [q0, q1) of the rank's shard against keys
    [k0, k1) of the source's shard, whose positions start at q_pos and
    k_pos; "masked" runs the positioned twin, "full" its maskless twin
    (every element kept)."""

    kind: str
    q0: int
    q1: int
    k0: int
    k1: int
    q_pos: int
    k_pos: int


class TokenBounds:
    """Bounds of per-token inputs' values by position: for each name, the
    lowest and highest value over each tile of `tile` positions (None
    where unknown: a tile no rank filled, or a non-finite value in it).
    Document ids sorted along the sequence give tight bounds; any values
    give sound ones."""

    def __init__(self, tile: int, table: dict):
        self.tile = tile
        self.table = table  # name -> (lows, highs), one entry per tile

    def over(self, name, lo: int, hi: int):
        """(lowest, highest) of name's values at positions [lo, hi], or
        None when some tile of them is unknown."""
        lows, highs = self.table[name]
        a, b = lo // self.tile, hi // self.tile + 1
        ls, hs = lows[a:b], highs[a:b]
        if len(ls) != b - a or any(x is None for x in ls) or \
                any(x is None for x in hs):
            return None
        return (min(ls), max(hs))


def token_bounds(values: dict, tile: int) -> TokenBounds:
    """TokenBounds of per-position value sequences (name -> values at
    positions 0..n-1), as the ring computes them from the shards."""
    table = {}
    for name, xs in values.items():
        xs = [float(x) for x in xs]
        tiles = [xs[a:a + tile] for a in range(0, len(xs), tile)]
        table[name] = ([min(t) if all(map(math.isfinite, t)) else None
                        for t in tiles],
                       [max(t) if all(map(math.isfinite, t)) else None
                        for t in tiles])
    return TokenBounds(tile, table)


class MaskBoxes:
    """The classification of one definition's mask over position boxes,
    with the call's scalar inputs known and, optionally, bounds of its
    per-query and per-key token inputs by position (TokenBounds; a box
    then reads the bounds over its rows and keys). Cached: a plan asks the
    same boxes for every step of every call."""

    def __init__(self, graph: dict, scalars=None, query_bounds=None,
                 key_bounds=None):
        self.graph = graph
        self.root = mask_root(graph)
        self.values = {n: (float(x), float(x))
                       for n, x in (scalars or {}).items()}
        self.query_bounds, self.key_bounds = query_bounds, key_bounds
        self._memo = {}

    def _values(self, q_lo, q_hi, k_lo, k_hi):
        values = self.values
        for bounds, lo, hi in ((self.query_bounds, q_lo, q_hi),
                               (self.key_bounds, k_lo, k_hi)):
            if bounds is None:
                continue
            values = dict(values)
            for name in bounds.table:
                got = bounds.over(name, lo, hi)
                if got is not None:
                    values[name] = got
        return values

    def __call__(self, q_lo, q_hi, k_lo, k_hi) -> str:
        if self.root is None:
            return "full"
        key = (q_lo, q_hi, k_lo, k_hi)
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = classify_box(
                self.graph, self.root, q_lo, q_hi, k_lo, k_hi,
                self._values(q_lo, q_hi, k_lo, k_hi))
        return got


def _tiles(length: int, tile: int):
    return [(a, min(a + tile, length)) for a in range(0, length, tile)]


def pair_block(boxes: MaskBoxes, qs: Segment, ks: Segment,
               tile: int = TILE):
    """The block of query segment qs against key segment ks, or None when
    the mask keeps none of it. A partial pair is trimmed to the query rows
    whose strip (every key of ks) may keep an element, then to the keys
    whose strip (those rows) may."""
    whole = boxes(qs.pos, qs.pos + qs.length - 1, ks.pos,
                  ks.pos + ks.length - 1)
    if whole == "empty":
        return None
    if whole == "full":
        return PosBlock("full", qs.local, qs.local + qs.length, ks.local,
                        ks.local + ks.length, qs.pos, ks.pos)
    rows = [(a, b) for a, b in _tiles(qs.length, tile)
            if boxes(qs.pos + a, qs.pos + b - 1, ks.pos,
                     ks.pos + ks.length - 1) != "empty"]
    if not rows:
        return None
    q_a, q_b = rows[0][0], rows[-1][1]
    keys = [(a, b) for a, b in _tiles(ks.length, tile)
            if boxes(qs.pos + q_a, qs.pos + q_b - 1, ks.pos + a,
                     ks.pos + b - 1) != "empty"]
    if not keys:
        return None
    k_a, k_b = keys[0][0], keys[-1][1]
    kind = "full" if boxes(qs.pos + q_a, qs.pos + q_b - 1, ks.pos + k_a,
                           ks.pos + k_b - 1) == "full" else "masked"
    return PosBlock(kind, qs.local + q_a, qs.local + q_b, ks.local + k_a,
                    ks.local + k_b, qs.pos + q_a, ks.pos + k_a)


def step_blocks(boxes: MaskBoxes, q_chunks, k_chunks, chunk: int,
                tile: int = TILE) -> list[PosBlock]:
    """The blocks of a rank (chunk ids q_chunks) with a source's keys
    (k_chunks): one per pair of their segments the mask does not empty."""
    out = []
    for qs in segments(q_chunks, chunk):
        for ks in segments(k_chunks, chunk):
            b = pair_block(boxes, qs, ks, tile)
            if b is not None:
                out.append(b)
    return out


def _shift_of(segs, lo: int, hi: int):
    """The one position - local shift of the segments holding local
    tokens [lo, hi), or None when they differ (or a token is in none)."""
    shifts, covered = set(), 0
    for s in segs:
        a, b = max(lo, s.local), min(hi, s.local + s.length)
        if a < b:
            shifts.add(s.pos - s.local)
            covered += b - a
    return shifts.pop() if len(shifts) == 1 and covered == hi - lo else None


def coalesce(blocks, q_segs, k_segs) -> list[PosBlock]:
    """blocks (of one step) with those whose rows and keys share one
    position shift each joined into their bounding box, one call instead
    of several (and no merge of their common rows), where the box's rows
    and keys lie in segments of those shifts (so the call's positions are
    the true ones) and it meets no other block. Sound: an element of the
    box in none of its blocks lies in a pair the plan skipped or in a
    part of a pair it trimmed, both empty, so the masked call keeps none
    of it. A joined box is "full" only when its blocks are full and tile
    it."""
    groups = {}
    for b in blocks:
        groups.setdefault((b.q_pos - b.q0, b.k_pos - b.k0), []).append(b)
    out = []
    for (qs, ks), group in groups.items():
        if len(group) == 1:
            out.extend(group)
            continue
        q0, q1 = min(b.q0 for b in group), max(b.q1 for b in group)
        k0, k1 = min(b.k0 for b in group), max(b.k1 for b in group)
        others = [b for b in blocks if b not in group]
        if (_shift_of(q_segs, q0, q1) != qs
                or _shift_of(k_segs, k0, k1) != ks
                or any(b.q0 < q1 and q0 < b.q1 and b.k0 < k1 and k0 < b.k1
                       for b in others)):
            out.extend(group)
            continue
        area = sum((b.q1 - b.q0) * (b.k1 - b.k0) for b in group)
        full = all(b.kind == "full" for b in group) and \
            area == (q1 - q0) * (k1 - k0)
        out.append(PosBlock("full" if full else "masked", q0, q1, k0, k1,
                            q0 + qs, k0 + ks))
    return sorted(out, key=lambda b: (b.q0, b.k0))


def ring_plan(boxes: MaskBoxes, layout: str, world: int, chunk: int,
              tile: int = TILE):
    """(blocks, travel): blocks[r][s] the calls of rank r with rank s's
    keys (step_blocks, coalesced), travel[s] the span of s's keys that
    travels (travel_range)."""
    chunks = [plan.rank_chunks(layout, world, r) for r in range(world)]
    segs = [segments(c, chunk) for c in chunks]
    blocks = [[coalesce(step_blocks(boxes, chunks[r], chunks[s], chunk,
                                    tile), segs[r], segs[s])
               for s in range(world)] for r in range(world)]
    travel = [travel_range([blocks[r][s] for r in range(world) if r != s])
              for s in range(world)]
    return blocks, travel


def travel_range(blocks_by_rank) -> tuple[int, int] | None:
    """The keys of a source's shard that travel around the ring: the span
    [a, b) of the keys every other rank's blocks with it read (None: no
    rank reads any, nothing travels)."""
    spans = [(b.k0, b.k1) for blocks in blocks_by_rank for b in blocks]
    if not spans:
        return None
    return (min(a for a, _ in spans), max(b for _, b in spans))
