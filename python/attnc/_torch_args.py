"""attnc.torch's argument checks that need no PyTorch (so the CPU tests
cover them): the layout against a packed batch's arguments, a block mask
against the call."""

from __future__ import annotations

from . import _lib
from ._block_mask import BlockMask

LAYOUTS = ("bhsd", "bshd", "thd")


def _bad(where, argument, what):
    return _lib.InvalidArgument(f"{where}: argument '{argument}': {what}")


def _length(where, name, value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(where, name,
                   f"{value!r}; a packed batch (cu_seqlens_q) needs the "
                   "longest sequence's length as an int")
    if value < 0:
        raise _bad(where, name, f"{value} is negative")


def check_call(where, layout, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
               max_seqlen_k, block_mask):
    """The call's layout (None: "thd" for a packed batch, else "bhsd") once
    the arguments agree; InvalidArgument naming the one that does not."""
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    if layout is None:
        layout = "thd" if varlen else "bhsd"
    elif layout not in LAYOUTS:
        raise _bad(where, "layout",
                   f"{layout!r} is not 'bhsd', 'bshd' or 'thd'")
    if block_mask is not None and not isinstance(block_mask, BlockMask):
        raise _bad(where, "block_mask",
                   f"a {type(block_mask).__name__}; expected an "
                   "attnc.BlockMask (attnc.Attention.make_block_mask)")
    if not varlen:
        if layout == "thd":
            raise _bad(where, "cu_seqlens_q",
                       "None with layout 'thd'; a packed batch needs "
                       "cu_seqlens_q and cu_seqlens_k")
        for name, value in (("max_seqlen_q", max_seqlen_q),
                            ("max_seqlen_k", max_seqlen_k)):
            if value is not None:
                raise _bad(where, name,
                           "given without cu_seqlens_q/cu_seqlens_k; it "
                           "is for packed batches")
        return layout
    if cu_seqlens_q is None or cu_seqlens_k is None:
        missing = "cu_seqlens_q" if cu_seqlens_q is None else "cu_seqlens_k"
        raise _bad(where, missing,
                   "None; a packed batch needs both cu_seqlens_q and "
                   "cu_seqlens_k")
    if layout != "thd":
        raise _bad(where, "layout",
                   f"{layout!r} with cu_seqlens_q; a packed batch is 'thd' "
                   "(q [Tq,H,D], k and v [Tk,Hk,D])")
    _length(where, "max_seqlen_q", max_seqlen_q)
    _length(where, "max_seqlen_k", max_seqlen_k)
    if block_mask is not None:
        raise _bad(where, "block_mask",
                   "given with cu_seqlens_q; block masks are made for dense "
                   "layouts (bhsd, bshd): a packed batch's sequences already "
                   "bound which keys a query sees")
    return layout


def check_mask_for_backward(where, block_mask, needs_grad):
    """A call that will run a backward needs a mask made for one."""
    if needs_grad and block_mask is not None and not block_mask.for_backward:
        raise _bad(where, "block_mask",
                   "made without for_backward=True, and a gradient is "
                   "asked for (q, k, v or an input requires grad): make it "
                   "with for_backward=True so the backward has its lists")


def check_input_value(where, name, value):
    """A custom input's value that is not a tensor: a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(where, f"inputs[{name!r}]",
                   f"a {type(value).__name__}; values are numbers or "
                   "tensors")
