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

    # What `attnc show/emit/compile/check` give for it (attnc/_tools.py).
    @property
    def kind(self) -> str:
        """"attention" or "linear"."""
        from . import _tools

        return _tools.kind(self)

    def ir(self, after: str | None = None) -> str:
        """The IR after each pass (or only after `after`) and the mask
        analysis, as `attnc show` prints them."""
        from . import _tools

        return _tools.ir(self, after)

    def ir_json(self) -> str:
        """The final graph as IR JSON, as `attnc show --json` prints it."""
        from . import _tools

        return _tools.ir_json(self)

    show_json = ir_json

    def emit(self, **options) -> str:
        """The generated CUDA source, as `attnc emit` writes it: dtype,
        head_dim, head_dim_v, arch, skeleton, config, backend, backward,
        standalone."""
        from . import _tools

        return _tools.emit(self, options)

    def compile(self, **options) -> dict:
        """The kernel compiled by NVRTC through the cache (`attnc compile`;
        no GPU needed): a dict of kernel, key, source, compile_seconds,
        lookup_seconds, cubin_bytes. Options as emit's."""
        from . import _tools

        return _tools.compile(self, options)

    def check(self, seed: int = 20261126) -> str:
        """The double-precision reference check (`attnc check`): its report
        when it passes; raises attnc.CheckFailed (with .report) otherwise."""
        from . import _tools

        return _tools.check(self, seed)

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
