"""attnc.LinearAttention on the device: simple_gla's forward and backward
against its parallel form in fp64 (the project's rule: error <= 2 x the
same form's error in the input dtype + atol).

Run as test_torch_ops.py (docs/python.md)."""

import math
import unittest

from gpu_support import HAVE_GPU, check_close, needs_gpu, torch

if HAVE_GPU:
    import attnc

B, T, H, D = 2, 256, 4, 64


def parallel_gla(q, k, v, g):
    """o_t = sum_{j<=t} exp(G_t - G_j) (q_t/sqrt(D) . k_j) v_j, G the
    inclusive cumsum of the log-gate g [B,H,T]; q, k, v [B,T,H,D]."""
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))
    G = torch.cumsum(g.to(torch.float64), -1)
    decay = torch.exp(G[..., :, None] - G[..., None, :])
    causal = torch.ones(T, T, device=q.device, dtype=torch.bool).tril()
    decay = (decay * causal).to(q.dtype)
    s = (qh * (1.0 / math.sqrt(D))) @ kh.transpose(-1, -2)
    return ((s * decay).to(v.dtype) @ vh).transpose(1, 2)


@needs_gpu
class SimpleGla(unittest.TestCase):
    def test_forward_and_backward(self):
        self._dtype = torch.float16
        torch.manual_seed(0)
        q, k, v = (torch.randn(B, T, H, D, device="cuda").half()
                   for _ in range(3))
        g = -torch.rand(B, H, T, device="cuda") * 0.1
        att = attnc.LinearAttention(attnc.example("simple_gla"), head_dim=D)
        self.assertTrue(att.uses_decay)
        out = torch.empty_like(q)
        att.forward(q, k, v, out, decay=g)
        dout = torch.randn_like(out)
        dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
        att.backward(q, k, v, g, dout, dq, dk, dv)
        torch.cuda.synchronize()
        results = {}
        for dt in (torch.float64, torch.float16):
            leaves = [x.detach().to(dt).requires_grad_() for x in (q, k, v)]
            o = parallel_gla(*leaves, g)
            grads = torch.autograd.grad(o, leaves, dout.to(dt))
            results[dt] = (o.detach(), grads)
        ref, plain = results[torch.float64], results[torch.float16]
        check_close(self, "simple_gla out", out, ref[0], plain[0])
        for name, got, r, p in zip(("dq", "dk", "dv"), (dq, dk, dv), ref[1],
                                   plain[1]):
            check_close(self, f"simple_gla {name}", got, r, p)


if __name__ == "__main__":
    unittest.main()
