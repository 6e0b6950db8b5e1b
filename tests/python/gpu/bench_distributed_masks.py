"""Weak scaling of ring attention under masks that read positions (attnc.
distributed_positions): a sliding window of 256 keys (mha_sliding_window),
a document mask (mha_document, documents of 3000 tokens that cross the
shards' ends) and prefix-LM (mha_prefix_lm, a prefix of a quarter of the
tokens), a fixed sequence per GPU (16k tokens, H32 D128 bf16 by
default), forward and forward+backward: attnc on one GPU over S tokens
against the ring over W GPUs and W*S tokens. FLOPs count the kept
elements exactly (4·H·D per kept element forward, 3.5 times that forward
+ backward); efficiency = ring per-GPU throughput / one-GPU throughput.
Then PyTorch's context_parallel around SDPA with the same mask as an
attn_mask, where it runs (it is said when not).

Run: torchrun --nproc_per_node=2 tests/python/gpu/bench_distributed_masks.py"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import attnc.torch
from attnc import distributed as ad

from bench_distributed import fwd_bwd, no_grad, timed

WINDOW = 256
DOC = 3000


def prefix_of(n):
    """The prefix-LM's prefix over n tokens: a quarter of them."""
    return n // 4


def kept(mask, n):
    """The elements the mask keeps over n tokens."""
    if mask == "prefix":
        p = prefix_of(n)
        return n * (n + 1) // 2 + p * (p - 1) // 2
    if mask == "window":
        w = min(WINDOW, n)
        return w * (w + 1) // 2 + (n - w) * w
    full, rest = divmod(n, DOC)
    return full * DOC * (DOC + 1) // 2 + rest * (rest + 1) // 2


def doc_ids(b, h, n):
    ids = (torch.arange(n, device="cuda") // DOC).float()
    return ids[None, None, :].expand(b, h, n).contiguous()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seq", type=int, default=16384)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--layouts", nargs="+", default=["contiguous"])
    p.add_argument("--no-cp", action="store_true")
    p.add_argument("--masks", nargs="+",
                   default=["window", "document", "prefix"])
    p.add_argument("--profile", action="store_true",
                   help="the last rank's host time of the ring calls "
                   "(cProfile, the top functions)")
    p.add_argument("--trace", action="store_true",
                   help="the last rank's kernels per ring call")
    a = p.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    b, h, d, s = 1, a.heads, a.dim, a.seq
    n = s * world
    torch.manual_seed(0)
    whole = [torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16)
             for _ in range(4)]
    one = [t[:, :, :s].contiguous() for t in whole]
    if rank == 0:
        print(f"weak scaling under masks, {torch.cuda.get_device_name()} "
              f"x{world}, {s} tokens per GPU, B{b} H{h} D{d} bf16, "
              f"{time.strftime('%Y-%m-%d %H:%M')}, {a.iters} calls after 2 "
              "warm-up")
        print(f"{'mask':8} {'pass':8} {'implementation':30} {'ms':>8} "
              f"{'TFLOP/s/GPU':>12} {'efficiency':>11} {'host ms':>8}", flush=True)
    base = {}
    for mask, name in (("window", "mha_sliding_window"),
                       ("document", "mha_document"),
                       ("prefix", "mha_prefix_lm")):
        if mask not in a.masks:
            continue
        ids1 = doc_ids(b, h, s) if mask == "document" else None
        idsn = doc_ids(b, h, n) if mask == "document" else None
        for backward in (False, True):
            what = "fwd+bwd" if backward else "fwd"
            mult = 3.5 if backward else 1.0
            runs = [("attnc 1 GPU", None)] + [
                (f"attnc ring {world} GPUs {lay[:3]}", lay)
                for lay in a.layouts]
            for label, layout in runs:
                if layout is None:
                    args = [t.detach() for t in one]
                    inputs = ({"q_doc": ids1, "k_doc": ids1}
                              if ids1 is not None else None)
                    if mask == "prefix":
                        inputs = {"prefix_len": prefix_of(s)}

                    def call(q, k, v, i=inputs):
                        return attnc.torch.attention(q, k, v, name, inputs=i)
                    tokens = s
                else:
                    args = [ad.shard(t, causal_layout=layout) for t in whole]
                    inputs = None
                    if idsn is not None:
                        sh = ad.shard(idsn, causal_layout=layout)
                        inputs = {"q_doc": sh, "k_doc": sh}
                    if mask == "prefix":
                        inputs = {"prefix_len": prefix_of(n)}

                    def call(q, k, v, i=inputs, lay=layout):
                        return ad.ring_attention(q, k, v, name, inputs=i,
                                                 causal_layout=lay)
                    tokens = n
                if backward:
                    for t in args[:3]:
                        t.requires_grad_()
                fn = (fwd_bwd(call, *args) if backward
                      else (lambda c=call, x=args: no_grad(c, *x[:3])))
                ms = timed(fn, a.iters, 2)
                host = host_ms(fn, a.iters)
                work = 4 * b * h * d * kept(mask, tokens) * mult
                tf = work / (world if tokens == n else 1) / ms / 1e9
                base.setdefault((mask, what), tf)
                if rank == 0:
                    print(f"{mask:8} {what:8} {label:30} {ms:8.2f} {tf:12.1f}"
                          f" {tf / base[mask, what]:11.2f} {host:8.2f}",
                          flush=True)
                if a.profile and layout is not None:
                    profile_host(fn, world, rank, f"{mask} {what} {layout}")
                if a.trace and layout is not None:
                    kernels(fn, world, rank, f"{mask} {what} {layout[:3]}")
    if not a.no_cp:
        cp_masked(whole, world, rank, b, h, n, d)
    dist.barrier()
    dist.destroy_process_group()


def host_ms(fn, iters):
    """The host's milliseconds per call of `iters` calls queued back to
    back (no wait but the ring's own): a call is host-bound when this
    reaches the CUDA events' time. The slowest rank's."""
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    t = torch.tensor((time.perf_counter() - t0) * 1e3 / iters, device="cuda")
    torch.cuda.synchronize()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def profile_host(fn, world, rank, what, calls=20, top=14):
    """The last rank's host functions by own time over `calls` calls."""
    import cProfile
    import io
    import pstats

    torch.cuda.synchronize()
    dist.barrier()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    lines = [f"  host profile {what}, rank {rank}, {calls} calls:"] + [
        "  " + ln.replace(os.getcwd(), ".")[:150]
        for ln in out.getvalue().splitlines()
        if ln.strip()[:1].isdigit() or "ncalls" in ln][:top + 1]
    got = [None] * world
    dist.all_gather_object(got, "\n".join(lines))
    if rank == 0:
        print(got[-1], flush=True)


def kernels(fn, world, rank, what, calls=3):
    """The last rank's GPU kernels over `calls` calls (torch.profiler):
    per call, their count and summed time by kind, against the wall time
    (CUDA events) of the same calls: where a ring call's time goes."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    dist.barrier()
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
    wall = start.elapsed_time(end) / calls
    kinds = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        n = e.name.lower()
        kind = ("nccl" if "nccl" in n else "classify" if "classify" in n
                or "compact" in n else "merge" if "merge" in n else
                "attn_bwd" if "attnc_bwd" in n or "bwd" in n else
                "attn_fwd" if "attnc" in n else "other")
        c, t = kinds.get(kind, (0, 0.0))
        kinds[kind] = (c + 1, t + e.device_time_total / 1e3)
    parts = " ".join(f"{k} {c / calls:.0f}x {t / calls:.3f}"
                     for k, (c, t) in sorted(kinds.items()))
    line = (f"  kernels {what} rank {rank}: wall {wall:.3f} ms/call; "
            f"per call: {parts} (count x ms)")
    lines = [None] * world
    dist.all_gather_object(lines, line)
    if rank == 0:
        print(lines[-1], flush=True)


def cp_masked(whole, world, rank, b, h, n, d):
    """PyTorch's context_parallel SDPA with the window as an attn_mask:
    one call, reported whether it runs."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel

    mesh = init_device_mesh("cuda", (world,))
    bufs = [t.clone() for t in whole]
    try:
        i = torch.arange(n, device="cuda")
        keep = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < WINDOW)
        with context_parallel(mesh, buffers=bufs, buffer_seq_dims=[2] * 4,
                              no_restore_buffers=set(bufs)):
            q, k, v, _ = bufs
            F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
            torch.cuda.synchronize()
        if rank == 0:
            print("context_parallel SDPA with the window as attn_mask ran "
                  "(untimed)", flush=True)
    except Exception as e:  # reported, not fatal
        if rank == 0:
            print(f"context_parallel SDPA with an attn_mask did not run: "
                  f"{type(e).__name__}: {str(e)[:300]}", flush=True)


if __name__ == "__main__":
    main()
