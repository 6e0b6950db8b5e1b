"""Paged KV caches from Python (attn/runtime/Paged.h through attnc_c.h):
attnc.PagedKV describes a cache, and attnc.Attention's paged calls append
new tokens, decode (dense, or packed: each sequence its own count of
queries) and prefill over it, planned per call or through a plan
made once (DecodePlan, PrefillPlan) whose runs make no decision and
allocate nothing (capturable in a CUDA graph)."""

from __future__ import annotations

import ctypes

from . import _lib
from ._tensors import CTensor

_PAGE_LAYOUTS = {"NHD": 0, "HND": 1}
_TABLE = ("block_table", "seq_lens")
_CSR = ("indptr", "indices", "last_page_len")
_INDEX_NAMES = _TABLE + _CSR


class _CPagedKV(ctypes.Structure):
    _fields_ = [
        ("k_cache", CTensor),
        ("v_cache", CTensor),
        ("layout", ctypes.c_int32),
        ("block_table", CTensor),
        ("seq_lens", CTensor),
        ("indptr", CTensor),
        ("indices", CTensor),
        ("last_page_len", CTensor),
        ("max_seqlen_kv", ctypes.c_int64),
    ]


class _DecodeBounds(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in (
        "batch", "heads", "heads_kv", "queries_per_seq", "max_seqlen_kv",
        "page_size")] + [("max_splits", ctypes.c_int32)]


class _PrefillBounds(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int64) for n in (
        "batch", "heads", "heads_kv", "max_seqlen_q", "max_seqlen_kv",
        "page_size")]


_vp, _sz, _i64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64
_append = _lib.declare("attnc_attention_append_paged", [_vp] * 6)
_decode = _lib.declare("attnc_attention_decode_paged",
                       [_vp] * 6 + [_sz, _vp])
_plan_decode = _lib.declare("attnc_attention_plan_decode", [_vp] * 4)
_release_decode = _lib.declare("attnc_decode_plan_release", [_vp], None)
_run_decode = _lib.declare("attnc_attention_run_decode",
                           [_vp] * 7 + [_sz, _vp, _sz, _vp])
_decode_varlen = _lib.declare("attnc_attention_decode_paged_varlen",
                              [_vp] * 3 + [_i64] + [_vp] * 4 + [_sz, _vp])
_plan_decode_varlen = _lib.declare("attnc_attention_plan_decode_varlen",
                                   [_vp] * 4)
_run_decode_varlen = _lib.declare("attnc_attention_run_decode_varlen",
                                  [_vp] * 8 + [_sz, _vp, _sz, _vp])
_prefill = _lib.declare("attnc_attention_prefill_paged",
                        [_vp] * 3 + [_i64] + [_vp] * 4 + [_sz, _vp])
_plan_prefill = _lib.declare("attnc_attention_plan_prefill", [_vp] * 3)
_release_prefill = _lib.declare("attnc_prefill_plan_release", [_vp], None)
_run_prefill = _lib.declare("attnc_attention_run_prefill",
                            [_vp] * 8 + [_sz, _vp])


def _bad(where, argument, what):
    return _lib.InvalidArgument(f"{where}: argument '{argument}': {what}")


def _count(where, name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(where, name, f"{value!r}; expected an int")
    if value < minimum:
        raise _bad(where, name, f"{value} is below {minimum}")
    return value


class PagedKV:
    """A paged KV cache: k_cache and v_cache [num_pages, page_size, Hkv, D]
    (page_layout "NHD") or [num_pages, Hkv, page_size, D] ("HND"), the
    page size a power of two; each sequence's pages as a block table
    (block_table int32 [B, max_pages], seq_lens int32 [B]) or in CSR form
    (indptr int32 [B+1], indices int32 [nnz], last_page_len int32 [B], 1
    to page_size). The index tensors are device data, never read on the
    host (a malformed sequence's rows come out NaN); max_seqlen_kv bounds
    every sequence's keys. Holds its tensors (not copies)."""

    def __init__(self, k_cache, v_cache, block_table=None, seq_lens=None,
                 indptr=None, indices=None, last_page_len=None,
                 max_seqlen_kv=None, page_layout="NHD"):
        where = "attnc.PagedKV"
        if page_layout not in _PAGE_LAYOUTS:
            raise _bad(where, "page_layout",
                       f"{page_layout!r} is not 'NHD' or 'HND'")
        given = {"block_table": block_table, "seq_lens": seq_lens,
                 "indptr": indptr, "indices": indices,
                 "last_page_len": last_page_len}
        table = [n for n in _TABLE if given[n] is not None]
        csr = [n for n in _CSR if given[n] is not None]
        if table and csr:
            raise _bad(where, csr[0],
                       "given with a block table; give block_table and "
                       "seq_lens, or indptr, indices and last_page_len")
        if not table and not csr:
            raise _bad(where, "block_table",
                       "None, and no CSR pages either; give block_table "
                       "and seq_lens, or indptr, indices and last_page_len")
        for name in (_TABLE if table else _CSR):
            if given[name] is None:
                raise _bad(where, name,
                           "None, and the other tensors of its form are "
                           "given")
        if max_seqlen_kv is None:
            raise _bad(where, "max_seqlen_kv",
                       "None; a bound on every sequence's keys is needed "
                       "(the lengths are device data)")
        self.max_seqlen_kv = _count(where, "max_seqlen_kv", max_seqlen_kv, 0)
        self.k_cache, self.v_cache = k_cache, v_cache
        self.page_layout = page_layout
        self.tensors = given
        self.form = "block_table" if table else "csr"

    @property
    def page_size(self) -> int:
        return _shape(self.k_cache)[1 if self.page_layout == "NHD" else 2]

    @property
    def heads_kv(self) -> int:
        return _shape(self.k_cache)[2 if self.page_layout == "NHD" else 1]

    @property
    def batch(self) -> int:
        """The sequences (seq_lens' or last_page_len's length)."""
        if self.form == "block_table":
            return _shape(self.tensors["seq_lens"])[0]
        return _shape(self.tensors["last_page_len"])[0]

    def __repr__(self):
        return (f"attnc.PagedKV({self.form}, page_layout="
                f"{self.page_layout!r}, page_size={self.page_size}, "
                f"max_seqlen_kv={self.max_seqlen_kv})")


def _shape(t):
    """A tensor's shape as ints (a torch tensor's, or its
    __cuda_array_interface__'s)."""
    shape = getattr(t, "shape", None)
    if shape is None:
        shape = t.__cuda_array_interface__["shape"]
    return tuple(int(n) for n in shape)


def _paged_arg(where, kv):
    if not isinstance(kv, PagedKV):
        raise _bad(where, "kv", f"a {type(kv).__name__}; expected an "
                   "attnc.PagedKV")
    return kv


def _kv_struct(kv, addresses, at):
    """The attnc_paged_kv of kv, its tensors' attnc_tensors copied from
    the packed addresses (at: name -> index into addresses; None for a
    tensor not given: data NULL)."""
    c = _CPagedKV()
    c.layout = _PAGE_LAYOUTS[kv.page_layout]
    c.max_seqlen_kv = kv.max_seqlen_kv
    for name in ("k_cache", "v_cache") + _INDEX_NAMES:
        address = addresses[at[name]] if name in at else None
        if address is not None:
            ctypes.memmove(ctypes.addressof(c)
                           + getattr(_CPagedKV, name).offset, address,
                           ctypes.sizeof(CTensor))
    return c


def _pack(att, where, stream, named, kv, inputs):
    """The call's packed tensors: named ((argument, tensor or None) of the
    call) then kv's caches and index tensors; returns (keep, addresses,
    at_inputs, n_inputs, stream, the attnc_paged_kv or None)."""
    from ._attention import pack_call

    names = [n for n, _ in named]
    objs = [t for _, t in named]
    at = {}
    if kv is not None:
        for name in ("k_cache", "v_cache") + _INDEX_NAMES:
            t = (kv.k_cache if name == "k_cache" else kv.v_cache
                 if name == "v_cache" else kv.tensors[name])
            at[name] = len(objs)
            names.append(f"kv.{name}")
            objs.append(t)
    keep, a, at_inputs, _, n_in, _, s = pack_call(att, where, stream, names,
                                                  objs, inputs, None)
    c = None if kv is None else _kv_struct(kv, a, at)
    return keep, a, at_inputs, n_in, s, c


class DecodePlan:
    """A plan for paged decode calls within its bounds, of one Attention
    (Attention.plan_decode): workspace_bytes is the device memory (16-byte
    aligned) each run needs. packed: made for packed calls
    (plan_decode(..., packed=True), run by run_decode_varlen) rather than
    dense ones (run_decode)."""

    def __init__(self, att, handle, workspace_bytes, bounds, packed=False):
        self.attention = att
        self._handle = handle
        self.workspace_bytes = workspace_bytes
        self.bounds = bounds
        self.packed = packed

    def __del__(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            _release_decode(handle)


class PrefillPlan:
    """A plan for paged prefill calls within its bounds, of one Attention
    (Attention.plan_prefill); no workspace."""

    def __init__(self, att, handle, bounds):
        self.attention = att
        self._handle = handle
        self.bounds = bounds

    def __del__(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            _release_prefill(handle)


def _workspace_address(where, workspace):
    if workspace is None:
        return None
    if isinstance(workspace, int):
        return workspace
    ptr = getattr(workspace, "data_ptr", None)
    if ptr is not None:
        return ptr()
    cai = getattr(workspace, "__cuda_array_interface__", None)
    if cai is not None:
        return cai["data"][0]
    raise _bad(where, "workspace",
               f"a {type(workspace).__name__}; expected a device tensor or "
               "an int (a device pointer)")


def _decode_plan_arg(att, where, plan, packed):
    """plan: a DecodePlan of att made for packed calls or dense ones."""
    if not isinstance(plan, DecodePlan) or plan.attention is not att:
        raise _bad(where, "plan", "not a DecodePlan of this object "
                   "(make it with this object's plan_decode)")
    if plan.packed != packed:
        made, want = (("dense", "packed=True") if packed
                      else ("packed", "packed=False"))
        raise _bad(where, "plan", f"made for {made} calls; expected a plan "
                   f"of plan_decode(..., {want})")
    return plan


class PagedCalls:
    """attnc.Attention's paged calls (a base of Attention)."""

    def append_paged(self, k, v, kv, slot_mapping, stream=None):
        """Writes new tokens k [T,Hkv,D] and v [T,Hkv,DV] into kv's caches:
        token i to slot slot_mapping[i] (int32 or int64 [T] on the device:
        page slot // page_size, position slot % page_size; a negative slot
        is skipped)."""
        where = "attnc.Attention.append_paged"
        _paged_arg(where, kv)
        keep, a, _, _, s, c = _pack(
            self, where, stream, [("k", k), ("v", v),
                                  ("slot_mapping", slot_mapping)], kv, None)
        _lib.check(_append(self._handle, a[0], a[1], ctypes.byref(c), a[2],
                           s))

    def decode_paged(self, q, kv, out, finals=None, inputs=None,
                     stream=None):
        """Decode over kv: q and out [B,H,Sq,D] (bhsd) or [B,Sq,H,D] (bshd),
        1 to 16 queries a sequence aligned to the end of its keys, finals
        [F,B,H,Sq] float32 or None. Plans the call itself."""
        where = "attnc.Attention.decode_paged"
        _paged_arg(where, kv)
        keep, a, at_inputs, n_in, s, c = _pack(
            self, where, stream, [("q", q), ("out", out),
                                  ("finals", finals)], kv, inputs)
        _lib.check(_decode(self._handle, a[0], ctypes.byref(c), a[1], a[2],
                           at_inputs, n_in, s))

    def plan_decode(self, batch, heads, heads_kv, queries_per_seq,
                    max_seqlen_kv, page_size, max_splits=0, packed=False):
        """A DecodePlan for calls within these bounds on the current device
        (compiles and loads the kernels, decides the split). packed: for
        packed calls (run_decode_varlen), queries_per_seq then bounding
        each sequence's count of queries."""
        where = "attnc.Attention.plan_decode"
        if not isinstance(packed, bool):
            raise _bad(where, "packed", f"{packed!r}; expected a bool")
        b = _DecodeBounds(
            batch=_count(where, "batch", batch, 1),
            heads=_count(where, "heads", heads, 1),
            heads_kv=_count(where, "heads_kv", heads_kv, 1),
            queries_per_seq=_count(where, "queries_per_seq",
                                   queries_per_seq, 1),
            max_seqlen_kv=_count(where, "max_seqlen_kv", max_seqlen_kv, 0),
            page_size=_count(where, "page_size", page_size, 1),
            max_splits=_count(where, "max_splits", max_splits, 0))
        handle, size = ctypes.c_void_p(), ctypes.c_size_t()
        make = _plan_decode_varlen if packed else _plan_decode
        _lib.check(make(self._handle, ctypes.byref(b), ctypes.byref(handle),
                        ctypes.byref(size)))
        return DecodePlan(self, handle.value, size.value,
                          {n: getattr(b, n) for n, _ in b._fields_}, packed)

    def run_decode(self, plan, q, kv, out, finals=None, workspace=None,
                   inputs=None, stream=None):
        """One decode call of plan (arguments as decode_paged's), with
        workspace (a device tensor or pointer of plan.workspace_bytes or
        more; None when it needs none): no decision, allocation or
        synchronisation."""
        where = "attnc.Attention.run_decode"
        _decode_plan_arg(self, where, plan, False)
        _paged_arg(where, kv)
        ws = _workspace_address(where, workspace)
        size = plan.workspace_bytes if ws is not None else 0
        keep, a, at_inputs, n_in, s, c = _pack(
            self, where, stream, [("q", q), ("out", out),
                                  ("finals", finals)], kv, inputs)
        _lib.check(_run_decode(self._handle, plan._handle, a[0],
                               ctypes.byref(c), a[1], a[2], ws, size,
                               at_inputs, n_in, s))

    def decode_paged_varlen(self, q, cu_seqlens_q, max_seqlen_q, kv, out,
                            finals=None, inputs=None, stream=None):
        """Packed (THD) decode over kv, each sequence its own count of
        queries: q [Tq,H,D] and out [Tq,H,DV], sequence b's queries the
        tokens cu_seqlens_q[b] to cu_seqlens_q[b+1] (int32 [B+1] on the
        device), 0 to max_seqlen_q (1 to 16) of them, query i of n at
        position L - n + i of its L keys; finals [F,H,Tq] float32 or None.
        Plans the call itself."""
        where = "attnc.Attention.decode_paged_varlen"
        _paged_arg(where, kv)
        _count(where, "max_seqlen_q", max_seqlen_q, 1)
        keep, a, at_inputs, n_in, s, c = _pack(
            self, where, stream, [("q", q), ("cu_seqlens_q", cu_seqlens_q),
                                  ("out", out), ("finals", finals)], kv,
            inputs)
        _lib.check(_decode_varlen(self._handle, a[0], a[1], max_seqlen_q,
                                  ctypes.byref(c), a[2], a[3], at_inputs,
                                  n_in, s))

    def run_decode_varlen(self, plan, q, cu_seqlens_q, kv, out, finals=None,
                          workspace=None, inputs=None, stream=None):
        """One packed decode call of plan (plan_decode(..., packed=True);
        arguments as decode_paged_varlen's, each sequence's count at most
        the plan's queries_per_seq), with workspace as run_decode's: no
        decision, allocation or synchronisation (capturable; a replay may
        change cu_seqlens_q's counts)."""
        where = "attnc.Attention.run_decode_varlen"
        _decode_plan_arg(self, where, plan, True)
        _paged_arg(where, kv)
        ws = _workspace_address(where, workspace)
        size = plan.workspace_bytes if ws is not None else 0
        keep, a, at_inputs, n_in, s, c = _pack(
            self, where, stream, [("q", q), ("cu_seqlens_q", cu_seqlens_q),
                                  ("out", out), ("finals", finals)], kv,
            inputs)
        _lib.check(_run_decode_varlen(self._handle, plan._handle, a[0], a[1],
                                      ctypes.byref(c), a[2], a[3], ws, size,
                                      at_inputs, n_in, s))

    def prefill_paged(self, q, cu_seqlens_q, max_seqlen_q, kv, out,
                      finals=None, inputs=None, stream=None):
        """Paged prefill: new query tokens q [Tq,H,D] (cu_seqlens_q int32
        [B+1] on the device; max_seqlen_q their longest run) over each
        sequence's keys in kv (the new ones appended first), query i of a
        sequence of Sq queries and L keys at position L - Sq + i; out
        [Tq,H,DV], finals [F,H,Tq] float32 or None."""
        where = "attnc.Attention.prefill_paged"
        _paged_arg(where, kv)
        _count(where, "max_seqlen_q", max_seqlen_q, 0)
        keep, a, at_inputs, n_in, s, c = _pack(
            self, where, stream, [("q", q), ("cu_seqlens_q", cu_seqlens_q),
                                  ("out", out), ("finals", finals)], kv,
            inputs)
        _lib.check(_prefill(self._handle, a[0], a[1], max_seqlen_q,
                            ctypes.byref(c), a[2], a[3], at_inputs, n_in, s))

    def plan_prefill(self, batch, heads, heads_kv, max_seqlen_q,
                     max_seqlen_kv, page_size):
        """A PrefillPlan for calls within these bounds on the current
        device (compiles and loads the kernel, fixes the grid)."""
        where = "attnc.Attention.plan_prefill"
        b = _PrefillBounds(
            batch=_count(where, "batch", batch, 1),
            heads=_count(where, "heads", heads, 1),
            heads_kv=_count(where, "heads_kv", heads_kv, 1),
            max_seqlen_q=_count(where, "max_seqlen_q", max_seqlen_q, 1),
            max_seqlen_kv=_count(where, "max_seqlen_kv", max_seqlen_kv, 0),
            page_size=_count(where, "page_size", page_size, 1))
        handle = ctypes.c_void_p()
        _lib.check(_plan_prefill(self._handle, ctypes.byref(b),
                                 ctypes.byref(handle)))
        return PrefillPlan(self, handle.value,
                           {n: getattr(b, n) for n, _ in b._fields_})

    def run_prefill(self, plan, q, cu_seqlens_q, kv, out, finals=None,
                    inputs=None, stream=None):
        """One paged prefill call of plan (arguments as prefill_paged's):
        no decision, allocation or synchronisation."""
        where = "attnc.Attention.run_prefill"
        if not isinstance(plan, PrefillPlan) or plan.attention is not self:
            raise _bad(where, "plan", "not a PrefillPlan of this object "
                       "(make it with this object's plan_prefill)")
        _paged_arg(where, kv)
        keep, a, at_inputs, n_in, s, c = _pack(
            self, where, stream, [("q", q), ("cu_seqlens_q", cu_seqlens_q),
                                  ("out", out), ("finals", finals)], kv,
            inputs)
        _lib.check(_run_prefill(self._handle, plan._handle, a[0], a[1],
                                ctypes.byref(c), a[2], a[3], at_inputs,
                                n_in, s))
