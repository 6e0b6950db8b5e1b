#!/usr/bin/env python3
"""Times flash-linear-attention's fused recurrent step (fused_recurrent_simple_gla:
reads the initial state, writes the final state to a new tensor) and a
torch copy of the same state bytes, on the shapes attnc_bench_linear_decode
times, in the same run. CUDA-event timing, warm-up (Triton's compile and
autotuning are paid there), median of 30; every batch rotates over enough
state sets to make at least 256 MiB so the L2 cannot flatter. Bandwidth
counts the fp32 state read once and written once.

    python3 tools/bench/peers_linear_decode.py [--lock FILE] f16|bf16 H D DV N B [B ...]

--lock FILE: the step is compiled first, then the timing holds an exclusive
flock on FILE (as peers_linear_varlen.py's --lock).
"""
import fcntl
import sys

import torch

from peers_timing import event_median_ms


def median_ms(fn, n=30):
    return event_median_ms(fn, 5, n)


def main():
    args, held = sys.argv[1:], None
    if args[:1] == ["--lock"]:
        held, args = open(args[1], "a"), args[2:]
    dts, H, D, DV, N = args[0], *map(int, args[1:5])
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[dts]
    from fla.ops.simple_gla import fused_recurrent_simple_gla
    dev = "cuda"
    if held:  # Triton's compile and autotuning before the lock
        x = torch.randn(1, N, H, D, device=dev, dtype=dt)
        with torch.no_grad():
            fused_recurrent_simple_gla(
                x, x, torch.randn(1, N, H, DV, device=dev, dtype=dt),
                g=torch.zeros(1, N, H, device=dev), scale=D ** -0.5,
                initial_state=torch.zeros(1, H, D, DV, device=dev),
                output_final_state=True)
        torch.cuda.synchronize()
        fcntl.flock(held, fcntl.LOCK_EX)
    for B in map(int, args[5:]):
        state_bytes = B * H * D * DV * 4
        sets = max(1, min(64, -(-(256 << 20) // state_bytes)))
        h0 = [torch.randn(B, H, D, DV, device=dev, dtype=torch.float32) for _ in range(sets)]
        dst = [torch.empty_like(x) for x in h0]
        q = torch.randn(B, N, H, D, device=dev, dtype=dt)
        k = torch.randn(B, N, H, D, device=dev, dtype=dt)
        v = torch.randn(B, N, H, DV, device=dev, dtype=dt)
        g = -0.1 * torch.rand(B, N, H, device=dev, dtype=torch.float32)

        def step(i):
            return fused_recurrent_simple_gla(q, k, v, g=g, scale=D ** -0.5,
                                              initial_state=h0[i % sets],
                                              output_final_state=True)

        with torch.no_grad():
            fla_ms = median_ms(step)
            copy_ms = median_ms(lambda i: dst[i % sets].copy_(h0[i % sets]))
        gbs = lambda ms: 2.0 * state_bytes / (ms * 1e-3) / 1e9
        print(f"fla fused_recurrent_simple_gla {dts} B{B} H{H} D{D} DV{DV} N{N}: "
              f"{fla_ms * 1e3:.1f} us, {gbs(fla_ms):.0f} GB/s state r+w; "
              f"torch copy {copy_ms * 1e3:.1f} us, {gbs(copy_ms):.0f} GB/s", flush=True)
        del h0, dst
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
