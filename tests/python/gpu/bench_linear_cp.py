"""Weak scaling of linear attention across ranks
(attnc.distributed.linear_attention_cp): simple_gla and mamba2 with a fixed
sequence per GPU (16k tokens, D128 bf16, H32 by default), forward and
forward+backward: attnc on one GPU over S tokens against the one-pass state
passing over W GPUs and W*S tokens, the earlier two-pass scheme over the
same tokens (kept here as the peer: each rank's shard run again from its
passed state, rank 0's backward waiting for the later ranks'), and
flash-linear-attention's chunk_simple_gla on one GPU where it is installed.
Prints one row per measurement as it is measured: ms, tokens per second
per GPU, efficiency = per-GPU throughput over W GPUs / one GPU's.

Run: torchrun --nproc_per_node=2 tests/python/gpu/bench_linear_cp.py"""

import argparse
import os
import time

import torch
import torch.distributed as dist

import attnc.torch
from attnc import _linear_cp as lcp
from attnc import distributed as ad


class _TieAll(torch.autograd.Function):
    """The two-pass scheme's rank 0: its output made to depend on the
    gathered tensors, so that its backward joins the gather's."""

    @staticmethod
    def forward(ctx, out, *parts):
        ctx.shapes = [p.shape for p in parts]
        return out.view_as(out)

    @staticmethod
    def backward(ctx, dout):
        return (dout, *(dout.new_zeros(s, dtype=torch.float32)
                        for s in ctx.shapes))


def two_pass(q, k, v, name, decay, inputs):
    """The scheme linear_attention_cp ran before its one-pass form: ranks
    before the last run their shard from a zero state for S_r, the (S_r,
    A_r) are all-gathered (differentiably) and scanned, and every rank after
    the first runs its shard again from its passed state. Its backward is
    autograd's: rank r's waits for the gradient of its S_r from the later
    ranks' backward passes."""
    from torch.distributed.nn import functional as dfn

    world, rank = dist.get_world_size(), dist.get_rank()
    run = attnc.torch.linear_attention
    grads = torch.is_grad_enabled() and q.requires_grad
    first, final = None, None
    if rank == 0:
        first, final = run(q, k, v, name, decay, inputs, None, "bshd", True)
    elif rank < world - 1:
        _, final = run(q, k, v, name, decay, inputs, None, "bshd", True)
    _, transform = lcp._decays(lcp._support_of(name), decay, inputs,
                              q.shape[-1], v, "bshd")
    if final is None:
        b, h = transform.shape
        final = transform.new_zeros((b, h, q.shape[-1], v.shape[-1]))
    packed = lcp._pack(final, transform)
    if grads:
        if not packed.requires_grad:
            packed.requires_grad_()
        parts = list(dfn.all_gather(packed))
    else:
        parts = lcp._gather(packed, None, world)
    if rank == 0:
        return _TieAll.apply(first, *parts) if grads else first
    state, _ = lcp._state_in(parts, rank, final.shape)
    return run(q, k, v, name, decay, inputs, state.contiguous(), "bshd")


def timed(fn, iters, warmup=2):
    """Milliseconds per call (CUDA events), the slowest rank's."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    ms = torch.tensor(start.elapsed_time(end) / iters, device="cuda")
    dist.all_reduce(ms, op=dist.ReduceOp.MAX)
    return ms.item()


def fla_call():
    try:
        from fla.ops.simple_gla import chunk_simple_gla
    except ImportError:
        return None

    def call(q, k, v, g):  # fla takes g [B,T,H]
        return chunk_simple_gla(q, k, v, g.transpose(1, 2).contiguous(),
                                scale=q.shape[-1] ** -0.5)[0]
    return call


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seq", type=int, default=16384, help="tokens per GPU")
    p.add_argument("--heads", type=int, nargs="+", default=[32])
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--variants", nargs="+", default=["simple_gla", "mamba2"])
    a = p.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    s, d, b = a.seq, a.dim, 1
    fla = fla_call()
    if rank == 0:
        print(f"linear weak scaling, {torch.cuda.get_device_name()} x{world},"
              f" {s} tokens per GPU, B{b} D{d} bf16, "
              f"{time.strftime('%Y-%m-%d %H:%M')}"
              f"{'' if fla else ' (fla not installed: no peer row)'}")
        print(f"{'variant':10} {'H':>3} {'pass':8} {'implementation':24} "
              f"{'ms':>8} {'Mtok/s/GPU':>11} {'vs attnc 1 GPU':>15}",
              flush=True)
    for name in a.variants:
        for h in a.heads:
            bench(name, h, s, d, b, world, rank, a.iters, fla)
    dist.barrier()
    dist.destroy_process_group()


def bench(name, h, s, d, b, world, rank, iters, fla):
    torch.manual_seed(h)
    n = s * world
    q, k, v, dout = (torch.randn(b, n, h, d, device="cuda",
                                 dtype=torch.bfloat16) for _ in range(4))
    g = -0.05 * torch.rand(b, h, n, device="cuda")
    a_head = -0.01 - 0.01 * torch.rand(h, device="cuda")
    dt = 0.05 + torch.rand(b, h, n, device="cuda")
    lo, hi = rank * s, (rank + 1) * s
    mamba = name == "mamba2"

    def inputs(x0, x1):
        return ({"A": a_head, "dt": dt[..., x0:x1].contiguous()} if mamba
                else None)

    for backward in (False, True):
        what = "fwd+bwd" if backward else "fwd"
        base = None
        runs = [("attnc 1 GPU", lambda x, i: attnc.torch.linear_attention(
                    *x[:3], name, None if mamba else x[3], i), 0, s, s),
                (f"attnc cp {world} GPUs",
                 lambda x, i: ad.linear_attention_cp(
                     *x[:3], name, None if mamba else x[3], inputs=i),
                 lo, hi, n),
                (f"two-pass cp {world} GPUs",
                 lambda x, i: two_pass(*x[:3], name,
                                       None if mamba else x[3], i),
                 lo, hi, n)]
        if fla is not None and not mamba:
            runs.append(("fla 1 GPU", lambda x, i: fla(*x), 0, s, s))
        for label, call, x0, x1, tokens in runs:
            args = [t[:, x0:x1].contiguous() for t in (q, k, v)] + [
                g[..., x0:x1].contiguous()]
            ins = inputs(x0, x1)
            dl = dout[:, x0:x1].contiguous()
            if backward:
                args = [t.requires_grad_() for t in args]

                def fn(c=call, x=args, i=ins, do=dl):
                    c(x, i).backward(do)
            else:
                def fn(c=call, x=args, i=ins):
                    with torch.no_grad():
                        c(x, i)
            try:
                ms = timed(fn, iters)
            except Exception as e:  # reported, not fatal
                if rank == 0:
                    print(f"{label} ({name} {what}, H{h}) did not run: "
                          f"{type(e).__name__}: {str(e)[:300]}", flush=True)
                continue
            per_gpu = tokens / (world if tokens == n else 1)
            rate = per_gpu / ms / 1e3
            base = base or rate
            if rank == 0:
                print(f"{name:10} {h:3} {what:8} {label:24} {ms:8.3f} "
                      f"{rate:11.1f} {rate / base:15.2f}", flush=True)


if __name__ == "__main__":
    main()
