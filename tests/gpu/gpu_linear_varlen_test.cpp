// GPU test of the packed (variable-length) linear forward
// (LinearAttention::forwardVarlen) for every linear example, f16 and bf16:
// sequences of 0, 1, 63, 64, 100, 333, 0 and 31 tokens packed end to end
// with initial states, outputs and final states against the fp64 token
// recurrence of each sequence (reference::linearVarlen), with
// gpu_linear_test's tolerance (twice the error of the kernels' chunked
// algorithm with the 16-bit roundings, plus a small atol); an empty
// sequence's final state is its initial state, bit for bit; two runs give
// the same bits. Exits 77 where there is no GPU; --sanitize runs one small
// case per example (for compute-sanitizer).
#include "GpuSupport.h"
#include "LinearGpuCheck.h"

#include "attn/codegen/LinearCodegen.h"
#include "attn/reference/InputBinding.h"
#include "attn/reference/Linear.h"

#include <cstring>

using namespace attn;
using namespace attn::gputest;

namespace {

std::vector<Check> runCase(const LinearVarlenCase &C, const std::vector<int64_t> &Lengths,
                           uint64_t Seed) {
  runtime::LinearSignature Sig;
  Sig.Dtype = C.Dt;
  Sig.HeadDim = C.D;
  Sig.HeadDimV = C.DV;
  dsl::LinearAttentionDef UserDef = definition(C.Def);
  runtime::LinearAttention Lin(UserDef, Sig);
  const CompiledDefinition &Def = Lin.definition();
  std::vector<int64_t> Cu = {0};
  for (int64_t L : Lengths)
    Cu.push_back(Cu.back() + L);
  const int S = int(Lengths.size()), T = int(Cu.back());

  std::mt19937_64 Rng(Seed);
  reference::LinearInputs In;
  In.Q = Tensor::normal({1, C.Hq, T, C.D}, Rng);
  In.K = Tensor::normal({1, C.Hk, T, C.D}, Rng);
  In.V = Tensor::normal({1, C.H, T, C.DV}, Rng);
  In.Decay = Tensor::uniform({1, C.H, T}, Rng, -0.1, 0.0);
  In.Inputs = reference::sampleInputs(*Def.Graph, Rng, 1, C.H, T, T);
  Tensor Init = Tensor::normal({S, C.H, C.D, C.DV}, Rng);
  for (double &X : Init.Data)
    X = float(X);
  // [1, H, T, D] in BSHD order is [T, H, D].
  auto QB = upload(toBits16(In.Q, C.Dt, Layout::BSHD));
  auto KB = upload(toBits16(In.K, C.Dt, Layout::BSHD));
  auto VB = upload(toBits16(In.V, C.Dt, Layout::BSHD));
  reference::LinearOutputs Exact = reference::linearVarlen(Def, In, Cu, Init);
  reference::LinearOutputs Plain =
      reference::linearVarlen(Def, In, Cu, Init, Lin.spec().Config.Chunk,
                              [&](double X) { return roundTo(C.Dt, X); });

  DType ET = elemOf(C.Dt);
  std::vector<std::unique_ptr<DeviceBuffer>> Keep;
  runtime::InputMap Inputs = uploadInputs(*Def.Graph, In.Inputs, Keep);
  auto DecayB = upload(floats(In.Decay));
  auto InitB = upload(floats(Init));
  auto FinalB = upload(std::vector<float>(Init.Data.size()));
  FinalB->poison();
  std::vector<int32_t> Cu32(Cu.begin(), Cu.end());
  DeviceBuffer CuB(Cu32.size() * 4);
  CuB.upload(Cu32.data(), Cu32.size() * 4);
  const size_t NO = size_t(T) * C.H * C.DV;
  DeviceBuffer OB(NO * 2);
  OB.poison();
  TensorView Q = TensorView::contiguous(QB->get(), ET, {T, C.Hq, C.D});
  TensorView K = TensorView::contiguous(KB->get(), ET, {T, C.Hk, C.D});
  TensorView V = TensorView::contiguous(VB->get(), ET, {T, C.H, C.DV});
  TensorView O = TensorView::contiguous(OB.get(), ET, {T, C.H, C.DV});
  TensorView Decay = TensorView::contiguous(DecayB->get(), DType::F32, {1, C.H, T});
  TensorView CuV = TensorView::contiguous(CuB.get(), DType::I32, {S + 1});
  std::vector<int64_t> StateShape = {S, C.H, C.D, C.DV};
  TensorView InitV = TensorView::contiguous(InitB->get(), DType::F32, StateShape);
  TensorView FinalV = TensorView::contiguous(FinalB->get(), DType::F32, StateShape);
  const bool Reads = codegen::linearReadsDecay(Def);
  auto &Drv = runtime::CudaDriver::get();
  auto Run = [&] {
    Lin.forwardVarlen({Q, K, V, O, Reads ? &Decay : nullptr, CuV, &InitV, &FinalV},
                      Inputs);
    Drv.check(Drv.cuCtxSynchronize(), "packed forward");
    std::vector<uint16_t> Bits(NO);
    OB.download(Bits.data(), NO * 2);
    return std::make_pair(Bits, download(*FinalB, Init.Data.size()));
  };
  auto First = Run();
  auto Second = Run();

  std::vector<double> GotO = fromBits16(First.first, C.Dt, Layout::BSHD,
                                        {1, C.H, T, C.DV})
                                 .Data;
  std::vector<double> GotS(First.second.begin(), First.second.end());
  std::vector<Check> R = {
      compare("out", GotO, Exact.O.Data, rounded(Plain.O.Data, roundTo, C.Dt), C.Dt),
      compare("final", GotS, Exact.FinalState.Data, Plain.FinalState.Data, C.Dt)};
  const size_t Entry = size_t(C.H) * C.D * C.DV;
  bool Through = true;
  for (int I = 0; I < S; ++I)
    if (Lengths[I] == 0)
      Through &= std::memcmp(First.second.data() + I * Entry,
                             floats(Init).data() + I * Entry, Entry * 4) == 0;
  R.push_back({"empty passes its state", 0, 0, Through});
  R.push_back({"deterministic", 0, 0,
               First.first == Second.first && First.second == Second.second});
  return R;
}

} // namespace

int main(int Argc, char **Argv) {
  return runLinearVarlenCases(Argc, Argv, 100, runCase);
}
