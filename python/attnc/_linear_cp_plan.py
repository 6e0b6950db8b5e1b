"""Linear attention across ranks without torch: which definitions pass their
state exactly, the decay_mod and q_mod evaluated over a shard (numpy or
torch), and the scans across ranks: of the state transforms forward (each
rank's initial state) and of the initial states' gradients backward (each
rank's final-state gradient) (attnc.distributed.linear_attention_cp;
docs/distributed.md).

Per batch and value head the recurrence is S_t = exp(g_t)·S_{t-1} +
k_tᵀv_t, o_t = q_t·S_t (q, k, v after their mods) with g_t =
decay_mod(decay_t) one number per token, so a shard of tokens maps its
initial state S_in to A·S_in + S, where S is the shard's final state from a
zero initial state and A = exp(Σ g_t over the shard) one number per (batch,
head): the transform is elementwise (a scalar). The shard's output from
S_in is its output from a zero state plus exp(G_t)·q_t·S_in, G_t = Σ_{s<=t}
g_s within the shard: the one-pass scheme adds that term instead of running
the shard again."""

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
    """How a linear definition is sharded: its custom inputs by role, the IR
    of its decay_mod (the state transforms are computed from it) and of its
    q_mod (the passed state's contribution to the output reads it)."""

    name: str
    token_inputs: tuple
    shared_inputs: tuple
    nodes: list
    decay_root: int  # -1: no decay_mod (g = 0, A = 1)
    q_root: int  # -1: no q_mod (q as it is)
    # q_mod(x) = x·Π f (f, or 1/f where the flag says so): [(node, inverse)]
    # ([] for x itself); None when q_mod is not a scaling of x.
    q_scale: object


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
        _check_evaluable(where, name, "decay_mod", nodes, root,
                         ("decay", "input", "headdim", "index"))
    roots = functions.get("q_mod", [])
    q_root = roots[0] if roots else -1
    if q_root >= 0:
        _check_evaluable(where, name, "q_mod", nodes, q_root,
                         ("element", "input", "headdim", "index"))
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
    return LinearCpSupport(name, tuple(token), tuple(shared), nodes, root,
                           q_root, _scale_of(nodes, q_root)
                           if q_root >= 0 else [])


def _check_evaluable(where, name, fn, nodes, root, params):
    """NotSupportedYet unless the evaluator below can run fn's graph."""
    for i in _reachable(nodes, [root]):
        n = nodes[i]
        op = n.get("op")
        if op == "param":
            if n.get("param") not in params:
                raise _lib.NotSupportedYet(
                    f"{where}: '{name}': its {fn} reads "
                    f"'{n.get('name')}' ({n.get('param')}); the state "
                    "passing is not derived for it")
        elif op != "const" and op not in _OPS:
            raise _lib.NotSupportedYet(
                f"{where}: '{name}': its {fn} uses '{op}', which the "
                "state passing's evaluator does not know")


def _reads_element(nodes, root):
    return any(nodes[i].get("op") == "param"
               and nodes[i].get("param") == "element"
               for i in _reachable(nodes, [root]))


def _scale_of(nodes, root):
    """q_mod(x) = x · Π factors, the factors not reading x: [(node,
    inverse)], or None when q_mod is not of that form. The contribution
    exp(G_t)·q_mod(q_t)·S_in is then (q_t·S_in)·(exp(G_t)·Π f): one matrix
    product on q as it is, and the scale per token."""
    n = nodes[root]
    op = n.get("op")
    if op == "param" and n.get("param") == "element":
        return []
    if op not in ("mul", "div"):
        return None
    a, b = n["args"]
    if _reads_element(nodes, b):
        if op == "div" or _reads_element(nodes, a):
            return None
        a, b = b, a
    inner = _scale_of(nodes, a)
    return None if inner is None else inner + [(b, op == "div")]


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
    floor: object


def backend_of(xp) -> Backend:
    """numpy or torch as a Backend (both spell these the same way)."""
    return Backend(xp.exp, xp.exp2, xp.log, xp.log2, xp.abs, xp.tanh,
                   xp.sqrt, xp.maximum, xp.minimum, xp.where,
                   xp.logical_not, xp.floor)


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
    # The kernels' floordiv and floormod (variant_support.cuh): rounded
    # towards -inf, for f32 through floor (differentiable, as torch's
    # floor_divide is not), for i32 by // and % (floor too in Python, numpy
    # and torch).
    "floordiv": lambda f, a, b: f.floor(a / b),
    "mod": lambda f, a, b: a - b * f.floor(a / b),
}

_INT_OPS = {"floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b}


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
    binary = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b,
              "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
              "floordiv": lambda a, b: math.floor(a / b),
              "mod": lambda a, b: a - b * math.floor(a / b)}
    if op in unary and len(args) == 1:
        return unary[op](args[0])
    if op in binary and len(args) == 2 and not (
            op == "div" and all(isinstance(a, int) for a in args)):
        return binary[op](*args)
    return None


class _Env(NamedTuple):
    """What the evaluator reads: the shard's decay [B,H,T] and the q
    element [B,H,T,D] (value heads), inputs by name, the sizes, the
    backend's integer range, and `tail` trailing unit dims for values per
    token (0 for [B,H,T], 1 to broadcast against [B,H,T,D])."""

    decay: object
    element: object
    inputs: dict
    batch: int
    heads: int
    head_dim: int
    arange: object
    tail: int


def _evaluate(support: LinearCpSupport, f: Backend, root: int, env: _Env):
    nodes, values = support.nodes, {}
    unit = (1,) * env.tail
    for i in sorted(_reachable(nodes, [root])):
        n = nodes[i]
        op = n["op"]
        if op == "const":
            values[i] = _const(n)
            continue
        if op == "param":
            kind = n["param"]
            if kind == "decay":
                values[i] = _per_token(env.decay, env.tail)
            elif kind == "element":
                values[i] = env.element
            elif kind == "headdim":
                values[i] = env.head_dim
            elif kind == "index":  # b or h (t was refused)
                values[i] = (env.arange(env.heads).reshape(
                    (1, env.heads, 1) + unit) if n["name"] == "h" else
                    env.arange(env.batch).reshape((env.batch, 1, 1) + unit))
            else:
                value = env.inputs[n["name"]]
                if hasattr(value, "reshape"):
                    value = (value.reshape((1, env.heads, 1) + unit)
                             if n.get("space") == "head" else
                             _per_token(value, env.tail))
                values[i] = value
            continue
        args = [values[a] for a in n["args"]]
        if all(isinstance(a, (int, float)) for a in args):
            folded = _scalar_math(op, args)
            if folded is not None:
                values[i] = folded
                continue
        if op in _INT_OPS and n.get("type") == "i32":
            values[i] = _INT_OPS[op](*args)
            continue
        values[i] = _OPS[op](f, *args)
    return values[root]


def _per_token(value, tail):
    return value if value is None or tail == 0 else value[..., None]


def _token_env(decay, inputs, batch, heads, head_dim, arange):
    return _Env(decay, None, inputs, batch, heads, head_dim, arange, 0)


def decay_log(support: LinearCpSupport, f: Backend, decay, inputs, batch,
              heads, head_dim, arange):
    """g = decay_mod(decay) per (batch, head, token) of a shard: decay
    [B,H,T] (or None when the definition does not read it), inputs by name
    (per_row [B,H,T] of the shard, per_head [H], scalars), arange(n) the
    backend's integer range. Returns an array broadcastable to [B,H,T], or
    None without a decay_mod (g = 0)."""
    if support.decay_root < 0:
        return None
    return _evaluate(support, f, support.decay_root,
                     _token_env(decay, inputs, batch, heads, head_dim,
                                arange))


def q_scale(support: LinearCpSupport, f: Backend, inputs, batch, heads,
            head_dim, arange):
    """Π f of q_mod(x) = x·Π f per (batch, head, token), broadcastable to
    [B,H,T] (a number where it is one), None for q_mod(x) = x; only where
    support.q_scale is not None."""
    env = _token_env(None, inputs, batch, heads, head_dim, arange)
    scale = None
    for node, inverse in support.q_scale:
        value = _evaluate(support, f, node, env)
        value = 1.0 / value if inverse else value
        scale = value if scale is None else scale * value
    return scale


def q_mod_values(support: LinearCpSupport, f: Backend, q, inputs, batch,
                 heads, head_dim, arange):
    """q_mod(q) for q [B,H,T,D] of the value heads (H of them: grouped q
    heads repeated), per_row inputs [B,H,T], per_head [H]."""
    if support.q_root < 0:
        return q
    return _evaluate(support, f, support.q_root,
                     _Env(None, q, inputs, batch, heads, head_dim, arange,
                          1))


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


def final_state_grad(transforms, dstates_in, rank, mul):
    """The gradient of rank rank's final state S_rank from every rank's
    initial-state gradient dstates_in[r] (the backward of initial_state):
    S_rank reaches rank r > rank's initial state through the transforms
    between them, so dS_j = dS_in(j+1) + A_{j+1}·dS_{j+1}, and the last
    rank's S is nobody's input. None for the last rank. The gradient of
    A_rank is then <dS_rank, S_in(rank)> summed over the state."""
    grad = None
    for j in range(len(dstates_in) - 2, rank - 1, -1):
        grad = dstates_in[j + 1] if grad is None else (
            dstates_in[j + 1] + mul(transforms[j + 1], grad))
    return grad
