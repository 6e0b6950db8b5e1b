"""Linear attention across ranks without torch: which definitions pass their
state exactly, the decay_mod evaluated over a shard (numpy or torch), and
the scan of per-rank state transforms that gives each rank its initial
state (attnc.distributed.linear_attention_cp; docs/distributed.md).

Per batch and value head the recurrence is S_t = exp(g_t)·S_{t-1} +
k_tᵀv_t with g_t = decay_mod(decay_t) one number per token, so a shard of
tokens maps its initial state S_in to A·S_in + S, where S is the shard's
final state from a zero initial state and A = exp(Σ g_t over the shard)
one number per (batch, head): the transform is elementwise (a scalar)."""

from __future__ import annotations

import json
import math
from typing import NamedTuple

from . import _lib

# Input shapes of a linear definition by how they are sharded: per-token
# ones with the sequence, the rest whole on every rank.
TOKEN_INPUTS = ("per_row",)
SHARED_INPUTS = ("scalar", "per_head")

# The decay_mod's value per token is one number: its result lives in one of
# these spaces (per token, per head, or a constant).
_SCALAR_SPACES = ("row", "head", "const")


class LinearCpSupport(NamedTuple):
    """How a linear definition is sharded: its custom inputs by role, and
    the IR of its decay_mod (the state transforms are computed from it)."""

    name: str
    token_inputs: tuple
    shared_inputs: tuple
    nodes: list
    decay_root: int  # -1: no decay_mod (g = 0, A = 1)


def _reachable(nodes, roots):
    seen, todo = set(), list(roots)
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        todo.extend(nodes[i].get("args", ()))
    return seen


def linear_cp_support(definition,
                      where: str = "attnc.distributed") -> LinearCpSupport:
    """What linear_attention_cp needs of definition, or NotSupportedYet
    saying why its state cannot be passed exactly: a mod reading the token
    index t (local to each shard), a decay that is not one number per
    token (its shard transform would not be elementwise), operations the
    transform's evaluator does not know, inputs of other shapes."""
    graph = json.loads(definition.ir_json())
    name = graph.get("name", "?")
    if graph.get("kind") != "linear":
        raise _lib.NotSupportedYet(
            f"{where}: '{name}' is not linear attention (use "
            "attnc.distributed.ring_attention)")
    nodes = graph["nodes"]
    functions = {f["name"]: [r["node"] for r in f["results"]]
                 for f in graph["functions"]}
    for fn, roots in functions.items():
        for i in _reachable(nodes, roots):
            n = nodes[i]
            if (n.get("op") == "param" and n.get("param") == "index"
                    and n.get("space") == "row"):
                raise _lib.NotSupportedYet(
                    f"{where}: '{name}': {fn} reads the token index t, "
                    "which is local to each shard (the kernels take no "
                    "position offset yet); give positions as a per_row "
                    "input instead, it is sharded with the sequence")
    roots = functions.get("decay_mod", [])
    root = roots[0] if roots else -1
    if root >= 0:
        if nodes[root].get("space") not in _SCALAR_SPACES:
            raise _lib.NotSupportedYet(
                f"{where}: '{name}': its decay_mod is not one number per "
                "token, so a shard's state transform is not elementwise")
        for i in _reachable(nodes, [root]):
            n = nodes[i]
            op = n.get("op")
            if op == "param":
                if n.get("param") not in ("decay", "input", "headdim",
                                          "index"):
                    raise _lib.NotSupportedYet(
                        f"{where}: '{name}': its decay_mod reads "
                        f"'{n.get('name')}' ({n.get('param')}); the shard "
                        "transform is not derived for it")
            elif op != "const" and op not in _OPS:
                raise _lib.NotSupportedYet(
                    f"{where}: '{name}': its decay_mod uses '{op}', which "
                    "the shard transform's evaluator does not know")
    token, shared = [], []
    for decl in graph.get("inputs", ()):
        shape = decl["shape"]
        if shape in TOKEN_INPUTS:
            token.append(decl["name"])
        elif shape in SHARED_INPUTS:
            shared.append(decl["name"])
        else:
            raise _lib.NotSupportedYet(
                f"{where}: '{name}': the {shape} input '{decl['name']}' is "
                "not sharded yet")
    return LinearCpSupport(name, tuple(token), tuple(shared), nodes, root)


# -- the decay_mod, evaluated elementwise ------------------------------------

class Backend(NamedTuple):
    """The array functions the evaluator needs (numpy's or torch's)."""

    exp: object
    exp2: object
    log: object
    log2: object
    abs: object
    tanh: object
    sqrt: object
    maximum: object
    minimum: object
    where: object
    logical_not: object


def backend_of(xp) -> Backend:
    """numpy or torch as a Backend (both spell these the same way)."""
    return Backend(xp.exp, xp.exp2, xp.log, xp.log2, xp.abs, xp.tanh,
                   xp.sqrt, xp.maximum, xp.minimum, xp.where,
                   xp.logical_not)


def _sigmoid(f, x):
    return 1.0 / (1.0 + f.exp(-x))


_OPS = {
    "neg": lambda f, a: -a,
    "exp": lambda f, a: f.exp(a),
    "exp2": lambda f, a: f.exp2(a),
    "log": lambda f, a: f.log(a),
    "log2": lambda f, a: f.log2(a),
    "abs": lambda f, a: f.abs(a),
    "tanh": lambda f, a: f.tanh(a),
    "sigmoid": _sigmoid,
    "relu": lambda f, a: f.maximum(a, 0.0 * a),
    "sqrt": lambda f, a: f.sqrt(a),
    "rsqrt": lambda f, a: 1.0 / f.sqrt(a),
    "not": lambda f, a: f.logical_not(a),
    "to_float": lambda f, a: a * 1.0,
    "add": lambda f, a, b: a + b,
    "sub": lambda f, a, b: a - b,
    "mul": lambda f, a, b: a * b,
    "div": lambda f, a, b: a / b,
    "max": lambda f, a, b: f.maximum(a + 0.0 * b, b + 0.0 * a),
    "min": lambda f, a, b: f.minimum(a + 0.0 * b, b + 0.0 * a),
    "lt": lambda f, a, b: a < b,
    "le": lambda f, a, b: a <= b,
    "gt": lambda f, a, b: a > b,
    "ge": lambda f, a, b: a >= b,
    "eq": lambda f, a, b: a == b,
    "ne": lambda f, a, b: a != b,
    "and": lambda f, a, b: a & b,
    "or": lambda f, a, b: a | b,
    "select": lambda f, c, a, b: f.where(c, a, b),
}


def _const(node):
    value = node["value"]
    return int(value) if node.get("type") == "i32" else float(value)


def _scalar_math(op, args):
    """A constant-space node on Python numbers (head_dim's rsqrt)."""
    unary = {"neg": lambda a: -a, "exp": math.exp, "exp2": lambda a: 2.0**a,
             "log": math.log, "log2": math.log2, "abs": abs,
             "tanh": math.tanh, "sqrt": math.sqrt,
             "rsqrt": lambda a: 1.0 / math.sqrt(a),
             "to_float": float}
    if op in unary and len(args) == 1:
        return unary[op](args[0])
    return None


def decay_log(support: LinearCpSupport, f: Backend, decay, inputs, batch,
              heads, head_dim, arange):
    """g = decay_mod(decay) per (batch, head, token) of a shard: decay
    [B,H,T] (or None when the definition does not read it), inputs by name
    (per_row [B,H,T] of the shard, per_head [H], scalars), arange(n) the
    backend's integer range. Returns an array broadcastable to [B,H,T], or
    None without a decay_mod (g = 0)."""
    if support.decay_root < 0:
        return None
    nodes, values = support.nodes, {}
    for i in sorted(_reachable(nodes, [support.decay_root])):
        n = nodes[i]
        op = n["op"]
        if op == "const":
            values[i] = _const(n)
            continue
        if op == "param":
            kind = n["param"]
            if kind == "decay":
                values[i] = decay
            elif kind == "headdim":
                values[i] = head_dim
            elif kind == "index":  # b or h (t was refused)
                values[i] = (arange(heads).reshape(1, heads, 1)
                             if n["name"] == "h" else
                             arange(batch).reshape(batch, 1, 1))
            else:
                value = inputs[n["name"]]
                if hasattr(value, "reshape") and n.get("space") == "head":
                    value = value.reshape(1, heads, 1)
                values[i] = value
            continue
        args = [values[a] for a in n["args"]]
        if all(isinstance(a, (int, float)) for a in args):
            folded = _scalar_math(op, args)
            if folded is not None:
                values[i] = folded
                continue
        values[i] = _OPS[op](f, *args)
    return values[support.decay_root]


# -- the scan -----------------------------------------------------------------

def initial_state(transforms, finals, rank, mul):
    """Rank rank's initial state from the ranks before it: with shard j
    mapping S_in to A_j·S_in + S_j (transforms[j] = A_j, finals[j] = S_j,
    mul(a, s) the transform applied), S_in(0) = 0 and S_in(j+1) =
    A_j·S_in(j) + S_j. A first rank's given initial state is folded into
    S_0 (its final state from that state). None for rank 0."""
    state = None
    for j in range(rank):
        state = finals[j] if state is None else mul(transforms[j],
                                                    state) + finals[j]
    return state
