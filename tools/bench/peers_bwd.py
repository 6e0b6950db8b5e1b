#!/usr/bin/env python3
"""Times PyTorch's backward peers on the shapes attnc_bench_bwd times, in the
same run: SDPA with the flash and cuDNN backends. The forward runs once per
input set; only torch.autograd.grad (the backward kernels) is timed, with
CUDA events, warm-up, median of 30, inputs rotated over three sets. FLOPs are
2.5 x the forward's 4*B*H*S^2*D, halved for causal.

    python3 tools/bench/peers_bwd.py f16 B H S D
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(fn, n_sets):
    for i in range(5):
        fn(i % n_sets)
    torch.cuda.synchronize()
    times = []
    for i in range(30):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn(i % n_sets)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def main():
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[sys.argv[1]]
    B, H, S, D = map(int, sys.argv[2:6])
    for causal in (False, True):
        flops = 2.5 * 4.0 * B * H * S * S * D * (0.5 if causal else 1.0)
        for name, backend in (("sdpa-flash", SDPBackend.FLASH_ATTENTION),
                              ("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                sets = []
                for _ in range(3):
                    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=dt,
                                           requires_grad=True) for _ in range(3))
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
            print(f"peer-bwd {name:12s} {sys.argv[1]} B{B} H{H} S{S} D{D} "
                  f"{'causal' if causal else 'full'}: {ms:.3f} ms  "
                  f"{flops / (ms * 1e-3) / 1e12:.1f} TFLOPS")
            del sets


if __name__ == "__main__":
    main()
