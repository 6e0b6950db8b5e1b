"""attnc.LinearAttention without a GPU: compiled for an explicit arch, its
declarations read back, and its call arguments converted and checked."""

import unittest

import attnc
from test_attention import CudaArray, DLPackArray, has_driver

_made = {}


def sm80(name):
    if name not in _made:
        _made[name] = attnc.LinearAttention(attnc.example(name), head_dim=64,
                                            arch="sm_80")
    return _made[name]


def gla_call(t=128):
    shape = (2, t, 4, 64)
    return dict(q=CudaArray(shape), k=CudaArray(shape), v=CudaArray(shape),
                out=CudaArray(shape), decay=CudaArray((2, 4, t), "<f4"))


class LinearConstruction(unittest.TestCase):
    def test_declarations(self):
        mamba = sm80("mamba2")
        self.assertEqual([i.name for i in mamba.inputs], ["A", "dt"])
        self.assertEqual(mamba.inputs[1].shape, "per_row")
        self.assertFalse(mamba.uses_decay)
        self.assertTrue(sm80("simple_gla").uses_decay)

    def test_bad_arguments(self):
        gla = attnc.example("simple_gla")
        with self.assertRaises(attnc.InvalidArgument) as caught:
            attnc.LinearAttention(gla, layout="thd", arch="sm_80")
        self.assertIn("argument 'layout': 'thd'", str(caught.exception))
        with self.assertRaises(attnc.InvalidArgument) as caught:
            attnc.LinearAttention(gla, dtype="fp8", arch="sm_80")
        self.assertIn("attnc.LinearAttention: argument 'dtype': 'fp8'",
                      str(caught.exception))
        with self.assertRaises(attnc.UserError) as caught:
            attnc.LinearAttention(attnc.example("mha"), head_dim=64,
                                  arch="sm_80")
        self.assertIn("mha", str(caught.exception))


class LinearCalls(unittest.TestCase):
    def test_decay_is_checked_by_the_runtime(self):
        att = sm80("simple_gla")
        call = gla_call()
        call["decay"] = CudaArray((2, 4, 100), "<f4")
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward(**call)
        self.assertIn("decay", str(caught.exception))
        call["decay"] = None
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward(**call)
        self.assertIn("decay", str(caught.exception))

    def test_inputs_and_states(self):
        mamba = sm80("mamba2")
        call = gla_call()
        del call["decay"]
        with self.assertRaises(attnc.InvalidArgument) as caught:
            mamba.forward(**call, inputs={"A": CudaArray((4,), "<f4"),
                                          "dt": 0.5})
        self.assertIn("argument 'inputs['dt']': a number for the per_row",
                      str(caught.exception))
        with self.assertRaises(attnc.InvalidArgument) as caught:
            mamba.forward(**call, inputs={
                "A": CudaArray((4,), "<f4"),
                "dt": CudaArray((2, 4, 128), "<f4")},
                initial_state=CudaArray((2, 4, 64, 32), "<f4"))
        self.assertIn("initial_state", str(caught.exception))

    def test_backward_tensors(self):
        att = sm80("simple_gla")
        call = gla_call()
        del call["out"]
        shape = (2, 128, 4, 64)
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.backward(**call, dout=CudaArray(shape),
                         dq=CudaArray((2, 128, 4, 32)), dk=CudaArray(shape),
                         dv=CudaArray(shape))
        self.assertIn("dq", str(caught.exception))
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.backward(**call, dout=[0.0], dq=CudaArray(shape),
                         dk=CudaArray(shape), dv=CudaArray(shape))
        self.assertIn("attnc.LinearAttention.backward: argument 'dout': a "
                      "list", str(caught.exception))

    @unittest.skipIf(has_driver(), "a driver would launch on fake pointers")
    def test_a_valid_call_stops_at_the_missing_driver(self):
        att = sm80("simple_gla")
        call = gla_call()
        call["q"] = DLPackArray((2, 128, 4, 64))
        with self.assertRaises(attnc.DriverError):
            att.forward(**call)


def packed_call(t=200, seqs=3):
    """A packed simple_gla call: seqs sequences, t tokens in all."""
    shape = (t, 4, 64)
    return dict(q=CudaArray(shape), k=CudaArray(shape), v=CudaArray(shape),
                decay=CudaArray((1, 4, t), "<f4"),
                cu_seqlens=CudaArray((seqs + 1,), "<i4"),
                initial_state=CudaArray((seqs, 4, 64, 64), "<f4"))


def packed_grads(t=200, seqs=3):
    shape = (t, 4, 64)
    return dict(dout=CudaArray(shape), dq=CudaArray(shape),
                dk=CudaArray(shape), dv=CudaArray(shape),
                dfinal_state=CudaArray((seqs, 4, 64, 64), "<f4"),
                ddecay=CudaArray((1, 4, t), "<f4"),
                dinitial_state=CudaArray((seqs, 4, 64, 64), "<f4"))


class LinearPackedCalls(unittest.TestCase):
    def test_forward_arguments(self):
        att = sm80("simple_gla")
        call = packed_call()
        where = "attnc.LinearAttention.forward_varlen: argument "
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward_varlen(**call, out=CudaArray((200, 4, 64)),
                               final_state=[1.0])
        self.assertIn(where + "'final_state': a list", str(caught.exception))
        call["cu_seqlens"] = (0, 100, 200)
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward_varlen(**call, out=CudaArray((200, 4, 64)))
        self.assertIn(where + "'cu_seqlens'", str(caught.exception))
        # The runtime's checks: offsets of another dtype, a state count
        # other than the sequences', and the decay simple_gla reads.
        call["cu_seqlens"] = CudaArray((4,), "<f4")
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward_varlen(**call, out=CudaArray((200, 4, 64)))
        self.assertIn("cu_seqlens", str(caught.exception))
        call = packed_call()
        call["initial_state"] = CudaArray((2, 4, 64, 64), "<f4")
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward_varlen(**call, out=CudaArray((200, 4, 64)))
        self.assertIn("initial_state", str(caught.exception))
        call = packed_call()
        call["decay"] = None
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward_varlen(**call, out=CudaArray((200, 4, 64)))
        self.assertIn("decay", str(caught.exception))

    def test_backward_arguments(self):
        att = sm80("simple_gla")
        where = "attnc.LinearAttention.backward_varlen: argument "
        grads = packed_grads()
        grads["dout"] = [0.0]
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.backward_varlen(**packed_call(), **grads)
        self.assertIn(where + "'dout': a list", str(caught.exception))
        grads = packed_grads()
        grads["dq"] = CudaArray((200, 4, 32))
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.backward_varlen(**packed_call(), **grads)
        self.assertIn("dq", str(caught.exception))
        grads = packed_grads()
        grads["dinitial_state"] = CudaArray((4, 4, 64, 64), "<f4")
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.backward_varlen(**packed_call(), **grads)
        self.assertIn("dinitial_state", str(caught.exception))
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.backward_varlen(**packed_call(), **packed_grads(),
                                grads={"nope": CudaArray((1,), "<f4")})
        self.assertIn("nope", str(caught.exception))
        call = packed_call()
        call["cu_seqlens"] = CudaArray((1,), "<i4")
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.backward_varlen(**call, **packed_grads())
        self.assertIn("cu_seqlens: expected [batch + 1]",
                      str(caught.exception))

    def test_mamba2_inputs_and_their_gradients(self):
        mamba = sm80("mamba2")
        call = packed_call()
        del call["decay"]
        per_token = {"A": CudaArray((4,), "<f4"),
                     "dt": CudaArray((2, 4, 200), "<f4")}
        with self.assertRaises(attnc.InvalidArgument) as caught:
            mamba.forward_varlen(**call, out=CudaArray((200, 4, 64)),
                                 inputs=per_token)
        self.assertIn("dt", str(caught.exception))
        per_token["dt"] = CudaArray((1, 4, 200), "<f4")
        grads = packed_grads()
        del grads["ddecay"]
        with self.assertRaises(attnc.InvalidArgument) as caught:
            mamba.backward_varlen(**call, **grads, decay=None,
                                  inputs=per_token,
                                  grads={"dt": CudaArray((1, 4, 100), "<f4")})
        self.assertIn("input gradient 'dt'", str(caught.exception))

    @unittest.skipIf(has_driver(), "a driver would launch on fake pointers")
    def test_valid_calls_stop_at_the_missing_driver(self):
        att = sm80("simple_gla")
        call = packed_call()
        call["q"] = DLPackArray((200, 4, 64))
        with self.assertRaises(attnc.DriverError):
            att.forward_varlen(**call, out=CudaArray((200, 4, 64)),
                               final_state=CudaArray((3, 4, 64, 64), "<f4"))
        with self.assertRaises(attnc.DriverError):
            att.backward_varlen(**call, **packed_grads())


if __name__ == "__main__":
    unittest.main()
