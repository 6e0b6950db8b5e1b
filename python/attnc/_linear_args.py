"""attnc.torch.linear_attention's argument checks that need no PyTorch (so
the CPU tests cover them): the layout against cu_seqlens, and a packed
batch's tensors against each other before anything is allocated. The
runtime checks the rest (strides, dtypes, heads) and names the argument."""

from __future__ import annotations

from . import _lib

WHERE = "attnc.torch.linear_attention"
LAYOUTS = ("bshd", "bhsd", "thd")
OFFSET_DTYPES = ("torch.int32", "torch.int64")


def _bad(argument, what):
    return _lib.InvalidArgument(f"{WHERE}: argument '{argument}': {what}")


def layout_of(layout, has_cu_seqlens):
    """The call's layout (None: "thd" for a packed batch, else "bshd") once
    it agrees with cu_seqlens."""
    if layout is None:
        return "thd" if has_cu_seqlens else "bshd"
    if layout not in LAYOUTS:
        raise _bad("layout", f"{layout!r} is not 'bshd', 'bhsd' or 'thd'")
    if layout == "thd" and not has_cu_seqlens:
        raise _bad("cu_seqlens", "None with layout 'thd'; a packed batch "
                   "needs the sequences' offsets")
    if layout != "thd" and has_cu_seqlens:
        raise _bad("layout", f"{layout!r} with cu_seqlens; a packed batch "
                   "is 'thd' (q [T,Hq,D], k [T,Hk,D], v [T,H,DV])")
    return layout


def _shape_text(shape):
    return "[" + ",".join(str(n) for n in shape) + "]"


def packed_sequences(q_shape, k_shape, v_shape, cu_shape, cu_dtype,
                     cu_device, q_device, initial_state_shape):
    """The number of sequences of a packed ("thd") call, after checking
    what the op needs to allocate its outputs: q, k, v of rank 3 over the
    same tokens, cu_seqlens a 1-D int32/int64 tensor of at least one entry
    on q's device, and one initial state a sequence. cu_dtype is str() of
    the tensor's dtype, the devices get_device() (-1 for the CPU)."""
    for name, shape in (("q", q_shape), ("k", k_shape), ("v", v_shape)):
        if len(shape) != 3:
            raise _bad(name, f"{_shape_text(shape)}; with cu_seqlens "
                       "(layout 'thd') it is [T,heads,dim], the sequences "
                       "laid end to end")
    for name, shape in (("k", k_shape), ("v", v_shape)):
        if shape[0] != q_shape[0]:
            raise _bad(name, f"{_shape_text(shape)} has {shape[0]} tokens "
                       f"and q {q_shape[0]}; a packed batch's q, k and v "
                       "hold the same tokens")
    if len(cu_shape) != 1 or cu_shape[0] < 1:
        raise _bad("cu_seqlens", f"{_shape_text(cu_shape)}; expected [B+1] "
                   "(offsets from 0 to T, B the sequences)")
    if cu_dtype not in OFFSET_DTYPES:
        raise _bad("cu_seqlens", f"dtype {cu_dtype}; expected torch.int32 "
                   "(or torch.int64, converted)")
    if cu_device != q_device:
        where = "the CPU" if cu_device < 0 else f"cuda:{cu_device}"
        raise _bad("cu_seqlens", f"on {where}; it must be on q's device "
                   "(its values are read there, never on the host)")
    seqs = cu_shape[0] - 1
    if initial_state_shape is not None and (
            len(initial_state_shape) != 4 or initial_state_shape[0] != seqs):
        raise _bad("initial_state", f"{_shape_text(initial_state_shape)}; "
                   f"expected [{seqs},H,D,DV], one state for each of the "
                   f"{seqs} sequences of cu_seqlens")
    return seqs
