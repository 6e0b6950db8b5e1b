"""Weak scaling of ring attention (attnc.distributed): a fixed sequence per
GPU (16k tokens, H32 D128 bf16 by default), causal (mha) and unmasked,
forward and forward+backward: attnc on one GPU over S tokens against the
ring over W GPUs and W*S tokens, and PyTorch's context_parallel SDPA over
the same W*S tokens in the same command (and SDPA on one GPU). Prints one
table (TFLOP/s per GPU, causal FLOPs halved; efficiency = ring per-GPU
throughput / one-GPU throughput) and, with --trace DIR, how much of the
P2P (NCCL) kernel time of one ring forward+backward ran under attention
kernels, from a torch.profiler trace.

Run: torchrun --nproc_per_node=2 tests/python/gpu/bench_distributed.py
[--seq 16384 65536]"""

import argparse
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import attnc
import attnc.torch
from attnc import distributed as ad
from attnc import dsl


def unmasked():
    d = dsl.AttentionDef("mha_unmasked")
    d.score_mod = dsl.score_mods.scaled()
    d.online_func = dsl.online_softmax()
    return d.build()


def events_ms(fn, iters, warmup=2, before=None):
    """Milliseconds per call of fn on this rank alone (CUDA events), after
    warmup calls; before() runs between the warm-up and the timed calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    if before is not None:
        before()
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


# --warmup-s: seconds of calls before each timed row (0: the counts alone).
WARMUP_S = 0.0


def settled_warmup(fn, warmup):
    """The warm-up calls: `warmup` of them, and then, under --warmup-s, as
    many more as fill that many seconds at their measured rate (the GPU's
    clocks settle; 2 calls of a few ms do not). The count is the largest
    any rank asks for, since a ring call needs every rank."""
    per_call = max(events_ms(fn, 1, warmup), 1e-3)
    extra = math.ceil(WARMUP_S * 1e3 / per_call) if WARMUP_S > 0 else 0
    n = torch.tensor(extra, device="cuda")
    dist.all_reduce(n, op=dist.ReduceOp.MAX)
    for _ in range(int(n.item())):
        fn()


def timed(fn, iters, warmup=2):
    """Milliseconds per call (CUDA events), the slowest rank's: every rank
    starts its timed calls after a barrier."""
    settled_warmup(fn, warmup)
    ms = torch.tensor(events_ms(fn, iters, 0, before=dist.barrier),
                      device="cuda")
    dist.all_reduce(ms, op=dist.ReduceOp.MAX)
    return ms.item()


def no_grad(call, *args):
    with torch.no_grad():
        return call(*args)


def flops(b, h, s, d, causal, backward):
    f = 4 * b * h * s * s * d * (0.5 if causal else 1.0)
    return f * (3.5 if backward else 1.0)


def fwd_bwd(call, q, k, v, dout):
    def run():
        out = call(q, k, v)
        out.backward(dout)
    return run


def overlap(trace_file):
    """(P2P kernels, their total us, the share of it under other kernels)
    from a chrome trace."""
    with open(trace_file) as f:
        events = json.load(f)["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    comm = [(e["ts"], e["ts"] + e["dur"]) for e in kernels
            if "nccl" in e["name"].lower()]
    work = sorted((e["ts"], e["ts"] + e["dur"]) for e in kernels
                  if "nccl" not in e["name"].lower())
    merged = []
    for a, b in work:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    total = sum(b - a for a, b in comm)
    under = 0.0
    for a, b in comm:
        for x, y in merged:
            under += max(0.0, min(b, y) - max(a, x))
    return len(comm), total, under / total if total else 0.0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seq", type=int, nargs="+", default=[16384],
                   help="tokens per GPU (one table each)")
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--iters", type=int, default=5,
                   help="timed calls at 16k tokens per GPU (fewer above, "
                   "at least 2)")
    p.add_argument("--warmup-s", type=float, default=0.0,
                   help="seconds of warm-up calls before each row (the "
                   "clocks settle; default 0: the warm-up counts alone)")
    p.add_argument("--trace", default=None)
    p.add_argument("--no-cp", action="store_true",
                   help="without PyTorch's context_parallel rows")
    p.add_argument("--cp-only", action="store_true",
                   help="only PyTorch's context_parallel rows")
    a = p.parse_args()
    global WARMUP_S
    WARMUP_S = a.warmup_s
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    defs = {"causal": attnc.example("mha"), "none": unmasked()}
    for s in a.seq:
        # A call's work grows with s²: fewer calls (and one warm-up) for
        # longer sequences.
        iters = max(2, a.iters * 16384 // s) if s > 16384 else a.iters
        weak_scaling(a, s, iters, 1 if s > 16384 else 2, world, rank, defs)
        torch.cuda.empty_cache()
    dist.barrier()
    dist.destroy_process_group()


def weak_scaling(a, s, iters, warmup, world, rank, defs):
    """One table: the rows of s tokens per GPU."""
    b, h, d = 1, a.heads, a.dim
    n = s * world
    dt = torch.bfloat16
    torch.manual_seed(0)
    whole = [torch.randn(b, h, n, d, device="cuda", dtype=dt)
             for _ in range(4)]
    one = [t[:, :, :s].contiguous() for t in whole]
    base = {}

    def report(mask, what, label, ms, tf):
        # Printed as measured: a later failure keeps the rows before it.
        if rank == 0:
            ratio = tf / base[mask, what] if (mask, what) in base else \
                float("nan")
            print(f"{mask:6} {what:8} {label:26} {ms:8.2f} {tf:12.1f} "
                  f"{ratio:15.2f}", flush=True)

    if rank == 0:
        print(f"weak scaling, {torch.cuda.get_device_name()} x{world}, "
              f"{s} tokens per GPU, B{b} H{h} D{d} bf16, "
              f"{time.strftime('%Y-%m-%d %H:%M')}, {iters} calls after "
              f"{warmup} warm-up calls and {WARMUP_S:g} s more")
        print(f"{'mask':6} {'pass':8} {'implementation':26} {'ms':>8} "
              f"{'TFLOP/s/GPU':>12} {'vs attnc 1 GPU':>15}", flush=True)
    for mask, definition in (() if a.cp_only else defs.items()):
        causal = mask == "causal"
        for backward in (False, True):
            what = "fwd+bwd" if backward else "fwd"
            ql, kl, vl, dl = (ad.shard(t) for t in whole)
            q1, k1, v1, d1 = (t.detach() for t in one)
            if backward:
                ql, kl, vl, q1, k1, v1 = (t.requires_grad_() for t in
                                          (ql, kl, vl, q1, k1, v1))

            def single(q, k, v):
                return attnc.torch.attention(q, k, v, definition)

            def ring(q, k, v):
                return ad.ring_attention(q, k, v, definition)

            def sdpa(q, k, v):
                return F.scaled_dot_product_attention(q, k, v,
                                                      is_causal=causal)

            for label, call, args, tokens in (
                    ("attnc 1 GPU", single, (q1, k1, v1, d1), s),
                    (f"attnc ring {world} GPUs", ring, (ql, kl, vl, dl), n),
                    ("SDPA 1 GPU", sdpa, (q1, k1, v1, d1), s)):
                fn = (fwd_bwd(call, *args) if backward
                      else (lambda c=call, x=args: no_grad(c, *x[:3])))
                ms = timed(fn, iters, warmup)
                per_gpu = flops(b, h, tokens, d, causal, backward) / (
                    world if tokens == n else 1)
                tf = per_gpu / ms / 1e9
                base.setdefault((mask, what), tf)
                report(mask, what, label, ms, tf)
    if a.trace and s == a.seq[0] and not a.cp_only:
        trace(defs["causal"], whole, world, rank, a.trace)
    # PyTorch's context_parallel last: in PyTorch 2.11 a failure inside its
    # context left its SDPA handler installed for later plain SDPA calls.
    for mask in (() if a.no_cp else defs):
        for backward in (False, True):
            what = "fwd+bwd" if backward else "fwd"
            try:
                ms, tf = cp_sdpa(whole, mask == "causal", backward, world,
                                 iters, warmup, b, h, n, d)
                report(mask, what, f"context_parallel {world} GPUs", ms, tf)
            except Exception as e:  # reported, not fatal
                if rank == 0:
                    print(f"context_parallel SDPA ({mask}, {what}) did not "
                          f"run: {type(e).__name__}: {str(e)[:300]}",
                          flush=True)


def _cp_options():
    """context_parallel's options object (its module moved in 2.11)."""
    try:
        from torch.distributed.tensor.experimental._context_parallel import \
            _attention
    except ImportError:
        from torch.distributed.tensor.experimental import _attention
    return _attention._cp_options


_mesh = None


def cp_sdpa(whole, causal, backward, world, iters, warmup, b, h, n, d):
    """PyTorch's context_parallel around SDPA over the same sequence."""
    from torch.distributed.device_mesh import init_device_mesh

    global _mesh
    if _mesh is None:
        _mesh = init_device_mesh("cuda", (world,))
    mesh = _mesh
    bufs = [t.clone() for t in whole]
    # Its load balancing (a zigzag like attnc's) is for causal calls only.
    options = _cp_options()
    balanced = options.enable_load_balance
    options.enable_load_balance = causal
    try:
        return _cp_timed(mesh, bufs, causal, backward, iters, warmup, b, h,
                         n, d, world)
    finally:
        options.enable_load_balance = balanced


def _cp_timed(mesh, bufs, causal, backward, iters, warmup, b, h, n, d,
              world):
    from torch.distributed.tensor.experimental import context_parallel

    with context_parallel(mesh, buffers=bufs, buffer_seq_dims=[2] * 4,
                          no_restore_buffers=set(bufs)):
        q, k, v, dout = bufs
        if backward:
            q, k, v = (t.detach().requires_grad_() for t in (q, k, v))

        def run():
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            if backward:
                out.backward(dout)
        ms = timed(run, iters, warmup)
    return ms, flops(b, h, n, d, causal, backward) / world / ms / 1e9


def trace(definition, whole, world, rank, folder):
    """One ring forward+backward under torch.profiler: the share of the
    NCCL kernels' time that ran under attention kernels."""
    from torch.profiler import ProfilerActivity, profile

    ql, kl, vl, dl = (ad.shard(t) for t in whole)
    ql, kl, vl = (t.requires_grad_() for t in (ql, kl, vl))
    run = fwd_bwd(lambda q, k, v: ad.ring_attention(q, k, v, definition),
                  ql, kl, vl, dl)
    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU,
                             ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"ring_trace_rank{rank}.json")
    prof.export_chrome_trace(path)
    count, total, share = overlap(path)
    print(f"rank {rank}: one causal ring fwd+bwd: {count} NCCL kernels, "
          f"{total:.0f} us, {100 * share:.0f}% of it under attention "
          "kernels")
    if rank == 0:
        print(prof.key_averages().table(sort_by="cuda_time_total",
                                        row_limit=12))


if __name__ == "__main__":
    main()
