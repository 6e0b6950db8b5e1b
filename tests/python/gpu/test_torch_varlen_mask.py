"""attnc.torch beyond dense calls, on the device: packed variable-length
batches (cu_seqlens, ragged with an empty sequence and one of length 1,
GQA) forward and backward against per-sequence fp64 references, a decode
step (one query per sequence over caches of different lengths), and
under torch.compile; block masks (FlexAttention-style lists that drop blocks the
causal mask keeps) forward and backward against the reference of the mask
they describe, eager and compiled; the eager path's dispatch (it skips
torch.library, a mode sends it through the op) and the device rule.

Run as test_torch_ops.py (docs/python.md)."""

import unittest

from gpu_support import HAVE_GPU, check_close, needs_gpu, torch

if HAVE_GPU:
    import attnc
    import attnc.torch

H, HK, D = 4, 2, 64
LENS = [37, 1, 0, 200, 128]


def packed(lens, heads, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(sum(lens), heads, D, device="cuda", generator=g,
                       dtype=torch.float32).to(dtype).requires_grad_()


def cu_seqlens(lens):
    offsets = [0]
    for n in lens:
        offsets.append(offsets[-1] + n)
    return torch.tensor(offsets, dtype=torch.int32, device="cuda")


def per_sequence(q, k, v, lens, lens_k=None):
    """mha of each sequence of a packed batch, in q's dtype: causal with
    the queries aligned to the end of their keys (bottom-right, as
    docs/runtime.md says), GQA by repeating k and v's heads."""
    lens_k = lens if lens_k is None else lens_k
    outs, start, start_k = [], 0, 0
    for n, m in zip(lens, lens_k):
        if n:
            qq = q[start:start + n].transpose(0, 1)[None]
            kk, vv = (t[start_k:start_k + m].transpose(0, 1)[None]
                      .repeat_interleave(H // HK, dim=1) for t in (k, v))
            s = (qq @ kk.transpose(-1, -2)) * (1.0 / D ** 0.5)
            i = torch.arange(n, device=q.device)[:, None] + (m - n)
            keep = i >= torch.arange(m, device=q.device)[None, :]
            p = torch.softmax(s.masked_fill(~keep, float("-inf")), -1)
            outs.append((p.to(vv.dtype) @ vv)[0].transpose(0, 1))
        start, start_k = start + n, start_k + m
    return torch.cat(outs)


@needs_gpu
class Varlen(unittest.TestCase):
    def run_dtype(self, dtype):
        self._dtype = dtype
        q = packed(LENS, H, dtype, 1)
        k, v = packed(LENS, HK, dtype, 2), packed(LENS, HK, dtype, 3)
        cu = cu_seqlens(LENS)
        out, finals = attnc.torch.attention(
            q, k, v, "mha", cu_seqlens_q=cu, cu_seqlens_k=cu,
            max_seqlen_q=max(LENS), max_seqlen_k=max(LENS),
            return_finals=True)
        self.assertEqual(tuple(out.shape), tuple(q.shape))
        self.assertEqual(tuple(finals.shape), (1, H, sum(LENS)))
        dout = torch.randn_like(out)
        got = torch.autograd.grad(out, [q, k, v], dout)
        results = {}
        for dt in (torch.float64, dtype):
            leaves = [t.detach().to(dt).requires_grad_() for t in (q, k, v)]
            o = per_sequence(*leaves, LENS)
            results[dt] = (o, torch.autograd.grad(o, leaves, dout.to(dt)))
        ref, plain = results[torch.float64], results[dtype]
        check_close(self, "varlen out", out.detach(), ref[0].detach(),
                    plain[0].detach())
        for label, g, r, p in zip(("dq", "dk", "dv"), got, ref[1], plain[1]):
            check_close(self, f"varlen {label}", g, r, p)

    def test_f16(self):
        self.run_dtype(torch.float16)

    def test_decode_step_sees_every_cached_key(self):
        # One query per sequence over caches of different lengths: with
        # bottom-right alignment the causal mask keeps every key.
        self._dtype = torch.float16
        lens_q, lens_k = [1, 1, 1, 1], [37, 1, 700, 128]
        q = packed(lens_q, H, torch.float16, 7)
        k = packed(lens_k, HK, torch.float16, 8)
        v = packed(lens_k, HK, torch.float16, 9)
        out = attnc.torch.attention(
            q, k, v, "mha", cu_seqlens_q=cu_seqlens(lens_q),
            cu_seqlens_k=cu_seqlens(lens_k), max_seqlen_q=1,
            max_seqlen_k=max(lens_k))
        dout = torch.randn_like(out)
        got = torch.autograd.grad(out, [q, k, v], dout)
        results = {}
        for dt in (torch.float64, torch.float16):
            leaves = [t.detach().to(dt).requires_grad_() for t in (q, k, v)]
            o = per_sequence(*leaves, lens_q, lens_k)
            results[dt] = (o, torch.autograd.grad(o, leaves, dout.to(dt)))
        ref, plain = results[torch.float64], results[torch.float16]
        check_close(self, "decode out", out.detach(), ref[0].detach(),
                    plain[0].detach())
        for label, g, r, p in zip(("dq", "dk", "dv"), got, ref[1], plain[1]):
            check_close(self, f"decode {label}", g, r, p)

    def test_bf16(self):
        self.run_dtype(torch.bfloat16)

    def test_compiled_equals_eager_without_recompiling(self):
        from torch._dynamo.utils import counters
        torch._dynamo.reset()
        counters.clear()
        cu = cu_seqlens(LENS)

        def f(q, k, v):
            return attnc.torch.attention(
                q, k, v, "mha", cu_seqlens_q=cu, cu_seqlens_k=cu,
                max_seqlen_q=max(LENS), max_seqlen_k=max(LENS))

        cf = torch.compile(f, fullgraph=True)
        for seed in (4, 5):
            q = packed(LENS, H, torch.float16, seed)
            k = packed(LENS, HK, torch.float16, seed + 10)
            v = packed(LENS, HK, torch.float16, seed + 20)
            out = cf(q, k, v)
            eager = f(q, k, v)
            self.assertTrue(torch.equal(out, eager))
            dout = torch.randn_like(out)
            self.assertTrue(all(torch.equal(a, b) for a, b in zip(
                torch.autograd.grad(out, [q, k, v], dout),
                torch.autograd.grad(eager, [q, k, v], dout))))
        self.assertEqual(counters["stats"]["unique_graphs"], 1)


S, BLOCK = 256, 128
# Only the diagonal blocks, as partial blocks (the mask is applied in
# them): each query sees the causal keys of its own 128-block.
LISTS = dict(kv_num_blocks=[[[1, 1]]], kv_indices=[[[[0, 0], [1, 0]]]],
             block_q=BLOCK, block_kv=BLOCK)


def block_diagonal(q, k, v):
    """The reference of LISTS on the causal mask (bhsd, q's dtype)."""
    s = (q @ k.transpose(-1, -2)) * (1.0 / D ** 0.5)
    i = torch.arange(S, device=q.device)
    keep = (i[:, None] >= i[None, :]) & (i[:, None] // BLOCK
                                         == i[None, :] // BLOCK)
    p = torch.softmax(s.masked_fill(~keep, float("-inf")), -1)
    return p.to(v.dtype) @ v


@needs_gpu
class BlockMasks(unittest.TestCase):
    def tensors(self, seed):
        torch.manual_seed(seed)
        return [torch.randn(2, H, S, D, device="cuda").half()
                .requires_grad_() for _ in range(3)]

    def test_lists_decide_the_blocks_forward_and_backward(self):
        self._dtype = torch.float16
        q, k, v = self.tensors(0)
        mask = attnc.torch.create_block_mask("mha", q, k, lists=LISTS)
        before = attnc.classify_launches()
        out = attnc.torch.attention(q, k, v, "mha", block_mask=mask)
        dout = torch.randn_like(out)
        got = torch.autograd.grad(out, [q, k, v], dout)
        torch.cuda.synchronize()
        self.assertEqual(attnc.classify_launches(), before)
        results = {}
        for dt in (torch.float64, torch.float16):
            leaves = [t.detach().to(dt).requires_grad_() for t in (q, k, v)]
            o = block_diagonal(*leaves)
            results[dt] = (o, torch.autograd.grad(o, leaves, dout.to(dt)))
        ref, plain = results[torch.float64], results[torch.float16]
        check_close(self, "masked out", out.detach(), ref[0].detach(),
                    plain[0].detach())
        for label, g, r, p in zip(("dq", "dk", "dv"), got, ref[1], plain[1]):
            check_close(self, f"masked {label}", g, r, p)
        # The lists matter: the causal result differs.
        plain_causal = attnc.torch.attention(q, k, v, "mha")
        self.assertFalse(torch.equal(plain_causal, out))

    def test_a_document_mask_made_once_serves_the_calls(self):
        q, k, v = self.tensors(5)
        ids = torch.sort(torch.randint(0, 3, (2, S), device="cuda"))[0]
        ins = {"doc_q": ids.int(), "doc_k": ids.int()}
        before = attnc.classify_launches()
        mask = attnc.torch.create_block_mask("mha_document_ids", q, k,
                                             inputs=ins)
        torch.cuda.synchronize()
        made = attnc.classify_launches()
        self.assertGreater(made, before)
        dout = torch.randn_like(q)
        out = attnc.torch.attention(q, k, v, "mha_document_ids", inputs=ins,
                                    block_mask=mask)
        got = torch.autograd.grad(out, [q, k, v], dout)
        torch.cuda.synchronize()
        self.assertEqual(attnc.classify_launches(), made)
        # The calls that classify for themselves give the same bits.
        ref = attnc.torch.attention(q, k, v, "mha_document_ids", inputs=ins)
        ref_grads = torch.autograd.grad(ref, [q, k, v], dout)
        self.assertTrue(torch.equal(out, ref))
        for a, b in zip(got, ref_grads):
            self.assertTrue(torch.equal(a, b))

    def test_compiled_with_a_mask_equals_eager(self):
        from torch._dynamo.utils import counters
        torch._dynamo.reset()
        counters.clear()
        q, k, v = self.tensors(1)
        mask = attnc.torch.create_block_mask("mha", q, k, lists=LISTS)

        def f(q, k, v, mask):
            return attnc.torch.attention(q, k, v, "mha", block_mask=mask)

        cf = torch.compile(f, fullgraph=True)
        for seed in (2, 3):
            q, k, v = self.tensors(seed)
            out = cf(q, k, v, mask)
            eager = f(q, k, v, mask)
            self.assertTrue(torch.equal(out, eager))
            dout = torch.randn_like(out)
            self.assertTrue(all(torch.equal(a, b) for a, b in zip(
                torch.autograd.grad(out, [q, k, v], dout),
                torch.autograd.grad(eager, [q, k, v], dout))))
        self.assertEqual(counters["stats"]["unique_graphs"], 1)

    def test_a_forward_only_mask_refuses_gradients(self):
        q, k, v = self.tensors(4)
        mask = attnc.torch.create_block_mask("mha", q, k, lists=LISTS,
                                             for_backward=False)
        with torch.no_grad():
            attnc.torch.attention(q, k, v, "mha", block_mask=mask)
        with self.assertRaises(attnc.InvalidArgument) as caught:
            attnc.torch.attention(q, k, v, "mha", block_mask=mask)
        self.assertIn("argument 'block_mask': made without "
                      "for_backward=True", str(caught.exception))


@needs_gpu
class EagerDispatch(unittest.TestCase):
    def test_eager_calls_skip_the_op_and_give_its_bits(self):
        q, k, v = (torch.randn(1, H, 128, D, device="cuda").half()
                   for _ in range(3))
        via_op = torch.ops.attnc.attention_fwd(q, k, v, "mha", "bhsd", "",
                                               [], None, None, 0, 0, 0)[0]
        op = attnc.torch._attention_fwd

        def refuse(*args, **kw):
            raise AssertionError("an eager call went through the op")

        attnc.torch._attention_fwd = refuse
        try:
            eager = attnc.torch.attention(q, k, v, "mha")
        finally:
            attnc.torch._attention_fwd = op
        self.assertTrue(torch.equal(eager, via_op))

    def test_a_dispatch_mode_sends_the_call_through_the_op(self):
        from torch.utils._python_dispatch import TorchDispatchMode
        seen = []

        class Record(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                seen.append(str(func))
                return func(*args, **(kwargs or {}))

        q, k, v = (torch.randn(1, H, 128, D, device="cuda").half()
                   for _ in range(3))
        with Record():
            attnc.torch.attention(q, k, v, "mha")
        self.assertTrue(any("attnc.attention_fwd" in s for s in seen), seen)


@needs_gpu
class Devices(unittest.TestCase):
    def test_an_explicit_device_and_a_side_stream(self):
        dev = torch.device("cuda", 0)
        q, k, v = (torch.randn(1, H, 128, D, device=dev).half()
                   for _ in range(3))
        expected = attnc.torch.attention(q, k, v, "mha")
        s = torch.cuda.Stream(device=dev)
        s.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(s):
            got = attnc.torch.attention(q, k, v, "mha")
        s.synchronize()
        self.assertTrue(torch.equal(got, expected))

    def test_a_cpu_tensor_among_cuda_ones_is_named(self):
        q, k, v = (torch.randn(1, H, 128, D, device="cuda").half()
                   for _ in range(3))
        with self.assertRaises(attnc.InvalidArgument) as caught:
            attnc.torch.attention(q, k.cpu(), v, "mha")
        self.assertIn("argument 'k': a tensor on cpu", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
