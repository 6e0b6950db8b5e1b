"""attnc._fastcall (capi/python/fastcall.c) on the device: the eager op's
call through the extension against an fp64 reference (mha, causal, and its
LSE) and bit for bit against the same call through ctypes (mha with and
without finals, sigmoid_attn with two scalar values), outputs poisoned
with NaN first; a call the runtime refuses raises its message.

Run (GPU machine): PYTHONPATH=python ATTNC_LIBRARY=.../libattnc_c.so
python -m unittest -v tests/python/gpu/test_fastcall.py (the extension
next to the library)."""

import unittest

from gpu_support import HAVE_GPU, check_close, needs_gpu, reference, torch

if HAVE_GPU:
    import attnc
    import attnc.torch
    from attnc import _lib, _torch_fast

B, H, S, D = 2, 4, 256, 64


def poisoned(fn):
    """fn() right after a NaN block of the output's size went back to the
    allocator, which the output's allocation then likely reuses."""
    junk = torch.full((B, H, S, D), float("nan"), device="cuda",
                      dtype=torch.float16)
    del junk
    return fn()


@needs_gpu
class ExtensionOnTheDevice(unittest.TestCase):
    def setUp(self):
        if _lib.forward_call is None:
            self.fail(f"attnc._fastcall did not load: {_lib.fastcall_missing}")
        torch.manual_seed(0)
        self.q, self.k, self.v = (
            torch.randn(B, H, S, D, device="cuda", dtype=torch.float16)
            for _ in range(3))

    def tearDown(self):
        _torch_fast._forward_call = _lib.forward_call

    def both(self, fn):
        """fn()'s third call (a plan's repeat) through the extension, then
        through ctypes."""
        _torch_fast._forward_call = _lib.forward_call
        ext = [poisoned(fn) for _ in range(3)][-1]
        _torch_fast._forward_call = None
        plain = [poisoned(fn) for _ in range(3)][-1]
        _torch_fast._forward_call = _lib.forward_call
        torch.cuda.synchronize()
        return ext, plain

    def test_mha_against_fp64_and_ctypes(self):
        q, k, v = self.q, self.k, self.v
        out, plain = self.both(lambda: attnc.torch.attention(q, k, v, "mha"))
        self.assertTrue(torch.equal(out, plain))
        causal = torch.ones(S, S, device="cuda", dtype=torch.bool).tril()
        scores = (q.double() @ k.double().transpose(-1, -2)
                  / D ** 0.5).masked_fill(~causal, float("-inf"))
        ref = reference("mha", q.double(), k.double(), v.double(), {})
        # Against the plain computation's error in f16: the project's rule
        # (gpu_support.check_close).
        self._dtype = torch.float16
        self.assertTrue(torch.isfinite(out).all())
        check_close(self, "mha out", out, ref, reference("mha", q, k, v, {}))
        (out_f, finals), (plain_out, plain_finals) = self.both(
            lambda: attnc.torch.attention(q, k, v, "mha",
                                          return_finals=True))
        self.assertTrue(torch.equal(out_f, plain_out))
        self.assertTrue(torch.equal(finals, plain_finals))
        # As test_torch_ops.test_finals_are_the_lse.
        self.assertLess((finals[0].double() - torch.logsumexp(scores, -1))
                        .abs().max().item(), 1e-2)

    def test_scalar_inputs_as_ctypes(self):
        q, k, v = self.q, self.k, self.v
        for bias in (-1.0, 0.5):
            out, plain = self.both(lambda: attnc.torch.attention(
                q, k, v, "sigmoid_attn", inputs={"softmax_bias": bias}))
            self.assertTrue(torch.isfinite(out).all())
            self.assertTrue(torch.equal(out, plain), bias)

    def check_mha(self, what, out, q, k, v):
        self._dtype = torch.float16
        self.assertTrue(torch.isfinite(out).all(), what)
        check_close(self, what, out, reference("mha", q.double(), k.double(),
                                               v.double(), {}),
                    reference("mha", q, k, v, {}))

    def test_a_changed_layout_or_dtype_after_a_cached_call(self):
        """A call whose k or v differs in strides or dtype from a cached
        plan's is packed anew: other strides give the right result, a
        dtype or head-dim stride the runtime refuses raises its message;
        the cached shape still runs after them."""
        q, k, v = self.q, self.k, self.v
        first = [poisoned(lambda: attnc.torch.attention(q, k, v, "mha"))
                 for _ in range(2)][-1]
        # The same values in bshd storage, seen as bhsd: other strides.
        ks, vs = (t.transpose(1, 2).contiguous().transpose(1, 2)
                  for t in (k, v))
        self.assertNotEqual(ks.stride(), k.stride())
        out = [poisoned(lambda: attnc.torch.attention(q, ks, vs, "mha"))
               for _ in range(2)][-1]
        torch.cuda.synchronize()
        self.check_mha("other strides", out, q, k, v)
        with self.assertRaises(attnc.UserError) as caught:
            attnc.torch.attention(q, k.to(torch.bfloat16), v, "mha")
        self.assertIn("k: expected dtype f16, got bf16",
                      str(caught.exception))
        wide = torch.randn(B, H, S, 2 * D, device="cuda",
                           dtype=torch.float16)
        with self.assertRaises(attnc.UserError) as caught:
            attnc.torch.attention(q, k, wide[..., ::2], "mha")
        self.assertIn("v: the head_dim stride must be 1, got 2",
                      str(caught.exception))
        again = poisoned(lambda: attnc.torch.attention(q, k, v, "mha"))
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(again, first))

    def test_raw_forward_through_both_calls(self):
        """attnc.Attention.forward's one-pointer call (the extension, then
        ctypes) against fp64, bit for bit between the two; a changed
        finals stride after them raises."""
        q, k, v = self.q, self.k, self.v
        att = attnc.Attention(attnc.example("mha"), head_dim=D,
                              layout="bhsd")
        results = []
        for way in (_lib.forward_call, None):
            saved = _lib.forward_call
            _lib.forward_call = way
            try:
                for _ in range(3):
                    out = torch.full_like(q, float("nan"))
                    finals = torch.full((1, B, H, S), float("nan"),
                                        device="cuda")
                    att.forward(q, k, v, out, finals)
            finally:
                _lib.forward_call = saved
            torch.cuda.synchronize()
            results.append((out, finals))
        (out, finals), (plain_out, plain_finals) = results
        self.check_mha("Attention.forward", out, q, k, v)
        self.assertTrue(torch.equal(out, plain_out))
        self.assertTrue(torch.equal(finals, plain_finals))
        strided = torch.empty(1, B, H, 2 * S, device="cuda")[..., ::2]
        with self.assertRaises(attnc.UserError) as caught:
            att.forward(q, k, v, out, strided)
        self.assertIn("finals", str(caught.exception))

    def test_a_refused_call_raises(self):
        with self.assertRaises(attnc.UserError) as caught:
            attnc.torch.attention(self.q, self.k[..., :32].contiguous(),
                                  self.v, "mha")
        self.assertIn("head_dim", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
