"""attnc.torch's paged KV calls (attnc._paged on torch tensors): append new
tokens into a cache, decode and prefill over it, each call planned for
itself or run from a plan made once (its workspace allocated by PyTorch).
Eager inference calls: no autograd, not traced by torch.compile (a graph
break), capturable in a CUDA graph when run from a plan. Each runs on its
tensors' device, as attention() does."""

from typing import Optional

import torch

from . import _fastpack
from ._paged import DecodePlan, PagedKV, PrefillPlan
from .torch import _device_index, attention_object, register


def paged_kv(k_cache, v_cache, block_table=None, seq_lens=None, indptr=None,
             indices=None, last_page_len=None, max_seqlen_k=None,
             page_layout="NHD") -> PagedKV:
    """An attnc.PagedKV of torch tensors (see it for the two forms).
    max_seqlen_k bounds every sequence's keys; None: the most the index
    tensors' shapes allow (block_table's columns, or indices' entries,
    times the page size), read from shapes, never from device data."""
    if max_seqlen_k is None:
        page = k_cache.shape[1 if page_layout == "NHD" else 2]
        pages = (block_table.shape[1] if block_table is not None
                 else indices.shape[0] if indices is not None else 0)
        max_seqlen_k = int(pages) * int(page)
    return PagedKV(k_cache, v_cache, block_table=block_table,
                   seq_lens=seq_lens, indptr=indptr, indices=indices,
                   last_page_len=last_page_len, max_seqlen_kv=max_seqlen_k,
                   page_layout=page_layout)


def _object(definition, q, kv, layout):
    """The cached Attention of the call (q's dtype, head dims from q and
    the value cache, on q's device)."""
    _kv(kv)
    return attention_object(register(definition), q.dtype, int(q.shape[-1]),
                            int(kv.v_cache.shape[-1]), layout,
                            _device_index(q))


def _kv(kv):
    if not isinstance(kv, PagedKV):
        from ._lib import InvalidArgument
        raise InvalidArgument(
            f"attnc.torch: argument 'kv': a {type(kv).__name__}; expected "
            "an attnc.PagedKV (attnc.torch.paged_kv)")
    return kv


def _inputs(att, inputs):
    """Scalars given as tensors read on the host (as attention()'s)."""
    if not inputs:
        return inputs
    values = {}
    for name, value in inputs.items():
        decl = att._decl.get(name)
        if (isinstance(value, torch.Tensor) and decl is not None
                and decl.shape == "scalar"):
            value = value.item()
        values[name] = value
    return values


def _decode_rows(q, layout):
    """(B, H, Sq) of a decode call's q."""
    if layout == "bhsd":
        return int(q.shape[0]), int(q.shape[1]), int(q.shape[2])
    return int(q.shape[0]), int(q.shape[2]), int(q.shape[1])


def paged_append(k, v, kv, slot_mapping, definition="mha"):
    """Writes new tokens k [T,Hkv,D] and v [T,Hkv,DV] into kv's caches,
    token i to slot slot_mapping[i] (int32 or int64 [T]; page slot //
    page_size, position slot % page_size; a negative slot is skipped), on
    the current stream of k's device. definition: the attention whose
    calls read the cache (its dtype and head dims are the caches')."""
    att = _object(definition, k, kv, "bshd")
    _fastpack.run_on(k.get_device(), att.append_paged, k, v, kv,
                     slot_mapping)


def plan_paged_decode(definition, q, kv, layout: str = "bhsd",
                      max_splits: int = 0) -> DecodePlan:
    """A plan for paged_decode calls of q's batch, heads and queries over
    caches of kv's heads and page size, keys bounded by kv.max_seqlen_kv;
    its workspace (.workspace, a uint8 tensor on q's device) is allocated
    here. Runs of it decide nothing and allocate nothing but outputs."""
    att = _object(definition, q, kv, layout)
    b, h, sq = _decode_rows(q, layout)
    index = q.get_device()
    plan = _fastpack.run_on(index, att.plan_decode, b, h, kv.heads_kv, sq,
                            kv.max_seqlen_kv, kv.page_size, max_splits)
    plan.workspace = torch.empty(max(plan.workspace_bytes, 16),
                                 dtype=torch.uint8, device=q.device)
    plan.layout = layout
    return plan


def paged_decode(q, kv, definition, inputs: Optional[dict] = None,
                 layout: str = "bhsd", return_finals: bool = False,
                 plan: Optional[DecodePlan] = None, out=None):
    """Decode over a paged cache: q [B,H,Sq,D] (layout "bhsd") or
    [B,Sq,H,D] ("bshd"), 1 to 16 queries a sequence, aligned to the end of
    its keys (a causal mask lets query i of Sq see the keys up to L - Sq +
    i). Returns out (q's layout, the value cache's head dim), or (out,
    finals [F,B,H,Sq] float32) with return_finals. plan: one from
    plan_paged_decode (then no decision is made; out may be given, for a
    CUDA graph's fixed addresses)."""
    if plan is not None:
        att = plan.attention
        layout = plan.layout
    else:
        att = _object(definition, q, kv, layout)
    b, h, sq = _decode_rows(q, layout)
    if out is None:
        out = q.new_empty(q.shape[:-1] + (kv.v_cache.shape[-1],))
    # The runtime requires the finals of a definition that has them.
    finals = (q.new_empty((len(att.final_names), b, h, sq),
                          dtype=torch.float32)
              if att.final_names else None)
    values = _inputs(att, inputs)
    index = q.get_device()
    if plan is None:
        _fastpack.run_on(index, att.decode_paged, q, kv, out, finals, values)
    else:
        _fastpack.run_on(index, att.run_decode, plan, q, kv, out, finals,
                         plan.workspace, values)
    return (out, finals) if return_finals else out


def plan_paged_prefill(definition, q, cu_seqlens_q, max_seqlen_q: int,
                       kv) -> PrefillPlan:
    """A plan for paged_prefill calls of cu_seqlens_q's sequences, q's
    heads, at most max_seqlen_q new tokens a sequence and kv.max_seqlen_kv
    keys, kv's heads and page size."""
    att = _object(definition, q, kv, "bshd")
    return _fastpack.run_on(
        q.get_device(), att.plan_prefill, int(cu_seqlens_q.shape[0]) - 1,
        int(q.shape[1]), kv.heads_kv, int(max_seqlen_q), kv.max_seqlen_kv,
        kv.page_size)


def paged_prefill(q, cu_seqlens_q, max_seqlen_q: int, kv, definition,
                  inputs: Optional[dict] = None, return_finals: bool = False,
                  plan: Optional[PrefillPlan] = None, out=None):
    """Paged prefill: new query tokens q [Tq,H,D], sequence b's the tokens
    cu_seqlens_q[b] to cu_seqlens_q[b+1] (int32 [B+1] on the device;
    max_seqlen_q the longest), over each sequence's keys in kv (append
    the new tokens first, paged_append): query i of Sq at position L - Sq
    + i of its L keys. Returns out [Tq,H,DV], or (out, finals [F,H,Tq]
    float32) with return_finals. plan: one from plan_paged_prefill."""
    att = plan.attention if plan is not None else _object(definition, q, kv,
                                                          "bshd")
    if out is None:
        out = q.new_empty(q.shape[:-1] + (kv.v_cache.shape[-1],))
    finals = (q.new_empty((len(att.final_names), q.shape[1], q.shape[0]),
                          dtype=torch.float32)
              if att.final_names else None)
    values = _inputs(att, inputs)
    index = q.get_device()
    if plan is None:
        _fastpack.run_on(index, att.prefill_paged, q, cu_seqlens_q,
                         int(max_seqlen_q), kv, out, finals, values)
    else:
        _fastpack.run_on(index, att.run_prefill, plan, q, cu_seqlens_q, kv,
                         out, finals, values)
    return (out, finals) if return_finals else out
