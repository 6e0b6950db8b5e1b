"""Ring attention (attnc.distributed) on two or four GPUs: forward output and q/k/v
gradients of mha without a mask, causal mha, sigmoid_attn and an ALiBi
variant (positions as per-token inputs, sharded with the sequence), causal
mha and sigmoid_attn with the backward's own-shard block in pieces, and
masks that read positions (a sliding window of 256, a document mask,
prefix-LM; both layouts: the positioned twin with global offsets) against
the single-GPU attnc result of the whole sequence and an fp64 reference,
by the project's rule (tests/gpu: |ring - fp64| <= 2 x the single-GPU
error + atol (1 + |fp64|)); and the refusals.

Run (two GPUs): PYTHONPATH=python:tests/python/gpu ATTNC_LIBRARY=...
torchrun --nproc_per_node=2 tests/python/gpu/test_distributed.py
(or --nproc_per_node=4; python -m pytest on this file launches both, each
skipped with fewer GPUs or without PyTorch)."""

import math
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

def definitions():
    import attnc
    from attnc import dsl
    from attnc.dsl import InputShape, OnlineFunc, Var

    class ExpWithoutMax(OnlineFunc):
        """A softmax without the running max: its results do not merge
        (the epilogue's o / r is not o as it is, and there is no max)."""

        def __init__(self):
            super().__init__({"r": Var(0.0)}, {"lse": Var(0.0)})

        def online_fwd(self, scores, rs, b, h, q_idx):
            p = scores.exp()
            return p, {"r": rs["r"] + p.get_reduce("sum")}, 1.0

        def online_fwd_epilogue(self, o, rs, b, h, q_idx):
            return o / rs["r"], {"lse": rs["r"].log()}

        def forward(self, scores, f, b, h, q_idx, kv_idx):
            return (scores - f["lse"]).exp()

    no_merge = dsl.AttentionDef("softmax_without_max")
    no_merge.score_mod = dsl.score_mods.scaled()
    no_merge.mask_mod = dsl.masks.causal()
    no_merge.online_func = ExpWithoutMax()

    full = dsl.AttentionDef("mha_unmasked")
    full.score_mod = dsl.score_mods.scaled()
    full.online_func = dsl.online_softmax()
    alibi = dsl.AttentionDef("alibi_positions")
    alibi.inputs.declare("slopes", InputShape.PerHead, 0.0, 0.5)
    alibi.inputs.declare("q_pos", InputShape.PerQueryToken, 0.0, 64.0)
    alibi.inputs.declare("k_pos", InputShape.PerKeyToken, 0.0, 64.0)
    alibi.score_mod = lambda s, i, b, h, qi, ki: (
        s * i.head_dim().rsqrt() + i["slopes"] * (i["k_pos"] - i["q_pos"]))
    alibi.mask_mod = dsl.masks.causal()
    alibi.online_func = dsl.online_softmax(False)
    return {"mha_unmasked": full.build(), "mha": attnc.example("mha"),
            "sigmoid_attn": attnc.example("sigmoid_attn"),
            "alibi_positions": alibi.build(),
            "softmax_without_max": no_merge.build()}


def reference64(name, q, k, v, inputs):
    """The definition evaluated directly in float64 (bhsd)."""
    q, k, v = q.double(), k.double(), v.double()
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    n = q.shape[-2]
    keep = (torch.arange(n, device=q.device)[:, None]
            >= torch.arange(n, device=q.device)[None, :])
    if name == "sigmoid_attn":
        return (torch.sigmoid(s + inputs["softmax_bias"]) * keep) @ v
    if name == "alibi_positions":
        qp = inputs["q_pos"].double()[:, None, :, None]
        kp = inputs["k_pos"].double()[:, None, None, :]
        s = s + inputs["slopes"].double()[None, :, None, None] * (kp - qp)
    if name == "mha_sliding_window":
        pos = torch.arange(n, device=q.device)
        keep = keep & (pos[:, None] - pos[None, :] < 256)
    if name == "mha_document":
        keep = keep & (inputs["q_doc"][..., :, None]
                       == inputs["k_doc"][..., None, :])
    if name == "mha_prefix_lm":
        pos = torch.arange(n, device=q.device)
        keep = keep | (pos[None, :] < inputs["prefix_len"])
    if name != "mha_unmasked":
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


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
    defs = definitions()
    failures, rows = [], []
    dtype = torch.bfloat16
    lay = "zigzag"
    cases = [("mha_unmasked", 1, 4, 2048, 128, lay),
             ("mha", 1, 4, 2048, 128, lay), ("mha", 2, 2, 1536, 128, lay),
             ("sigmoid_attn", 1, 4, 2048, 128, lay),
             ("alibi_positions", 1, 4, 2048, 128, lay),
             # The backward's own-shard causal block in square pieces
             # (plan.backward_blocks) from 640 rows: 2048 rows a rank run
             # as four pieces of 512 and the full blocks below them.
             ("mha", 1, 4, 4096, 128, lay, 640),
             ("sigmoid_attn", 1, 4, 4096, 128, lay, 640)]
    # Masks that read positions: the calls pass their global positions.
    for layout in ("contiguous", "zigzag"):
        cases += [("mha_sliding_window", 1, 4, 4096, 128, layout),
                  ("mha_document", 2, 4, 4096, 128, layout),
                  ("mha_prefix_lm", 1, 4, 4096, 128, layout)]
    only = os.environ.get("ATTNC_RING_CASES")  # names, comma-separated
    if only:
        cases = [c for c in cases if c[0] in only.split(",")]
    from attnc import _ring_plan as plan
    default_cut = plan.BACKWARD_CAUSAL_ROWS
    for name, b, h, n, d, layout, *pieces in cases:
        plan.BACKWARD_CAUSAL_ROWS = pieces[0] if pieces else default_cut
        definition = defs.get(name, name)
        torch.manual_seed(n + b * 7 + len(name))  # the same on every rank
        q, k, v, dout = (torch.randn(b, h, n, d, device="cuda").to(dtype)
                         for _ in range(4))
        whole_inputs, local_inputs = None, None
        if name == "sigmoid_attn":
            whole_inputs = local_inputs = {"softmax_bias": -1.0}
        if name == "alibi_positions":
            pos = torch.arange(n, device="cuda", dtype=torch.float32)
            pos = pos[None, :].expand(b, n).contiguous()
            slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / h)
                                   for i in range(h)], device="cuda")
            whole_inputs = {"slopes": slopes, "q_pos": pos, "k_pos": pos}
            local_inputs = {"slopes": slopes,
                            "q_pos": ad.shard(pos, dim=1),
                            "k_pos": ad.shard(pos, dim=1)}
        if name == "mha_document":
            # Documents of 1 to 1023 tokens, across the shards' ends.
            gen = torch.Generator().manual_seed(n + b)
            ids = torch.cumsum(torch.rand(b, 1, n, generator=gen) < 1 / 300,
                               -1).float().expand(b, h, n).contiguous()
            ids = ids.cuda()
            whole_inputs = {"q_doc": ids, "k_doc": ids}
            local_inputs = {"q_doc": ad.shard(ids, causal_layout=layout),
                            "k_doc": ad.shard(ids, causal_layout=layout)}
        if name == "mha_prefix_lm":
            whole_inputs = local_inputs = {"prefix_len": n // 2 + 100}
        # Single GPU, the whole sequence.
        qw, kw, vw = (t.clone().requires_grad_() for t in (q, k, v))
        single = attnc.torch.attention(qw, kw, vw, definition,
                                       inputs=whole_inputs)
        single.backward(dout)
        # Two ranks, the ring.
        ql, kl, vl = (ad.shard(t, causal_layout=layout).requires_grad_()
                      for t in (q, k, v))
        out = ad.ring_attention(ql, kl, vl, definition, inputs=local_inputs,
                                causal_layout=layout)
        out.backward(ad.shard(dout, causal_layout=layout))
        got = [ad.unshard(t, causal_layout=layout)
               for t in (out.detach(), ql.grad, kl.grad, vl.grad)]
        # fp64, the whole sequence.
        q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
        ref = reference64(name, q64, k64, v64, whole_inputs)
        ref.backward(dout.double())
        refs = [ref.detach(), q64.grad, k64.grad, v64.grad]
        plain = [single.detach(), qw.grad, kw.grad, vw.grad]
        for what, g, r, p in zip(("out", "dq", "dk", "dv"), got, refs, plain):
            ring_err = (g.double() - r).abs().max().item()
            plain_err = (p.double() - r).abs().max().item()
            excess = ((g.double() - r).abs()
                      - atol(dtype) * (1 + r.abs())).max().item()
            ok = excess <= 2 * plain_err and r.abs().max().item() > 0
            shape = f"b{b} h{h} s{n} {layout[:3]}" + (
                f" cut {pieces[0]}" if pieces else "")
            rows.append((name, shape, what, ring_err, plain_err, ok))
            if not ok:
                failures.append(f"{name} {what}: ring error {ring_err:.3g}, "
                                f"single-GPU error {plain_err:.3g}")
    plan.BACKWARD_CAUSAL_ROWS = default_cut
    # Refusals, at construction, with what is wrong.
    ql = ad.shard(torch.randn(1, 2, 256, 128, device="cuda").to(dtype))
    for name, error, says in (
            (defs["softmax_without_max"], attnc.UserError,
             "its results cannot be merged"),
            ("alibi_learnable", attnc.NotSupportedYet,
             "gradients of custom inputs"),
            ("simple_gla", attnc.NotSupportedYet, "linear attention")):
        try:
            ad.ring_attention(ql, ql, ql, name)
            failures.append(f"{name}: not refused")
        except error as e:
            if says not in str(e):
                failures.append(f"{name}: refused with {e}")
            elif rank == 0:
                print(f"refused as expected: {e}")
    if rank == 0:
        print(f"ring attention, {world} ranks ({torch.cuda.get_device_name()})"
              f", bf16: max |error| vs fp64")
        print(f"{'variant':18} {'shape':20} {'':4} {'ring':>9} "
              f"{'1 GPU':>9} {'ratio':>6}  ok")
        for name, shape, what, e, p, ok in rows:
            print(f"{name:18} {shape:20} {what:4} {e:9.3g} {p:9.3g} "
                  f"{e / p if p else float('inf'):6.2f}  {'ok' if ok else 'FAIL'}")
        for f in failures:
            print("FAIL:", f)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    if "LOCAL_RANK" in os.environ:
        worker()
    else:
        unittest.main()
