"""Every mistake in a Python definition raises its own exception with the
C++ message (or, for a Python mistake, the Python one), never a crash."""

import ctypes
import math
import unittest

import attnc
from attnc import _dsl_capi, _lib, dsl
from attnc.dsl import InputShape, InputType, OnlineFunc, Var
from dsl_twins import OnlineSoftmax, causal, mha, scaled


def attention(score_mod=scaled, mask_mod=causal, online=None, name="t"):
    d = dsl.AttentionDef(name)
    d.score_mod = score_mod
    d.mask_mod = mask_mod
    d.online_func = online or OnlineSoftmax()
    return d


class PythonExceptions(unittest.TestCase):
    def test_an_exception_in_score_mod_comes_back_as_itself(self):
        marker = ZeroDivisionError("the user's own")

        def score_mod(score, inputs, b, h, q_idx, kv_idx):
            raise marker

        with self.assertRaises(ZeroDivisionError) as caught:
            attention(score_mod).build()
        self.assertIs(caught.exception, marker)

    def test_an_exception_in_a_later_trace_comes_back_too(self):
        state = {"fail": False}

        def score_mod(score, inputs, b, h, q_idx, kv_idx):
            if state["fail"]:
                raise KeyError("late")
            return score

        d = attention(score_mod).build()
        state["fail"] = True
        with self.assertRaises(KeyError):
            d.ir()
        with self.assertRaises(KeyError):
            d.emit(arch="sm_80")

    def test_the_c_side_gets_the_function_and_the_python_message(self):
        state = {"fail": False}

        def score_mod(score, inputs, b, h, q_idx, kv_idx):
            if state["fail"]:
                return 1 / 0
            return score

        d = attention(score_mod).build()
        state["fail"] = True
        # A caller that only sees the status (the runtime's entry points).
        out = ctypes.c_void_p()
        status = _dsl_capi.definition_ir(d.handle, None, ctypes.byref(out))
        with self.assertRaises(attnc.UserError) as caught:
            _lib.check(status)
        self.assertEqual(
            str(caught.exception),
            "score_mod: Python exception ZeroDivisionError: division by zero")

    def test_an_exception_in_an_online_method_comes_back(self):
        class Broken(OnlineSoftmax):
            def forward(self, scores, fr, b, h, q_idx, kv_idx):
                raise RuntimeError("no forward today")

        with self.assertRaisesRegex(RuntimeError, "no forward today"):
            attention(online=Broken()).build()


class WrongTypes(unittest.TestCase):
    def test_a_string_operand(self):
        with self.assertRaisesRegex(TypeError, r"unsupported operand type.*"
                                    r"'Symbol' and 'str'"):
            attention(lambda s, i, b, h, q, k: s + "x").build()

    def test_a_bool_is_not_a_number(self):
        with self.assertRaisesRegex(TypeError, "unsupported operand"):
            attention(lambda s, i, b, h, q, k: s * True).build()

    def test_a_symbol_has_no_truth_value(self):
        def mask_mod(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx and q_idx < kv_idx + 128

        with self.assertRaisesRegex(TypeError, "has no truth value"):
            attention(mask_mod=mask_mod).build()

    def test_comparison_with_something_else(self):
        with self.assertRaisesRegex(TypeError, "cannot compare a symbol with "
                                    "NoneType"):
            attention(mask_mod=lambda b, h, q, k: q == None).build()  # noqa

    def test_score_mod_returning_a_number(self):
        with self.assertRaisesRegex(TypeError, "score_mod: the result must be "
                                    "an attnc.dsl.Symbol, got float"):
            attention(lambda s, i, b, h, q, k: 1.0).build()

    def test_mask_mod_returning_a_number_is_the_cpp_error(self):
        with self.assertRaisesRegex(attnc.UserError, "mask_mod: must return a "
                                    "boolean such as q_idx >= kv_idx"):
            attention(mask_mod=lambda b, h, q, k: q - k).build()

    def test_score_mod_with_the_wrong_arguments(self):
        d = dsl.AttentionDef("t")
        with self.assertRaisesRegex(TypeError, r"score_mod must take \(score, "
                                    r"inputs, b, h, q_idx, kv_idx\); it takes 5"):
            d.score_mod = lambda score, b, h, q, k: score

    def test_linear_mod_with_the_wrong_arguments(self):
        d = dsl.LinearAttentionDef("t")
        with self.assertRaisesRegex(TypeError, "q_mod must take"):
            d.q_mod = lambda q: q

    def test_online_fwd_returning_the_wrong_shape(self):
        class Bad(OnlineSoftmax):
            def online_fwd(self, scores, rs, b, h, q_idx):
                return scores

        with self.assertRaisesRegex(TypeError, r"online_fwd: must return "
                                    r"\(scores, rowscales\) or"):
            attention(online=Bad()).build()

    def test_rowscales_not_a_dict(self):
        class Bad(OnlineSoftmax):
            def online_fwd_epilogue(self, o, rs, b, h, q_idx):
                return o, [rs["m"]]

        with self.assertRaisesRegex(TypeError, "online_fwd_epilogue: the final "
                                    "rowscales must be a dict"):
            attention(online=Bad()).build()

    def test_online_func_must_be_one(self):
        d = dsl.AttentionDef("t")
        with self.assertRaisesRegex(TypeError, "online_func must be an "
                                    "attnc.dsl.OnlineFunc"):
            d.online_func = object()

    def test_online_func_without_its_init(self):
        class NoInit(OnlineSoftmax):
            def __init__(self):
                pass

        d = dsl.AttentionDef("t")
        with self.assertRaisesRegex(TypeError, r"NoInit.__init__ must call "
                                    r"OnlineFunc.__init__"):
            d.online_func = NoInit()

    def test_unknown_keyword(self):
        with self.assertRaisesRegex(TypeError, "has no argument 'score_mod'"):
            dsl.LinearAttentionDef("t", score_mod=scaled)

    def test_emit_options(self):
        d = mha().build()
        with self.assertRaisesRegex(TypeError, "emit\\(\\) has no option "
                                    "'headdim'"):
            d.emit(headdim=64)
        with self.assertRaisesRegex(attnc.UserError, "--dtype 'f64': expected "
                                    "f16 or bf16"):
            d.emit(dtype="f64")


class CppErrors(unittest.TestCase):
    def test_unknown_input_name(self):
        def score_mod(score, inputs, b, h, q_idx, kv_idx):
            return score + inputs["bias"]

        d = attention(score_mod)
        d.inputs.declare("slopes", InputShape.PerHead)
        with self.assertRaises(attnc.UserError) as caught:
            d.build()
        self.assertEqual(str(caught.exception),
                         "score_mod: custom input 'bias' is not declared; "
                         "declared inputs: slopes")

    def test_per_element_rowscale(self):
        class PerElement(OnlineSoftmax):
            def online_fwd(self, scores, rs, b, h, q_idx):
                p = (scores - rs["m"]).exp()
                return p, {"m": rs["m"], "r": rs["r"] + p}, 1.0

        with self.assertRaisesRegex(attnc.UserError,
                                    "online_fwd: new rowscale 'r' is "
                                    "per-element"):
            attention(online=PerElement()).build()

    def test_unknown_rowscale(self):
        class Unknown(OnlineSoftmax):
            def online_fwd_epilogue(self, o, rs, b, h, q_idx):
                return o / rs["z"], {"lse": rs["m"]}

        with self.assertRaises(attnc.UserError) as caught:
            attention(online=Unknown()).build()
        self.assertEqual(str(caught.exception),
                         "online_fwd_epilogue: unknown rowscale 'z'; "
                         "declared: m, r")

    def test_unknown_returned_rowscale(self):
        class Extra(OnlineSoftmax):
            def online_fwd_epilogue(self, o, rs, b, h, q_idx):
                return o, {"lse": rs["m"], "extra": rs["r"]}

        with self.assertRaisesRegex(attnc.UserError,
                                    "online_fwd_epilogue: returns unknown "
                                    "final rowscale 'extra'; declared: lse"):
            attention(online=Extra()).build()

    def test_an_infinite_number(self):
        with self.assertRaisesRegex(attnc.UserError, "score_mod: 'add' with the "
                                    "constant inf"):
            attention(lambda s, i, b, h, q, k: s + math.inf).build()

    def test_comparing_int_and_float(self):
        d = attention(mask_mod=lambda b, h, q, k, inputs: q < inputs["len"])
        d.inputs.declare("len", InputShape.PerHead)
        with self.assertRaisesRegex(attnc.UserError, "compares i32 `q_idx` "
                                    "with f32"):
            d.build()

    def test_declarations(self):
        d = dsl.AttentionDef("t")
        d.inputs.declare("x", InputShape.PerHead)
        with self.assertRaisesRegex(attnc.UserError,
                                    "custom input 'x' is declared twice"):
            d.inputs.declare("x", InputShape.PerRow)
        with self.assertRaisesRegex(attnc.UserError, "unknown shape class "
                                    "'per_elephant'"):
            d.inputs.declare("y", "per_elephant")
        d.inputs.declare("ids", InputShape.PerQueryToken, InputType.I32)
        with self.assertRaisesRegex(attnc.UserError, "custom input 'ids' is "
                                    "int32, and an integer has no gradient"):
            d.inputs.requires_grad()
        with self.assertRaisesRegex(TypeError, "takes a type and/or two "
                                    "numbers"):
            d.inputs.declare("z", InputShape.PerHead, 1.0)
        with self.assertRaisesRegex(attnc.UserError, "not a valid name"):
            dsl.AttentionDef("no spaces").build()

    def test_var(self):
        self.assertEqual(Var("-inf").value, -math.inf)
        self.assertEqual(Var(2).value, 2.0)
        with self.assertRaisesRegex(attnc.UserError, r'Var\("abc"\): not an '
                                    "initial value"):
            Var("abc")
        with self.assertRaisesRegex(attnc.UserError, r"Var\(nan\)"):
            Var(math.nan)
        with self.assertRaises(TypeError):
            Var(None)

    def test_no_online_function(self):
        d = dsl.AttentionDef("t")
        with self.assertRaisesRegex(attnc.UserError, "has no online function"):
            d.build()

    def test_get_reduce_unknown(self):
        class Bad(OnlineSoftmax):
            def online_fwd(self, scores, rs, b, h, q_idx):
                scores.get_reduce("mean")

        with self.assertRaisesRegex(attnc.UserError, 'online_fwd: get_reduce: '
                                    'unknown reduction "mean"'):
            attention(online=Bad()).build()


class KeptSymbols(unittest.TestCase):
    def setUp(self):
        self.kept = []

        def score_mod(score, inputs, b, h, q_idx, kv_idx):
            self.kept.append((score, inputs))
            return score

        attention(score_mod).build()
        self.symbol, self.inputs = self.kept[0]

    def test_used_outside_any_trace(self):
        with self.assertRaises(attnc.UserError) as caught:
            self.symbol.exp()
        self.assertEqual(str(caught.exception),
                         "'exp' uses a symbol of a trace that has ended; a "
                         "symbol cannot be carried from one trace to another")

    def test_used_in_another_trace(self):
        with self.assertRaisesRegex(attnc.UserError, "score_mod: 'add' "
                                    "combines symbols of two different "
                                    "definitions|score_mod: 'add' uses a "
                                    "symbol of a trace that has ended"):
            attention(lambda s, i, b, h, q, k: s + self.symbol).build()

    def test_returned_from_another_trace(self):
        with self.assertRaisesRegex(attnc.UserError, "score_mod: result "
                                    "'score' is a symbol of a trace that has "
                                    "ended"):
            attention(lambda s, i, b, h, q, k: self.symbol).build()

    def test_inputs_kept_past_their_function(self):
        with self.assertRaisesRegex(attnc.UserError, "custom input 'x' read "
                                    "outside a traced function"):
            self.inputs["x"]
        with self.assertRaisesRegex(attnc.UserError, "head_dim\\(\\) read "
                                    "outside a traced function"):
            self.inputs.head_dim()

    def test_online_inputs_outside_a_trace(self):
        with self.assertRaisesRegex(attnc.UserError, "OnlineFunc.inputs read "
                                    "outside a traced function"):
            OnlineSoftmax().inputs

    def test_repr_of_a_kept_symbol(self):
        self.assertIn("trace that has ended", repr(self.symbol))


class Checker(unittest.TestCase):
    def test_a_wrong_forward_fails_the_check_with_its_report(self):
        class WrongForward(OnlineSoftmax):
            def forward(self, scores, fr, b, h, q_idx, kv_idx):
                return (scores - fr["lse"] + 0.5).exp()

        d = attention(online=WrongForward()).build()
        with self.assertRaises(attnc.CheckFailed) as caught:
            d.check()
        self.assertIn("CHECK FAILED", caught.exception.report)


if __name__ == "__main__":
    unittest.main()


class Combine(unittest.TestCase):
    """OnlineFunc.combine: the C++ tracer's checks reach Python, and a
    wrong shape of result is a Python TypeError naming combine."""

    def softmax_with(self, combine):
        class WithCombine(OnlineSoftmax):
            pass

        WithCombine.combine = combine
        return attention(online=WithCombine())

    def test_a_missing_rowscale_is_the_cpp_message(self):
        d = self.softmax_with(lambda self, a, b: ({"m": a["m"]}, 1.0, 1.0))
        with self.assertRaises(attnc.UserError) as e:
            d.build()
        self.assertEqual(str(e.exception),
                         "combine: rowscale 'r' is never produced; return it "
                         "in the rowscales")

    def test_an_input_cannot_be_read(self):
        def combine(self, a, b):
            return {"m": a["m"] + self.inputs["x"], "r": b["r"]}, 1.0, 1.0

        d = self.softmax_with(combine)
        d.inputs.declare("x", InputShape.Scalar)
        with self.assertRaises(attnc.UserError) as e:
            d.build()
        self.assertIn("combine: custom input 'x' cannot be read here",
                      str(e.exception))

    def test_a_result_of_the_wrong_shape(self):
        d = self.softmax_with(lambda self, a, b: {"m": a["m"], "r": b["r"]})
        with self.assertRaises(TypeError) as e:
            d.build()
        self.assertIn("combine: must return (rowscales, o_scale_a, o_scale_b)"
                      " or None", str(e.exception))

    def test_numbers_and_symbols_as_scales(self):
        d = self.softmax_with(
            lambda self, a, b: ({"m": a["m"].max(b["m"]), "r": a["r"]}, 1.0,
                                b["r"]))
        ir = d.build().ir()
        self.assertIn("return o_scale_a = ", ir)
        self.assertIn("rowscale_b r", ir)
