"""attnc.Attention.merge_kind / merge_results without a GPU: the derived
rule per variant, a variant without one refused with the analysis' reason
(the C++ message reaching Python), and the arguments checked by name."""

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


def attention(name):
    if name not in _made:
        _made[name] = attnc.Attention(attnc.example(name), head_dim=64,
                                      layout="bhsd", arch="sm_80")
    return _made[name]


def parts(n=2, rows=128):
    outs = [CudaArray((2, 4, rows, 64)) for _ in range(n)]
    finals = [CudaArray((1, 2, 4, rows), "<f4") for _ in range(n)]
    return outs, finals, CudaArray((2, 4, 128, 64)), CudaArray(
        (1, 2, 4, 128), "<f4")


class MergeKind(unittest.TestCase):
    def test_kinds(self):
        self.assertEqual(attention("mha").merge_kind(), ("log-sum-exp", ""))
        self.assertEqual(attention("sigmoid_attn").merge_kind()[0], "sum")
        kind, reason = attention("retention").merge_kind()
        self.assertEqual(kind, "none")
        self.assertIn("o_scale", reason)
        self.assertEqual(attention("retention_combine").merge_kind()[0],
                         "combine")


class MergeResults(unittest.TestCase):
    def test_no_merge_is_a_user_error_with_the_reason(self):
        outs, finals, out, out_f = parts()
        with self.assertRaises(attnc.UserError) as e:
            attention("retention").merge_results(outs, finals, out, out_f)
        self.assertIn("its results cannot be merged", str(e.exception))
        self.assertIn("o_scale", str(e.exception))

    def test_a_combines_finals_are_its_two_rowscales(self):
        # retention_combine's results merge by its combine: two finals.
        outs, finals, out, out_f = parts()
        with self.assertRaises(attnc.InvalidArgument) as e:
            attention("retention_combine").merge_results(outs, finals, out,
                                                         out_f)
        self.assertIn("finals: expected shape [2, 2, 4, 128]",
                      str(e.exception))

    @unittest.skipIf(has_driver(), "a driver would launch on fake pointers")
    def test_a_combine_call_reaches_the_driver(self):
        outs, _, out, _ = parts()
        finals = [CudaArray((2, 2, 4, 128), "<f4") for _ in outs]
        with self.assertRaises(attnc.DriverError):
            attention("retention_combine").merge_results(
                outs, finals, out, CudaArray((2, 2, 4, 128), "<f4"))

    def test_part_counts(self):
        att = attention("mha")
        for n in (1, 9):
            outs, finals, out, out_f = parts(n)
            with self.assertRaises(attnc.InvalidArgument) as e:
                att.merge_results(outs, finals, out, out_f)
            self.assertIn(f"{n} parts; expected 2 to 8", str(e.exception))
        outs, finals, out, out_f = parts(3)
        with self.assertRaises(attnc.InvalidArgument) as e:
            att.merge_results(outs, finals[:2], out, out_f)
        self.assertIn("2 tensors for 3 parts", str(e.exception))

    def test_tensors_are_checked_by_name(self):
        att = attention("mha")
        outs, finals, out, out_f = parts()
        outs[1] = object()
        with self.assertRaises(attnc.InvalidArgument) as e:
            att.merge_results(outs, finals, out, out_f)
        self.assertIn("'outs[1]'", str(e.exception))
        # The runtime's checks, through the C views: a part of other rows,
        # a part's finals of another shape, finals left out for mha.
        outs, finals, out, out_f = parts()
        outs[1] = CudaArray((2, 4, 64, 64))
        with self.assertRaises(attnc.InvalidArgument) as e:
            att.merge_results(outs, finals, out, out_f)
        self.assertIn("parts[1].out", str(e.exception))
        outs, finals, out, out_f = parts()
        finals[1] = CudaArray((1, 2, 4, 64), "<f4")
        with self.assertRaises(attnc.InvalidArgument) as e:
            att.merge_results(outs, finals, out, out_f)
        self.assertIn("parts[1].finals", str(e.exception))
        outs, finals, out, out_f = parts()
        with self.assertRaises(attnc.InvalidArgument) as e:
            att.merge_results(outs, None, out, out_f)
        self.assertIn("finals", str(e.exception))

    @unittest.skipIf(has_driver(), "a driver would launch on fake pointers")
    def test_a_valid_call_reaches_the_driver(self):
        outs, finals, out, out_f = parts()
        with self.assertRaises(attnc.DriverError):
            attention("mha").merge_results(outs, finals, out, out_f)


if __name__ == "__main__":
    unittest.main()
