// Random device tensors for timing linear attention, and the CUDA-event
// median every linear timing goes through.
#include "attn/runtime/LinearProblem.h"

#include "attn/codegen/LinearCodegen.h"
#include "attn/reference/InputBinding.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/DtypeBits.h"
#include "attn/runtime/Errors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <random>

namespace attn::runtime {

namespace {

std::unique_ptr<DeviceAlloc> upload(const void *Host, size_t Bytes,
                                    const char *What) {
  CudaDriver &D = CudaDriver::get();
  auto Buf = std::make_unique<DeviceAlloc>(std::max<size_t>(Bytes, 4));
  if (Bytes)
    D.check(D.cuMemcpyHtoD(Buf->ptr(), Host, Bytes), What);
  return Buf;
}

/// A fp32 copy of \p T on the device; \p T is rounded to the fp32 values
/// uploaded, so that a reference reading it sees what the kernels see.
std::unique_ptr<DeviceAlloc> upload32(reference::Tensor &T) {
  std::vector<float> F(T.Data.begin(), T.Data.end());
  for (size_t I = 0; I < F.size(); ++I)
    T.Data[I] = F[I];
  return upload(F.data(), F.size() * 4, "cuMemcpyHtoD (linear inputs)");
}

} // namespace

std::string linearShapeText(const LinearShape &S) {
  return fmt::format("b{} h{}/{} t{}", S.Batch, S.Heads, S.HeadsQK, S.Seq);
}

void checkLinearShape(const LinearShape &S) {
  for (auto [Name, V] : {std::pair{"batch", S.Batch}, {"heads", S.Heads},
                         {"q/k heads", S.HeadsQK}, {"sequence length", S.Seq}})
    if (V < 1)
      throw InvalidArgument(
          fmt::format("linear problem: {} is {}; expected at least 1", Name, V));
  if (S.Heads % S.HeadsQK != 0)
    throw InvalidArgument(fmt::format("linear problem: q/k heads ({}) must "
                                      "divide the value heads ({})",
                                      S.HeadsQK, S.Heads));
}

LinearProblem::LinearProblem(const CompiledDefinition &Def,
                             const LinearSignature &Sig,
                             const LinearShape &S, int Sets, uint64_t Seed)
    : Sig(Sig), Shape(S) {
  checkLinearShape(S);
  CudaDriver &D = CudaDriver::get();
  D.require();
  (void)currentDevice(); // makes the primary context current here
  Elem = Sig.Dtype == DType::F16 ? DType::F16 : DType::BF16;
  ReadsDecay = codegen::linearReadsDecay(Def);

  std::mt19937_64 Rng(Seed);
  NormalPool Normals(Sig.Dtype, Rng, Seed);
  std::vector<uint16_t> Host;
  auto Random = [&](int64_t Elems) {
    Normals.fill(Host, size_t(Elems));
    return upload(Host.data(), Host.size() * 2,
                  "cuMemcpyHtoD (linear inputs)");
  };
  const int64_t NQK = S.Batch * S.Seq * S.HeadsQK * Sig.HeadDim,
                NV = S.Batch * S.Seq * S.Heads * Sig.HeadDimV;
  for (int I = 0; I < std::max(1, Sets); ++I) {
    Q.push_back(Random(NQK));
    K.push_back(Random(NQK));
    V.push_back(Random(NV));
    DO.push_back(Random(NV));
  }
  Out = std::make_unique<DeviceAlloc>(size_t(NV) * 2);
  DQ = std::make_unique<DeviceAlloc>(size_t(NQK) * 2);
  DK = std::make_unique<DeviceAlloc>(size_t(NQK) * 2);
  DV = std::make_unique<DeviceAlloc>(size_t(NV) * 2);

  DecayHost = reference::Tensor::uniform({S.Batch, S.Heads, S.Seq}, Rng, -0.1,
                                         0.0);
  Decay = upload32(DecayHost);
  DDecay = std::make_unique<DeviceAlloc>(size_t(S.Batch * S.Heads * S.Seq) * 4);
  InputHost =
      reference::sampleInputs(*Def.Graph, Rng, S.Batch, S.Heads, S.Seq, S.Seq);
  for (auto &[Name, T] : InputHost) {
    if (T.Shape.empty()) {
      T.Data[0] = float(T.Data[0]);
      Inputs[Name] = float(T.Data[0]);
      continue;
    }
    InputBuffers.push_back(upload32(T));
    Inputs[Name] = TensorView::contiguous(InputBuffers.back()->get(),
                                          DType::F32, T.Shape);
  }
}

LinearProblem::~LinearProblem() = default;

TensorView LinearProblem::view(const DeviceAlloc &Buf, int64_t Heads,
                               int64_t Dim) const {
  std::vector<int64_t> Dims =
      Sig.TensorLayout == Layout::BSHD
          ? std::vector<int64_t>{Shape.Batch, Shape.Seq, Heads, Dim}
          : std::vector<int64_t>{Shape.Batch, Heads, Shape.Seq, Dim};
  return TensorView::contiguous(Buf.get(), Elem, std::move(Dims));
}

TensorView LinearProblem::q(int Set) const {
  return view(*Q[Set], Shape.HeadsQK, Sig.HeadDim);
}
TensorView LinearProblem::k(int Set) const {
  return view(*K[Set], Shape.HeadsQK, Sig.HeadDim);
}
TensorView LinearProblem::v(int Set) const {
  return view(*V[Set], Shape.Heads, Sig.HeadDimV);
}
TensorView LinearProblem::dout(int Set) const {
  return view(*DO[Set], Shape.Heads, Sig.HeadDimV);
}
TensorView LinearProblem::out() const {
  return view(*Out, Shape.Heads, Sig.HeadDimV);
}
TensorView LinearProblem::dq() const {
  return view(*DQ, Shape.HeadsQK, Sig.HeadDim);
}
TensorView LinearProblem::dk() const {
  return view(*DK, Shape.HeadsQK, Sig.HeadDim);
}
TensorView LinearProblem::dv() const {
  return view(*DV, Shape.Heads, Sig.HeadDimV);
}

TensorView LinearProblem::ddecay() const {
  return TensorView::contiguous(DDecay->get(), DType::F32,
                                {Shape.Batch, Shape.Heads, Shape.Seq});
}

void LinearProblem::forward(LinearAttention &Lin, int Set, CUstream Stream) {
  TensorView DecayView = TensorView::contiguous(
      Decay->get(), DType::F32, {Shape.Batch, Shape.Heads, Shape.Seq});
  Lin.forward(q(Set), k(Set), v(Set), out(), ReadsDecay ? &DecayView : nullptr,
              Inputs, nullptr, nullptr, Stream);
}

void LinearProblem::decodeStep(LinearAttention &Lin, int Set, const TensorView &State,
                               CUstream Stream) {
  TensorView DecayView = TensorView::contiguous(
      Decay->get(), DType::F32, {Shape.Batch, Shape.Heads, Shape.Seq});
  TensorView Qv = q(Set), Kv = k(Set), Vv = v(Set), Ov = out();
  Lin.decodeStep({Qv, Kv, Vv, Ov, ReadsDecay ? &DecayView : nullptr, State, State},
                 Inputs, Stream);
}

double LinearProblem::decodeStateBytes() const {
  return 4.0 * double(Shape.Batch) * double(Shape.Heads) * double(Sig.HeadDim) *
         double(Sig.HeadDimV);
}

void LinearProblem::backward(LinearAttention &Lin, int Set, CUstream Stream) {
  std::vector<int64_t> BHT = {Shape.Batch, Shape.Heads, Shape.Seq};
  TensorView DecayView = TensorView::contiguous(Decay->get(), DType::F32, BHT);
  TensorView DDecayView =
      TensorView::contiguous(DDecay->get(), DType::F32, BHT);
  TensorView Qv = q(Set), Kv = k(Set), Vv = v(Set), DOv = dout(Set),
             DQv = dq(), DKv = dk(), DVv = dv();
  LinearBackwardTensors T{Qv,
                          Kv,
                          Vv,
                          ReadsDecay ? &DecayView : nullptr,
                          DOv,
                          nullptr,
                          nullptr,
                          DQv,
                          DKv,
                          DVv,
                          ReadsDecay ? &DDecayView : nullptr,
                          nullptr};
  Lin.backward(T, Inputs, {}, Stream);
}

void LinearProblem::setPacked(const std::vector<int64_t> &Lengths) {
  const int64_t Tokens = Shape.Batch * Shape.Seq;
  std::vector<int32_t> Cu = {0};
  int64_t Sum = 0;
  for (int64_t L : Lengths) {
    Sum += std::max<int64_t>(L, 0);
    if (L < 0 || Sum > Tokens)
      break;
    Cu.push_back(int32_t(Sum));
  }
  if (Lengths.empty() || Cu.size() != Lengths.size() + 1 || Sum != Tokens)
    throw InvalidArgument(fmt::format("linear problem: the packed lengths "
                                      "must be at least 0 and add up to the "
                                      "{} tokens of {}",
                                      Tokens, linearShapeText(Shape)));
  CuSeqlens = upload(Cu.data(), Cu.size() * 4, "cuMemcpyHtoD (cu_seqlens)");
  PackedSeqs = int64_t(Lengths.size());
  // Per-row inputs are [B, H, T]: the same values seen as one row of all
  // tokens.
  PackedInputs = Inputs;
  for (auto &[Name, Value] : PackedInputs)
    if (auto *View = std::get_if<TensorView>(&Value);
        View && View->Shape.size() == 3)
      *View = TensorView::contiguous(View->Data, DType::F32,
                                     {1, Shape.Heads, Tokens});
}

TensorView LinearProblem::packedView(const DeviceAlloc &Buf, int64_t Heads,
                                     int64_t Dim) const {
  return TensorView::contiguous(Buf.get(), Elem,
                                {Shape.Batch * Shape.Seq, Heads, Dim});
}

TensorView LinearProblem::packedRows(const DeviceAlloc &Buf) const {
  return TensorView::contiguous(Buf.get(), DType::F32,
                                {1, Shape.Heads, Shape.Batch * Shape.Seq});
}

void LinearProblem::forwardPacked(LinearAttention &Lin, int Set,
                                  CUstream Stream) {
  TensorView Qv = packedView(*Q[Set], Shape.HeadsQK, Sig.HeadDim),
             Kv = packedView(*K[Set], Shape.HeadsQK, Sig.HeadDim),
             Vv = packedView(*V[Set], Shape.Heads, Sig.HeadDimV),
             Ov = packedView(*Out, Shape.Heads, Sig.HeadDimV),
             DecayV = packedRows(*Decay),
             Cu = TensorView::contiguous(CuSeqlens->get(), DType::I32,
                                         {PackedSeqs + 1});
  Lin.forwardVarlen({Qv, Kv, Vv, Ov, ReadsDecay ? &DecayV : nullptr, Cu},
                    PackedInputs, Stream);
}

void LinearProblem::backwardPacked(LinearAttention &Lin, int Set,
                                   CUstream Stream) {
  TensorView Qv = packedView(*Q[Set], Shape.HeadsQK, Sig.HeadDim),
             Kv = packedView(*K[Set], Shape.HeadsQK, Sig.HeadDim),
             Vv = packedView(*V[Set], Shape.Heads, Sig.HeadDimV),
             DOv = packedView(*DO[Set], Shape.Heads, Sig.HeadDimV),
             DQv = packedView(*DQ, Shape.HeadsQK, Sig.HeadDim),
             DKv = packedView(*DK, Shape.HeadsQK, Sig.HeadDim),
             DVv = packedView(*DV, Shape.Heads, Sig.HeadDimV),
             DecayV = packedRows(*Decay), DDecayV = packedRows(*DDecay),
             Cu = TensorView::contiguous(CuSeqlens->get(), DType::I32,
                                         {PackedSeqs + 1});
  Lin.backwardVarlen({Qv, Kv, Vv, ReadsDecay ? &DecayV : nullptr, DOv, Cu,
                      nullptr, nullptr, DQv, DKv, DVv,
                      ReadsDecay ? &DDecayV : nullptr, nullptr},
                     PackedInputs, {}, Stream);
}

double LinearProblem::forwardBytes() const {
  double NQK = double(Shape.Batch) * Shape.Seq * Shape.HeadsQK * Sig.HeadDim,
         NV = double(Shape.Batch) * Shape.Seq * Shape.Heads * Sig.HeadDimV;
  return 2.0 * (2 * NQK + 2 * NV);
}

double LinearProblem::backwardBytes() const {
  double NQK = double(Shape.Batch) * Shape.Seq * Shape.HeadsQK * Sig.HeadDim,
         NV = double(Shape.Batch) * Shape.Seq * Shape.Heads * Sig.HeadDimV;
  return 2.0 * (4 * NQK + 4 * NV);
}

} // namespace attn::runtime
