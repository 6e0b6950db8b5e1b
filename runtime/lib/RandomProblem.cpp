// Random device tensors for timing: q/k/v sets drawn from a pool of normal
// values, custom inputs over their sample ranges, views of sub-problems.
#include "attn/runtime/RandomProblem.h"

#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/DtypeBits.h"
#include "attn/Error.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <random>

namespace attn::runtime {

DeviceAlloc::DeviceAlloc(size_t Bytes) : Bytes(Bytes) {
  CudaDriver &D = CudaDriver::get();
  D.require();
  D.check(D.cuMemAlloc(&Ptr, Bytes ? Bytes : 1), "cuMemAlloc");
}

DeviceAlloc::~DeviceAlloc() {
  CudaDriver &D = CudaDriver::get();
  if (Ptr && D.available())
    D.cuMemFree(Ptr);
}

void DeviceAlloc::poison(unsigned char Byte) {
  CudaDriver &D = CudaDriver::get();
  D.check(D.cuMemsetD8(Ptr, Byte, Bytes), "cuMemsetD8");
}

ShuffledPages::ShuffledPages(int64_t Batch, int64_t SeqKv, int64_t PageSize)
    : Batch(Batch), SeqKv(SeqKv), PageSize(PageSize), Pages(SeqKv / PageSize),
      Table(size_t(Batch * (SeqKv / PageSize)) * 4), Lens(size_t(Batch) * 4) {
  if (PageSize <= 0 || SeqKv % PageSize != 0)
    throw InternalError("ShuffledPages: pages of " + std::to_string(PageSize) +
                        " do not hold " + std::to_string(SeqKv) + " keys whole");
  std::vector<int32_t> Perm(size_t(Batch * Pages));
  std::iota(Perm.begin(), Perm.end(), 0);
  std::shuffle(Perm.begin(), Perm.end(), std::mt19937_64(uint64_t(PageSize)));
  const std::vector<int32_t> L(static_cast<size_t>(Batch), static_cast<int32_t>(SeqKv));
  CudaDriver &D = CudaDriver::get();
  D.check(D.cuMemcpyHtoD(Table.ptr(), Perm.data(), Perm.size() * 4),
          "cuMemcpyHtoD (block table)");
  D.check(D.cuMemcpyHtoD(Lens.ptr(), L.data(), L.size() * 4), "cuMemcpyHtoD (lengths)");
}

PagedKV ShuffledPages::view(const TensorView &K, const TensorView &V) const {
  auto Cache = [&](const TensorView &T) {
    return TensorView::contiguous(T.Data, T.Type,
                                  {Batch * Pages, PageSize, T.Shape[2], T.Shape[3]});
  };
  PagedKV P;
  P.KCache = Cache(K);
  P.VCache = Cache(V);
  P.BlockTable = TensorView::contiguous(Table.get(), DType::I32, {Batch, Pages});
  P.SeqLens = TensorView::contiguous(Lens.get(), DType::I32, {Batch});
  P.MaxSeqlenKv = SeqKv;
  return P;
}

namespace {

int64_t inputElements(ir::InputShape S, const TuneShape &P) {
  switch (S) {
  case ir::InputShape::Scalar:
    return 0;
  case ir::InputShape::PerHead:
    return P.Heads;
  case ir::InputShape::PerRow:
    return P.Batch * P.Heads * P.SeqQ;
  case ir::InputShape::PerKey:
    return P.Batch * P.Heads * P.SeqKv;
  case ir::InputShape::Full:
    return P.Batch * P.Heads * P.SeqQ * P.SeqKv;
  case ir::InputShape::PerQueryToken:
    return P.Batch * P.SeqQ;
  case ir::InputShape::PerKeyToken:
    return P.Batch * P.SeqKv;
  }
  return 0;
}

/// The length of the innermost (contiguous) dimension of an input's buffer.
int64_t innermost(ir::InputShape S, const TuneShape &P) {
  switch (S) {
  case ir::InputShape::Scalar:
    return 1;
  case ir::InputShape::PerHead:
    return P.Heads;
  case ir::InputShape::PerRow:
  case ir::InputShape::PerQueryToken:
    return P.SeqQ;
  case ir::InputShape::PerKey:
  case ir::InputShape::Full:
  case ir::InputShape::PerKeyToken:
    return P.SeqKv;
  }
  return 1;
}

} // namespace

RandomProblem::RandomProblem(const CompiledDefinition &Def,
                             const Signature &Sig, const TuneShape &S,
                             int Sets, uint64_t Seed)
    : Def(Def), Sig(Sig), Shape(S) {
  CudaDriver &D = CudaDriver::get();
  D.require();
  (void)currentDevice(); // makes the primary context current here
  Elem = Sig.Dtype == DType::F16 ? DType::F16 : DType::BF16;

  std::mt19937_64 Rng(Seed);
  NormalPool Normals(Sig.Dtype, Rng, Seed);
  std::vector<uint16_t> Host;
  auto Random = [&](int64_t Elems) {
    Normals.fill(Host, size_t(Elems));
    auto Buf = std::make_unique<DeviceAlloc>(Host.size() * 2);
    D.check(D.cuMemcpyHtoD(Buf->ptr(), Host.data(), Host.size() * 2),
            "cuMemcpyHtoD (random inputs)");
    return Buf;
  };
  for (int I = 0; I < std::max(1, Sets); ++I) {
    Q.push_back(Random(S.Batch * S.SeqQ * S.Heads * Sig.HeadDim));
    K.push_back(Random(S.Batch * S.SeqKv * S.HeadsKv * Sig.HeadDim));
    V.push_back(Random(S.Batch * S.SeqKv * S.HeadsKv * Sig.HeadDimV));
  }
  Out = std::make_unique<DeviceAlloc>(
      size_t(S.Batch * S.SeqQ * S.Heads * Sig.HeadDimV) * 2);

  for (const ir::InputDecl &In : Def.Graph->decls().Inputs) {
    if (In.Shape == ir::InputShape::Scalar)
      continue;
    size_t N = static_cast<size_t>(inputElements(In.Shape, S));
    std::vector<float> Values(N);
    std::vector<int32_t> Ints(N);
    if (In.Elem == ir::InputType::I32) {
      // Whole numbers of the sample range, non-decreasing along the
      // sequence (as document ids are), so that equal ids form blocks.
      std::uniform_int_distribution<int32_t> U(
          int32_t(std::ceil(In.SampleLo)), int32_t(std::floor(In.SampleHi)));
      for (int32_t &X : Ints)
        X = U(Rng);
      int64_t Run = std::max<int64_t>(1, innermost(In.Shape, S));
      for (size_t At = 0; At + size_t(Run) <= N; At += size_t(Run))
        std::sort(Ints.begin() + At, Ints.begin() + At + Run);
    } else {
      std::uniform_real_distribution<float> U(float(In.SampleLo),
                                              float(In.SampleHi));
      for (float &X : Values)
        X = U(Rng);
    }
    const void *Host = In.Elem == ir::InputType::I32
                           ? static_cast<const void *>(Ints.data())
                           : static_cast<const void *>(Values.data());
    InputBuffers.push_back(std::make_unique<DeviceAlloc>(N * 4));
    D.check(D.cuMemcpyHtoD(InputBuffers.back()->ptr(), Host, N * 4),
            "cuMemcpyHtoD (random inputs)");
  }
}

RandomProblem::Call RandomProblem::call(const TuneShape &Sub) const {
  auto View = [&](const DeviceAlloc &Buf, int64_t Heads, int64_t Seq,
                  int64_t FullSeq, int64_t Dim) {
    TensorView T;
    T.Data = Buf.get();
    T.Type = Elem;
    if (Sig.TensorLayout == Layout::BSHD) {
      T.Shape = {Sub.Batch, Seq, Heads, Dim};
      T.Strides = {FullSeq * Heads * Dim, Heads * Dim, Dim, 1};
    } else {
      T.Shape = {Sub.Batch, Heads, Seq, Dim};
      T.Strides = {Heads * FullSeq * Dim, FullSeq * Dim, Dim, 1};
    }
    return T;
  };
  Call C;
  for (size_t I = 0; I < Q.size(); ++I) {
    C.Q.push_back(View(*Q[I], Sub.Heads, Sub.SeqQ, Shape.SeqQ, Sig.HeadDim));
    C.K.push_back(
        View(*K[I], Sub.HeadsKv, Sub.SeqKv, Shape.SeqKv, Sig.HeadDim));
    C.V.push_back(
        View(*V[I], Sub.HeadsKv, Sub.SeqKv, Shape.SeqKv, Sig.HeadDimV));
  }
  C.Out = View(*Out, Sub.Heads, Sub.SeqQ, Shape.SeqQ, Sig.HeadDimV);
  int64_t F = int64_t(Def.Graph->decls().FinalRowscales.size());
  C.HasFinals = F > 0;
  C.FinalsBuffer = std::make_unique<DeviceAlloc>(
      size_t(std::max<int64_t>(1, F * Sub.Batch * Sub.Heads * Sub.SeqQ)) * 4);
  C.FinalsView = TensorView::contiguous(C.FinalsBuffer->get(), DType::F32,
                                        {F, Sub.Batch, Sub.Heads, Sub.SeqQ});
  size_t Next = 0;
  for (const ir::InputDecl &In : Def.Graph->decls().Inputs) {
    if (In.Shape == ir::InputShape::Scalar) {
      double Mid = (In.SampleLo + In.SampleHi) / 2;
      if (In.Elem == ir::InputType::I32)
        C.Inputs[In.Name] = int32_t(std::floor(Mid));
      else
        C.Inputs[In.Name] = float(Mid);
      continue;
    }
    TensorView T;
    T.Data = InputBuffers[Next++]->get();
    T.Type = In.Elem == ir::InputType::I32 ? DType::I32 : DType::F32;
    int64_t B = Sub.Batch, H = Sub.Heads;
    switch (In.Shape) {
    case ir::InputShape::Scalar:
      break;
    case ir::InputShape::PerHead:
      T.Shape = {H};
      T.Strides = {1};
      break;
    case ir::InputShape::PerRow:
      T.Shape = {B, H, Sub.SeqQ};
      T.Strides = {H * Shape.SeqQ, Shape.SeqQ, 1};
      break;
    case ir::InputShape::PerKey:
      T.Shape = {B, H, Sub.SeqKv};
      T.Strides = {H * Shape.SeqKv, Shape.SeqKv, 1};
      break;
    case ir::InputShape::Full:
      T.Shape = {B, H, Sub.SeqQ, Sub.SeqKv};
      T.Strides = {H * Shape.SeqQ * Shape.SeqKv, Shape.SeqQ * Shape.SeqKv,
                   Shape.SeqKv, 1};
      break;
    case ir::InputShape::PerQueryToken:
      T.Shape = {B, Sub.SeqQ};
      T.Strides = {Shape.SeqQ, 1};
      break;
    case ir::InputShape::PerKeyToken:
      T.Shape = {B, Sub.SeqKv};
      T.Strides = {Shape.SeqKv, 1};
      break;
    }
    C.Inputs[In.Name] = T;
  }
  C.Shape = validateCall(*Def.Graph, Sig, C.Q[0], C.K[0], C.V[0], C.Out,
                         C.finals(), C.Inputs);
  return C;
}

} // namespace attn::runtime
