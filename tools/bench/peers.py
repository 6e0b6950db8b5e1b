#!/usr/bin/env python3
"""Times PyTorch peers on the shapes attnc_bench times, in the same run:
SDPA with the flash and cuDNN backends, and FlexAttention (compiled).
CUDA-event timing, warm-up, median of 30, inputs rotated over three sets.

    python3 tools/bench/peers.py f16 B H S D [DV]
    python3 tools/bench/peers.py --list FILE

DV (the value head dim) defaults to D. --list times every line of FILE
("f16|bf16 B H S D [DV]") in one process, so that PyTorch starts once.
A peer that cannot run a shape (e.g. the flash backend with DV != D) says
"unavailable" and the others go on.
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask

from peers_timing import compiled_flex, event_median_ms
from results import record


def median_ms(fn, sets):
    return event_median_ms(lambda i: fn(*sets[i % 3]), 5, 30)


def main():
    # Every shape and mask recompiles flex_attention; past Dynamo's default
    # limit of 8 it falls back to the unfused eager path, whose times are
    # not FlexAttention's.
    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 256)
    if sys.argv[1] == "--list":
        with open(sys.argv[2]) as f:
            for line in f:
                if line.split():
                    time_shape(line.split())
    else:
        time_shape(sys.argv[1:])


def time_shape(argv, with_flex=True):
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[argv[0]]
    B, H, S, D = map(int, argv[1:5])
    DV = int(argv[5]) if len(argv) > 5 else D
    sets = [tuple(torch.randn(B, H, S, dim, device="cuda", dtype=dt) for dim in (D, D, DV))
            for _ in range(3)]
    if with_flex:
        flex = compiled_flex()
        causal_mask = create_block_mask(lambda b, h, q, kv: q >= kv, None, None, S, S)
    for causal in (False, True):
        flops = 2.0 * B * H * S * S * (D + DV) * (0.5 if causal else 1.0)
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
        if with_flex:
            bm = causal_mask if causal else None
            try:
                rows.append(("flex", median_ms(lambda q, k, v: flex(q, k, v, block_mask=bm),
                                               sets)))
            except Exception as err:  # an unsupported shape fails at compile time
                print(f"flex: unavailable ({(str(err).splitlines() or [''])[0][:200]})")
        dims = f"D{D}" if DV == D else f"D{D}/{DV}"
        for name, ms in rows:
            print(f"peer  {name:12s} {argv[0]} B{B} H{H} S{S} {dims} "
                  f"{'causal' if causal else 'full'}: {ms:.3f} ms  "
                  f"{flops / (ms * 1e-3) / 1e12:.1f} TFLOPS", flush=True)
            record("fwd", name, "mha" if causal else "mha_full", argv[0],
                   "causal" if causal else "full", B, H, S, D, DV, ms,
                   flops / (ms * 1e-3) / 1e12)


if __name__ == "__main__":
    main()
