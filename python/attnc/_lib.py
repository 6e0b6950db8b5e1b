"""Loads libattnc_c (the C interface) and turns its statuses into exceptions."""

from __future__ import annotations

import ctypes
import importlib.util
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


# The extension attnc._fastcall (capi/python/fastcall.c): attnc.torch's
# packed forward call without ctypes. It is built next to libattnc_c (the
# build folder's capi/, or the installed package), links it by its soname
# and so calls the copy loaded above; a library of another name
# ($ATTNC_LIBRARY naming a stand-in) has no extension beside it.
# ATTNC_FASTCALL=0 keeps the ctypes call.
FASTCALL_NAME = "_fastcall.abi3.so"
fastcall_path = None
fastcall_missing = None  # why forward_call is None


def _load_fastcall():
    global fastcall_path, fastcall_missing
    if os.environ.get("ATTNC_FASTCALL", "1") == "0":
        fastcall_missing = "ATTNC_FASTCALL=0"
        return None
    path = library_path.parent / FASTCALL_NAME
    if library_path.name != "libattnc_c.so" or not path.is_file():
        fastcall_missing = f"no {FASTCALL_NAME} next to {library_path}"
        return None
    try:
        spec = importlib.util.spec_from_file_location("attnc._fastcall",
                                                      path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except ImportError as error:  # a CPython older than 3.10, another ABI
        fastcall_missing = f"{path}: {error}"
        return None
    if module.ABI_VERSION != ABI_VERSION:
        fastcall_missing = (f"{path} links a library of C ABI version "
                            f"{module.ABI_VERSION}")
        return None
    fastcall_path = path
    return module.forward_call


# forward_call(call, q, k, v, out, finals, stream) -> status, or None where
# the extension is not there (fastcall_missing says why).
forward_call = _load_fastcall()
