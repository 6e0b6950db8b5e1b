// GPU backward test: the generated bwd_sm90 and bwd_sm80 kernels of every
// transformer example (and of definitions with learnable inputs) against the
// double-precision reference backward, with the FlashAttention tolerance
// rule; bitwise-identical results over three runs ($ATTNC_GPU_TEST_RUNS
// sets how many, GpuSupport.h's bitwiseRuns) (except in the opt-in atomic
// dQ mode); poisoned outputs. Exits
// 77 (ctest: skipped) where there is no GPU.
//
//   gpu_backward_test                  the whole matrix
//   gpu_backward_test --quick          one small case per definition, in
//                                      the default and bwd_sm80's dQ modes,
//                                      the fused mode on several blocks and,
//                                      on sm_90a, bwd_sm90's other tilings
//   gpu_backward_test --split          only bwd_sm90's column-split cases
//                                      (256/256, 192/128; sm_90a)
//   gpu_backward_test --precompile A   compile every kernel for arch A into
//                                      the kernel cache (no GPU needed)
//   gpu_backward_test --dry-run A      compile, and run the references, for
//                                      arch A without a GPU
//   ATTNC_GPU_TEST_FILTER=mha          one definition's cases (exact name)
//   ATTNC_GPU_TEST_CONFIG=.pp.         only the cases whose configuration
//                                      contains this text ("default": the
//                                      default configuration's cases only)
//   ATTNC_GPU_TEST_HEAD_DIM=64         only the cases of this head_dim
//   ATTNC_GPU_TEST_VERBOSE=1           where each gradient's largest error is
#include "BackwardCases.h"
#include "BackwardCheck.h"
#include "BackwardRunner.h"
#include "GpuSupport.h"

#include "Examples.h"
#include "attn/Error.h"
#include "attn/codegen/Arch.h"
#include "attn/reference/Attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <thread>

using namespace attn;
using namespace attn::gputest;

namespace {

std::string caseName(const Case &C) {
  return fmt::format("{} {} d{}/{} b{} h{}/{} s{}x{} {}{}", C.Def,
                     std::string(dtypeName(C.Dt)), C.D, C.DV, C.B, C.H, C.Hkv, C.Sq, C.Skv,
                     std::string(layoutName(C.L)), C.Config.empty() ? "" : " " + C.Config);
}

double secondsSince(std::chrono::steady_clock::time_point T0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - T0).count();
}

/// A [B,H,S,D] tensor in the kernel's layout as 16-bit words, and the same
/// values as a reference tensor.
struct HostTensor {
  std::vector<uint16_t> Bits;
  reference::Tensor Ref;
};

size_t offsetOf(Layout L, int H, int S, int D, int b, int h, int s, int d) {
  return L == Layout::BSHD ? ((size_t(b) * S + s) * H + h) * D + d
                           : ((size_t(b) * H + h) * S + s) * D + d;
}

/// A random normal tensor; \p OnGrid rounds it to a grid of eighths in
/// [-4, 4] (exact in f16 and bf16), for q and k of a score_mod with a kink
/// at 0 (relu): every raw score q·k is then a whole number of 1/64ths
/// below 2^18 and exact in fp32 in any summation order, so the kernel's
/// score has the fp64 reference's sign. With normal draws a score within
/// fp32's rounding of 0 (one in about five d256 cases) takes the other side
/// of the kink in the kernel: its dS differs by a whole dP·c and its dq and
/// dk rows by about 2, a disagreement about a subgradient, not an error of
/// the kernel.
HostTensor randomTensor(std::mt19937_64 &Rng, DType T, Layout L, int B, int H, int S,
                        int D, bool OnGrid = false) {
  HostTensor Out{std::vector<uint16_t>(size_t(B) * H * S * D),
                 reference::Tensor({B, H, S, D})};
  std::normal_distribution<double> N(0.0, 1.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int s = 0; s < S; ++s)
        for (int d = 0; d < D; ++d) {
          double X = N(Rng);
          if (OnGrid)
            X = std::clamp(std::round(X * 8.0), -32.0, 32.0) / 8.0;
          uint16_t Bits = toBits(T, X);
          Out.Bits[offsetOf(L, H, S, D, b, h, s, d)] = Bits;
          Out.Ref.at({b, h, s, d}) = fromBits(T, Bits);
        }
  return Out;
}

/// Definitions whose score_mod has a kink at a raw score of 0.
bool kinkAtZero(const std::string &Def) { return Def == "relu_attn"; }

/// One case, from its inputs to the verdict.
struct Work {
  Work(const Case &C, uint64_t Seed)
      : C(C), Def(makeDefinition(C.Def)), Seed(Seed) {}
  Case C;
  dsl::AttentionDef Def;
  uint64_t Seed;
  CompiledDefinition Compiled;
  std::unique_ptr<runtime::BackwardRunner> Runner;
  /// Cases with the default configuration also go through the public API:
  /// Attention::backward, on alternate runs with the runner.
  std::unique_ptr<runtime::Attention> Api;
  /// The signature the runner's calls are validated against.
  runtime::Signature Sig;
  HostTensor Q, K, V, DO;
  reference::AttentionInputs In;
  reference::AttentionOutputs Fwd;
  reference::AttentionGrads Exact;
  BackwardCheck Check;
  std::string Error;
  bool ExactFromCheck = false;
  double CompileS = 0, ReferenceS = 0, CrossErr = 0;
};

/// Inputs and the compiled kernel (main thread: tracing is not shared).
void prepare(Work &W, GpuArch Arch, uint64_t Seed) {
  const Case &C = W.C;
  W.Compiled = compile(W.Def);
  runtime::KernelTarget T = runtime::KernelTarget::of(
      W.Compiled, runtime::Direction::Backward, C.Dt, C.D, C.DV, Arch);
  runtime::KernelChoice Choice = runtime::chooseWithoutShape(
      T, runtime::KernelPolicy::parse(T, "", C.Config));
  auto T0 = std::chrono::steady_clock::now();
  W.Runner = std::make_unique<runtime::BackwardRunner>(W.Compiled, T, Choice);
  W.Sig.Dtype = C.Dt;
  W.Sig.HeadDim = C.D;
  W.Sig.HeadDimV = C.DV;
  W.Sig.TensorLayout = C.L;
  W.Sig.Arch = Arch;
  if (C.Config.empty())
    W.Api = std::make_unique<runtime::Attention>(W.Def, W.Sig);
  W.CompileS = secondsSince(T0);
  std::mt19937_64 Rng(Seed);
  const bool OnGrid = kinkAtZero(C.Def);
  W.Q = randomTensor(Rng, C.Dt, C.L, C.B, C.H, C.Sq, C.D, OnGrid);
  W.K = randomTensor(Rng, C.Dt, C.L, C.B, C.Hkv, C.Skv, C.D, OnGrid);
  W.V = randomTensor(Rng, C.Dt, C.L, C.B, C.Hkv, C.Skv, C.DV);
  W.DO = randomTensor(Rng, C.Dt, C.L, C.B, C.H, C.Sq, C.DV);
  W.In.Q = W.Q.Ref;
  W.In.K = W.K.Ref;
  W.In.V = W.V.Ref;
  for (const ir::InputDecl &D : W.Compiled.Graph->decls().Inputs) {
    if (D.Shape == ir::InputShape::Scalar) {
      // Scalars travel as fp32 kernel arguments: the reference gets the
      // same fp32 value.
      double Mid = (D.SampleLo + D.SampleHi) / 2;
      W.In.Inputs[D.Name] = reference::Tensor(
          {}, D.Elem == ir::InputType::I32 ? double(std::lround(Mid))
                                           : double(float(Mid)));
    } else if (D.Shape == ir::InputShape::PerHead) {
      W.In.Inputs[D.Name] = perHeadInput(D, C.H, Rng);
    } else {
      W.In.Inputs[D.Name] = tokenInput(D, C.B, C.H, C.Sq, C.Skv);
    }
  }
}

/// What a dense case's calls run: the runner's choice, or the twin it hands
/// long walks to (wantsLongWalkBackward).
std::string ranChoice(const Work &W) {
  const runtime::KernelChoice &Made = W.Runner->choice();
  runtime::KernelChoice Ran = runtime::denseBackwardChoice(
      Made, W.Compiled.Graph->decls().HasMask, W.C.Sq);
  return Ran.str() + (Ran.configText() == Made.configText() ? "" : " (long walk)");
}

/// Score elements of a case: what the references' time grows with.
double elements(const Case &C) { return double(C.B) * C.H * C.Sq * C.Skv; }

/// Past this many score elements the reference backward (about 5 µs an
/// element, one thread) is left out and the per-element check, which agrees
/// with it to 1e-9 on every smaller case, gives the exact gradients.
constexpr double MaxReferenceElements = 4e6;

/// The fp64 references (any thread): the forward's output and finals, the
/// reference backward, and the per-element check's exact and plain sums.
void computeReference(Work &W) {
  auto T0 = std::chrono::steady_clock::now();
  W.Fwd = reference::attentionOnline(W.Compiled, W.In, 0);
  DType Dt = W.C.Dt;
  bool Big = elements(W.C) > MaxReferenceElements;
  W.Check = checkBackward(W.Compiled, W.In, W.Fwd, W.DO.Ref,
                          [Dt](double X) { return roundTo(Dt, X); },
                          Big ? std::thread::hardware_concurrency() : 1);
  if (Big) {
    W.Exact.DQ = W.Check.Exact.DQ;
    W.Exact.DK = W.Check.Exact.DK;
    W.Exact.DV = W.Check.Exact.DV;
    W.Exact.DInputs = W.Check.Exact.Inputs;
    W.ExactFromCheck = true;
  } else {
    W.Exact = reference::attentionBackward(W.Compiled, W.In, W.DO.Ref);
    // The check's exact sums must be the reference's: it is the yardstick
    // for the plain error and the only source of input gradients.
    for (auto [Mine, Ref] : {std::pair{&W.Check.Exact.DQ, &W.Exact.DQ},
                             {&W.Check.Exact.DK, &W.Exact.DK},
                             {&W.Check.Exact.DV, &W.Exact.DV}})
      W.CrossErr = std::max(W.CrossErr, reference::maxMixedError(*Mine, *Ref));
    for (const auto &[N, Mine] : W.Check.Exact.Inputs) {
      auto It = W.Exact.DInputs.find(N);
      if (It == W.Exact.DInputs.end())
        throw InternalError("the reference backward gives no gradient of '" + N + "'");
      W.CrossErr = std::max(W.CrossErr, reference::maxMixedError(Mine, It->second));
    }
  }
  W.ReferenceS = secondsSince(T0);
}

/// Runs \p Fn(Work&) over \p Ws on every core, the largest cases first.
template <typename Fn> void parallelFor(std::vector<Work> &Ws, Fn &&Body) {
  std::vector<size_t> Order(Ws.size());
  for (size_t I = 0; I < Ws.size(); ++I)
    Order[I] = I;
  std::stable_sort(Order.begin(), Order.end(), [&](size_t A, size_t B) {
    return elements(Ws[A].C) > elements(Ws[B].C);
  });
  std::atomic<size_t> Next{0};
  unsigned N = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> Threads;
  for (unsigned T = 0; T < N; ++T)
    Threads.emplace_back([&] {
      for (size_t I = Next++; I < Ws.size(); I = Next++) {
        Work &W = Ws[Order[I]];
        try {
          if (W.Error.empty())
            Body(W);
        } catch (const std::exception &E) {
          W.Error = E.what();
        }
      }
    });
  for (std::thread &T : Threads)
    T.join();
}

struct Verdict {
  double Err[3] = {0, 0, 0}, Plain[3] = {0, 0, 0}, Tol[3] = {0, 0, 0};
  double InputErr = 0, InputTol = 0;
  bool Deterministic = true, Pass = true;
  double DeviceS = 0;
};

/// max |got − exact| (NaN: infinite) and max |round(plain) − exact|; with
/// ATTNC_GPU_TEST_VERBOSE set, where the largest error is.
void compare(DType Dt, const std::vector<uint16_t> &Got, Layout L,
             const reference::Tensor &Exact, const reference::Tensor &Plain,
             const char *What, double &Err, double &PlainErr) {
  const int B = int(Exact.dim(0)), H = int(Exact.dim(1)), S = int(Exact.dim(2)),
            D = int(Exact.dim(3));
  std::string Worst;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int s = 0; s < S; ++s)
        for (int d = 0; d < D; ++d) {
          double G = fromBits(Dt, Got[offsetOf(L, H, S, D, b, h, s, d)]);
          double X = Exact.at({b, h, s, d});
          double E = std::isnan(G) ? std::numeric_limits<double>::infinity()
                                   : std::fabs(G - X);
          if (E > Err || (Worst.empty() && E >= Err))
            Worst = fmt::format("{}[b{} h{} s{} d{}] = {} want {}", What, b, h, s,
                                d, G, X);
          Err = std::max(Err, E);
          PlainErr =
              std::max(PlainErr, std::fabs(roundTo(Dt, Plain.at({b, h, s, d})) - X));
        }
  if (std::getenv("ATTNC_GPU_TEST_VERBOSE"))
    std::printf("    worst %s\n", Worst.c_str());
}

/// With ATTNC_GPU_TEST_VERBOSE set: the raw score q·k (fp64, of the rounded
/// inputs) nearest to 0 and its place, where a score_mod with a kink at 0
/// (relu's max(·, 0)) has a derivative that a kernel's fp32 score can see
/// on the other side than the reference.
void printSmallestScore(const Work &W) {
  const Case &C = W.C;
  double Best = std::numeric_limits<double>::infinity();
  int At[4] = {0, 0, 0, 0};
  for (int b = 0; b < C.B; ++b)
    for (int h = 0; h < C.H; ++h)
      for (int q = 0; q < C.Sq; ++q)
        for (int k = 0; k < C.Skv; ++k) {
          double S = 0;
          for (int d = 0; d < C.D; ++d)
            S += W.In.Q.at({b, h, q, d}) * W.In.K.at({b, h / (C.H / C.Hkv), k, d});
          if (std::fabs(S) < Best) {
            Best = std::fabs(S);
            At[0] = b, At[1] = h, At[2] = q, At[3] = k;
          }
        }
  std::printf("    smallest |q.k| %.3g at b%d h%d q%d k%d\n", Best, At[0], At[1], At[2],
              At[3]);
}

Verdict runOnDevice(Work &W) {
  const Case &C = W.C;
  auto T0 = std::chrono::steady_clock::now();
  const ir::Graph &G = *W.Compiled.Graph;
  DType ET = C.Dt;
  auto Upload = [](const std::vector<uint16_t> &Bits) {
    auto B = std::make_unique<DeviceBuffer>(Bits.size() * 2);
    B->upload(Bits.data(), B->size());
    return B;
  };
  auto DQ = Upload(W.Q.Bits), DK = Upload(W.K.Bits), DVb = Upload(W.V.Bits),
       DDO = Upload(W.DO.Bits);
  // The forward's output rounded to the dtype, and its finals in fp32.
  std::vector<uint16_t> OBits(W.DO.Bits.size());
  for (int b = 0; b < C.B; ++b)
    for (int h = 0; h < C.H; ++h)
      for (int s = 0; s < C.Sq; ++s)
        for (int d = 0; d < C.DV; ++d)
          OBits[offsetOf(C.L, C.H, C.Sq, C.DV, b, h, s, d)] =
              toBits(C.Dt, W.Fwd.O.at({b, h, s, d}));
  auto DOut = Upload(OBits);
  size_t NumFinals = G.decls().FinalRowscales.size();
  std::vector<float> FHost(std::max<size_t>(1, NumFinals) * C.B * C.H * C.Sq);
  for (size_t f = 0; f < NumFinals; ++f)
    for (int b = 0; b < C.B; ++b)
      for (int h = 0; h < C.H; ++h)
        for (int s = 0; s < C.Sq; ++s)
          FHost[((f * C.B + b) * C.H + h) * C.Sq + s] =
              float(W.Fwd.Finals.at(G.decls().FinalRowscales[f].Name).at({b, h, s}));
  DeviceBuffer DF(FHost.size() * 4);
  DF.upload(FHost.data(), DF.size());
  DeviceBuffer GQ(W.Q.Bits.size() * 2), GK(W.K.Bits.size() * 2), GV(W.V.Bits.size() * 2);

  runtime::InputMap Inputs;
  runtime::InputGradMap Grads;
  std::vector<std::unique_ptr<DeviceBuffer>> Keep;
  std::map<std::string, DeviceBuffer *> GradBufs;
  for (const ir::InputDecl &D : G.decls().Inputs) {
    const reference::Tensor &T = W.In.Inputs.at(D.Name);
    if (D.Shape == ir::InputShape::Scalar) {
      if (D.Elem == ir::InputType::I32)
        Inputs[D.Name] = int32_t(T.Data[0]);
      else
        Inputs[D.Name] = float(T.Data[0]);
    } else {
      Inputs[D.Name] =
          uploadInput(D.Elem == ir::InputType::I32, T.Data, T.Shape, Keep);
    }
    if (D.RequiresGrad) {
      std::vector<int64_t> Shape = D.Shape == ir::InputShape::Scalar
                                       ? std::vector<int64_t>{1}
                                       : std::vector<int64_t>{C.H};
      Keep.push_back(std::make_unique<DeviceBuffer>(Shape[0] * 4));
      GradBufs[D.Name] = Keep.back().get();
      Grads[D.Name] = runtime::TensorView::contiguous(Keep.back()->get(),
                                                     DType::F32, Shape);
    }
  }
  auto View = [&](DeviceBuffer &Buf, int H, int S, int D) {
    return runtime::TensorView::contiguous(
        Buf.get(), ET,
        C.L == Layout::BSHD ? std::vector<int64_t>{C.B, S, H, D}
                            : std::vector<int64_t>{C.B, H, S, D});
  };
  runtime::TensorView Q = View(*DQ, C.H, C.Sq, C.D), K = View(*DK, C.Hkv, C.Skv, C.D),
                      V = View(*DVb, C.Hkv, C.Skv, C.DV), O = View(*DOut, C.H, C.Sq, C.DV),
                      dO = View(*DDO, C.H, C.Sq, C.DV), gQ = View(GQ, C.H, C.Sq, C.D),
                      gK = View(GK, C.Hkv, C.Skv, C.D), gV = View(GV, C.Hkv, C.Skv, C.DV);
  runtime::TensorView Finals = runtime::TensorView::contiguous(
      DF.get(), DType::F32, {int64_t(NumFinals), C.B, C.H, C.Sq});
  runtime::BackwardTensors T{Q, K, V, &O, dO, NumFinals ? &Finals : nullptr, gQ, gK, gV};

  auto &Drv = runtime::CudaDriver::get();
  std::vector<std::vector<uint16_t>> First;
  std::map<std::string, std::vector<float>> FirstGrads;
  Verdict R;
  const int Runs = bitwiseRuns();
  for (int Run = 0; Run < Runs; ++Run) {
    for (DeviceBuffer *B : {&GQ, &GK, &GV})
      B->poison();
    for (auto &[N, B] : GradBufs)
      B->poison();
    // Runs 0 and 2 through the runner, run 1 through Attention::backward
    // where the case allows it: the bitwise comparison of the three runs
    // then also says the public entry point computes the same thing.
    if (Run == 1 && W.Api)
      W.Api->backward(Q, K, V, &O, dO, NumFinals ? &Finals : nullptr, gQ, gK,
                      gV, Inputs, Grads);
    else
      W.Runner->run(T,
                    runtime::validateBackwardCall(W.Compiled, W.Sig, T, Inputs,
                                                  Grads),
                    Inputs, Grads);
    Drv.check(Drv.cuCtxSynchronize(), "backward kernels");
    std::vector<std::vector<uint16_t>> Got;
    for (DeviceBuffer *B : {&GQ, &GK, &GV}) {
      Got.emplace_back(B->size() / 2);
      B->download(Got.back().data(), B->size());
    }
    std::map<std::string, std::vector<float>> GotGrads;
    for (auto &[N, B] : GradBufs) {
      GotGrads[N].resize(B->size() / 4);
      B->download(GotGrads[N].data(), B->size());
    }
    if (Run == 0) {
      First = Got;
      FirstGrads = GotGrads;
      continue;
    }
    // Bitwise: compare the bytes (a NaN is then equal to itself).
    R.Deterministic = R.Deterministic && Got == First &&
                      std::equal(GotGrads.begin(), GotGrads.end(), FirstGrads.begin(),
                                 [](const auto &A, const auto &B) {
                                   return A.second.size() == B.second.size() &&
                                          std::memcmp(A.second.data(), B.second.data(),
                                                      A.second.size() * 4) == 0;
                                 });
  }
  R.DeviceS = secondsSince(T0);

  const reference::Tensor *Exact[3] = {&W.Exact.DQ, &W.Exact.DK, &W.Exact.DV};
  const reference::Tensor *Plain[3] = {&W.Check.Plain.DQ, &W.Check.Plain.DK,
                                       &W.Check.Plain.DV};
  const double Atol = C.Dt == DType::F16 ? 1e-3 : 8e-3;
  const char *What[3] = {"dq", "dk", "dv"};
  for (int I = 0; I < 3; ++I) {
    compare(C.Dt, First[I], C.L, *Exact[I], *Plain[I], What[I], R.Err[I], R.Plain[I]);
    R.Tol[I] = 2 * R.Plain[I] + Atol;
    R.Pass = R.Pass && R.Err[I] <= R.Tol[I];
  }
  // Custom-input gradients are fp32 sums of dS·∂mod/∂input: the same rule
  // per element, the plain error being the larger of plain's and of
  // plain's doosum alone (BackwardCheck.h says why), and atol relative to
  // the gradient's size.
  for (auto &[N, Vals] : FirstGrads) {
    const reference::Tensor &X = W.Exact.DInputs.at(N);
    const reference::Tensor &P = W.Check.Plain.Inputs.at(N);
    const reference::Tensor &PD = W.Check.PlainDoosum.Inputs.at(N);
    for (size_t I = 0; I < X.Data.size(); ++I) {
      double E = std::isnan(Vals[I]) ? std::numeric_limits<double>::infinity()
                                     : std::fabs(Vals[I] - X.Data[I]);
      double PlainE =
          std::max(std::fabs(P.Data[I] - X.Data[I]), std::fabs(PD.Data[I] - X.Data[I]));
      double Tol = 2 * PlainE + Atol * (1 + std::fabs(X.Data[I]));
      if (std::getenv("ATTNC_GPU_TEST_VERBOSE"))
        std::printf("    d_%s[%zu] = %.6g want %.6g plain %.6g plain-doosum %.6g "
                    "tol %.2g\n",
                    N.c_str(), I, Vals[I], X.Data[I], P.Data[I], PD.Data[I], Tol);
      R.InputErr = std::max(R.InputErr, E);
      R.InputTol = std::max(R.InputTol, Tol);
      R.Pass = R.Pass && E <= Tol;
    }
  }
  // The opt-in atomic dQ mode adds in arrival order: its bits may differ.
  const bool Ordered = W.C.Config.find(".atomic") == std::string::npos;
  R.Pass = R.Pass && (R.Deterministic || !Ordered);
  return R;
}

} // namespace

int main(int Argc, char **Argv) {
  bool Quick = false, SplitOnly = false;
  std::string Mode;
  GpuArch Arch = GpuArch::Sm80;
  for (int I = 1; I < Argc; ++I) {
    std::string A = Argv[I];
    if (A == "--quick")
      Quick = true;
    else if (A == "--split")
      SplitOnly = true;
    else if ((A == "--precompile" || A == "--dry-run") && I + 1 < Argc && Mode.empty())
      Mode = A, Arch = parseArch(Argv[++I]);
    else {
      std::fprintf(stderr, "usage: gpu_backward_test [--quick | --split] [--precompile "
                           "ARCH | --dry-run ARCH]\n");
      return 2;
    }
  }
  bool Offline = !Mode.empty();
  auto &Drv = runtime::CudaDriver::get();
  if (!Offline) {
    if (!Drv.available()) {
      std::printf("skipped: %s\n", Drv.unavailableReason().c_str());
      return 77;
    }
    const runtime::DeviceInfo &Dev = runtime::currentDevice();
    std::printf("device: %s (%s)\n", Dev.Name.c_str(), archName(runtime::resolveArch(std::nullopt)).data());
    Arch = runtime::resolveArch(std::nullopt);
  }
  const char *Filter = std::getenv("ATTNC_GPU_TEST_FILTER");
  const char *ConfigFilter = std::getenv("ATTNC_GPU_TEST_CONFIG");
  const char *HeadDimFilter = std::getenv("ATTNC_GPU_TEST_HEAD_DIM");
  std::vector<Work> Ws;
  uint64_t Seed = 1;
  std::vector<Case> All;
  if (SplitOnly)
    addSplitCases(All);
  else
    All = cases(Quick, Arch == GpuArch::Sm90a);
  std::vector<uint64_t> Seeds;
  std::vector<int> WorkOf(All.size(), -1); // index into Ws, for twins
  for (size_t I = 0; I < All.size(); ++I) {
    const Case &C = All[I];
    ++Seed; // a case keeps its inputs whatever the filter
    Seeds.push_back(C.TwinOf >= 0 ? Seeds[C.TwinOf] : Seed);
    if (Filter && C.Def != Filter)
      continue;
    if (!configSelected(ConfigFilter, C.Config))
      continue;
    if (HeadDimFilter && std::to_string(C.D) != HeadDimFilter)
      continue;
    WorkOf[I] = int(Ws.size());
    Ws.emplace_back(C, Seeds.back());
  }
  // A twin shares its original's references (same seed, same inputs).
  for (Work &W : Ws)
    if (W.C.TwinOf >= 0)
      W.C.TwinOf = WorkOf[W.C.TwinOf];
  // Kernels first (NVRTC, or the cache), in the main thread.
  for (size_t I = 0; I < Ws.size(); ++I)
    try {
      prepare(Ws[I], Arch, Ws[I].Seed);
    } catch (const std::exception &E) {
      Ws[I].Error = E.what();
    }
  if (Mode == "--precompile") {
    int Bad = 0;
    for (Work &W : Ws) {
      std::printf("%-62s %s %.1fs %s\n", caseName(W.C).c_str(),
                  W.Error.empty() ? W.Runner->source().Key.c_str() : "ERROR",
                  W.CompileS, W.Error.c_str());
      Bad += !W.Error.empty();
    }
    return Bad ? 1 : 0;
  }
  parallelFor(Ws, [](Work &W) {
    if (W.C.TwinOf < 0)
      computeReference(W);
  });
  for (Work &W : Ws)
    if (W.C.TwinOf >= 0) {
      const Work &O = Ws[W.C.TwinOf];
      if (!O.Error.empty() && W.Error.empty())
        W.Error = "its twin: " + O.Error;
      W.Fwd = O.Fwd;
      W.Check = O.Check;
      W.Exact = O.Exact;
      W.ExactFromCheck = O.ExactFromCheck;
      W.CrossErr = O.CrossErr;
    }
  int Passed = 0, Failed = 0;
  for (Work &W : Ws) {
    std::string Name = caseName(W.C);
    if (W.Error.empty() && W.CrossErr > 1e-9)
      W.Error = fmt::format("the backward check disagrees with the reference "
                            "backward ({:.1e})",
                            W.CrossErr);
    if (!W.Error.empty()) {
      std::printf("%-62s ERROR %s\n", Name.c_str(), W.Error.c_str());
      ++Failed;
      continue;
    }
    if (Offline) {
      if (std::getenv("ATTNC_GPU_TEST_VERBOSE"))
        for (const auto &[N, X] : W.Exact.DInputs)
          for (size_t I = 0; I < X.Data.size(); ++I)
            std::printf("    d_%s[%zu] want %.6g plain %.6g plain-doosum %.6g\n",
                        N.c_str(), I, X.Data[I], W.Check.Plain.Inputs.at(N).Data[I],
                        W.Check.PlainDoosum.Inputs.at(N).Data[I]);
      std::printf("%-62s reference ok [%.1fs %.1fs]\n", Name.c_str(), W.CompileS,
                  W.ReferenceS);
      if (std::getenv("ATTNC_GPU_TEST_VERBOSE"))
        printSmallestScore(W);
      ++Passed;
      continue;
    }
    try {
      Verdict R = runOnDevice(W);
      std::string Inp =
          W.Check.Exact.Inputs.empty()
              ? ""
              : fmt::format(" dinput {:.1e}/{:.1e}", R.InputErr, R.InputTol);
      std::printf("%-62s dq %.1e/%.1e dk %.1e/%.1e dv %.1e/%.1e%s%s%s [%.1fs "
                  "%.1fs %.2fs]  %s  %s\n",
                  Name.c_str(), R.Err[0], R.Tol[0], R.Err[1], R.Tol[1], R.Err[2],
                  R.Tol[2], Inp.c_str(), W.ExactFromCheck ? " (exact: check)" : "",
                  R.Deterministic ? "" : " NOT-BITWISE",
                  W.CompileS, W.ReferenceS, R.DeviceS, R.Pass ? "pass" : "FAIL",
                  ranChoice(W).c_str());
      if (std::getenv("ATTNC_GPU_TEST_VERBOSE"))
        printSmallestScore(W);
      (R.Pass ? Passed : Failed)++;
    } catch (const std::exception &E) {
      std::printf("%-62s ERROR %s\n", Name.c_str(), E.what());
      ++Failed;
    }
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed\n", Passed, Failed);
  return Failed ? 1 : 0;
}
