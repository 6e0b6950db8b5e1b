#!/usr/bin/env python3
"""Times PyTorch peers on the shapes attnc_bench times, in the same run:
SDPA with the flash and cuDNN backends, and FlexAttention (compiled).
CUDA-event timing, warm-up, median of 30, inputs rotated over three sets.

    python3 tools/bench/peers.py f16 B H S D
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention


def median_ms(fn, sets):
    for i in range(5):
        fn(*sets[i % 3])
    torch.cuda.synchronize()
    times = []
    for i in range(30):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn(*sets[i % 3])
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def main():
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[sys.argv[1]]
    B, H, S, D = map(int, sys.argv[2:6])
    sets = [tuple(torch.randn(B, H, S, D, device="cuda", dtype=dt) for _ in range(3))
            for _ in range(3)]
    flex = torch.compile(flex_attention)
    causal_mask = create_block_mask(lambda b, h, q, kv: q >= kv, None, None, S, S)
    for causal in (False, True):
        flops = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
        rows = []
        for name, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION),
                              ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
            def run(q, k, v, backend=backend):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            try:
                rows.append((name, median_ms(run, sets)))
            except RuntimeError as err:
                print(f"{name}: unavailable ({str(err).splitlines()[0]})")
        bm = causal_mask if causal else None
        rows.append(("flex", median_ms(lambda q, k, v: flex(q, k, v, block_mask=bm), sets)))
        for name, ms in rows:
            print(f"peer  {name:12s} {sys.argv[1]} B{B} H{H} S{S} D{D} "
                  f"{'causal' if causal else 'full'}: {ms:.3f} ms  "
                  f"{flops / (ms * 1e-3) / 1e12:.1f} TFLOPS")


if __name__ == "__main__":
    main()
