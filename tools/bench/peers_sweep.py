#!/usr/bin/env python3
"""The SDPA peers (flash and cuDNN backends) of attnc_bench_sweep: every
shape of the forward table (H = 32, D = 128, B·S = 16k, S = 1k, 4k, 16k,
causal and not) for each dtype given, in one process, timed as peers.py
times them (CUDA events, 5 warm-ups, median of 30, three rotated input
sets). FlexAttention is left out (peers.py has it; its compile is slow).

    python3 tools/bench/peers_sweep.py f16 bf16
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from peers import median_ms  # the same timing as peers.py


print("torch", torch.__version__)
H, D = 32, 128
for dname in sys.argv[1:]:
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[dname]
    for S in (1024, 4096, 16384):
        B = 16384 // S
        sets = [tuple(torch.randn(B, H, S, D, device="cuda", dtype=dt) for _ in range(3))
                for _ in range(3)]
        for causal in (False, True):
            flops = 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
            for name, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION),
                                  ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
                def run(q, k, v, backend=backend):
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                try:
                    ms = median_ms(run, sets)
                except RuntimeError as err:
                    print(f"{name}: unavailable ({str(err).splitlines()[0]})")
                    continue
                print(f"peer  {name:12s} {dname} B{B} H{H} S{S} D{D} "
                      f"{'causal' if causal else 'full'}: {ms:.3f} ms  "
                      f"{flops / (ms * 1e-3) / 1e12:.1f} TFLOPS", flush=True)
        del sets
        torch.cuda.empty_cache()
