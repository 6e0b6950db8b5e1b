"""Where a ring forward's time goes (attnc.distributed), W GPUs, a fixed
sequence per GPU (16k tokens, H32 D128 bf16 by default): each rank's ring
steps timed alone (the attention calls of its schedule, the merge), the
K/V exchange alone, and the ring forward, with the process group as
torch.distributed makes it and with NCCL communicators limited to a few
CTAs (ProcessGroupNCCL.Options().config.max_ctas: the SMs the P2P kernel
takes from the attention it overlaps); then one causal ring forward under
torch.profiler, summarised per rank: its kernels in order (start, length,
the NCCL kernels' grid), the compute stream's idle gaps and the share of
the NCCL kernels under attention kernels.

Run: torchrun --nproc_per_node=2 tests/python/gpu/bench_distributed_parts.py
[--seq 16384] [--ctas 2 4 8] [--high-priority] [--trace DIR]"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist

import attnc
from attnc import distributed as ad

from bench_distributed import events_ms, timed, unmasked


def each_rank(text, rank, world):
    """Prints every rank's text, rank by rank."""
    got = [None] * world
    dist.all_gather_object(got, text)
    if rank == 0:
        for r, t in enumerate(got):
            print(f"  rank {r}: {t}", flush=True)


def ring_of(name):
    """The ring object ring_attention keeps for definition name."""
    for key, ring in ad._rings.items():
        if key[0] == name:
            return ring
    raise RuntimeError(f"no ring for {name}")


def parts(ring, q, k, v, iters):
    """Each step's attention calls and the merge of this rank's schedule,
    timed alone (ms): [(what, ms)]."""
    sched = ring._schedule(ring._chunk(q))
    rows = []
    out = torch.empty_like(q)
    finals = q.new_empty((ring.n_finals,) + q.shape[:3], dtype=torch.float32)
    kv = [k, v]
    made = {}
    for t, (_, blocks) in enumerate(sched.steps):
        for i, b in enumerate(blocks):
            if t == 0:
                fn = (lambda b=b: ring._block_forward(b, q, kv, None, out,
                                                      finals))
            else:
                made[t, i] = (b.q0,) + ring._block_forward(b, q, kv, None)
                fn = (lambda b=b: ring._block_forward(b, q, kv, None))
            rows.append((f"step{t} {b.kind} {b.q1 - b.q0}x{b.k1 - b.k0}",
                         events_ms(fn, iters)))
    if sched.runs:
        ring._block_forward(sched.steps[0][1][0], q, kv, None, out, finals)
        rows.append((f"merge {len(sched.runs)} run(s) "
                     f"{sum(r.b - r.a for r in sched.runs)} rows",
                     events_ms(lambda: ring._merge(sched.runs, made, out,
                                                   finals), iters)))
    return rows


def exchange_ms(kv, group, world, rank, iters):
    """The K/V exchange alone, both directions at once (slowest rank)."""
    nxt = [torch.empty_like(x) for x in kv]

    def run():
        ad._wait(ad._exchange(kv, nxt, group, world, rank))
    return timed(run, iters)


def trace_summary(path, rank):
    """One line per kernel and the totals, from a chrome trace."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    ks = sorted((e for e in events if e.get("cat") == "kernel"
                 and "dur" in e), key=lambda e: e["ts"])
    if not ks:
        return "no kernels"
    t0 = ks[0]["ts"]
    comm = [e for e in ks if "nccl" in e["name"].lower()]
    work = [e for e in ks if "nccl" not in e["name"].lower()]
    lines = []
    for e in ks:
        name = e["name"].split("(")[0].split("<")[0][:34]
        extra = ""
        if e in comm:
            extra = f" grid {e.get('args', {}).get('grid')}"
        lines.append(f"    {e['ts'] - t0:9.1f} +{e['dur']:8.1f} us  "
                     f"s{e.get('args', {}).get('stream', '?')} {name}{extra}")
    gaps = 0.0
    end = work[0]["ts"] + work[0]["dur"] if work else 0
    for e in work[1:]:
        gaps += max(0.0, e["ts"] - end)
        end = max(end, e["ts"] + e["dur"])
    span = end - (work[0]["ts"] if work else 0)
    busy = sum(e["dur"] for e in work)
    under = 0.0
    for c in comm:
        for w in work:
            under += max(0.0, min(c["ts"] + c["dur"], w["ts"] + w["dur"])
                         - max(c["ts"], w["ts"]))
    ctime = sum(c["dur"] for c in comm)
    head = (f"span {span:.0f} us, kernels {busy:.0f} us, gaps between "
            f"kernels {gaps:.0f} us; NCCL {len(comm)} kernel(s) {ctime:.0f} "
            f"us, {100 * under / ctime if ctime else 0:.0f}% under others")
    return head + "\n" + "\n".join(lines)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seq", type=int, default=16384)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--ctas", type=int, nargs="*", default=[2, 8])
    p.add_argument("--trace", default=None)
    p.add_argument("--high-priority", action="store_true",
                   help="also a group whose NCCL stream has high priority "
                   "(its kernels' CTAs are placed before the attention's)")
    a = p.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = {"default": None}
    for c in a.ctas:
        try:
            opts = dist.ProcessGroupNCCL.Options()
            opts.config.min_ctas = 1
            opts.config.max_ctas = c
            groups[f"max_ctas {c}"] = dist.new_group(backend="nccl",
                                                     pg_options=opts)
        except Exception as e:  # reported; the default group still runs
            if rank == 0:
                print(f"max_ctas {c}: no group ({type(e).__name__}: "
                      f"{str(e)[:200]})", flush=True)
    if a.high_priority:
        opts = dist.ProcessGroupNCCL.Options(is_high_priority_stream=True)
        groups["high priority"] = dist.new_group(backend="nccl",
                                                 pg_options=opts)
    s, n = a.seq, a.seq * world
    torch.manual_seed(0)
    whole = [torch.randn(1, a.heads, n, a.dim, device="cuda",
                         dtype=torch.bfloat16) for _ in range(3)]
    q, k, v = (ad.shard(t) for t in whole)
    if rank == 0:
        print(f"ring forward parts, {torch.cuda.get_device_name()} x{world}"
              f", {s} tokens per GPU, B1 H{a.heads} D{a.dim} bf16, "
              f"{time.strftime('%Y-%m-%d %H:%M')}, {a.iters} calls",
              flush=True)
    defs = {"causal": attnc.example("mha"), "none": unmasked()}
    for mask, definition in defs.items():
        with torch.no_grad():
            ad.ring_attention(q, k, v, definition)
            ring = ring_of(definition.name)
            rows = parts(ring, q, k, v, a.iters)
        each_rank("; ".join(f"{w} {ms:.3f}" for w, ms in rows) +
                  f"; sum {sum(ms for _, ms in rows):.3f} ms", rank, world)
        for label, g in groups.items():
            with torch.no_grad():
                ms = timed(lambda g=g: ad.ring_attention(
                    q, k, v, definition, group=g), a.iters)
            xm = exchange_ms([k, v], g, world, rank, a.iters)
            if rank == 0:
                print(f"{mask:6} fwd ring, {label:10}: {ms:7.3f} ms "
                      f"(the K/V exchange alone {xm:.3f} ms)", flush=True)
        # Host time of one call (no sync inside it).
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.no_grad():
            ad.ring_attention(q, k, v, definition)
        host = (time.perf_counter() - t) * 1e3
        torch.cuda.synchronize()
        each_rank(f"{mask} host time of a call {host:.3f} ms", rank, world)
    if a.trace:
        from torch.profiler import ProfilerActivity, profile

        os.makedirs(a.trace, exist_ok=True)
        for label, g in groups.items():
            with torch.no_grad():
                ad.ring_attention(q, k, v, defs["causal"], group=g)
                torch.cuda.synchronize()
                dist.barrier()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    ad.ring_attention(q, k, v, defs["causal"], group=g)
                    torch.cuda.synchronize()
            tag = label.replace(" ", "")
            path = os.path.join(a.trace, f"fwd_{tag}_rank{rank}.json")
            prof.export_chrome_trace(path)
            if rank == 0:
                print(f"trace, causal ring forward, {label}:", flush=True)
            each_rank(trace_summary(path, rank), rank, world)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
