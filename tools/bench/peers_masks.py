#!/usr/bin/env python3
"""Times FlexAttention on the everyday masks that attnc_bench_masks times,
in the same run: the document mask (8 documents + causal), prefix-LM (the
prefix length a runtime value), a causal sliding window of 256 keys and
chunked (local) attention: causal within chunks of 256 (attnc's
mha_chunked with C = 256). The block mask is made once,
outside the timing (create_block_mask), as a model would share it across
layers. Forward, and forward+backward (torch.autograd.grad over q, k, v),
with CUDA events, warm-up, median of 30, inputs rotated over three sets.

    python3 tools/bench/peers_masks.py f16 H D S [S ...] [--masks a,b] [--flex-dynamic]
        [--fwd-only] [--wait-file F]

--masks times only the named masks (document, prefix_lm, window256,
chunked256), in that order. --fwd-only times the forward alone. Every
block mask is made and every call compiled and warmed up before the first
timing; with --wait-file, the script then writes F + ".ready" and waits for
F to exist (as --varlen does below).

    python3 tools/bench/peers_masks.py f16 H D --varlen L1,L2,... [--wait-file F]

--varlen: the packed batch of attnc_bench_masks varlen (it prints the
lengths) as one sequence of all tokens under a document mask, each length
one document, alone (no mask within a document), combined with causal, a
causal window of 256 keys, or causal
chunks of 256 tokens counted from each document's start (attnc's varlen
rows). The tokens are padded to a multiple of 128 with one more document
(not counted in the TFLOPS). Forward, and the backward alone
(torch.autograd.grad of one forward, retain_graph), one input set. With
--wait-file, the block masks are made and every call compiled and warmed
up first; then the script writes F + ".ready" and waits for F to exist
before timing (so that another program's timing runs alone).

Flex is compiled with static shapes (peers_timing.compiled_flex);
--flex-dynamic times torch.compile's default instead, for comparison.

B = 16384 / S. The document boundaries are the fixed fractions of
DOC_FRACTIONS (attnc_bench_masks uses the same), the prefix is S / 4.
"""
import os
import sys
import time

import torch
from torch.nn.attention.flex_attention import create_block_mask

from peers_timing import compiled_flex, event_median_ms

# Eight documents of unequal length, the same on both sides of the table.
DOC_FRACTIONS = (0.0, 0.07, 0.21, 0.30, 0.46, 0.58, 0.71, 0.89, 1.0)
WINDOW = 256
CHUNK = 256


def doc_ids(S):
    ids = torch.empty(S, dtype=torch.int32, device="cuda")
    edges = [round(f * S) for f in DOC_FRACTIONS]
    for d in range(len(edges) - 1):
        ids[edges[d]:edges[d + 1]] = d
    return ids


def median_ms(fn, n_sets):
    return event_median_ms(lambda i: fn(i % n_sets), 5, 30)


def masks(S):
    ids = doc_ids(S)
    prefix = S // 4
    return {
        "document": lambda b, h, q, kv: (q >= kv) & (ids[q] == ids[kv]),
        "prefix_lm": lambda b, h, q, kv: (q >= kv) | (kv < prefix),
        "window256": lambda b, h, q, kv: (q >= kv) & (q - kv < WINDOW),
        "chunked256": lambda b, h, q, kv: (q >= kv) & ((q // CHUNK) == (kv // CHUNK)),
    }


def kept_pairs(name, n):
    """Kept (q, k) pairs of one sequence of n tokens (attnc's keptPairs)."""
    if name == "none":
        return n * n
    if name == "window256":
        return sum(min(q + 1, WINDOW) for q in range(n))
    if name == "chunked256":
        return sum(q % CHUNK + 1 for q in range(n))
    return n * (n + 1) // 2


def varlen(dt, H, D, lengths, wait_file, dynamic_default):
    flex = compiled_flex(dynamic_default)
    total = sum(lengths)
    padded = (total + 127) // 128 * 128
    sizes = lengths + ([padded - total] if padded > total else [])
    doc = torch.repeat_interleave(
        torch.arange(len(sizes), device="cuda", dtype=torch.int32),
        torch.tensor(sizes, device="cuda"))
    starts = torch.tensor([0] + sizes[:-1], device="cuda").cumsum(0).to(torch.int32)
    pos = torch.arange(padded, device="cuda", dtype=torch.int32) - starts[doc]
    fns = {
        "none": lambda b, h, q, kv: doc[q] == doc[kv],
        "causal": lambda b, h, q, kv: (doc[q] == doc[kv]) & (q >= kv),
        "window256": lambda b, h, q, kv: (doc[q] == doc[kv]) & (q >= kv) & (q - kv < WINDOW),
        "chunked256": lambda b, h, q, kv: (doc[q] == doc[kv]) & (q >= kv)
        & ((pos[q] // CHUNK) == (pos[kv] // CHUNK)),
    }
    q, k, v = (torch.randn(1, H, padded, D, device="cuda", dtype=dt, requires_grad=True)
               for _ in range(3))
    dout = torch.randn(1, H, padded, D, device="cuda", dtype=dt)
    runs = []
    for name, fn in fns.items():
        flops = 4.0 * H * D * sum(kept_pairs(name, n) for n in lengths)
        try:  # the block mask, compiles and warm-up before any timing
            bm = create_block_mask(fn, None, None, padded, padded, _compile=True)

            def fwd(i, bm=bm):
                with torch.no_grad():
                    flex(q, k, v, block_mask=bm)

            out = flex(q, k, v, block_mask=bm)

            def bwd(i, out=out):
                torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

            for _ in range(2):
                fwd(0)
                bwd(0)
            torch.cuda.synchronize()
        except Exception as err:
            print(f"flex varlen {name}: unavailable ({(str(err).splitlines() or [''])[0][:200]})",
                  flush=True)
            continue
        runs.append((name, fwd, bwd, flops))
    if wait_file:
        open(wait_file + ".ready", "w").close()
        while not os.path.exists(wait_file):
            time.sleep(0.2)
    for name, fwd, bwd, flops in runs:
        tf = median_ms(fwd, 1)
        tb = median_ms(bwd, 1)
        print(f"peer  flex varlen {name:10s} {'f16' if dt == torch.float16 else 'bf16'} "
              f"H{H} D{D}: {len(lengths)} seqs, {total} tokens (padded {padded}): "
              f"fwd {tf:.3f} ms {flops / (tf * 1e-3) / 1e12:.1f} TFLOPS  "
              f"bwd {tb:.3f} ms {2.5 * flops / (tb * 1e-3) / 1e12:.1f} TFLOPS", flush=True)


def main():
    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 256)
    args = sys.argv[1:]
    dynamic_default = "--flex-dynamic" in args
    if dynamic_default:
        args.remove("--flex-dynamic")
    if "--varlen" in args:
        wait_file = None
        if "--wait-file" in args:
            at = args.index("--wait-file")
            wait_file = args[at + 1]
            del args[at:at + 2]
        at = args.index("--varlen")
        lengths = [int(x) for x in args[at + 1].split(",")]
        del args[at:at + 2]
        dt = {"f16": torch.float16, "bf16": torch.bfloat16}[args[0]]
        varlen(dt, int(args[1]), int(args[2]), lengths, wait_file, dynamic_default)
        return
    only = None
    if "--masks" in args:
        at = args.index("--masks")
        only = args[at + 1].split(",")
        del args[at:at + 2]
    fwd_only = "--fwd-only" in args
    if fwd_only:
        args.remove("--fwd-only")
    wait_file = None
    if "--wait-file" in args:
        at = args.index("--wait-file")
        wait_file = args[at + 1]
        del args[at:at + 2]
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[args[0]]
    H, D = int(args[1]), int(args[2])
    flex = compiled_flex(dynamic_default)
    runs = []  # every call compiled and warmed up before any timing
    for S in map(int, args[3:]):
        B = max(1, 16384 // S)
        sets = [tuple(torch.randn(B, H, S, D, device="cuda", dtype=dt,
                                  requires_grad=not fwd_only) for _ in range(3))
                for _ in range(3)]
        douts = None if fwd_only else [torch.randn(B, H, S, D, device="cuda", dtype=dt)
                                       for _ in range(3)]
        for name, fn in masks(S).items():
            if only is not None and name not in only:
                continue
            bm = create_block_mask(fn, None, None, S, S)
            # Kept elements, for TFLOPS on the work the mask leaves.
            qi = torch.arange(S, device="cuda")
            kept = 0
            for r in range(0, S, 1024):  # rows in slabs: S^2 booleans at 16k is 256 MiB
                q = qi[r:r + 1024, None]
                kept += int(fn(0, 0, q, qi[None, :]).sum())
            flops_fwd = 4.0 * B * H * kept * D

            def fwd(i, sets=sets, bm=bm):
                with torch.no_grad():
                    flex(*sets[i], block_mask=bm)

            def fwd_bwd(i, sets=sets, bm=bm, douts=douts):
                out = flex(*sets[i], block_mask=bm)
                torch.autograd.grad(out, sets[i], douts[i])

            try:
                for i in range(2):
                    fwd(i)
                    if not fwd_only:
                        fwd_bwd(i)
                torch.cuda.synchronize()
            except Exception as err:
                print(f"flex {name} S{S}: unavailable ({(str(err).splitlines() or [''])[0][:200]})")
                continue
            runs.append((name, S, B, fwd, fwd_bwd, flops_fwd, kept))
    if wait_file:
        open(wait_file + ".ready", "w").close()
        while not os.path.exists(wait_file):
            time.sleep(0.2)
    for name, S, B, fwd, fwd_bwd, flops_fwd, kept in runs:
        try:
            tf = median_ms(fwd, 3)
            tfb = None if fwd_only else median_ms(fwd_bwd, 3)
        except Exception as err:
            print(f"flex {name} S{S}: unavailable ({(str(err).splitlines() or [''])[0][:200]})")
            continue
        both = "" if tfb is None else (
            f"fwd+bwd {tfb:.3f} ms {3.5 * flops_fwd / (tfb * 1e-3) / 1e12:.1f} TFLOPS  ")
        print(f"peer  flex {name:11s} {args[0]} B{B} H{H} S{S} D{D}: "
              f"fwd {tf:.3f} ms {flops_fwd / (tf * 1e-3) / 1e12:.1f} TFLOPS  {both}"
              f"density {kept / (S * S):.4f}", flush=True)


if __name__ == "__main__":
    main()
