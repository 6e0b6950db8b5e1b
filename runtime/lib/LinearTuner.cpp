// The linear_chunk autotuner: search space and resource model over
// LinearConfig, the fp64 reference check of each candidate's forward and
// backward, forward + backward timing, the tune key and config selection.
#include "attn/runtime/LinearTuner.h"
#include "attn/codegen/Arch.h"

#include "attn/reference/Linear.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/DtypeBits.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/EventTiming.h"
#include "attn/runtime/KernelCache.h"
#include "attn/runtime/LinearProblem.h"
#include "attn/runtime/Selector.h"

#include "llvm/Support/Threading.h"

#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <optional>

namespace attn::runtime {

namespace {

std::atomic<unsigned> LinearTuneRuns{0};

/// A device tensor of the check problem as a reference tensor [B,H,T,D]
/// (16-bit, in the signature's layout) or as is (fp32).
reference::Tensor download(const TensorView &V, Layout L) {
  CudaDriver &D = CudaDriver::get();
  size_t N = 1;
  for (int64_t X : V.Shape)
    N *= size_t(X);
  bool Is32 = V.Type == DType::F32;
  std::vector<char> Bytes(N * (Is32 ? 4 : 2));
  D.check(D.cuMemcpyDtoH(Bytes.data(), reinterpret_cast<CUdeviceptr>(V.Data),
                         Bytes.size()),
          "cuMemcpyDtoH (tuning check)");
  if (Is32) {
    reference::Tensor T(V.Shape);
    const float *F = reinterpret_cast<const float *>(Bytes.data());
    for (size_t I = 0; I < N; ++I)
      T.Data[I] = F[I];
    return T;
  }
  DType Dt = V.Type == DType::F16 ? DType::F16 : DType::BF16;
  bool Bshd = L == Layout::BSHD;
  int64_t B = V.Shape[0], H = V.Shape[Bshd ? 2 : 1], S = V.Shape[Bshd ? 1 : 2],
          Dim = V.Shape[3];
  reference::Tensor T({B, H, S, Dim});
  const uint16_t *Bits = reinterpret_cast<const uint16_t *>(Bytes.data());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t d = 0; d < Dim; ++d) {
          int64_t Off = Bshd ? ((b * S + s) * H + h) * Dim + d
                             : ((b * H + h) * S + s) * Dim + d;
          T.Data[size_t(((b * H + h) * S + s) * Dim + d)] =
              fromDtypeBits(Dt, Bits[Off]);
        }
  return T;
}

/// The check's problem: batch 1, up to \p MaxHeads value heads, with q/k
/// heads in the timed problem's proportion where that divides (else one q/k
/// head), so head groups are exercised as in the timed problem.
LinearShape checkShapeFor(const LinearShape &S, int64_t MaxHeads) {
  int64_t Group = S.Heads / S.HeadsQK;
  for (int64_t N = std::min(S.Heads, MaxHeads); N > 1; --N) {
    if (N <= Group)
      return {1, N, 1, S.Seq};
    if (N % Group == 0)
      return {1, N, N / Group, S.Seq};
  }
  return {1, 1, 1, S.Seq};
}

/// Checks candidates on a small problem against the fp64 token recurrence
/// (the tests' rule: at most twice the error of the kernels' algorithm in
/// double with the dtype's roundings, plus a small atol), then times
/// forward + backward on the whole problem.
class LinearCandidateRunner final : public CandidateRunner {
public:
  LinearCandidateRunner(const CompiledDefinition &Def,
                        const LinearSignature &Sig, GpuArch Arch,
                        const LinearShape &S, const TuneOptions &Opts)
      : Def(Def), Base(Sig), Opts(Opts),
        Timed(Def, Sig, S, std::max(1, Opts.InputSets), Opts.Seed),
        CheckS(checkShapeFor(S, 2)),
        Check(Def, Sig, CheckS, 1, Opts.Seed + 1) {
    Base.Arch = Arch;
    Base.Skeleton.clear();
    Base.Config.clear();
    Base.TuneFile.clear();
    Base.Tune = false;
    WallTimer RefTimer;
    In.Q = download(Check.q(0), Sig.TensorLayout);
    In.K = download(Check.k(0), Sig.TensorLayout);
    In.V = download(Check.v(0), Sig.TensorLayout);
    In.Decay = Check.decayValues();
    In.Inputs = Check.inputValues();
    DO = download(Check.dout(0), Sig.TensorLayout);
    Threads = std::max(1u, llvm::hardware_concurrency().compute_thread_count());
    Exact = reference::linearRecurrent(Def, In);
    GExact = reference::linearBackward(Def, In, DO, std::nullopt, Threads);
    RefSeconds = RefTimer.seconds();
  }

  double referenceSeconds() const { return RefSeconds; }
  const LinearShape &checkShape() const { return CheckS; }

  std::string check(const std::string &Config) override {
    CudaDriver &D = CudaDriver::get();
    Current.reset();
    LinearSignature Sig = Base;
    Sig.Config = Config;
    Current = std::make_unique<LinearAttention>(Def, Sig);
    CurrentConfig = Config;
    for (const TensorView &V : {Check.out(), Check.dq(), Check.dk(),
                                Check.dv(), Check.ddecay()}) {
      size_t N = V.Type == DType::F32 ? 4 : 2;
      for (int64_t X : V.Shape)
        N *= size_t(X);
      D.check(D.cuMemsetD8(reinterpret_cast<CUdeviceptr>(V.Data), 0xff, N),
              "cuMemsetD8 (tuning check)");
    }
    Check.forward(*Current, 0);
    Check.backward(*Current, 0);
    D.check(D.cuCtxSynchronize(), "checked forward and backward (tuning)");
    if (Opts.AfterCheckedRun) {
      Opts.AfterCheckedRun(Config, Check.out());
      D.check(D.cuCtxSynchronize(), "after-check hook (tuning)");
    }
    const Plain &P = plainFor(codegen::LinearConfig::parse(Config).Chunk);
    Layout L = Base.TensorLayout;
    struct Item {
      const char *Name;
      reference::Tensor Got;
      const reference::Tensor &Exact, &Plain;
      bool Round16;
    };
    std::vector<Item> Items;
    Items.push_back({"o", download(Check.out(), L), Exact.O, P.Out.O, true});
    Items.push_back({"dq", download(Check.dq(), L), GExact.DQ, P.Grads.DQ, true});
    Items.push_back({"dk", download(Check.dk(), L), GExact.DK, P.Grads.DK, true});
    Items.push_back({"dv", download(Check.dv(), L), GExact.DV, P.Grads.DV, true});
    if (Check.readsDecay())
      Items.push_back({"ddecay", download(Check.ddecay(), L), GExact.DDecay,
                       P.Grads.DDecay, false});
    for (const Item &I : Items)
      if (std::string Why = compare(I.Name, I.Got, I.Exact, I.Plain, I.Round16);
          !Why.empty())
        return Why;
    return "";
  }

  double time(const std::string &Config) override {
    if (!Current || CurrentConfig != Config)
      throw InternalError("LinearCandidateRunner::time(" + Config +
                          ") without a passing check() first");
    int Sets = Timed.sets();
    double Ms = medianEventMs(
        [&](int I) {
          Timed.forward(*Current, I % Sets);
          Timed.backward(*Current, I % Sets);
        },
        Opts.Warmup, Opts.Repeats);
    Current.reset();
    CurrentConfig.clear();
    return Ms;
  }

private:
  /// The kernels' algorithm with the dtype's roundings, for one chunk size.
  struct Plain {
    reference::LinearOutputs Out;
    reference::LinearGrads Grads;
  };

  const Plain &plainFor(int Chunk) {
    auto It = Plains.find(Chunk);
    if (It != Plains.end())
      return It->second;
    DType Dt = Base.Dtype;
    auto Round = [Dt](double X) { return roundToDtype(Dt, X); };
    Plain P;
    P.Out = reference::linearChunkedModel(Def, In, Chunk, Round, Threads);
    P.Grads = reference::linearChunkedModelBackward(Def, In, DO, std::nullopt,
                                                    Chunk, Round, Threads);
    return Plains.emplace(Chunk, std::move(P)).first->second;
  }

  std::string compare(const char *Name, const reference::Tensor &Got,
                      const reference::Tensor &Exact,
                      const reference::Tensor &PlainT, bool Round16) const {
    double Scale = 1, Err = 0, PlainErr = 0;
    size_t Worst = 0;
    for (size_t I = 0; I < Exact.Data.size(); ++I) {
      double W = Exact.Data[I], G = Got.Data[I];
      double Pl = Round16 ? roundToDtype(Base.Dtype, PlainT.Data[I]) : PlainT.Data[I];
      Scale = std::max(Scale, std::fabs(W));
      double E = std::isnan(G) ? std::numeric_limits<double>::infinity()
                               : std::fabs(G - W);
      if (E > Err) {
        Err = E;
        Worst = I;
      }
      PlainErr = std::max(PlainErr, std::fabs(Pl - W));
    }
    double Atol = Base.Dtype == DType::F16 ? 1e-3 : 8e-3;
    double Tol = 2 * PlainErr + Atol * Scale;
    if (Err <= Tol)
      return "";
    return fmt::format("{}: max |error| {:.4g} at element {} (got {:.4g}, "
                       "want {:.4g}) > tolerance {:.3g}",
                       Name, Err, Worst, Got.Data[Worst], Exact.Data[Worst],
                       Tol);
  }

  const CompiledDefinition &Def;
  LinearSignature Base;
  TuneOptions Opts;
  LinearProblem Timed;
  LinearShape CheckS;
  LinearProblem Check;
  reference::LinearInputs In;
  reference::Tensor DO;
  reference::LinearOutputs Exact;
  reference::LinearGrads GExact;
  std::map<int, Plain> Plains;
  unsigned Threads = 1;
  double RefSeconds = 0;
  std::unique_ptr<LinearAttention> Current;
  std::string CurrentConfig;
};

} // namespace

std::vector<codegen::LinearConfig> linearCandidates(int D, int DV) {
  std::vector<codegen::LinearConfig> Out;
  for (int Chunk : {32, 64, 128})
    for (int SliceV : {64, 128})
      for (int Warps : {4, 8, 16})
        for (int BwdWarps : {4, 8, 16}) {
          codegen::LinearConfig C{Chunk, SliceV, Warps, BwdWarps};
          if (C.structuralError(D, DV).empty())
            Out.push_back(C);
        }
  return Out;
}

TuneKey makeLinearTuneKey(const CompiledDefinition &Def,
                          const LinearSignature &Sig, GpuArch Arch,
                          const LinearShape &S, const std::string &Device) {
  KernelTarget T = linearKernelTarget(Def, Sig, Arch, Direction::Forward);
  const Skeleton &Skel =
      chooseSkeleton(T, KernelPolicy::parse(T, Sig.Skeleton, Sig.Config));
  return tuneKeyOf(Def, Skel, T, TuneShape{S.Batch, S.Heads, S.HeadsQK, S.Seq, S.Seq},
                   Device);
}

TuneResult tuneLinear(const CompiledDefinition &Def, const LinearSignature &Sig,
                      GpuArch Arch, const LinearShape &S,
                      const TuneOptions &Opts, llvm::raw_ostream *Progress) {
  WallTimer Timer;
  checkLinearShape(S);
  CudaDriver::get().require();
  const DeviceInfo &Dev = currentDevice();
  ++LinearTuneRuns;

  SearchPlan Plan;
  Plan.Target = linearKernelTarget(Def, Sig, Arch, Direction::Forward);
  Plan.Skel = &chooseSkeleton(
      Plan.Target, KernelPolicy::parse(Plan.Target, Sig.Skeleton, Sig.Config));
  Plan.Limits = ResourceLimits::forDevice(Arch, Dev);
  Plan.Limits.MaxStackFrameBytes = Opts.MaxStackFrameBytes;
  if (std::string Why = Plan.Skel->configError(
          Plan.Skel->defaultFor(Plan.Target), Plan.Target);
      !Why.empty())
    throw UserError(Why);

  LinearCandidateRunner Runner(Def, Sig, Arch, S, Opts);
  if (Progress)
    *Progress << fmt::format(
        "tuning {} {} d{}/{} {} on {} ({}); forward + backward; checked on "
        "{} against the fp64 recurrence (reference in {:.1f} s)\n",
        Def.Graph->name(), std::string(dtypeName(Sig.Dtype)), Sig.HeadDim,
        Sig.HeadDimV, linearShapeText(S), Dev.Name, archName(Arch).str(),
        linearShapeText(Runner.checkShape()), Runner.referenceSeconds());
  TuneResult Result;
  Result.Candidates = searchSkeleton(Def, Plan, Runner, Opts, Progress);
  Result.Seconds = Timer.seconds();

  // A linear entry records q/k heads where attention records k/v heads.
  recordSearch(Result, Def.Graph->name(), Opts.RunnersUp,
               TuneShape{S.Batch, S.Heads, S.HeadsQK, S.Seq, S.Seq}, Sig.TensorLayout);
  Result.Entry.Key =
      tuneKeyOf(Def, *Plan.Skel, Plan.Target,
                TuneShape{S.Batch, S.Heads, S.HeadsQK, S.Seq, S.Seq}, Dev.Name);
  return Result;
}

unsigned linearTuneRunCount() { return LinearTuneRuns.load(); }

} // namespace attn::runtime
