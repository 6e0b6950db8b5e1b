"""attnc.torch.linear_attention's packed-batch (cu_seqlens) argument checks
on the CPU: the torch-free checker (attnc._linear_args) for every refused
argument and the accepted shapes; where PyTorch is installed, the same
refusals through attnc.torch.linear_attention itself, before anything
reaches the device (the GPU tests in tests/python/gpu run the calls)."""

import importlib.util
import unittest

import attnc
from attnc import _linear_args

HAVE_TORCH = importlib.util.find_spec("torch") is not None

Q, K, V = (100, 4, 64), (100, 2, 64), (100, 4, 32)


def packed(q=Q, k=K, v=V, cu=(4,), cu_dtype="torch.int32", cu_device=0,
           q_device=0, init=(3, 4, 64, 32)):
    return _linear_args.packed_sequences(q, k, v, cu, cu_dtype, cu_device,
                                         q_device, init)


class Layout(unittest.TestCase):
    def refused(self, argument, text, layout, has_cu):
        with self.assertRaises(attnc.InvalidArgument) as caught:
            _linear_args.layout_of(layout, has_cu)
        message = str(caught.exception)
        self.assertIn("attnc.torch.linear_attention: argument "
                      f"'{argument}'", message)
        self.assertIn(text, message)

    def test_default_is_bshd_and_thd_with_cu_seqlens(self):
        self.assertEqual(_linear_args.layout_of(None, False), "bshd")
        self.assertEqual(_linear_args.layout_of(None, True), "thd")
        self.assertEqual(_linear_args.layout_of("bhsd", False), "bhsd")
        self.assertEqual(_linear_args.layout_of("thd", True), "thd")

    def test_refused_layouts(self):
        self.refused("layout", "'x' is not 'bshd', 'bhsd' or 'thd'", "x",
                     False)
        self.refused("layout", "'bshd' with cu_seqlens", "bshd", True)
        self.refused("layout", "'bhsd' with cu_seqlens", "bhsd", True)
        self.refused("cu_seqlens", "None with layout 'thd'", "thd", False)


class Packed(unittest.TestCase):
    def refused(self, argument, text, **kw):
        with self.assertRaises(attnc.InvalidArgument) as caught:
            packed(**kw)
        message = str(caught.exception)
        self.assertIn("attnc.torch.linear_attention: argument "
                      f"'{argument}'", message)
        self.assertIn(text, message)

    def test_accepted(self):
        self.assertEqual(packed(), 3)
        self.assertEqual(packed(init=None), 3)
        self.assertEqual(packed(cu=(1,), init=(0, 4, 64, 32)), 0)
        self.assertEqual(packed(cu_dtype="torch.int64"), 3)

    def test_tensors_of_rank_three_over_the_same_tokens(self):
        self.refused("q", "[1,100,4,64]; with cu_seqlens (layout 'thd') it "
                     "is [T,heads,dim]", q=(1,) + Q)
        self.refused("k", "[100,2]", k=K[:2])
        self.refused("v", "[1,100,4,32]", v=(1,) + V)
        self.refused("k", "[99,2,64] has 99 tokens and q 100", k=(99, 2, 64))
        self.refused("v", "[101,4,32] has 101 tokens and q 100",
                     v=(101, 4, 32))

    def test_offsets(self):
        self.refused("cu_seqlens", "[0]; expected [B+1]", cu=(0,))
        self.refused("cu_seqlens", "[2,4]; expected [B+1]", cu=(2, 4))
        self.refused("cu_seqlens", "dtype torch.float32; expected "
                     "torch.int32", cu_dtype="torch.float32")
        self.refused("cu_seqlens", "on the CPU; it must be on q's device",
                     cu_device=-1)
        self.refused("cu_seqlens", "on cuda:1; it must be on q's device",
                     cu_device=1)

    def test_one_initial_state_a_sequence(self):
        self.refused("initial_state", "[2,4,64,32]; expected [3,H,D,DV], "
                     "one state for each of the 3 sequences",
                     init=(2, 4, 64, 32))
        self.refused("initial_state", "[4,64,32]; expected [3,H,D,DV]",
                     init=(4, 64, 32))


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class ThroughTheOp(unittest.TestCase):
    """The public function refuses the same arguments on CPU tensors, before
    any object is made or anything launched."""

    def refused(self, argument, text, **kw):
        import torch

        import attnc.torch
        q = torch.zeros(*Q, dtype=torch.float16)
        args = dict(q=q, k=torch.zeros(*K, dtype=torch.float16),
                    v=torch.zeros(*V, dtype=torch.float16),
                    cu_seqlens=torch.tensor([0, 10, 60, 100],
                                            dtype=torch.int32))
        args.update(kw)
        with self.assertRaises(attnc.InvalidArgument) as caught:
            attnc.torch.linear_attention(args.pop("q"), args.pop("k"),
                                         args.pop("v"), "retention_linear",
                                         **args)
        self.assertIn(f"argument '{argument}'", str(caught.exception))
        self.assertIn(text, str(caught.exception))

    def test_refusals(self):
        import torch
        self.refused("layout", "'bshd' with cu_seqlens", layout="bshd")
        self.refused("cu_seqlens", "None with layout 'thd'", layout="thd",
                     cu_seqlens=None)
        self.refused("q", "[1,100,4,64]", q=torch.zeros(1, *Q))
        self.refused("cu_seqlens", "dtype torch.float32",
                     cu_seqlens=torch.zeros(4))
        self.refused("initial_state", "expected [3,H,D,DV]",
                     initial_state=torch.zeros(2, 4, 64, 32))


if __name__ == "__main__":
    unittest.main()
