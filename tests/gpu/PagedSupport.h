// Shared pieces of the paged GPU tests: a batch of sequences in pages on
// the host (keys, values, block table and CSR), its index tensors on the
// device, custom inputs, and the check of results against the fp64
// reference (chunks of each sequence's query rows on a thread pool).
#ifndef ATTN_TESTS_GPU_PAGED_SUPPORT_H
#define ATTN_TESTS_GPU_PAGED_SUPPORT_H

#include "GpuSupport.h"
#include "TestDefinitions.h"

#include "attn/reference/Attention.h"
#include "attn/runtime/Paged.h"

#include <fmt/format.h>
#include <llvm/Support/ThreadPool.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <future>
#include <numeric>

namespace attn::gputest {

using runtime::PageLayout;

/// A test definition by name: TestDefinitions.h's, ALiBi and retention
/// without their causal masks (alibi_full, retention_full), or
/// retention_combine without its mask and decay (retention_combine_plain:
/// scores scaled by 1/sqrt(d) and nothing else, so that a call over a part
/// of the keys, which sees its own indices, is the part of the whole).
inline dsl::AttentionDef pagedDefinition(const std::string &Name) {
  auto Unmasked = [](const char *Base, const std::string &N) {
    dsl::AttentionDef D = makeDefinition(Base);
    D.name = N;
    D.mask_mod = {};
    return D;
  };
  if (Name == "alibi_full")
    return Unmasked("alibi_learnable", Name);
  if (Name == "retention_full")
    return Unmasked("retention", Name);
  if (Name == "retention_combine_plain") {
    dsl::AttentionDef D = Unmasked("retention_combine", Name);
    D.score_mod = [](dsl::SymbolScalar Score, const dsl::CustomInputs &In,
                     dsl::SymbolScalar, dsl::SymbolScalar, dsl::SymbolScalar,
                     dsl::SymbolScalar) {
      return Score * In.head_dim().rsqrt();
    };
    return D;
  }
  return makeDefinition(Name);
}

/// One batch in pages on the host: per-sequence K/V bits [len][Hkv][D],
/// the page of each (sequence, page), the caches' contents.
struct PagedHost {
  int B = 0, Hkv = 0, D = 128, PageSize = 1, MaxPages = 1, NumPages = 0;
  PageLayout Layout = PageLayout::NHD;
  std::vector<int> Lens;
  std::vector<std::vector<uint16_t>> K, V;
  std::vector<int32_t> Table, SeqLens, Indptr, Indices, LastPageLen;

  int64_t pages(int b) const { return (Lens[b] + PageSize - 1) / PageSize; }
  std::vector<int64_t> cacheShape() const {
    return Layout == PageLayout::NHD
               ? std::vector<int64_t>{NumPages, PageSize, Hkv, D}
               : std::vector<int64_t>{NumPages, Hkv, PageSize, D};
  }
  /// Element offset of (page, slot, head) in a contiguous cache.
  size_t at(int64_t Page, int64_t Slot, int64_t H) const {
    return Layout == PageLayout::NHD
               ? ((size_t(Page) * PageSize + Slot) * Hkv + H) * D
               : ((size_t(Page) * Hkv + H) * PageSize + Slot) * D;
  }
  int32_t pageOf(int b, int64_t p) const {
    return Indices[Indptr[b] + p];
  }
};

/// Copies sequence b's keys and values (P.K[b], P.V[b]: [token, head, d],
/// b < \p B) into the host page caches \p KH and \p VH at their pages'
/// slots; the other slots keep what they held.
inline void scatterToPages(const PagedHost &P, int B, int Hkv, int PageSize,
                           int D, std::vector<uint16_t> &KH,
                           std::vector<uint16_t> &VH) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < P.Lens[b]; ++t)
      for (int h = 0; h < Hkv; ++h)
        for (int d = 0; d < D; ++d) {
          size_t At = P.at(P.pageOf(b, t / PageSize), t % PageSize, h) + d;
          KH[At] = P.K[b][(size_t(t) * Hkv + h) * D + d];
          VH[At] = P.V[b][(size_t(t) * Hkv + h) * D + d];
        }
}

/// \p P's keys and values in page caches on the device, the slots that no
/// sequence uses holding 0.5 (k) and -0.25 (v).
struct DeviceCaches {
  std::unique_ptr<DeviceBuffer> K, V;
};

inline DeviceCaches uploadCaches(const PagedHost &P, DType Dt, int B, int Hkv,
                                 int PageSize, int D) {
  size_t CacheElems = size_t(P.NumPages) * PageSize * Hkv * D;
  std::vector<uint16_t> KH(CacheElems, toBits(Dt, 0.5)),
      VH(CacheElems, toBits(Dt, -0.25));
  scatterToPages(P, B, Hkv, PageSize, D, KH, VH);
  DeviceCaches C{std::make_unique<DeviceBuffer>(CacheElems * 2),
                 std::make_unique<DeviceBuffer>(CacheElems * 2)};
  C.K->upload(KH.data(), C.K->size());
  C.V->upload(VH.data(), C.V->size());
  return C;
}

inline PagedHost makeBatch(std::mt19937_64 &Rng, DType T, int Hkv, int PageSize,
                    PageLayout L, const std::vector<int> &Lens) {
  PagedHost P;
  P.B = int(Lens.size());
  P.Hkv = Hkv;
  P.PageSize = PageSize;
  P.Layout = L;
  P.Lens = Lens;
  std::normal_distribution<double> N(0.0, 1.0);
  int64_t Used = 0, MaxLen = 0;
  for (int b = 0; b < P.B; ++b) {
    Used += P.pages(b);
    MaxLen = std::max<int64_t>(MaxLen, Lens[b]);
  }
  P.NumPages = int(Used + 3); // spare pages hold junk never read
  P.MaxPages = int(std::max<int64_t>(1, (MaxLen + PageSize - 1) / PageSize));
  std::vector<int32_t> Perm(P.NumPages);
  std::iota(Perm.begin(), Perm.end(), 0);
  std::shuffle(Perm.begin(), Perm.end(), Rng);
  // Entries past a sequence's pages are junk the kernel must never read.
  P.Table.assign(size_t(P.B) * P.MaxPages, 1 << 30);
  P.Indptr.push_back(0);
  int64_t Next = 0;
  for (int b = 0; b < P.B; ++b) {
    for (int64_t p = 0; p < P.pages(b); ++p) {
      P.Table[size_t(b) * P.MaxPages + p] = Perm[Next];
      P.Indices.push_back(Perm[Next++]);
    }
    P.Indptr.push_back(int32_t(P.Indices.size()));
    P.SeqLens.push_back(Lens[b]);
    P.LastPageLen.push_back(Lens[b] == 0 ? 0 : (Lens[b] - 1) % PageSize + 1);
    P.K.emplace_back(size_t(Lens[b]) * Hkv * P.D);
    P.V.emplace_back(size_t(Lens[b]) * Hkv * P.D);
    for (uint16_t &X : P.K.back())
      X = toBits(T, N(Rng));
    for (uint16_t &X : P.V.back())
      X = toBits(T, N(Rng));
  }
  return P;
}

/// [S][H][D] bits as the reference's [1][H][S][D].
inline reference::Tensor refOf(DType T, const std::vector<uint16_t> &Bits, int H,
                        int S, int D) {
  reference::Tensor R({1, H, S, D});
  for (int s = 0; s < S; ++s)
    for (int h = 0; h < H; ++h)
      for (int d = 0; d < D; ++d)
        R.at({0, h, s, d}) = fromBits(T, Bits[(size_t(s) * H + h) * D + d]);
  return R;
}

/// The definition's custom input values: scalars mid-range (rounded to
/// their element type), per-head values spread over the range as floats.
inline reference::InputValues referenceInputs(const ir::Graph &G, int H) {
  reference::InputValues Ref;
  for (const ir::InputDecl &Decl : G.decls().Inputs) {
    if (Decl.Shape == ir::InputShape::Scalar) {
      double X = Decl.SampleLo + 0.5 * (Decl.SampleHi - Decl.SampleLo);
      Ref[Decl.Name] = reference::Tensor(
          {}, Decl.Elem == ir::InputType::I32 ? double(std::lround(X)) : double(float(X)));
      continue;
    }
    reference::Tensor T({H});
    for (int h = 0; h < H; ++h)
      T.at({h}) = float(Decl.SampleLo + (Decl.SampleHi - Decl.SampleLo) * (h + 0.5) / H);
    Ref[Decl.Name] = T;
  }
  return Ref;
}

/// The definition's custom inputs (referenceInputs' values) for a call,
/// the per-head ones in device buffers.
inline void makeInputs(const ir::Graph &G, int H, runtime::InputMap &Inputs,
                reference::InputValues &Ref,
                std::vector<std::unique_ptr<DeviceBuffer>> &Bufs) {
  Ref = referenceInputs(G, H);
  for (const ir::InputDecl &Decl : G.decls().Inputs) {
    const reference::Tensor &T = Ref.at(Decl.Name);
    if (Decl.Shape == ir::InputShape::Scalar) {
      if (Decl.Elem == ir::InputType::I32)
        Inputs[Decl.Name] = int32_t(T.Data[0]);
      else
        Inputs[Decl.Name] = float(T.Data[0]);
      continue;
    }
    std::vector<float> F(T.Data.begin(), T.Data.end());
    Bufs.push_back(std::make_unique<DeviceBuffer>(F.size() * 4));
    Bufs.back()->upload(F.data(), F.size() * 4);
    Inputs[Decl.Name] = runtime::TensorView::contiguous(
        Bufs.back()->get(), DType::F32, {H});
  }
}

/// Device copies of a batch's index tensors.
struct DeviceIndex {
  DeviceBuffer Table, SeqLens, Indptr, Indices, LastPageLen;
  explicit DeviceIndex(const PagedHost &P)
      : Table(P.Table.size() * 4), SeqLens(P.SeqLens.size() * 4),
        Indptr(P.Indptr.size() * 4), Indices(std::max<size_t>(1, P.Indices.size()) * 4),
        LastPageLen(P.LastPageLen.size() * 4) {
    upload(P);
  }
  void upload(const PagedHost &P) {
    Table.upload(P.Table.data(), P.Table.size() * 4);
    SeqLens.upload(P.SeqLens.data(), P.SeqLens.size() * 4);
    Indptr.upload(P.Indptr.data(), P.Indptr.size() * 4);
    if (!P.Indices.empty())
      Indices.upload(P.Indices.data(), P.Indices.size() * 4);
    LastPageLen.upload(P.LastPageLen.data(), P.LastPageLen.size() * 4);
  }
  runtime::PagedKV view(const PagedHost &P, bool Csr, void *KC, void *VC,
                        DType ET, int64_t MaxLen) {
    using runtime::TensorView;
    runtime::PagedKV KV;
    KV.KCache = TensorView::contiguous(KC, ET, P.cacheShape());
    KV.VCache = TensorView::contiguous(VC, ET, P.cacheShape());
    KV.Layout = P.Layout;
    KV.MaxSeqlenKv = MaxLen;
    auto I32 = DType::I32;
    if (Csr) {
      KV.Indptr = TensorView::contiguous(Indptr.get(), I32, {P.B + 1});
      KV.Indices = TensorView::contiguous(Indices.get(), I32,
                                          {int64_t(P.Indices.size())});
      KV.LastPageLen = TensorView::contiguous(LastPageLen.get(), I32, {P.B});
    } else {
      KV.BlockTable = TensorView::contiguous(Table.get(), I32, {P.B, P.MaxPages});
      KV.SeqLens = TensorView::contiguous(SeqLens.get(), I32, {P.B});
    }
    return KV;
  }
};

/// Where a batch's query rows are: sequence b's Sq[b] queries are rows
/// Row0[b] .. Row0[b] + Sq[b] − 1 of q and o ([rows][H][D]), q_idx
/// aligned to the end of its keys (a dense decode batch: Row0[b] = b · Sq).
struct BatchRows {
  std::vector<int> Sq, Row0;
  static BatchRows dense(int B, int Sq) {
    BatchRows R;
    for (int b = 0; b < B; ++b) {
      R.Sq.push_back(Sq);
      R.Row0.push_back(b * Sq);
    }
    return R;
  }
};

/// The fp64 reference of every query row of a batch: per sequence, o
/// exact and "plain" (P rounded to the element type before P·v, the
/// FlashAttention tolerance rule's low-precision implementation), each
/// [Sq][H][D], and the finals [F][H][Sq]. A sequence without keys: o 0,
/// finals −inf.
struct BatchReference {
  std::vector<std::vector<double>> O, Plain, Finals;
};

/// The custom inputs of sequence \p b's query rows [S0, S0 + N) as a dense
/// call of one batch reads them (per-row inputs [1, H, N], per-key ones
/// [1, H, its keys]).
using SequenceInputsFn =
    std::function<reference::InputValues(int b, int S0, int N)>;

/// Computes \p P's reference for the rows \p R of q \p QBits: each
/// sequence split into chunks of query rows (QIndexOffset each chunk's
/// first row), the chunks run on a thread pool; exact and plain run per
/// chunk on the same gathered k and v. Every chunk reads \p RefInputs, or
/// where \p SeqInputs is given, its own.
inline BatchReference batchReference(const runtime::Attention &A, DType Dt,
                                     const PagedHost &P, int H, const BatchRows &R,
                                     const std::vector<uint16_t> &QBits,
                                     const reference::InputValues &RefInputs,
                                     const SequenceInputsFn &SeqInputs = {}) {
  const int D = P.D;
  const ir::Graph &G = *A.definition().Graph;
  const auto &FinalDecls = G.decls().FinalRowscales;
  const size_t NF = FinalDecls.size();
  BatchReference Out;
  Out.O.resize(P.B);
  Out.Plain.resize(P.B);
  Out.Finals.resize(P.B);
  std::vector<reference::AttentionInputs> Base(P.B);
  for (int b = 0; b < P.B; ++b) {
    const size_t Rows = size_t(R.Sq[b]);
    Out.O[b].assign(Rows * H * D, 0.0);
    Out.Plain[b].assign(Rows * H * D, 0.0);
    Out.Finals[b].assign(NF * H * Rows, -INFINITY);
    if (Rows == 0 || P.Lens[b] == 0)
      continue;
    Base[b].K = refOf(Dt, P.K[b], P.Hkv, P.Lens[b], D);
    Base[b].V = refOf(Dt, P.V[b], P.Hkv, P.Lens[b], D);
    Base[b].Inputs = RefInputs;
    Base[b].BatchIndexOffset = b;
  }
  // About 2^19 (row, head, key) triples a task: enough tasks to balance
  // the longest sequences over the pool, each long enough to amortise
  // its copy of k and v.
  llvm::ThreadPool Pool(llvm::hardware_concurrency());
  std::vector<std::shared_future<void>> Tasks;
  for (int b = 0; b < P.B; ++b) {
    if (R.Sq[b] == 0 || P.Lens[b] == 0)
      continue;
    const int Chunk = int(std::clamp<int64_t>((int64_t(1) << 19) / (int64_t(H) * P.Lens[b]),
                                              1, R.Sq[b]));
    for (int S0 = 0; S0 < R.Sq[b]; S0 += Chunk)
      Tasks.push_back(Pool.async([&, b, S0, Chunk] {
        const int N = std::min(Chunk, R.Sq[b] - S0);
        reference::AttentionInputs In = Base[b];
        if (SeqInputs)
          In.Inputs = SeqInputs(b, S0, N);
        auto Q0 = QBits.begin() + size_t(R.Row0[b] + S0) * H * D;
        In.Q = refOf(Dt, std::vector<uint16_t>(Q0, Q0 + size_t(N) * H * D), H, N, D);
        In.QIndexOffset = P.Lens[b] - R.Sq[b] + S0;
        reference::AttentionOutputs Ref = reference::attentionOnline(A.definition(), In, 0);
        In.RoundProbs = [&](double X) { return roundTo(Dt, X); };
        reference::AttentionOutputs Plain = reference::attentionOnline(A.definition(), In, 0);
        for (int s = 0; s < N; ++s)
          for (int h = 0; h < H; ++h) {
            size_t At = (size_t(S0 + s) * H + h) * D;
            for (int d = 0; d < D; ++d) {
              Out.O[b][At + d] = Ref.O.at({0, h, s, d});
              Out.Plain[b][At + d] = Plain.O.at({0, h, s, d});
            }
            for (size_t f = 0; f < NF; ++f)
              Out.Finals[b][(f * H + h) * R.Sq[b] + S0 + s] =
                  Ref.Finals.at(FinalDecls[f].Name).at({0, h, s});
          }
      }));
  }
  Pool.wait();
  for (auto &T : Tasks)
    T.get(); // rethrows a task's exception
  return Out;
}

/// The final rowscale f of (sequence b, head h, query s) as a kernel wrote it.
using FinalAt = std::function<double(size_t f, int b, int h, int s)>;

/// Result rows checked against \p Ref: o \p OBits [rows][H][D] as \p R
/// places them, finals through \p F. Every row of every sequence not in
/// \p NanSeqs against the reference (the tolerance 2 · the plain error +
/// 1e-3 in f16, 8e-3 in bf16; finals relative 2e-4); every element of
/// the rows of \p NanSeqs NaN (and their finals, with \p NanFinals).
inline bool checkRows(const char *What, const runtime::Attention &A, DType Dt,
                      const BatchReference &Ref, int H, int D, const BatchRows &R,
                      const std::vector<uint16_t> &OBits, const FinalAt &F,
                      const std::vector<int> &NanSeqs = {}, bool NanFinals = true) {
  const size_t NF = A.definition().Graph->decls().FinalRowscales.size();
  double Err = 0, PlainErr = 0, FinalErr = 0;
  bool NanOk = true;
  for (size_t b = 0; b < R.Sq.size(); ++b) {
    const int Sq = R.Sq[b];
    auto O = [&](int s, int h, int d) {
      return fromBits(Dt, OBits[(size_t(R.Row0[b] + s) * H + h) * D + d]);
    };
    const bool Nan = std::count(NanSeqs.begin(), NanSeqs.end(), int(b)) != 0;
    for (int s = 0; s < Sq; ++s)
      for (int h = 0; h < H; ++h) {
        for (int d = 0; d < D; ++d) {
          double Got = O(s, h, d), Want = Ref.O[b][(size_t(s) * H + h) * D + d];
          if (Nan) {
            NanOk = NanOk && std::isnan(Got);
            continue;
          }
          Err = std::max(Err, std::isnan(Got) ? INFINITY : std::fabs(Got - Want));
          PlainErr = std::max(
              PlainErr, std::fabs(roundTo(Dt, Ref.Plain[b][(size_t(s) * H + h) * D + d]) - Want));
        }
        for (size_t f = 0; f < NF; ++f) {
          double Got = F(f, int(b), h, s), Want = Ref.Finals[b][(f * H + h) * Sq + s];
          if (Nan) {
            NanOk = NanOk && (!NanFinals || std::isnan(Got));
            continue;
          }
          double E = (std::isinf(Want) && Got == Want)
                         ? 0.0
                         : std::fabs(Got - Want) / (1.0 + std::fabs(Want));
          FinalErr = std::max(FinalErr, std::isnan(Got) ? INFINITY : E);
        }
      }
  }
  double Tol = 2 * PlainErr + (Dt == DType::F16 ? 1e-3 : 8e-3);
  bool Pass = Err <= Tol && FinalErr <= 2e-4 && NanOk;
  std::printf("%-4s %s: err %.2e tol %.2e finals %.1e%s\n", Pass ? "ok" : "FAIL", What, Err,
              Tol, FinalErr, NanOk ? "" : " (a poisoned row is not NaN)");
  return Pass;
}

/// A dense decode batch's rows checked against the reference: o
/// [B][Sq][H][D] bits and finals [F][B][H][Sq]. \p NanSeqs: sequences
/// whose o rows must be NaN.
inline bool check(const char *What, const runtime::Attention &A, DType Dt,
           const PagedHost &P, int H, int Sq, const std::vector<uint16_t> &QBits,
           const reference::InputValues &RefInputs,
           const std::vector<uint16_t> &OBits, const std::vector<float> &FVals,
           const std::vector<int> &NanSeqs = {}) {
  BatchRows R = BatchRows::dense(P.B, Sq);
  // The poisoned sequences' rows are not compared: no reference for them.
  PagedHost Q = P;
  for (int b : NanSeqs)
    Q.Lens[b] = 0;
  BatchReference Ref = batchReference(A, Dt, Q, H, R, QBits, RefInputs);
  FinalAt F = [&](size_t f, int b, int h, int s) {
    return double(FVals[((f * P.B + b) * H + h) * Sq + s]);
  };
  return checkRows(What, A, Dt, Ref, H, P.D, R, OBits, F, NanSeqs, /*NanFinals=*/false);
}

/// The element type of q, k, v of \p T.
/// The device buffers a captured paged call reads, at the addresses the
/// graph holds.
struct GraphBuffers {
  DeviceBuffer &K, &V, &Table, &Lens, &Indptr, &Indices, &Last;
};

/// A new batch of key lengths \p Lens (pages shuffled) written into \p G
/// for a graph replay: the plan's \p NumPages pages and a table
/// \p MaxPages wide (1 << 30 past each sequence's pages, so that a read
/// past them faults), caches of normal values times 3. Returns its host
/// description.
inline PagedHost refillGraphBatch(std::mt19937_64 &Rng, DType Dt, int Hkv,
                                  int PageSize, int D, int64_t NumPages,
                                  int64_t MaxPages, const std::vector<int> &Lens,
                                  GraphBuffers G) {
  const int B = int(Lens.size());
  PagedHost P = makeBatch(Rng, Dt, Hkv, PageSize, PageLayout::NHD, Lens);
  P.NumPages = NumPages;
  std::vector<int32_t> Tab(size_t(B) * MaxPages, 1 << 30);
  for (int b = 0; b < B; ++b)
    for (int64_t p = 0; p < P.pages(b); ++p)
      Tab[size_t(b) * MaxPages + p] = P.pageOf(b, p);
  P.Table = Tab;
  P.MaxPages = MaxPages;
  const size_t CacheElems = size_t(NumPages) * PageSize * Hkv * D;
  std::vector<uint16_t> KH(CacheElems), VH(CacheElems);
  std::normal_distribution<double> N(0.0, 1.0);
  for (size_t I = 0; I < CacheElems; ++I)
    KH[I] = VH[I] = toBits(Dt, 3 * N(Rng));
  scatterToPages(P, B, Hkv, PageSize, D, KH, VH);
  G.K.upload(KH.data(), G.K.size());
  G.V.upload(VH.data(), G.V.size());
  G.Table.upload(P.Table.data(), P.Table.size() * 4);
  G.Lens.upload(P.SeqLens.data(), B * 4);
  G.Indptr.upload(P.Indptr.data(), (B + 1) * 4);
  if (!P.Indices.empty())
    G.Indices.upload(P.Indices.data(), P.Indices.size() * 4);
  G.Last.upload(P.LastPageLen.data(), B * 4);
  return P;
}

/// The device buffers of a captured paged call at its plan's bounds: \p B
/// sequences of up to \p MaxLen keys in NHD caches of NumPages pages
/// (every sequence's pages and 3 spare), a block table MaxPages wide or
/// CSR pages (\p Csr), and their PagedKV; each replay writes a new batch
/// into them (refillGraphBatch).
struct GraphPages {
  int64_t NumPages, MaxPages;
  DeviceBuffer K, V, Table, Lens, Indptr, Indices, Last;
  runtime::PagedKV KV;

  GraphPages(DType Dt, int B, int Hkv, int PageSize, int D, int MaxLen, bool Csr)
      : NumPages(int64_t(B) * MaxLen / PageSize + 3), MaxPages(MaxLen / PageSize),
        K(size_t(NumPages) * PageSize * Hkv * D * 2), V(K.size()),
        Table(size_t(B) * MaxPages * 4), Lens(size_t(B) * 4), Indptr(size_t(B + 1) * 4),
        Indices(size_t(B) * MaxPages * 4), Last(size_t(B) * 4) {
    using runtime::TensorView;
    const std::vector<int64_t> Shape{NumPages, PageSize, Hkv, D};
    KV.KCache = TensorView::contiguous(K.get(), Dt, Shape);
    KV.VCache = TensorView::contiguous(V.get(), Dt, Shape);
    KV.MaxSeqlenKv = MaxLen;
    if (Csr) {
      KV.Indptr = TensorView::contiguous(Indptr.get(), DType::I32, {B + 1});
      KV.Indices = TensorView::contiguous(Indices.get(), DType::I32, {int64_t(B) * MaxPages});
      KV.LastPageLen = TensorView::contiguous(Last.get(), DType::I32, {B});
    } else {
      KV.BlockTable = TensorView::contiguous(Table.get(), DType::I32, {B, MaxPages});
      KV.SeqLens = TensorView::contiguous(Lens.get(), DType::I32, {B});
    }
  }
  GraphBuffers buffers() { return {K, V, Table, Lens, Indptr, Indices, Last}; }
};

/// One call captured into a CUDA graph on a stream of its own, then
/// replayed (a plan's launches at fixed addresses, new data each time).
class CapturedGraph {
public:
  explicit CapturedGraph(const std::function<void(CUstream)> &Call) {
    auto &Drv = runtime::CudaDriver::get();
    Drv.check(Drv.cuStreamCreate(&Stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    Drv.check(Drv.cuStreamBeginCapture(Stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
              "cuStreamBeginCapture");
    Call(Stream);
    Drv.check(Drv.cuStreamEndCapture(Stream, &Graph), "cuStreamEndCapture");
    Drv.check(Drv.cuGraphInstantiate(&Exec, Graph, 0), "cuGraphInstantiate");
  }
  ~CapturedGraph() {
    auto &Drv = runtime::CudaDriver::get();
    if (Exec)
      Drv.cuGraphExecDestroy(Exec);
    if (Graph)
      Drv.cuGraphDestroy(Graph);
    Drv.cuStreamDestroy(Stream);
  }
  CapturedGraph(const CapturedGraph &) = delete;
  CapturedGraph &operator=(const CapturedGraph &) = delete;

  /// One replay, waited for.
  void replay() {
    auto &Drv = runtime::CudaDriver::get();
    Drv.check(Drv.cuGraphLaunch(Exec, Stream), "cuGraphLaunch");
    Drv.check(Drv.cuStreamSynchronize(Stream), "graph replay");
  }

private:
  CUstream Stream = nullptr;
  CUgraph Graph = nullptr;
  CUgraphExec Exec = nullptr;
};

/// Runs a test's cases, each through run(): a case that throws fails with
/// its message; pass() says whether every one passed. With \p Only, only
/// the cases whose name holds it run (a short run under a sanitizer).
class CaseGuard {
public:
  explicit CaseGuard(const char *Only = nullptr) : Only(Only) {}
  template <typename Fn> void run(const std::string &What, Fn &&Case) {
    if (Only && What.find(Only) == std::string::npos)
      return;
    try {
      AllPass = Case() && AllPass;
    } catch (const std::exception &E) {
      std::printf("FAIL %s: %s\n", What.c_str(), E.what());
      AllPass = false;
    }
  }
  bool pass() const { return AllPass; }

private:
  const char *Only;
  bool AllPass = true;
};

inline DType elemOf(DType T) {
  return T;
}

} // namespace attn::gputest

#endif
