"""attnc.torch on a device other than the current one: a call runs on its
tensors' device (made current for the call, one Attention object per
device), forward and backward against fp64 references, under
torch.compile too; tensors on two devices, or on the CPU, are refused by
name; a raw attnc.Attention refuses tensors that are not on the current
device. The cuda:1 tests need two GPUs and skip otherwise.

Run (GPU machine): PYTHONPATH=python:tests/python/gpu
ATTNC_LIBRARY=.../libattnc_c.so python -m pytest
tests/python/gpu/test_torch_devices.py"""

import unittest

from gpu_support import (HAVE_GPU, check_close, doosum_only_input_grads,
                         needs_gpu, reference, torch)

if HAVE_GPU:
    import attnc
    import attnc.torch

TWO = HAVE_GPU and torch.cuda.device_count() > 1
needs_two = unittest.skipUnless(TWO, "needs two CUDA devices")

B, H, S, D = 2, 4, 384, 64


def qkv(device, dtype, requires_grad=False, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return [torch.randn(B, H, S, D, generator=g).to(device=device,
                                                    dtype=dtype)
            .requires_grad_(requires_grad) for _ in range(3)]


@needs_gpu
class AnyDevice(unittest.TestCase):
    def test_a_cpu_tensor_is_named(self):
        q, k, v = qkv("cuda", torch.float16)
        with self.assertRaises(attnc.InvalidArgument) as caught:
            attnc.torch.attention(q, k.cpu(), v, "mha")
        self.assertIn("argument 'k': a tensor on cpu", str(caught.exception))


    def test_linear_cpu_tensor_is_named(self):
        q, k, v = (torch.randn(1, 64, 2, 64, device="cuda",
                               dtype=torch.float16) for _ in range(3))
        decay = torch.zeros(1, 2, 64)
        with self.assertRaises(attnc.InvalidArgument) as caught:
            attnc.torch.linear_attention(q, k, v, "simple_gla", decay=decay)
        self.assertIn("argument 'decay': a tensor on cpu",
                      str(caught.exception))


@needs_two
class SecondDevice(unittest.TestCase):
    def setUp(self):
        torch.cuda.set_device(0)

    def test_forward_and_backward_on_cuda1(self):
        self._dtype = torch.bfloat16
        dev = torch.device("cuda:1")
        q, k, v = qkv(dev, torch.bfloat16, requires_grad=True)
        slopes = torch.tensor([0.25, 0.125, 0.0625, 0.03125], device=dev,
                              requires_grad=True)
        bias = torch.randn(H, device=dev).requires_grad_()
        inputs = {"slopes": slopes, "head_bias": bias}
        out = attnc.torch.attention(q, k, v, "alibi_learnable",
                                    inputs=inputs)
        self.assertEqual(out.device, dev)
        dout = torch.randn_like(out)
        got = torch.autograd.grad(out, [q, k, v, slopes, bias], dout)
        # The call left the caller's current device as it was.
        self.assertEqual(torch.cuda.current_device(), 0)
        refs = {}
        for dt in (torch.float64, torch.bfloat16):
            leaves = [t.detach().to(dt).requires_grad_() for t in (q, k, v)]
            pdt = torch.float64 if dt == torch.float64 else torch.float32
            ins = {n: t.detach().to(pdt).requires_grad_()
                   for n, t in inputs.items()}
            o = reference("alibi_learnable", *leaves, ins)
            refs[dt] = (o.detach(), torch.autograd.grad(
                o, leaves + [ins["slopes"], ins["head_bias"]], dout.to(dt)))
        (ref, ref_g), (plain, plain_g) = (refs[torch.float64],
                                          refs[torch.bfloat16])
        doosum = doosum_only_input_grads("alibi_learnable", q, k, v, inputs,
                                         dout, torch.bfloat16,
                                         ["slopes", "head_bias"])
        check_close(self, "cuda:1 out", out.detach(), ref, plain)
        for label, g, r, p, pd in zip(
                ("dq", "dk", "dv", "dslopes", "dhead_bias"), got, ref_g,
                plain_g, (None, None, None) + tuple(doosum)):
            self.assertEqual(g.device, dev, label)
            check_close(self, f"cuda:1 {label}", g, r, p, pd)

    def test_both_devices_give_the_same_bits(self):
        # One object per device; the same kernel on two cards of one kind.
        outs = []
        for dev in ("cuda:0", "cuda:1"):
            q, k, v = qkv(dev, torch.float16, seed=5)
            outs.append(attnc.torch.attention(q, k, v, "mha").cpu())
        self.assertTrue(torch.equal(outs[0], outs[1]))
        devices = {key[5] for key in attnc.torch._attentions
                   if key[0] == "mha" and key[1] == torch.float16}
        self.assertTrue({0, 1} <= devices, devices)

    def test_compiled_on_cuda1(self):
        torch._dynamo.reset()
        q, k, v = qkv("cuda:1", torch.bfloat16, requires_grad=True, seed=2)

        def f(q, k, v, cap):
            return attnc.torch.attention(q, k, v, "softcap_learnable",
                                         inputs={"cap": cap})

        cap = torch.tensor(2.0, device="cuda:1", requires_grad=True)
        compiled = torch.compile(f, fullgraph=True)
        out = compiled(q, k, v, cap)
        grads = torch.autograd.grad(out.float().square().sum(),
                                    [q, k, v, cap])
        eager = f(q, k, v, cap)
        eager_grads = torch.autograd.grad(eager.float().square().sum(),
                                          [q, k, v, cap])
        self.assertTrue(torch.equal(out, eager))
        for a, b in zip(grads[:3], eager_grads[:3]):
            self.assertTrue(torch.equal(a, b))
        self.assertEqual(grads[3].device, torch.device("cuda:1"))
        self.assertEqual(torch.cuda.current_device(), 0)

    def test_linear_attention_on_cuda1(self):
        # simple_gla forward and backward on cuda:1 with cuda:0 current give
        # the bits of the same call on cuda:0 (one object per device).
        results = []
        for dev in ("cuda:0", "cuda:1"):
            g = torch.Generator(device="cpu").manual_seed(11)
            q, k, v = (torch.randn(2, 128, 4, 64, generator=g)
                       .to(device=dev, dtype=torch.bfloat16)
                       .requires_grad_() for _ in range(3))
            decay = (-torch.rand(2, 4, 128, generator=g) * 0.1).to(dev)
            out, final = attnc.torch.linear_attention(
                q, k, v, "simple_gla", decay=decay, return_final_state=True)
            self.assertEqual(out.device, torch.device(dev))
            grads = torch.autograd.grad(out.float().square().sum(),
                                        [q, k, v])
            self.assertEqual(torch.cuda.current_device(), 0)
            results.append([t.detach().cpu() for t in (out, final, *grads)])
        for label, a, b in zip(("out", "final", "dq", "dk", "dv"),
                               *results):
            self.assertTrue(torch.equal(a, b), label)
        from attnc import _torch_linear  # the per-device objects' cache
        devices = {key[5] for key in _torch_linear._linears
                   if key[0] == "simple_gla"}
        self.assertTrue({0, 1} <= devices, devices)

    def test_linear_tensors_on_two_devices_are_refused(self):
        q, k, v = (torch.randn(1, 64, 2, 64, device="cuda:1",
                               dtype=torch.float16) for _ in range(3))
        decay = torch.zeros(1, 2, 64, device="cuda:0")
        with self.assertRaises(attnc.InvalidArgument) as caught:
            attnc.torch.linear_attention(q, k, v, "simple_gla", decay=decay)
        self.assertIn("argument 'decay' is on cuda:0 and argument 'q' on "
                      "cuda:1", str(caught.exception))

    def test_tensors_on_two_devices_are_refused(self):
        q, _, v = qkv("cuda:0", torch.float16)
        _, k, _ = qkv("cuda:1", torch.float16)
        with self.assertRaises(attnc.InvalidArgument) as caught:
            attnc.torch.attention(q, k, v, "mha")
        self.assertIn("argument 'k' is on cuda:1 and argument 'q' on cuda:0",
                      str(caught.exception))

    def test_a_raw_object_needs_the_tensors_device_current(self):
        with torch.cuda.device(1):
            att = attnc.Attention(attnc.example("mha"), dtype="float16",
                                  head_dim=D, layout="bhsd")
        q, k, v = qkv("cuda:1", torch.float16, seed=7)
        out = torch.empty_like(q)
        lse = torch.empty(1, B, H, S, device="cuda:1")  # mha's finals
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward(q, k, v, out, lse)
        self.assertIn("the tensors are on cuda:1 and the current device is "
                      "cuda:0", str(caught.exception))
        with torch.cuda.device(1):
            att.forward(q, k, v, out, lse)
            torch.cuda.synchronize()
        self._dtype = torch.float16
        ref = reference("mha", q.double(), k.double(), v.double(), {})
        check_close(self, "raw cuda:1 out", out, ref,
                    reference("mha", q, k, v, {}))


if __name__ == "__main__":
    unittest.main()
