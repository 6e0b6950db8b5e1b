"""attnc.torch.linear_attention on the device: simple_gla's out and final
state, and the gradients of q, k, v, the decay and the initial state
through autograd (a loss on the final state too), against its parallel
form in fp64 (the project's rule: error <= 2 x the same form's error in the
input dtype + atol); torch.compile(fullgraph=True); FakeTensor shapes. The
same for a packed batch (cu_seqlens, layout "thd"): each sequence against
its own parallel form, empty ones included; int64 offsets give the bits of
int32 ones; torch.compile gives the eager bits.

Run as test_torch_ops.py (docs/python.md)."""

import math
import unittest

from gpu_support import HAVE_GPU, check_close, needs_gpu, torch

if HAVE_GPU:
    import attnc
    import attnc.torch

B, T, H, D = 2, 192, 4, 64


def parallel_gla(q, k, v, g, s0):
    """simple_gla in its parallel form, in q's dtype (decay factors in
    fp64, then cast): o_t = sum_{j<=t} exp(G_t - G_j) (q_t/sqrt(D) . k_j)
    v_j + exp(G_t) (q_t/sqrt(D)) S0, and the final state exp(G_T) S0 +
    sum_j exp(G_T - G_j) k_j^T v_j; q, k, v [B,T,H,D], g [B,H,T], S0
    [B,H,D,D]."""
    dt = q.dtype
    T = q.shape[1]
    if T == 0:
        return q.new_zeros(q.shape[0], 0, *v.shape[2:]), s0.to(dt) * 1
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))
    G = torch.cumsum(g.to(torch.float64), -1)
    causal = torch.ones(T, T, device=q.device, dtype=torch.bool).tril()
    decay = (torch.exp(G[..., :, None] - G[..., None, :]) * causal).to(dt)
    qs = qh * (1.0 / math.sqrt(D))
    o = ((qs @ kh.transpose(-1, -2)) * decay) @ vh
    o = o + (qs * torch.exp(G)[..., None].to(dt)) @ s0.to(dt)
    tail = torch.exp(G[..., -1:] - G).to(dt)          # [B,H,T]
    final = (kh * tail[..., None]).transpose(-1, -2) @ vh
    final = final + torch.exp(G[..., -1])[..., None, None].to(dt) * s0.to(dt)
    return o.transpose(1, 2), final


LENGTHS = [0, 1, 63, 100, 31, 0, 129]


def packed_gla(q, k, v, g, s0, lengths):
    """parallel_gla of each sequence of a packed batch (q, k, v [T,H,D], g
    [1,H,T], s0 [N,H,D,D]): out [T,H,D] and the final states [N,H,D,D]."""
    outs, finals, t0 = [], [], 0
    for i, n in enumerate(lengths):
        o, f = parallel_gla(q[None, t0:t0 + n], k[None, t0:t0 + n],
                            v[None, t0:t0 + n], g[:, :, t0:t0 + n],
                            s0[i:i + 1])
        outs.append(o[0])
        finals.append(f)
        t0 += n
    return torch.cat(outs), torch.cat(finals)


@needs_gpu
class TorchLinear(unittest.TestCase):
    def inputs(self, dtype):
        torch.manual_seed(1)
        q, k, v = (torch.randn(B, T, H, D, device="cuda").to(dtype)
                   .requires_grad_() for _ in range(3))
        g = (-torch.rand(B, H, T, device="cuda") * 0.1).requires_grad_()
        s0 = (torch.randn(B, H, D, D, device="cuda") * 0.1).requires_grad_()
        return q, k, v, g, s0

    def check_dtype(self, dtype):
        self._dtype = dtype
        q, k, v, g, s0 = self.inputs(dtype)
        out, final = attnc.torch.linear_attention(
            q, k, v, "simple_gla", decay=g, initial_state=s0,
            return_final_state=True)
        self.assertEqual(final.dtype, torch.float32)
        self.assertEqual(tuple(final.shape), (B, H, D, D))
        dout = torch.randn_like(out)
        dfinal = torch.randn_like(final)
        leaves = (q, k, v, g, s0)
        got = torch.autograd.grad((out, final), leaves, (dout, dfinal))
        results = {}
        for dt in (torch.float64, dtype):
            ls = [x.detach().to(dt if i < 3 else
                                (torch.float64 if dt == torch.float64
                                 else torch.float32)).requires_grad_()
                  for i, x in enumerate(leaves)]
            o, f = parallel_gla(*ls)
            gs = torch.autograd.grad((o, f), ls,
                                     (dout.to(o.dtype), dfinal.to(f.dtype)))
            results[dt] = (o.detach(), f.detach(), gs)
        ref, plain = results[torch.float64], results[dtype]
        check_close(self, "out", out, ref[0], plain[0])
        check_close(self, "final state", final, ref[1], plain[1])
        for name, x, r, p in zip(("dq", "dk", "dv", "ddecay", "dinitial"),
                                 got, ref[2], plain[2]):
            check_close(self, name, x, r, p)

    def test_forward_backward_f16(self):
        self.check_dtype(torch.float16)

    def test_forward_backward_bf16(self):
        self.check_dtype(torch.bfloat16)

    def packed_inputs(self, dtype):
        torch.manual_seed(2)
        n = sum(LENGTHS)
        q, k, v = (torch.randn(n, H, D, device="cuda").to(dtype)
                   .requires_grad_() for _ in range(3))
        g = (-torch.rand(1, H, n, device="cuda") * 0.1).requires_grad_()
        s0 = (torch.randn(len(LENGTHS), H, D, D, device="cuda") * 0.1
              ).requires_grad_()
        cu = torch.tensor([0] + LENGTHS, device="cuda").cumsum(0)
        return q, k, v, g, s0, cu.to(torch.int32)

    def check_packed(self, dtype):
        self._dtype = dtype
        q, k, v, g, s0, cu = self.packed_inputs(dtype)
        out, final = attnc.torch.linear_attention(
            q, k, v, "simple_gla", decay=g, initial_state=s0, cu_seqlens=cu,
            return_final_state=True)
        self.assertEqual(tuple(out.shape), tuple(v.shape))
        self.assertEqual(tuple(final.shape), (len(LENGTHS), H, D, D))
        dout, dfinal = torch.randn_like(out), torch.randn_like(final)
        leaves = (q, k, v, g, s0)
        got = torch.autograd.grad((out, final), leaves, (dout, dfinal))
        # int64 offsets (flash-linear-attention's) give the same bits.
        out64, final64 = attnc.torch.linear_attention(
            q, k, v, "simple_gla", decay=g, initial_state=s0,
            cu_seqlens=cu.to(torch.int64), return_final_state=True)
        got64 = torch.autograd.grad((out64, final64), leaves, (dout, dfinal))
        torch.testing.assert_close(out64, out, rtol=0, atol=0)
        torch.testing.assert_close(final64, final, rtol=0, atol=0)
        for x, y in zip(got64, got):
            torch.testing.assert_close(x, y, rtol=0, atol=0)
        results = {}
        for dt in (torch.float64, dtype):
            ls = [x.detach().to(dt if i < 3 else
                                (torch.float64 if dt == torch.float64
                                 else torch.float32)).requires_grad_()
                  for i, x in enumerate(leaves)]
            o, f = packed_gla(*ls, LENGTHS)
            gs = torch.autograd.grad((o, f), ls,
                                     (dout.to(o.dtype), dfinal.to(f.dtype)))
            results[dt] = (o.detach(), f.detach(), gs)
        ref, plain = results[torch.float64], results[dtype]
        check_close(self, "packed out", out, ref[0], plain[0])
        check_close(self, "packed final states", final, ref[1], plain[1])
        for name, x, r, p in zip(("dq", "dk", "dv", "ddecay", "dinitial"),
                                 got, ref[2], plain[2]):
            check_close(self, "packed " + name, x, r, p)
        # An empty sequence passes its initial state and its gradient.
        torch.testing.assert_close(final[0], s0[0].detach(), rtol=0, atol=0)
        torch.testing.assert_close(got[4][5], dfinal[5], rtol=0, atol=0)

    def test_packed_f16(self):
        self.check_packed(torch.float16)

    def test_packed_bf16(self):
        self.check_packed(torch.bfloat16)

    def test_packed_compile_fullgraph_matches_eager(self):
        self._dtype = torch.float16
        q, k, v, g, s0, cu = self.packed_inputs(torch.float16)

        def f(q, k, v, g, s0, cu):
            out, final = attnc.torch.linear_attention(
                q, k, v, "simple_gla", decay=g, initial_state=s0,
                cu_seqlens=cu, return_final_state=True)
            return out * 2.0, final

        eager = f(q, k, v, g, s0, cu)
        compiled = torch.compile(f, fullgraph=True)(q, k, v, g, s0, cu)
        for x, y in zip(compiled, eager):
            torch.testing.assert_close(x, y, rtol=0, atol=0)
        ge = torch.autograd.grad(eager[0].sum() + eager[1].sum(), (q, s0))
        gc = torch.autograd.grad(compiled[0].sum() + compiled[1].sum(),
                                 (q, s0))
        for x, y in zip(gc, ge):
            torch.testing.assert_close(x, y, rtol=0, atol=0)

    def test_compile_fullgraph_matches_eager(self):
        self._dtype = torch.float16
        q, k, v, g, _ = self.inputs(torch.float16)

        def f(q, k, v, g):
            return attnc.torch.linear_attention(q, k, v, "simple_gla",
                                                decay=g) * 2.0

        eager = f(q, k, v, g)
        compiled = torch.compile(f, fullgraph=True)(q, k, v, g)
        torch.testing.assert_close(compiled, eager, rtol=0, atol=0)
        compiled.sum().backward()  # the backward op under AOT autograd
        self.assertIsNotNone(q.grad)
        self.assertGreater(q.grad.abs().max().item(), 0.0)

    def test_fake_shapes(self):
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode():
            q = torch.empty(B, T, H, D, device="cuda", dtype=torch.float16)
            g = torch.empty(B, H, T, device="cuda")
            out, final = attnc.torch.linear_attention(
                q, q, q, "simple_gla", decay=g, return_final_state=True)
            self.assertEqual(tuple(out.shape), (B, T, H, D))
            self.assertEqual(tuple(final.shape), (B, H, D, D))
            cu = torch.empty(4, device="cuda", dtype=torch.int32)
            out, final = attnc.torch.linear_attention(
                q[0], q[0], q[0], "simple_gla", decay=g[:1], cu_seqlens=cu,
                return_final_state=True)
            self.assertEqual(tuple(out.shape), (T, H, D))
            self.assertEqual(tuple(final.shape), (3, H, D, D))

    def test_bad_layout_is_refused_by_name(self):
        q = torch.empty(1, 8, 1, D, device="cuda", dtype=torch.float16)
        with self.assertRaisesRegex(Exception, "argument 'layout'"):
            attnc.torch.linear_attention(q, q, q, "simple_gla", layout="x")


if __name__ == "__main__":
    unittest.main()
