// GPU test of the packed (variable-length) linear backward
// (LinearAttention::backwardVarlen) for every linear example, f16 and bf16:
// sequences of 0, 1, 63, 64, 100, 333, 0 and 31 tokens packed end to end
// with initial states and final-state gradients; dq, dk, dv, ddecay,
// dinitial_state and the custom-input gradients against the fp64 token
// recurrence of each sequence (reference::linearVarlenBackward), with
// gpu_linear_test's tolerance (twice the error of the kernels' chunked
// algorithm with the 16-bit roundings, plus a small atol); two runs give the
// same bits; and each sequence's dv, ddecay and dinitial_state (and dq, dk
// where no heads share q or k heads) are bit for bit those of the
// fixed-length backward of that sequence alone. Exits 77 where there is no
// GPU; --sanitize runs one small case per example (for compute-sanitizer).
#include "GpuSupport.h"
#include "LinearGpuCheck.h"

#include "attn/codegen/Arch.h"
#include "attn/codegen/LinearCodegen.h"
#include "attn/reference/InputBinding.h"
#include "attn/reference/Linear.h"

#include <cstring>

using namespace attn;
using namespace attn::gputest;
namespace {

std::vector<double> widen(const std::vector<float> &F) {
  return std::vector<double>(F.begin(), F.end());
}

std::vector<char> bytesOf(const DeviceBuffer &B, size_t Off, size_t N) {
  std::vector<char> All(B.size());
  B.download(All.data(), All.size());
  return std::vector<char>(All.begin() + Off, All.begin() + Off + N);
}

std::vector<Check> runCase(const LinearVarlenCase &C, const std::vector<int64_t> &Lengths,
                           uint64_t Seed) {
  runtime::LinearSignature Sig;
  Sig.Dtype = C.Dt;
  Sig.HeadDim = C.D;
  Sig.HeadDimV = C.DV;
  dsl::LinearAttentionDef UserDef = definition(C.Def);
  runtime::LinearAttention Lin(UserDef, Sig);
  const CompiledDefinition &Def = Lin.definition();
  const ir::Graph &G = *Def.Graph;
  std::vector<int64_t> Cu = {0};
  for (int64_t L : Lengths)
    Cu.push_back(Cu.back() + L);
  const int S = int(Lengths.size()), T = int(Cu.back());

  std::mt19937_64 Rng(Seed);
  reference::LinearInputs In;
  In.Q = Tensor::normal({1, C.Hq, T, C.D}, Rng);
  In.K = Tensor::normal({1, C.Hk, T, C.D}, Rng);
  In.V = Tensor::normal({1, C.H, T, C.DV}, Rng);
  Tensor DO = Tensor::normal({1, C.H, T, C.DV}, Rng);
  In.Decay = Tensor::uniform({1, C.H, T}, Rng, -0.1, 0.0);
  In.Inputs = reference::sampleInputs(G, Rng, 1, C.H, T, T);
  Tensor Init = Tensor::normal({S, C.H, C.D, C.DV}, Rng);
  Tensor DFinal = Tensor::normal({S, C.H, C.D, C.DV}, Rng);
  for (Tensor *X : {&Init, &DFinal})
    for (double &E : X->Data)
      E = float(E);
  // [1, H, T, D] in BSHD order is [T, H, D].
  auto QB = upload(toBits16(In.Q, C.Dt, Layout::BSHD));
  auto KB = upload(toBits16(In.K, C.Dt, Layout::BSHD));
  auto VB = upload(toBits16(In.V, C.Dt, Layout::BSHD));
  auto DOB = upload(toBits16(DO, C.Dt, Layout::BSHD));
  reference::LinearGrads Exact =
      reference::linearVarlenBackward(Def, In, Cu, Init, DO, DFinal, 0, nullptr, 8);
  reference::LinearGrads Plain = reference::linearVarlenBackward(
      Def, In, Cu, Init, DO, DFinal, Lin.spec().Config.Chunk,
      [&](double X) { return roundTo(C.Dt, X); }, 8);

  DType ET = elemOf(C.Dt);
  std::vector<std::unique_ptr<DeviceBuffer>> Keep;
  runtime::InputMap Inputs = uploadInputs(G, In.Inputs, Keep);
  auto DecayB = upload(floats(In.Decay));
  auto InitB = upload(floats(Init));
  auto DFinalB = upload(floats(DFinal));
  std::vector<int32_t> Cu32(Cu.begin(), Cu.end());
  DeviceBuffer CuB(Cu32.size() * 4);
  CuB.upload(Cu32.data(), Cu32.size() * 4);
  const size_t NQ = size_t(T) * C.Hq * C.D, NK = size_t(T) * C.Hk * C.D,
               NV = size_t(T) * C.H * C.DV, NS = Init.Data.size(),
               ND = size_t(T) * C.H;
  DeviceBuffer DQB(NQ * 2), DKB(NK * 2), DVB(NV * 2), DDecayB(ND * 4), DInitB(NS * 4);
  std::map<std::string, std::unique_ptr<DeviceBuffer>> GradBufs;
  runtime::LinearInputGrads Grads;
  for (const auto &[Name, X] : In.Inputs) {
    GradBufs[Name] = std::make_unique<DeviceBuffer>(std::max<size_t>(4, X.Data.size() * 4));
    Grads[Name] = TensorView::contiguous(GradBufs[Name]->get(), DType::F32, X.Shape);
  }
  auto Tok = [&](void *P, int Heads, int Dim, int Tokens) {
    return TensorView::contiguous(P, ET, {Tokens, Heads, Dim});
  };
  TensorView Q = Tok(QB->get(), C.Hq, C.D, T), K = Tok(KB->get(), C.Hk, C.D, T),
             V = Tok(VB->get(), C.H, C.DV, T), DOV = Tok(DOB->get(), C.H, C.DV, T),
             DQ = Tok(DQB.get(), C.Hq, C.D, T), DK = Tok(DKB.get(), C.Hk, C.D, T),
             DV = Tok(DVB.get(), C.H, C.DV, T);
  TensorView Decay = TensorView::contiguous(DecayB->get(), DType::F32, {1, C.H, T});
  TensorView DDecay = TensorView::contiguous(DDecayB.get(), DType::F32, {1, C.H, T});
  TensorView CuV = TensorView::contiguous(CuB.get(), DType::I32, {S + 1});
  std::vector<int64_t> StateShape = {S, C.H, C.D, C.DV};
  TensorView InitV = TensorView::contiguous(InitB->get(), DType::F32, StateShape);
  TensorView DFinalV = TensorView::contiguous(DFinalB->get(), DType::F32, StateShape);
  TensorView DInitV = TensorView::contiguous(DInitB.get(), DType::F32, StateShape);
  const bool Reads = codegen::linearReadsDecay(Def);
  auto &Drv = runtime::CudaDriver::get();
  std::vector<DeviceBuffer *> Outs = {&DQB, &DKB, &DVB, &DDecayB, &DInitB};
  for (auto &[Name, B] : GradBufs)
    Outs.push_back(B.get());
  auto Run = [&] {
    for (DeviceBuffer *B : Outs)
      B->poison();
    Lin.backwardVarlen({Q, K, V, Reads ? &Decay : nullptr, DOV, CuV, &InitV, &DFinalV,
                        DQ, DK, DV, Reads ? &DDecay : nullptr, &DInitV},
                       Inputs, Grads);
    Drv.check(Drv.cuCtxSynchronize(), "packed backward");
    std::vector<std::vector<char>> Bytes;
    for (DeviceBuffer *B : Outs)
      Bytes.push_back(bytesOf(*B, 0, B->size()));
    return Bytes;
  };
  auto First = Run();
  auto Second = Run();

  auto Half = [&](const DeviceBuffer &B, int Heads, int Dim) {
    std::vector<uint16_t> Bits(B.size() / 2);
    B.download(Bits.data(), B.size());
    return fromBits16(Bits, C.Dt, Layout::BSHD, {1, Heads, T, Dim}).Data;
  };
  auto R16 = [&](const Tensor &X) { return rounded(X.Data, roundTo, C.Dt); };
  std::vector<Check> R = {
      compare("dq", Half(DQB, C.Hq, C.D), Exact.DQ.Data, R16(Plain.DQ), C.Dt),
      compare("dk", Half(DKB, C.Hk, C.D), Exact.DK.Data, R16(Plain.DK), C.Dt),
      compare("dv", Half(DVB, C.H, C.DV), Exact.DV.Data, R16(Plain.DV), C.Dt),
      compare("dinit", widen(download(DInitB, NS)), Exact.DInitialState->Data,
              Plain.DInitialState->Data, C.Dt)};
  if (Reads)
    R.push_back(compare("ddecay", widen(download(DDecayB, ND)), Exact.DDecay.Data,
                        Plain.DDecay.Data, C.Dt));
  for (const auto &[Name, B] : GradBufs)
    R.push_back(compare("d" + Name,
                        widen(download(*B, In.Inputs.at(Name).Data.size())),
                        Exact.DInputs.at(Name).Data, Plain.DInputs.at(Name).Data,
                        C.Dt));
  R.push_back({"deterministic", 0, 0, First == Second});

  // Each non-empty sequence alone through the fixed-length backward, its
  // tensors views of the packed ones (per-token inputs uploaded apart).
  const bool SharedHeads = C.Hq < C.H || C.Hk < C.H;
  bool Same = true;
  const size_t Entry = size_t(C.H) * C.D * C.DV;
  for (int Seq = 0; Seq < S; ++Seq) {
    const int T0 = int(Cu[Seq]), N = int(Lengths[Seq]);
    if (N == 0)
      continue;
    auto At = [&](const DeviceBuffer &B, size_t Elems) {
      return static_cast<char *>(B.get()) + Elems;
    };
    auto Seq16 = [&](const DeviceBuffer &B, int Heads, int Dim) {
      return TensorView::contiguous(At(B, size_t(T0) * Heads * Dim * 2), ET,
                                    {1, N, Heads, Dim});
    };
    DeviceBuffer SDQ(size_t(N) * C.Hq * C.D * 2), SDK(size_t(N) * C.Hk * C.D * 2),
        SDV(size_t(N) * C.H * C.DV * 2), SDDecay(size_t(N) * C.H * 4), SDInit(Entry * 4);
    TensorView SQ = Seq16(*QB, C.Hq, C.D), SK = Seq16(*KB, C.Hk, C.D),
               SV = Seq16(*VB, C.H, C.DV), SDO = Seq16(*DOB, C.H, C.DV);
    TensorView SDQv = TensorView::contiguous(SDQ.get(), ET, {1, N, C.Hq, C.D}),
               SDKv = TensorView::contiguous(SDK.get(), ET, {1, N, C.Hk, C.D}),
               SDVv = TensorView::contiguous(SDV.get(), ET, {1, N, C.H, C.DV});
    TensorView SDecay{At(*DecayB, size_t(T0) * 4), DType::F32, {1, C.H, N},
                      {int64_t(C.H) * T, T, 1}};
    TensorView SDDecayV = TensorView::contiguous(SDDecay.get(), DType::F32, {1, C.H, N});
    std::vector<int64_t> One = {1, C.H, C.D, C.DV};
    TensorView SInit = TensorView::contiguous(At(*InitB, Seq * Entry * 4), DType::F32, One);
    TensorView SDF = TensorView::contiguous(At(*DFinalB, Seq * Entry * 4), DType::F32, One);
    TensorView SDInitV = TensorView::contiguous(SDInit.get(), DType::F32, One);
    std::vector<std::unique_ptr<DeviceBuffer>> SKeep;
    runtime::InputMap SInputs =
        uploadInputs(G, reference::linearTokenSlice(G, In, T0, N).Inputs, SKeep);
    Lin.backward({SQ, SK, SV, Reads ? &SDecay : nullptr, SDO, &SInit, &SDF, SDQv, SDKv,
                  SDVv, Reads ? &SDDecayV : nullptr, &SDInitV},
                 SInputs);
    Drv.check(Drv.cuCtxSynchronize(), "fixed-length backward of one sequence");
    auto Slice = [&](size_t Index, size_t Off, size_t Bytes) {
      return std::vector<char>(First[Index].begin() + Off,
                               First[Index].begin() + Off + Bytes);
    };
    Same &= bytesOf(SDV, 0, SDV.size()) ==
            Slice(2, size_t(T0) * C.H * C.DV * 2, SDV.size());
    Same &= bytesOf(SDInit, 0, SDInit.size()) == Slice(4, Seq * Entry * 4, Entry * 4);
    if (!SharedHeads) {
      Same &= bytesOf(SDQ, 0, SDQ.size()) ==
              Slice(0, size_t(T0) * C.Hq * C.D * 2, SDQ.size());
      Same &= bytesOf(SDK, 0, SDK.size()) ==
              Slice(1, size_t(T0) * C.Hk * C.D * 2, SDK.size());
    }
    if (Reads) {
      std::vector<char> Got = bytesOf(SDDecay, 0, SDDecay.size());
      for (int h = 0; h < C.H; ++h)
        Same &= std::memcmp(Got.data() + size_t(h) * N * 4,
                            First[3].data() + (size_t(h) * T + T0) * 4,
                            size_t(N) * 4) == 0;
    }
  }
  R.push_back({"= per-sequence backward", 0, 0, Same});
  return R;
}

} // namespace

int main(int Argc, char **Argv) {
  return runLinearVarlenCases(Argc, Argv, 200, runCase);
}
