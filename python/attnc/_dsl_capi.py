"""The C declarations of attnc_c_dsl.h, and calls whose callbacks may raise."""

from __future__ import annotations

import ctypes
import threading

from . import _lib

c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
c_double = ctypes.c_double
c_int = ctypes.c_int
c_size_t = ctypes.c_size_t
POINTER = ctypes.POINTER


class CSymbol(ctypes.Structure):
    """attnc_symbol: 16 opaque bytes, copied freely."""

    _fields_ = [("opaque", ctypes.c_uint64 * 2)]


class TraceCall(ctypes.Structure):
    """attnc_trace_call: one call of a traced function."""

    _fields_ = [
        ("function", c_char_p),
        ("args", POINTER(CSymbol)),
        ("num_args", c_size_t),
        ("inputs", c_void_p),
        ("rowscales", c_void_p),
        ("rowscales_b", c_void_p),
    ]


class KernelOptions(ctypes.Structure):
    """attnc_kernel_options: NULL or 0 fields take the CLI's defaults."""

    _fields_ = [
        ("dtype", c_char_p),
        ("head_dim", c_int),
        ("head_dim_v", c_int),
        ("arch", c_char_p),
        ("skeleton", c_char_p),
        ("config", c_char_p),
        ("backend", c_char_p),
        ("backward", c_int),
        ("standalone", c_int),
    ]


TRACE_FN = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(TraceCall), c_void_p)

_d = _lib.declare
_SYM = POINTER(CSymbol)

text_data = _d("attnc_text_data", [c_void_p], c_char_p)
text_size = _d("attnc_text_size", [c_void_p], c_size_t)
text_release = _d("attnc_text_release", [c_void_p], None)

symbol_unary = _d("attnc_symbol_unary", [c_int, _SYM, _SYM])
symbol_binary = _d("attnc_symbol_binary", [c_int, _SYM, _SYM, _SYM])
symbol_binary_number = _d(
    "attnc_symbol_binary_number", [c_int, _SYM, c_double, c_int, c_int, _SYM]
)
symbol_select = _d(
    "attnc_symbol_select", [_SYM, _SYM, c_double, _SYM, c_double, _SYM]
)
symbol_get_reduce = _d("attnc_symbol_get_reduce", [_SYM, c_char_p, _SYM])
symbol_constant = _d("attnc_symbol_constant", [_SYM, c_double, c_int, _SYM])
symbol_text = _d("attnc_symbol_text", [_SYM, POINTER(c_void_p)])
var_from_text = _d("attnc_var_from_text", [c_char_p, POINTER(c_double)])
var_from_number = _d("attnc_var_from_number", [c_double, POINTER(c_double)])

inputs_get = _d("attnc_inputs_get", [c_void_p, c_char_p, _SYM])
inputs_head_dim = _d("attnc_inputs_head_dim", [c_void_p, _SYM])
rowscales_get = _d("attnc_rowscales_get", [c_void_p, c_char_p, _SYM])

result_set = _d("attnc_trace_result_set", [c_void_p, _SYM])
result_set_o_scale = _d("attnc_trace_result_set_o_scale", [c_void_p, _SYM])
result_set_o_scale_number = _d(
    "attnc_trace_result_set_o_scale_number", [c_void_p, c_double]
)
result_set_o_scale_b = _d("attnc_trace_result_set_o_scale_b", [c_void_p, _SYM])
result_set_o_scale_b_number = _d(
    "attnc_trace_result_set_o_scale_b_number", [c_void_p, c_double]
)
result_set_rowscale = _d(
    "attnc_trace_result_set_rowscale", [c_void_p, c_char_p, _SYM]
)
result_fail = _d("attnc_trace_result_fail", [c_void_p, c_char_p, c_int], None)

builder_new = _d("attnc_builder_new", [c_char_p, c_char_p, POINTER(c_void_p)])
builder_release = _d("attnc_builder_release", [c_void_p], None)
builder_set_description = _d("attnc_builder_set_description", [c_void_p, c_char_p])
builder_declare_input = _d(
    "attnc_builder_declare_input",
    [c_void_p, c_char_p, c_char_p, c_char_p, c_int, c_double, c_double],
)
builder_requires_grad = _d("attnc_builder_requires_grad", [c_void_p])
builder_set_function = _d(
    "attnc_builder_set_function", [c_void_p, c_char_p, TRACE_FN, c_void_p]
)
builder_set_online = _d(
    "attnc_builder_set_online",
    [
        c_void_p,
        POINTER(c_char_p),
        POINTER(c_double),
        c_size_t,
        POINTER(c_char_p),
        POINTER(c_double),
        c_size_t,
        TRACE_FN,
        c_void_p,
    ],
)
builder_set_decay_sample_range = _d(
    "attnc_builder_set_decay_sample_range", [c_void_p, c_double, c_double]
)
builder_build = _d("attnc_builder_build", [c_void_p, POINTER(c_void_p)])

definition_from_ir_json = _d(
    "attnc_definition_from_ir_json", [c_char_p, POINTER(c_void_p)]
)
plugin_load = _d("attnc_plugin_load", [c_char_p, POINTER(c_void_p)])
definition_list_size = _d("attnc_definition_list_size", [c_void_p], c_size_t)
definition_list_get = _d(
    "attnc_definition_list_get", [c_void_p, c_size_t, POINTER(c_void_p)]
)
definition_list_release = _d("attnc_definition_list_release", [c_void_p], None)

definition_kind = _d("attnc_definition_kind", [c_void_p], c_char_p)
definition_ir = _d("attnc_definition_ir", [c_void_p, c_char_p, POINTER(c_void_p)])
definition_ir_json = _d("attnc_definition_ir_json", [c_void_p, POINTER(c_void_p)])
definition_emit = _d(
    "attnc_definition_emit", [c_void_p, POINTER(KernelOptions), POINTER(c_void_p)]
)
definition_compile = _d(
    "attnc_definition_compile",
    [c_void_p, POINTER(KernelOptions), POINTER(c_void_p)],
)
load_bundle = _d("attnc_load_bundle", [ctypes.c_char_p])
definition_check = _d(
    "attnc_definition_check",
    [c_void_p, ctypes.c_uint64, POINTER(c_int), POINTER(c_void_p)],
)

# The exception a callback raised on this thread, kept until the C call
# that traced it returns (the C side only has its message).
_pending = threading.local()


def set_pending(error: BaseException) -> None:
    _pending.error = error


def call(fn, *args) -> None:
    """Calls a C entry point that may trace Python functions: a Python
    exception raised inside one comes back as itself; any other failure
    as the attnc exception for its status."""
    _pending.error = None
    status = fn(*args)
    if status == 0:
        return
    error, _pending.error = getattr(_pending, "error", None), None
    if error is not None:
        raise error
    _lib.check(status)


def take_text(fn, *args) -> str:
    """Calls fn(*args, &text) and returns the text, released."""
    handle = c_void_p()
    call(fn, *args, ctypes.byref(handle))
    try:
        return text_data(handle).decode("utf-8", "replace")
    finally:
        text_release(handle)
