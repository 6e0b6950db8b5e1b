// What the packed (THD) decode GPU tests share (gpu_packed_decode_test,
// gpu_capi_packed_decode_test, gpu_paged_inputs_test): a packed batch's
// queries (each sequence its own count, padding rows after the last), its
// outputs on the device (poisoned), a paged packed call's data on the
// device, and the check of every row against the fp64 reference with the
// rows outside every sequence never written.
#ifndef ATTNC_TESTS_GPU_PACKEDDECODESUPPORT_H
#define ATTNC_TESTS_GPU_PACKEDDECODESUPPORT_H

#include "PagedSupport.h"

#include <optional>
#include <utility>

namespace attn::gputest {

/// The head dim of every packed decode case (q, k, v and o).
inline constexpr int PackedHeadDim = 128;


/// The packed queries of a batch: sequence b's Counts[b] queries are rows
/// Cu[b] .. Cu[b + 1] of q [Tq][H][PackedHeadDim]; Pad rows after the last sequence
/// belong to none (a kernel must not write them).
struct Queries {
  std::vector<int> Counts;
  std::vector<int32_t> Cu;
  int Tq = 1, MaxQ = 1;
  std::vector<uint16_t> Bits;
};

inline Queries makeQueries(std::mt19937_64 &Rng, DType Dt, int H, const std::vector<int> &Counts,
                    int Pad) {
  Queries X;
  X.Counts = Counts;
  X.Cu.push_back(0);
  for (int N : Counts) {
    X.Cu.push_back(X.Cu.back() + N);
    X.MaxQ = std::max(X.MaxQ, N);
  }
  X.Tq = std::max(1, X.Cu.back() + Pad);
  std::normal_distribution<double> N(0.0, 1.0);
  X.Bits.resize(size_t(X.Tq) * H * PackedHeadDim);
  for (uint16_t &B : X.Bits)
    B = toBits(Dt, N(Rng));
  return X;
}

inline BatchRows rowsOf(const Queries &X) {
  BatchRows R;
  R.Sq = X.Counts;
  R.Row0.assign(X.Cu.begin(), X.Cu.end() - 1);
  return R;
}

/// Rows [From, To) of o still hold the poison (0xffff: no kernel writes it).
inline bool untouched(const char *What, const std::vector<uint16_t> &OBits, int H, int From,
               int To) {
  for (size_t I = size_t(From) * H * PackedHeadDim; I < size_t(To) * H * PackedHeadDim; ++I)
    if (OBits[I] != 0xffff) {
      std::printf("FAIL %s: row %zu outside every sequence was written\n", What,
                  I / (size_t(H) * PackedHeadDim));
      return false;
    }
  return true;
}

/// \p R's rows of o [Tq][H][PackedHeadDim] and finals [F][H][Tq] against the reference
/// of \p P's keys (the sequences of \p NanSeqs: every row NaN, no
/// reference), and the rows \p Untouched ([from, to) pairs) never written.
inline bool checkPacked(const char *What, const runtime::Attention &A, DType Dt, const PagedHost &P,
                 int H, const Queries &X, const BatchRows &R,
                 const reference::InputValues &RefInputs, const std::vector<uint16_t> &OBits,
                 const std::vector<float> &FVals, const std::vector<int> &NanSeqs,
                 const std::vector<std::pair<int, int>> &Untouched) {
  PagedHost Ref = P;
  for (int b : NanSeqs)
    Ref.Lens[b] = 0;
  BatchReference Want = batchReference(A, Dt, Ref, H, R, X.Bits, RefInputs);
  FinalAt F = [&](size_t f, int b, int h, int s) {
    return double(FVals[(f * H + h) * X.Tq + R.Row0[b] + s]);
  };
  bool Pass = checkRows(What, A, Dt, Want, H, PackedHeadDim, R, OBits, F, NanSeqs);
  for (auto [From, To] : Untouched)
    Pass = untouched(What, OBits, H, From, To) && Pass;
  return Pass;
}

/// A call's outputs: o [Tq][H][PackedHeadDim] and finals [F][H][Tq] on the device.
struct Outputs {
  size_t NF;
  DeviceBuffer O, F;
  runtime::TensorView OV, FV;
  Outputs(const runtime::Attention &A, DType Dt, int Tq, int H)
      : NF(A.definition().Graph->decls().FinalRowscales.size()),
        O(size_t(Tq) * H * PackedHeadDim * 2), F(std::max<size_t>(1, NF) * H * Tq * 4) {
    OV = runtime::TensorView::contiguous(O.get(), Dt, {Tq, H, PackedHeadDim});
    FV = runtime::TensorView::contiguous(F.get(), DType::F32, {int64_t(NF), H, Tq});
    O.poison();
    F.poison();
  }
  const runtime::TensorView *finals() const { return NF ? &FV : nullptr; }
  void download(std::vector<uint16_t> &OBits, std::vector<float> &FVals) {
    auto &Drv = runtime::CudaDriver::get();
    Drv.check(Drv.cuCtxSynchronize(), "kernel execution");
    OBits.resize(O.size() / 2);
    O.download(OBits.data(), O.size());
    FVals.resize(F.size() / 4);
    F.download(FVals.data(), F.size());
  }
};

inline int maxOf(const std::vector<int> &V) {
  return std::max(1, *std::max_element(V.begin(), V.end()));
}

/// A paged packed decode call's data on the device for \p A: a batch of
/// \p Lens keys in pages (table or CSR), its queries (\p Counts, three
/// padding rows after the last), q and cu_seqlens_q, the definition's
/// custom inputs (makeInputs') and the poisoned outputs.
struct PagedPackedCall {
  PagedHost P;
  Queries X;
  DeviceCaches Caches;
  DeviceIndex Idx;
  runtime::PagedKV KV;
  std::unique_ptr<DeviceBuffer> DQ;
  DeviceBuffer DCq;
  runtime::TensorView QV, CuV;
  runtime::InputMap Inputs;
  reference::InputValues RefInputs;
  std::vector<std::unique_ptr<DeviceBuffer>> Bufs;
  Outputs Out;

  PagedPackedCall(const runtime::Attention &A, std::mt19937_64 &Rng, DType Dt, int H, int Hkv,
                  int PageSize, PageLayout Layout, bool Csr, const std::vector<int> &Counts,
                  const std::vector<int> &Lens)
      : P(makeBatch(Rng, Dt, Hkv, PageSize, Layout, Lens)), X(makeQueries(Rng, Dt, H, Counts, 3)),
        Caches(uploadCaches(P, Dt, P.B, Hkv, PageSize, PackedHeadDim)), Idx(P),
        KV(Idx.view(P, Csr, Caches.K->get(), Caches.V->get(), Dt, maxOf(Lens))),
        DQ(upload(X.Bits)), DCq(X.Cu.size() * 4), Out(A, Dt, X.Tq, H) {
    DCq.upload(X.Cu.data(), DCq.size());
    QV = runtime::TensorView::contiguous(DQ->get(), Dt, {X.Tq, H, PackedHeadDim});
    CuV = runtime::TensorView::contiguous(DCq.get(), DType::I32, {P.B + 1});
    makeInputs(*A.definition().Graph, H, Inputs, RefInputs, Bufs);
  }

  /// The outputs downloaded and checked against \p A's reference (every
  /// sequence's rows; the padding rows never written).
  bool check(const char *What, const runtime::Attention &A, DType Dt, int H) {
    std::vector<uint16_t> OBits;
    std::vector<float> FVals;
    Out.download(OBits, FVals);
    return checkPacked(What, A, Dt, P, H, X, rowsOf(X), RefInputs, OBits, FVals, {},
                       {{X.Cu.back(), X.Tq}});
  }
};

/// Paged decode's signature: decode_sm80 named, so that making the
/// Attention compiles no forward skeleton's kernel (paged decode runs the
/// same kernels either way); \p Arch for a compile-only run.
inline runtime::Signature pagedSignature(DType Dt, std::optional<GpuArch> Arch = std::nullopt) {
  runtime::Signature Sig;
  Sig.Dtype = Dt;
  Sig.HeadDim = Sig.HeadDimV = PackedHeadDim;
  Sig.Backend = "generated";
  Sig.Skeleton = "decode_sm80";
  Sig.Arch = Arch;
  return Sig;
}

} // namespace attn::gputest

#endif
