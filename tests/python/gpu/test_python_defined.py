"""A variant written in Python (attnc.dsl) run through attnc.torch on the
device: a learnable softcap with a causal mask, forward and backward (q, k,
v and the cap's gradient) against fp64 eager torch.

Run (GPU machine): PYTHONPATH=python:tests/python:tests/python/gpu
ATTNC_LIBRARY=.../libattnc_c.so python -m unittest -v
tests/python/gpu/test_python_defined.py"""

import math
import unittest

from gpu_support import HAVE_GPU, check_close, needs_gpu, torch

if HAVE_GPU:
    import attnc
    import attnc.torch
    from attnc import dsl
    from attnc.dsl import InputShape
    from dsl_twins import OnlineSoftmax

B, H, S, D = 2, 4, 320, 64


def py_softcap():
    d = dsl.AttentionDef("py_softcap")
    d.inputs.declare("cap", InputShape.PerHead, 5.0, 30.0).requires_grad()

    def score_mod(score, inputs, b, h, q_idx, kv_idx):
        cap = inputs["cap"]
        return cap * (score * inputs.head_dim().rsqrt() / cap).tanh()

    d.score_mod = score_mod
    d.mask_mod = lambda b, h, q_idx, kv_idx: q_idx >= kv_idx
    d.online_func = OnlineSoftmax()
    return d.build()


def reference(q, k, v, cap):
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    c = cap.to(s.dtype)[None, :, None, None]
    s = c * torch.tanh(s / c)
    qi = torch.arange(q.shape[-2], device=q.device)[:, None]
    ki = torch.arange(k.shape[-2], device=q.device)[None, :]
    s = s.masked_fill(qi < ki, float("-inf"))
    return torch.softmax(s, dim=-1).to(v.dtype) @ v


@needs_gpu
class PythonDefinedVariant(unittest.TestCase):
    def test_softcap_forward_and_backward(self):
        definition = py_softcap()
        for dtype in (torch.float16, torch.bfloat16):
            with self.subTest(dtype=dtype):
                self._dtype = dtype
                torch.manual_seed(1)
                q, k, v = (torch.randn(B, H, S, D, device="cuda")
                           .mul(2.0).to(dtype).requires_grad_()
                           for _ in range(3))
                cap = (torch.rand(H, device="cuda") * 10 + 5).requires_grad_()
                out = attnc.torch.attention(q, k, v, definition,
                                            inputs={"cap": cap})
                dout = torch.randn_like(out)
                got = torch.autograd.grad(out, [q, k, v, cap], dout)
                results = {}
                for dt in (torch.float64, dtype):
                    leaves = [t.detach().to(dt).requires_grad_()
                              for t in (q, k, v)]
                    c = cap.detach().to(torch.float64 if dt == torch.float64
                                        else torch.float32).requires_grad_()
                    o = reference(*leaves, c)
                    results[dt] = (o, torch.autograd.grad(
                        o, leaves + [c], dout.to(dt)))
                (ref, ref_g), (plain, plain_g) = (results[torch.float64],
                                                  results[dtype])
                check_close(self, "py_softcap out", out.detach(),
                            ref.detach(), plain.detach())
                for label, g, r, p in zip(("dq", "dk", "dv", "dcap"), got,
                                          ref_g, plain_g):
                    check_close(self, f"py_softcap {label}", g, r, p)


if __name__ == "__main__":
    unittest.main()
