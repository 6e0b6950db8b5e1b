#!/usr/bin/env python3
"""Decode peers on the shapes attnc_bench_decode times, in the same command:
SDPA (cuDNN, flash and efficient backends; the best of those that run),
FlexAttention's compiled decode, and a device-to-device copy of the K/V
bytes. One query per sequence, BHSD, GQA through enable_gqa. CUDA events,
warm-up, median of 30, inputs rotated over sets of at least 256 MiB.

    python3 tools/bench/peers_decode.py f16 HQ HKV D B:KV [B:KV ...]

GB/s counts the K/V bytes once per call (the copy: bytes read and written).
"""
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import flex_attention


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
    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 256)
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[sys.argv[1]]
    hq, hkv, d = (int(x) for x in sys.argv[2:5])
    flex = torch.compile(flex_attention)
    start = time.time()
    for arg in sys.argv[5:]:
        b, kv = (int(x) for x in arg.split(":"))
        kv_bytes = b * kv * hkv * d * 2
        n_sets = max(1, min(256, -(-(256 << 20) // (2 * kv_bytes))))
        qs = [torch.randn(b, hq, 1, d, device="cuda", dtype=dtype) for _ in range(n_sets)]
        ks = [torch.randn(b, hkv, kv, d, device="cuda", dtype=dtype) for _ in range(n_sets)]
        vs = [torch.randn(b, hkv, kv, d, device="cuda", dtype=dtype) for _ in range(n_sets)]
        gbs = lambda ms: 2 * kv_bytes / (ms * 1e-3) / 1e9
        row = {}
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                              ("flash", SDPBackend.FLASH_ATTENTION),
                              ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    ms = median_ms(lambda i: F.scaled_dot_product_attention(
                        qs[i], ks[i], vs[i], enable_gqa=True), n_sets)
                row[name] = gbs(ms)
            except Exception as e:  # a backend that cannot run the shape
                row[name] = None
        # Flex compiles per shape; past 150 s of the command it is skipped so
        # that the table's other columns come back.
        if time.time() - start < 150:
            try:
                ms = median_ms(lambda i: flex(qs[i], ks[i], vs[i], enable_gqa=True), n_sets)
                row["flex"] = gbs(ms)
            except Exception as e:
                row["flex"] = None
        else:
            row["flex"] = None
        dst = torch.empty_like(ks[0])
        ms = median_ms(lambda i: dst.copy_(ks[i]), n_sets)
        row["copy"] = 2 * kv_bytes / (ms * 1e-3) / 1e9
        fmt = lambda x: "n/a" if x is None else "%.0f" % x
        sdpa = [v for k, v in row.items() if k in ("cudnn", "flash", "efficient") and v]
        print("peers %s hq%d hkv%d d%d B%d KV%d: sdpa best %s (cudnn %s, flash %s, "
              "efficient %s) flex %s copy %s GB/s" % (
                  sys.argv[1], hq, hkv, d, b, kv, fmt(max(sdpa) if sdpa else None),
                  fmt(row["cudnn"]), fmt(row["flash"]), fmt(row["efficient"]),
                  fmt(row["flex"]), fmt(row["copy"])), flush=True)
        del qs, ks, vs, dst
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
