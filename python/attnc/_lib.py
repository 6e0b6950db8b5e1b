"""Loads libattnc_c (the C interface) and turns its statuses into exceptions."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

ABI_VERSION = 1


class Error(Exception):
    """Base of every error attnc raises; the message is the C++ one."""


class UserError(Error):
    """A definition or an input is wrong (the message says what and where)."""


class InvalidArgument(UserError):
    """A call's argument is wrong; nothing was launched."""


class NotSupportedYet(Error):
    """A planned feature that is not built yet."""


class CompileError(Error):
    """NVRTC rejected generated code (a bug in attnc)."""


class DriverError(Error):
    """The CUDA driver failed or is missing."""


class InternalError(Error):
    """A bug in attnc."""


_STATUS_ERRORS = {
    1: UserError,
    2: InvalidArgument,
    3: NotSupportedYet,
    4: CompileError,
    5: DriverError,
    6: InternalError,
}


def _candidates():
    """Where libattnc_c may be, in order: $ATTNC_LIBRARY, next to this
    package (an installed wheel), then the source tree's build folders."""
    env = os.environ.get("ATTNC_LIBRARY")
    if env:
        yield Path(env)
        return
    here = Path(__file__).resolve().parent
    yield here / "libattnc_c.so"
    root = here.parent.parent
    for build in ("build", "build-python"):
        yield root / build / "capi" / "libattnc_c.so"


def _load():
    tried = []
    for path in _candidates():
        tried.append(str(path))
        if path.is_file():
            lib = ctypes.CDLL(str(path))
            break
    else:
        raise ImportError(
            "attnc: libattnc_c.so not found (looked in: "
            + ", ".join(tried)
            + "); build it (cmake --build build --target attnc_c) or set "
            "ATTNC_LIBRARY to its path"
        )
    lib.attnc_abi_version.restype = ctypes.c_int
    lib.attnc_abi_version.argtypes = []
    version = lib.attnc_abi_version()
    if version != ABI_VERSION:
        raise ImportError(
            f"attnc: {path} speaks C ABI version {version}, this package "
            f"expects {ABI_VERSION}; rebuild one of them"
        )
    lib.attnc_last_error.restype = ctypes.c_char_p
    lib.attnc_last_error.argtypes = []
    return lib, path


lib, library_path = _load()


def declare(name: str, argtypes, restype=ctypes.c_int):
    """Sets a C function's prototype and returns it (restype c_int for the
    functions that return an attnc_status)."""
    fn = getattr(lib, name)
    fn.argtypes = argtypes
    fn.restype = restype
    return fn


def check(status: int) -> None:
    """Raises the exception for a non-OK status with the C++ message."""
    if status == 0:
        return
    message = lib.attnc_last_error().decode("utf-8", "replace")
    raise _STATUS_ERRORS.get(status, InternalError)(message)
