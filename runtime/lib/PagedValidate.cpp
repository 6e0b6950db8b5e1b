// Paged decode on the host: the plan's arithmetic, the host model of the
// page index math, and every argument check of paged calls.
#include "PagedDecode.h"

#include "ValidateCommon.h"

#include "attn/Error.h"
#include "attn/codegen/DecodeCodegen.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/Selector.h"

#include <fmt/format.h>

namespace attn::runtime {

const char *pageLayoutName(PageLayout L) {
  switch (L) {
  case PageLayout::NHD:
    return "nhd";
  case PageLayout::HND:
    return "hnd";
  }
  return "?";
}

namespace {

bool isPowerOfTwo(int64_t X) { return X > 0 && (X & (X - 1)) == 0; }

void checkBounds(const DecodeBounds &B) {
  if (B.Batch < 1 || B.Batch > 65535)
    invalid(fmt::format("batch: expected 1 to 65535, got {}", B.Batch));
  if (B.HeadsKv < 1)
    invalid(fmt::format("heads_kv: expected at least 1, got {}", B.HeadsKv));
  if (B.Heads < 1 || B.Heads % B.HeadsKv != 0)
    invalid(fmt::format("heads: expected a positive multiple of heads_kv "
                        "({}), got {}",
                        B.HeadsKv, B.Heads));
  if (B.QueriesPerSeq < 1 || B.QueriesPerSeq > codegen::DecodeMaxQueries)
    invalid(fmt::format("queries per sequence: expected 1 to {}, got {}",
                        codegen::DecodeMaxQueries, B.QueriesPerSeq));
  if (B.MaxSeqlenKv < 0 || B.MaxSeqlenKv > (int64_t(1) << 30))
    invalid(fmt::format("max_seqlen_kv: expected 0 to 2^30, got {}",
                        B.MaxSeqlenKv));
  if (!isPowerOfTwo(B.PageSize) || B.PageSize > (int64_t(1) << 20))
    invalid(fmt::format("page size: expected a power of two from 1 to 2^20, "
                        "got {}",
                        B.PageSize));
  if (B.MaxSplits < 0)
    invalid(fmt::format("max splits: expected 0 (no cap) or more, got {}",
                        B.MaxSplits));
}

} // namespace

DecodePlan makeDecodePlan(const DecodeBounds &B, int HeadDimV, int BlockM,
                          int BlockN, int MultiProcessors,
                          analysis::MergeKind Merge) {
  checkBounds(B);
  DecodePlan P;
  P.Bounds = B;
  P.BlockM = BlockM;
  P.BlockN = BlockN;
  int64_t Rows = B.Heads / B.HeadsKv * B.QueriesPerSeq;
  P.RowBlocks = int((Rows + BlockM - 1) / BlockM);
  if (B.HeadsKv * P.RowBlocks > 65535)
    invalid(fmt::format("heads_kv x row blocks is {}; at most 65535 are "
                        "supported",
                        B.HeadsKv * P.RowBlocks));
  DecodeSplit S = decodeSplit(B.Batch * B.HeadsKv * P.RowBlocks,
                              std::max<int64_t>(1, B.MaxSeqlenKv), BlockN,
                              MultiProcessors, Merge);
  if (B.MaxSplits > 0 && S.Splits > B.MaxSplits) {
    int64_t Blocks = (std::max<int64_t>(1, B.MaxSeqlenKv) + BlockN - 1) / BlockN;
    S.Splits = B.MaxSplits;
    S.BlocksPerSplit = int((Blocks + S.Splits - 1) / S.Splits);
  }
  P.Splits = S.Splits;
  P.BlocksPerSplit = S.BlocksPerSplit;
  if (P.Splits > 1) {
    // part_o, then part_st: the fp32 o rows (16-byte multiples, head dims
    // being multiples of 64) and the state rows of every split.
    size_t StateRows = size_t(P.Splits) * B.Batch * B.Heads * B.QueriesPerSeq;
    P.WorkspaceBytes =
        4 * StateRows * size_t(HeadDimV) + 4 * StateRows * DecodeStateFloats;
  }
  return P;
}

int64_t pagedSeqLen(const PagedKVHost &H, int64_t PageSize, int64_t b) {
  if (!H.Indptr)
    return H.SeqLens[b] < 0 ? -1 : H.SeqLens[b];
  int64_t N = int64_t(H.Indptr[b + 1]) - H.Indptr[b];
  if (N < 0)
    return -1;
  if (N == 0)
    return 0;
  int64_t Last = H.LastPageLen[b];
  if (Last < 1 || Last > PageSize)
    return -1;
  return (N - 1) * PageSize + Last;
}

int64_t pagedOffset(const PagedKVHost &H, int64_t MaxPages,
                    const PageGeometry &G, int64_t b, int64_t t, int64_t Hkv) {
  int64_t Len = pagedSeqLen(H, G.PageSize, b);
  if (t < 0 || t >= Len)
    return -1;
  int64_t Page = H.Indptr ? H.Indices[H.Indptr[b] + t / G.PageSize]
                          : H.BlockTable[b * MaxPages + t / G.PageSize];
  if (Page < 0 || Page >= G.NumPages)
    return -1;
  return Page * G.PageStride + (t % G.PageSize) * G.SlotStride +
         Hkv * G.HeadStride;
}

namespace {

/// A cache: NHD is a [pages, page_size, heads_kv, dim] "BSHD" tensor and
/// HND a "BHSD" one, so the sequence-tensor rules apply as they are.
PageGeometry checkCache(const char *Name, const TensorView &T,
                        const Signature &Sig, PageLayout L, int64_t Dim,
                        int64_t &HeadsKv) {
  SeqTensor S = checkSeqTensor(
      Name, T, Sig.Dtype, L == PageLayout::NHD ? Layout::BSHD : Layout::BHSD,
      Dim);
  if (S.B > INT32_MAX)
    invalid(fmt::format("{}: at most 2^31 - 1 pages, got {}", Name, S.B));
  if (!isPowerOfTwo(S.S))
    invalid(fmt::format("{}: the page size ({} dimension) must be a power "
                        "of two, got {}",
                        Name, L == PageLayout::NHD ? "second" : "third", S.S));
  HeadsKv = S.H;
  PageGeometry G;
  G.NumPages = S.B;
  G.PageSize = S.S;
  G.PageStride = S.Strides[0];
  G.HeadStride = S.Strides[1];
  G.SlotStride = S.Strides[2];
  return G;
}

/// An int32 index tensor of \p Shape, contiguous.
void checkIndex(const char *Name, const TensorView &T,
                const std::vector<int64_t> &Shape) {
  checkNotNull(Name, T);
  checkElemType(Name, T, DType::I32);
  checkShape(Name, T, Shape);
  checkAligned(Name, T, 4);
  if (T.Strides.size() != Shape.size() ||
      (!Shape.empty() && T.Strides.back() != 1) ||
      (Shape.size() == 2 && T.Strides[0] < Shape[1]))
    invalid(fmt::format("{}: rows must be contiguous (last stride 1)", Name));
}

bool given(const TensorView &T) { return T.Data != nullptr; }

} // namespace

int64_t checkCaches(const Signature &Sig, const PagedKV &KV, PagedCall &C) {
  int64_t Hkv = 0, HkvV = 0;
  C.K = checkCache("k_cache", KV.KCache, Sig, KV.Layout, Sig.HeadDim, Hkv);
  C.V = checkCache("v_cache", KV.VCache, Sig, KV.Layout, Sig.HeadDimV, HkvV);
  C.KData = KV.KCache.Data;
  C.VData = KV.VCache.Data;
  if (C.V.NumPages != C.K.NumPages || C.V.PageSize != C.K.PageSize ||
      HkvV != Hkv)
    invalid(fmt::format("v_cache: expected {} pages of {} tokens and {} KV "
                        "heads (as k_cache), got {}, {} and {}",
                        C.K.NumPages, C.K.PageSize, Hkv, C.V.NumPages,
                        C.V.PageSize, HkvV));
  return Hkv;
}

void checkPageForm(const PagedKV &KV, int64_t Batch, int64_t PageSize,
                   int64_t MaxSeqlenKv, PagedCall &C) {
  bool Table = given(KV.BlockTable) || given(KV.SeqLens);
  bool Csr = given(KV.Indptr) || given(KV.Indices) || given(KV.LastPageLen);
  if (Table == Csr)
    invalid("paged kv: give either block_table and seq_lens, or indptr, "
            "indices and last_page_len");
  C.Csr = Csr;
  int64_t MaxPages = 0;
  if (Table) {
    if (KV.BlockTable.Shape.size() != 2)
      invalid(fmt::format("block_table: expected rank 2 [batch, max_pages], "
                          "got rank {}",
                          KV.BlockTable.Shape.size()));
    MaxPages = KV.BlockTable.Shape[1];
    int64_t Need = (MaxSeqlenKv + PageSize - 1) / PageSize;
    if (MaxPages < std::max<int64_t>(1, Need))
      invalid(fmt::format("block_table: expected at least {} columns (the "
                          "bound of {} keys in pages of {}), got {}",
                          std::max<int64_t>(1, Need), MaxSeqlenKv,
                          PageSize, MaxPages));
    checkIndex("block_table", KV.BlockTable, {Batch, MaxPages});
    checkIndex("seq_lens", KV.SeqLens, {Batch});
    C.Pages = static_cast<const int32_t *>(KV.BlockTable.Data);
    C.SeqLens = static_cast<const int32_t *>(KV.SeqLens.Data);
    C.TableStride = KV.BlockTable.Strides[0];
  } else {
    if (KV.Indices.Shape.size() != 1)
      invalid(fmt::format("indices: expected rank 1 [pages used], got rank {}",
                          KV.Indices.Shape.size()));
    checkIndex("indptr", KV.Indptr, {Batch + 1});
    checkIndex("indices", KV.Indices, {KV.Indices.Shape[0]});
    checkIndex("last_page_len", KV.LastPageLen, {Batch});
    C.Pages = static_cast<const int32_t *>(KV.Indices.Data);
    C.Indptr = static_cast<const int32_t *>(KV.Indptr.Data);
    C.LastPageLen = static_cast<const int32_t *>(KV.LastPageLen.Data);
    C.NumIndices = KV.Indices.Shape[0];
    if (C.NumIndices > INT32_MAX)
      invalid(fmt::format("indices: at most 2^31 - 1 entries, got {}",
                          C.NumIndices));
  }
  if (KV.Host) {
    const PagedKVHost &H = *KV.Host;
    if (Table ? (!H.BlockTable || !H.SeqLens)
              : (!H.Indptr || !H.Indices || !H.LastPageLen))
      invalid("paged kv host copies: expected the host copies of the same "
              "form's tensors");
    int64_t Nnz = Table ? 0 : KV.Indices.Shape[0];
    for (int64_t b = 0; b < Batch; ++b) {
      if (!Table && (H.Indptr[b] < 0 || H.Indptr[b + 1] > Nnz))
        invalid(fmt::format("indptr: sequence {} uses indices [{}, {}), "
                            "outside the {} of indices",
                            b, H.Indptr[b], H.Indptr[b + 1], Nnz));
      int64_t Len = pagedSeqLen(H, PageSize, b);
      if (Len < 0)
        invalid(fmt::format("{}: sequence {} has a negative length or a last "
                            "page length outside [1, {}]",
                            Table ? "seq_lens" : "indptr, last_page_len", b,
                            PageSize));
      if (Len > MaxSeqlenKv)
        invalid(fmt::format("{}: sequence {} has {} keys, above the bound {}",
                            Table ? "seq_lens" : "indptr, last_page_len", b,
                            Len, MaxSeqlenKv));
      for (int64_t t = 0; t < Len; t += PageSize)
        if (pagedOffset(H, MaxPages, C.K, b, t, 0) < 0)
          invalid(fmt::format(
              "{}: sequence {}'s page {} is {}, outside [0, {})",
              Table ? "block_table" : "indices", b, t / PageSize,
              Table ? H.BlockTable[b * MaxPages + t / PageSize]
                    : H.Indices[H.Indptr[b] + t / PageSize],
              C.K.NumPages));
    }
  }
}

DecodeBounds pagedCallBounds(const Signature &Sig, const TensorView &Q,
                             const PagedKV &KV) {
  if (Sig.TensorLayout == Layout::THD)
    invalid("q: a paged decode takes [batch, queries, heads, head_dim] (bshd) "
            "or [batch, heads, queries, head_dim] (bhsd); the signature's "
            "layout is thd");
  SeqTensor q = checkSeqTensor("q", Q, Sig.Dtype, Sig.TensorLayout, Sig.HeadDim);
  int64_t Hkv = 0;
  PageGeometry K = checkCache("k_cache", KV.KCache, Sig, KV.Layout,
                              Sig.HeadDim, Hkv);
  DecodeBounds B;
  B.Batch = q.B;
  B.Heads = q.H;
  B.HeadsKv = Hkv;
  B.QueriesPerSeq = q.S;
  B.MaxSeqlenKv = KV.MaxSeqlenKv;
  B.PageSize = K.PageSize;
  return B;
}

/// The caches' KV heads and page size, and the call's key bound, against
/// the plan's (InvalidArgument naming k_cache or max_seqlen_kv).
static void checkKvAgainstPlan(int64_t HeadsKv, int64_t PageSize,
                               int64_t MaxSeqlenKv, int64_t PlanHeadsKv,
                               int64_t PlanPageSize, int64_t PlanMaxSeqlenKv) {
  if (HeadsKv != PlanHeadsKv || PageSize != PlanPageSize)
    invalid(fmt::format("k_cache: expected heads_kv {} and page size {} (the "
                        "plan's), got {} and {}",
                        PlanHeadsKv, PlanPageSize, HeadsKv, PageSize));
  if (MaxSeqlenKv < 0 || MaxSeqlenKv > PlanMaxSeqlenKv)
    invalid(fmt::format("max_seqlen_kv: expected 0 to the plan's bound {}, "
                        "got {}",
                        PlanMaxSeqlenKv, MaxSeqlenKv));
}

PagedCall validatePagedCall(const ir::Graph &G, const Signature &Sig,
                            const DecodeBounds &B, const TensorView &Q,
                            const PagedKV &KV, const TensorView &Out,
                            const TensorView *Finals, const InputMap &Inputs) {
  if (B.Packed)
    invalid("plan: made for packed calls (bounds with Packed set); run it "
            "with runDecodeVarlen");
  DecodeBounds Got = pagedCallBounds(Sig, Q, KV);
  if (Got.Batch != B.Batch || Got.QueriesPerSeq != B.QueriesPerSeq ||
      Got.Heads != B.Heads)
    invalid(fmt::format("q: expected batch {}, queries {} and heads {} (the "
                        "plan's), got {}, {} and {}",
                        B.Batch, B.QueriesPerSeq, B.Heads, Got.Batch,
                        Got.QueriesPerSeq, Got.Heads));
  checkKvAgainstPlan(Got.HeadsKv, Got.PageSize, KV.MaxSeqlenKv, B.HeadsKv,
                     B.PageSize, B.MaxSeqlenKv);
  PagedCall C;
  checkCaches(Sig, KV, C);
  SeqTensor q = checkSeqTensor("q", Q, Sig.Dtype, Sig.TensorLayout, Sig.HeadDim);
  SeqTensor o =
      checkSeqTensor("out", Out, Sig.Dtype, Sig.TensorLayout, Sig.HeadDimV);
  checkLike("out", o, "q", q.B, q.S, q.H);

  checkPageForm(KV, B.Batch, B.PageSize, B.MaxSeqlenKv, C);

  CallShape &S = C.Shape;
  S.B = B.Batch;
  S.H = B.Heads;
  S.Hkv = B.HeadsKv;
  S.Sq = B.QueriesPerSeq;
  S.Skv = B.MaxSeqlenKv;
  storeStrides(S.Q, q);
  storeStrides(S.O, o);
  checkPagedInputs(G, S, Finals, Inputs, PagedCallKind::Decode);
  return C;
}

void checkCuSeqlensQHost(const int32_t *Cu, int64_t Batch, int64_t MaxQueries,
                         int64_t Tokens) {
  if (Cu[0] != 0)
    invalid(fmt::format("cu_seqlens_q: expected to start at 0, got {}", Cu[0]));
  for (int64_t b = 0; b < Batch; ++b) {
    int64_t N = int64_t(Cu[b + 1]) - Cu[b];
    if (N < 0)
      invalid(fmt::format("cu_seqlens_q: decreases from {} to {} at entry {} "
                          "(sequence {} would have {} queries)",
                          Cu[b], Cu[b + 1], b + 1, b, N));
    if (N > MaxQueries)
      invalid(fmt::format("cu_seqlens_q: sequence {} has {} queries, above "
                          "the bound {}",
                          b, N, MaxQueries));
  }
  if (Cu[Batch] > Tokens)
    invalid(fmt::format("cu_seqlens_q: ends at {}, past q's {} tokens",
                        Cu[Batch], Tokens));
}

DecodeBounds packedDecodeBounds(const Signature &Sig, const TensorView &Q,
                                const TensorView &CuSeqlensQ,
                                int64_t MaxSeqlenQ, const PagedKV &KV) {
  SeqTensor q = checkSeqTensor("q", Q, Sig.Dtype, Layout::THD, Sig.HeadDim);
  checkCuSeqlensQ(CuSeqlensQ);
  int64_t Hkv = 0;
  PageGeometry K = checkCache("k_cache", KV.KCache, Sig, KV.Layout,
                              Sig.HeadDim, Hkv);
  if (MaxSeqlenQ < 1 || MaxSeqlenQ > codegen::DecodeMaxQueries)
    invalid(fmt::format("max_seqlen_q: expected 1 to {} (decode's queries "
                        "per sequence), got {}",
                        codegen::DecodeMaxQueries, MaxSeqlenQ));
  DecodeBounds B;
  B.Batch = CuSeqlensQ.Shape[0] - 1;
  B.Heads = q.H;
  B.HeadsKv = Hkv;
  B.QueriesPerSeq = MaxSeqlenQ;
  B.MaxSeqlenKv = KV.MaxSeqlenKv;
  B.PageSize = K.PageSize;
  B.Packed = true;
  return B;
}

PagedCall checkPackedPagedCall(const ir::Graph &G, const Signature &Sig,
                               const PackedPagedBounds &B, const TensorView &Q,
                               const TensorView &CuSeqlensQ, const PagedKV &KV,
                               const TensorView &Out, const TensorView *Finals,
                               const InputMap &Inputs, PagedCallKind Kind) {
  SeqTensor q = checkSeqTensor("q", Q, Sig.Dtype, Layout::THD, Sig.HeadDim);
  if (q.H != B.Heads)
    invalid(fmt::format("q: expected {} heads (the plan's), got {}", B.Heads,
                        q.H));
  if (q.S > (int64_t(1) << 30))
    invalid(fmt::format("q: at most 2^30 tokens, got {}", q.S));
  checkCuSeqlensQ(CuSeqlensQ);
  if (CuSeqlensQ.Shape[0] != B.Batch + 1)
    invalid(fmt::format("cu_seqlens_q: expected shape [{}] (the plan's batch "
                        "+ 1), got {}",
                        B.Batch + 1, shapeText(CuSeqlensQ.Shape)));
  PagedCall C;
  int64_t Hkv = checkCaches(Sig, KV, C);
  checkKvAgainstPlan(Hkv, C.K.PageSize, KV.MaxSeqlenKv, B.HeadsKv, B.PageSize,
                     B.MaxSeqlenKv);
  SeqTensor o =
      checkSeqTensor("out", Out, Sig.Dtype, Layout::THD, Sig.HeadDimV);
  if (o.S != q.S || o.H != q.H)
    invalid(fmt::format("out: expected tokens {} and heads {} (as q), got {} "
                        "and {}",
                        q.S, q.H, o.S, o.H));
  checkPageForm(KV, B.Batch, B.PageSize, B.MaxSeqlenKv, C);

  CallShape &S = C.Shape;
  S.B = B.Batch;
  S.H = B.Heads;
  S.Hkv = B.HeadsKv;
  S.Sq = B.MaxSeqlenQ;
  S.Skv = B.MaxSeqlenKv;
  S.Packed = true;
  S.TotalQ = q.S;
  S.CuQ = static_cast<const int *>(CuSeqlensQ.Data);
  storeStrides(S.Q, q);
  storeStrides(S.O, o);
  checkPagedInputs(G, S, Finals, Inputs, Kind);
  return C;
}

PagedCall validatePackedDecodeCall(const ir::Graph &G, const Signature &Sig,
                                   const DecodeBounds &B, const TensorView &Q,
                                   const TensorView &CuSeqlensQ,
                                   const PagedKV &KV, const TensorView &Out,
                                   const TensorView *Finals,
                                   const InputMap &Inputs) {
  if (!B.Packed)
    invalid("plan: made for dense calls (runDecode); a packed call needs a "
            "plan of bounds with Packed set");
  PackedPagedBounds P{B.Batch,    B.Heads,       B.HeadsKv,
                      B.PageSize, B.MaxSeqlenKv, B.QueriesPerSeq};
  PagedCall C = checkPackedPagedCall(G, Sig, P, Q, CuSeqlensQ, KV, Out, Finals,
                                     Inputs, PagedCallKind::Decode);
  if (KV.Host && KV.Host->CuSeqlensQ)
    checkCuSeqlensQHost(KV.Host->CuSeqlensQ, B.Batch, B.QueriesPerSeq,
                        C.Shape.TotalQ);
  return C;
}

/// A key-side input's key count: the supplied tensor's where it holds the
/// bound's keys or more (an engine keeps one tensor of its longest
/// sequence's keys), else the bound's, for the message.
static int64_t keyColumns(const InputMap &Inputs, const ir::InputDecl &D,
                          int64_t Bound) {
  auto It = Inputs.find(D.Name);
  const TensorView *T =
      It == Inputs.end() ? nullptr : std::get_if<TensorView>(&It->second);
  if (T && !T->Shape.empty() && T->Shape.back() >= Bound)
    return T->Shape.back();
  return Bound;
}

void checkPagedInputs(const ir::Graph &G, const CallShape &S,
                      const TensorView *Finals, const InputMap &Inputs,
                      PagedCallKind Kind) {
  checkFinals(G, S, Finals);
  const char *What =
      Kind == PagedCallKind::Decode ? "paged decode" : "paged prefill";
  for (const ir::InputDecl &D : G.decls().Inputs) {
    if (D.Shape == ir::InputShape::Scalar || D.Shape == ir::InputShape::PerHead)
      continue;
    if (Kind == PagedCallKind::Prefill)
      throw NotSupportedYet(fmt::format(
          "input '{}': {} inputs in paged prefill (scalar and per_head "
          "inputs are supported)",
          D.Name, ir::inputShapeName(D.Shape).str()));
    if (D.Shape == ir::InputShape::Full)
      throw NotSupportedYet(fmt::format(
          "input '{}': full inputs in paged decode (scalar, per_head, "
          "per_row, per_key, per_query_token and per_key_token inputs are "
          "supported)",
          D.Name));
  }
  if (Kind == PagedCallKind::Prefill) {
    checkInputs(G, S.B, S.H, S.Sq, std::max<int64_t>(1, S.Skv), Inputs);
    return;
  }
  // Query-side inputs follow q's rows (dense [B, H, Sq], packed [H, Tq]);
  // key-side ones are [B, (H,) keys] in both forms, read at kv_idx (the
  // key's position in its sequence) and holding at least the plan's bound
  // of keys, since a sequence may grow to it without a new plan.
  const int64_t Bound = std::max<int64_t>(1, S.Skv);
  const std::string KeyAxes = fmt::format(
      "keys at least the bound max_seqlen_kv {}] in {}, read at kv_idx",
      Bound, What);
  checkInputsAs(G, Inputs, [&](const ir::InputDecl &D) -> InputWant {
    switch (D.Shape) {
    case ir::InputShape::Scalar:
      return {{}, ""};
    case ir::InputShape::PerHead:
      return {{S.H}, ""};
    case ir::InputShape::PerRow:
      if (S.Packed)
        return {{S.H, S.TotalQ}, "[heads, q tokens] in a packed call"};
      return {{S.B, S.H, S.Sq}, "[batch, heads, queries]"};
    case ir::InputShape::PerQueryToken:
      if (S.Packed)
        return {{S.TotalQ}, "[q tokens] in a packed call"};
      return {{S.B, S.Sq}, "[batch, queries]"};
    case ir::InputShape::PerKey:
      return {{S.B, S.H, keyColumns(Inputs, D, Bound)},
              "[batch, heads, " + KeyAxes};
    case ir::InputShape::PerKeyToken:
      return {{S.B, keyColumns(Inputs, D, Bound)}, "[batch, " + KeyAxes};
    case ir::InputShape::Full:
      break;
    }
    throw InternalError("checkPagedInputs: a full input passed the refusal");
  });
}

int pageShift(int64_t PageSize) {
  int Shift = 0;
  while ((int64_t(1) << Shift) < PageSize)
    ++Shift;
  return Shift;
}

AppendCall validateAppend(const Signature &Sig, const TensorView &K,
                          const TensorView &V, const PagedKV &KV,
                          const TensorView &SlotMapping) {
  AppendCall A;
  int64_t Hkv = 0, HkvV = 0;
  A.KC = checkCache("k_cache", KV.KCache, Sig, KV.Layout, Sig.HeadDim, Hkv);
  A.VC = checkCache("v_cache", KV.VCache, Sig, KV.Layout, Sig.HeadDimV, HkvV);
  if (A.VC.NumPages != A.KC.NumPages || A.VC.PageSize != A.KC.PageSize ||
      HkvV != Hkv)
    invalid(fmt::format("v_cache: expected {} pages of {} tokens and {} KV "
                        "heads (as k_cache), got {}, {} and {}",
                        A.KC.NumPages, A.KC.PageSize, Hkv, A.VC.NumPages,
                        A.VC.PageSize, HkvV));
  SeqTensor k = checkSeqTensor("k", K, Sig.Dtype, Layout::THD, Sig.HeadDim);
  SeqTensor v = checkSeqTensor("v", V, Sig.Dtype, Layout::THD, Sig.HeadDimV);
  if (k.H != Hkv)
    invalid(fmt::format("k: expected {} heads (the caches' KV heads), got {}",
                        Hkv, k.H));
  if (v.S != k.S || v.H != k.H)
    invalid(fmt::format("v: expected {} tokens and {} heads (as k), got {} "
                        "and {}",
                        k.S, k.H, v.S, v.H));
  if (k.S > INT32_MAX / 2)
    invalid(fmt::format("k: at most 2^30 tokens, got {}", k.S));
  checkNotNull("slot_mapping", SlotMapping);
  if (SlotMapping.Type != DType::I32 && SlotMapping.Type != DType::I64)
    invalid(fmt::format("slot_mapping: expected dtype i32 or i64, got {}",
                        dtypeName(SlotMapping.Type)));
  checkShape("slot_mapping", SlotMapping, {k.S});
  if (SlotMapping.Strides.size() != 1 || SlotMapping.Strides[0] != 1)
    invalid("slot_mapping: must be contiguous");
  A.Slots64 = SlotMapping.Type == DType::I64;
  checkAligned("slot_mapping", SlotMapping, A.Slots64 ? 8 : 4);
  A.Tokens = k.S;
  A.K[0] = k.Strides[2];
  A.K[1] = k.Strides[1];
  A.V[0] = v.Strides[2];
  A.V[1] = v.Strides[1];
  return A;
}

MergeCall validateMerge(const ir::Graph &G, const Signature &Sig,
                        const std::vector<PartialResult> &Parts,
                        const TensorView &Out, const TensorView *Finals) {
  analysis::ResultMergeInfo M = analysis::analyzeResultMerge(G);
  if (M.Kind == analysis::MergeKind::None)
    throw UserError("'" + G.name() + "': its results cannot be merged: " +
                    M.Reason);
  if (Sig.TensorLayout == Layout::THD)
    invalid("out: merging packed (thd) results is not supported; the "
            "signature's layout is thd");
  if (Parts.size() < 2 || Parts.size() > size_t(attnc::kMaxMergeParts))
    invalid(fmt::format("parts: expected 2 to {} partial results, got {}",
                        attnc::kMaxMergeParts, Parts.size()));
  SeqTensor o =
      checkSeqTensor("out", Out, Sig.Dtype, Sig.TensorLayout, Sig.HeadDimV);
  if (o.B > 65535 || o.B * o.H * o.S > INT32_MAX)
    invalid("out: at most 2^31 - 1 rows");
  CallShape S;
  S.B = o.B;
  S.H = o.H;
  S.Sq = o.S;
  checkFinals(G, S, Finals);
  MergeCall C;
  attnc::MergeResultsArgs &A = C.Args;
  for (size_t I = 0; I < Parts.size(); ++I) {
    std::string Name = fmt::format("parts[{}].out", I);
    SeqTensor p = checkSeqTensor(Name.c_str(), Parts[I].Out, Sig.Dtype,
                                 Sig.TensorLayout, Sig.HeadDimV);
    checkLike(Name.c_str(), p, "out", o.B, o.S, o.H);
    std::string FName = fmt::format("parts[{}].finals", I);
    try {
      checkFinals(G, S, Parts[I].Finals);
    } catch (const InvalidArgument &E) {
      // The same rule, named for the part.
      std::string Msg = E.what();
      invalid(FName + Msg.substr(Msg.find(':')));
    }
    A.o[I] = Parts[I].Out.Data;
    A.finals[I] = Parts[I].Finals
                      ? static_cast<const float *>(Parts[I].Finals->Data)
                      : nullptr;
    for (int J = 0; J < 3; ++J)
      A.o_s[I][J] = p.Strides[J];
  }
  A.out = Out.Data;
  A.out_finals = Finals ? static_cast<float *>(Finals->Data) : nullptr;
  for (int J = 0; J < 3; ++J)
    A.out_s[J] = o.Strides[J];
  A.parts = int(Parts.size());
  A.batch = int(o.B);
  A.heads = int(o.H);
  A.seq_q = int(o.S);
  A.num_finals = int(G.decls().FinalRowscales.size());
  if (A.num_finals > attnc::kMaxMergeFinals)
    throw NotSupportedYet(fmt::format("merging results with {} finals (at "
                                      "most {})",
                                      A.num_finals, attnc::kMaxMergeFinals));
  A.kind = int(M.Kind);
  A.lse_final = M.LseFinal;
  // A combine's result is its state: the final of each online rowscale
  // (as many as the finals, which the analysis checked).
  for (size_t I = 0; I < M.FinalOfRowscale.size(); ++I)
    A.final_of[I] = M.FinalOfRowscale[I];
  C.Combine = M.Kind == analysis::MergeKind::Combine;
  C.Rows = o.B * o.H * o.S;
  C.HeadDimV = Sig.HeadDimV;
  C.Bf16 = Sig.Dtype == DType::BF16;
  return C;
}

} // namespace attn::runtime
