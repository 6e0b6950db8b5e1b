"""The attnc DSL in Python: definitions traced by the C++ tracer.

A definition written here becomes the same IR as its C++ twin: every
operation on a Symbol is the C++ SymbolScalar operation (through the C
interface), and the functions given (score_mod, mask_mod, an OnlineFunc's
methods, the linear mods) are called back by the C++ tracer whenever the
definition is compiled. See docs/python-dsl.md.
"""

from __future__ import annotations

import ctypes
import numbers

from . import _dsl_capi as C
from . import _lib

__all__ = [
    "AttentionDef",
    "InputShape",
    "InputType",
    "LinearAttentionDef",
    "OnlineFunc",
    "Symbol",
    "Var",
    "select",
    "exp",
    "log",
    "maximum",
    "minimum",
    "floordiv",
    "mod",
    "online_softmax",
    "masks",
    "score_mods",
]

# attnc_unary_op and attnc_binary_op
_EXP, _EXP2, _LOG, _LOG2, _ABS, _TANH, _SIGMOID, _RELU = range(8)
_SQRT, _RSQRT, _TO_FLOAT, _NEG, _NOT = range(8, 13)
_ADD, _SUB, _MUL, _DIV, _LT, _LE, _GT, _GE, _EQ, _NE = range(10)
_AND, _OR, _MAX, _MIN, _FLOORDIV, _MOD = range(10, 16)


def _is_number(value) -> bool:
    """A Python number the DSL lifts to a constant (bool is not one, as in
    C++)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


class Symbol:
    """A symbolic scalar: the C++ SymbolScalar. It stands for a family of
    values (one per row, per element, ...); numbers on either side of an
    operator become constants (an int stays i32, a float is f32)."""

    __slots__ = ("_c",)

    def __init__(self, csym: C.CSymbol):
        self._c = csym

    # -- construction helpers -------------------------------------------
    @staticmethod
    def _out(fn, *args) -> "Symbol":
        out = C.CSymbol()
        C.call(fn, *args, ctypes.byref(out))
        return Symbol(out)

    def _unary(self, op: int) -> "Symbol":
        return Symbol._out(C.symbol_unary, op, self._c)

    def _binary(self, op: int, other, number_first: bool = False):
        if isinstance(other, Symbol):
            a, b = (other, self) if number_first else (self, other)
            return Symbol._out(C.symbol_binary, op, a._c, b._c)
        if _is_number(other):
            integral = isinstance(other, numbers.Integral)
            return Symbol._out(
                C.symbol_binary_number,
                op,
                self._c,
                float(other),
                int(integral),
                int(number_first),
            )
        return NotImplemented

    # -- arithmetic -------------------------------------------------------
    def __add__(self, o):
        return self._binary(_ADD, o)

    def __radd__(self, o):
        return self._binary(_ADD, o, True)

    def __sub__(self, o):
        return self._binary(_SUB, o)

    def __rsub__(self, o):
        return self._binary(_SUB, o, True)

    def __mul__(self, o):
        return self._binary(_MUL, o)

    def __rmul__(self, o):
        return self._binary(_MUL, o, True)

    def __truediv__(self, o):
        return self._binary(_DIV, o)

    def __rtruediv__(self, o):
        return self._binary(_DIV, o, True)

    # Floor division and the remainder with the divisor's sign, as Python's
    # own // and % (the C++ DSL's floordiv and mod; ints stay i32).
    def __floordiv__(self, o):
        return self._binary(_FLOORDIV, o)

    def __rfloordiv__(self, o):
        return self._binary(_FLOORDIV, o, True)

    def __mod__(self, o):
        return self._binary(_MOD, o)

    def __rmod__(self, o):
        return self._binary(_MOD, o, True)

    def __neg__(self):
        return self._unary(_NEG)

    def __abs__(self):
        return self._unary(_ABS)

    # -- comparisons (Python reflects `1 < x` into `x > 1`) ---------------
    def _compare(self, op: int, o):
        result = self._binary(op, o)
        if result is NotImplemented:
            raise TypeError(
                f"attnc.dsl.Symbol: cannot compare a symbol with "
                f"{type(o).__name__}; compare with a Symbol or a number"
            )
        return result

    def __lt__(self, o):
        return self._compare(_LT, o)

    def __le__(self, o):
        return self._compare(_LE, o)

    def __gt__(self, o):
        return self._compare(_GT, o)

    def __ge__(self, o):
        return self._compare(_GE, o)

    def __eq__(self, o):
        return self._compare(_EQ, o)

    def __ne__(self, o):
        return self._compare(_NE, o)

    __hash__ = None  # == builds a symbol, so a symbol is no dict key

    # -- masks ------------------------------------------------------------
    def _logical(self, op: int, o):
        if not isinstance(o, Symbol):
            return NotImplemented
        return self._binary(op, o)

    def __and__(self, o):
        return self._logical(_AND, o)

    def __or__(self, o):
        return self._logical(_OR, o)

    def __invert__(self):
        return self._unary(_NOT)

    def __bool__(self):
        raise TypeError(
            "attnc.dsl.Symbol has no truth value: it is traced, not "
            "computed. Use & | ~ to combine masks and select(cond, a, b) to "
            "choose; `and`, `or`, `not`, `if` and chained comparisons "
            "(a < b < c) need a truth value"
        )

    # -- methods of SymbolScalar ------------------------------------------
    def exp(self):
        return self._unary(_EXP)

    def exp2(self):
        return self._unary(_EXP2)

    def log(self):
        return self._unary(_LOG)

    def log2(self):
        return self._unary(_LOG2)

    def abs(self):
        return self._unary(_ABS)

    def tanh(self):
        return self._unary(_TANH)

    def sigmoid(self):
        return self._unary(_SIGMOID)

    def relu(self):
        return self._unary(_RELU)

    def sqrt(self):
        return self._unary(_SQRT)

    def rsqrt(self):
        return self._unary(_RSQRT)

    def to_float(self):
        return self._unary(_TO_FLOAT)

    def _extremum(self, op: int, other, name: str):
        result = self._binary(op, other)
        if result is NotImplemented:
            raise TypeError(
                f"attnc.dsl.Symbol.{name}: expects a Symbol or a number, "
                f"got {type(other).__name__}"
            )
        return result

    def max(self, other):
        return self._extremum(_MAX, other, "max")

    def min(self, other):
        return self._extremum(_MIN, other, "min")

    def get_reduce(self, op: str) -> "Symbol":
        """Reduces a per-element value over the keys: "max", "sum" or
        "abssum"."""
        if not isinstance(op, str):
            raise TypeError(
                f"attnc.dsl.Symbol.get_reduce: expects \"max\", \"sum\" or "
                f"\"abssum\", got {type(op).__name__}"
            )
        return Symbol._out(C.symbol_get_reduce, self._c, op.encode())

    def constant(self, value) -> "Symbol":
        """An f32 constant in this symbol's graph; the way to an infinite
        one (`s.constant(-math.inf)`)."""
        if not _is_number(value):
            raise TypeError(
                f"attnc.dsl.Symbol.constant: expects a number, got "
                f"{type(value).__name__}"
            )
        return Symbol._out(C.symbol_constant, self._c, float(value), 0)

    def __repr__(self) -> str:
        try:
            return f"attnc.dsl.Symbol({C.take_text(C.symbol_text, self._c)})"
        except _lib.Error:
            return "attnc.dsl.Symbol(?)"


def select(cond: Symbol, then, otherwise) -> Symbol:
    """`cond ? then : otherwise`, elementwise; numbers are f32 constants."""
    if not isinstance(cond, Symbol):
        raise TypeError(
            f"attnc.dsl.select: the condition must be a Symbol, got "
            f"{type(cond).__name__}"
        )
    args = []
    for what, value in (("then", then), ("otherwise", otherwise)):
        if isinstance(value, Symbol):
            args += [value._c, 0.0]
        elif _is_number(value):
            args += [None, float(value)]
        else:
            raise TypeError(
                f"attnc.dsl.select: '{what}' must be a Symbol or a number, "
                f"got {type(value).__name__}"
            )
    return Symbol._out(C.symbol_select, cond._c, *args)


def exp(x: Symbol) -> Symbol:
    return x.exp()


def log(x: Symbol) -> Symbol:
    return x.log()


def floordiv(a, b) -> Symbol:
    """floor(a / b), the C++ DSL's floordiv (`a // b` as well)."""
    if isinstance(a, Symbol) or isinstance(b, Symbol):
        return a // b
    raise TypeError("attnc.dsl.floordiv: one operand must be a Symbol")


def mod(a, b) -> Symbol:
    """a - b * floordiv(a, b), the C++ DSL's mod (`a % b` as well)."""
    if isinstance(a, Symbol) or isinstance(b, Symbol):
        return a % b
    raise TypeError("attnc.dsl.mod: one operand must be a Symbol")


def maximum(a: Symbol, b) -> Symbol:
    return a.max(b)


def minimum(a: Symbol, b) -> Symbol:
    return a.min(b)


class Var:
    """A rowscale's initial value: Var("-inf"), Var(0.0), Var(1)."""

    __slots__ = ("value",)

    def __init__(self, init):
        out = ctypes.c_double()
        if isinstance(init, str):
            C.call(C.var_from_text, init.encode(), ctypes.byref(out))
        elif _is_number(init):
            C.call(C.var_from_number, float(init), ctypes.byref(out))
        else:
            raise TypeError(
                f"attnc.dsl.Var: expects a number or \"inf\"/\"-inf\", got "
                f"{type(init).__name__}"
            )
        self.value = out.value

    def __repr__(self) -> str:
        return f"attnc.dsl.Var({self.value!r})"


class InputShape:
    """Shape classes of custom inputs (the strings attnc_c_dsl.h takes)."""

    Scalar = "scalar"
    PerHead = "per_head"
    PerRow = "per_row"
    PerKey = "per_key"
    Full = "full"
    PerQueryToken = "per_query_token"
    PerKeyToken = "per_key_token"


class InputType:
    """Element types of custom inputs."""

    F32 = "f32"
    I32 = "i32"


from ._dsl_trace import (  # noqa: E402  (the tracing half needs Symbol)
    AttentionDef,
    LinearAttentionDef,
    OnlineFunc,
)
from ._dsl_library import (  # noqa: E402  (the blocks need OnlineFunc)
    masks,
    online_softmax,
    score_mods,
)
