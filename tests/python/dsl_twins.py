"""Python twins of the C++ examples (dsl_examples/*.cpp), written as a user
would, for the tests that compare them with the originals.

The printed IR numbers nodes in the order they were made. C++ leaves the
order in which the operands of `a + b` (an overloaded operator) and a
function's arguments are evaluated unspecified; Python goes left to right.
The C++ examples therefore never let both operands of one expression make
nodes: they name one in a statement of its own, and the twins below make
their nodes in the same statements, so that the texts are equal character
for character. The library's blocks (masks, score_mods, online_softmax)
trace in one fixed order in both languages."""

from attnc import dsl
from attnc._dsl_library import _OnlineSoftmax as _LibrarySoftmax
from attnc.dsl import (InputShape, InputType, OnlineFunc, Var, masks,
                       online_softmax, score_mods, select)


class OnlineSoftmax(_LibrarySoftmax):
    """online_softmax() as a class, for tests that subclass it to break one
    step."""

    def __init__(self):
        super().__init__(written_backward=True)


class OnlineIdentity(OnlineFunc):
    """identity_online.h's: P is the modified score itself."""

    def __init__(self):
        super().__init__()

    def online_fwd(self, scores, rs, b, h, q_idx):
        return scores, {}, 1.0

    def online_fwd_epilogue(self, o, rs, b, h, q_idx):
        return o, {}

    def forward(self, scores, rs, b, h, q_idx, kv_idx):
        return scores

    def backward(self, dp, scores, rs, doosum, b, h, q_idx, kv_idx):
        return dp


class OnlineRetention(OnlineFunc):
    """retention.cpp's: a running abssum normaliser."""

    def __init__(self):
        super().__init__({"r_raw": Var(0.0), "r": Var(0.0)},
                         {"r": Var(0.0), "r_raw": Var(0.0)})

    def online_fwd(self, scores, rs, b, h, q_idx):
        r_raw = rs["r_raw"] + scores.get_reduce("abssum")
        r_new = r_raw.max(1.0)
        o_scale = rs["r"] / r_new
        return scores / r_new, {"r_raw": r_raw, "r": r_new}, o_scale

    def online_fwd_epilogue(self, o, rs, b, h, q_idx):
        return o, {"r": rs["r"], "r_raw": rs["r_raw"]}

    def forward(self, scores, fr, b, h, q_idx, kv_idx):
        return scores / fr["r"]

    def backward(self, dp, scores, fr, doosum, b, h, q_idx, kv_idx):
        negative = select(scores < 0.0, -1.0, 0.0)
        sign = select(scores > 0.0, 1.0, negative)
        through_doosum = sign * doosum
        unclamped = fr["r_raw"] > 1.0
        through_norm = select(unclamped, through_doosum, 0.0)
        return (dp - through_norm) / fr["r"]


class OnlineRetentionCombine(OnlineRetention):
    """retention.cpp's retention_combine: the same, with its combine."""

    def combine(self, a, b):
        r_raw = a["r_raw"] + b["r_raw"]
        r = r_raw.max(1.0)
        return {"r_raw": r_raw, "r": r}, a["r"] / r, b["r"] / r


causal = masks.causal()
scaled = score_mods.scaled()


def mha():
    d = dsl.AttentionDef("mha")
    d.description = "softmax attention, causal (online softmax)"
    d.score_mod = score_mods.scaled()
    d.mask_mod = masks.causal()
    d.online_func = online_softmax()
    return d


def _masked_mha(name, description):
    """mha.cpp's scores and online softmax under another mask (masks.cpp)."""
    d = dsl.AttentionDef(name, description)
    d.score_mod = score_mods.scaled()
    d.online_func = online_softmax()
    return d


def mha_prefix_lm():
    d = _masked_mha(
        "mha_prefix_lm",
        "softmax attention, prefix-LM: bidirectional over the first P keys "
        "(runtime scalar), causal after")
    d.inputs.declare("prefix_len", InputShape.Scalar, InputType.I32, 0.0, 128.0)
    d.mask_mod = masks.prefix_lm("prefix_len")
    return d


def mha_sliding_window():
    d = _masked_mha(
        "mha_sliding_window",
        "softmax attention, causal within a sliding window of 256 keys")
    d.mask_mod = masks.sliding_window(256)
    return d


def mha_document():
    d = _masked_mha(
        "mha_document",
        "softmax attention, causal within documents (per-row and per-key "
        "document ids)")
    d.inputs.declare("q_doc", InputShape.PerRow, 0.0, 0.0)
    d.inputs.declare("k_doc", InputShape.PerKey, 0.0, 0.0)
    d.mask_mod = masks.document("q_doc", "k_doc")
    return d


def sigmoid_attn():
    d = dsl.AttentionDef("sigmoid_attn")
    d.inputs.declare("softmax_bias", InputShape.Scalar, -3.0, 0.0)

    def score_mod(score, inputs, b, h, q_idx, kv_idx):
        bias = inputs["softmax_bias"]
        s = score * inputs.head_dim().rsqrt() + bias
        return s.sigmoid()

    d.score_mod = score_mod
    d.mask_mod = causal
    d.online_func = OnlineIdentity()
    return d


def relu_attn():
    return dsl.AttentionDef(
        "relu_attn",
        score_mod=lambda score, inputs, b, h, q, k: (
            score * inputs.head_dim().rsqrt()).max(0.0),
        online_func=OnlineIdentity(),
    )


def retention():
    d = dsl.AttentionDef("retention")

    def score_mod(score, inputs, b, h, q_idx, kv_idx):
        log_gamma = (1.0 - (-5 - h).exp2()).log()
        decay = ((q_idx - kv_idx) * log_gamma).exp()
        return score * inputs.head_dim().rsqrt() * decay

    d.score_mod = score_mod
    d.mask_mod = causal
    d.online_func = OnlineRetention()
    return d


def alibi_learnable():
    d = dsl.AttentionDef("alibi_learnable")
    d.inputs.declare("slopes", InputShape.PerHead, 0.0, 0.5).requires_grad()
    d.inputs.declare("head_bias", InputShape.PerHead).requires_grad()

    def score_mod(score, inputs, b, h, q_idx, kv_idx):
        scaled = score * inputs.head_dim().rsqrt()
        distance = kv_idx - q_idx
        slope_term = inputs["slopes"] * distance
        own_key = kv_idx == q_idx
        self_bias = select(own_key, inputs["head_bias"], 0.0)
        return scaled + slope_term + self_bias

    d.score_mod = score_mod
    d.mask_mod = causal
    d.online_func = online_softmax(written_backward=False)
    return d


def softcap_learnable():
    d = dsl.AttentionDef("softcap_learnable")
    d.inputs.declare("cap", InputShape.Scalar, 1.0, 3.0).requires_grad()

    def score_mod(score, inputs, b, h, q_idx, kv_idx):
        c = inputs["cap"]
        return c * (score * inputs.head_dim().rsqrt() / c).tanh()

    d.score_mod = score_mod
    d.online_func = online_softmax(written_backward=False)
    return d


def mha_document_ids():
    d = dsl.AttentionDef("mha_document_ids")
    d.inputs.declare("doc_q", InputShape.PerQueryToken, InputType.I32)
    d.inputs.declare("doc_k", InputShape.PerKeyToken, InputType.I32)
    d.score_mod = score_mods.scaled()
    d.mask_mod = masks.document("doc_q", "doc_k")
    d.online_func = online_softmax(written_backward=False)
    return d


def mha_chunked():
    d = _masked_mha(
        "mha_chunked",
        "softmax attention, causal within chunks of C tokens (runtime int32 "
        "scalar)")
    d.inputs.declare("chunk", InputShape.Scalar, InputType.I32, 16.0, 112.0)
    d.mask_mod = masks.chunked("chunk")
    return d


def simple_gla():
    d = dsl.LinearAttentionDef("simple_gla")
    d.q_mod = lambda q, inputs: q * inputs.head_dim().rsqrt()
    return d


def mamba2():
    d = dsl.LinearAttentionDef("mamba2")
    d.inputs.declare("A", InputShape.PerHead, -2.0, -0.2)
    d.inputs.declare("dt", InputShape.PerRow, 0.05, 1.0)

    def decay_mod(g, inputs):
        dt = inputs["dt"]
        return dt * inputs["A"]

    d.decay_mod = decay_mod
    d.v_mod = lambda v, inputs: v * inputs["dt"]
    return d


def retention_combine():
    d = dsl.AttentionDef("retention_combine")

    def score_mod(score, inputs, b, h, q_idx, kv_idx):
        log_gamma = (1.0 - (-5 - h).exp2()).log()
        decay = ((q_idx - kv_idx) * log_gamma).exp()
        return score * inputs.head_dim().rsqrt() * decay

    d.score_mod = score_mod
    d.mask_mod = causal
    d.online_func = OnlineRetentionCombine()
    return d


def retention_linear():
    d = dsl.LinearAttentionDef("retention_linear")
    d.q_mod = lambda q, inputs: q * inputs.head_dim().rsqrt()
    d.decay_mod = lambda g, inputs, b, h, t: (1.0 - (-5 - h).exp2()).log()
    return d


TWINS = {
    "mha": mha,
    "sigmoid_attn": sigmoid_attn,
    "relu_attn": relu_attn,
    "retention": retention,
    "retention_combine": retention_combine,
    "alibi_learnable": alibi_learnable,
    "softcap_learnable": softcap_learnable,
    "mha_document_ids": mha_document_ids,
    "mha_chunked": mha_chunked,
    "mha_prefix_lm": mha_prefix_lm,
    "mha_sliding_window": mha_sliding_window,
    "mha_document": mha_document,
    "simple_gla": simple_gla,
    "mamba2": mamba2,
    "retention_linear": retention_linear,
}
