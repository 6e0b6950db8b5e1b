"""attnc.torch's packed (THD) decode over a paged KV cache: each sequence
its own count of queries (speculative decoding's drafts, mixed serving
batches), given by cu_seqlens_q on the device. Planned per call or run
from a plan made once (its workspace allocated by PyTorch); inference
calls (no autograd). Ops attnc::paged_decode_varlen and
attnc::paged_run_decode_varlen with fake implementations, as
_torch_paged's dense decode: torch.compile traces them without a graph
break, and a plan's run captures in a CUDA graph whose replays may change
the counts in cu_seqlens_q (within the plan's bound and q's tokens)."""

from typing import List, Optional

import torch

from . import _fastpack
from ._paged import DecodePlan
from ._torch_paged import (_finals_or_empty, _inputs, _kv, _kv_args, _kv_of,
                           _object, _op_inputs, _op_values, _plan_by_id,
                           _through_op, _track)
from .torch import _device_index, attention_object, register

# Packed calls take q [Tq,H,D] whatever the signature's layout; they share
# the cached Attention of paged prefill (bshd).
_LAYOUT = "bshd"


def _finals_shape(q):
    return (int(q.shape[1]), int(q.shape[0]))


def _impl(q, cu_seqlens_q, max_seqlen_q, kv, definition, inputs, plan, out,
          workspace=None):
    """(out, finals or None) of a packed decode call; plan a packed
    DecodePlan or None, run with workspace (None: the plan's own)."""
    att = plan.attention if plan is not None else _object(definition, q, kv,
                                                          _LAYOUT)
    if out is None:
        out = q.new_empty(q.shape[:-1] + (kv.v_cache.shape[-1],))
    finals = (q.new_empty((len(att.final_names),) + _finals_shape(q),
                          dtype=torch.float32)
              if att.final_names else None)
    values = _inputs(att, inputs)
    index = q.get_device()
    if plan is None:
        _fastpack.run_on(index, att.decode_paged_varlen, q, cu_seqlens_q,
                         int(max_seqlen_q), kv, out, finals, values)
    else:
        _fastpack.run_on(index, att.run_decode_varlen, plan, q, cu_seqlens_q,
                         kv, out, finals,
                         plan.workspace if workspace is None else workspace,
                         values)
    return out, finals


def _op_impl(q, cu_seqlens_q, max_seqlen_q, out, kv_args, definition,
             input_names, input_values, plan, workspace):
    kv = _kv_of(*kv_args)
    _, finals = _impl(q, cu_seqlens_q, max_seqlen_q, kv, definition,
                      _op_values(input_names, input_values), plan, out,
                      workspace)
    return _finals_or_empty(q, finals, _finals_shape(q))


def _fake(q, v_cache, definition, plan_id):
    if plan_id:
        att = _plan_by_id("attnc.torch.paged_decode_varlen", plan_id,
                          DecodePlan).attention
    else:
        att = attention_object(register(definition), q.dtype,
                               int(q.shape[-1]), int(v_cache.shape[-1]),
                               _LAYOUT, _device_index(q))
    return q.new_empty((len(att.final_names),) + _finals_shape(q),
                       dtype=torch.float32)


@torch.library.custom_op("attnc::paged_decode_varlen", mutates_args=("out",))
def _decode_op(q: torch.Tensor, cu_seqlens_q: torch.Tensor,
               max_seqlen_q: int, out: torch.Tensor, k_cache: torch.Tensor,
               v_cache: torch.Tensor, block_table: Optional[torch.Tensor],
               seq_lens: Optional[torch.Tensor],
               indptr: Optional[torch.Tensor],
               indices: Optional[torch.Tensor],
               last_page_len: Optional[torch.Tensor], max_seqlen_kv: int,
               page_layout: str, definition: str, input_names: str,
               input_values: List[torch.Tensor]) -> torch.Tensor:
    return _op_impl(q, cu_seqlens_q, max_seqlen_q, out,
                    (k_cache, v_cache, block_table, seq_lens, indptr, indices,
                     last_page_len, max_seqlen_kv, page_layout), definition,
                    input_names, input_values, None, None)


@_decode_op.register_fake
def _(q, cu_seqlens_q, max_seqlen_q, out, k_cache, v_cache, block_table,
      seq_lens, indptr, indices, last_page_len, max_seqlen_kv, page_layout,
      definition, input_names, input_values):
    return _fake(q, v_cache, definition, 0)


@torch.library.custom_op("attnc::paged_run_decode_varlen",
                         mutates_args=("out", "workspace"))
def _run_op(q: torch.Tensor, cu_seqlens_q: torch.Tensor, out: torch.Tensor,
            workspace: torch.Tensor, k_cache: torch.Tensor,
            v_cache: torch.Tensor, block_table: Optional[torch.Tensor],
            seq_lens: Optional[torch.Tensor], indptr: Optional[torch.Tensor],
            indices: Optional[torch.Tensor],
            last_page_len: Optional[torch.Tensor], max_seqlen_kv: int,
            page_layout: str, plan: int, input_names: str,
            input_values: List[torch.Tensor]) -> torch.Tensor:
    # The run writes the op's workspace (a compiled graph may pass a copy
    # of the plan's buffer: the schema declares it mutated).
    p = _plan_by_id("attnc.torch.paged_decode_varlen", plan, DecodePlan)
    return _op_impl(q, cu_seqlens_q, p.bounds["queries_per_seq"], out,
                    (k_cache, v_cache, block_table, seq_lens, indptr, indices,
                     last_page_len, max_seqlen_kv, page_layout), None,
                    input_names, input_values, p, workspace)


@_run_op.register_fake
def _(q, cu_seqlens_q, out, workspace, k_cache, v_cache, block_table,
      seq_lens, indptr, indices, last_page_len, max_seqlen_kv, page_layout,
      plan, input_names, input_values):
    return _fake(q, v_cache, None, plan)


def plan_paged_decode_varlen(definition, q, cu_seqlens_q, max_seqlen_q: int,
                             kv, max_splits: int = 0) -> DecodePlan:
    """A plan for paged_decode_varlen calls of cu_seqlens_q's sequences,
    q's heads, at most max_seqlen_q (1 to 16) queries a sequence and
    kv.max_seqlen_kv keys, kv's heads and page size; its workspace
    (.workspace, a uint8 tensor on q's device) is allocated here. Made
    eagerly, passed into a compiled function."""
    att = _object(definition, q, kv, _LAYOUT)
    plan = _fastpack.run_on(
        q.get_device(), att.plan_decode, int(cu_seqlens_q.shape[0]) - 1,
        int(q.shape[1]), kv.heads_kv, int(max_seqlen_q), kv.max_seqlen_kv,
        kv.page_size, max_splits, True)
    plan.workspace = torch.empty(max(plan.workspace_bytes, 16),
                                 dtype=torch.uint8, device=q.device)
    return _track(plan)


def paged_decode_varlen(q, cu_seqlens_q, max_seqlen_q: int, kv, definition,
                        inputs: Optional[dict] = None,
                        return_finals: bool = False,
                        plan: Optional[DecodePlan] = None, out=None):
    """Packed decode over a paged cache: q [Tq,H,D], sequence b's queries
    the tokens cu_seqlens_q[b] to cu_seqlens_q[b+1] (int32 [B+1] on the
    device), 0 to max_seqlen_q (1 to 16) of them; query i of a sequence of
    n queries and L keys at position L - n + i (a causal mask gives each
    draft token the cache and the drafts up to itself). Returns out
    [Tq,H,DV], or (out, finals [F,H,Tq] float32) with return_finals.
    plan: one from plan_paged_decode_varlen (then max_seqlen_q is the
    plan's; out may be given, for a CUDA graph's fixed addresses). Rows of
    q past the last sequence are left as they are in out."""
    _kv(kv)
    if plan is not None:
        max_seqlen_q = plan.bounds["queries_per_seq"]
    if _through_op(q, kv.k_cache, kv.v_cache):
        if out is None:
            out = q.new_empty(q.shape[:-1] + (kv.v_cache.shape[-1],))
        names, values = _op_inputs(inputs)
        if plan is None:
            finals = _decode_op(q, cu_seqlens_q, int(max_seqlen_q), out,
                                *_kv_args(kv), register(definition), names,
                                values)
        else:
            finals = _run_op(q, cu_seqlens_q, out, plan.workspace,
                             *_kv_args(kv), plan.torch_id, names, values)
        return (out, finals) if return_finals else out
    out, finals = _impl(q, cu_seqlens_q, max_seqlen_q, kv, definition,
                        inputs, plan, out)
    return (out, finals) if return_finals else out
