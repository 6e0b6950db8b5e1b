"""attnc.BlockMask without a GPU: the block-mask methods of
attnc.Attention and the block_mask= argument of its calls refuse every
malformed argument with its name (Python's checks and the C interface's,
raised with their kind) before anything reaches the device."""

import ctypes
import unittest

import attnc

ADDRESS = 1 << 20  # a fake, aligned device address (never launched on)


class CudaArray:
    def __init__(self, shape, typestr="<f2"):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "typestr": typestr,
            "data": (ADDRESS, False), "strides": None, "version": 3}


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


# Causal lists of a [1, 1, 256, 256] problem in blocks of 128.
NUM = [[[1, 1]]]
IDX = [[[[0, 0], [1, 0]]]]
FULL_NUM = [[[0, 1]]]
FULL_IDX = [[[[0, 0], [0, 0]]]]


class MakeBlockMask(unittest.TestCase):
    def test_bad_shape_and_inputs_name_the_argument(self):
        att = sm80("mha")
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.make_block_mask(1, 1, 0, 256)
        self.assertIn("attnc_block_mask_make: argument 'shape': block mask "
                      "shape: SeqQ is 0", str(caught.exception))
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.make_block_mask(1, 4, 256, 256, heads_kv=3)
        self.assertIn("HeadsKv 3 does not divide Heads 4",
                      str(caught.exception))
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.make_block_mask(1, 1, 256, 256, inputs={"prefix_len": 3})
        self.assertIn("argument 'inputs': input 'prefix_len'",
                      str(caught.exception))

    def test_a_definition_without_a_mask_and_a_packed_layout(self):
        with self.assertRaises(attnc.UserError) as caught:
            sm80("relu_attn").make_block_mask(1, 1, 256, 256)
        self.assertIn("'relu_attn' has no mask_mod", str(caught.exception))
        with self.assertRaises(attnc.UserError) as caught:
            sm80("mha", layout="thd").make_block_mask(1, 1, 256, 256)
        self.assertIn("takes no block mask", str(caught.exception))

    def test_refresh_needs_a_block_mask(self):
        for value, says in ((None, "None"), ("mask", "a str")):
            with self.subTest(value), self.assertRaises(
                    attnc.InvalidArgument) as caught:
                sm80("mha").refresh_block_mask(value)
            self.assertIn("attnc.Attention.refresh_block_mask: argument "
                          f"'block_mask': {says}", str(caught.exception))

    def test_classify_launches_is_a_count(self):
        self.assertEqual(attnc.classify_launches(), 0)


class FromLists(unittest.TestCase):
    def lists(self, **kw):
        args = dict(kv_num_blocks=NUM, kv_indices=IDX,
                    full_kv_num_blocks=FULL_NUM, full_kv_indices=FULL_IDX)
        args.update(kw)
        return sm80("mha").block_mask_from_lists(1, 1, 256, 256, **args)

    def test_python_checks_name_the_argument(self):
        cases = [
            (dict(kv_num_blocks=[[1, 1]]),
             "argument 'kv_num_blocks': expected 3 dimensions"),
            (dict(kv_indices=[[[[0, 0], [1]]]]),
             "argument 'kv_indices': ragged (rows of lengths [1, 2])"),
            (dict(kv_indices=[[[[0, 0], [1, "x"]]]]),
             "argument 'kv_indices': not int32 values"),
            (dict(kv_indices=[[[[0, 0], [1, 2 ** 40]]]]),
             "argument 'kv_indices': not int32 values"),
            (dict(full_kv_indices=None),
             "arguments 'full_kv_num_blocks' and 'full_kv_indices': give "
             "both or neither"),
        ]
        for kw, says in cases:
            with self.subTest(kw), self.assertRaises(
                    attnc.InvalidArgument) as caught:
                self.lists(**kw)
            self.assertIn(says, str(caught.exception))

    def test_runtime_checks_name_the_field(self):
        cases = [
            (dict(kv_indices=[[[[0, 0], [2, 0]]]]),
             "argument 'lists': block lists: KvIndices (kv_indices)[0][0][1]"
             "[0] is 2; expected a key block in [0, 2)"),
            (dict(kv_num_blocks=[[[1, 3]]]),
             "KvNumBlocks (kv_num_blocks)[0][0][1] is 3; expected 0 to "
             "KvBlocks = 2"),
            (dict(full_kv_indices=[[[[0, 0], [1, 0]]]]),
             "both name key block 1 of query block 1"),
            (dict(kv_num_blocks=[[[1, 1], [1, 1]]]),
             "Heads is 2; expected 1 or the shape's heads 1"),
            (dict(kv_num_blocks=[[[1]]]),
             "KvNumBlocks (kv_num_blocks) has 1 entries"),
        ]
        for kw, says in cases:
            with self.subTest(kw), self.assertRaises(
                    attnc.InvalidArgument) as caught:
                self.lists(**kw)
            self.assertIn(says, str(caught.exception))
        with self.assertRaises(attnc.InvalidArgument) as caught:
            self.lists(block_q=0)
        self.assertIn("block size 0x128", str(caught.exception))

    @unittest.skipIf(has_driver(), "a driver would make the mask")
    def test_valid_lists_stop_at_the_missing_driver(self):
        # Also reads lists from objects with tolist() (NumPy, torch).
        class Listed:
            def __init__(self, value):
                self.value = value

            def tolist(self):
                return self.value

        with self.assertRaises(attnc.DriverError):
            self.lists(kv_num_blocks=Listed(NUM))


class Calls(unittest.TestCase):
    def test_block_mask_must_be_a_block_mask(self):
        att = sm80("mha")
        shape = (1, 256, 1, 64)
        t = {n: CudaArray(shape) for n in ("q", "k", "v", "out", "dout",
                                           "dq", "dk", "dv")}
        finals = CudaArray((1, 1, 1, 256), "<f4")
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.forward(t["q"], t["k"], t["v"], t["out"], finals,
                        block_mask=object())
        self.assertIn("attnc.Attention.forward: argument 'block_mask': a "
                      "object; expected an attnc.BlockMask",
                      str(caught.exception))
        with self.assertRaises(attnc.InvalidArgument) as caught:
            att.backward(t["q"], t["k"], t["v"], t["out"], t["dout"], finals,
                         t["dq"], t["dk"], t["dv"], block_mask=42)
        self.assertIn("attnc.Attention.backward: argument 'block_mask': a "
                      "int", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
