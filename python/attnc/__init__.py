"""attnc: an attention compiler. Definitions, kernels and (with PyTorch,
attnc.torch) attention ops, over the C interface libattnc_c."""

from ._lib import (
    CompileError,
    DriverError,
    Error,
    InternalError,
    InvalidArgument,
    NotSupportedYet,
    UserError,
)
from ._definition import Definition, example, examples

__all__ = [
    "CompileError",
    "Definition",
    "DriverError",
    "Error",
    "InternalError",
    "InvalidArgument",
    "NotSupportedYet",
    "UserError",
    "example",
    "examples",
]

# The DSL from Python, definitions from IR JSON and plugins, and what a
# definition prints and generates (docs/python-dsl.md).
from . import dsl
from ._tools import CheckFailed, from_ir_json, load_bundle, load_ir, load_plugin

__all__ += [
    "CheckFailed", "dsl", "from_ir_json", "load_bundle", "load_ir", "load_plugin"
]

# The runtime half: attention objects called on device tensors.
from ._attention import Attention, InputInfo, current_stream  # noqa: E402
from ._block_mask import BlockMask, classify_launches  # noqa: E402

__all__ += ["Attention", "BlockMask", "InputInfo", "classify_launches",
            "current_stream"]
from ._linear import LinearAttention  # noqa: E402

__all__ += ["LinearAttention"]
# Paged KV caches: append, decode and prefill (Attention's paged calls).
from ._paged import DecodePlan, PagedKV, PrefillPlan  # noqa: E402

__all__ += ["DecodePlan", "PagedKV", "PrefillPlan"]
