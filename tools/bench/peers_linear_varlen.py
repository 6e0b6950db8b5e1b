#!/usr/bin/env python3
"""Times flash-linear-attention's chunk_simple_gla forward on a packed batch
(cu_seqlens, initial states in, final states out) with the sequence lengths
attnc_bench_linear_varlen takes, and on the padded batch at the same token
count, in the same run. mamba2 is chunk_simple_gla with v = x*dt and
g = A*dt, that prologue included in its time, as in peers_linear.py.
CUDA-event timing, warm-up (Triton's compile and autotuning are paid
there), median of 20. With a last argument "backward", the backward
instead: the packed call's gradients of q, k, v, g and the initial states
given dout and the final states' gradient (torch.autograd.grad on a
retained graph, the mamba2 prologue's backward included), against the
padded batch's.

    python3 tools/bench/peers_linear_varlen.py NAME f16|bf16 H D DV L1,L2,... [backward]
"""
import sys

import torch

from peers_timing import event_median_ms


def median_ms(fn, n=20):
    return event_median_ms(lambda i: fn(), 3, n)


def main():
    name, dts = sys.argv[1], sys.argv[2]
    H, D, DV = map(int, sys.argv[3:6])
    lengths = [int(x) for x in sys.argv[6].split(",")]
    backward = len(sys.argv) > 7 and sys.argv[7] == "backward"
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[dts]
    from fla.ops.simple_gla import chunk_simple_gla
    dev = "cuda"
    S, T = len(lengths), sum(lengths)
    cu = torch.tensor([0] + lengths, device=dev).cumsum(0)
    mean = T // S

    def inputs(B, L):
        q = torch.randn(B, L, H, D, device=dev, dtype=dt)
        k = torch.randn(B, L, H, D, device=dev, dtype=dt)
        v = torch.randn(B, L, H, DV, device=dev, dtype=dt)
        g = -0.1 * torch.rand(B, L, H, device=dev, dtype=torch.float32)
        A = -0.2 - 1.8 * torch.rand(H, device=dev, dtype=torch.float32)
        dtv = 0.05 + 0.95 * torch.rand(B, L, H, device=dev, dtype=torch.float32)
        h0 = torch.randn(S, H, D, DV, device=dev, dtype=torch.float32)
        return q, k, v, g, A, dtv, h0

    def call(x, cu_seqlens):
        q, k, v, g, A, dtv, h0 = x
        if name == "mamba2":
            v = (v.float() * dtv[..., None]).to(dt)
            g = A * dtv
            scale = 1.0
        else:
            scale = D ** -0.5
        return chunk_simple_gla(q, k, v, g=g, scale=scale, initial_state=h0,
                                output_final_state=True, cu_seqlens=cu_seqlens)

    def grads(x, cu_seqlens):
        # The graph is built once; each timed call is its backward alone.
        leaves = [t.requires_grad_() for t in (x[0], x[1], x[2], x[3], x[5], x[6])]
        o, ht = call(x, cu_seqlens)
        do, dht = torch.randn_like(o), torch.randn_like(ht)
        return lambda: torch.autograd.grad((o, ht), leaves, (do, dht), retain_graph=True,
                                             allow_unused=True)

    if backward:
        packed = inputs(1, T)
        var_ms = median_ms(grads(packed, cu))
        del packed
        padded = inputs(S, mean)
        fix_ms = median_ms(grads(padded, None))
        print(f"fla chunk_simple_gla {name} {dts} H{H} D{D} DV{DV} backward: packed {S} "
              f"sequences, {T} tokens: {var_ms:.3f} ms ({T / var_ms / 1e3:.1f} Mtok/s); "
              f"padded B{S} T{mean}: {fix_ms:.3f} ms ({S * mean / fix_ms / 1e3:.1f} "
              f"Mtok/s)", flush=True)
        return
    with torch.no_grad():
        packed = inputs(1, T)
        var_ms = median_ms(lambda: call(packed, cu))
        del packed
        padded = inputs(S, mean)
        fix_ms = median_ms(lambda: call(padded, None))
    print(f"fla chunk_simple_gla {name} {dts} H{H} D{D} DV{DV}: packed {S} sequences, "
          f"{T} tokens: {var_ms:.3f} ms ({T / var_ms / 1e3:.1f} Mtok/s); padded B{S} "
          f"T{mean}: {fix_ms:.3f} ms ({S * mean / fix_ms / 1e3:.1f} Mtok/s)", flush=True)


if __name__ == "__main__":
    main()
