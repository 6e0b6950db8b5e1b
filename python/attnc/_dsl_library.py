"""The DSL's building blocks, as attn/dsl/Library.h has them in C++: the
online softmax, the everyday masks and the common score_mods. Each traces
its operations in the same order as its C++ twin, so a definition built
from them prints the same IR in either language."""

from __future__ import annotations

import math

from ._dsl_trace import OnlineFunc
from .dsl import Var, floordiv


class _OnlineSoftmax(OnlineFunc):
    """Rowscales m (running max) and r (running sum); final lse = log r + m."""

    def __init__(self, written_backward: bool):
        super().__init__({"m": Var("-inf"), "r": Var(0.0)}, {"lse": Var(0.0)})
        self._written_backward = written_backward

    def online_fwd(self, scores, rs, b, h, q_idx):
        m, r = rs["m"], rs["r"]
        m_new = m.max(scores.get_reduce("max"))
        o_scale = (m - m_new).exp()
        r = r * o_scale
        p = (scores - m_new).exp()
        r = r + p.get_reduce("sum")
        return p, {"m": m_new, "r": r}, o_scale

    def online_fwd_epilogue(self, o, rs, b, h, q_idx):
        out = o / rs["r"]
        lse = rs["r"].log() + rs["m"]
        return out, {"lse": lse}

    def forward(self, scores, final_rowscales, b, h, q_idx, kv_idx):
        return (scores - final_rowscales["lse"]).exp()

    def backward(self, dp, p, final_rowscales, doosum, b, h, q_idx, kv_idx):
        if not self._written_backward:
            return None
        return (dp - doosum) * p


def online_softmax(written_backward: bool = True) -> OnlineFunc:
    """The FlashAttention online softmax; with written_backward=False the
    backward is derived by the autodiff pass."""
    return _OnlineSoftmax(written_backward)


class masks:
    """Masks (FlexAttention's everyday ones); a mask that names an input
    needs the definition to declare it."""

    @staticmethod
    def causal():
        return lambda b, h, q_idx, kv_idx: q_idx >= kv_idx

    @staticmethod
    def sliding_window(window: int):
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise ValueError(
                f"masks.sliding_window: window {window!r} is not a number of "
                "keys; expected an int >= 1")

        def mask(b, h, q_idx, kv_idx):
            keep = q_idx >= kv_idx
            in_window = q_idx - kv_idx < window
            return keep & in_window
        return mask

    @staticmethod
    def prefix_lm(prefix_input: str):
        def mask(b, h, q_idx, kv_idx, inputs):
            keep = q_idx >= kv_idx
            in_prefix = kv_idx < inputs[prefix_input]
            return keep | in_prefix
        return mask

    @staticmethod
    def document(query_ids: str, key_ids: str):
        def mask(b, h, q_idx, kv_idx, inputs):
            keep = q_idx >= kv_idx
            query_id = inputs[query_ids]
            same_document = query_id == inputs[key_ids]
            return keep & same_document
        return mask

    @staticmethod
    def chunked(chunk_input: str):
        def mask(b, h, q_idx, kv_idx, inputs):
            keep = q_idx >= kv_idx
            query_chunk = floordiv(q_idx, inputs[chunk_input])
            key_chunk = floordiv(kv_idx, inputs[chunk_input])
            return keep & (query_chunk == key_chunk)
        return mask

    @staticmethod
    def both(a, b):
        return _combine(a, b, lambda x, y: x & y)

    @staticmethod
    def either(a, b):
        return _combine(a, b, lambda x, y: x | y)


def _takes_inputs(mask) -> bool:
    import inspect
    try:
        return len(inspect.signature(mask).parameters) == 5
    except (TypeError, ValueError):
        return False


def _combine(a, b, op):
    def call(mask, bi, h, q_idx, kv_idx, inputs):
        if _takes_inputs(mask):
            return mask(bi, h, q_idx, kv_idx, inputs)
        return mask(bi, h, q_idx, kv_idx)

    def mask(bi, h, q_idx, kv_idx, inputs):
        first = call(a, bi, h, q_idx, kv_idx, inputs)
        second = call(b, bi, h, q_idx, kv_idx, inputs)
        return op(first, second)
    return mask


class score_mods:
    """score_mods; each takes the score as the previous one left it, so they
    chain with then(f, g)."""

    @staticmethod
    def scaled():
        return lambda score, inputs, b, h, q_idx, kv_idx: (
            score * inputs.head_dim().rsqrt())

    @staticmethod
    def softcap(cap: float):
        if (isinstance(cap, bool) or not isinstance(cap, (int, float))
                or not math.isfinite(cap) or cap <= 0):
            raise ValueError(
                f"score_mods.softcap: cap {cap!r} is not a positive finite "
                "number; expected > 0")

        def mod(score, inputs, b, h, q_idx, kv_idx):
            capped = (score / cap).tanh()
            return capped * cap
        return mod

    @staticmethod
    def alibi(slopes_input: str):
        def mod(score, inputs, b, h, q_idx, kv_idx):
            distance = kv_idx - q_idx
            bias = inputs[slopes_input] * distance
            return score + bias
        return mod

    @staticmethod
    def then(first, second):
        def mod(score, inputs, b, h, q_idx, kv_idx):
            inner = first(score, inputs, b, h, q_idx, kv_idx)
            return second(inner, inputs, b, h, q_idx, kv_idx)
        return mod
