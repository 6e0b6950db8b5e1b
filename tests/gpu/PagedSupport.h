// Shared pieces of the paged GPU tests: a batch of sequences in pages on
// the host (keys, values, block table and CSR), its index tensors on the
// device, custom inputs, and the check of results against the fp64
// reference, one reference call per sequence.
#ifndef ATTN_TESTS_GPU_PAGED_SUPPORT_H
#define ATTN_TESTS_GPU_PAGED_SUPPORT_H

#include "GpuSupport.h"
#include "TestDefinitions.h"

#include "attn/reference/Attention.h"
#include "attn/runtime/Paged.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace attn::gputest {

using runtime::PageLayout;

/// A test definition by name: TestDefinitions.h's, or ALiBi and retention
/// without their causal masks (alibi_full, retention_full).
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

/// The definition's custom inputs: scalars mid-range, per-head values
/// spread over the range (what the kernel and the reference both see).
inline void makeInputs(const ir::Graph &G, int H, runtime::InputMap &Inputs,
                reference::InputValues &Ref,
                std::vector<std::unique_ptr<DeviceBuffer>> &Bufs) {
  for (const ir::InputDecl &Decl : G.decls().Inputs) {
    if (Decl.Shape == ir::InputShape::Scalar) {
      double X = Decl.SampleLo + 0.5 * (Decl.SampleHi - Decl.SampleLo);
      bool Int = Decl.Elem == ir::InputType::I32;
      if (Int)
        Inputs[Decl.Name] = int32_t(std::lround(X));
      else
        Inputs[Decl.Name] = float(X);
      Ref[Decl.Name] =
          reference::Tensor({}, Int ? double(std::lround(X)) : double(float(X)));
      continue;
    }
    reference::Tensor T({H});
    std::vector<float> F(H);
    for (int h = 0; h < H; ++h) {
      F[h] = float(Decl.SampleLo + (Decl.SampleHi - Decl.SampleLo) * (h + 0.5) / H);
      T.at({h}) = F[h];
    }
    Bufs.push_back(std::make_unique<DeviceBuffer>(F.size() * 4));
    Bufs.back()->upload(F.data(), F.size() * 4);
    Inputs[Decl.Name] = runtime::TensorView::contiguous(
        Bufs.back()->get(), DType::F32, {H});
    Ref[Decl.Name] = T;
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

/// Result rows checked against the reference: o [B][Sq][H][D] bits and
/// finals [F][B][H][Sq]. \p NanSeqs: sequences whose rows must be NaN.
inline bool check(const char *What, const runtime::Attention &A, DType Dt,
           const PagedHost &P, int H, int Sq, const std::vector<uint16_t> &QBits,
           const reference::InputValues &RefInputs,
           const std::vector<uint16_t> &OBits, const std::vector<float> &FVals,
           const std::vector<int> &NanSeqs = {}) {
  const int D = P.D;
  const ir::Graph &G = *A.definition().Graph;
  size_t NF = G.decls().FinalRowscales.size();
  double Err = 0, PlainErr = 0, FinalErr = 0;
  bool NanOk = true;
  for (int b = 0; b < P.B; ++b) {
    auto O = [&](int s, int h, int d) {
      return fromBits(Dt, OBits[((size_t(b) * Sq + s) * H + h) * D + d]);
    };
    auto F = [&](size_t f, int h, int s) {
      return FVals[((f * P.B + b) * H + h) * Sq + s];
    };
    if (std::count(NanSeqs.begin(), NanSeqs.end(), b)) {
      for (int s = 0; s < Sq; ++s)
        for (int h = 0; h < H; ++h)
          NanOk = NanOk && std::isnan(O(s, h, 0)) && std::isnan(O(s, h, D - 1));
      continue;
    }
    if (P.Lens[b] == 0) { // no key: o 0, finals -inf
      for (int s = 0; s < Sq; ++s)
        for (int h = 0; h < H; ++h) {
          for (int d = 0; d < D; ++d)
            Err = std::max(Err, std::isnan(O(s, h, d)) ? INFINITY : std::fabs(O(s, h, d)));
          for (size_t f = 0; f < NF; ++f)
            FinalErr = std::max(FinalErr, F(f, h, s) == -INFINITY ? 0.0 : INFINITY);
        }
      continue;
    }
    std::vector<uint16_t> Qb(QBits.begin() + size_t(b) * Sq * H * D,
                             QBits.begin() + size_t(b + 1) * Sq * H * D);
    reference::AttentionInputs In;
    In.Q = refOf(Dt, Qb, H, Sq, D);
    In.K = refOf(Dt, P.K[b], P.Hkv, P.Lens[b], D);
    In.V = refOf(Dt, P.V[b], P.Hkv, P.Lens[b], D);
    In.Inputs = RefInputs;
    In.QIndexOffset = P.Lens[b] - Sq;
    In.BatchIndexOffset = b;
    reference::AttentionOutputs Ref = reference::attentionOnline(A.definition(), In, 0);
    In.RoundProbs = [&](double X) { return roundTo(Dt, X); };
    reference::AttentionOutputs Plain = reference::attentionOnline(A.definition(), In, 0);
    for (int s = 0; s < Sq; ++s)
      for (int h = 0; h < H; ++h) {
        for (int d = 0; d < D; ++d) {
          double Want = Ref.O.at({0, h, s, d});
          Err = std::max(Err, std::isnan(O(s, h, d)) ? INFINITY : std::fabs(O(s, h, d) - Want));
          PlainErr = std::max(PlainErr,
                              std::fabs(roundTo(Dt, Plain.O.at({0, h, s, d})) - Want));
        }
        for (size_t f = 0; f < NF; ++f) {
          double Got = F(f, h, s);
          double Want = Ref.Finals.at(G.decls().FinalRowscales[f].Name).at({0, h, s});
          double E = (std::isinf(Want) && Got == Want)
                         ? 0.0
                         : std::fabs(Got - Want) / (1.0 + std::fabs(Want));
          FinalErr = std::max(FinalErr, std::isnan(Got) ? INFINITY : E);
        }
      }
  }
  double Tol = 2 * PlainErr + (Dt == DType::F16 ? 1e-3 : 8e-3);
  bool Pass = Err <= Tol && FinalErr <= 2e-4 && NanOk;
  std::printf("%-4s %s: err %.2e tol %.2e finals %.1e%s\n", Pass ? "ok" : "FAIL",
              What, Err, Tol, FinalErr, NanOk ? "" : " (a poisoned row is not NaN)");
  return Pass;
}

/// The element type of q, k, v of \p T.
inline DType elemOf(DType T) {
  return T;
}

} // namespace attn::gputest

#endif
