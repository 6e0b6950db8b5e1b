// The autotuner's device side: the reference backend's output on random
// inputs, each candidate's checked run against it, and its timing.
#include "TuneRunner.h"

#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/DtypeBits.h"
#include "attn/runtime/EventTiming.h"
#include "attn/runtime/Errors.h"

#include "llvm/Support/ThreadPool.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace attn::runtime {

namespace {

/// The check's tolerance on o: the largest error may be this many units of
/// the dtype's rounding of the largest output (plus tests/gpu's absolute
/// term). Two correct kernels differ by rounding — P fed to the tensor cores
/// in the dtype, sums in another order; a wrong one by far more.
double absTolerance(DType T) { return T == DType::F16 ? 1e-3 : 8e-3; }
double relTolerance(DType T) {
  return T == DType::F16 ? std::ldexp(1.0, -9) : std::ldexp(1.0, -6);
}
/// Final rowscales (fp32 on both sides): relative error, as tests/gpu.
constexpr double FinalsTolerance = 2e-4;

} // namespace

GpuCandidateRunner::GpuCandidateRunner(const CompiledDefinition &Def,
                                       const Signature &Sig,
                                       const KernelTarget &T,
                                       const Skeleton &Skel, const TuneShape &S,
                                       const TuneOptions &Opts)
    : Def(Def), Base(Sig), Target(T), Skel(Skel),
      Default{&Skel, Skel.defaultFor(T), ChoiceOrigin::Default}, Opts(Opts),
      Problem(Def, Sig, S, std::max(1, Opts.InputSets), Opts.Seed),
      CheckShape(S), TimeCall(Problem.call()) {
  CudaDriver &D = CudaDriver::get();
  Base.Skeleton.clear();
  Base.Config.clear();
  Base.TuneFile.clear();
  Base.Tune = false;

  // The reference kernel holds a row's scores in shared memory; past its
  // limit the check runs on the first queries and keys of the same buffers.
  Signature RefSig = Base;
  RefSig.Backend = "reference";
  std::unique_ptr<AttentionBackend> Ref =
      makeReferenceBackend(BackendSetup{Def, RefSig, Target, Default});
  {
    BackendProblem P{Def, RefSig, Target, TimeCall.Shape, Default};
    if (!Ref->check(P).empty()) {
      CheckShape.SeqQ = std::min<int64_t>(S.SeqQ, codegen::ReferenceMaxKeys);
      CheckShape.SeqKv = std::min<int64_t>(S.SeqKv, codegen::ReferenceMaxKeys);
    }
  }
  CheckCall = Problem.call(CheckShape);
  {
    BackendProblem P{Def, RefSig, Target, CheckCall.Shape, Default};
    if (std::string Why = Ref->check(P); !Why.empty())
      throw UserError("tuning " + Def.Graph->name() +
                      ": the reference backend, which checks every "
                      "candidate, cannot run this problem: " +
                      Why);
  }
  WallTimer RefTimer;
  Problem.out().poison();
  CheckCall.FinalsBuffer->poison();
  run(*Ref, RefSig, Default, CheckCall, 0);
  D.check(D.cuCtxSynchronize(), "reference forward (tuning)");
  RefSeconds = RefTimer.seconds();
  DeviceAlloc &Out = Problem.out();
  RefOut.resize(Out.size() / 2);
  D.check(D.cuMemcpyDtoH(RefOut.data(), Out.ptr(), Out.size()),
          "cuMemcpyDtoH (reference output)");
  DeviceAlloc &Fin = *CheckCall.FinalsBuffer;
  RefFinals.resize(Fin.size() / 4);
  D.check(D.cuMemcpyDtoH(RefFinals.data(), Fin.ptr(), Fin.size()),
          "cuMemcpyDtoH (reference finals)");
}

GpuCandidateRunner::~GpuCandidateRunner() = default;

void GpuCandidateRunner::run(AttentionBackend &B, const Signature &Sig,
                             const KernelChoice &K,
                             const RandomProblem::Call &C, int Set) {
  BackendProblem P{Def, Sig, Target, C.Shape, K};
  ForwardTensors T{C.Q[Set], C.K[Set], C.V[Set], C.Out, C.finals()};
  CallContext Ctx{C.Inputs, nullptr};
  B.forward(P, T, Ctx);
}

std::string GpuCandidateRunner::check(const std::string &Config) {
  CudaDriver &D = CudaDriver::get();
  Current.reset(); // unloads the previous candidate's module
  CurrentSig = Base;
  CurrentSig.Skeleton = Skel.name().str();
  CurrentSig.Config = Config;
  CurrentSig.Backend = "generated";
  CurrentChoice = KernelChoice{&Skel, Skel.parse(Config), ChoiceOrigin::Named};
  Current = makeGeneratedBackend(
      BackendSetup{Def, CurrentSig, Target, CurrentChoice});
  CurrentConfig = Config;
  {
    BackendProblem P{Def, CurrentSig, Target, CheckCall.Shape, CurrentChoice};
    if (std::string Why = Current->check(P); !Why.empty())
      return "the generated backend refuses it: " + Why;
  }
  DeviceAlloc &Out = Problem.out();
  DeviceAlloc &Fin = *CheckCall.FinalsBuffer;
  Out.poison();
  Fin.poison();
  run(*Current, CurrentSig, CurrentChoice, CheckCall, 0);
  D.check(D.cuCtxSynchronize(), "checked forward (tuning)");
  if (Opts.AfterCheckedRun) {
    Opts.AfterCheckedRun(Config, CheckCall.Out);
    D.check(D.cuCtxSynchronize(), "after-check hook (tuning)");
  }
  std::vector<uint16_t> Got(Out.size() / 2);
  D.check(D.cuMemcpyDtoH(Got.data(), Out.ptr(), Out.size()),
          "cuMemcpyDtoH (candidate output)");
  std::vector<float> GotFinals(Fin.size() / 4);
  D.check(D.cuMemcpyDtoH(GotFinals.data(), Fin.ptr(), Fin.size()),
          "cuMemcpyDtoH (candidate finals)");
  return compare(Got, GotFinals);
}

std::string GpuCandidateRunner::compare(const std::vector<uint16_t> &Got,
                                        const std::vector<float> &GotFinals)
    const {
  // The check shape's elements of o: contiguous runs of the full buffer.
  const TuneShape &S = Problem.shape(), &C = CheckShape;
  int64_t DV = Base.HeadDimV;
  std::vector<std::pair<size_t, size_t>> Runs; // (offset, length)
  if (Base.TensorLayout == Layout::BSHD) {
    for (int64_t B = 0; B < S.Batch; ++B)
      for (int64_t Q = 0; Q < C.SeqQ; ++Q)
        Runs.push_back({size_t(((B * S.SeqQ + Q) * S.Heads) * DV),
                        size_t(S.Heads * DV)});
  } else {
    for (int64_t B = 0; B < S.Batch; ++B)
      for (int64_t H = 0; H < S.Heads; ++H)
        Runs.push_back({size_t(((B * S.Heads + H) * S.SeqQ) * DV),
                        size_t(C.SeqQ * DV)});
  }
  // Chunks of runs in parallel: o can hold hundreds of millions of
  // elements, and every candidate is compared.
  struct Partial {
    double MaxAbs = 0, MaxErr = 0;
    size_t Worst = 0;
  };
  size_t Chunks = std::min<size_t>(Runs.size(), 64);
  std::vector<Partial> Parts(Chunks);
  DType T = Base.Dtype;
  auto Work = [&](size_t Chunk) {
    Partial &P = Parts[Chunk];
    for (size_t R = Chunk; R < Runs.size(); R += Chunks)
      for (size_t I = Runs[R].first, E = I + Runs[R].second; I < E; ++I) {
        double Want = fromDtypeBits(T, RefOut[I]), Have = fromDtypeBits(T, Got[I]);
        double Err = std::fabs(Have - Want);
        if (std::isnan(Err))
          Err = std::numeric_limits<double>::infinity();
        if (std::isfinite(Want))
          P.MaxAbs = std::max(P.MaxAbs, std::fabs(Want));
        if (Err > P.MaxErr) {
          P.MaxErr = Err;
          P.Worst = I;
        }
      }
  };
  {
    llvm::ThreadPool Pool(llvm::hardware_concurrency());
    for (size_t Chunk = 0; Chunk < Chunks; ++Chunk)
      Pool.async(Work, Chunk);
    Pool.wait();
  }
  Partial All;
  for (const Partial &P : Parts) {
    All.MaxAbs = std::max(All.MaxAbs, P.MaxAbs);
    if (P.MaxErr > All.MaxErr) {
      All.MaxErr = P.MaxErr;
      All.Worst = P.Worst;
    }
  }
  double Tol = absTolerance(T) + relTolerance(T) * All.MaxAbs;
  if (!(All.MaxErr <= Tol))
    return fmt::format("max |o - reference| = {:.4g} at element {} (got {:.4g}, "
                       "want {:.4g}) > tolerance {:.3g}",
                       All.MaxErr, All.Worst, fromDtypeBits(T, Got[All.Worst]),
                       fromDtypeBits(T, RefOut[All.Worst]), Tol);
  // Without final rowscales the finals buffer is a placeholder.
  size_t NumFinals = Def.Graph->decls().FinalRowscales.empty()
                         ? 0
                         : RefFinals.size();
  for (size_t I = 0; I < NumFinals; ++I) {
    double Want = RefFinals[I], Have = GotFinals[I];
    if (Want == Have)
      continue; // equal infinities count as exact
    double Err = std::fabs(Have - Want) / (1 + std::fabs(Want));
    if (!(Err <= FinalsTolerance))
      return fmt::format("finals[{}] = {:.6g}, reference {:.6g}: relative "
                         "error {:.3g} > {:.1g}",
                         I, Have, Want, Err, FinalsTolerance);
  }
  return "";
}

double GpuCandidateRunner::time(const std::string &Config) {
  if (!Current || CurrentConfig != Config)
    throw InternalError("GpuCandidateRunner::time(" + Config +
                        ") without a passing check() first");
  int Sets = Problem.sets();
  double Ms = medianEventMs(
      [&](int I) {
        run(*Current, CurrentSig, CurrentChoice, TimeCall, I % Sets);
      },
      Opts.Warmup, Opts.Repeats);
  Current.reset();
  CurrentConfig.clear();
  return Ms;
}

} // namespace attn::runtime
