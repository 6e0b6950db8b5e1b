"""Merging partial attention results of disjoint key sets (shards of a
sequence, a cached prefix and new tokens) by the rule attnc derives from
the definition's online function (attnc_attention_merge_results)."""

from __future__ import annotations

import ctypes

from . import _lib
from ._tensors import pack, view

_vp, _sz = ctypes.c_void_p, ctypes.c_size_t
_merge_kind = _lib.declare("attnc_attention_merge_kind", [_vp, _vp, _vp])
_merge_results = _lib.declare("attnc_attention_merge_results",
                              [_vp, _vp, _vp, _sz, _vp, _vp, _vp])

KINDS = {0: "none", 1: "sum", 2: "log-sum-exp", 3: "combine"}
MAX_PARTS = 8


def merge_kind(att) -> tuple[str, str]:
    """(kind, reason) of att's result merge: "sum", "log-sum-exp",
    "combine" (the definition's own, which merge_results runs), or
    "none" with the analysis' reason why the results do not merge."""
    kind = ctypes.c_int32()
    reason = ctypes.c_char_p()
    _lib.check(_merge_kind(att._handle, ctypes.byref(kind),
                           ctypes.byref(reason)))
    return KINDS[kind.value], (reason.value or b"").decode()


def merge_results(att, outs, finals, out, out_finals=None, stream=None):
    """out (and out_finals) = the merge of the partial results outs[i]
    (each like a forward's out) with their finals[i] ([F,B,H,Sq] float32;
    finals None for a variant with no finals), 2 to 8 parts."""
    from ._attention import _stream

    where = "attnc.Attention.merge_results"
    outs = list(outs)
    if finals is not None:
        finals = list(finals)
        if len(finals) != len(outs):
            raise _lib.InvalidArgument(
                f"{where}: argument 'finals': {len(finals)} tensors for "
                f"{len(outs)} parts; expected one per part")
    if not 2 <= len(outs) <= MAX_PARTS:
        raise _lib.InvalidArgument(
            f"{where}: argument 'outs': {len(outs)} parts; expected 2 to "
            f"{MAX_PARTS}")
    s = _stream(stream)
    tensors = [view(t, where, f"outs[{i}]", s) for i, t in enumerate(outs)]
    if finals is not None:
        tensors += [view(t, where, f"finals[{i}]", s)
                    for i, t in enumerate(finals)]
    tensors.append(view(out, where, "out", s))
    if out_finals is not None:
        tensors.append(view(out_finals, where, "out_finals", s))
    # pack lays the attnc_tensors out back to back: the parts' outs and
    # finals are C arrays at their first one's address.
    buf, base, _, _ = pack(tensors)
    n = len(outs)
    at_finals = base + 32 * n if finals is not None else None
    at_out = base + 32 * (2 * n if finals is not None else n)
    _lib.check(_merge_results(
        att._handle, base, at_finals, n, at_out,
        at_out + 32 if out_finals is not None else None, s))
