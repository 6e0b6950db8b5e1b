// The C interface's paged KV entry points (attn/runtime/Paged.h): the cache
// description checked and turned into a PagedKV, decode (dense and packed)
// and prefill, each planned per call or through a plan handle, and the
// append of new tokens.
#include "RuntimeArgs.h"

#include "attn/Error.h"
#include "attn/runtime/Paged.h"

using namespace attn;
using namespace attn::capi;

struct attnc_decode_plan {
  runtime::DecodePlan Plan;
};

struct attnc_prefill_plan {
  runtime::PrefillPlan Plan;
};

namespace {

runtime::Attention &attentionArg(const ArgContext &C, attnc_attention *A) {
  return handleArg(C, A);
}

/// An index tensor of one of the two forms: nothing where its data is NULL
/// (the form not used), else checked as any tensor.
runtime::TensorView indexArg(const ArgContext &C, const char *Argument,
                             const attnc_tensor &T) {
  if (!T.data)
    return {};
  return tensorArg(C, Argument, &T);
}

/// \p KV's caches and layout as a PagedKV without pages (all an append
/// reads): the caches checked as tensors, the layout a known one.
runtime::PagedKV cachesArg(const ArgContext &C, const attnc_paged_kv *KV) {
  requireNonNull(KV, C.Function, "kv");
  runtime::PagedKV P;
  P.KCache = tensorArg(C, "kv.k_cache", &KV->k_cache);
  P.VCache = tensorArg(C, "kv.v_cache", &KV->v_cache);
  if (KV->layout != ATTNC_PAGE_NHD && KV->layout != ATTNC_PAGE_HND)
    throw InvalidArgument(
        fmt::format("{}: argument 'kv.layout': {} is not ATTNC_PAGE_NHD (0) or "
                    "ATTNC_PAGE_HND (1)",
                    C.Function, KV->layout));
  P.Layout = KV->layout == ATTNC_PAGE_NHD ? runtime::PageLayout::NHD
                                          : runtime::PageLayout::HND;
  return P;
}

/// \p KV as a PagedKV: cachesArg's, and exactly one of the two index
/// forms given in full. The runtime checks shapes and dtypes against the
/// call.
runtime::PagedKV pagedArg(const ArgContext &C, const attnc_paged_kv *KV) {
  runtime::PagedKV P = cachesArg(C, KV);
  bool Table = KV->block_table.data || KV->seq_lens.data;
  bool Csr = KV->indptr.data || KV->indices.data || KV->last_page_len.data;
  if (Table && Csr)
    throw InvalidArgument(fmt::format(
        "{}: argument 'kv': both a block table (block_table, seq_lens) and "
        "CSR pages (indptr, indices, last_page_len) are given; give one form",
        C.Function));
  if (!Table && !Csr)
    throw InvalidArgument(fmt::format(
        "{}: argument 'kv': no pages; give a block table (block_table, "
        "seq_lens) or CSR pages (indptr, indices, last_page_len)",
        C.Function));
  auto Need = [&](const attnc_tensor &T, const char *Name) {
    if (!T.data)
      throw InvalidArgument(fmt::format(
          "{}: argument 'kv.{}': NULL data, and the other tensors of its "
          "form are given",
          C.Function, Name));
  };
  if (Table) {
    Need(KV->block_table, "block_table");
    Need(KV->seq_lens, "seq_lens");
  } else {
    Need(KV->indptr, "indptr");
    Need(KV->indices, "indices");
    Need(KV->last_page_len, "last_page_len");
  }
  P.BlockTable = indexArg(C, "kv.block_table", KV->block_table);
  P.SeqLens = indexArg(C, "kv.seq_lens", KV->seq_lens);
  P.Indptr = indexArg(C, "kv.indptr", KV->indptr);
  P.Indices = indexArg(C, "kv.indices", KV->indices);
  P.LastPageLen = indexArg(C, "kv.last_page_len", KV->last_page_len);
  if (KV->max_seqlen_kv < 0)
    throw InvalidArgument(
        fmt::format("{}: argument 'kv.max_seqlen_kv': {} is negative",
                    C.Function, KV->max_seqlen_kv));
  P.MaxSeqlenKv = KV->max_seqlen_kv;
  return P;
}

/// The tensors of a paged decode or prefill call, checked in the order
/// its arguments come: q, cu_seqlens_q (packed calls), kv, out, finals
/// and the custom inputs.
struct PagedCallArgs {
  runtime::TensorView Q, CuSeqlensQ;
  runtime::PagedKV KV;
  runtime::TensorView Out;
  std::optional<runtime::TensorView> Finals;
  runtime::InputMap Inputs;

  const runtime::TensorView *finals() const { return ptr(Finals); }
};

/// \p Packed: the call takes cu_seqlens_q (\p CuSeqlensQ, checked as any
/// tensor); a dense call has none (NULL).
PagedCallArgs pagedCallArgs(const ArgContext &C, bool Packed,
                            const attnc_tensor *Q,
                            const attnc_tensor *CuSeqlensQ,
                            const attnc_paged_kv *KV, const attnc_tensor *Out,
                            const attnc_tensor *Finals,
                            const attnc_input *Inputs, size_t NumInputs) {
  PagedCallArgs A;
  A.Q = tensorArg(C, "q", Q);
  if (Packed)
    A.CuSeqlensQ = tensorArg(C, "cu_seqlens_q", CuSeqlensQ);
  A.KV = pagedArg(C, KV);
  A.Out = tensorArg(C, "out", Out);
  A.Finals = optionalTensorArg(C, "finals", Finals);
  A.Inputs = inputsArg(C, Inputs, NumInputs);
  return A;
}

template <typename Plan>
const Plan &planArg(const ArgContext &C, const Plan *P) {
  if (!P)
    throw InvalidArgument(
        fmt::format("{}: argument 'plan' is NULL", C.Function));
  return *P;
}

} // namespace

attnc_status
attnc_attention_append_paged(attnc_attention *att, const attnc_tensor *k,
                             const attnc_tensor *v, const attnc_paged_kv *kv,
                             const attnc_tensor *slot_mapping, void *stream) {
  return guarded([&] {
    ArgContext C{"attnc_attention_append_paged"};
    runtime::Attention &A = attentionArg(C, att);
    runtime::TensorView K = tensorArg(C, "k", k), V = tensorArg(C, "v", v);
    // Only the caches and the layout are used: an append needs no pages.
    runtime::PagedKV KV = cachesArg(C, kv);
    runtime::TensorView Slots = tensorArg(C, "slot_mapping", slot_mapping);
    A.appendPaged(K, V, KV, Slots, static_cast<CUstream>(stream));
  });
}

attnc_status attnc_attention_decode_paged(
    attnc_attention *att, const attnc_tensor *q, const attnc_paged_kv *kv,
    const attnc_tensor *out, const attnc_tensor *finals,
    const attnc_input *inputs, size_t num_inputs, void *stream) {
  return guarded([&] {
    ArgContext C{"attnc_attention_decode_paged"};
    runtime::Attention &A = attentionArg(C, att);
    PagedCallArgs P = pagedCallArgs(C, false, q, nullptr, kv, out, finals,
                                    inputs, num_inputs);
    A.decodePaged(P.Q, P.KV, P.Out, P.finals(), P.Inputs,
                  static_cast<CUstream>(stream));
  });
}

namespace {

/// The plan functions' body: \p Bounds checked and copied, \p Packed the
/// kind of calls the plan runs.
attnc_status planDecode(const char *Function, attnc_attention *Att,
                        const attnc_decode_bounds *Bounds, bool Packed,
                        attnc_decode_plan **Out, size_t *WorkspaceBytes) {
  return guarded([&] {
    ArgContext C{Function};
    requireNonNull(Out, C.Function, "out");
    *Out = nullptr;
    runtime::Attention &A = attentionArg(C, Att);
    requireNonNull(Bounds, C.Function, "bounds");
    requireNonNull(WorkspaceBytes, C.Function, "workspace_bytes");
    runtime::DecodeBounds B;
    B.Batch = Bounds->batch;
    B.Heads = Bounds->heads;
    B.HeadsKv = Bounds->heads_kv;
    B.QueriesPerSeq = Bounds->queries_per_seq;
    B.MaxSeqlenKv = Bounds->max_seqlen_kv;
    B.PageSize = Bounds->page_size;
    B.MaxSplits = Bounds->max_splits;
    B.Packed = Packed;
    auto Made = std::make_unique<attnc_decode_plan>();
    Made->Plan = A.planDecode(B);
    *WorkspaceBytes = Made->Plan.WorkspaceBytes;
    *Out = Made.release();
  });
}

/// \p P's plan, made for the kind of call \p Packed says (the C names in
/// the message: the runtime's would name its C++ calls).
const runtime::DecodePlan &decodePlanArg(const ArgContext &C,
                                         const attnc_decode_plan *P,
                                         bool Packed) {
  const runtime::DecodePlan &Plan = planArg(C, P).Plan;
  if (Plan.Bounds.Packed == Packed)
    return Plan;
  const char *Dense = "attnc_attention_plan_decode";
  const char *Varlen = "attnc_attention_plan_decode_varlen";
  throw InvalidArgument(fmt::format(
      "{}: argument 'plan': made by {} for {} calls; expected a plan of {}",
      C.Function, Packed ? Dense : Varlen, Packed ? "dense" : "packed",
      Packed ? Varlen : Dense));
}

} // namespace

attnc_status attnc_attention_plan_decode(attnc_attention *att,
                                         const attnc_decode_bounds *bounds,
                                         attnc_decode_plan **out,
                                         size_t *workspace_bytes) {
  return planDecode("attnc_attention_plan_decode", att, bounds, false, out,
                    workspace_bytes);
}

attnc_status attnc_attention_plan_decode_varlen(
    attnc_attention *att, const attnc_decode_bounds *bounds,
    attnc_decode_plan **out, size_t *workspace_bytes) {
  return planDecode("attnc_attention_plan_decode_varlen", att, bounds, true,
                    out, workspace_bytes);
}

void attnc_decode_plan_release(attnc_decode_plan *plan) { delete plan; }

attnc_status attnc_attention_run_decode(
    attnc_attention *att, const attnc_decode_plan *plan, const attnc_tensor *q,
    const attnc_paged_kv *kv, const attnc_tensor *out,
    const attnc_tensor *finals, void *workspace, size_t workspace_bytes,
    const attnc_input *inputs, size_t num_inputs, void *stream) {
  return guarded([&] {
    ArgContext C{"attnc_attention_run_decode"};
    runtime::Attention &A = attentionArg(C, att);
    const runtime::DecodePlan &Plan = decodePlanArg(C, plan, false);
    PagedCallArgs P = pagedCallArgs(C, false, q, nullptr, kv, out, finals,
                                    inputs, num_inputs);
    A.runDecode(Plan, P.Q, P.KV, P.Out, P.finals(), workspace,
                workspace_bytes, P.Inputs, static_cast<CUstream>(stream));
  });
}

attnc_status attnc_attention_decode_paged_varlen(
    attnc_attention *att, const attnc_tensor *q,
    const attnc_tensor *cu_seqlens_q, int64_t max_seqlen_q,
    const attnc_paged_kv *kv, const attnc_tensor *out,
    const attnc_tensor *finals, const attnc_input *inputs, size_t num_inputs,
    void *stream) {
  return guarded([&] {
    ArgContext C{"attnc_attention_decode_paged_varlen"};
    runtime::Attention &A = attentionArg(C, att);
    PagedCallArgs P = pagedCallArgs(C, true, q, cu_seqlens_q, kv, out,
                                    finals, inputs, num_inputs);
    A.decodePagedVarlen(P.Q, P.CuSeqlensQ, max_seqlen_q, P.KV, P.Out,
                        P.finals(), P.Inputs, static_cast<CUstream>(stream));
  });
}

attnc_status attnc_attention_run_decode_varlen(
    attnc_attention *att, const attnc_decode_plan *plan, const attnc_tensor *q,
    const attnc_tensor *cu_seqlens_q, const attnc_paged_kv *kv,
    const attnc_tensor *out, const attnc_tensor *finals, void *workspace,
    size_t workspace_bytes, const attnc_input *inputs, size_t num_inputs,
    void *stream) {
  return guarded([&] {
    ArgContext C{"attnc_attention_run_decode_varlen"};
    runtime::Attention &A = attentionArg(C, att);
    const runtime::DecodePlan &Plan = decodePlanArg(C, plan, true);
    PagedCallArgs P = pagedCallArgs(C, true, q, cu_seqlens_q, kv, out,
                                    finals, inputs, num_inputs);
    A.runDecodeVarlen(Plan, P.Q, P.CuSeqlensQ, P.KV, P.Out, P.finals(),
                      workspace, workspace_bytes, P.Inputs,
                      static_cast<CUstream>(stream));
  });
}

attnc_status attnc_attention_prefill_paged(
    attnc_attention *att, const attnc_tensor *q,
    const attnc_tensor *cu_seqlens_q, int64_t max_seqlen_q,
    const attnc_paged_kv *kv, const attnc_tensor *out,
    const attnc_tensor *finals, const attnc_input *inputs, size_t num_inputs,
    void *stream) {
  return guarded([&] {
    ArgContext C{"attnc_attention_prefill_paged"};
    runtime::Attention &A = attentionArg(C, att);
    PagedCallArgs P = pagedCallArgs(C, true, q, cu_seqlens_q, kv, out,
                                    finals, inputs, num_inputs);
    A.prefillPaged(P.Q, P.CuSeqlensQ, max_seqlen_q, P.KV, P.Out, P.finals(),
                   P.Inputs, static_cast<CUstream>(stream));
  });
}

attnc_status attnc_attention_plan_prefill(attnc_attention *att,
                                          const attnc_prefill_bounds *bounds,
                                          attnc_prefill_plan **out) {
  return guarded([&] {
    ArgContext C{"attnc_attention_plan_prefill"};
    requireNonNull(out, C.Function, "out");
    *out = nullptr;
    runtime::Attention &A = attentionArg(C, att);
    requireNonNull(bounds, C.Function, "bounds");
    runtime::PrefillBounds B;
    B.Batch = bounds->batch;
    B.Heads = bounds->heads;
    B.HeadsKv = bounds->heads_kv;
    B.MaxSeqlenQ = bounds->max_seqlen_q;
    B.MaxSeqlenKv = bounds->max_seqlen_kv;
    B.PageSize = bounds->page_size;
    auto Made = std::make_unique<attnc_prefill_plan>();
    Made->Plan = A.planPrefill(B);
    *out = Made.release();
  });
}

void attnc_prefill_plan_release(attnc_prefill_plan *plan) { delete plan; }

attnc_status attnc_attention_run_prefill(
    attnc_attention *att, const attnc_prefill_plan *plan, const attnc_tensor *q,
    const attnc_tensor *cu_seqlens_q, const attnc_paged_kv *kv,
    const attnc_tensor *out, const attnc_tensor *finals,
    const attnc_input *inputs, size_t num_inputs, void *stream) {
  return guarded([&] {
    ArgContext C{"attnc_attention_run_prefill"};
    runtime::Attention &A = attentionArg(C, att);
    const attnc_prefill_plan &Plan = planArg(C, plan);
    PagedCallArgs P = pagedCallArgs(C, true, q, cu_seqlens_q, kv, out,
                                    finals, inputs, num_inputs);
    A.runPrefill(Plan.Plan, P.Q, P.CuSeqlensQ, P.KV, P.Out, P.finals(),
                 P.Inputs, static_cast<CUstream>(stream));
  });
}
