"""Python twins of the C++ examples (dsl_examples/*.cpp), written as a user
would, for the tests that compare them with the originals.

The printed IR numbers nodes in the order they were made. C++ leaves the
order in which the operands of `a + b` (an overloaded operator) and a
function's arguments are evaluated unspecified, and GCC, which builds attnc,
evaluates the right one first; Python goes left to right. Where both
operands of one C++ expression make nodes, the twin below makes them in
GCC's order with a named temporary (marked "C++ order"), so that the texts
are equal character for character."""

from attnc import dsl
from attnc.dsl import InputShape, InputType, OnlineFunc, Var, select


class OnlineSoftmax(OnlineFunc):
    """mha.cpp's: a running max m and a running sum r."""

    def __init__(self):
        super().__init__({"m": Var("-inf"), "r": Var(0.0)}, {"lse": Var(0.0)})

    def online_fwd(self, scores, rs, b, h, q_idx):
        m, r = rs["m"], rs["r"]
        m_new = m.max(scores.get_reduce("max"))
        scale_tmp = (m - m_new).exp()
        r = r * scale_tmp
        scores = (scores - m_new).exp()
        r = r + scores.get_reduce("sum")
        return scores, {"m": m_new, "r": r}, scale_tmp

    def online_fwd_epilogue(self, o, rs, b, h, q_idx):
        return o / rs["r"], {"lse": rs["r"].log() + rs["m"]}

    def forward(self, scores, final_rowscales, b, h, q_idx, kv_idx):
        return (scores - final_rowscales["lse"]).exp()

    def backward(self, dp, scores, final_rowscales, doosum, b, h, q_idx, kv_idx):
        return (dp - doosum) * scores


class OnlineSoftmaxNoBackward(OnlineFunc):
    """learnable.cpp's: the backward is derived."""

    def __init__(self):
        super().__init__([("m", Var("-inf")), ("r", Var(0.0))], [("lse", Var(0.0))])

    def online_fwd(self, scores, rs, b, h, q_idx):
        m_new = rs["m"].max(scores.get_reduce("max"))
        scale = (rs["m"] - m_new).exp()
        p = (scores - m_new).exp()
        total = p.get_reduce("sum")  # C++ order
        return p, {"m": m_new, "r": rs["r"] * scale + total}, scale

    def online_fwd_epilogue(self, o, rs, b, h, q_idx):
        return o / rs["r"], {"lse": rs["r"].log() + rs["m"]}

    def forward(self, scores, fr, b, h, q_idx, kv_idx):
        return (scores - fr["lse"]).exp()


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
        negative = select(scores < 0.0, -1.0, 0.0)  # C++ order
        sign = select(scores > 0.0, 1.0, negative)
        through_doosum = sign * doosum  # C++ order
        through_norm = select(fr["r_raw"] > 1.0, through_doosum, 0.0)
        return (dp - through_norm) / fr["r"]


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def scaled(score, inputs, b, h, q_idx, kv_idx):
    return score * inputs.head_dim().rsqrt()


def mha():
    d = dsl.AttentionDef("mha")
    d.description = "softmax attention, causal (online softmax)"
    d.score_mod = scaled
    d.mask_mod = causal
    d.online_func = OnlineSoftmax()
    return d


def sigmoid_attn():
    d = dsl.AttentionDef("sigmoid_attn")
    d.inputs.declare("softmax_bias", InputShape.Scalar, -3.0, 0.0)

    def score_mod(score, inputs, b, h, q_idx, kv_idx):
        bias = inputs["softmax_bias"]  # C++ order
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
        head_bias = inputs["head_bias"]  # C++ order, as the next two
        distance = kv_idx - q_idx
        slope_term = inputs["slopes"] * distance
        return score * inputs.head_dim().rsqrt() + slope_term + head_bias

    d.score_mod = score_mod
    d.mask_mod = causal
    d.online_func = OnlineSoftmaxNoBackward()
    return d


def softcap_learnable():
    d = dsl.AttentionDef("softcap_learnable")
    d.inputs.declare("cap", InputShape.Scalar, 1.0, 3.0).requires_grad()

    def score_mod(score, inputs, b, h, q_idx, kv_idx):
        c = inputs["cap"]
        return c * (score * inputs.head_dim().rsqrt() / c).tanh()

    d.score_mod = score_mod
    d.online_func = OnlineSoftmaxNoBackward()
    return d


def mha_document_ids():
    d = dsl.AttentionDef("mha_document_ids")
    d.inputs.declare("doc_q", InputShape.PerQueryToken, InputType.I32)
    d.inputs.declare("doc_k", InputShape.PerKeyToken, InputType.I32)
    d.score_mod = scaled

    def mask_mod(b, h, q_idx, kv_idx, inputs):
        doc_k = inputs["doc_k"]  # C++ order, as the next two
        same_document = inputs["doc_q"] == doc_k
        return (q_idx >= kv_idx) & same_document

    d.mask_mod = mask_mod
    d.online_func = OnlineSoftmaxNoBackward()
    return d


def mha_chunked():
    d = dsl.AttentionDef("mha_chunked")
    d.description = (
        "softmax attention, causal within chunks of C tokens (runtime int32 "
        "scalar)"
    )
    d.score_mod = scaled
    d.online_func = OnlineSoftmax()
    d.inputs.declare("chunk", InputShape.Scalar, InputType.I32, 16.0, 112.0)

    def mask_mod(b, h, q_idx, kv_idx, inputs):
        # C++ order: the right operand of & first, and of == first, and the
        # divisor before the dividend.
        chunk = inputs["chunk"]
        kv_chunk = kv_idx // chunk
        q_chunk = dsl.floordiv(q_idx, inputs["chunk"])
        same_chunk = q_chunk == kv_chunk
        return (q_idx >= kv_idx) & same_chunk

    d.mask_mod = mask_mod
    return d


def simple_gla():
    d = dsl.LinearAttentionDef("simple_gla")
    d.q_mod = lambda q, inputs: q * inputs.head_dim().rsqrt()
    return d


def mamba2():
    d = dsl.LinearAttentionDef("mamba2")
    d.inputs.declare("A", InputShape.PerHead, -2.0, -0.2)
    d.inputs.declare("dt", InputShape.PerRow, 0.05, 1.0)
    d.decay_mod = lambda g, inputs: inputs["dt"] * inputs["A"]
    d.v_mod = lambda v, inputs: v * inputs["dt"]
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
    "alibi_learnable": alibi_learnable,
    "softcap_learnable": softcap_learnable,
    "mha_document_ids": mha_document_ids,
    "mha_chunked": mha_chunked,
    "simple_gla": simple_gla,
    "mamba2": mamba2,
    "retention_linear": retention_linear,
}
