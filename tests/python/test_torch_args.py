"""attnc.torch's torch-free parts on the CPU: its argument checks (packed
batches, block masks), the device rule of a call's tensors (with fake
tensors that report a device), the block-mask ids its op passes, and the
patched packing of repeated calls (against a fresh packing)."""

import ctypes
import gc
import sys
import types
import unittest

import attnc
from attnc import _block_mask, _fastpack, _tensors, _torch_args

WHERE = "attnc.torch.attention"


class Device:
    def __init__(self, index):
        self.index = index

    def __str__(self):
        return "cpu" if self.index < 0 else f"cuda:{self.index}"


class FakeTensor:
    """What call_device and pack_torch read of a torch tensor: its device,
    dtype, shape, strides and data pointer; viewed through
    __cuda_array_interface__ on a cache miss."""

    def __init__(self, shape, device=0, data=1 << 20, typestr="<f2"):
        self.shape = tuple(shape)
        self.dtype = typestr
        self._device = device
        self._data = data
        self.device = Device(device)
        self.__cuda_array_interface__ = {
            "shape": self.shape, "typestr": typestr, "data": (data, False),
            "strides": None, "version": 3}

    def get_device(self):
        return self._device

    def stride(self):
        s, strides = 1, []
        for n in reversed(self.shape):
            strides.append(s)
            s *= n
        return tuple(reversed(strides))

    def data_ptr(self):
        return self._data


class CheckCall(unittest.TestCase):
    def check(self, message, **kw):
        args = dict(layout=None, cu_seqlens_q=None, cu_seqlens_k=None,
                    max_seqlen_q=None, max_seqlen_k=None, block_mask=None)
        args.update(kw)
        with self.assertRaises(attnc.InvalidArgument) as caught:
            _torch_args.check_call(WHERE, **args)
        self.assertIn(message, str(caught.exception))
        self.assertTrue(str(caught.exception).startswith(WHERE))

    def test_default_layouts(self):
        none = dict(cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None,
                    max_seqlen_k=None, block_mask=None)
        self.assertEqual(_torch_args.check_call(WHERE, None, **none), "bhsd")
        self.assertEqual(_torch_args.check_call(WHERE, "bshd", **none),
                         "bshd")
        cu = FakeTensor((3,), typestr="<i4")
        self.assertEqual(_torch_args.check_call(
            WHERE, None, cu, cu, 5, 7, None), "thd")

    def test_bad_layout(self):
        self.check("argument 'layout': 'sbhd' is not 'bhsd', 'bshd' or "
                   "'thd'", layout="sbhd")

    def test_packed_batch_arguments(self):
        cu = FakeTensor((3,), typestr="<i4")
        self.check("argument 'cu_seqlens_k': None; a packed batch needs "
                   "both", cu_seqlens_q=cu, max_seqlen_q=4, max_seqlen_k=4)
        self.check("argument 'cu_seqlens_q': None; a packed batch needs "
                   "both", cu_seqlens_k=cu, max_seqlen_q=4, max_seqlen_k=4)
        self.check("argument 'layout': 'bhsd' with cu_seqlens_q",
                   layout="bhsd", cu_seqlens_q=cu, cu_seqlens_k=cu,
                   max_seqlen_q=4, max_seqlen_k=4)
        self.check("argument 'max_seqlen_q': None; a packed batch",
                   cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_k=4)
        self.check("argument 'max_seqlen_k': 4.0; a packed batch",
                   cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=4,
                   max_seqlen_k=4.0)
        self.check("argument 'max_seqlen_k': True;", cu_seqlens_q=cu,
                   cu_seqlens_k=cu, max_seqlen_q=4, max_seqlen_k=True)
        self.check("argument 'max_seqlen_q': -1 is negative",
                   cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=-1,
                   max_seqlen_k=4)
        self.check("argument 'cu_seqlens_q': None with layout 'thd'",
                   layout="thd")
        self.check("argument 'max_seqlen_k': given without cu_seqlens_q",
                   max_seqlen_k=8)

    def test_block_mask_arguments(self):
        self.check("argument 'block_mask': a str; expected an "
                   "attnc.BlockMask", block_mask="causal")
        mask = _causal_mask()
        cu = FakeTensor((3,), typestr="<i4")
        self.check("argument 'block_mask': given with cu_seqlens_q",
                   cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=4,
                   max_seqlen_k=4, block_mask=mask)

    def test_a_forward_only_mask_refuses_a_backward(self):
        mask = _causal_mask(for_backward=False)
        _torch_args.check_mask_for_backward(WHERE, mask, False)
        with self.assertRaises(attnc.InvalidArgument) as caught:
            _torch_args.check_mask_for_backward(WHERE, mask, True)
        self.assertIn("argument 'block_mask': made without "
                      "for_backward=True", str(caught.exception))
        _torch_args.check_mask_for_backward(WHERE, _causal_mask(), True)

    def test_input_values(self):
        _torch_args.check_input_value(WHERE, "cap", 3)
        _torch_args.check_input_value(WHERE, "cap", 3.5)
        for bad, kind in (("x", "str"), (True, "bool"), ([1.0], "list")):
            with self.assertRaises(attnc.InvalidArgument) as caught:
                _torch_args.check_input_value(WHERE, "cap", bad)
            self.assertIn(f"argument 'inputs['cap']': a {kind}; values are "
                          "numbers or tensors", str(caught.exception))


def _causal_mask(for_backward=True):
    """A BlockMask as attnc.torch sees one, without the device memory a
    real one copies its lists to (no GPU here): a handle-less object that
    registers its id as a made one does."""
    mask = attnc.BlockMask.__new__(attnc.BlockMask)
    mask._handle = None
    mask.shape = (1, 1, 256, 256)
    mask.for_backward = for_backward
    mask._track()
    return mask


class BlockMaskIds(unittest.TestCase):
    def test_ids_find_live_masks_only(self):
        self.assertIsNone(_block_mask.by_id(WHERE, 0))
        a, b = _causal_mask(), _causal_mask()
        self.assertNotEqual(a.torch_id, b.torch_id)
        self.assertIs(_block_mask.by_id(WHERE, a.torch_id), a)
        self.assertIs(_block_mask.by_id(WHERE, b.torch_id), b)
        ident = a.torch_id
        del a
        gc.collect()
        with self.assertRaises(attnc.InvalidArgument) as caught:
            _block_mask.by_id(WHERE, ident)
        self.assertIn(f"argument 'block_mask': the block mask of id {ident}"
                      " no longer exists", str(caught.exception))


class Devices(unittest.TestCase):
    def test_one_cuda_device(self):
        q, k = FakeTensor((2, 4)), FakeTensor((2, 4))
        self.assertEqual(_fastpack.call_device(WHERE, [("q", q), ("k", k),
                                                       ("finals", None)]),
                         0)

    def test_a_cpu_tensor_is_named(self):
        with self.assertRaises(attnc.InvalidArgument) as caught:
            _fastpack.call_device(WHERE, [("q", FakeTensor((2,))),
                                          ("v", FakeTensor((2,), -1))])
        self.assertIn("argument 'v': a tensor on cpu; attnc runs on CUDA",
                      str(caught.exception))

    def test_two_devices_are_named(self):
        with self.assertRaises(attnc.InvalidArgument) as caught:
            _fastpack.call_device(WHERE, [("q", FakeTensor((2,), 0)),
                                          ("k", FakeTensor((2,), 1))])
        self.assertIn("argument 'k' is on cuda:1 and argument 'q' on "
                      "cuda:0; a call's tensors must be on one device",
                      str(caught.exception))

    def test_any_cuda_device(self):
        # The runtime runs a call in the current device's context, and
        # attnc.torch makes the tensors' device current: any cuda:N is one.
        self.assertEqual(_fastpack.call_device(WHERE, [("q", FakeTensor(
            (2,), 3)), ("k", FakeTensor((2,), 3))]), 3)

    def test_the_current_device_must_be_the_tensors(self):
        _fastpack.check_current(WHERE, 1, 1)
        _fastpack.check_current(WHERE, -1, 0)  # a CPU tensor: named elsewhere
        with self.assertRaises(attnc.InvalidArgument) as caught:
            _fastpack.check_current(WHERE, 1, 0)
        self.assertIn(f"{WHERE}: the tensors are on cuda:1 and the current "
                      "device is cuda:0; attnc runs a call in the current "
                      "device's context: make cuda:1 current for the call "
                      "(with torch.cuda.device(1): ...)",
                      str(caught.exception))


class TorchTensor(FakeTensor):
    """A FakeTensor that the raw objects take for a CUDA torch tensor (the
    fake torch module's Tensor)."""

    is_cuda = True


class RawObjectsOnDevices(unittest.TestCase):
    """attnc.Attention's calls on torch tensors, with a stand-in torch
    module whose current device the test sets: refused before anything is
    packed or launched when the tensors are not on the current device."""

    def setUp(self):
        self.current = 0
        fake_c = types.SimpleNamespace(
            _cuda_getDevice=lambda: self.current,
            _cuda_getCurrentRawStream=lambda device: 0)
        self.saved = (sys.modules.get("torch"), _fastpack.current_device,
                      _fastpack.stream_of)
        sys.modules["torch"] = types.SimpleNamespace(Tensor=TorchTensor,
                                                     _C=fake_c)
        self.att = attnc.Attention(attnc.example("mha"), head_dim=64,
                                   layout="bhsd", arch="sm_80")

    def tearDown(self):
        torch, _fastpack.current_device, _fastpack.stream_of = self.saved
        if torch is None:
            del sys.modules["torch"]
        else:
            sys.modules["torch"] = torch

    def tensors(self, devices):
        return [TorchTensor((1, 2, 8, 64), d, data=(1 << 20) + 4096 * i)
                for i, d in enumerate(devices)]

    def test_tensors_off_the_current_device(self):
        q, k, v, out = self.tensors([1, 1, 1, 1])
        for call in (lambda: self.att.forward(q, k, v, out),
                     lambda: self.att.backward(q, k, v, out, out, None, q, k,
                                               v)):
            with self.assertRaises(attnc.InvalidArgument) as caught:
                call()
            message = str(caught.exception)
            self.assertIn("the tensors are on cuda:1 and the current device "
                          "is cuda:0", message)
            self.assertTrue(message.startswith("attnc.Attention."), message)

    def test_tensors_on_two_devices(self):
        self.current = 1
        q, k, v, out = self.tensors([1, 0, 1, 1])
        with self.assertRaises(attnc.InvalidArgument) as caught:
            self.att.forward(q, k, v, out)
        self.assertIn("attnc.Attention.forward: argument 'k' is on cuda:0 "
                      "and argument 'q' on cuda:1", str(caught.exception))


def _raw(p, size):
    return ctypes.string_at(p.base, size)


class FastPacking(unittest.TestCase):
    def test_a_repeated_call_patches_what_changed(self):
        att = attnc.Attention(attnc.example("sigmoid_attn"), head_dim=64,
                              arch="sm_80")
        name_at = att._name_at["softmax_bias"]
        names = ["q", "k", "v", "out"]
        grad = ("g", name_at)

        def call(data, bias):
            tensors = [FakeTensor((1, 2, 8, 64), data=data + 256 * i)
                       for i in range(4)]
            cap = FakeTensor((2,), data=data + 4096, typestr="<f4")
            inputs = [("softmax_bias", 0, bias, name_at),
                      ("per_head", 2, cap, name_at)]
            return tensors, inputs, [(grad[0], grad[1], cap)]

        t1, i1, g1 = call(1 << 20, -1.0)
        first = _fastpack.pack_torch(WHERE, names, t1, i1, g1)
        t2, i2, g2 = call(1 << 24, -2.5)
        second = _fastpack.pack_torch(WHERE, names, t2, i2, g2)
        self.assertIs(first, second)  # the same shape: one buffer, patched
        # What a fresh packing of the second call writes, but for the
        # shape and stride addresses (the buffers differ).
        views = [_tensors.view(t, WHERE, n) for n, t in zip(names, t2)]
        entries = [(name_at, 0, -2.5, 0, None),
                   (name_at, 2, 0.0, 0, _tensors.view(i2[1][2], WHERE, "c"))]
        named = [(name_at, _tensors.view(g2[0][2], WHERE, "g"))]
        fresh = _tensors.pack(views, entries, named)
        size = 4 * 32 + 2 * 56 + 40
        words = memoryview(_raw(second, size)).cast("Q")
        fresh_words = memoryview(ctypes.string_at(fresh[1], size)).cast("Q")
        # The shape and stride addresses: words 2, 3 of each attnc_tensor
        # (the four tensors at bytes 0..127, the second input's at 128 +
        # 56 + 24 = 208, the grad's at 248).
        pointers = {2, 3, 6, 7, 10, 11, 14, 15, 28, 29, 33, 34}
        differ = [i for i in range(size // 8)
                  if words[i] != fresh_words[i] and i not in pointers]
        self.assertEqual(differ, [], "words that patching got wrong")
        self.assertEqual(words[0], 1 << 24)
        self.assertAlmostEqual(
            memoryview(_raw(second, size)).cast("f")[(128 + 12) // 4], -2.5)

    def test_inputs_and_grads_as_items(self):
        sig = attnc.Attention(attnc.example("sigmoid_attn"), head_dim=64,
                              arch="sm_80")
        alibi = attnc.Attention(attnc.example("alibi_learnable"),
                                head_dim=64, arch="sm_80")
        t = FakeTensor((4,), typestr="<f4")
        at = sig._name_at["softmax_bias"]
        self.assertEqual(_fastpack.fast_inputs(sig, None, FakeTensor), ())
        self.assertEqual(
            _fastpack.fast_inputs(sig, {"softmax_bias": -1.5}, FakeTensor),
            [("softmax_bias", 0, -1.5, at)])
        self.assertEqual(
            _fastpack.fast_inputs(sig, {"softmax_bias": t}, FakeTensor),
            [("softmax_bias", 2, t, at)])
        # The generic path's checks take what the fast one cannot: an
        # undeclared name, a number for a per-head input, another object.
        self.assertIsNone(_fastpack.fast_inputs(sig, {"bias": 1.0},
                                                FakeTensor))
        self.assertIsNone(_fastpack.fast_inputs(alibi, {"slopes": 0.5},
                                                FakeTensor))
        self.assertIsNone(_fastpack.fast_inputs(sig, {"softmax_bias": "x"},
                                                FakeTensor))
        self.assertEqual(
            _fastpack.fast_grads(alibi, {"slopes": t}, FakeTensor),
            [("slopes", alibi._name_at["slopes"], t)])
        self.assertIsNone(_fastpack.fast_grads(alibi, {"x": t}, FakeTensor))
        prefix = attnc.Attention(attnc.example("mha_prefix_lm"), head_dim=64,
                                 arch="sm_80")
        self.assertEqual(   # an int32 scalar's kind, whatever the number
            _fastpack.fast_inputs(prefix, {"prefix_len": 64.0}, FakeTensor),
            [("prefix_len", 1, 64.0, prefix._name_at["prefix_len"])])

    def test_a_new_shape_is_packed_and_checked_anew(self):
        with self.assertRaises(attnc.InvalidArgument) as caught:
            _fastpack.pack_torch(WHERE, ["q", "k"], [
                FakeTensor((1, 2, 8, 64)), FakeTensor((1, 2, 9, 64), 1)])
        self.assertIn("argument 'k' is on cuda:1", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
