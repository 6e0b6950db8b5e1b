"""The host side of ring attention under masks that read positions, on the
CPU: 2 gloo processes, the attention calls replaced by ones that do
nothing (so what is left is the plan, the slicing, the sends, the merge's
and the accumulators' torch ops), a sliding window of 256 and a document
mask (documents of 3000 tokens) at 16k tokens per rank (B1 H1 D8: the
plan's shapes, little data). Prints milliseconds per call (forward and
forward+backward, the median of 5 runs of 20 calls after 3 warm-up; these
vary with the machine's load) and the torch operations of one call (each
one not a view is a kernel launch on a GPU), and
with --profile the top of a cProfile of rank 0's calls. Needs PyTorch.

Run: PYTHONPATH=python ATTNC_LIBRARY=... python3
tests/python/bench_ring_host.py [--profile] [--layouts contiguous zigzag]"""

import argparse
import cProfile
import os
import pstats
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils._python_dispatch import TorchDispatchMode

from gloo_support import free_port


class NoOpAttention:
    """attnc.Attention's calls, doing nothing (softmax's contract)."""

    final_names = ("lse",)

    def merge_kind(self):
        return "log-sum-exp", ""

    def make_block_mask(self, batch, heads, seq_q, seq_kv, inputs=None,
                        for_backward=False):
        return object()  # made once per block: its cost is not per call

    def forward(self, q, k, v, out, finals, inputs=None, block_mask=None):
        pass

    def backward(self, q, k, v, out, dout, finals, dq, dk, dv, inputs=None):
        pass

    def merge_results(self, outs, finals, out, out_finals):
        pass


class _Ops(TorchDispatchMode):
    """Counts the torch operations run inside it (views apart: they launch
    nothing on a GPU)."""

    n = views = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        if func.is_view:
            self.views += 1
        return func(*args, **(kwargs or {}))


def _worker(rank, world, port, args):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    import attnc
    from attnc import distributed as ad

    ad._check = lambda *a: None  # CPU tensors
    ad._attnc_torch.attention_object = lambda *a: NoOpAttention()
    n, b, h, d = args.seq * world, 1, 1, 8
    torch.manual_seed(0)
    for name in ("mha_sliding_window", "mha_document"):
        for layout in args.layouts:
            whole = [torch.randn(b, h, n, d) for _ in range(4)]
            q, k, v, do = (ad.shard(t, causal_layout=layout) for t in whole)
            inputs = None
            if name == "mha_document":
                ids = (torch.arange(n) // 3000).float()[None, None]
                ids = ad.shard(ids.expand(b, h, n).contiguous(),
                               causal_layout=layout)
                inputs = {"q_doc": ids, "k_doc": ids}
            definition = attnc.example(name)
            for backward in (False, True):
                ql, kl, vl = (t.clone().requires_grad_(backward)
                              for t in (q, k, v))

                def call():
                    out = ad.ring_attention(ql, kl, vl, definition,
                                            inputs=inputs,
                                            causal_layout=layout)
                    if backward:
                        out.backward(do)
                for _ in range(3):
                    call()
                times = []
                for _ in range(5):
                    dist.barrier()
                    t0 = time.perf_counter()
                    for _ in range(20):
                        call()
                    times.append((time.perf_counter() - t0) / 20 * 1e3)
                what = "fwd+bwd" if backward else "fwd"
                counter = _Ops()
                with counter:
                    call()
                if rank == 0:
                    print(f"{name:20} {layout:10} {what:8} "
                          f"{statistics.median(times):7.3f} ms "
                          f"{counter.n:4} torch ops (rank 0; "
                          f"{counter.views} of them views)", flush=True)
                if args.profile and rank == 0:
                    prof = cProfile.Profile()
                    prof.enable()
                    for _ in range(20):
                        call()
                    prof.disable()
                    pstats.Stats(prof).sort_stats("tottime").print_stats(8)
                elif args.profile:
                    for _ in range(20):
                        call()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seq", type=int, default=16384)
    p.add_argument("--layouts", nargs="+", default=["contiguous", "zigzag"])
    p.add_argument("--profile", action="store_true")
    args = p.parse_args()
    mp.start_processes(_worker, args=(2, free_port(), args), nprocs=2,
                       start_method="spawn")


if __name__ == "__main__":
    main()
