"""Each Python operation on a symbol is the C++ one (the node it makes,
the constants it lifts), and the definition builders behave as the C++
definitions do."""

import math
import unittest

import attnc
from attnc import dsl
from attnc.dsl import InputShape, OnlineFunc, Var, select
from dsl_twins import OnlineIdentity, OnlineSoftmax, causal, scaled


def score_mod_ir(fn, online=None):
    """score_mod's function in the trace of a definition with score_mod fn."""
    d = dsl.AttentionDef("ops", score_mod=fn,
                         online_func=online or OnlineSoftmax())
    text = d.build().ir(after="trace")
    start = text.index("func score_mod {")
    return text[start:text.index("}", start) + 1]


class Operations(unittest.TestCase):
    def test_unary_methods_masks_and_select(self):
        def fn(s, i, b, h, q, k):
            mask = (q.to_float() < 2.5) | ~(k > 3)
            return select(mask, abs(s.log2()).sqrt().relu().min(s), 2 / (-s))

        self.assertEqual(score_mod_ir(fn), """func score_mod {
  %0 = index q_idx : i32 row
  %1 = index kv_idx : i32 col
  %2 = score : f32 tile
  %3 = to_float %0 : f32 row
  %4 = const 2.5 : f32 const
  %5 = lt %3, %4 : i1 row
  %6 = const 3 : i32 const
  %7 = gt %1, %6 : i1 col
  %8 = not %7 : i1 col
  %9 = or %5, %8 : i1 tile
  %10 = log2 %2 : f32 tile
  %11 = abs %10 : f32 tile
  %12 = sqrt %11 : f32 tile
  %13 = relu %12 : f32 tile
  %14 = min %13, %2 : f32 tile
  %15 = neg %2 : f32 tile
  %16 = const 2 : i32 const
  %17 = div %16, %15 : f32 tile
  %18 = select %9, %14, %17 : f32 tile
  return score = %18
}""")

    def test_floor_division_and_modulo(self):
        def fn(s, i, b, h, q, k):
            chunk = (q // 64) - dsl.floordiv(k, q)
            return s + (7 % k).to_float() + dsl.mod(chunk, 3).to_float()

        text = score_mod_ir(fn)
        for line in ("floordiv %0, %3 : i32 row", "floordiv %1, %0 : i32 tile",
                     "mod %7, %1 : i32 col", "mod %6, %11 : i32 tile"):
            self.assertIn(line, text)

    def test_floor_division_by_a_constant_zero_is_refused(self):
        with self.assertRaises(attnc.UserError) as caught:
            score_mod_ir(lambda s, i, b, h, q, k: s + (q // 0).to_float())
        self.assertIn("floordiv", str(caught.exception))

    def test_floor_division_of_two_numbers_is_a_type_error(self):
        for fn, name in ((dsl.floordiv, "floordiv"), (dsl.mod, "mod")):
            with self.assertRaises(TypeError) as caught:
                fn(7, 2)
            self.assertIn(f"attnc.dsl.{name}: one operand must be a Symbol",
                          str(caught.exception))

    def test_numbers_on_either_side(self):
        def fn(s, i, b, h, q, k):
            x = 1 - (s * 0.5) / 4
            y = x.max(3).tanh().exp2() + s.abs().constant(-math.inf)
            return y - 2.0

        text = score_mod_ir(fn)
        for line in ("const 0.5 : f32 const", "mul %0, %1 : f32 tile",
                     "const 4 : i32 const", "div %2, %3 : f32 tile",
                     "const 1 : i32 const", "sub %5, %4 : f32 tile",
                     "const 3 : i32 const", "max %6, %7 : f32 tile",
                     "tanh %8", "exp2 %9", "const -inf : f32 const",
                     "const 2 : f32 const"):
            self.assertIn(line, text)

    def test_select_with_numbers_and_get_reduce(self):
        class Sums(OnlineFunc):
            def __init__(self):
                super().__init__({"a": Var("-inf")}, {"a": Var(0)})

            def online_fwd(self, scores, rs, b, h, q_idx):
                clipped = select(scores > 0, scores, 0.0)
                return clipped, {"a": rs["a"] + clipped.get_reduce("abssum")}

            def online_fwd_epilogue(self, o, rs, b, h, q_idx):
                return o, {"a": rs["a"]}

            def forward(self, scores, fr, b, h, q_idx, kv_idx):
                return select(scores > 0, scores, 0.0)

        d = dsl.AttentionDef("sums", online_func=Sums()).build()
        text = d.ir(after="trace")
        self.assertIn("reduce.abssum", text)
        self.assertIn("rowscale a = -inf", text)
        # o_scale left out is 1, as C++'s default.
        self.assertIn("return o_scale = ", text)
        self.assertIn("const 1 : f32 const", text)

    def test_repr_inside_a_trace(self):
        seen = []

        def fn(s, i, b, h, q, k):
            seen.append(repr(s * 2.0))
            return s

        score_mod_ir(fn)  # traced more than once: build, then ir
        self.assertEqual(set(seen), {"attnc.dsl.Symbol(score * 2)"})


class Builders(unittest.TestCase):
    def test_the_builder_stays_usable_and_apart(self):
        d = dsl.AttentionDef("b", score_mod=scaled, mask_mod=causal,
                             online_func=OnlineIdentity())
        first = d.build()
        before = first.ir()
        d.mask_mod = None
        second = d.build()
        self.assertEqual(first.ir(), before)
        self.assertIn("mask_mod", before)
        self.assertNotIn("mask_mod", second.ir())
        self.assertIs(d.score_mod, scaled)
        self.assertIsNone(d.mask_mod)

    def test_decay_sample_range(self):
        d = dsl.LinearAttentionDef("g")
        self.assertIn('"decay_sample": [\n  -1.0,\n  0.0\n ]',
                      d.build().ir_json().replace("-1,", "-1.0,")
                      .replace(" 0\n", " 0.0\n"))
        d.decay_sample_range = (-2.0, -0.5)
        self.assertEqual(d.decay_sample_range, (-2.0, -0.5))
        self.assertIn("-0.5", d.build().ir_json())
        d.decay_sample_range = (0.5, -0.5)
        with self.assertRaisesRegex(attnc.UserError,
                                    "decay sample range is empty"):
            d.build()

    def test_linear_mods_with_indices(self):
        d = dsl.LinearAttentionDef("idx")
        d.k_mod = lambda k, inputs, b, h, t: k * t.to_float()
        text = d.build().ir(after="trace")
        self.assertIn("index t : i32 row", text)
        self.assertIn("to_float", text)

    def test_inputs_in_an_online_function(self):
        class Scaled(OnlineIdentity):
            def forward(self, scores, rs, b, h, q_idx, kv_idx):
                return scores * self.inputs["gain"]

            def online_fwd(self, scores, rs, b, h, q_idx):
                return scores * self.inputs["gain"], {}

        d = dsl.AttentionDef("gain", online_func=Scaled())
        d.inputs.declare("gain", InputShape.PerHead, 0.5, 1.5)
        self.assertIn("input gain : f32 head", d.build().ir(after="trace"))

    def test_description_and_name(self):
        d = dsl.AttentionDef("named", description="a test",
                             online_func=OnlineIdentity())
        self.assertEqual(d.description, "a test")
        self.assertEqual(d.build().name, "named")
        self.assertEqual(repr(d.build()), "attnc.Definition('named')")


if __name__ == "__main__":
    unittest.main()
