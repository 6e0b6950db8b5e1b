"""Learnable ALiBi through attnc.torch on the device: alibi_learnable's
slopes and diagonal head bias as torch Parameters of a module, their
gradients (and dq, dk, dv, the output) from attnc against an fp64 eager
reference (the explicit softmax with the bias, float64) at several shapes,
f16 and bf16, eager and under torch.compile(fullgraph=True).

Run (GPU machine): PYTHONPATH=python:tests/python/gpu
ATTNC_LIBRARY=.../libattnc_c.so python -m pytest
tests/python/gpu/test_alibi_learnable.py"""

import unittest

from gpu_support import (HAVE_GPU, check_close, doosum_only_input_grads,
                         needs_gpu, reference, torch)

if HAVE_GPU:
    import attnc
    import attnc.torch

    class LearnedAlibi(torch.nn.Module):
        """Causal attention with ALiBi whose per-head slopes are learned
        (initialised to ALiBi's geometric ones), and a learned bias on a
        query's own key."""

        def __init__(self, heads):
            super().__init__()
            self.slopes = torch.nn.Parameter(torch.tensor(
                [2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)],
                device="cuda"))
            self.head_bias = torch.nn.Parameter(
                torch.randn(heads, device="cuda") * 0.5)

        def forward(self, q, k, v):
            return attnc.torch.attention(
                q, k, v, "alibi_learnable",
                inputs={"slopes": self.slopes, "head_bias": self.head_bias})

# (B, H, S, D, dtype): a sequence that is not a multiple of any tile, GQA
# aside (alibi_learnable's inputs are per query head), two head dims.
SHAPES = (
    (2, 4, 256, 64, "float16"),
    (1, 8, 1000, 64, "bfloat16"),
    (2, 2, 384, 128, "bfloat16"),
)


@needs_gpu
class LearnedSlopes(unittest.TestCase):
    def check_module(self, b, h, s, d, dtype, compiled=False):
        self._dtype = dtype
        torch.manual_seed(b * 1000 + s + d)
        module = LearnedAlibi(h)
        q, k, v = (torch.randn(b, h, s, d, device="cuda").to(dtype)
                   .requires_grad_() for _ in range(3))
        dout = torch.randn(b, h, s, d, device="cuda").to(dtype)
        f = torch.compile(module, fullgraph=True) if compiled else module
        out = f(q, k, v)
        out.backward(dout)
        params = [module.slopes, module.head_bias]
        got = [q.grad, k.grad, v.grad] + [p.grad for p in params]
        self.assertTrue(all(g is not None for g in got))
        self.assertEqual(module.slopes.grad.shape, (h,))

        refs = {}
        for dt in (torch.float64, dtype):
            leaves = [t.detach().to(dt).requires_grad_() for t in (q, k, v)]
            # The plain computation keeps the parameters in float32 (what
            # they are); the reference takes them to float64.
            pdt = torch.float64 if dt == torch.float64 else torch.float32
            ins = {"slopes": module.slopes.detach().to(pdt).requires_grad_(),
                   "head_bias": module.head_bias.detach().to(pdt)
                   .requires_grad_()}
            o = reference("alibi_learnable", *leaves, ins)
            refs[dt] = (o.detach(), torch.autograd.grad(
                o, leaves + [ins["slopes"], ins["head_bias"]], dout.to(dt)))
        (ref, ref_g), (plain, plain_g) = refs[torch.float64], refs[dtype]
        inputs = {"slopes": module.slopes, "head_bias": module.head_bias}
        doosum = doosum_only_input_grads("alibi_learnable", q, k, v, inputs,
                                         dout, dtype,
                                         ["slopes", "head_bias"])
        what = f"B{b} H{h} S{s} D{d} {dtype}{' compiled' if compiled else ''}"
        check_close(self, f"{what} out", out.detach(), ref, plain)
        labels = ("dq", "dk", "dv", "dslopes", "dhead_bias")
        extra = (None, None, None) + tuple(doosum)
        for label, g, r, p, pd in zip(labels, got, ref_g, plain_g, extra):
            check_close(self, f"{what} {label}", g, r, p, pd)
        # A gradient that is not there by accident: every head's slope
        # moves the loss.
        self.assertTrue(bool((ref_g[3].abs() > 0).all()), what)

    def test_shapes(self):
        for b, h, s, d, name in SHAPES:
            with self.subTest(shape=(b, h, s, d, name)):
                self.check_module(b, h, s, d, getattr(torch, name))

    def test_compiled(self):
        torch._dynamo.reset()
        b, h, s, d, name = SHAPES[1]
        self.check_module(b, h, s, d, getattr(torch, name), compiled=True)

    def test_an_optimizer_step_moves_the_slopes(self):
        # The gradient reaches the Parameter: SGD changes every slope by
        # lr times its gradient.
        torch.manual_seed(3)
        module = LearnedAlibi(4)
        q, k, v = (torch.randn(2, 4, 128, 64, device="cuda",
                               dtype=torch.bfloat16) for _ in range(3))
        before = module.slopes.detach().clone()
        opt = torch.optim.SGD(module.parameters(), lr=0.1)
        module(q, k, v).float().square().mean().backward()
        grad = module.slopes.grad.clone()
        opt.step()
        self.assertTrue(torch.allclose(module.slopes.detach(),
                                       before - 0.1 * grad))
        self.assertGreater(grad.abs().min().item(), 0.0)


if __name__ == "__main__":
    unittest.main()
