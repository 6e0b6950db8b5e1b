"""attnc.Attention without a GPU: kernels compiled for an explicit arch,
declarations read back, and every call argument converted (torch-free:
__cuda_array_interface__ objects and DLPack capsules made here) and
checked, the C++ messages raised as Python exceptions."""

import ctypes
import ctypes.util
import unittest

import attnc

F16_CAI = "<f2"
ADDRESS = 1 << 20  # a fake, aligned device address (never launched on)


class CudaArray:
    """A device array as CuPy or Numba would describe it."""

    def __init__(self, shape, typestr=F16_CAI, strides=None, data=ADDRESS):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "typestr": typestr,
            "data": (data, False), "strides": strides, "version": 3}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice),
                ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class DLPackArray:
    """A DLPack producer: a legacy "dltensor" capsule over a fake address."""

    def __init__(self, shape, code=2, bits=16, device_type=2, strides=None,
                 byte_offset=0):
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = (None if strides is None
                        else (ctypes.c_int64 * len(strides))(*strides))
        self.managed = _DLManagedTensor(
            data=ADDRESS, device=_DLDevice(device_type, 0), ndim=len(shape),
            dtype=_DLDataType(code, bits, 1), shape=self.shape,
            strides=self.strides, byte_offset=byte_offset)
        self.device_type = device_type
        self.streams = []

    def __dlpack_device__(self):
        return (self.device_type, 0)

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        return _capsule_new(ctypes.addressof(self.managed), b"dltensor", None)


def has_driver():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


_made = {}


def sm80(name, **kw):
    key = (name, tuple(sorted(kw.items())))
    if key not in _made:
        _made[key] = attnc.Attention(attnc.example(name), head_dim=64,
                                     arch="sm_80", **kw)
    return _made[key]


def mha_call(shape=(2, 128, 4, 64)):
    b, s, h, d = shape
    return dict(q=CudaArray(shape), k=CudaArray(shape), v=CudaArray(shape),
                out=CudaArray(shape),
                finals=CudaArray((1, b, h, s), "<f4"))


class Construction(unittest.TestCase):
    def test_mha_for_sm80_names_its_finals(self):
        att = sm80("mha")
        self.assertEqual(att.arch, "sm_80")
        self.assertEqual(att.final_names, ("lse",))
        self.assertEqual(att.inputs, ())
        self.assertIn("mha", repr(att))

    def test_declared_inputs(self):
        att = sm80("alibi_learnable")
        self.assertEqual(att.inputs, (
            attnc.InputInfo("slopes", "per_head", "float32", True),
            attnc.InputInfo("head_bias", "per_head", "float32", True)))
        doc = sm80("mha_document_ids")
        self.assertEqual(doc.inputs[0],
                         attnc.InputInfo("doc_q", "per_query_token", "int32",
                                         False))

    def test_bad_arguments(self):
        mha = attnc.example("mha")
        cases = [
            (dict(layout="sbhd"), "argument 'layout': 'sbhd'"),
            (dict(arch="sm_75"), "argument 'arch': 'sm_75'"),
            (dict(dtype="float32"), "argument 'dtype': 'float32'"),
        ]
        for kw, says in cases:
            with self.subTest(**kw), self.assertRaises(
                    attnc.InvalidArgument) as caught:
                attnc.Attention(mha, head_dim=64, **{"arch": "sm_80", **kw})
            self.assertIn(says, str(caught.exception))
        with self.assertRaises(attnc.InvalidArgument) as caught:
            attnc.Attention("mha", arch="sm_80")
        self.assertIn("argument 'definition': a str", str(caught.exception))

    def test_the_runtime_errors_come_through_with_their_kind(self):
        with self.assertRaises(attnc.InvalidArgument) as caught:
            attnc.Attention(attnc.example("mha"), head_dim=0, arch="sm_80")
        self.assertIn("attnc_attention_create: argument 'sig.head_dim'",
                      str(caught.exception))
        with self.assertRaises(attnc.UserError) as caught:
            attnc.Attention(attnc.example("mha"), head_dim=64, arch="sm_80",
                            backend="nowhere")
        self.assertIn("nowhere", str(caught.exception))

    def test_bfloat16_and_bhsd(self):
        att = attnc.Attention(attnc.example("mha"), dtype="bfloat16",
                              head_dim=64, layout="bhsd", arch="sm_90a")
        self.assertEqual(att.arch, "sm_90a")
        self.assertEqual(att.layout, "bhsd")


class Calls(unittest.TestCase):
    def test_cuda_array_interface_reaches_the_runtime_checks(self):
        att = sm80("mha")
        call = mha_call()
        call["k"] = CudaArray((2, 128, 4, 32))
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward(**call)
        self.assertIn("k", str(caught.exception))

    def test_byte_strides_become_element_strides(self):
        att = sm80("mha")
        call = mha_call()
        # q's innermost stride of 2 elements (4 bytes): refused by the
        # runtime; in bytes it would read as 4 elements.
        call["q"] = CudaArray((2, 128, 4, 64), strides=(
            128 * 4 * 128 * 2, 4 * 128 * 2, 128 * 2, 4))
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward(**call)
        self.assertIn("q", str(caught.exception))
        call["q"] = CudaArray((2, 128, 4, 64), strides=(1, 1, 1, 3))
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward(**call)
        self.assertIn("argument 'q': strides (1, 1, 1, 3) (bytes) are not "
                      "multiples of the element size 2", str(caught.exception))

    def test_unsupported_objects_and_types(self):
        att = sm80("mha")
        call = mha_call()
        call["v"] = [1.0, 2.0]
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward(**call)
        self.assertIn("attnc.Attention.forward: argument 'v': a list",
                      str(caught.exception))
        call = mha_call()
        call["out"] = CudaArray((2, 128, 4, 64), "<f8")
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward(**call)
        self.assertIn("argument 'out': __cuda_array_interface__ typestr '<f8'",
                      str(caught.exception))

    def test_too_many_dimensions(self):
        att = sm80("mha")
        call = mha_call()
        call["finals"] = CudaArray((1,) * 9, "<f4")
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward(**call)
        self.assertIn("argument 'finals': 9 dimensions; at most 8",
                      str(caught.exception))

    def test_dlpack_tensors(self):
        att = sm80("mha")
        call = mha_call()
        call["q"] = DLPackArray((2, 128, 4, 32))
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward(**call, stream=7)
        self.assertIn("q", str(caught.exception))
        # The consumer's stream is passed to the producer (DLPack's rule).
        self.assertEqual(call["q"].streams, [7])
        call["q"] = DLPackArray((2, 128, 4, 64), device_type=1)
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward(**call)
        self.assertIn("argument 'q': a DLPack tensor on device type 1",
                      str(caught.exception))
        call["q"] = DLPackArray((2, 128, 4, 64), code=2, bits=64)
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward(**call)
        self.assertIn("argument 'q': DLPack dtype (code 2, bits 64",
                      str(caught.exception))

    def test_inputs(self):
        att = sm80("sigmoid_attn")
        call = mha_call()
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward(**call)  # softmax_bias missing
        self.assertIn("softmax_bias", str(caught.exception))
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward(**call, inputs={"bogus": 1.0, "softmax_bias": -2.0})
        self.assertIn("bogus", str(caught.exception))
        alibi = sm80("alibi_learnable")
        with self.assertRaises(attnc.InvalidArgument) as caught:
            alibi.forward(**call, inputs={"slopes": 0.5, "head_bias": 0.0})
        self.assertIn("argument 'inputs['slopes']': a number for the per_head "
                      "input 'slopes'", str(caught.exception))
        with self.assertRaises(attnc.InvalidArgument) as caught:
            alibi.forward(**call, inputs={
                "slopes": CudaArray((3,), "<f4"),
                "head_bias": CudaArray((4,), "<f4")})
        self.assertIn("slopes", str(caught.exception))

    def test_backward_gradients_by_name(self):
        att = sm80("alibi_learnable")
        call = mha_call()
        grads = dict(dout=CudaArray((2, 128, 4, 64)),
                     dq=CudaArray((2, 128, 4, 64)),
                     dk=CudaArray((2, 128, 4, 64)),
                     dv=CudaArray((2, 128, 4, 64)))
        inputs = {"slopes": CudaArray((4,), "<f4"),
                  "head_bias": CudaArray((4,), "<f4")}
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.backward(**call, **grads, inputs=inputs,
                         grads={"slopes": CudaArray((4,), "<f4")})
        self.assertIn("head_bias", str(caught.exception))
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.backward(**call, **grads, inputs=inputs, grads={
                "slopes": CudaArray((4,), "<f4"),
                "head_bias": CudaArray((5,), "<f4")})
        self.assertIn("head_bias", str(caught.exception))

    def test_varlen_cu_seqlens_are_int32(self):
        att = sm80("mha", layout="thd")
        t = (256, 4, 64)
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward_varlen(CudaArray(t), CudaArray(t), CudaArray(t),
                               CudaArray(t), CudaArray((1, 4, 256), "<f4"),
                               CudaArray((3,), "<f4"), CudaArray((3,), "<i4"),
                               128, 128)
        self.assertIn("cu_seqlens", str(caught.exception))

    def test_stream_argument(self):
        att = sm80("mha")
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward(**mha_call(), stream="default")
        self.assertIn("argument 'stream': a str", str(caught.exception))

    @unittest.skipIf(has_driver(), "a driver would launch on fake pointers")
    def test_a_valid_call_stops_at_the_missing_driver(self):
        att = sm80("sigmoid_attn")
        for q in (CudaArray((2, 128, 4, 64)), DLPackArray((2, 128, 4, 64))):
            call = mha_call()
            call["q"] = q
            with self.subTest(type(q).__name__), self.assertRaises(
                    attnc.DriverError):
                att.forward(**call, inputs={"softmax_bias": -1.0})


if __name__ == "__main__":
    unittest.main()
