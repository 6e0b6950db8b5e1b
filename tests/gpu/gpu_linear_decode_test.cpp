// GPU test of the linear decode step (LinearAttention::decodeStep) for every
// linear example, f16 and bf16:
//  * step: one step of 1, 7 or 16 tokens over a pool with an index table
//    (one padding row) and positions, in place and to a second pool,
//    against the fp64 reference step (reference::linearDecodeStep); the
//    padding row's outputs and the pool entries no row names are untouched;
//  * sequence: T tokens decoded one at a time, and 16 at a time, from an
//    initial state equal the chunked forward over the T tokens (outputs and
//    final state), each also against the fp64 recurrence;
//  * graph: a step captured in a CUDA graph and replayed gives the same
//    bits as the same steps launched directly.
// The tolerance is gpu_linear_test's rule: twice the error of a plain
// low-precision implementation (the exact values rounded to the output's
// type; the chunked model for the forward) plus 1e-3 (f16) or 8e-3 (bf16)
// times the tensor's largest magnitude when above 1. Decode and forward
// may differ by the sum of their tolerances. Exits 77 where there is no
// GPU; --sanitize runs one small step per example (for compute-sanitizer).
#include "DriverExtras.h"
#include "GpuSupport.h"
#include "LinearGpuCheck.h"

#include "Examples.h"
#include "attn/codegen/LinearCodegen.h"
#include "attn/reference/InputBinding.h"
#include "attn/reference/Linear.h"
#include "attn/runtime/LinearAttention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

using namespace attn;
using namespace attn::gputest;
using reference::Tensor;
using runtime::TensorView;

namespace {

struct Case {
  std::string Def;
  DType Dt;
  int D, DV, H, Hq, Hk;
  Layout L;
  std::string name() const {
    return fmt::format("{} {} d{}/{} h{}/{}/{} {}", Def, std::string(dtypeName(Dt)),
                       D, DV, H, Hq, Hk, std::string(layoutName(L)));
  }
};

std::vector<Case> cases(bool Sanitize) {
  std::vector<Case> Out;
  struct Ex {
    const char *Name;
    int D, DV, H, Hq, Hk;
  } Exs[] = {{"mamba2", 128, 64, 4, 1, 1},
             {"simple_gla", 64, 128, 4, 4, 2},
             {"simple_gla", 128, 128, 4, 4, 4},
             {"retention_linear", 256, 128, 2, 2, 2}};
  int I = 0;
  for (const Ex &E : Exs)
    for (DType Dt : {DType::F16, DType::BF16}) {
      if (Sanitize && Dt == DType::F16)
        continue;
      Out.push_back({E.Name, Dt, E.D, E.DV, E.H, E.Hq, E.Hk,
                     ++I % 2 ? Layout::BSHD : Layout::BHSD});
    }
  return Out;
}

runtime::LinearSignature signature(const Case &C) {
  runtime::LinearSignature Sig;
  Sig.Dtype = C.Dt;
  Sig.HeadDim = C.D;
  Sig.HeadDimV = C.DV;
  Sig.TensorLayout = C.L;
  return Sig;
}

/// One step over a pool (index table with a padding row, positions).
std::vector<Check> stepCase(const Case &C, const CompiledDefinition &Def,
                            runtime::LinearAttention &Lin, int N, bool InPlace,
                            uint64_t Seed) {
  const int B = 4, P = 6;
  const std::vector<int32_t> Index = {5, -1, 0, 3}, Pos = {9, 0, 40, 1};
  std::mt19937_64 Rng(Seed);
  reference::LinearDecodeInputs In;
  In.Tokens.Q = Tensor::normal({B, C.Hq, N, C.D}, Rng);
  In.Tokens.K = Tensor::normal({B, C.Hk, N, C.D}, Rng);
  In.Tokens.V = Tensor::normal({B, C.H, N, C.DV}, Rng);
  In.Tokens.Decay = Tensor::uniform({B, C.H, N}, Rng, -0.1, 0.0);
  In.Tokens.Inputs = reference::sampleInputs(*Def.Graph, Rng, B, C.H, N, N);
  In.States = Tensor::normal({P, C.H, C.D, C.DV}, Rng);
  for (double &X : In.States.Data) // fp32 on the device
    X = float(X);
  In.StateIndex = std::vector<int64_t>(Index.begin(), Index.end());
  In.Positions = std::vector<int64_t>(Pos.begin(), Pos.end());
  auto QB = upload(toBits16(In.Tokens.Q, C.Dt, C.L));
  auto KB = upload(toBits16(In.Tokens.K, C.Dt, C.L));
  auto VB = upload(toBits16(In.Tokens.V, C.Dt, C.L));
  reference::LinearDecodeOutputs Want = reference::linearDecodeStep(Def, In);

  const uint16_t Fill = toBits(C.Dt, 0.5);
  auto OB = upload(std::vector<uint16_t>(size_t(B) * N * C.H * C.DV, Fill));
  auto DecayB = upload(floats(In.Tokens.Decay));
  auto SIn = upload(floats(In.States));
  Tensor OutFill({P, C.H, C.D, C.DV}, 7.0);
  auto SOutSep = upload(floats(OutFill));
  DeviceBuffer &SOut = InPlace ? *SIn : *SOutSep;
  std::vector<std::unique_ptr<DeviceBuffer>> Keep;
  TensorView IdxV = uploadInput(true, std::vector<double>(Index.begin(), Index.end()),
                                {B}, Keep);
  TensorView PosV = uploadInput(true, std::vector<double>(Pos.begin(), Pos.end()),
                                {B}, Keep);
  runtime::InputMap Inputs = uploadInputs(*Def.Graph, In.Tokens.Inputs, Keep);

  DType ET = elemOf(C.Dt);
  TensorView Q = TensorView::contiguous(QB->get(), ET, viewShape(C.L, B, C.Hq, N, C.D));
  TensorView K = TensorView::contiguous(KB->get(), ET, viewShape(C.L, B, C.Hk, N, C.D));
  TensorView V = TensorView::contiguous(VB->get(), ET, viewShape(C.L, B, C.H, N, C.DV));
  TensorView O = TensorView::contiguous(OB->get(), ET, viewShape(C.L, B, C.H, N, C.DV));
  TensorView Decay = TensorView::contiguous(DecayB->get(), DType::F32, {B, C.H, N});
  std::vector<int64_t> PoolShape = {P, C.H, C.D, C.DV};
  TensorView SI = TensorView::contiguous(SIn->get(), DType::F32, PoolShape);
  TensorView SO = TensorView::contiguous(SOut.get(), DType::F32, PoolShape);
  Lin.decodeStep({Q, K, V, O, codegen::linearReadsDecay(Def) ? &Decay : nullptr, SI,
                  SO, &IdxV, &PosV},
                 Inputs);
  runtime::CudaDriver::get().check(runtime::CudaDriver::get().cuCtxSynchronize(),
                                   "decode step");

  std::vector<uint16_t> OBits(size_t(B) * N * C.H * C.DV);
  OB->download(OBits.data(), OBits.size() * 2);
  Tensor GotO = fromBits16(OBits, C.Dt, C.L, {B, C.H, N, C.DV});
  std::vector<float> GotS = download(SOut, In.States.Data.size());

  std::vector<double> GO, WO, GS, WS;
  bool Untouched = true;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < C.H; ++h)
      for (int t = 0; t < N; ++t)
        for (int y = 0; y < C.DV; ++y) {
          if (Index[b] < 0) {
            Untouched &= OBits[offsetOf(C.L, C.H, N, C.DV, b, h, t, y)] == Fill;
            continue;
          }
          GO.push_back(GotO.at({b, h, t, y}));
          WO.push_back(Want.O.at({b, h, t, y}));
        }
  const size_t Entry = size_t(C.H) * C.D * C.DV;
  for (int p = 0; p < P; ++p) {
    bool Named = std::find(Index.begin(), Index.end(), p) != Index.end();
    for (size_t I = p * Entry; I < (p + 1) * Entry; ++I) {
      if (!Named) {
        Untouched &= GotS[I] == float(InPlace ? In.States.Data[I] : 7.0);
        continue;
      }
      GS.push_back(GotS[I]);
      WS.push_back(Want.States.Data[I]);
    }
  }
  std::string Tag = fmt::format("n{}{}", N, InPlace ? " in-place" : "");
  std::vector<Check> R = {compare(Tag + " out", GO, WO, rounded(WO, roundTo, C.Dt), C.Dt),
                          compare("state", GS, WS, rounded(WS, roundF32, C.Dt), C.Dt)};
  R.push_back({"untouched", 0, 0, Untouched});
  return R;
}


/// Views of tokens [T0, T0 + N) of a [B,T,H,D] (BSHD) or [B,H,T,D] (BHSD)
/// 16-bit buffer.
TensorView tokenView(const DeviceBuffer &Buf, DType ET, Layout L, int B, int H,
                     int T, int D, int T0, int N) {
  TensorView V;
  V.Type = ET;
  if (L == Layout::BSHD) {
    V.Data = static_cast<uint16_t *>(Buf.get()) + size_t(T0) * H * D;
    V.Shape = {B, N, H, D};
    V.Strides = {int64_t(T) * H * D, int64_t(H) * D, D, 1};
  } else {
    V.Data = static_cast<uint16_t *>(Buf.get()) + size_t(T0) * D;
    V.Shape = {B, H, N, D};
    V.Strides = {int64_t(H) * T * D, int64_t(T) * D, D, 1};
  }
  return V;
}

/// Tokens [T0, T0 + N) of a [B,H,T] float32 view (its last stride 1).
TensorView rowView(const TensorView &Full, int T0, int N) {
  TensorView V = Full;
  V.Data = static_cast<float *>(Full.Data) + T0;
  V.Shape[2] = N;
  return V;
}

/// T tokens decoded \p Piece at a time against the chunked forward.
std::vector<Check> sequenceCase(const Case &C, const CompiledDefinition &Def,
                                runtime::LinearAttention &Lin, int Piece,
                                uint64_t Seed) {
  const int B = 2, T = 77;
  std::mt19937_64 Rng(Seed);
  reference::LinearInputs In;
  In.Q = Tensor::normal({B, C.Hq, T, C.D}, Rng);
  In.K = Tensor::normal({B, C.Hk, T, C.D}, Rng);
  In.V = Tensor::normal({B, C.H, T, C.DV}, Rng);
  In.Decay = Tensor::uniform({B, C.H, T}, Rng, -0.1, 0.0);
  In.Inputs = reference::sampleInputs(*Def.Graph, Rng, B, C.H, T, T);
  In.InitialState = Tensor::normal({B, C.H, C.D, C.DV}, Rng);
  for (double &X : In.InitialState->Data)
    X = float(X);
  auto QB = upload(toBits16(In.Q, C.Dt, C.L));
  auto KB = upload(toBits16(In.K, C.Dt, C.L));
  auto VB = upload(toBits16(In.V, C.Dt, C.L));
  reference::LinearOutputs Exact = reference::linearRecurrent(Def, In);
  reference::LinearOutputs Plain = reference::linearChunkedModel(
      Def, In, Lin.spec().Config.Chunk, [&](double X) { return roundTo(C.Dt, X); });

  DType ET = elemOf(C.Dt);
  std::vector<std::unique_ptr<DeviceBuffer>> Keep;
  runtime::InputMap Inputs = uploadInputs(*Def.Graph, In.Inputs, Keep);
  auto DecayB = upload(floats(In.Decay));
  TensorView Decay = TensorView::contiguous(DecayB->get(), DType::F32, {B, C.H, T});
  const bool Reads = codegen::linearReadsDecay(Def);
  std::vector<int64_t> StateShape = {B, C.H, C.D, C.DV};
  auto InitB = upload(floats(*In.InitialState));
  auto FinalB = upload(std::vector<float>(In.InitialState->Data.size()));
  auto StateB = upload(floats(*In.InitialState));
  size_t NO = size_t(B) * T * C.H * C.DV;
  auto OF = std::make_unique<DeviceBuffer>(NO * 2), OD = std::make_unique<DeviceBuffer>(NO * 2);
  OF->poison();
  OD->poison();
  TensorView Init = TensorView::contiguous(InitB->get(), DType::F32, StateShape);
  TensorView Final = TensorView::contiguous(FinalB->get(), DType::F32, StateShape);
  TensorView State = TensorView::contiguous(StateB->get(), DType::F32, StateShape);
  Lin.forward(tokenView(*QB, ET, C.L, B, C.Hq, T, C.D, 0, T),
              tokenView(*KB, ET, C.L, B, C.Hk, T, C.D, 0, T),
              tokenView(*VB, ET, C.L, B, C.H, T, C.DV, 0, T),
              tokenView(*OF, ET, C.L, B, C.H, T, C.DV, 0, T), Reads ? &Decay : nullptr,
              Inputs, &Init, &Final);

  DeviceBuffer PosB(B * 4);
  TensorView Pos = TensorView::contiguous(PosB.get(), DType::I32, {B});
  for (int T0 = 0; T0 < T; T0 += Piece) {
    const int N = std::min(Piece, T - T0);
    std::vector<int32_t> P(B, T0);
    PosB.upload(P.data(), B * 4);
    runtime::InputMap Step = Inputs;
    for (const ir::InputDecl &D : Def.Graph->decls().Inputs)
      if (D.Shape == ir::InputShape::PerRow)
        Step[D.Name] = rowView(std::get<TensorView>(Inputs.at(D.Name)), T0, N);
    TensorView DecayStep = rowView(Decay, T0, N);
    Lin.decodeStep({tokenView(*QB, ET, C.L, B, C.Hq, T, C.D, T0, N),
                    tokenView(*KB, ET, C.L, B, C.Hk, T, C.D, T0, N),
                    tokenView(*VB, ET, C.L, B, C.H, T, C.DV, T0, N),
                    tokenView(*OD, ET, C.L, B, C.H, T, C.DV, T0, N),
                    Reads ? &DecayStep : nullptr, State, State, nullptr, &Pos},
                   Step);
  }
  runtime::CudaDriver::get().check(runtime::CudaDriver::get().cuCtxSynchronize(),
                                   "decode steps");

  std::vector<uint16_t> Bits(NO);
  OF->download(Bits.data(), NO * 2);
  std::vector<double> GotF = fromBits16(Bits, C.Dt, C.L, {B, C.H, T, C.DV}).Data;
  OD->download(Bits.data(), NO * 2);
  std::vector<double> GotD = fromBits16(Bits, C.Dt, C.L, {B, C.H, T, C.DV}).Data;
  std::vector<float> FF = download(*FinalB, Exact.FinalState.Data.size());
  std::vector<float> FD = download(*StateB, Exact.FinalState.Data.size());
  std::vector<double> SF(FF.begin(), FF.end()), SD(FD.begin(), FD.end());

  const std::vector<double> &WO = Exact.O.Data, &WS = Exact.FinalState.Data;
  std::string Tag = fmt::format("t{}/{}", T, Piece);
  Check Fo = compare(Tag + " fwd out", GotF, WO, rounded(Plain.O.Data, roundTo, C.Dt), C.Dt);
  Check Do = compare("dec out", GotD, WO, rounded(WO, roundTo, C.Dt), C.Dt);
  Check Fs = compare("fwd state", SF, WS, Plain.FinalState.Data, C.Dt);
  Check Ds = compare("dec state", SD, WS, rounded(WS, roundF32, C.Dt), C.Dt);
  // Decode against the forward itself, within both tolerances.
  Check Xo = compare("dec-fwd out", GotD, GotF, GotF, C.Dt);
  Xo.Tol = Fo.Tol + Do.Tol;
  Xo.Pass = Xo.Err <= Xo.Tol;
  Check Xs = compare("dec-fwd state", SD, SF, SF, C.Dt);
  Xs.Tol = Fs.Tol + Ds.Tol;
  Xs.Pass = Xs.Err <= Xs.Tol;
  return {Fo, Do, Fs, Ds, Xo, Xs};
}

/// Two steps launched directly, then the same two steps as replays of a
/// captured graph: the same bits.
std::vector<Check> graphCase(const Case &C, const CompiledDefinition &Def,
                             runtime::LinearAttention &Lin, uint64_t Seed) {
  const int B = 3, N = 2;
  std::mt19937_64 Rng(Seed);
  reference::LinearInputs In;
  In.Q = Tensor::normal({B, C.Hq, N, C.D}, Rng);
  In.K = Tensor::normal({B, C.Hk, N, C.D}, Rng);
  In.V = Tensor::normal({B, C.H, N, C.DV}, Rng);
  In.Decay = Tensor::uniform({B, C.H, N}, Rng, -0.1, 0.0);
  In.Inputs = reference::sampleInputs(*Def.Graph, Rng, B, C.H, N, N);
  Tensor S0 = Tensor::normal({B, C.H, C.D, C.DV}, Rng);
  auto QB = upload(toBits16(In.Q, C.Dt, C.L));
  auto KB = upload(toBits16(In.K, C.Dt, C.L));
  auto VB = upload(toBits16(In.V, C.Dt, C.L));
  auto DecayB = upload(floats(In.Decay));
  auto SB = upload(floats(S0));
  size_t NO = size_t(B) * N * C.H * C.DV;
  DeviceBuffer OB(NO * 2);
  std::vector<std::unique_ptr<DeviceBuffer>> Keep;
  runtime::InputMap Inputs = uploadInputs(*Def.Graph, In.Inputs, Keep);
  DType ET = elemOf(C.Dt);
  TensorView Q = TensorView::contiguous(QB->get(), ET, viewShape(C.L, B, C.Hq, N, C.D));
  TensorView K = TensorView::contiguous(KB->get(), ET, viewShape(C.L, B, C.Hk, N, C.D));
  TensorView V = TensorView::contiguous(VB->get(), ET, viewShape(C.L, B, C.H, N, C.DV));
  TensorView O = TensorView::contiguous(OB.get(), ET, viewShape(C.L, B, C.H, N, C.DV));
  TensorView Decay = TensorView::contiguous(DecayB->get(), DType::F32, {B, C.H, N});
  TensorView S = TensorView::contiguous(SB->get(), DType::F32, {B, C.H, C.D, C.DV});
  runtime::LinearDecodeTensors Args{Q, K, V, O,
                                    codegen::linearReadsDecay(Def) ? &Decay : nullptr,
                                    S, S};
  auto &Drv = runtime::CudaDriver::get();
  const DriverExtras &X = DriverExtras::get();
  Stream St;
  auto Results = [&] {
    Drv.check(Drv.cuStreamSynchronize(St.get()), "stream");
    std::vector<uint16_t> OBits(NO);
    OB.download(OBits.data(), NO * 2);
    return std::make_pair(OBits, download(*SB, S0.Data.size()));
  };
  for (int I = 0; I < 2; ++I)
    Lin.decodeStep(Args, Inputs, St.get());
  auto Direct = Results();

  SB->upload(floats(S0).data(), S0.Data.size() * 4);
  OB.poison();
  CUgraph G = nullptr;
  CUgraphExec E = nullptr;
  Drv.check(X.cuStreamBeginCapture(St.get(), CU_STREAM_CAPTURE_MODE_GLOBAL),
            "cuStreamBeginCapture");
  Lin.decodeStep(Args, Inputs, St.get());
  Drv.check(X.cuStreamEndCapture(St.get(), &G), "cuStreamEndCapture");
  Drv.check(X.cuGraphInstantiateWithFlags(&E, G, 0), "cuGraphInstantiate");
  for (int I = 0; I < 2; ++I)
    Drv.check(X.cuGraphLaunch(E, St.get()), "cuGraphLaunch");
  auto Replayed = Results();
  X.cuGraphExecDestroy(E);
  X.cuGraphDestroy(G);
  bool Same = Direct.first == Replayed.first &&
              std::memcmp(Direct.second.data(), Replayed.second.data(),
                          Direct.second.size() * 4) == 0;
  bool Moved = std::memcmp(Direct.second.data(), floats(S0).data(), S0.Data.size() * 4) != 0;
  return {{"graph replay == direct", 0, 0, Same}, {"state advanced", 0, 0, Moved}};
}

} // namespace

int main(int Argc, char **Argv) {
  bool Sanitize = Argc > 1 && std::string(Argv[1]) == "--sanitize";
  if (!announceDevice())
    return 77;
  int Passed = 0, Failed = 0;
  uint64_t Seed = 1;
  for (const Case &C : cases(Sanitize)) {
    try {
      dsl::LinearAttentionDef UserDef = definition(C.Def);
      runtime::LinearAttention Lin(UserDef, signature(C));
      const CompiledDefinition &Def = Lin.definition();
      std::vector<std::vector<Check>> Groups;
      if (Sanitize) {
        Groups.push_back(stepCase(C, Def, Lin, 3, true, ++Seed));
      } else {
        for (int N : {1, 7, 16})
          Groups.push_back(stepCase(C, Def, Lin, N, N != 7, ++Seed));
        Groups.push_back(sequenceCase(C, Def, Lin, 1, ++Seed));
        Groups.push_back(sequenceCase(C, Def, Lin, 16, ++Seed));
        Groups.push_back(graphCase(C, Def, Lin, ++Seed));
      }
      for (const std::vector<Check> &G : Groups)
        (printChecks(C.name(), 44, G) ? Passed : Failed)++;
    } catch (const std::exception &E) {
      std::printf("%-44s ERROR %s\n", C.name().c_str(), E.what());
      ++Failed;
    }
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed\n", Passed, Failed);
  return Failed ? 1 : 0;
}
