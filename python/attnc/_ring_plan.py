"""Context parallelism without torch: which tokens each rank holds (the
sharding layouts), which key shard a rank sees at each ring step, which
(query rows, key columns) blocks of a step are computed and how, and what
a definition must be for its attention to be sharded (attnc.distributed
runs it; tests/python/test_ring_plan.py checks it against a host model)."""

from __future__ import annotations

import json
from typing import NamedTuple

from . import _lib

LAYOUTS = ("zigzag", "contiguous")
# attnc_attention_merge_results takes at most 8 parts: one per ring step.
MAX_WORLD = 8


def num_chunks(layout: str, world: int) -> int:
    """The chunks a sequence is cut into: two per rank for "zigzag" (rank r
    holds chunks r and 2W-1-r, so that causal work is balanced), one for
    "contiguous"."""
    return 2 * world if layout == "zigzag" else world


def rank_chunks(layout: str, world: int, rank: int) -> list[int]:
    """The global chunk ids rank holds, in the order of its local tokens."""
    if layout == "zigzag":
        return [rank, 2 * world - 1 - rank]
    return [rank]


def check_layout(where: str, layout, world: int, seq_len: int) -> int:
    """The chunk length of a sequence of seq_len tokens under layout over
    world ranks; InvalidArgument naming what is wrong."""
    if layout not in LAYOUTS:
        raise _lib.InvalidArgument(
            f"{where}: argument 'causal_layout': {layout!r} is not one of "
            f"{', '.join(repr(n) for n in LAYOUTS)}")
    if world < 1:
        raise _lib.InvalidArgument(
            f"{where}: a process group of {world} ranks")
    if world > MAX_WORLD:
        raise _lib.NotSupportedYet(
            f"{where}: a ring of {world} ranks (the merge takes at most "
            f"{MAX_WORLD} partial results, one per rank)")
    n = num_chunks(layout, world)
    if seq_len <= 0 or seq_len % n:
        raise _lib.InvalidArgument(
            f"{where}: a sequence of {seq_len} tokens does not cut into "
            f"{n} equal chunks ({layout!r} over {world} ranks)")
    return seq_len // n


def shard_ranges(layout: str, world: int, rank: int,
                 seq_len: int) -> list[tuple[int, int]]:
    """The global token ranges [start, stop) rank holds, in local order."""
    c = check_layout("attnc.distributed.shard", layout, world, seq_len)
    return [(i * c, (i + 1) * c) for i in rank_chunks(layout, world, rank)]


def source(rank: int, step: int, world: int) -> int:
    """The rank whose key shard rank holds at ring step step (shards move
    from rank i to rank i+1 each step)."""
    return (rank - step) % world


class Block(NamedTuple):
    """One attention call of a ring step: query rows [q0, q1) of the
    rank's shard against keys [k0, k1) of the source's shard, with the
    definition's mask ("causal": the diagonal step, local indices keep the
    global order) or without it ("full": every pair is visible)."""

    kind: str
    q0: int
    q1: int
    k0: int
    k1: int


def _pair(causal: bool, qc: int, kc: int) -> str:
    if not causal or kc < qc:
        return "full"
    return "diagonal" if kc == qc else "empty"


def step_blocks(layout: str, world: int, rank: int, src: int, causal: bool,
                chunk: int) -> list[Block]:
    """The blocks rank computes with src's key shard (chunk tokens a
    chunk). Without a mask: one full block. With a causal mask each chunk
    pair is full, diagonal or empty; a step with a diagonal pair is the
    rank's own shard, run whole with the mask (local indices order the
    tokens as the global ones do); the full pairs of another step form one
    rectangle (both layouts), run without the mask; no full pair: nothing."""
    qs = rank_chunks(layout, world, rank)
    ks = rank_chunks(layout, world, src)
    kinds = {(a, b): _pair(causal, qc, kc)
             for a, qc in enumerate(qs) for b, kc in enumerate(ks)}
    n_q, n_k = len(qs) * chunk, len(ks) * chunk
    if "diagonal" in kinds.values():
        # The masked call sees local indices: pair (a, b) is then full for
        # a > b, diagonal for a == b, empty for a < b. It must agree.
        for (a, b), kind in kinds.items():
            local = "full" if a > b else "diagonal" if a == b else "empty"
            if src != rank or kind != local:
                raise _lib.InternalError(
                    f"attnc.distributed: layout {layout!r}, rank {rank}, "
                    f"source {src}: chunk pair {a},{b} is {kind}, the "
                    f"masked call would make it {local}")
        return [Block("causal", 0, n_q, 0, n_k)]
    full = [ab for ab, kind in kinds.items() if kind == "full"]
    if not full:
        return []
    rows = sorted({a for a, _ in full})
    cols = sorted({b for _, b in full})
    if (len(full) != len(rows) * len(cols)
            or rows != list(range(rows[0], rows[-1] + 1))
            or cols != list(range(cols[0], cols[-1] + 1))):
        raise _lib.InternalError(
            f"attnc.distributed: layout {layout!r}, rank {rank}, source "
            f"{src}: the visible chunk pairs {full} are not one rectangle")
    return [Block("full", rows[0] * chunk, (rows[-1] + 1) * chunk,
                  cols[0] * chunk, (cols[-1] + 1) * chunk)]


# The backward of a causal block longer than this many rows runs as square
# pieces of about as many (backward_blocks): attnc's causal backward over
# one 65,536-token call ran 476.5 TFLOPS against 522.7 over 32,768 tokens
# and 511.8 over 16,384 (H200, bf16, H32 D128, 2026-11-30; ncu: L2 hits
# 76% against 98% at 16k, a head's live query tiles outgrowing the L2).
BACKWARD_CAUSAL_ROWS = 32768


def backward_blocks(blocks, max_rows: int | None = None) -> list:
    """A step's blocks for the backward: a square causal block of more than
    max_rows rows (None: BACKWARD_CAUSAL_ROWS) cut into p = ceil(rows /
    max_rows) square causal pieces on its diagonal (local indices keep
    their order within each) and, for each piece but the first, one full
    block of its rows against every key before it (all visible under the
    causal mask); cuts on multiples of 128 tokens where the pieces allow
    (a piece then runs up to 127 rows over rows / p). The pieces' gradients
    sum to the block's; other blocks are returned as they are."""
    if max_rows is None:
        max_rows = BACKWARD_CAUSAL_ROWS
    out = []
    for b in blocks:
        n = b.q1 - b.q0
        if (b.kind != "causal" or n <= max_rows or (b.q0, b.q1) != (b.k0, b.k1)):
            out.append(b)
            continue
        p = -(-n // max_rows)
        unit = 128 if n // p >= 128 else 1
        cuts = [b.q0 + (i * n // p) // unit * unit for i in range(p)] + [b.q1]
        for a, e in zip(cuts, cuts[1:]):
            out.append(Block("causal", a, e, a, e))
            if a > b.q0:
                out.append(Block("full", a, e, b.q0, a))
    return out


class MergeRun(NamedTuple):
    """Rows [a, b) of a rank's shard and the partial results that merge
    into them beside the direct block's: (step, block index in the step)
    of each block whose rows cover them."""

    a: int
    b: int
    parts: tuple


class ForwardSchedule(NamedTuple):
    """What a rank's forward runs, worked out once per chunk length: per
    ring step (source rank, its blocks); step 0's one block covers every
    row and writes the result directly (no fill: every row has it), the
    other blocks' partial results cover only their rows and are merged
    into the result, in place, run by run (rows no part covers keep the
    direct block's result as it is)."""

    steps: tuple
    runs: tuple


def forward_schedule(layout: str, world: int, rank: int, causal: bool,
                     chunk: int) -> ForwardSchedule:
    """rank's ForwardSchedule (step_blocks for each step); InternalError
    where step 0 is not one block of every row, or a run would merge more
    than MAX_WORLD results."""
    steps = tuple((source(rank, t, world),
                   tuple(step_blocks(layout, world, rank,
                                     source(rank, t, world), causal, chunk)))
                  for t in range(world))
    n = len(rank_chunks(layout, world, rank)) * chunk
    home = steps[0][1]
    if len(home) != 1 or (home[0].q0, home[0].q1) != (0, n):
        raise _lib.InternalError(
            f"attnc.distributed: layout {layout!r}, rank {rank}: the own "
            f"shard's step is {list(home)}, not one block of all {n} rows")
    parts = [(t, i, b) for t, (_, blocks) in enumerate(steps) if t
             for i, b in enumerate(blocks)]
    cuts = sorted({0, n} | {b.q0 for _, _, b in parts}
                  | {b.q1 for _, _, b in parts})
    runs = []
    for a, e in zip(cuts, cuts[1:]):
        cover = tuple((t, i) for t, i, b in parts if b.q0 <= a and e <= b.q1)
        if not cover:
            continue
        if len(cover) + 1 > MAX_WORLD:
            raise _lib.InternalError(
                f"attnc.distributed: rows {a}..{e} of rank {rank} merge "
                f"{len(cover) + 1} results (at most {MAX_WORLD})")
        runs.append(MergeRun(a, e, cover))
    return ForwardSchedule(steps, tuple(runs))


# -- what a definition must be ------------------------------------------------

QUERY_INPUTS = ("per_row", "per_query_token")
KEY_INPUTS = ("per_key", "per_key_token")
SHARED_INPUTS = ("scalar", "per_head")


class RingSupport(NamedTuple):
    """How a definition is sharded: its mask ("none", "causal" or
    "positions", see ring_support), and its
    custom inputs by how they travel: with the queries (sliced with the
    rank's rows), with the keys (sent around the ring with K and V), or
    shared (scalars, per-head values)."""

    mask: str
    query_inputs: tuple
    key_inputs: tuple
    shared_inputs: tuple
    grad_inputs: tuple


def _reads(nodes, roots, wanted) -> bool:
    """Whether a node reachable from roots satisfies wanted."""
    seen, todo = set(), list(roots)
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        if wanted(nodes[i]):
            return True
        todo.extend(nodes[i].get("args", ()))
    return False


def _is_index(node, space: str) -> bool:
    return (node.get("op") == "param" and node.get("param") == "index"
            and node.get("space") == space)


def _is_causal(nodes, root: int) -> bool:
    """Whether the mask is q_idx >= kv_idx (or kv_idx <= q_idx)."""
    node = nodes[root]
    args = node.get("args", ())
    if len(args) != 2:
        return False
    a, b = nodes[args[0]], nodes[args[1]]
    if node.get("op") == "ge":
        return _is_index(a, "row") and _is_index(b, "col")
    if node.get("op") == "le":
        return _is_index(a, "col") and _is_index(b, "row")
    return False


def ring_support(definition, where: str = "attnc.distributed") -> RingSupport:
    """What ring attention needs to know of definition, or NotSupportedYet
    saying what it cannot shard yet: linear attention, full [B,H,Sq,Skv]
    inputs. Its mask is "none", "causal" (q_idx >= kv_idx, and no other
    function reads q_idx or kv_idx: the chunk pairs are full, empty or the
    rank's own diagonal) or "positions" (any other mask, or a function
    that reads q_idx or kv_idx: sliding windows, prefix-LM, documents,
    ALiBi by index; its calls run the positioned twin with the global
    positions of their first query and key, _ring_positions)."""
    graph = json.loads(definition.ir_json())
    name = graph.get("name", "?")
    if graph.get("kind") != "attention":
        raise _lib.NotSupportedYet(
            f"{where}: '{name}' is linear attention; its state passes "
            "across ranks with attnc.distributed.linear_attention_cp, not "
            "around a ring")
    nodes = graph["nodes"]
    functions = {f["name"]: [r["node"] for r in f["results"]]
                 for f in graph["functions"]}
    mask = "none"
    if graph.get("has_mask"):
        roots = functions.get("mask_mod", [])
        causal = len(roots) == 1 and _is_causal(nodes, roots[0])
        mask = "causal" if causal else "positions"
    for fn, roots in functions.items():
        if fn == "mask_mod":
            continue
        if _reads(nodes, roots, lambda n: n.get("op") == "param"
                  and n.get("param") == "index"
                  and n.get("name") in ("q_idx", "kv_idx")):
            mask = "positions"
    query, key, shared, grads = [], [], [], []
    for decl in graph.get("inputs", ()):
        shape = decl["shape"]
        if shape in QUERY_INPUTS:
            query.append(decl["name"])
        elif shape in KEY_INPUTS:
            key.append(decl["name"])
        elif shape in SHARED_INPUTS:
            shared.append(decl["name"])
        else:
            raise _lib.NotSupportedYet(
                f"{where}: '{name}': the {shape} input '{decl['name']}' "
                "spans queries and keys; it is not sharded yet")
        if decl.get("requires_grad"):
            grads.append(decl["name"])
    return RingSupport(mask, tuple(query), tuple(key), tuple(shared),
                       tuple(grads))


TWIN_SUFFIX = "__ring_nomask"


def maskless_twin(definition):
    """definition without its mask_mod, registered as NAME__ring_nomask
    (the same IR otherwise, loaded from its IR JSON): the ring's fully
    visible off-diagonal blocks run it."""
    from ._tools import from_ir_json

    graph = json.loads(definition.ir_json())
    graph["functions"] = [f for f in graph["functions"]
                          if f["name"] != "mask_mod"]
    graph["has_mask"] = False
    graph["name"] = graph["name"] + TWIN_SUFFIX
    return from_ir_json(json.dumps(graph))
