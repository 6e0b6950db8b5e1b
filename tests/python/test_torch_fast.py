"""attnc.torch's one-call eager forward (attnc/_torch_fast.py) on the CPU,
with a stand-in torch module: a repeat call of a shape reuses its plan and
writes exactly what a fresh packing of it would hold; a new shape is
checked anew (the generic path's messages); what the plan cannot take goes
back to the generic path; the C function checks its argument."""

import contextlib
import ctypes
import importlib
import os
import subprocess
import sys
import tempfile
import types
import unittest

import attnc
from attnc import _fastpack, _lib, _tensors

F16, F32 = "<f2", "<f4"


class Device:
    def __init__(self, index):
        self.index = index

    def __str__(self):
        return "cpu" if self.index < 0 else f"cuda:{self.index}"


class Tensor:
    """What the fast path reads of a torch tensor."""

    next_data = 1 << 20

    def __init__(self, shape, device=0, dtype=F16, value=None, strides=None):
        self.shape = tuple(shape)
        self._strides = strides
        self.dtype = dtype
        self._device = device
        self.device = Device(device)
        self.is_cuda = device >= 0
        self.requires_grad = False
        self._value = value
        self._data = Tensor.next_data
        Tensor.next_data += 1 << 16

    def get_device(self):
        return self._device

    def stride(self):
        if self._strides is not None:
            return self._strides
        s, strides = 1, []
        for n in reversed(self.shape):
            strides.append(s)
            s *= n
        return tuple(reversed(strides))

    def data_ptr(self):
        return self._data

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def item(self):
        return self._value

    def __float__(self):
        return float(self._value)

    def new_empty(self, shape, dtype=None):
        return Tensor(shape, self._device, dtype or self.dtype)


class StandInTorch:
    """Installs a stand-in torch module and imports attnc._torch_fast
    against it; the current device and stream are the test's."""

    def __init__(self):
        self.current, self.stream = 0, 0x5000
        self.capturing = False
        self.capture_checks = 0
        self.switched = []
        fake_c = types.SimpleNamespace(
            _cuda_getDevice=lambda: self.current,
            _cuda_getCurrentRawStream=lambda device: (
                self.stream and self.stream + device),
            _cuda_isCurrentStreamCapturing=self.is_capturing)

        @contextlib.contextmanager
        def device(index):
            saved, self.current = self.current, index
            self.switched.append(index)
            try:
                yield
            finally:
                self.current = saved

        cuda = types.SimpleNamespace(current_device=lambda: self.current,
                                     device=device)
        self.module = types.SimpleNamespace(
            Tensor=Tensor, float16=F16, bfloat16="bf16", float32=F32,
            int32="<i4", _C=fake_c, cuda=cuda,
            empty_like=lambda t: Tensor(t.shape, t._device, t.dtype),
            empty_strided=self.empty_strided)
        self.allocated = []

    def is_capturing(self):
        self.capture_checks += 1
        return self.capturing

    def empty_strided(self, shape, strides, dtype=None, device=None):
        """torch.empty_strided as the fast path calls it (every argument
        given), recorded."""
        t = Tensor(shape, device.index, dtype, strides=tuple(strides))
        self.allocated.append((tuple(shape), tuple(strides), dtype,
                               device.index))
        return t

    def __enter__(self):
        self.saved = sys.modules.get("torch")
        self.saved_current = _fastpack.current_device
        sys.modules["torch"] = self.module
        _fastpack.current_device = self.module._C._cuda_getDevice
        sys.modules.pop("attnc._torch_fast", None)
        self.fast = importlib.import_module("attnc._torch_fast")
        return self

    def __exit__(self, *exc):
        sys.modules.pop("attnc._torch_fast", None)
        _fastpack.current_device = self.saved_current
        if self.saved is None:
            del sys.modules["torch"]
        else:
            sys.modules["torch"] = self.saved


def _words(address, count):
    return list(memoryview(ctypes.string_at(address, 8 * count)).cast("Q"))


class FastForward(unittest.TestCase):
    def setUp(self):
        self.torch = StandInTorch().__enter__()
        self.fast = self.torch.fast
        self.calls = []
        self.fast._call = self.record
        self.fast._forward_call = None  # the ctypes call, recorded
        self.objects = {}
        self.resolved = []

    def tearDown(self):
        self.torch.__exit__()

    def record(self, address):
        """The C call, stubbed: what it would read."""
        words = _words(address, 10)
        tensors = {}
        for i, name in enumerate(("q", "k", "v", "out", "finals")):
            at = words[1 + i]
            tensors[name] = None if at == 0 else _words(at, 1)[0]
        self.calls.append((words, tensors))
        return 0

    def resolve(self, q, v, name):
        self.resolved.append(name)
        att = self.objects.get(name)
        if att is None:
            att = self.objects[name] = attnc.Attention(
                attnc.example(name), head_dim=q.shape[-1], layout="bhsd",
                arch="sm_80")
        return att

    def qkv(self, device=0, s=8):
        return [Tensor((1, 2, s, 64), device) for _ in range(3)]

    def test_a_repeat_call_reuses_its_plan(self):
        q, k, v = self.qkv()
        out, finals = self.fast.forward("sigmoid_attn", q, k, v,
                                        {"softmax_bias": -1.0}, False,
                                        self.resolve)
        self.assertIsNone(finals)
        self.assertEqual(out.shape, (1, 2, 8, 64))
        q2, k2, v2 = self.qkv()
        bias = Tensor((), -1, F32, value=-2.5)  # a 0-d CPU tensor: .item()
        out2, _ = self.fast.forward("sigmoid_attn", q2, k2, v2,
                                    {"softmax_bias": -1.5}, False,
                                    self.resolve)
        self.assertEqual(self.resolved, ["sigmoid_attn"])  # one plan
        (w1, t1), (w2, t2) = self.calls
        self.assertEqual(w1[0], self.objects["sigmoid_attn"]._handle)
        self.assertEqual(w1[:9], w2[:9])  # the same packed structs
        self.assertEqual(t2, {"q": q2.data_ptr(), "k": k2.data_ptr(),
                              "v": v2.data_ptr(), "out": out2.data_ptr(),
                              "finals": None})
        self.assertEqual(w2[7], 1)          # num_inputs
        self.assertEqual(w2[8], 0)          # no block mask
        self.assertEqual(w2[9], 0x5000)     # the current stream of cuda:0
        f32 = memoryview(ctypes.string_at(w2[6], 56)).cast("f")
        self.assertEqual(f32[3], -1.5)      # attnc_input.f32 at byte 12
        # A tensor's value for the scalar is a new key (another plan), its
        # value read on the host.
        self.fast.forward("sigmoid_attn", q2, k2, v2,
                          {"softmax_bias": bias}, False, self.resolve)
        f32 = memoryview(ctypes.string_at(self.calls[-1][0][6], 56)).cast("f")
        self.assertEqual(f32[3], -2.5)

    def test_the_plan_holds_a_fresh_packing(self):
        q, k, v = self.qkv()
        self.fast.forward("mha", q, k, v, None, True, self.resolve)
        q2, k2, v2 = self.qkv()
        out, finals = self.fast.forward("mha", q2, k2, v2, {}, True,
                                        self.resolve)
        self.assertEqual(finals.shape, (1, 1, 2, 8))
        self.assertEqual(finals.dtype, F32)
        words, tensors = self.calls[-1]
        self.assertEqual(tensors["finals"], finals.data_ptr())
        fresh = _tensors.pack([_tensors.view(t, "w", "t")
                               for t in (q2, k2, v2, out, finals)])
        for i in range(5):  # each attnc_tensor's data, dtype and ndim
            mine = _words(words[1 + i], 2)
            theirs = _words(fresh[1] + 32 * i, 2)
            self.assertEqual(mine, theirs)
            shape_at, strides_at = _words(words[1 + i] + 16, 2)
            fshape_at, fstrides_at = _words(fresh[1] + 32 * i + 16, 2)
            n = len((q2, k2, v2, out, finals)[i].shape)
            self.assertEqual(_words(shape_at, n), _words(fshape_at, n))
            self.assertEqual(_words(strides_at, n), _words(fstrides_at, n))

    def test_finals_are_passed_where_the_definition_has_them(self):
        # The runtime requires mha's LSE even when the caller does not
        # return it; sigmoid_attn has none.
        q, k, v = self.qkv()
        out, finals = self.fast.forward("mha", q, k, v, None, False,
                                        self.resolve)
        self.assertIsNone(finals)
        words, tensors = self.calls[-1]
        self.assertNotEqual(words[5], 0)
        self.assertNotIn(tensors["finals"], (None, 0, q.data_ptr(),
                                             out.data_ptr()))
        self.fast.forward("sigmoid_attn", q, k, v, {"softmax_bias": 0.0},
                          False, self.resolve)
        self.assertIsNone(self.calls[-1][1]["finals"])
        # Returned finals are the call's own, never the scratch buffer.
        _, returned = self.fast.forward("mha", q, k, v, None, True,
                                        self.resolve)
        self.assertEqual(self.calls[-1][1]["finals"], returned.data_ptr())
        self.assertNotEqual(returned.data_ptr(), tensors["finals"])

    def test_unreturned_finals_reuse_a_scratch_buffer_per_stream(self):
        q, k, v = self.qkv()
        self.fast.forward("mha", q, k, v, None, False, self.resolve)
        first = self.calls[-1][1]["finals"]
        q2, k2, v2 = self.qkv()
        self.fast.forward("mha", q2, k2, v2, None, False, self.resolve)
        self.assertEqual(self.calls[-1][1]["finals"], first)  # no new one
        self.torch.stream = 0x6000  # another stream: its own buffer
        self.fast.forward("mha", q, k, v, None, False, self.resolve)
        second = self.calls[-1][1]["finals"]
        self.assertNotIn(second, (first, 0))
        self.assertEqual(self.calls[-1][0][9], 0x6000)
        self.torch.stream = 0x5000
        self.fast.forward("mha", q, k, v, None, False, self.resolve)
        self.assertEqual(self.calls[-1][1]["finals"], first)

    def test_the_default_stream_is_never_asked_about_capture(self):
        # Raw handle 0 (the legacy default stream) cannot capture; another
        # stream's call with a scratch buffer asks on every call.
        q, k, v = self.qkv()
        self.torch.stream = 0
        for _ in range(3):
            self.fast.forward("mha", q, k, v, None, False, self.resolve)
        self.assertEqual(self.torch.capture_checks, 0)
        self.assertEqual(self.calls[-1][0][9], 0)
        self.assertEqual(len(set(c[1]["finals"] for c in self.calls)), 1)
        self.torch.stream = 0x5000
        for _ in range(3):
            self.fast.forward("mha", q, k, v, None, False, self.resolve)
        self.assertEqual(self.torch.capture_checks, 3)  # one a call

    def test_a_captured_call_allocates_its_finals(self):
        # A graph's kernels must not write into a plan's scratch buffer
        # (a dropped plan gives it back while the graph lives): each
        # captured call has finals of its own, and keeps none in the plan.
        q, k, v = self.qkv()
        self.fast.forward("mha", q, k, v, None, False, self.resolve)
        scratch = self.calls[-1][1]["finals"]
        self.torch.capturing = True
        seen = set()
        for _ in range(2):
            self.fast.forward("mha", q, k, v, None, False, self.resolve)
            seen.add(self.calls[-1][1]["finals"])
        self.assertEqual(len(seen), 2)
        self.assertNotIn(scratch, seen)
        self.torch.stream = 0x7000  # a capture's first call on its stream
        self.fast.forward("mha", q, k, v, None, False, self.resolve)
        captured = self.calls[-1][1]["finals"]
        self.torch.capturing = False
        self.fast.forward("mha", q, k, v, None, False, self.resolve)
        self.assertNotEqual(self.calls[-1][1]["finals"], captured)

    def test_a_new_shape_is_checked_anew(self):
        q, k, v = self.qkv()
        self.fast.forward("mha", q, k, v, None, False, self.resolve)
        k1 = Tensor((1, 2, 8, 64), 1)
        with self.assertRaises(attnc.InvalidArgument) as caught:
            self.fast.forward("mha", q, k1, v, None, False, self.resolve)
        self.assertIn("argument 'k' is on cuda:1 and argument 'q' on cuda:0",
                      str(caught.exception))
        self.assertEqual(len(self.calls), 1)  # nothing launched

    def test_a_changed_dtype_or_stride_after_a_cached_call_is_caught(self):
        """The plan is per dtype and strides: a call that changes either
        after a cached one is packed anew and refused by the runtime's
        checks (the real C function), never run with the cached words."""
        q, k, v = self.qkv()
        self.fast.forward("mha", q, k, v, None, False, self.resolve)
        self.fast.forward("mha", q, k, v, None, False, self.resolve)
        self.assertEqual(len(self.calls), 2)
        self.fast._call = self.torch.fast._lib.declare(
            "attnc_attention_forward_call", [ctypes.c_void_p])
        bf16 = Tensor((1, 2, 8, 64), 0, "bf16")
        with self.assertRaises(attnc.UserError) as caught:
            self.fast.forward("mha", q, bf16, v, None, False, self.resolve)
        self.assertIn("k: expected dtype f16, got bf16", str(caught.exception))
        strided = Tensor((1, 2, 8, 64), strides=(2048, 1024, 128, 2))
        with self.assertRaises(attnc.UserError) as caught:
            self.fast.forward("mha", q, k, strided, None, False,
                              self.resolve)
        self.assertIn("v: the head_dim stride must be 1, got 2",
                      str(caught.exception))
        # Each was a plan of its own; the cached one is still there.
        plans = self.fast._local.plans
        self.assertEqual(len(plans), 3)
        keys = [key for key in plans if key[2] == "bf16"]
        self.assertEqual(len(keys), 1)
        self.assertEqual(
            len([key for key in plans if key[12] == (2048, 1024, 128, 2)]),
            1)
        self.assertEqual(len(self.calls), 2)  # nothing else was recorded

    def test_a_repeat_call_allocates_outputs_as_packed(self):
        """A repeat call's out and returned finals have the shape, strides,
        dtype and device that its plan packed (torch.empty_strided)."""
        q, k, v = self.qkv(device=1)
        self.torch.current = 1
        self.fast.forward("mha", q, k, v, None, True, self.resolve)
        self.torch.allocated.clear()
        out, finals = self.fast.forward("mha", q, k, v, None, True,
                                        self.resolve)
        self.assertEqual(self.torch.allocated, [
            ((1, 2, 8, 64), (1024, 512, 64, 1), F16, 1),
            ((1, 1, 2, 8), (16, 16, 8, 1), F32, 1)])
        words, tensors = self.calls[-1]
        self.assertEqual((tensors["out"], tensors["finals"]),
                         (out.data_ptr(), finals.data_ptr()))
        fresh = _tensors.pack([_tensors.view(t, "w", "t")
                               for t in (q, k, v, out, finals)])
        for i in (3, 4):  # the packed strides are the outputs' own
            strides_at = _words(words[1 + i] + 24, 1)[0]
            fstrides_at = _words(fresh[1] + 32 * i + 24, 1)[0]
            self.assertEqual(_words(strides_at, 4), _words(fstrides_at, 4))

    def test_the_generic_path_takes_the_rest(self):
        q, k, v = self.qkv()
        cpu = Tensor((1, 2, 8, 64), -1)
        self.assertIsNone(self.fast.forward("mha", cpu, k, v, None, False,
                                            self.resolve))
        for inputs in ({"bias": 1.0}, {"softmax_bias": True},
                       {"softmax_bias": "x"},
                       {"softmax_bias": Tensor((2,), 0, F32)}):
            self.assertIsNone(self.fast.forward(
                "sigmoid_attn", q, k, v, inputs, False, self.resolve),
                inputs)
        self.assertIsNone(self.fast.forward(  # a number for a per-head input
            "alibi_learnable", q, k, v, {"slopes": 0.5, "head_bias": 0.0},
            False, self.resolve))
        self.assertEqual(self.calls, [])

    def test_another_device_is_made_current(self):
        q, k, v = self.qkv(device=1)
        self.fast.forward("mha", q, k, v, None, False, self.resolve)
        self.fast.forward("mha", q, k, v, None, False, self.resolve)
        self.assertEqual(self.torch.switched, [1, 1])
        self.assertEqual(self.calls[-1][0][9], 0x5001)  # cuda:1's stream
        self.assertEqual(self.torch.current, 0)

    def test_run_on_restores_the_device(self):
        def fail():
            self.assertEqual(self.torch.current, 2)
            raise attnc.InvalidArgument("in the call")

        with self.assertRaises(attnc.InvalidArgument):
            _fastpack.run_on(2, fail)
        self.assertEqual(self.torch.current, 0)
        self.assertEqual(_fastpack.run_on(0, lambda x: x + 1, 1), 2)
        self.assertEqual(_fastpack.run_on(-1, lambda: "cpu"), "cpu")
        self.assertEqual(self.torch.switched, [2])  # only where it differs

    def test_a_replaced_definition_drops_its_plans(self):
        q, k, v = self.qkv()
        self.fast.forward("mha", q, k, v, None, False, self.resolve)
        self.fast.forward("sigmoid_attn", q, k, v, {"softmax_bias": 0.0},
                          False, self.resolve)
        self.fast.forget("mha")
        self.fast.forward("mha", q, k, v, None, False, self.resolve)
        self.fast.forward("sigmoid_attn", q, k, v, {"softmax_bias": 0.0},
                          False, self.resolve)
        self.assertEqual(self.resolved, ["mha", "sigmoid_attn", "mha"])

    def test_a_runtime_error_is_raised(self):
        """The real C function: the runtime's check of the packed call."""
        self.fast._call = self.torch.fast._lib.declare(
            "attnc_attention_forward_call", [ctypes.c_void_p])
        q, v = Tensor((1, 2, 8, 64)), Tensor((1, 2, 8, 64))
        k = Tensor((1, 2, 8, 32))
        with self.assertRaises(attnc.UserError) as caught:
            self.fast.forward("mha", q, k, v, None, False, self.resolve)
        self.assertIn("k: head_dim (last dimension) must be 64, got 32",
                      str(caught.exception))


class PackedBackward(unittest.TestCase):
    """The autograd path's backward, packed once per forward plan."""

    setUp = FastForward.setUp
    tearDown = FastForward.tearDown
    record = FastForward.record
    resolve = FastForward.resolve
    qkv = FastForward.qkv

    def record_backward(self, *args):
        self.backward_calls.append(args)
        return 0

    def run_pair(self, q, k, v, dout_strides=None):
        out, finals, plan = self.fast.forward_with_plan("mha", q, k, v,
                                                        self.resolve)
        dout = Tensor(out.shape, q.get_device())
        if dout_strides is not None:
            dout.stride = lambda: dout_strides
        grads = self.fast.backward(plan, q, k, v, out, dout, finals)
        return out, finals, dout, grads, plan

    def test_the_backward_holds_a_fresh_packing(self):
        self.backward_calls = []
        self.fast._backward = self.record_backward
        first = self.run_pair(*self.qkv())
        q, k, v = self.qkv()
        out, finals, dout, (dq, dk, dv), plan = self.run_pair(q, k, v)
        self.assertIs(plan, first[4])
        self.assertEqual(len(self.backward_calls), 2)
        args1, args2 = self.backward_calls
        self.assertEqual(args1[:10], args2[:10])  # one pack, patched
        self.assertEqual(args2[0], self.objects["mha"]._handle)
        self.assertEqual(args2[10:], (None, 0, None, 0, 0x5000))
        tensors = (q, k, v, out, dout, finals, dq, dk, dv)
        fresh = _tensors.pack([_tensors.view(t, "w", "t") for t in tensors])
        for i, t in enumerate(tensors):
            self.assertEqual(_words(args2[1 + i], 1)[0], t.data_ptr())
            self.assertEqual(_words(args2[1 + i], 2),
                             _words(fresh[1] + 32 * i, 2))
            shape_at, strides_at = _words(args2[1 + i] + 16, 2)
            fshape_at, fstrides_at = _words(fresh[1] + 32 * i + 16, 2)
            n = len(t.shape)
            self.assertEqual(_words(shape_at, n), _words(fshape_at, n))
            self.assertEqual(_words(strides_at, n), _words(fstrides_at, n))
        self.assertEqual(dq.shape, q.shape)
        # dout of other strides: a pack of its own.
        *_, plan3 = self.run_pair(q, k, v, dout_strides=(0, 0, 64, 1))
        self.assertIs(plan3, plan)
        args3 = self.backward_calls[-1]
        self.assertNotEqual(args3[5], args2[5])
        strides_at = _words(args3[5] + 24, 1)[0]
        self.assertEqual(_words(strides_at, 4), [0, 0, 64, 1])

    def test_another_device_is_made_current(self):
        self.backward_calls = []
        self.fast._backward = self.record_backward
        self.run_pair(*self.qkv(device=1))
        self.assertEqual(self.torch.switched, [1, 1])
        self.assertEqual(self.backward_calls[-1][-1], 0x5001)
        self.assertEqual(self.torch.current, 0)


class RawForward(unittest.TestCase):
    """attnc.Attention.forward on torch tensors: per packed call shape and
    object, one attnc_forward_call whose pointers, block mask and stream a
    call writes (through attnc._fastcall where it is there, else ctypes),
    with the real libattnc_c: a call its checks refuse (k's head dim) is
    read back."""

    def setUp(self):
        self.torch = StandInTorch().__enter__()
        self.att = attnc.Attention(attnc.example("mha"), head_dim=64,
                                   layout="bhsd", arch="sm_80")
        self.saved = _lib.forward_call

    def tearDown(self):
        _lib.forward_call = self.saved
        self.torch.__exit__()

    def refused(self, stream, finals=True):
        q, v, out = (Tensor((1, 2, 8, 64)) for _ in range(3))
        k = Tensor((1, 2, 8, 32))
        f = Tensor((1, 1, 2, 8), dtype=F32) if finals else None
        with self.assertRaises(attnc.UserError) as caught:
            self.att.forward(q, k, v, out, f, stream=stream)
        self.assertIn("k: head_dim (last dimension) must be 64, got 32",
                      str(caught.exception))
        tensors = (q, k, v, out, f)
        p = _fastpack.pack_torch("t", ("q", "k", "v", "out", "finals"),
                                 [t for t in tensors if t is not None])
        call, at = p.calls[self.att._handle]
        return tensors, _words(at, 10), p

    def test_a_repeat_call_writes_its_pointers_and_stream(self):
        ways = [None] if self.saved is None else [self.saved, None]
        for way in ways:  # the extension, then ctypes
            _lib.forward_call = way
            for finals in (True, False):
                self.refused(0x100, finals)
                tensors, words, p = self.refused(0x200 + finals, finals)
                self.assertEqual(words[0], self.att._handle)
                self.assertEqual(words[1], p.base)
                self.assertEqual(words[5], p.base + 128 if finals else 0)
                self.assertEqual(words[7:], [0, 0, 0x200 + finals])
                for i, t in enumerate(tensors):
                    if t is not None:
                        self.assertEqual(_words(words[1 + i], 1)[0],
                                         t.data_ptr(), (way, i))

    def test_a_changed_stride_after_a_cached_call_is_caught(self):
        self.refused(0x100)
        q, k, v, out = (Tensor((1, 2, 8, 64)) for _ in range(4))
        f = Tensor((1, 1, 2, 8), dtype=F32, strides=(16, 16, 8, 2))
        with self.assertRaises(attnc.UserError) as caught:
            self.att.forward(q, k, v, out, f, stream=0x100)
        self.assertIn("finals: must be contiguous", str(caught.exception))


class CallArgument(unittest.TestCase):
    def test_a_null_call_is_refused(self):
        call = _lib.declare("attnc_attention_forward_call",
                            [ctypes.c_void_p])
        with self.assertRaises(attnc.InvalidArgument) as caught:
            _lib.check(call(None))
        self.assertEqual(str(caught.exception),
                         "attnc_attention_forward_call: argument 'call' is "
                         "NULL")


# The build sets ATTNC_EXPECT_FASTCALL=1 where it built attnc._fastcall
# (tests/python/CMakeLists.txt): the extension's tests then fail rather
# than skip when it does not load (unless ATTNC_FASTCALL=0 switches it off).
_EXPECTED = (os.environ.get("ATTNC_EXPECT_FASTCALL") == "1"
             and os.environ.get("ATTNC_FASTCALL", "1") != "0")


class ExtensionCall(unittest.TestCase):
    """attnc._fastcall (capi/python/fastcall.c) with the real libattnc_c:
    the words it writes and the statuses of the runtime's checks, which
    need no GPU."""

    def setUp(self):
        if _lib.forward_call is None:
            if _EXPECTED:
                self.fail("attnc._fastcall was built but did not load: "
                          + str(_lib.fastcall_missing))
            self.skipTest(str(_lib.fastcall_missing))
        FastForward.setUp(self)
        self.fast._forward_call = _lib.forward_call
        self.fast._call = self.unexpected

    tearDown = FastForward.tearDown
    record = FastForward.record
    resolve = FastForward.resolve
    qkv = FastForward.qkv

    def unexpected(self, address):
        raise AssertionError("the ctypes call ran beside the extension")

    def test_the_import_is_the_one_next_to_the_library(self):
        self.assertEqual(_lib.fastcall_path.parent, _lib.library_path.parent)
        self.assertIsInstance(_lib.forward_call(0, 0, 0, 0, 0, 0, 0), int)

    def test_a_runtime_error_is_raised(self):
        q, v = Tensor((1, 2, 8, 64)), Tensor((1, 2, 8, 64))
        k = Tensor((1, 2, 8, 32))
        with self.assertRaises(attnc.UserError) as caught:
            self.fast.forward("mha", q, k, v, None, False, self.resolve)
        self.assertIn("k: head_dim (last dimension) must be 64, got 32",
                      str(caught.exception))

    def test_the_extension_writes_the_pointers_and_the_stream(self):
        # A call the runtime refuses after the words are written (k's head
        # dim), so that they can be read back; then a fresh packing of the
        # same tensors must agree with them.
        for name, want_finals in (("mha", False), ("mha", True),
                                  ("sigmoid_attn", False)):
            inputs = {"softmax_bias": 0.5} if name == "sigmoid_attn" else None
            q, v = Tensor((1, 2, 8, 64)), Tensor((1, 2, 8, 64))
            k = Tensor((1, 2, 8, 32))
            for stream in (0x5000, 0x6000):
                self.torch.stream = stream
                with self.assertRaises(attnc.UserError):
                    self.fast.forward(name, q, k, v, inputs, want_finals,
                                      self.resolve)
                plan = next(p for key, p in self.fast._local.plans.items()
                            if key[0] == name and key[9] == k.shape
                            and key[13] == want_finals)
                words = _words(plan.call_at, 10)
                self.assertEqual(words[9], stream)
                self.assertEqual(words[0], self.objects[name]._handle)
                data = [None if at == 0 else _words(at, 1)[0]
                        for at in words[1:6]]
                self.assertEqual(data[:3], [q.data_ptr(), k.data_ptr(),
                                            v.data_ptr()])
                self.assertNotIn(data[3], (None, 0, *data[:3]))  # out
                if name == "mha":  # finals: the scratch buffer or its own
                    self.assertNotIn(data[4], (None, 0, data[3]))
                    if not want_finals:
                        self.assertEqual(plan.scratch[stream].data_ptr(),
                                         data[4])
                else:
                    self.assertIsNone(data[4])
                q, v = Tensor((1, 2, 8, 64)), Tensor((1, 2, 8, 64))
                k = Tensor((1, 2, 8, 32))

    def test_bad_arguments_raise(self):
        call = _lib.forward_call
        with self.assertRaises(TypeError) as caught:
            call(0, 0, 0, 0, 0, 0)
        self.assertIn("takes 7 arguments", str(caught.exception))
        with self.assertRaises(TypeError):
            call(0, 0, "q", 0, 0, 0, 0)
        with self.assertRaises(TypeError):
            call(0, 0, 0, 0, 0, 0, stream=0)
        self.assertEqual(call(0, 0, 0, 0, 0, 0, 0), 2)  # a NULL call
        with self.assertRaises(attnc.InvalidArgument) as caught:
            _lib.check(2)
        self.assertEqual(str(caught.exception),
                         "attnc_attention_forward_call: argument 'call' is "
                         "NULL")


class ExtensionFallback(unittest.TestCase):
    """Where the extension is not to be used, ctypes makes the call."""

    def loaded(self, **env):
        script = ("import attnc._lib as l\n"
                  "print(l.forward_call is None, l.fastcall_missing)")
        result = subprocess.run(
            [sys.executable, "-c", script], check=True, text=True,
            capture_output=True, env={**os.environ, **env})
        return result.stdout.strip()

    def test_switched_off(self):
        self.assertEqual(self.loaded(ATTNC_FASTCALL="0"),
                         "True ATTNC_FASTCALL=0")

    def test_a_library_of_another_name_has_none(self):
        # A stand-in named otherwise: the extension beside it would link
        # libattnc_c.so, not the stand-in.
        if _lib.forward_call is None:
            self.skipTest(str(_lib.fastcall_missing))
        with tempfile.TemporaryDirectory() as folder:
            other = os.path.join(folder, "libstand_in.so")
            os.symlink(_lib.library_path, other)
            os.symlink(_lib.fastcall_path,
                       os.path.join(folder, _lib.FASTCALL_NAME))
            self.assertEqual(self.loaded(ATTNC_LIBRARY=other),
                             f"True no {_lib.FASTCALL_NAME} next to {other}")


if __name__ == "__main__":
    unittest.main()
