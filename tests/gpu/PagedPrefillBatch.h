// The paged prefill tests' batch: a cached prefix in pages and new tokens
// appended by appendPaged, the packed queries, and their reference and check.
#ifndef ATTN_TESTS_GPU_PAGED_PREFILL_BATCH_H
#define ATTN_TESTS_GPU_PAGED_PREFILL_BATCH_H

#include "PagedSupport.h"

#include "attn/runtime/Paged.h"

#include <algorithm>
#include <random>
#include <vector>

namespace attn::gputest {

/// A batch on the device: caches holding each sequence's prefix (junk
/// elsewhere) and then its new tokens appended by appendPaged; the packed
/// queries; the index tensors.
struct Batch {
  PagedHost P;
  std::vector<int> Prefix, NewQ;
  std::vector<int32_t> Cu;
  std::vector<uint16_t> QBits;
  int Tq = 0, MaxQ = 1;
};

inline Batch makePrefillBatch(std::mt19937_64 &Rng, DType Dt, int H, int Hkv, int PageSize,
                       PageLayout L, const std::vector<int> &Prefix,
                       const std::vector<int> &NewQ) {
  Batch X;
  X.Prefix = Prefix;
  X.NewQ = NewQ;
  std::vector<int> Lens(Prefix.size());
  for (size_t b = 0; b < Prefix.size(); ++b)
    Lens[b] = Prefix[b] + NewQ[b];
  X.P = makeBatch(Rng, Dt, Hkv, PageSize, L, Lens);
  X.Cu.push_back(0);
  for (int n : NewQ) {
    X.Cu.push_back(X.Cu.back() + n);
    X.MaxQ = std::max(X.MaxQ, n);
  }
  X.Tq = std::max(1, X.Cu.back()); // one unused row where no sequence has a query
  std::normal_distribution<double> N(0.0, 1.0);
  X.QBits.resize(size_t(X.Tq) * H * X.P.D);
  for (uint16_t &Bits : X.QBits)
    Bits = toBits(Dt, N(Rng));
  return X;
}

/// The caches of \p X on the device: junk, each prefix scattered into its
/// pages (KV's page strides: a cache's pages may lie apart), then the new
/// tokens appended (int32 slots, a padding slot of -1 whose token must not
/// land).
inline void fillCaches(runtime::Attention &A, const Batch &X, DType Dt, const runtime::PagedKV &KV,
                DeviceBuffer &KC, DeviceBuffer &VC, std::mt19937_64 &Rng) {
  const PagedHost &P = X.P;
  const int D = P.D, Hkv = P.Hkv, PS = P.PageSize;
  std::vector<uint16_t> KH(KC.size() / 2), VH(VC.size() / 2);
  std::normal_distribution<double> N(0.0, 1.0);
  for (uint16_t &E : KH)
    E = toBits(Dt, 4 * N(Rng));
  for (uint16_t &E : VH)
    E = toBits(Dt, 4 * N(Rng));
  const int64_t PageElems = int64_t(PS) * Hkv * D;
  const int64_t KGap = KV.KCache.Strides[0] - PageElems, VGap = KV.VCache.Strides[0] - PageElems;
  for (int b = 0; b < P.B; ++b)
    for (int t = 0; t < X.Prefix[b]; ++t)
      for (int h = 0; h < Hkv; ++h)
        for (int d = 0; d < D; ++d) {
          const int64_t Page = P.pageOf(b, t / PS);
          size_t At = P.at(Page, t % PS, h) + d;
          KH[At + Page * KGap] = P.K[b][(size_t(t) * Hkv + h) * D + d];
          VH[At + Page * VGap] = P.V[b][(size_t(t) * Hkv + h) * D + d];
        }
  KC.upload(KH.data(), KC.size());
  VC.upload(VH.data(), VC.size());
  std::vector<uint16_t> NK, NV;
  std::vector<int32_t> Slots;
  for (int b = 0; b < P.B; ++b)
    for (int t = X.Prefix[b]; t < P.Lens[b]; ++t) {
      auto From = [&](const std::vector<uint16_t> &S) {
        return S.begin() + size_t(t) * Hkv * D;
      };
      NK.insert(NK.end(), From(P.K[b]), From(P.K[b]) + size_t(Hkv) * D);
      NV.insert(NV.end(), From(P.V[b]), From(P.V[b]) + size_t(Hkv) * D);
      Slots.push_back(P.pageOf(b, t / PS) * PS + t % PS);
    }
  NK.insert(NK.end(), size_t(Hkv) * D, toBits(Dt, 99.0));
  NV.insert(NV.end(), size_t(Hkv) * D, toBits(Dt, 99.0));
  Slots.push_back(-1);
  const int64_t T = int64_t(Slots.size());
  DeviceBuffer DNK(NK.size() * 2), DNV(NV.size() * 2), DS(Slots.size() * 4);
  DNK.upload(NK.data(), DNK.size());
  DNV.upload(NV.data(), DNV.size());
  DS.upload(Slots.data(), DS.size());
  A.appendPaged(runtime::TensorView::contiguous(DNK.get(), Dt, {T, Hkv, D}),
                runtime::TensorView::contiguous(DNV.get(), Dt, {T, Hkv, D}), KV,
                runtime::TensorView::contiguous(DS.get(), DType::I32, {T}));
  auto &Drv = runtime::CudaDriver::get();
  Drv.check(Drv.cuCtxSynchronize(), "appendPaged");
}

/// X's packed rows: sequence b's new queries from row cu_seqlens_q[b].
inline BatchRows rowsOf(const Batch &X) {
  BatchRows R;
  R.Sq = X.NewQ;
  R.Row0.assign(X.Cu.begin(), X.Cu.end() - 1);
  return R;
}

/// The rows of \p X against \p Ref: o [Tq][H][D], finals [F][H][Tq];
/// \p NanSeqs: sequences whose rows (o and finals) must be NaN.
inline bool check(const char *What, const runtime::Attention &A, DType Dt, const Batch &X, int H,
           const BatchReference &Ref, const std::vector<uint16_t> &OBits,
           const std::vector<float> &FVals, const std::vector<int> &NanSeqs = {}) {
  FinalAt F = [&](size_t f, int b, int h, int s) {
    return double(FVals[(f * H + h) * X.Tq + X.Cu[b] + s]);
  };
  return checkRows(What, A, Dt, Ref, H, X.P.D, rowsOf(X), OBits, F, NanSeqs);
}

/// The reference of every new query row of \p X (its keys all of its
/// sequence's tokens, q_idx aligned to their end).
inline BatchReference referenceOf(const runtime::Attention &A, DType Dt, const Batch &X, int H,
                           const reference::InputValues &RefInputs) {
  return batchReference(A, Dt, X.P, H, rowsOf(X), X.QBits, RefInputs);
}

inline runtime::Signature signature(DType Dt, bool Sm80 = false) {
  runtime::Signature Sig;
  if (Sm80)
    Sig.Skeleton = "fwd_sm80";
  Sig.Dtype = Dt;
  Sig.HeadDim = Sig.HeadDimV = 128;
  Sig.Backend = "generated";
  return Sig;
}

} // namespace attn::gputest

#endif // ATTN_TESTS_GPU_PAGED_PREFILL_BATCH_H
