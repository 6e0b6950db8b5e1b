"""Would the ring's causal forward gain from moving its K/V shard with the
copy engines instead of NCCL's send/recv kernel (whose CTAs share the SMs
with the first step's attention)? Two GPUs, 16k tokens per GPU, B1 H32
D128 bf16: the ring forward as attnc.distributed runs it, against the same
steps (the ring's own schedule, attention calls and merge) with the peer's
K and V pulled from a torch symmetric-memory buffer by one copy on a side
stream (cudaMemcpyAsync of the peer's mapped memory: the copy engines):

* pull: the copy alone (the peer's buffer holds its K/V from the start);
* barrier+pull: a device barrier of both ranks before the copy;
* stage: what a ring would do each call: barrier (the peer has read this
  rank's buffer), copy this rank's K/V into it, barrier, pull.

Each variant's output must equal the ring's bit for bit (the same kernels
on the same inputs). Also: the pull alone, and the first step's attention
alone and beside the pull.

Run: torchrun --nproc_per_node=2 tests/python/gpu/bench_ring_copy_engine.py
[--seq 16384]"""

import argparse
import os
import time

import torch
import torch.distributed as dist

import attnc
from attnc import distributed as ad

from bench_distributed import events_ms, timed
from bench_distributed_parts import ring_of


def symmetric(numel, dtype, group_name):
    """A symmetric-memory buffer of numel and its handle."""
    import torch.distributed._symmetric_memory as symm_mem

    for setup in ("set_backend", "enable_symm_mem_for_group"):
        fn = getattr(symm_mem, setup, None)
        if fn is None:
            continue
        try:
            fn("CUDA" if setup == "set_backend" else group_name)
        except Exception as e:  # reported: older or newer torch
            print(f"symm_mem.{setup}: {type(e).__name__}: {str(e)[:120]}",
                  flush=True)
    buf = symm_mem.empty(numel, dtype=dtype, device="cuda")
    return buf, symm_mem.rendezvous(buf, group=group_name)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seq", type=int, default=16384)
    p.add_argument("--iters", type=int, default=10)
    a = p.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != 2:
        raise SystemExit("two ranks: the pull reads the one other rank")
    torch.manual_seed(0)
    whole = [torch.randn(1, 32, a.seq * world, 128, device="cuda",
                         dtype=torch.bfloat16) for _ in range(3)]
    q, k, v = (ad.shard(t) for t in whole)
    definition = attnc.example("mha")
    with torch.no_grad():
        ref = ad.ring_attention(q, k, v, definition)
    ring = ring_of(definition.name)
    sched = ring._schedule(ring._chunk(q))

    buf, hdl = symmetric(2 * k.numel(), k.dtype,
                         dist.group.WORLD.group_name)
    shape = (2,) + tuple(k.shape)
    mine = buf.view(shape)
    mine[0].copy_(k)
    mine[1].copy_(v)
    peer = hdl.get_buffer(1 - rank, shape, k.dtype)
    nxt = torch.empty(shape, dtype=k.dtype, device="cuda")
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    dist.barrier()

    def pull(mode):
        cur = torch.cuda.current_stream()
        side.wait_stream(cur)
        with torch.cuda.stream(side):
            if mode != "pull":
                hdl.barrier(channel=0)
            if mode == "stage":
                mine[0].copy_(k)
                mine[1].copy_(v)
                hdl.barrier(channel=1)
            nxt.copy_(peer)

    def forward(mode):
        out = torch.empty_like(q)
        finals = q.new_empty((ring.n_finals,) + q.shape[:3],
                             dtype=torch.float32)
        pull(mode)
        kv, parts = [k, v], {}
        for t, (_, blocks) in enumerate(sched.steps):
            if t == 1:
                torch.cuda.current_stream().wait_stream(side)
                kv = [nxt[0], nxt[1]]
            for i, b in enumerate(blocks):
                if t == 0:
                    ring._block_forward(b, q, kv, None, out, finals)
                else:
                    parts[t, i] = (b.q0,) + ring._block_forward(b, q, kv,
                                                                None)
        ring._merge(sched.runs, parts, out, finals)
        return out

    if rank == 0:
        print(f"ring forward, K/V by copy engine, "
              f"{torch.cuda.get_device_name()} x{world}, {a.seq} tokens per "
              f"GPU, B1 H32 D128 bf16, causal, "
              f"{time.strftime('%Y-%m-%d %H:%M')}, {a.iters} calls",
              flush=True)
    rows = []
    with torch.no_grad():
        for label, fn in (("ring (NCCL)",
                           lambda: ad.ring_attention(q, k, v, definition)),
                          ("pull", lambda: forward("pull")),
                          ("barrier+pull", lambda: forward("barrier")),
                          ("stage", lambda: forward("stage")),
                          ("ring (NCCL) again",
                           lambda: ad.ring_attention(q, k, v, definition))):
            same = bool(torch.equal(fn(), ref))
            ms = timed(fn, a.iters)
            rows.append(f"{label} {ms:.3f} ms"
                        + ("" if same else " OUTPUT DIFFERS"))
        def pull_alone():
            pull("pull")
            torch.cuda.current_stream().wait_stream(side)
        alone = events_ms(pull_alone, a.iters)
        b0 = sched.steps[0][1][0]
        out = torch.empty_like(q)
        finals = q.new_empty((ring.n_finals,) + q.shape[:3],
                             dtype=torch.float32)
        step0 = events_ms(lambda: ring._block_forward(b0, q, [k, v], None,
                                                      out, finals), a.iters)

        def beside():
            pull("pull")
            ring._block_forward(b0, q, [k, v], None, out, finals)
            torch.cuda.current_stream().wait_stream(side)
        both = events_ms(beside, a.iters)
    rows.append(f"pull alone {alone:.3f} ms "
                f"({2 * k.numel() * 2 / alone / 1e6:.0f} GB/s); step 0 alone "
                f"{step0:.3f} ms, beside the pull {both:.3f} ms")
    got = [None] * world
    dist.all_gather_object(got, "; ".join(rows))
    if rank == 0:
        for r, t in enumerate(got):
            print(f"  rank {r}: {t}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
