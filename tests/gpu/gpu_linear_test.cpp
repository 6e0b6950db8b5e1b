// GPU linear-attention test: LinearAttention's forward (output and final
// state) and backward (dq, dk, dv, ddecay, d initial state, custom-input
// gradients) for every linear example against the double-precision
// token-by-token reference, with the FlashAttention tolerance rule: the
// error may be at most twice that of a plain low-precision implementation
// (the kernels' chunked algorithm in double with the 16-bit roundings,
// reference::linearChunkedModel) plus a small atol relative to the
// tensor's size. The backward also runs twice and must give the same bits.
// Exits 77 (ctest: skipped) where there is no GPU. --sanitize runs one small
// case per example (for compute-sanitizer); --quick a short list.
#include "GpuSupport.h"

#include "Examples.h"
#include "attn/Error.h"
#include "attn/codegen/LinearCodegen.h"
#include "attn/reference/InputBinding.h"
#include "attn/reference/Linear.h"
#include "attn/runtime/LinearAttention.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <future>
#include <limits>
#include <string>
#include <thread>

using namespace attn;
using namespace attn::gputest;
using reference::Tensor;

namespace {

struct Case {
  std::string Def;
  DType Dt;
  int D, DV, B, H, Hq, Hk, T;
  bool State;
  Layout L;
  std::string Config;
  std::string name() const {
    return fmt::format("{} {} d{}/{} b{} h{}/{}/{} t{} {}{}{}", Def,
                       std::string(dtypeName(Dt)), D, DV, B, H, Hq, Hk, T,
                       std::string(layoutName(L)), State ? " state" : "",
                       Config.empty() ? "" : " " + Config);
  }
};

dsl::LinearAttentionDef definition(const std::string &Name) {
  if (Name == "mamba2")
    return examples::mamba2();
  if (Name == "simple_gla")
    return examples::simpleGla();
  return examples::retentionLinear();
}

std::vector<Case> cases(const std::string &Mode) {
  std::vector<Case> Out;
  // mamba2: the D128/DV64 with one q/k group; simple_gla: D < DV,
  // q and k in different groups; retention_linear: D256, no groups.
  struct Ex {
    const char *Name;
    int D, DV, H, Hq, Hk;
  } Exs[] = {{"mamba2", 128, 64, 2, 1, 1},
             {"simple_gla", 64, 128, 2, 2, 1},
             {"retention_linear", 256, 128, 2, 2, 2}};
  if (Mode == "sanitize") {
    for (const Ex &E : Exs)
      Out.push_back({E.Name, DType::BF16, E.D, E.DV, 1, E.H, E.Hq, E.Hk, 70,
                     true, Layout::BSHD, ""});
    return Out;
  }
  std::vector<int> Ts = {1, 63, 64, 1000, 4096};
  if (Mode == "quick")
    Ts = {63, 1000};
  int I = 0;
  for (const Ex &E : Exs)
    for (DType Dt : {DType::F16, DType::BF16})
      for (int T : Ts)
        for (bool State : {false, true}) {
          int B = T >= 4096 ? 1 : 2;
          Out.push_back({E.Name, Dt, E.D, E.DV, B, E.H, E.Hq, E.Hk, T, State,
                         ++I % 2 ? Layout::BSHD : Layout::BHSD, ""});
        }
  if (Mode == "quick")
    return Out;
  // Other chunk sizes, warps and value slices.
  Out.push_back({"simple_gla", DType::F16, 64, 64, 1, 2, 2, 2, 1000, true,
                 Layout::BSHD, "c32v64w4b4"});
  Out.push_back({"simple_gla", DType::BF16, 64, 256, 1, 2, 1, 2, 333, true,
                 Layout::BHSD, "c64v128w4b4"});
  Out.push_back({"mamba2", DType::BF16, 128, 64, 1, 2, 1, 1, 1000, true,
                 Layout::BSHD, "c128v64w8b8"});
  return Out;
}

/// A 16-bit tensor in the kernel's layout and the same values as a
/// [B,H,S,D] reference tensor.
struct Host16 {
  std::vector<uint16_t> Bits;
  Tensor Ref;
};

size_t offsetOf(Layout L, int H, int S, int D, int b, int h, int s, int d) {
  return L == Layout::BSHD ? ((size_t(b) * S + s) * H + h) * D + d
                           : ((size_t(b) * H + h) * S + s) * D + d;
}

Host16 toHost16(const Tensor &X, DType Dt, Layout L) {
  int B = int(X.dim(0)), H = int(X.dim(1)), S = int(X.dim(2)),
      D = int(X.dim(3));
  Host16 Out{std::vector<uint16_t>(X.Data.size()), Tensor(X.Shape)};
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int s = 0; s < S; ++s)
        for (int d = 0; d < D; ++d) {
          uint16_t Bits = toBits(Dt, X.at({b, h, s, d}));
          Out.Bits[offsetOf(L, H, S, D, b, h, s, d)] = Bits;
          Out.Ref.at({b, h, s, d}) = fromBits(Dt, Bits);
        }
  return Out;
}

Tensor fromHost16(const std::vector<uint16_t> &Bits, DType Dt, Layout L,
                  std::vector<int64_t> Shape) {
  Tensor Out(Shape);
  int B = int(Shape[0]), H = int(Shape[1]), S = int(Shape[2]),
      D = int(Shape[3]);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int s = 0; s < S; ++s)
        for (int d = 0; d < D; ++d)
          Out.at({b, h, s, d}) =
              fromBits(Dt, Bits[offsetOf(L, H, S, D, b, h, s, d)]);
  return Out;
}

std::vector<int64_t> viewShape(Layout L, int B, int H, int S, int D) {
  return L == Layout::BSHD ? std::vector<int64_t>{B, S, H, D}
                           : std::vector<int64_t>{B, H, S, D};
}

/// Everything computed on the CPU for a case, before the GPU runs.
struct Prepared {
  reference::LinearInputs In; // 16-bit-exact values
  Host16 Q, K, V, DO;
  std::optional<Tensor> DFinal;
  reference::LinearOutputs Exact, Plain;
  reference::LinearGrads GExact, GPlain;
  double Seconds = 0;
};

Prepared prepare(const Case &C, const CompiledDefinition &Def, uint64_t Seed) {
  auto T0 = std::chrono::steady_clock::now();
  std::mt19937_64 Rng(Seed);
  Prepared P;
  P.Q = toHost16(Tensor::normal({C.B, C.Hq, C.T, C.D}, Rng), C.Dt, C.L);
  P.K = toHost16(Tensor::normal({C.B, C.Hk, C.T, C.D}, Rng), C.Dt, C.L);
  P.V = toHost16(Tensor::normal({C.B, C.H, C.T, C.DV}, Rng), C.Dt, C.L);
  P.DO = toHost16(Tensor::normal({C.B, C.H, C.T, C.DV}, Rng), C.Dt, C.L);
  P.In.Q = P.Q.Ref;
  P.In.K = P.K.Ref;
  P.In.V = P.V.Ref;
  // A slow decay (g in [-0.1, 0]) so that the state carries far.
  P.In.Decay = Tensor::uniform({C.B, C.H, C.T}, Rng, -0.1, 0.0);
  P.In.Inputs = reference::sampleInputs(*Def.Graph, Rng, C.B, C.H, C.T, C.T);
  if (C.State) {
    P.In.InitialState = Tensor::normal({C.B, C.H, C.D, C.DV}, Rng);
    P.DFinal = Tensor::normal({C.B, C.H, C.D, C.DV}, Rng);
  }
  codegen::LinearConfig Cfg =
      C.Config.empty() ? codegen::LinearConfig::defaultFor(C.D, C.DV, GpuArch::Sm90a)
                       : codegen::LinearConfig::parse(C.Config);
  auto Round = [&](double X) { return roundTo(C.Dt, X); };
  P.Exact = reference::linearRecurrent(Def, P.In);
  P.Plain = reference::linearChunkedModel(Def, P.In, Cfg.Chunk, Round);
  // The gradients with a zero initial state where there is none: the
  // kernels then still give d(initial state).
  reference::LinearInputs InG = P.In;
  if (!InG.InitialState)
    InG.InitialState = Tensor({C.B, C.H, C.D, C.DV});
  P.GExact = reference::linearBackward(Def, InG, P.DO.Ref, P.DFinal);
  P.GPlain = reference::linearChunkedModelBackward(Def, InG, P.DO.Ref,
                                                   P.DFinal, Cfg.Chunk, Round);
  P.Seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - T0)
                  .count();
  return P;
}

/// One compared tensor: max |got − exact|, max |plain − exact| (plain
/// rounded to the output's dtype when \p Round16), and the tolerance.
struct Cmp {
  std::string Name;
  double Err = 0, Plain = 0, Tol = 0;
  bool Pass = true;
};

Cmp compare(const std::string &Name, const Tensor &Got, const Tensor &Exact,
            const Tensor &Plain, DType Dt, bool Round16) {
  Cmp R{Name};
  double Scale = 1;
  for (double X : Exact.Data)
    Scale = std::max(Scale, std::fabs(X));
  for (size_t I = 0; I < Exact.Data.size(); ++I) {
    double G = Got.Data[I], W = Exact.Data[I];
    double Pl = Round16 ? roundTo(Dt, Plain.Data[I]) : Plain.Data[I];
    R.Err = std::max(R.Err, std::isnan(G) ? std::numeric_limits<double>::infinity()
                                          : std::fabs(G - W));
    R.Plain = std::max(R.Plain, std::fabs(Pl - W));
  }
  double Atol = Dt == DType::F16 ? 1e-3 : 8e-3;
  R.Tol = 2 * R.Plain + Atol * Scale;
  R.Pass = R.Err <= R.Tol;
  return R;
}

Tensor download32(DeviceBuffer &Buf, std::vector<int64_t> Shape) {
  Tensor T(Shape);
  std::vector<float> F(T.Data.size());
  Buf.download(F.data(), F.size() * 4);
  for (size_t I = 0; I < F.size(); ++I)
    T.Data[I] = F[I];
  return T;
}

std::unique_ptr<DeviceBuffer> upload32(const Tensor &T) {
  std::vector<float> F(T.Data.begin(), T.Data.end());
  auto Buf = std::make_unique<DeviceBuffer>(std::max<size_t>(4, F.size() * 4));
  if (!F.empty())
    Buf->upload(F.data(), F.size() * 4);
  return Buf;
}

std::unique_ptr<DeviceBuffer> upload16(const Host16 &H) {
  auto Buf = std::make_unique<DeviceBuffer>(H.Bits.size() * 2);
  Buf->upload(H.Bits.data(), H.Bits.size() * 2);
  return Buf;
}

/// Runs \p C on the GPU and compares; returns the comparisons.
std::vector<Cmp> runCase(const Case &C, const CompiledDefinition &Def,
                         const dsl::LinearAttentionDef &UserDef,
                         const Prepared &P) {
  runtime::LinearSignature Sig;
  Sig.Dtype = C.Dt;
  Sig.HeadDim = C.D;
  Sig.HeadDimV = C.DV;
  Sig.TensorLayout = C.L;
  Sig.Config = C.Config;
  runtime::LinearAttention Lin(UserDef, Sig);
  auto &Drv = runtime::CudaDriver::get();
  DType ET = C.Dt;
  auto View16 = [&](DeviceBuffer &Buf, int H, int D) {
    return runtime::TensorView::contiguous(Buf.get(), ET,
                                           viewShape(C.L, C.B, H, C.T, D));
  };
  auto View32 = [&](DeviceBuffer &Buf, std::vector<int64_t> Shape) {
    return runtime::TensorView::contiguous(Buf.get(), DType::F32,
                                           Shape);
  };
  auto Q = upload16(P.Q), K = upload16(P.K), V = upload16(P.V),
       DO = upload16(P.DO);
  bool ReadsDecay = codegen::linearReadsDecay(Def);
  auto Decay = upload32(P.In.Decay);
  runtime::TensorView DecayView = View32(*Decay, {C.B, C.H, C.T});
  std::vector<std::unique_ptr<DeviceBuffer>> Keep;
  runtime::InputMap Inputs;
  for (const auto &[Name, T] : P.In.Inputs) {
    if (T.Shape.empty()) {
      Inputs[Name] = float(T.Data[0]);
      continue;
    }
    Keep.push_back(upload32(T));
    Inputs[Name] = View32(*Keep.back(), T.Shape);
  }
  std::vector<int64_t> StateShape = {C.B, C.H, C.D, C.DV};
  std::unique_ptr<DeviceBuffer> Init, DFinal;
  runtime::TensorView InitView, DFinalView;
  if (C.State) {
    Init = upload32(*P.In.InitialState);
    InitView = View32(*Init, StateShape);
    DFinal = upload32(*P.DFinal);
    DFinalView = View32(*DFinal, StateShape);
  }
  size_t OElems = size_t(C.B) * C.H * C.T * C.DV;
  DeviceBuffer Out(OElems * 2), Final(size_t(C.B) * C.H * C.D * C.DV * 4);
  Out.poison();
  Final.poison();
  runtime::TensorView FinalView = View32(Final, StateShape);
  Lin.forward(View16(*Q, C.Hq, C.D), View16(*K, C.Hk, C.D),
              View16(*V, C.H, C.DV), View16(Out, C.H, C.DV),
              ReadsDecay ? &DecayView : nullptr, Inputs,
              C.State ? &InitView : nullptr, &FinalView);
  Drv.check(Drv.cuCtxSynchronize(), "linear forward");
  std::vector<uint16_t> OBits(OElems);
  Out.download(OBits.data(), OElems * 2);
  std::vector<Cmp> R;
  R.push_back(compare("out", fromHost16(OBits, C.Dt, C.L, {C.B, C.H, C.T, C.DV}),
                      P.Exact.O, P.Plain.O, C.Dt, true));
  R.push_back(compare("final_state", download32(Final, StateShape),
                      P.Exact.FinalState, P.Plain.FinalState, C.Dt, false));

  // Backward, twice: the second run must give the same bits.
  DeviceBuffer DQ(P.Q.Bits.size() * 2), DK(P.K.Bits.size() * 2),
      DV(P.V.Bits.size() * 2), DDecay(size_t(C.B) * C.H * C.T * 4),
      DInit(size_t(C.B) * C.H * C.D * C.DV * 4);
  std::map<std::string, std::unique_ptr<DeviceBuffer>> GradBufs;
  runtime::LinearInputGrads Grads;
  for (const auto &[Name, T] : P.In.Inputs) {
    GradBufs[Name] = std::make_unique<DeviceBuffer>(
        std::max<size_t>(4, T.Data.size() * 4));
    Grads[Name] = View32(*GradBufs[Name], T.Shape);
  }
  runtime::TensorView DDecayView = View32(DDecay, {C.B, C.H, C.T});
  runtime::TensorView DInitView = View32(DInit, StateShape);
  runtime::TensorView QV = View16(*Q, C.Hq, C.D), KV = View16(*K, C.Hk, C.D),
                      VV = View16(*V, C.H, C.DV), DOV = View16(*DO, C.H, C.DV),
                      DQV = View16(DQ, C.Hq, C.D), DKV = View16(DK, C.Hk, C.D),
                      DVV = View16(DV, C.H, C.DV);
  runtime::LinearBackwardTensors BT{QV,
                                    KV,
                                    VV,
                                    ReadsDecay ? &DecayView : nullptr,
                                    DOV,
                                    C.State ? &InitView : nullptr,
                                    C.State ? &DFinalView : nullptr,
                                    DQV,
                                    DKV,
                                    DVV,
                                    ReadsDecay ? &DDecayView : nullptr,
                                    &DInitView};
  std::vector<std::vector<char>> Runs[2];
  for (int Run = 0; Run < 2; ++Run) {
    for (DeviceBuffer *B : {&DQ, &DK, &DV, &DDecay, &DInit})
      B->poison();
    for (auto &[Name, B] : GradBufs)
      B->poison();
    Lin.backward(BT, Inputs, Grads);
    Drv.check(Drv.cuCtxSynchronize(), "linear backward");
    for (DeviceBuffer *B : {&DQ, &DK, &DV, &DDecay, &DInit}) {
      std::vector<char> Bytes(B->size());
      B->download(Bytes.data(), Bytes.size());
      Runs[Run].push_back(std::move(Bytes));
    }
    for (auto &[Name, B] : GradBufs) {
      std::vector<char> Bytes(B->size());
      B->download(Bytes.data(), Bytes.size());
      Runs[Run].push_back(std::move(Bytes));
    }
  }
  Cmp Det{"deterministic"};
  Det.Pass = Runs[0] == Runs[1];
  Det.Err = Det.Pass ? 0 : 1;
  R.push_back(Det);
  auto Bits16 = [&](DeviceBuffer &B) {
    std::vector<uint16_t> X(B.size() / 2);
    B.download(X.data(), B.size());
    return X;
  };
  R.push_back(compare("dq", fromHost16(Bits16(DQ), C.Dt, C.L, P.In.Q.Shape),
                      P.GExact.DQ, P.GPlain.DQ, C.Dt, true));
  R.push_back(compare("dk", fromHost16(Bits16(DK), C.Dt, C.L, P.In.K.Shape),
                      P.GExact.DK, P.GPlain.DK, C.Dt, true));
  R.push_back(compare("dv", fromHost16(Bits16(DV), C.Dt, C.L, P.In.V.Shape),
                      P.GExact.DV, P.GPlain.DV, C.Dt, true));
  if (ReadsDecay)
    R.push_back(compare("ddecay", download32(DDecay, {C.B, C.H, C.T}),
                        P.GExact.DDecay, P.GPlain.DDecay, C.Dt, false));
  // Without an initial state the gradient is that of a zero state.
  R.push_back(compare("dinitial_state", download32(DInit, StateShape),
                      *P.GExact.DInitialState, *P.GPlain.DInitialState, C.Dt,
                      false));
  for (const auto &[Name, B] : GradBufs)
    R.push_back(compare("d" + Name, download32(*B, P.In.Inputs.at(Name).Shape),
                        P.GExact.DInputs.at(Name), P.GPlain.DInputs.at(Name),
                        C.Dt, false));
  return R;
}

} // namespace

int main(int Argc, char **Argv) {
  std::string Mode = Argc > 1 ? std::string(Argv[1]).substr(2) : "";
  if (!announceDevice())
    return 77;
  const char *Filter = std::getenv("ATTNC_GPU_TEST_FILTER");
  std::vector<Case> Cases;
  for (const Case &C : cases(Mode))
    if (!Filter || C.Def == Filter)
      Cases.push_back(C);

  // The CPU references of every case, and the kernels' compiles, in
  // parallel; the GPU runs one case at a time afterwards.
  std::map<std::string, CompiledDefinition> Defs;
  for (const char *N : {"mamba2", "simple_gla", "retention_linear"})
    Defs.emplace(N, compile(definition(N)));
  auto Wall0 = std::chrono::steady_clock::now();
  std::vector<std::future<Prepared>> Futures;
  std::vector<std::future<void>> Compiles;
  unsigned Workers = std::max(2u, std::thread::hardware_concurrency());
  for (size_t I = 0; I < Cases.size(); ++I) {
    const Case &C = Cases[I];
    codegen::LinearKernelSpec S;
    S.Dtype = C.Dt;
    S.HeadDim = C.D;
    S.HeadDimV = C.DV;
    S.Arch = runtime::resolveArch(std::nullopt);
    S.Config = C.Config.empty()
                   ? codegen::LinearConfig::defaultFor(C.D, C.DV, S.Arch)
                   : codegen::LinearConfig::parse(C.Config);
    const CompiledDefinition &Def = Defs.at(C.Def);
    Compiles.push_back(std::async(std::launch::async, [S, &Def] {
      runtime::KernelCache::global().getOrCompile(
          codegen::generateLinearForward(Def, S));
      runtime::KernelCache::global().getOrCompile(
          codegen::generateLinearBackward(Def, S));
    }));
  }
  for (auto &F : Compiles)
    F.get();
  std::printf("kernels ready in %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                            Wall0)
                  .count());
  {
    // A bounded pool over the cases (the longest ones first).
    std::vector<size_t> Order(Cases.size());
    for (size_t I = 0; I < Order.size(); ++I)
      Order[I] = I;
    std::stable_sort(Order.begin(), Order.end(), [&](size_t A, size_t B) {
      return Cases[A].T * Cases[A].D > Cases[B].T * Cases[B].D;
    });
    std::vector<Prepared> Ready(Cases.size());
    std::atomic<size_t> Next{0};
    std::vector<std::thread> Pool;
    std::vector<std::string> Errors(Cases.size());
    for (unsigned W = 0; W < Workers; ++W)
      Pool.emplace_back([&] {
        for (size_t J; (J = Next++) < Order.size();) {
          size_t I = Order[J];
          try {
            Ready[I] = prepare(Cases[I], Defs.at(Cases[I].Def), 1000 + I);
          } catch (const std::exception &E) {
            Errors[I] = E.what();
          }
        }
      });
    for (std::thread &T : Pool)
      T.join();
    std::printf("references ready in %.1f s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                              Wall0)
                    .count());
    int Passed = 0, Failed = 0;
    for (size_t I = 0; I < Cases.size(); ++I) {
      const Case &C = Cases[I];
      std::string Name = C.name();
      if (!Errors[I].empty()) {
        std::printf("%-60s ERROR (reference) %s\n", Name.c_str(),
                    Errors[I].c_str());
        ++Failed;
        continue;
      }
      try {
        dsl::LinearAttentionDef UserDef = definition(C.Def);
        std::vector<Cmp> R = runCase(C, Defs.at(C.Def), UserDef, Ready[I]);
        bool Pass = true;
        std::string Line;
        for (const Cmp &X : R) {
          Pass = Pass && X.Pass;
          if (X.Name == "deterministic")
            Line += X.Pass ? " det" : " NOT-DETERMINISTIC";
          else
            Line += fmt::format(" {} {:.1e}/{:.1e}{}", X.Name, X.Err, X.Tol,
                                X.Pass ? "" : "!");
        }
        std::printf("%-60s%s  %s\n", Name.c_str(), Line.c_str(),
                    Pass ? "pass" : "FAIL");
        if (!Pass)
          for (const Cmp &X : R)
            std::printf("    %-16s err %.3e plain %.3e tol %.3e %s\n",
                        X.Name.c_str(), X.Err, X.Plain, X.Tol,
                        X.Pass ? "" : "FAIL");
        (Pass ? Passed : Failed)++;
      } catch (const std::exception &E) {
        std::printf("%-60s ERROR %s\n", Name.c_str(), E.what());
        ++Failed;
      }
      std::fflush(stdout);
      Ready[I] = Prepared();
    }
    std::printf("%d passed, %d failed\n", Passed, Failed);
    return Failed ? 1 : 0;
  }
}
