"""attnc.LinearAttention on the device: simple_gla's forward and backward,
fixed-length and packed (forward_varlen, backward_varlen, through the C
interface), against its parallel form in fp64 (the project's rule: error
<= 2 x the same form's error in the input dtype + atol); each packed
sequence's gradients are bit for bit those of the fixed-length backward of
that sequence alone.

Run as test_torch_ops.py (docs/python.md)."""

import itertools
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


def gla_sequence(q, k, v, g, s0):
    """simple_gla over one sequence from state s0: q, k, v [T,H,D], g [H,T]
    (the log-gate), s0 [H,D,DV]; out [T,H,DV] and the final state, both in
    the parallel form, computed in q's dtype (the decay in fp64 first)."""
    t, d = q.shape[0], q.shape[-1]
    if t == 0:
        return v[:0], s0 * 1
    qh, kh, vh = (x.transpose(0, 1) for x in (q, k, v))
    qs = qh * (1.0 / math.sqrt(d))
    G = torch.cumsum(g.to(torch.float64), -1)
    causal = torch.ones(t, t, device=q.device, dtype=torch.bool).tril()
    decay = (torch.exp(G[:, :, None] - G[:, None, :]) * causal).to(q.dtype)
    o = ((qs @ kh.transpose(-1, -2)) * decay) @ vh
    o = o + (qs * torch.exp(G)[..., None].to(q.dtype)) @ s0.to(q.dtype)
    tail = torch.exp(G[:, -1:] - G)[..., None].to(q.dtype)
    final = (torch.exp(G[:, -1])[:, None, None].to(q.dtype) * s0.to(q.dtype)
             + (kh * tail).transpose(-1, -2) @ vh)
    return o.transpose(0, 1), final


@needs_gpu
class PackedSimpleGla(unittest.TestCase):
    LENGTHS = (0, 1, 63, 100, 333, 0, 31)

    def test_packed_forward_and_backward(self):
        for dtype in (torch.float16, torch.bfloat16):
            with self.subTest(dtype=dtype):
                self._dtype = dtype
                self._check(dtype)

    def _check(self, dtype):
        torch.manual_seed(1)
        lengths, h, d = self.LENGTHS, 4, 64
        t, b = sum(lengths), len(lengths)
        cu = torch.tensor([0] + list(itertools.accumulate(lengths)),
                          dtype=torch.int32, device="cuda")
        q, k, v, dout = (torch.randn(t, h, d, device="cuda").to(dtype)
                         for _ in range(4))
        g = -torch.rand(1, h, t, device="cuda") * 0.1
        init = torch.randn(b, h, d, d, device="cuda") * 0.1
        dfinal = torch.randn(b, h, d, d, device="cuda")
        att = attnc.LinearAttention(attnc.example("simple_gla"), dtype=dtype,
                                    head_dim=d)
        out = torch.empty_like(v)
        final = torch.empty_like(init)
        att.forward_varlen(q, k, v, out, cu, decay=g, initial_state=init,
                           final_state=final)
        dq, dk, dv = (torch.empty_like(x) for x in (q, k, v))
        ddecay, dinit = torch.empty_like(g), torch.empty_like(init)
        att.backward_varlen(q, k, v, g, dout, cu, dq, dk, dv,
                            initial_state=init, dfinal_state=dfinal,
                            ddecay=ddecay, dinitial_state=dinit)
        torch.cuda.synchronize()

        # Each sequence in fp64 and in the dtype; the loss is
        # sum(out * dout) + sum(final * dfinal).
        results = {}
        for dt in (torch.float64, dtype):
            leaves = [x.detach().to(dt).requires_grad_()
                      for x in (q, k, v)]
            gl = g.detach().double().requires_grad_()
            s0 = init.detach().double().requires_grad_()
            outs, finals = [], []
            for i in range(b):
                lo, hi = int(cu[i]), int(cu[i + 1])
                o, f = gla_sequence(*(x[lo:hi] for x in leaves),
                                    gl[0, :, lo:hi], s0[i])
                outs.append(o)
                finals.append(f)
            o, f = torch.cat(outs), torch.stack(finals)
            loss = ((o.double() * dout.double()).sum()
                    + (f.double() * dfinal.double()).sum())
            grads = torch.autograd.grad(loss, leaves + [gl, s0])
            results[dt] = (o.detach(), f.detach(), grads)
        ref, plain = results[torch.float64], results[dtype]
        check_close(self, "packed out", out, ref[0], plain[0])
        check_close(self, "packed final", final, ref[1], plain[1])
        for name, got, r, p in zip(
                ("dq", "dk", "dv", "ddecay", "dinitial_state"),
                (dq, dk, dv, ddecay, dinit), ref[2], plain[2]):
            check_close(self, f"packed {name}", got, r, p)

        # Each sequence alone through the fixed-length backward: the same
        # bits.
        for i in range(b):
            lo, hi = int(cu[i]), int(cu[i + 1])
            if lo == hi:
                continue
            one = [x[lo:hi].unsqueeze(0) for x in (q, k, v, dout)]
            sg = g[:, :, lo:hi].contiguous()
            sdq, sdk, sdv = (torch.empty_like(x) for x in one[:3])
            sddecay, sdinit = torch.empty_like(sg), torch.empty_like(init[:1])
            att.backward(one[0], one[1], one[2], sg, one[3], sdq, sdk, sdv,
                         initial_state=init[i:i + 1],
                         dfinal_state=dfinal[i:i + 1], ddecay=sddecay,
                         dinitial_state=sdinit)
            torch.cuda.synchronize()
            for name, alone, packed in (
                    ("dq", sdq[0], dq[lo:hi]), ("dk", sdk[0], dk[lo:hi]),
                    ("dv", sdv[0], dv[lo:hi]),
                    ("ddecay", sddecay, ddecay[:, :, lo:hi]),
                    ("dinitial_state", sdinit[0], dinit[i])):
                self.assertTrue(torch.equal(alone, packed),
                                f"sequence {i}: {name} differs from the "
                                f"fixed-length backward's")


if __name__ == "__main__":
    unittest.main()
