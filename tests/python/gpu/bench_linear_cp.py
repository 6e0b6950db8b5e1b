"""Weak scaling of linear attention across ranks
(attnc.distributed.linear_attention_cp): simple_gla with a fixed sequence
per GPU (16k tokens, D128 bf16, H16 and H32 by default), forward and
forward+backward: attnc on one GPU over S tokens against the state passing
over W GPUs and W*S tokens (and flash-linear-attention's chunk_simple_gla
on one GPU where it is installed). Prints one row per measurement as it is
measured: ms, tokens per second per GPU, efficiency = per-GPU throughput
over W GPUs / one GPU's.

Run: torchrun --nproc_per_node=2 tests/python/gpu/bench_linear_cp.py"""

import argparse
import os
import time

import torch
import torch.distributed as dist

import attnc.torch
from attnc import distributed as ad


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
    p.add_argument("--heads", type=int, nargs="+", default=[16, 32])
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--iters", type=int, default=10)
    a = p.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    s, d, b = a.seq, a.dim, 1
    fla = fla_call()
    if rank == 0:
        print(f"linear weak scaling (simple_gla), "
              f"{torch.cuda.get_device_name()} x{world}, {s} tokens per GPU,"
              f" B{b} D{d} bf16, {time.strftime('%Y-%m-%d')}"
              f"{'' if fla else ' (fla not installed: no peer row)'}")
        print(f"{'H':>3} {'pass':8} {'implementation':24} {'ms':>8} "
              f"{'Mtok/s/GPU':>11} {'vs attnc 1 GPU':>15}", flush=True)
    for h in a.heads:
        torch.manual_seed(h)
        n = s * world
        q, k, v, dout = (torch.randn(b, n, h, d, device="cuda",
                                     dtype=torch.bfloat16) for _ in range(4))
        g = -0.05 * torch.rand(b, h, n, device="cuda")
        lo, hi = rank * s, (rank + 1) * s
        for backward in (False, True):
            what = "fwd+bwd" if backward else "fwd"
            base = None
            runs = [("attnc 1 GPU", lambda x: attnc.torch.linear_attention(
                        *x[:3], "simple_gla", x[3]), 0, s, s),
                    (f"attnc cp {world} GPUs",
                     lambda x: ad.linear_attention_cp(*x[:3], "simple_gla",
                                                      x[3]), lo, hi, n)]
            if fla is not None:
                runs.append(("fla 1 GPU", lambda x: fla(*x), 0, s, s))
            for label, call, x0, x1, tokens in runs:
                args = [t[:, x0:x1].contiguous() for t in (q, k, v)] + [
                    g[..., x0:x1].contiguous()]
                dl = dout[:, x0:x1].contiguous()
                if backward:
                    args = [t.requires_grad_() for t in args]

                    def fn(c=call, x=args, do=dl):
                        c(x).backward(do)
                else:
                    def fn(c=call, x=args):
                        with torch.no_grad():
                            c(x)
                try:
                    ms = timed(fn, a.iters)
                except Exception as e:  # reported, not fatal
                    if rank == 0:
                        print(f"{label} ({what}, H{h}) did not run: "
                              f"{type(e).__name__}: {str(e)[:300]}",
                              flush=True)
                    continue
                per_gpu = tokens / (world if tokens == n else 1)
                rate = per_gpu / ms / 1e3
                base = base or rate
                if rank == 0:
                    print(f"{h:3} {what:8} {label:24} {ms:8.3f} "
                          f"{rate:11.1f} {rate / base:15.2f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
