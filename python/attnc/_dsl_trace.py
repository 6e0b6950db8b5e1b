"""The tracing half of attnc.dsl: definitions whose functions the C++ tracer
calls back, and what those functions are given."""

from __future__ import annotations

import ctypes
import inspect
from collections.abc import Mapping

from . import _dsl_capi as C
from . import _lib
from ._definition import Definition
from .dsl import Symbol, Var, _is_number


# ---- what a traced function is given ----------------------------------------


class TracedInputs:
    """A definition's custom inputs while a function is traced:
    `inputs["name"]` and `inputs.head_dim()`. Kept past its function, it
    reads as "outside a traced function"."""

    __slots__ = ("_handle",)

    def __init__(self, handle):
        self._handle = handle

    def __getitem__(self, name: str) -> Symbol:
        if not isinstance(name, str):
            raise TypeError(
                f"custom inputs are read by name (a str), got "
                f"{type(name).__name__}"
            )
        return Symbol._out(C.inputs_get, self._handle, name.encode())

    def head_dim(self) -> Symbol:
        """The problem's head dimension D (a compile-time constant)."""
        return Symbol._out(C.inputs_head_dim, self._handle)

    def _close(self):
        self._handle = None


class Rowscales(Mapping):
    """Named rowscales given to an online function (read-only). An unknown
    name is the C++ error that lists the declared ones."""

    def __init__(self, handle, names):
        self._handle = handle
        self._values = {
            n: Symbol._out(C.rowscales_get, handle, n.encode()) for n in names
        }

    def __getitem__(self, name: str) -> Symbol:
        if name in self._values:
            return self._values[name]
        if not isinstance(name, str):
            raise TypeError(
                f"rowscales are read by name (a str), got {type(name).__name__}"
            )
        # Asked of the C++ Rowscales for its message (the declared names).
        return Symbol._out(C.rowscales_get, self._handle, name.encode())

    def __iter__(self):
        return iter(self._values)

    def __len__(self):
        return len(self._values)

    def _close(self):
        self._handle = None


# ---- callbacks ----------------------------------------------------------------


def _type_name(value) -> str:
    return "None" if value is None else type(value).__name__


def _symbol_result(function: str, what: str, value) -> Symbol:
    if not isinstance(value, Symbol):
        raise TypeError(
            f"{function}: {what} must be an attnc.dsl.Symbol, got "
            f"{_type_name(value)}"
        )
    return value


def _set_rowscales(function: str, result, returned, what: str) -> None:
    if not isinstance(returned, Mapping):
        raise TypeError(
            f"{function}: the {what}s must be a dict of name to Symbol, got "
            f"{_type_name(returned)}"
        )
    for name, value in returned.items():
        if not isinstance(name, str):
            raise TypeError(
                f"{function}: a {what}'s name must be a str, got "
                f"{_type_name(name)}"
            )
        value = _symbol_result(function, f"{what} '{name}'", value)
        C.call(C.result_set_rowscale, result, name.encode(), value._c)


def _unpack(function: str, returned, shapes: str, sizes):
    if not isinstance(returned, tuple) or len(returned) not in sizes:
        raise TypeError(
            f"{function}: must return {shapes}, got {_type_name(returned)}"
            + (f" of {len(returned)}" if isinstance(returned, tuple) else "")
        )
    return returned


class _Binding:
    """One Python function (or an OnlineFunc) the C++ tracer calls back.
    The C side holds its address; whoever holds the C object holds it."""

    def __init__(self, target, kind: str, arity: int = 0):
        self.target = target
        self.kind = kind  # a function's name, or "online"
        self.arity = arity

    @property
    def user(self) -> ctypes.c_void_p:
        return ctypes.c_void_p(id(self))

    def run(self, function: str, args, inputs, rowscales, result) -> None:
        t = self.target
        if self.kind == "score_mod":
            score, b, h, q, k = args
            value = t(score, inputs, b, h, q, k)
            _set(result, _symbol_result(function, "the result", value))
        elif self.kind == "mask_mod":
            value = t(*args, inputs) if self.arity == 5 else t(*args)
            _set(result, _symbol_result(function, "the mask", value))
        elif self.kind == "online":
            self._online(function, args, inputs, rowscales, result)
        else:  # q_mod, k_mod, v_mod, decay_mod
            x, b, h, tok = args
            value = t(x, inputs, b, h, tok) if self.arity == 5 else t(x, inputs)
            _set(result, _symbol_result(function, "the result", value))

    def _online(self, function, args, inputs, rowscales, result) -> None:
        f: OnlineFunc = self.target
        online = function in ("online_fwd", "online_fwd_epilogue", "combine")
        names = [n for n, _ in (f._online if online else f._final)]
        rs = Rowscales(rowscales[0], names)
        try:
            if function == "combine":
                rs_b = Rowscales(rowscales[1], names)
                try:
                    self._combine_call(f, rs, rs_b, result)
                finally:
                    rs_b._close()
            else:
                self._online_call(f, function, args, rs, result)
        finally:
            rs._close()

    @staticmethod
    def _combine_call(f, a, b, result) -> None:
        got = f.combine(a, b)
        if got is None:
            return  # no combine: the C side sees nothing set
        got = _unpack(
            "combine", got, "(rowscales, o_scale_a, o_scale_b) or None", (3,)
        )
        _set_rowscales("combine", result, got[0], "rowscale")
        for what, value, sym, num in (
            ("o_scale_a", got[1], C.result_set_o_scale, C.result_set_o_scale_number),
            ("o_scale_b", got[2], C.result_set_o_scale_b,
             C.result_set_o_scale_b_number),
        ):
            if _is_number(value):
                C.call(num, result, float(value))
            else:
                C.call(sym, result, _symbol_result("combine", what, value)._c)

    @staticmethod
    def _online_call(f, function, args, rs, result) -> None:
        if function == "online_fwd":
            scores, b, h, q = args
            got = _unpack(
                function,
                f.online_fwd(scores, rs, b, h, q),
                "(scores, rowscales) or (scores, rowscales, o_scale)",
                (2, 3),
            )
            _set(result, _symbol_result(function, "scores", got[0]))
            _set_rowscales(function, result, got[1], "rowscale")
            if len(got) == 3:
                o_scale = got[2]
                if _is_number(o_scale):
                    C.call(C.result_set_o_scale_number, result, float(o_scale))
                else:
                    o_scale = _symbol_result(function, "o_scale", o_scale)
                    C.call(C.result_set_o_scale, result, o_scale._c)
        elif function == "online_fwd_epilogue":
            o, b, h, q = args
            got = _unpack(
                function,
                f.online_fwd_epilogue(o, rs, b, h, q),
                "(o, final_rowscales)",
                (2,),
            )
            _set(result, _symbol_result(function, "o", got[0]))
            _set_rowscales(function, result, got[1], "final rowscale")
        elif function == "forward":
            scores, b, h, q, k = args
            _set(result, _symbol_result(function, "p", f.forward(scores, rs, b, h, q, k)))
        else:  # backward
            dp, p, doosum, b, h, q, k = args
            value = f.backward(dp, p, rs, doosum, b, h, q, k)
            if value is not None:
                _set(result, _symbol_result(function, "dscores (or None)", value))


def _set(result, value: Symbol) -> None:
    C.call(C.result_set, result, value._c)


@C.TRACE_FN
def _trampoline(user, call_ptr, result):
    # No exception may leave a ctypes callback: it is kept for the caller
    # (C.call re-raises it) and the C side gets its message.
    try:
        binding = ctypes.cast(user, ctypes.py_object).value
        call = call_ptr.contents
        function = call.function.decode()
        args = [
            Symbol(C.CSymbol.from_buffer_copy(call.args[i]))
            for i in range(call.num_args)
        ]
        inputs = TracedInputs(call.inputs)
        online = binding.target if binding.kind == "online" else None
        if online is not None:
            online._bound = inputs
        try:
            binding.run(function, args, inputs, (call.rowscales, call.rowscales_b),
                        result)
        finally:
            inputs._close()
            if online is not None:
                online._bound = None
        return 0
    except BaseException as error:  # noqa: B902 (kept, then re-raised)
        C.set_pending(error)
        if isinstance(error, _lib.Error):
            C.result_fail(result, str(error).encode(), 1)
        else:
            message = f"Python exception {type(error).__name__}: {error}"
            C.result_fail(result, message.encode(), 0)
        return 1


def _positional_count(fn):
    """How many positional arguments fn takes (None: any number)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    count = 0
    for p in sig.parameters.values():
        if p.kind == p.VAR_POSITIONAL:
            return None
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            count += 1
    return count


def _binding_for(function: str, fn) -> _Binding:
    if not callable(fn):
        raise TypeError(f"{function} must be callable, got {_type_name(fn)}")
    n = _positional_count(fn)
    if function == "score_mod":
        if n is not None and n != 6:
            raise TypeError(
                f"score_mod must take (score, inputs, b, h, q_idx, kv_idx); "
                f"it takes {n} arguments"
            )
        return _Binding(fn, function)
    if function == "mask_mod":
        if n is not None and n not in (4, 5):
            raise TypeError(
                f"mask_mod must take (b, h, q_idx, kv_idx) or (b, h, q_idx, "
                f"kv_idx, inputs); it takes {n} arguments"
            )
        return _Binding(fn, function, 5 if n is None else n)
    if n is not None and n not in (2, 5):
        raise TypeError(
            f"{function} must take (x, inputs) or (x, inputs, b, h, t); it "
            f"takes {n} arguments"
        )
    return _Binding(fn, function, 5 if n is None else n)


# ---- the user's classes ---------------------------------------------------------


def _decls(what: str, given):
    items = given.items() if isinstance(given, Mapping) else given
    out = []
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise TypeError(
                f"OnlineFunc: {what}s are a dict of name to Var (or a list "
                f"of (name, Var) pairs), got an item {_type_name(item)}"
            )
        name, init = item
        if not isinstance(name, str):
            raise TypeError(f"OnlineFunc: a {what}'s name must be a str, got "
                            f"{_type_name(name)}")
        out.append((name, init if isinstance(init, Var) else Var(init)))
    return out


class OnlineFunc:
    """The row-online algorithm on scores (the C++ OnlineFunc). Subclasses
    pass their rowscales to __init__ and override online_fwd,
    online_fwd_epilogue and forward; backward may be left out (None).

    online_fwd(scores, online_rowscales, b, h, q_idx) returns (scores,
    {name: rowscale}, o_scale) (o_scale may be left out: 1);
    online_fwd_epilogue(o, online_rowscales, b, h, q_idx) returns (o,
    {name: final rowscale}); forward(scores, final_rowscales, b, h, q_idx,
    kv_idx) returns P; backward(dp, scores, final_rowscales, doosum, b, h,
    q_idx, kv_idx) returns dscores or None; combine(a, b), given two partial
    states' online rowscales, returns (merged rowscales, o_scale_a,
    o_scale_b) with o = o_scale_a·o_a + o_scale_b·o_b, or None (the
    default: no combine; see the C++ OnlineFunc::combine)."""

    def __init__(self, online_rowscales=(), final_rowscales=()):
        self._online = _decls("online rowscale", online_rowscales)
        self._final = _decls("final rowscale", final_rowscales)
        self._bound = None

    @property
    def inputs(self) -> TracedInputs:
        """The definition's custom inputs, while a method is traced."""
        bound = getattr(self, "_bound", None)
        if bound is None:
            raise _lib.UserError(
                "OnlineFunc.inputs read outside a traced function"
            )
        return bound

    def online_fwd(self, scores, online_rowscales, b, h, q_idx):
        raise NotImplementedError(f"{type(self).__name__}.online_fwd")

    def online_fwd_epilogue(self, o, online_rowscales, b, h, q_idx):
        raise NotImplementedError(f"{type(self).__name__}.online_fwd_epilogue")

    def forward(self, scores, final_rowscales, b, h, q_idx, kv_idx):
        raise NotImplementedError(f"{type(self).__name__}.forward")

    def backward(self, dp, scores, final_rowscales, doosum, b, h, q_idx, kv_idx):
        return None

    def combine(self, a, b):
        return None


class InputDecls:
    """A definition's custom-input declarations (CustomInputs::declare)."""

    def __init__(self, owner: "_Builder"):
        self._owner = owner

    def declare(self, name: str, shape: str, *args) -> "InputDecls":
        """declare(name, shape[, type][, lo, hi]): shape an InputShape,
        type an InputType (f32 by default), [lo, hi] the range `check`
        draws values from. Returns self, for .requires_grad()."""
        if not isinstance(name, str):
            raise TypeError(f"custom input name must be a str, got "
                            f"{_type_name(name)}")
        if not isinstance(shape, str):
            raise TypeError(
                f"custom input '{name}': shape must be an attnc.dsl."
                f"InputShape, got {_type_name(shape)}"
            )
        rest = list(args)
        dtype = rest.pop(0) if rest and isinstance(rest[0], str) else None
        if len(rest) not in (0, 2) or not all(_is_number(v) for v in rest):
            raise TypeError(
                f"custom input '{name}': declare(name, shape[, type][, lo, "
                f"hi]) takes a type and/or two numbers"
            )
        lo, hi = (float(rest[0]), float(rest[1])) if rest else (0.0, 0.0)
        C.call(
            C.builder_declare_input,
            self._owner._handle,
            name.encode(),
            shape.encode(),
            dtype.encode() if dtype else None,
            int(bool(rest)),
            lo,
            hi,
        )
        return self

    def requires_grad(self) -> "InputDecls":
        """The input declared last is learnable (its gradient is returned
        by the backward)."""
        C.call(C.builder_requires_grad, self._owner._handle)
        return self

    requiresGrad = requires_grad


class _Builder:
    _KIND = ""
    _FUNCTIONS = ()

    def __init__(self, name: str, description: str = "", **functions):
        if not isinstance(name, str):
            raise TypeError(f"a definition's name must be a str, got "
                            f"{_type_name(name)}")
        handle = ctypes.c_void_p()
        C.call(C.builder_new, name.encode(), self._KIND.encode(),
               ctypes.byref(handle))
        self._handle = handle
        self._name = name
        self._bindings = {}
        self._description = ""
        self.inputs = InputDecls(self)
        if description:
            self.description = description
        for key, value in functions.items():
            if key not in self._FUNCTIONS:
                raise TypeError(
                    f"{type(self).__name__}() has no argument '{key}'; it "
                    f"takes {', '.join(self._FUNCTIONS)}"
                )
            setattr(self, key, value)

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @description.setter
    def description(self, text: str):
        if not isinstance(text, str):
            raise TypeError(f"description must be a str, got {_type_name(text)}")
        C.call(C.builder_set_description, self._handle, text.encode())
        self._description = text

    def _set_function(self, function: str, fn):
        binding = None if fn is None else _binding_for(function, fn)
        C.call(
            C.builder_set_function,
            self._handle,
            function.encode(),
            _trampoline if binding else C.TRACE_FN(),
            binding.user if binding else None,
        )
        self._bindings[function] = binding

    def build(self) -> Definition:
        """The definition (traced and compiled once now, so that its
        mistakes are raised here); the builder stays usable."""
        handle = ctypes.c_void_p()
        C.call(C.builder_build, self._handle, ctypes.byref(handle))
        d = Definition(handle)
        # The C definition calls these back whenever it is compiled.
        d._keep = [b for b in self._bindings.values() if b is not None]
        return d

    def __del__(self):
        handle, self._handle = getattr(self, "_handle", None), None
        release = getattr(C, "builder_release", None)  # None at shutdown
        if handle and release:
            release(handle)


def _function_property(function: str):
    def get(self):
        b = self._bindings.get(function)
        return b.target if b else None

    def set(self, fn):
        self._set_function(function, fn)

    return property(get, set, doc=f"The definition's {function} (None: left out).")


class AttentionDef(_Builder):
    """Transformer-style attention (the C++ AttentionDef): score_mod,
    mask_mod and an online_func; build() makes the attnc.Definition."""

    _KIND = "attention"
    _FUNCTIONS = ("score_mod", "mask_mod", "online_func")

    score_mod = _function_property("score_mod")
    mask_mod = _function_property("mask_mod")

    @property
    def online_func(self):
        b = self._bindings.get("online")
        return b.target if b else None

    @online_func.setter
    def online_func(self, f: OnlineFunc):
        if not isinstance(f, OnlineFunc):
            raise TypeError(
                f"online_func must be an attnc.dsl.OnlineFunc, got "
                f"{_type_name(f)}"
            )
        if not hasattr(f, "_online"):
            raise TypeError(
                f"{type(f).__name__}.__init__ must call "
                f"OnlineFunc.__init__(self, online_rowscales, final_rowscales)"
            )
        binding = _Binding(f, "online")

        def arrays(decls):
            names = (ctypes.c_char_p * max(len(decls), 1))(
                *[n.encode() for n, _ in decls]
            )
            inits = (ctypes.c_double * max(len(decls), 1))(
                *[v.value for _, v in decls]
            )
            return names, inits, len(decls)

        on, fi = arrays(f._online), arrays(f._final)
        C.call(C.builder_set_online, self._handle, *on, *fi, _trampoline,
               binding.user)
        self._bindings["online"] = binding


class LinearAttentionDef(_Builder):
    """Linear attention (the C++ LinearAttentionDef): q_mod, k_mod, v_mod
    and decay_mod, each f(x, inputs) or f(x, inputs, b, h, t)."""

    _KIND = "linear"
    _FUNCTIONS = ("q_mod", "k_mod", "v_mod", "decay_mod")

    q_mod = _function_property("q_mod")
    k_mod = _function_property("k_mod")
    v_mod = _function_property("v_mod")
    decay_mod = _function_property("decay_mod")

    def __init__(self, name: str, description: str = "", **functions):
        self._decay_range = (-1.0, 0.0)
        super().__init__(name, description, **functions)

    @property
    def decay_sample_range(self):
        """The range `check` draws the decay input from: (lo, hi)."""
        return self._decay_range

    @decay_sample_range.setter
    def decay_sample_range(self, lo_hi):
        lo, hi = lo_hi
        if not (_is_number(lo) and _is_number(hi)):
            raise TypeError("decay_sample_range must be two numbers (lo, hi)")
        C.call(C.builder_set_decay_sample_range, self._handle, float(lo),
               float(hi))
        self._decay_range = (float(lo), float(hi))
