"""Linear attention across two or four GPUs
(attnc.distributed.linear_attention_cp, one pass each way): forward output
and the q, k, v and decay gradients of simple_gla, mamba2 and
retention_linear (equal and ragged shards), and simple_gla with the
sequence's initial state and a loss on its final state (the initial state's
gradient on the first rank, the final state on the last), against the
single-GPU attnc result of the whole sequence and a float64 reference, by
the project's rule (|cp - fp64| beyond atol·(1 + |fp64|) at most 2 x the
single-GPU error); a check that the passed state matters (the last shard
run from a zero state misses the reference); and the refusals.

Run (two GPUs): PYTHONPATH=python:tests/python/gpu ATTNC_LIBRARY=...
torchrun --nproc_per_node=2 tests/python/gpu/test_linear_cp.py
(or --nproc_per_node=4; python -m pytest on this file launches both, each
skipped with fewer GPUs or without PyTorch)."""

import os
import sys
import unittest

try:
    import torch
except ImportError:  # the test skips
    torch = None

from gpu_support import (needs_four_gpus, needs_two_gpus,  # noqa: E402
                         torchrun_two_ranks)


class TwoRanks(unittest.TestCase):
    @needs_two_gpus
    def test_torchrun_two_ranks(self):
        torchrun_two_ranks(self, __file__)

    @needs_four_gpus
    def test_torchrun_four_ranks(self):
        torchrun_two_ranks(self, __file__, ranks=4)


# -- the worker (one per rank, under torchrun) --------------------------------

def reference64(name, q, k, v, decay, inputs, init=None):
    """The definition's parallel form in float64 (bshd): o_i = Σ_{j<=i}
    exp(G_i - G_j) (q_i·k_j) v_j (+ exp(G_i) q_i·init) with G the cumulative
    decay; with init also the final state exp(G_T)·init + Σ_j exp(G_T -
    G_j) k_jᵀv_j."""
    q, k, v = (t.double().transpose(1, 2) for t in (q, k, v))  # bhsd
    d = q.shape[-1]
    heads = v.shape[1]
    if name == "mamba2":
        dt = inputs["dt"].double()
        g = dt * inputs["A"].double()[None, :, None]
        v = v * dt[..., None]
    elif name == "retention_linear":
        h = torch.arange(heads, device=q.device, dtype=torch.float64)
        g = torch.log(1 - torch.exp2(-5.0 - h))[None, :, None].expand(
            q.shape[0], heads, q.shape[2])
        q = q / d ** 0.5
    else:
        g = decay.double()
        q = q / d ** 0.5
    cum = torch.cumsum(g, -1)
    n = q.shape[2]
    keep = torch.ones(n, n, device=q.device, dtype=torch.bool).tril()
    diff = (cum[..., :, None] - cum[..., None, :]).masked_fill(~keep,
                                                               -torch.inf)
    out = ((q @ k.transpose(-1, -2)) * torch.exp(diff)) @ v
    if init is None:
        return out.transpose(1, 2)
    out = out + (torch.exp(cum)[..., None] * q) @ init
    last = torch.exp(cum[..., -1:] - cum)[..., None]  # [B,H,T,1]
    final = (torch.exp(cum[..., -1])[..., None, None] * init
             + (k * last).transpose(-1, -2) @ v)
    return out.transpose(1, 2), final


def atol(dtype):
    return 1e-3 if dtype == torch.float16 else 8e-3


def worker():
    import torch.distributed as dist

    import attnc
    import attnc.torch
    from attnc import distributed as ad

    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    failures, rows = [], []
    dtype = torch.bfloat16
    # (name, B, H, T, D, the first rank's tokens or None for equal shards)
    # (name, B, H, T, D, the first rank's tokens or None for equal shards,
    # with the sequence's initial state and a loss on its final state)
    cases = [("simple_gla", 1, 4, 2048, 128, None, False),
             ("simple_gla", 2, 2, 1000, 128, 384, False),
             ("mamba2", 1, 4, 2048, 128, None, False),
             ("retention_linear", 1, 4, 2048, 128, None, False),
             ("simple_gla", 1, 4, 2048, 128, 256, True)]
    for name, b, h, n, d, first, with_init in cases:
        torch.manual_seed(n + b * 7 + len(name))  # the same on every rank
        q, k, v, dout = (torch.randn(b, n, h, d, device="cuda").to(dtype)
                         for _ in range(4))
        # Slow decays, so that a shard's state reaches far into the next.
        decay = -0.02 * torch.rand(b, h, n, device="cuda")
        init = torch.randn(b, h, d, d, device="cuda") if with_init else None
        dfinal = torch.randn(b, h, d, d, device="cuda")
        inputs, uses_decay = None, name == "simple_gla"
        if name == "mamba2":
            inputs = {"A": -0.01 - 0.01 * torch.rand(h, device="cuda"),
                      "dt": 0.05 + torch.rand(b, h, n, device="cuda")}
        bounds = ([n * r // world for r in range(world + 1)] if first is None
                  else [0] + [first + (n - first) * r // (world - 1)
                              for r in range(world)])
        lo, hi = bounds[rank], bounds[rank + 1]
        # Single GPU, the whole sequence.
        qw, kw, vw = (t.clone().requires_grad_() for t in (q, k, v))
        dw = decay.clone().requires_grad_()
        iw = init.clone().requires_grad_() if with_init else None
        single, single_final = attnc.torch.linear_attention(
            qw, kw, vw, name, dw if uses_decay else None, inputs, iw,
            return_final_state=True)
        ((single.float() * dout.float()).sum()
         + ((single_final * dfinal).sum() if with_init else 0)).backward()
        # The ranks.
        ql, kl, vl = (t[:, lo:hi].clone().requires_grad_()
                      for t in (q, k, v))
        dl = decay[..., lo:hi].clone().requires_grad_()
        il = init.clone().requires_grad_() if with_init else None
        local_inputs = None
        if inputs:
            local_inputs = {"A": inputs["A"],
                            "dt": inputs["dt"][..., lo:hi].contiguous()}
        out, final = ad.linear_attention_cp(
            ql, kl, vl, name, dl if uses_decay else None,
            inputs=local_inputs, initial_state=il, return_final_state=True)
        loss = (out.float() * dout[:, lo:hi].float()).sum()
        if with_init and rank == world - 1:
            loss = loss + (final * dfinal).sum()
        loss.backward()
        # float64, the whole sequence.
        q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
        d64 = decay.double().requires_grad_()
        i64 = init.double().requires_grad_() if with_init else None
        ref = reference64(name, q64, k64, v64, d64, inputs, i64)
        if with_init:
            ref, ref_final = ref
            ((ref * dout.double()).sum()
             + (ref_final * dfinal.double()).sum()).backward()
        else:
            ref.backward(dout.double())
        got = [out.detach(), ql.grad, kl.grad, vl.grad]
        refs = [ref.detach()[:, lo:hi], q64.grad[:, lo:hi],
                k64.grad[:, lo:hi], v64.grad[:, lo:hi]]
        plain = [single.detach()[:, lo:hi], qw.grad[:, lo:hi],
                 kw.grad[:, lo:hi], vw.grad[:, lo:hi]]
        whats = ["out", "dq", "dk", "dv"]
        if uses_decay:
            got.append(dl.grad)
            refs.append(d64.grad[..., lo:hi])
            plain.append(dw.grad[..., lo:hi])
            whats.append("ddecay")
        if with_init and rank == 0:
            got.append(il.grad)
            refs.append(i64.grad)
            plain.append(iw.grad)
            whats.append("dinit")
        if with_init and rank == world - 1:
            got.append(final.detach())
            refs.append(ref_final.detach())
            plain.append(single_final.detach())
            whats.append("final")
        for what, g, r, p in zip(whats, got, refs, plain):
            err = (g.double() - r).abs().max().item()
            plain_err = (p.double() - r).abs().max().item()
            excess = ((g.double() - r).abs()
                      - atol(dtype) * (1 + r.abs())).max().item()
            ok = excess <= 2 * plain_err and r.abs().max().item() > 0
            rows.append((rank, name, f"b{b} h{h} s{n} [{lo}:{hi})"
                         f"{' init' if with_init else ''}", what, err,
                         plain_err, ok))
            if not ok:
                failures.append(f"rank {rank} {name} {what}: error "
                                f"{err:.3g}, single-GPU error "
                                f"{plain_err:.3g}")
        if rank == 0:  # progress, in case a later case does not finish
            print(f"{name} b{b} h{h} s{n}: done", flush=True)
        if rank == world - 1 and not with_init:  # the state must matter
            with torch.no_grad():
                alone = attnc.torch.linear_attention(
                    q[:, lo:hi], k[:, lo:hi], v[:, lo:hi], name,
                    decay[..., lo:hi] if uses_decay else None,
                    local_inputs)
            miss = (alone.double() - refs[0]).abs().max().item()
            if not miss > 10 * atol(dtype):
                failures.append(f"{name}: the last shard without the "
                                f"passed state is within {miss:.3g} of the "
                                "reference; the test does not see it")
    # Refusals.
    from attnc import dsl

    reads_t = dsl.LinearAttentionDef("decay_reads_t")
    reads_t.decay_mod = lambda x, i, b, h, t: x + 0.001 * t
    x = torch.randn(1, 64, 2, 128, device="cuda").to(dtype)
    for definition, error, says in (
            (reads_t.build(), attnc.NotSupportedYet, "reads the token index"),
            ("mha", attnc.NotSupportedYet, "is not linear attention")):
        try:
            ad.linear_attention_cp(x, x, x, definition)
            failures.append(f"{definition}: not refused")
        except error as e:
            if says not in str(e):
                failures.append(f"refused with {e}")
            elif rank == 0:
                print(f"refused as expected: {e}")
    table = [None] * world
    dist.all_gather_object(table, (rows, failures))
    if rank == 0:
        print(f"linear attention across {world} ranks "
              f"({torch.cuda.get_device_name()}), bf16: max |error| vs fp64")
        print(f"{'rank':4} {'variant':17} {'shape':30} {'':6} {'cp':>9}"
              f" {'1 GPU':>9} {'ratio':>6}  ok")
        for part_rows, _ in table:
            for r, name, shape, what, e, p, ok in part_rows:
                print(f"{r:4} {name:17} {shape:30} {what:6} {e:9.3g} "
                      f"{p:9.3g} {e / p if p else float('inf'):6.2f}  "
                      f"{'ok' if ok else 'FAIL'}")
        for _, part_failures in table:
            for f in part_failures:
                print("FAIL:", f)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    if "LOCAL_RANK" in os.environ:
        worker()
    else:
        unittest.main()
