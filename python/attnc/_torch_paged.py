"""attnc.torch's paged KV calls (attnc._paged on torch tensors): append new
tokens into a cache, decode and prefill over it, each call planned for
itself or run from a plan made once (its workspace allocated by PyTorch).
Inference calls (no autograd). Each is a torch.library custom op with a
fake implementation (attnc::paged_append, paged_decode, paged_run_decode,
paged_prefill, paged_run_prefill), so torch.compile traces a decode step
without a graph break; a plain eager call skips torch.library's dispatch
and runs the same implementation directly, as attention() does. A plan
crosses an op as an id (plans are Python objects), a PagedKV as its
tensors. Each call runs on its tensors' device; plan runs capture in a
CUDA graph."""

import itertools
import weakref
from typing import List, Optional

import torch

from . import _fastpack
from ._lib import InvalidArgument
from ._paged import DecodePlan, PagedKV, PrefillPlan
from .torch import (_as_tensor, _device_index, _is_compiling, _plain,
                    attention_object, register)


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


# -- plans by id: an op's schema holds no Python object -----------------------

_live = {}
_ids = itertools.count(1)


def _track(plan):
    plan.torch_id = ident = next(_ids)
    _live[ident] = weakref.ref(plan, lambda _, i=ident: _live.pop(i, None))
    return plan


def _plan_by_id(where, ident, kind):
    ref = _live.get(ident)
    plan = None if ref is None else ref()
    if not isinstance(plan, kind):
        raise InvalidArgument(
            f"{where}: argument 'plan': the plan of id {ident} no longer "
            "exists; a compiled graph that runs a plan needs it alive")
    return plan


# -- the implementations (eager calls and the ops' real kernels) --------------

def _append_impl(k, v, kv, slot_mapping, definition):
    att = _object(definition, k, kv, "bshd")
    _fastpack.run_on(k.get_device(), att.append_paged, k, v, kv,
                     slot_mapping)


def _decode_impl(q, kv, definition, inputs, layout, plan, out,
                 workspace=None):
    """(out, finals or None) of a decode call; plan a DecodePlan or None,
    run with workspace (None: the plan's own)."""
    att = plan.attention if plan is not None else _object(definition, q, kv,
                                                          layout)
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
                         plan.workspace if workspace is None else workspace,
                         values)
    return out, finals


def _prefill_impl(q, cu_seqlens_q, max_seqlen_q, kv, definition, inputs,
                  plan, out):
    """(out, finals or None) of a paged prefill call."""
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
    return out, finals


# -- the ops ------------------------------------------------------------------
# A PagedKV crosses as its caches, its five index tensors (None where its
# form has none), the bound and the page layout; custom inputs as
# attention()'s op takes them ('\n'-separated names, 0-d CPU tensors for
# numbers); the output is a mutated argument (the caller's out= or one the
# wrapper allocates), the finals a new tensor ([0,...] where the definition
# has none).

def _kv_args(kv):
    t = kv.tensors
    return (kv.k_cache, kv.v_cache, t["block_table"], t["seq_lens"],
            t["indptr"], t["indices"], t["last_page_len"], kv.max_seqlen_kv,
            kv.page_layout)


def _kv_of(k_cache, v_cache, block_table, seq_lens, indptr, indices,
           last_page_len, max_seqlen_kv, page_layout):
    return PagedKV(k_cache, v_cache, block_table=block_table,
                   seq_lens=seq_lens, indptr=indptr, indices=indices,
                   last_page_len=last_page_len, max_seqlen_kv=max_seqlen_kv,
                   page_layout=page_layout)


def _op_inputs(inputs):
    names = list(inputs.keys()) if inputs else []
    return "\n".join(names), [_as_tensor(inputs[n]) for n in names]


def _op_values(names, values):
    """The op's custom inputs back as a dict (scalars stay 0-d tensors:
    _inputs reads them on the host)."""
    if not names:
        return None
    return dict(zip(names.split("\n"), values))


def _finals_or_empty(q, finals, shape):
    return (finals if finals is not None
            else q.new_empty((0,) + shape, dtype=torch.float32))


@torch.library.custom_op("attnc::paged_append",
                         mutates_args=("k_cache", "v_cache"))
def _append_op(k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor,
               k_cache: torch.Tensor, v_cache: torch.Tensor,
               block_table: Optional[torch.Tensor],
               seq_lens: Optional[torch.Tensor],
               indptr: Optional[torch.Tensor],
               indices: Optional[torch.Tensor],
               last_page_len: Optional[torch.Tensor], max_seqlen_kv: int,
               page_layout: str, definition: str) -> None:
    kv = _kv_of(k_cache, v_cache, block_table, seq_lens, indptr, indices,
                last_page_len, max_seqlen_kv, page_layout)
    _append_impl(k, v, kv, slot_mapping, definition)


@_append_op.register_fake
def _(k, v, slot_mapping, k_cache, v_cache, block_table, seq_lens, indptr,
      indices, last_page_len, max_seqlen_kv, page_layout, definition):
    return None


def _decode_op_impl(q, out, kv_args, definition, layout, input_names,
                    input_values, plan, workspace):
    kv = _kv_of(*kv_args)
    _, finals = _decode_impl(q, kv, definition,
                             _op_values(input_names, input_values), layout,
                             plan, out, workspace)
    b, h, sq = _decode_rows(q, layout)
    return _finals_or_empty(q, finals, (b, h, sq))


def _decode_fake(q, v_cache, definition, layout, plan_id):
    if plan_id:
        att = _plan_by_id("attnc.torch.paged_decode", plan_id,
                          DecodePlan).attention
    else:
        att = attention_object(register(definition), q.dtype,
                               int(q.shape[-1]), int(v_cache.shape[-1]),
                               layout, _device_index(q))
    b, h, sq = _decode_rows(q, layout)
    return q.new_empty((len(att.final_names), b, h, sq), dtype=torch.float32)


@torch.library.custom_op("attnc::paged_decode", mutates_args=("out",))
def _decode_op(q: torch.Tensor, out: torch.Tensor, k_cache: torch.Tensor,
               v_cache: torch.Tensor, block_table: Optional[torch.Tensor],
               seq_lens: Optional[torch.Tensor],
               indptr: Optional[torch.Tensor],
               indices: Optional[torch.Tensor],
               last_page_len: Optional[torch.Tensor], max_seqlen_kv: int,
               page_layout: str, definition: str, layout: str,
               input_names: str, input_values: List[torch.Tensor]
               ) -> torch.Tensor:
    return _decode_op_impl(
        q, out, (k_cache, v_cache, block_table, seq_lens, indptr, indices,
                 last_page_len, max_seqlen_kv, page_layout), definition,
        layout, input_names, input_values, None, None)


@_decode_op.register_fake
def _(q, out, k_cache, v_cache, block_table, seq_lens, indptr, indices,
      last_page_len, max_seqlen_kv, page_layout, definition, layout,
      input_names, input_values):
    return _decode_fake(q, v_cache, definition, layout, 0)


@torch.library.custom_op("attnc::paged_run_decode",
                         mutates_args=("out", "workspace"))
def _run_decode_op(q: torch.Tensor, out: torch.Tensor,
                   workspace: torch.Tensor, k_cache: torch.Tensor,
                   v_cache: torch.Tensor,
                   block_table: Optional[torch.Tensor],
                   seq_lens: Optional[torch.Tensor],
                   indptr: Optional[torch.Tensor],
                   indices: Optional[torch.Tensor],
                   last_page_len: Optional[torch.Tensor], max_seqlen_kv: int,
                   page_layout: str, plan: int, input_names: str,
                   input_values: List[torch.Tensor]) -> torch.Tensor:
    # The run writes the op's workspace (a compiled graph may pass a copy
    # of the plan's buffer, of its size: the schema declares it mutated).
    p = _plan_by_id("attnc.torch.paged_decode", plan, DecodePlan)
    return _decode_op_impl(
        q, out, (k_cache, v_cache, block_table, seq_lens, indptr, indices,
                 last_page_len, max_seqlen_kv, page_layout), None, p.layout,
        input_names, input_values, p, workspace)


@_run_decode_op.register_fake
def _(q, out, workspace, k_cache, v_cache, block_table, seq_lens, indptr,
      indices, last_page_len, max_seqlen_kv, page_layout, plan, input_names,
      input_values):
    p = _plan_by_id("attnc.torch.paged_decode", plan, DecodePlan)
    return _decode_fake(q, v_cache, None, p.layout, plan)


def _prefill_op_impl(q, cu_seqlens_q, max_seqlen_q, out, kv_args, definition,
                     input_names, input_values, plan):
    kv = _kv_of(*kv_args)
    _, finals = _prefill_impl(q, cu_seqlens_q, max_seqlen_q, kv, definition,
                              _op_values(input_names, input_values), plan,
                              out)
    return _finals_or_empty(q, finals, (int(q.shape[1]), int(q.shape[0])))


def _prefill_fake(q, v_cache, definition, plan_id):
    if plan_id:
        att = _plan_by_id("attnc.torch.paged_prefill", plan_id,
                          PrefillPlan).attention
    else:
        att = attention_object(register(definition), q.dtype,
                               int(q.shape[-1]), int(v_cache.shape[-1]),
                               "bshd", _device_index(q))
    return q.new_empty((len(att.final_names), q.shape[1], q.shape[0]),
                       dtype=torch.float32)


@torch.library.custom_op("attnc::paged_prefill", mutates_args=("out",))
def _prefill_op(q: torch.Tensor, cu_seqlens_q: torch.Tensor,
                max_seqlen_q: int, out: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, block_table: Optional[torch.Tensor],
                seq_lens: Optional[torch.Tensor],
                indptr: Optional[torch.Tensor],
                indices: Optional[torch.Tensor],
                last_page_len: Optional[torch.Tensor], max_seqlen_kv: int,
                page_layout: str, definition: str, plan: int,
                input_names: str, input_values: List[torch.Tensor]
                ) -> torch.Tensor:
    p = (_plan_by_id("attnc.torch.paged_prefill", plan, PrefillPlan)
         if plan else None)
    return _prefill_op_impl(
        q, cu_seqlens_q, max_seqlen_q, out,
        (k_cache, v_cache, block_table, seq_lens, indptr, indices,
         last_page_len, max_seqlen_kv, page_layout), definition, input_names,
        input_values, p)


@_prefill_op.register_fake
def _(q, cu_seqlens_q, max_seqlen_q, out, k_cache, v_cache, block_table,
      seq_lens, indptr, indices, last_page_len, max_seqlen_kv, page_layout,
      definition, plan, input_names, input_values):
    return _prefill_fake(q, v_cache, definition, plan)


def _through_op(*tensors) -> bool:
    """Whether a call takes the op: under torch.compile, with a tensor
    subclass (FakeTensor) or a dispatch or function mode (see
    attnc.torch._plain)."""
    return _is_compiling() or not _plain(*tensors)


# -- the calls ----------------------------------------------------------------

def paged_append(k, v, kv, slot_mapping, definition="mha"):
    """Writes new tokens k [T,Hkv,D] and v [T,Hkv,DV] into kv's caches,
    token i to slot slot_mapping[i] (int32 or int64 [T]; page slot //
    page_size, position slot % page_size; a negative slot is skipped), on
    the current stream of k's device. definition: the attention whose
    calls read the cache (its dtype and head dims are the caches')."""
    _kv(kv)
    if _through_op(k, v, kv.k_cache):
        _append_op(k, v, slot_mapping, *_kv_args(kv), register(definition))
        return
    _append_impl(k, v, kv, slot_mapping, definition)


def plan_paged_decode(definition, q, kv, layout: str = "bhsd",
                      max_splits: int = 0) -> DecodePlan:
    """A plan for paged_decode calls of q's batch, heads and queries over
    caches of kv's heads and page size, keys bounded by kv.max_seqlen_kv;
    its workspace (.workspace, a uint8 tensor on q's device) is allocated
    here. Runs of it decide nothing and allocate nothing but outputs.
    Made eagerly (outside a compiled function), passed into one."""
    att = _object(definition, q, kv, layout)
    b, h, sq = _decode_rows(q, layout)
    index = q.get_device()
    plan = _fastpack.run_on(index, att.plan_decode, b, h, kv.heads_kv, sq,
                            kv.max_seqlen_kv, kv.page_size, max_splits)
    plan.workspace = torch.empty(max(plan.workspace_bytes, 16),
                                 dtype=torch.uint8, device=q.device)
    plan.layout = layout
    return _track(plan)


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
    _kv(kv)
    if plan is not None:
        layout = plan.layout
    if _through_op(q, kv.k_cache, kv.v_cache):
        if out is None:
            out = q.new_empty(q.shape[:-1] + (kv.v_cache.shape[-1],))
        names, values = _op_inputs(inputs)
        if plan is None:
            finals = _decode_op(q, out, *_kv_args(kv), register(definition),
                                layout, names, values)
        else:
            finals = _run_decode_op(q, out, plan.workspace, *_kv_args(kv),
                                    plan.torch_id, names, values)
        return (out, finals) if return_finals else out
    out, finals = _decode_impl(q, kv, definition, inputs, layout, plan, out)
    return (out, finals) if return_finals else out


def plan_paged_prefill(definition, q, cu_seqlens_q, max_seqlen_q: int,
                       kv) -> PrefillPlan:
    """A plan for paged_prefill calls of cu_seqlens_q's sequences, q's
    heads, at most max_seqlen_q new tokens a sequence and kv.max_seqlen_kv
    keys, kv's heads and page size."""
    att = _object(definition, q, kv, "bshd")
    return _track(_fastpack.run_on(
        q.get_device(), att.plan_prefill, int(cu_seqlens_q.shape[0]) - 1,
        int(q.shape[1]), kv.heads_kv, int(max_seqlen_q), kv.max_seqlen_kv,
        kv.page_size))


def paged_prefill(q, cu_seqlens_q, max_seqlen_q: int, kv, definition,
                  inputs: Optional[dict] = None, return_finals: bool = False,
                  plan: Optional[PrefillPlan] = None, out=None):
    """Paged prefill: new query tokens q [Tq,H,D], sequence b's the tokens
    cu_seqlens_q[b] to cu_seqlens_q[b+1] (int32 [B+1] on the device;
    max_seqlen_q the longest), over each sequence's keys in kv (append
    the new tokens first, paged_append): query i of Sq at position L - Sq
    + i of its L keys. Returns out [Tq,H,DV], or (out, finals [F,H,Tq]
    float32) with return_finals. plan: one from plan_paged_prefill."""
    _kv(kv)
    if _through_op(q, kv.k_cache, kv.v_cache):
        if out is None:
            out = q.new_empty(q.shape[:-1] + (kv.v_cache.shape[-1],))
        names, values = _op_inputs(inputs)
        finals = _prefill_op(q, cu_seqlens_q, int(max_seqlen_q), out,
                             *_kv_args(kv),
                             register(definition) if plan is None else "",
                             0 if plan is None else plan.torch_id, names,
                             values)
        return (out, finals) if return_finals else out
    out, finals = _prefill_impl(q, cu_seqlens_q, max_seqlen_q, kv, definition,
                                inputs, plan, out)
    return (out, finals) if return_finals else out
