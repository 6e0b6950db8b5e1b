"""Definitions: handles to attention variants the C library knows."""

from __future__ import annotations

import ctypes

from . import _lib

_from_example = _lib.declare(
    "attnc_definition_from_example",
    [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)],
)
_example_names = _lib.declare(
    "attnc_example_names",
    [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)],
)
_name = _lib.declare("attnc_definition_name", [ctypes.c_void_p], ctypes.c_char_p)
_release = _lib.declare("attnc_definition_release", [ctypes.c_void_p], None)


class Definition:
    """An attention variant: owns its C handle and releases it."""

    def __init__(self, handle: ctypes.c_void_p):
        if not handle:
            raise _lib.InternalError("attnc: a NULL definition handle")
        self._handle = handle
        # Read once: torch.compile traces code that reads it, and a plain
        # attribute is traceable where a C call is not.
        self._name = _name(handle).decode()

    @property
    def handle(self) -> ctypes.c_void_p:
        return self._handle

    @property
    def name(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"attnc.Definition({self.name!r})"

    def __del__(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            _release(handle)


def example(name: str) -> Definition:
    """The shipped example called name (as `attnc list` prints it)."""
    out = ctypes.c_void_p()
    _lib.check(_from_example(name.encode(), ctypes.byref(out)))
    return Definition(out)


def examples() -> list[str]:
    """The names of the shipped examples, in registration order."""
    needed = ctypes.c_size_t()
    _lib.check(_example_names(None, 0, ctypes.byref(needed)))
    buf = ctypes.create_string_buffer(needed.value)
    _lib.check(_example_names(buf, needed.value, ctypes.byref(needed)))
    return buf.value.decode().split("\n") if buf.value else []
