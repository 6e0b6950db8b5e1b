#!/usr/bin/env python3
# Writes the dsl target's seed programs to corpus/dsl/ (DslTarget.cpp reads
# them): mha's online softmax, a softcap score_mod with a custom input, a
# sigmoid attention without rowscales, and a linear-attention decay_mod.
import os

# Opcodes (byte % 17) and their operand bytes, as in Machine::step.
ARG, CONST, CONST_INT, UNARY, BINARY, BINARY_NUM, SELECT, REDUCE, INPUT, \
    HEAD_DIM, ROWSCALE, PICK, SWAP, KEPT, DEAD, EMPTY, COMPOUND = range(17)
EXP, EXP2, LOG, LOG2, ABS, TANH, SIGMOID, RELU, SQRT, RSQRT, NEG, NOT = range(12)
ADD, SUB, MUL, DIV, MAX, MIN, LT, LE, GT, GE, EQ, NE, AND, OR = range(14)


def prog(*ops, shape=None):
    body = bytes(ops) if shape is None else bytes([shape, *ops])
    return bytes([len(body)]) + body


def attention(flags, inputs, online, final, score, mask, fwd, epi, forward,
              backward):
    out = bytes([flags])
    for shape, lo, hi in inputs:
        out += bytes([shape, 0, lo, hi])  # name byte 0: "in<i>"
    out += bytes([len(online)]) + b"".join(bytes([0, v]) for v in online)
    out += bytes([len(final)]) + b"".join(bytes([0, v]) for v in final)
    return out + score + mask + fwd + epi + forward + backward


# Var bytes: 0x80 "-inf", 0x82 "0".
mha_online = prog(
    ROWSCALE, 0, ARG, 0, REDUCE, 0, BINARY, MAX,  # mn = max(m, rowmax(S))
    PICK, 0, ROWSCALE, 0, SWAP, BINARY, SUB, UNARY, EXP,  # [mn, sc]
    SWAP, PICK, 0, ARG, 0, SWAP, BINARY, SUB, UNARY, EXP,  # [sc, mn, P]
    PICK, 0, REDUCE, 1, ROWSCALE, 1, PICK, 4, BINARY, MUL, BINARY, ADD,
    PICK, 2, PICK, 2, shape=0)  # [sc, mn, P, rn, mn, P]
mha_epilogue = prog(ROWSCALE, 1, UNARY, LOG, ROWSCALE, 0, BINARY, ADD,
                    ARG, 0, ROWSCALE, 1, BINARY, DIV, shape=0)
mha_forward = prog(ARG, 0, ROWSCALE, 0, BINARY, SUB, UNARY, EXP)
mha_backward = prog(ARG, 0, ARG, 2, BINARY, SUB, ARG, 1, BINARY, MUL)
scaled = prog(ARG, 0, HEAD_DIM, UNARY, RSQRT, BINARY, MUL)
causal = prog(ARG, 0, ARG, 1, BINARY, GE)

seeds = {
    # score * rsqrt(D), causal, online softmax with a backward.
    "mha.bin": attention(0x0E, [], [0x80, 0x82], [0x82], scaled, causal,
                         mha_online, mha_epilogue, mha_forward, mha_backward),
    # The same without a backward (autodiff derives it) and a softcap
    # score_mod reading a scalar input: cap * tanh(score / cap).
    "softcap.bin": attention(
        0x22, [(0, 2, 7)], [0x80, 0x82], [0x82],
        prog(INPUT, 0, ARG, 0, PICK, 1, BINARY, DIV, UNARY, TANH,
             BINARY, MUL),
        prog(), mha_online, mha_epilogue, mha_forward, prog()),
    # Sigmoid attention: no rowscales; P = sigmoid(score - 3), o as is.
    "sigmoid.bin": attention(
        0x0A, [], [], [],
        prog(ARG, 0, BINARY_NUM, SUB, 6),  # score - 3.0 (a literal)
        prog(),
        prog(ARG, 0, UNARY, SIGMOID, shape=8),  # o_scale 1
        prog(ARG, 0, shape=0),
        prog(ARG, 0, UNARY, SIGMOID),
        # dS = dP * P * (1 - P); 0x80 puts the literal 1.0 on the left.
        prog(ARG, 0, ARG, 1, ARG, 1, BINARY_NUM, 0x80 | SUB, 2, BINARY, MUL,
             BINARY, MUL)),
    # Linear attention: q_mod = relu(x), decay_mod = -abs(x).
    "linear.bin": bytes([0x01 | 0x02 | 0x10])
    + prog(ARG, 0, UNARY, RELU) + prog() + prog()
    + prog(ARG, 0, UNARY, ABS, UNARY, NEG),
}

here = os.path.dirname(os.path.abspath(__file__))
os.makedirs(os.path.join(here, "corpus", "dsl"), exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(here, "corpus", "dsl", name), "wb") as f:
        f.write(data)
