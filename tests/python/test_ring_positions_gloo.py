"""attnc.distributed's ring for masks that read positions on the CPU
(gloo, 2, 3 and 4 processes), its attention calls replaced by float64
torch ones with the kernels' contract (the positioned twin's mask at the
call's indices plus its ring_q_offset / ring_kv_offset inputs, per-token
inputs at the call's indices, the derived log-sum-exp merge, the backward
from the merged out and finals): the sliced key shards' sends, the blocks'
offsets, the merge of parts over runs of rows and the dK/dV accumulators'
trip home, against attention over the whole sequence, for a sliding
window, a document mask and prefix-LM on both layouts. Skips without
PyTorch (CI has none; the GPU test runs the real kernels)."""

import os
import unittest

from gloo_support import run_ranks

try:
    import torch
    import torch.distributed as dist
except ImportError:
    torch = None

WINDOW = 5


def keep_of(name, qp, kp, inputs, qsl=None, ksl=None):
    """The mask at positions qp x kp ([n], [m]); document ids from
    inputs (sliced by the call) broadcast [B, H, n, m]."""
    causal = qp[:, None] >= kp[None, :]
    if name == "window":
        return causal & (qp[:, None] - kp[None, :] < WINDOW)
    if name == "mha_document":
        return causal & (inputs["q_doc"][..., :, None] ==
                         inputs["k_doc"][..., None, :])
    if name == "mha_prefix_lm":
        return causal | (kp[None, :] < inputs["prefix_len"])
    raise KeyError(name)


class FakeAttention:
    """attnc.Attention's calls in float64 on CPU tensors (bhsd): with the
    mask of base at the offsets the call passes, or without a mask."""

    final_names = ("lse",)
    masks_made = 0

    def __init__(self, base, masked):
        self.base, self.masked = base, masked

    def make_block_mask(self, batch, heads, seq_q, seq_kv, inputs=None,
                        for_backward=False):
        """A stand-in BlockMask: what it was made for, which each call
        given it checks against its own (a mask kept for another block,
        shape, offsets, scalars or direction would be caught)."""
        FakeAttention.masks_made += 1
        return ("mask", batch, heads, seq_q, seq_kv,
                tuple(sorted((inputs or {}).items())), for_backward)

    def _check_mask(self, block_mask, q, k, inputs, backward):
        if block_mask is None:
            return
        from attnc import _ring_positions as pos
        scalars = {n: x for n, x in inputs.items()
                   if n in (pos.Q_OFFSET, pos.KV_OFFSET, "prefix_len")}
        want = ("mask", q.shape[0], q.shape[1], q.shape[2], k.shape[2],
                tuple(sorted(scalars.items())), backward)
        if not self.masked or block_mask != want:
            raise AssertionError(f"{self.base}: a call of {want} given "
                                 f"the block mask {block_mask}")

    def merge_kind(self):
        return "log-sum-exp", ""

    def _s(self, q, k, inputs):
        from attnc import _ring_positions as pos
        s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        qp = torch.arange(q.shape[2]) + inputs[pos.Q_OFFSET]
        kp = torch.arange(k.shape[2]) + inputs[pos.KV_OFFSET]
        if self.masked:
            s = s.masked_fill(~keep_of(self.base, qp, kp, inputs),
                              float("-inf"))
        return s

    def forward(self, q, k, v, out, finals, inputs=None, block_mask=None):
        self._check_mask(block_mask, q, k, inputs, False)
        s = self._s(q, k, inputs)
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
        out.copy_(p @ v)
        finals[0].copy_(lse)

    def backward(self, q, k, v, out, dout, finals, dq, dk, dv, inputs=None,
                 block_mask=None):
        self._check_mask(block_mask, q, k, inputs, True)
        s = self._s(q, k, inputs)
        p = torch.exp(s - finals[0][..., None]).nan_to_num(0.0)
        dp = dout @ v.transpose(-1, -2)
        ds = p * (dp - (dout * out).sum(-1, keepdim=True))
        scale = q.shape[-1] ** -0.5
        dq.copy_(ds @ k * scale)
        dk.copy_(ds.transpose(-1, -2) @ q * scale)
        dv.copy_(p.transpose(-1, -2) @ dout)

    def merge_results(self, outs, finals, out, out_finals):
        lse = torch.logsumexp(torch.stack([f[0] for f in finals]), dim=0)
        acc = torch.zeros_like(out)
        for o, f in zip(outs, finals):
            w = torch.exp(f[0] - lse).nan_to_num(0.0)
            acc += w[..., None] * o
        out.copy_(acc)
        out_finals[0].copy_(lse)


def _definitions():
    import attnc
    from attnc import dsl

    d = dsl.AttentionDef("window")
    d.score_mod = dsl.score_mods.scaled()
    d.mask_mod = dsl.masks.sliding_window(WINDOW)
    d.online_func = dsl.online_softmax()
    return {"window": d.build(),
            "mha_document": attnc.example("mha_document"),
            "mha_prefix_lm": attnc.example("mha_prefix_lm")}


def _fake_ring_modules():
    """attnc.distributed with its attention objects replaced by
    FakeAttention (the positioned twin by name) and no CUDA checks, for CPU
    tensors; returns (distributed, _ring_plan)."""
    from attnc import distributed as ad
    from attnc import _ring_plan as plan
    from attnc import _ring_positions as pos

    def fake(name, *a):
        base = name.split(pos.POSITIONS_SUFFIX)[0]
        return FakeAttention(base, not name.endswith(plan.TWIN_SUFFIX))

    ad._check = lambda *a: None  # CPU tensors
    ad._attnc_torch.attention_object = fake
    return ad, plan


def _worker(rank, world, port, errors):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        ad, plan = _fake_ring_modules()
        for name, definition in _definitions().items():
            for layout in plan.LAYOUTS:
                torch.manual_seed(5)
                n = plan.num_chunks(layout, world) * 6
                b, h = 2, 3
                q, k, v, dout = (torch.randn(b, h, n, 8, dtype=torch.float64)
                                 for _ in range(4))
                ids = torch.cumsum((torch.rand(b, 1, n) < 0.2).double(), -1)
                # Last: one document per chunk, which no other chunk reads.
                alone = name == "mha_document" and layout == "zigzag"
                if alone:
                    ids = (torch.arange(n) // (n // plan.num_chunks(
                        layout, world))).double()[None, None].repeat(b, 1, 1)
                ids = ids.expand(b, h, n).contiguous()
                whole_in = {"q_doc": ids, "k_doc": ids, "prefix_len": 4}
                p = torch.arange(n)
                keep = keep_of(name, p, p, whole_in)
                ws = [t.clone().requires_grad_() for t in (q, k, v)]
                s = (ws[0] @ ws[1].transpose(-1, -2)) / 8 ** 0.5
                ref = torch.softmax(s.masked_fill(~keep, float("-inf")),
                                    -1) @ ws[2]
                ref.backward(dout)
                inputs = None
                if name == "mha_document":
                    inputs = {"q_doc": ad.shard(ids, causal_layout=layout),
                              "k_doc": ad.shard(ids, causal_layout=layout)}
                if name == "mha_prefix_lm":
                    inputs = {"prefix_len": 4}
                ql, kl, vl = (ad.shard(t, causal_layout=layout)
                              .requires_grad_() for t in (q, k, v))
                got = ad.ring_attention(ql, kl, vl, definition,
                                        causal_layout=layout, inputs=inputs)
                got.backward(ad.shard(dout, causal_layout=layout))
                if alone:
                    # The ids' bounds (all-reduced) leave each rank its
                    # own chunks: nothing travels, no remote call runs.
                    ring = [r for key, r in ad._rings.items()
                            if key[0] == name and key[5] == layout][-1]
                    # The backward's plans: those made by the bounds
                    # (the forward plans by positions alone).
                    by_bounds = [p_ for key_, p_ in ring._plans.items()
                                 if key_[2] is not None]
                    if not by_bounds:
                        errors.put(f"rank {rank}: {name}: no plan made by "
                                   "the ids' bounds")
                    for p_ in by_bounds:
                        if any(p_.travel) or any(
                                p_.blocks[rank][s_] for s_ in range(world)
                                if s_ != rank):
                            errors.put(f"rank {rank}: {name}: remote work "
                                       f"for one document per chunk: "
                                       f"{p_.travel}")
                with torch.no_grad():  # planned by positions alone
                    plain = ad.ring_attention(ql, kl, vl, definition,
                                              causal_layout=layout,
                                              inputs=inputs)
                err = (plain - got.detach()).abs().max().item()
                if not err < 1e-5:
                    errors.put(f"rank {rank} {name} {layout} no-grad "
                               f"forward: {err}")
                for what, g, r in (("out", got.detach(), ref.detach()),
                                   ("dq", ql.grad, ws[0].grad),
                                   ("dk", kl.grad, ws[1].grad),
                                   ("dv", vl.grad, ws[2].grad)):
                    whole_g = ad.unshard(g, causal_layout=layout)
                    err = (whole_g - r).abs().max().item()
                    if not err < 1e-5:
                        errors.put(f"rank {rank} {name} {layout} {what}: "
                                   f"{err}")
    except Exception as e:  # reported by the parent
        import traceback
        errors.put(f"rank {rank}: {type(e).__name__}: {e}\n"
                   f"{traceback.format_exc()}")
    finally:
        dist.destroy_process_group()


def _cached_worker(rank, world, port, errors):
    """One ring per definition called again with what its plan depends
    on changed (the scalar prefix, the document ids, the sequence length):
    a plan reused from an earlier call would be wrong for the new one."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        ad, plan = _fake_ring_modules()
        defs = _definitions()
        layout = "contiguous"
        b, h = 1, 2
        cases = [("mha_prefix_lm", 24, 4, None), ("mha_prefix_lm", 24, 17,
                                                   None),
                 ("mha_prefix_lm", 32, 17, None),
                 ("mha_document", 24, 0, 12), ("mha_document", 24, 0, 3),
                 ("mha_document", 24, 0, 24), ("mha_document", 48, 0, 5),
                 ("window", 24, 0, None), ("window", 40, 0, None)]
        for name, n, prefix, doc in cases:
            torch.manual_seed(n + prefix + (doc or 0))
            q, k, v, dout = (torch.randn(b, h, n, 8, dtype=torch.float64)
                             for _ in range(4))
            ids = (torch.arange(n) // (doc or n)).double()[None, None] \
                .expand(b, h, n).contiguous()
            whole_in = {"q_doc": ids, "k_doc": ids, "prefix_len": prefix}
            p_ = torch.arange(n)
            keep = keep_of(name, p_, p_, whole_in)
            ws = [t.clone().requires_grad_() for t in (q, k, v)]
            s_ = (ws[0] @ ws[1].transpose(-1, -2)) / 8 ** 0.5
            ref = torch.softmax(s_.masked_fill(~keep, float("-inf")),
                                -1) @ ws[2]
            ref.backward(dout)
            inputs = None
            if name == "mha_document":
                sh = ad.shard(ids, causal_layout=layout)
                inputs = {"q_doc": sh, "k_doc": sh}
            if name == "mha_prefix_lm":
                inputs = {"prefix_len": prefix}
            ql, kl, vl = (ad.shard(t, causal_layout=layout)
                          .requires_grad_() for t in (q, k, v))
            got = ad.ring_attention(ql, kl, vl, defs[name],
                                    causal_layout=layout, inputs=inputs)
            got.backward(ad.shard(dout, causal_layout=layout))
            for what, g, r in (("out", got.detach(), ref.detach()),
                               ("dq", ql.grad, ws[0].grad),
                               ("dk", kl.grad, ws[1].grad),
                               ("dv", vl.grad, ws[2].grad)):
                err = (ad.unshard(g, causal_layout=layout) - r).abs().max()
                if not err.item() < 1e-5:
                    errors.put(f"rank {rank} {name} n={n} prefix={prefix} "
                               f"doc={doc} {what}: {err.item()}")
        if not FakeAttention.masks_made:
            errors.put(f"rank {rank}: no BlockMask was made for the masked "
                       "blocks of masks that read no tensor")
    except Exception as e:  # reported by the parent
        import traceback
        errors.put(f"rank {rank}: {type(e).__name__}: {e}\n"
                   f"{traceback.format_exc()}")
    finally:
        dist.destroy_process_group()


@unittest.skipIf(torch is None, "needs PyTorch")
class GlooPositionsRing(unittest.TestCase):
    def test_plans_follow_what_they_depend_on(self):
        run_ranks(self, _cached_worker, 2)

    def test_two_ranks(self):
        run_ranks(self, _worker, 2)

    def test_three_ranks(self):
        run_ranks(self, _worker, 3)

    def test_four_ranks(self):
        run_ranks(self, _worker, 4)


if __name__ == "__main__":
    unittest.main()
