"""What a definition prints and generates, and definitions that are IR
graphs (IR JSON files, plugins): attnc_c_dsl.h's second half."""

from __future__ import annotations

import ctypes
import json
import os

from . import _dsl_capi as C
from . import _lib
from ._definition import Definition


class CheckFailed(_lib.Error):
    """The reference check failed; .report is its report."""

    def __init__(self, report: str):
        super().__init__(report)
        self.report = report


def kind(d: Definition) -> str:
    return C.definition_kind(d.handle).decode()


def ir(d: Definition, after) -> str:
    if after is not None and not isinstance(after, str):
        raise TypeError(f"ir(after=...): a pass's name (a str), got "
                        f"{type(after).__name__}")
    return C.take_text(C.definition_ir, d.handle,
                       after.encode() if after else None)


def ir_json(d: Definition) -> str:
    return C.take_text(C.definition_ir_json, d.handle)


_STR_OPTIONS = ("dtype", "arch", "skeleton", "config", "backend")
_INT_OPTIONS = ("head_dim", "head_dim_v")
_BOOL_OPTIONS = ("backward", "standalone")


def _options(options: dict, what: str) -> C.KernelOptions:
    o = C.KernelOptions()
    for key, value in options.items():
        if key in _STR_OPTIONS:
            if not isinstance(value, str):
                raise TypeError(f"{what}({key}=...): expects a str, got "
                                f"{type(value).__name__}")
            setattr(o, key, value.encode())
        elif key in _INT_OPTIONS:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise TypeError(f"{what}({key}=...): expects a positive int, "
                                f"got {value!r}")
            setattr(o, key, value)
        elif key in _BOOL_OPTIONS and not (what == "compile" and key == "standalone"):
            setattr(o, key, int(bool(value)))
        else:
            known = _STR_OPTIONS + _INT_OPTIONS + (
                ("backward",) if what == "compile" else _BOOL_OPTIONS)
            raise TypeError(f"{what}() has no option '{key}'; it takes "
                            f"{', '.join(known)}")
    return o


def emit(d: Definition, options: dict) -> str:
    return C.take_text(C.definition_emit, d.handle,
                       ctypes.byref(_options(options, "emit")))


def compile(d: Definition, options: dict) -> dict:
    return json.loads(C.take_text(C.definition_compile, d.handle,
                                  ctypes.byref(_options(options, "compile"))))


def check(d: Definition, seed: int) -> str:
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise TypeError(f"check(seed=...): expects a non-negative int, got "
                        f"{seed!r}")
    passed = ctypes.c_int()
    report = C.take_text(C.definition_check, d.handle, seed,
                         ctypes.byref(passed))
    if not passed.value:
        raise CheckFailed(report)
    return report


def from_ir_json(text: str) -> Definition:
    """A definition from IR JSON text (`attnc show --json`, or
    Definition.ir_json())."""
    if not isinstance(text, str):
        raise TypeError(f"from_ir_json: expects the JSON text (a str), got "
                        f"{type(text).__name__}")
    handle = ctypes.c_void_p()
    C.call(C.definition_from_ir_json, text.encode(), ctypes.byref(handle))
    return Definition(handle)


def load_ir(path) -> Definition:
    """A definition from an IR JSON file."""
    with open(os.fspath(path), encoding="utf-8") as f:
        return from_ir_json(f.read())


def load_plugin(path) -> list[Definition]:
    """The definitions of a plugin built with attnc_add_plugin (CMake), in
    registration order."""
    lst = ctypes.c_void_p()
    C.call(C.plugin_load, os.fsencode(path), ctypes.byref(lst))
    try:
        out = []
        for i in range(C.definition_list_size(lst)):
            handle = ctypes.c_void_p()
            C.call(C.definition_list_get, lst, i, ctypes.byref(handle))
            out.append(Definition(handle))
        return out
    finally:
        C.definition_list_release(lst)


def load_bundle(path) -> None:
    """Consult the kernel bundle at path (made by `attnc bundle`) before the
    kernel cache and NVRTC for every kernel loaded from now on; attnc.UserError
    naming the file and the fault for one that is not a good bundle."""
    C.call(C.load_bundle, os.fsencode(path))
