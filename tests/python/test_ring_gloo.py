"""attnc.distributed's ring on the CPU (gloo, 2 and 3 processes), its
attention calls replaced by float64 torch ones with the same contract
(local indices for the masked call, the derived log-sum-exp merge, the
backward from the merged out and finals): the sends and receives, the
partial results' merge, the dK/dV accumulators' trip back to their owners,
the backward's own-shard block in pieces and the autograd wiring, against
attention over the whole sequence.
Skips without PyTorch (CI has none; the GPU test runs the real kernels)."""

import os
import sys
import unittest

from gloo_support import OneRankGroup, run_ranks

try:
    import torch
    import torch.distributed as dist
except ImportError:
    torch = None


class FakeAttention:
    """attnc.Attention's forward/backward/merge in float64 on CPU tensors
    (bhsd), for causal mha (masked) or its maskless twin."""

    final_names = ("lse",)

    def __init__(self, masked):
        self.masked = masked

    def merge_kind(self):
        return "log-sum-exp", ""

    def _p(self, q, k):
        s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        if self.masked:  # the call's own (local) indices
            n, m = q.shape[2], k.shape[2]
            keep = (torch.arange(n)[:, None] >= torch.arange(m)[None, :])
            s = s.masked_fill(~keep, float("-inf"))
        return s

    def forward(self, q, k, v, out, finals, inputs=None):
        s = self._p(q, k)
        lse = torch.logsumexp(s, dim=-1)
        out.copy_(torch.softmax(s, dim=-1) @ v)
        finals[0].copy_(lse)

    def backward(self, q, k, v, out, dout, finals, dq, dk, dv, inputs=None):
        s = self._p(q, k)
        p = torch.exp(s - finals[0][..., None])
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


def _worker(rank, world, port, errors):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        import attnc
        from attnc import distributed as ad
        from attnc import _ring_plan as plan

        ad._check = lambda *a: None  # CPU tensors
        ad._attnc_torch.attention_object = (
            lambda name, *a: FakeAttention(not name.endswith(
                plan.TWIN_SUFFIX)))
        mha = attnc.example("mha")
        default_cut = plan.BACKWARD_CAUSAL_ROWS
        # cut 5: the backward's own-shard causal block in pieces
        # (plan.backward_blocks) of 3 to 4 rows.
        for layout, cut in ((x, c) for x in plan.LAYOUTS
                            for c in (default_cut, 5)):
            plan.BACKWARD_CAUSAL_ROWS = cut
            torch.manual_seed(5)
            n = plan.num_chunks(layout, world) * 6
            q, k, v, dout = (torch.randn(2, 3, n, 8, dtype=torch.float64)
                             for _ in range(4))
            ws = [t.clone().requires_grad_() for t in (q, k, v)]
            whole = FakeAttention(True)
            s = whole._p(ws[0], ws[1])
            ref = torch.softmax(s, dim=-1) @ ws[2]
            ref.backward(dout)
            ql, kl, vl = (ad.shard(t, causal_layout=layout)
                          .requires_grad_() for t in (q, k, v))
            got = ad.ring_attention(ql, kl, vl, mha, causal_layout=layout)
            got.backward(ad.shard(dout, causal_layout=layout))
            for what, g, r in (("out", got.detach(), ref.detach()),
                               ("dq", ql.grad, ws[0].grad),
                               ("dk", kl.grad, ws[1].grad),
                               ("dv", vl.grad, ws[2].grad)):
                whole_g = ad.unshard(g, causal_layout=layout)
                err = (whole_g - r).abs().max().item()
                # The finals and the accumulators are float32, as attnc's.
                if not err < 1e-5:
                    errors.put(f"rank {rank} {layout} cut {cut} {what}: "
                               f"{err}")
    except Exception as e:  # reported by the parent
        errors.put(f"rank {rank}: {type(e).__name__}: {e}")
    finally:
        dist.destroy_process_group()



@unittest.skipIf(torch is None, "needs PyTorch")
class GlooRing(unittest.TestCase):
    def run_ring(self, world):
        run_ranks(self, _worker, world)

    def test_two_ranks(self):
        self.run_ring(2)

    def test_three_ranks(self):
        self.run_ring(3)


@unittest.skipIf(torch is None, "needs PyTorch")
class Arguments(OneRankGroup, unittest.TestCase):
    """ring_attention's and shard's checks, in one gloo process."""

    def test_tensors(self):
        import attnc
        from attnc import distributed as ad

        q = torch.zeros(1, 2, 64, 64)
        with self.assertRaises(attnc.InvalidArgument) as e:
            ad.ring_attention(q, q, q, "mha")
        self.assertIn("argument 'q': expected a 4-D CUDA tensor",
                      str(e.exception))

    def test_layouts(self):
        import attnc
        from attnc import distributed as ad

        x = torch.arange(12.0).reshape(1, 1, 12, 1)
        with self.assertRaises(attnc.InvalidArgument) as e:
            ad.shard(x, causal_layout="striped")
        self.assertIn("'striped' is not one of", str(e.exception))
        with self.assertRaises(attnc.InvalidArgument) as e:
            ad.shard(torch.zeros(1, 1, 7, 1))
        self.assertIn("7 tokens does not cut into 2 equal chunks",
                      str(e.exception))
        self.assertTrue(torch.equal(ad.unshard(ad.shard(x)), x))


if __name__ == "__main__":
    sys.exit(unittest.main())
