#!/usr/bin/env python3
"""Decode peers on the shapes attnc_bench_decode times, in the same command:
SDPA (cuDNN, flash and efficient backends; the best of those that run),
FlexAttention's compiled decode, and a device-to-device copy of the K/V
bytes. One query per sequence, BHSD, GQA through enable_gqa. CUDA events,
warm-up, median of 30, inputs rotated over sets of at least 256 MiB.
With --paged=P, also FlexAttention over a paged cache of P-token pages
(torch.nn.attention.experimental._paged_attention.PagedAttention: the
block mask and mask_mod translated through its page table, pages in a
shuffled order). PyTorch 2.11's Flex refuses pages of 16 ("Q and KV block
size must be divisible by BLOCK_M and BLOCK_N", measured on an H100), so
docs/performance.md's paged peer uses 128; there is no peer for pages of 1.

With --queries=N, N queries a sequence (unmasked, as attnc_bench_decode's
packed rows with mha_full: every query sees every key); --no-flex leaves
FlexAttention out (its compile per shape is the slow part of a command).

With --window=W, the query attends to the last W keys only (a sliding
window at the end of the cache, attnc's mha_sliding_window with W = 256):
SDPA has no such mask without a dense one, so only FlexAttention runs,
with its block mask made outside the timing, and the line gives ms.

    python3 tools/bench/peers_decode.py [--paged=P] [--window=W] [--queries=N] [--no-flex]
        f16 HQ HKV D B:KV [B:KV ...]

GB/s counts the K/V bytes once per call (the copy: bytes read and written).
"""
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from peers_timing import compiled_flex, event_median_ms


def median_ms(fn, n_sets):
    return event_median_ms(lambda i: fn(i % n_sets), 5, 30)


def flex_paged_ms(flex, q, k, v, page_size, n_sets_fn):
    """FlexAttention's decode over a paged copy of k, v (one set): the
    caches [1, HKV, pages * page_size, D], the pages of the batch in a
    shuffled order, the mask translated by PagedAttention."""
    from torch.nn.attention.experimental._paged_attention import PagedAttention
    from torch.nn.attention.flex_attention import create_block_mask
    b, hkv, kv, d = k.shape
    n_pages = b * kv // page_size
    pa = PagedAttention(n_pages, page_size, b, device="cuda")
    # Reserve in 8 rounds, the sequences in a shuffled order each round, so
    # that a sequence's pages are not adjacent.
    rounds = min(8, kv // page_size)
    for r in range(rounds):
        upto = (kv // page_size) * (r + 1) // rounds * page_size
        for seq in torch.randperm(b).tolist():
            pa.reserve(torch.tensor(seq, device="cuda"), torch.tensor(upto, device="cuda"))
    k_cache = torch.empty(1, hkv, n_pages * page_size, d, device="cuda", dtype=k.dtype)
    v_cache = torch.empty_like(k_cache)
    pa.assign(torch.arange(b, device="cuda"), torch.arange(kv, device="cuda").expand(b, kv),
              k, v, k_cache, v_cache)
    noop = lambda b_, h_, q_, k_: q_ >= 0
    logical = create_block_mask(noop, b, None, 1, kv, BLOCK_SIZE=(128, page_size))
    physical = pa.convert_logical_block_mask(logical)
    mask_mod = pa.get_mask_mod(noop)
    physical.mask_mod = mask_mod
    return median_ms(lambda i: flex(q[i], k_cache, v_cache, block_mask=physical,
                                    enable_gqa=True), n_sets_fn)


def flex_window_ms(flex, qs, ks, vs, kv, window, n_sets):
    """FlexAttention with the last `window` keys of each sequence kept (the
    one query is the sequence's last position); "n/a" if it fails."""
    from torch.nn.attention.flex_attention import create_block_mask
    keep = lambda b_, h_, q_, k_: k_ >= kv - window
    try:
        mask = create_block_mask(keep, None, None, 1, kv, BLOCK_SIZE=(128, 128))
        ms = median_ms(lambda i: flex(qs[i], ks[i], vs[i], block_mask=mask,
                                      enable_gqa=True), n_sets)
        return "%.4f" % ms
    except Exception as e:
        print("flex window: %s" % str(e).splitlines()[0][:200], flush=True)
        return "n/a"


def main():
    paged = 0
    window = 0
    queries = 1
    use_flex = True
    for a in list(sys.argv):
        if a.startswith("--queries="):
            queries = int(a.split("=")[1])
            sys.argv.remove(a)
        elif a == "--no-flex":
            use_flex = False
            sys.argv.remove(a)
        elif a.startswith("--paged="):
            paged = int(a.split("=")[1])
            sys.argv.remove(a)
        elif a.startswith("--window="):
            window = int(a.split("=")[1])
            sys.argv.remove(a)
    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 256)
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[sys.argv[1]]
    hq, hkv, d = (int(x) for x in sys.argv[2:5])
    flex = compiled_flex() if use_flex else None
    start = time.time()
    for arg in sys.argv[5:]:
        b, kv = (int(x) for x in arg.split(":"))
        kv_bytes = b * kv * hkv * d * 2
        n_sets = max(1, min(256, -(-(256 << 20) // (2 * kv_bytes))))
        qs = [torch.randn(b, hq, queries, d, device="cuda", dtype=dtype)
              for _ in range(n_sets)]
        ks = [torch.randn(b, hkv, kv, d, device="cuda", dtype=dtype) for _ in range(n_sets)]
        vs = [torch.randn(b, hkv, kv, d, device="cuda", dtype=dtype) for _ in range(n_sets)]
        gbs = lambda ms: 2 * kv_bytes / (ms * 1e-3) / 1e9
        if window:
            print("peers %s hq%d hkv%d d%d B%d KV%d window %d: flex %s ms" % (
                sys.argv[1], hq, hkv, d, b, kv, window,
                flex_window_ms(flex, qs, ks, vs, kv, window, n_sets)), flush=True)
            del qs, ks, vs
            torch.cuda.empty_cache()
            continue
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
        if flex is not None and time.time() - start < 150:
            try:
                ms = median_ms(lambda i: flex(qs[i], ks[i], vs[i], enable_gqa=True), n_sets)
                row["flex"] = gbs(ms)
            except Exception as e:
                row["flex"] = None
        else:
            row["flex"] = None
        if paged:
            row["flex_paged"] = None
            if time.time() - start < 150:
                try:
                    row["flex_paged"] = gbs(flex_paged_ms(flex, qs, ks[0], vs[0], paged, n_sets))
                except Exception as e:
                    print("flex paged%d: %s" % (paged, str(e).splitlines()[0][:200]), flush=True)
        dst = torch.empty_like(ks[0])
        ms = median_ms(lambda i: dst.copy_(ks[i]), n_sets)
        row["copy"] = 2 * kv_bytes / (ms * 1e-3) / 1e9
        fmt = lambda x: "n/a" if x is None else "%.0f" % x
        sdpa = [v for k, v in row.items() if k in ("cudnn", "flash", "efficient") and v]
        print("peers %s hq%d hkv%d d%d B%d KV%d%s: sdpa best %s (cudnn %s, flash %s, "
              "efficient %s) flex %s copy %s GB/s" % (
                  sys.argv[1], hq, hkv, d, b, kv,
                  " q%d" % queries if queries != 1 else "", fmt(max(sdpa) if sdpa else None),
                  fmt(row["cudnn"]), fmt(row["flash"]), fmt(row["efficient"]),
                  fmt(row["flex"]), fmt(row["copy"])) +
              (" flex paged%d %s GB/s" % (paged, fmt(row["flex_paged"])) if paged else ""),
              flush=True)
        del qs, ks, vs, dst
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
