#!/usr/bin/env python3
"""Times PyTorch's backward peers on the shapes attnc_bench_bwd times, in the
same run: SDPA with the flash and cuDNN backends, FlexAttention (compiled),
and FlexAttention with a learnable ALiBi score_mod (per-head slopes, and a
per-head bias on the diagonal, that require gradients, as attnc's
alibi_learnable). The forward runs once per
input set; only torch.autograd.grad (the backward kernels) is timed, with
CUDA events, warm-up, median of 30, inputs rotated over three sets. FLOPs are
the five products' 2*B*H*S^2*(3*D + 2*DV) (2.5 x the forward's 4*B*H*S^2*D
when DV = D), halved for causal, as attnc_bench_bwd counts them.

    python3 tools/bench/peers_bwd.py f16 B H S D [DV] [noflex]

DV (v's head dim) defaults to D.

With "noflex" the FlexAttention rows (each a torch.compile) are left out.
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask

from peers_timing import compiled_flex, event_median_ms
from results import record


def median_ms(fn, n_sets):
    return event_median_ms(lambda i: fn(i % n_sets), 5, 30)


def main():
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[sys.argv[1]]
    B, H, S, D = map(int, sys.argv[2:6])
    rest = sys.argv[6:]
    DV = int(rest.pop(0)) if rest and rest[0].isdigit() else D
    dims = f"D{D}" if DV == D else f"D{D}/{DV}"
    for causal in (False, True):
        flops = 2.0 * B * H * S * S * (3 * D + 2 * DV) * (0.5 if causal else 1.0)
        for name, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION),
                              ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                sets = []
                for _ in range(3):
                    q, k, v = (torch.randn(B, H, S, d, device="cuda", dtype=dt,
                                           requires_grad=True) for d in (D, D, DV))
                    with sdpa_kernel(backend):
                        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    sets.append((out, (q, k, v), torch.randn_like(out)))

                def run(i):
                    out, inputs, dout = sets[i]
                    with sdpa_kernel(backend):
                        torch.autograd.grad(out, inputs, dout, retain_graph=True)

                ms = median_ms(run, len(sets))
            except RuntimeError as err:
                print(f"{name}: unavailable ({str(err).splitlines()[0]})")
                continue
            print(f"peer-bwd {name:12s} {sys.argv[1]} B{B} H{H} S{S} {dims} "
                  f"{'causal' if causal else 'full'}: {ms:.3f} ms  "
                  f"{flops / (ms * 1e-3) / 1e12:.1f} TFLOPS")
            record("bwd", name, "mha" if causal else "mha_full", sys.argv[1],
                   "causal" if causal else "full", B, H, S, D, DV, ms,
                   flops / (ms * 1e-3) / 1e12)
            del sets
    if "noflex" not in rest and DV == D:
        flex_peers(dt, B, H, S, D, sys.argv[1])


def causal_mask(b, h, q, kv):
    return q >= kv


def flex_peers(dt, B, H, S, D, label):
    """FlexAttention's backward: plain (causal and not), and causal with a
    learnable ALiBi slope and bias per head."""
    flex = compiled_flex()
    causal_bm = create_block_mask(causal_mask, None, None, S, S)
    slopes = (torch.rand(H, device="cuda") * 0.5).requires_grad_()
    head_bias = torch.randn(H, device="cuda").requires_grad_()

    def alibi(score, b, h, q, kv):
        own_key = torch.where(kv == q, head_bias[h], 0.0)
        return score + slopes[h] * (kv - q) + own_key

    cases = (("flex", False, None, False), ("flex", True, causal_bm, False),
             ("flex-alibi-learn", True, causal_bm, True))
    for name, causal, bm, learn in cases:
        flops = 2.5 * 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
        try:
            sets = []
            for _ in range(3):
                q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=dt,
                                       requires_grad=True) for _ in range(3))
                out = flex(q, k, v, score_mod=alibi if learn else None,
                           block_mask=bm)
                inputs = (q, k, v, slopes, head_bias) if learn else (q, k, v)
                sets.append((out, inputs, torch.randn_like(out)))

            def run(i):
                out, inputs, dout = sets[i]
                torch.autograd.grad(out, inputs, dout, retain_graph=True)

            ms = median_ms(run, len(sets))
        except Exception as err:  # a compile failure is a result, not a crash
            print(f"{name}: unavailable ({str(err).splitlines()[0]})")
            continue
        print(f"peer-bwd {name:12s} {label} B{B} H{H} S{S} D{D} "
              f"{'causal' if causal else 'full'}: {ms:.3f} ms  "
              f"{flops / (ms * 1e-3) / 1e12:.1f} TFLOPS")
        variant = ("alibi_learnable" if learn
                   else "mha" if causal else "mha_full")
        record("bwd", name, variant, label, "causal" if causal else "full",
               B, H, S, D, D, ms, flops / (ms * 1e-3) / 1e12)
        del sets


if __name__ == "__main__":
    main()
