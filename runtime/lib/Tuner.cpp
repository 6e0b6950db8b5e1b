// The autotuner's search: resource-model pruning, parallel compilation
// through the kernel cache, then checking and timing one candidate at a time.
#include "attn/runtime/Tuner.h"
#include "attn/codegen/Arch.h"

#include "NvrtcLibrary.h"
#include "TuneRunner.h"

#include "attn/Error.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/Selector.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/EventTiming.h"
#include "attn/runtime/KernelCache.h"

#include "llvm/Support/ThreadPool.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <ctime>
#include <map>
#include <mutex>

namespace attn::runtime {

namespace {

std::atomic<unsigned> TuneRuns{0};

/// variantKey() once per graph: selectForwardConfig asks on every call.
/// Keyed by Graph::serial(), which no other graph of the process reuses
/// (an address could be).
const std::string &cachedVariantKey(const CompiledDefinition &Def) {
  static std::mutex Mutex;
  static std::map<uint64_t, std::string> Keys;
  uint64_t Serial = Def.Graph->serial();
  {
    std::lock_guard<std::mutex> Guard(Mutex);
    auto It = Keys.find(Serial);
    if (It != Keys.end())
      return It->second;
  }
  std::string Key = variantKey(Def);
  std::lock_guard<std::mutex> Guard(Mutex);
  // Forget graphs that no longer exist, so that a process making many
  // Attention objects does not grow this map without bound.
  if (Keys.size() >= 256)
    for (auto It = Keys.begin(); It != Keys.end();)
      It = ir::Graph::fromSerial(It->first) ? std::next(It) : Keys.erase(It);
  return Keys.emplace(Serial, std::move(Key)).first->second;
}

std::string utcNow() {
  std::time_t T = std::time(nullptr);
  std::tm Tm{};
  gmtime_r(&T, &Tm);
  char Buf[32];
  std::strftime(Buf, sizeof Buf, "%Y-%m-%dT%H:%M:%SZ", &Tm);
  return Buf;
}

/// The progress line's text after "[i/N] CONFIG: ".
std::string describe(const CandidateResult &R) {
  switch (R.Status) {
  case CandidateStatus::Timed: {
    // Spaces without a FLOP count (linear attention) report time only.
    std::string S = R.Tflops > 0
                        ? fmt::format("{:.3f} ms  {:.1f} TFLOPS", R.Ms, R.Tflops)
                        : fmt::format("{:.3f} ms", R.Ms);
    if (R.IsDefault)
      S += R.Resources.StackFrameBytes
               ? fmt::format("  (default; spills, {} bytes stack frame)",
                             R.Resources.StackFrameBytes)
               : "  (default)";
    return S;
  }
  case CandidateStatus::Pruned:
    return "pruned: " + R.Reason;
  case CandidateStatus::CompileFailed:
    return "compile failed: " + R.Reason;
  case CandidateStatus::Rejected:
    return "rejected: " + R.Reason;
  case CandidateStatus::SkippedBudget:
    return "skipped: time budget spent";
  }
  return "?";
}

} // namespace

const char *candidateStatusName(CandidateStatus S) {
  switch (S) {
  case CandidateStatus::Timed:
    return "timed";
  case CandidateStatus::Pruned:
    return "pruned";
  case CandidateStatus::CompileFailed:
    return "compile failed";
  case CandidateStatus::Rejected:
    return "rejected";
  case CandidateStatus::SkippedBudget:
    return "skipped";
  }
  return "?";
}

CandidateRunner::~CandidateRunner() = default;

double forwardFlops(const CompiledDefinition &Def, const TuneShape &S, int D,
                    int DV) {
  double Flops = 2.0 * double(S.Batch) * double(S.Heads) * double(S.SeqQ) *
                 double(S.SeqKv) * double(D + DV);
  return Def.Graph->decls().HasMask ? Flops / 2 : Flops;
}

SearchSpace skeletonSearchSpace(const CompiledDefinition &Def,
                                const SearchPlan &Plan) {
  if (!Plan.Skel)
    throw InternalError("skeletonSearchSpace: the plan names no skeleton");
  const Skeleton &Skel = *Plan.Skel;
  const KernelTarget Target = Plan.Target;
  SearchSpace Space;
  Space.Skeleton = Skel.name().str();
  Space.Default = Plan.Default.empty() ? Skel.print(Skel.defaultFor(Target))
                                       : Plan.Default;
  Space.Limits = Plan.Limits;
  Space.Flops = Plan.Flops;
  for (const SkeletonConfig &C : Skel.enumerate(Target))
    Space.Candidates.push_back(Skel.print(C));
  ResourceLimits Limits = Plan.Limits;
  Space.PruneBeforeCompile = [&Skel, Target, Limits](const std::string &Text) {
    return Skel.pruneBeforeCompile(Skel.parse(Text), Target, Limits);
  };
  const CompiledDefinition *D = &Def;
  Space.Sources = [&Skel, Target, D](const std::string &Text) {
    SkeletonConfig C = Skel.parse(Text);
    std::vector<codegen::KernelSource> Out;
    for (Direction Dir : {Direction::Forward, Direction::Backward}) {
      if (!Skel.serves(Dir))
        continue;
      KernelTarget T = Target;
      T.Dir = Dir;
      Out.push_back(Skel.generate(*D, T, C));
    }
    return Out;
  };
  auto Compile = Plan.Compile ? Plan.Compile
                              : [](const codegen::KernelSource &Src) {
                                  return KernelCache::global().getOrCompile(Src);
                                };
  auto Resources =
      Plan.Resources
          ? Plan.Resources
          : [](const CacheResult &R, llvm::StringRef Entry) {
              return readCubinResources(
                  llvm::StringRef(R.Cubin->data(), R.Cubin->size()), Entry);
            };
  Space.Compile = [&Skel, Compile, Resources](const codegen::KernelSource &Src) {
    CacheResult R = Compile(Src);
    std::vector<KernelResources> Out;
    for (const std::string &Entry : Skel.judgedEntries(Src))
      Out.push_back(Resources(R, Entry));
    return Out;
  };
  Space.PruneAfterCompile = [&Skel](const std::string &Text,
                                    const std::vector<KernelResources> &R,
                                    const ResourceLimits &L) {
    return Skel.pruneAfterCompile(Skel.parse(Text), R, L);
  };
  return Space;
}

std::vector<CandidateResult> searchSkeleton(const CompiledDefinition &Def,
                                            const SearchPlan &Plan,
                                            CandidateRunner &Runner,
                                            const TuneOptions &Opts,
                                            llvm::raw_ostream *Progress) {
  return searchCandidates(skeletonSearchSpace(Def, Plan), Runner, Opts,
                          Progress);
}

std::vector<CandidateResult> searchCandidates(const SearchSpace &Space,
                                              CandidateRunner &Runner,
                                              const TuneOptions &Opts,
                                              llvm::raw_ostream *Progress) {
  WallTimer Timer;

  // The default goes first: it is the baseline every other candidate must
  // beat, and the one timed whatever the budget.
  std::vector<CandidateResult> Cands;
  Cands.push_back({});
  Cands.back().Config = Space.Default;
  Cands.back().IsDefault = true;
  for (const std::string &C : Space.Candidates)
    if (C != Space.Default) {
      Cands.push_back({});
      Cands.back().Config = C;
    }

  // One line per candidate as it is decided, with the elapsed time and,
  // once something is timed, the best so far: a long search shows where it
  // is and what it has found.
  size_t Done = 0;
  const CandidateResult *Best = nullptr;
  auto Report = [&](const CandidateResult &R) {
    ++Done;
    if (R.Status == CandidateStatus::Timed && (!Best || R.Ms < Best->Ms))
      Best = &R;
    if (!Progress)
      return;
    std::string Line = fmt::format("[{}/{}] {}: {}", Done, Cands.size(),
                                   R.Config, describe(R));
    if (Best)
      Line += fmt::format("  | best so far {} {:.3f} ms", Best->Config,
                          Best->Ms);
    *Progress << Line << fmt::format("  | {:.1f} s\n", Timer.seconds());
    Progress->flush();
  };

  // 1. What cannot launch whatever the compiler does: structure, shared
  // memory and threads. These are never compiled, let alone timed.
  std::vector<size_t> ToCompile;
  for (size_t I = 0; I < Cands.size(); ++I) {
    std::string Why;
    try {
      Why = Space.PruneBeforeCompile(Cands[I].Config);
    } catch (const UserError &E) {
      Why = E.what();
    }
    if (Why.empty()) {
      ToCompile.push_back(I);
      continue;
    }
    Cands[I].Status = CandidateStatus::Pruned;
    Cands[I].Reason = Why;
    Report(Cands[I]);
  }

  // 2. Make the sources here, on this thread, then compile them in
  // parallel through the cache: only NVRTC runs concurrently (one program
  // per call), and KernelCache locks only its in-memory map.
  std::vector<std::string> CompileErrors(Cands.size());
  std::vector<std::vector<codegen::KernelSource>> Sources(Cands.size());
  std::vector<std::vector<std::vector<KernelResources>>> Resources(
      Cands.size());
  for (size_t I : ToCompile) {
    try {
      Sources[I] = Space.Sources(Cands[I].Config);
    } catch (const Error &E) {
      CompileErrors[I] = E.what();
    }
    Resources[I].resize(Sources[I].size());
  }
  std::mutex ErrorMutex;
  WallTimer CompileTimer;
  size_t Kernels = 0, KernelsDone = 0;
  for (size_t I : ToCompile)
    Kernels += Sources[I].size();
  // A line at each tenth of the kernels compiled (NVRTC takes seconds a
  // kernel), written under the lock the workers share.
  size_t Step = std::max<size_t>(1, (Kernels + 9) / 10);
  {
    llvm::ThreadPool Pool(llvm::hardware_concurrency(Opts.CompileThreads));
    for (size_t I : ToCompile)
      for (size_t K = 0; K < Sources[I].size(); ++K)
        Pool.async([&, I, K] {
          std::string Error;
          try {
            Resources[I][K] = Space.Compile(Sources[I][K]);
          } catch (const std::exception &E) {
            Error = E.what();
          }
          std::lock_guard<std::mutex> Guard(ErrorMutex);
          if (!Error.empty() && CompileErrors[I].empty())
            CompileErrors[I] = Error;
          ++KernelsDone;
          if (Progress && (KernelsDone % Step == 0 || KernelsDone == Kernels)) {
            *Progress << fmt::format("compiling: {}/{} kernels  | {:.1f} s\n",
                                     KernelsDone, Kernels, Timer.seconds());
            Progress->flush();
          }
        });
    Pool.wait();
  }
  std::vector<std::vector<KernelResources>> Flat(Cands.size());
  for (size_t I : ToCompile) {
    CandidateResult &R = Cands[I];
    R.Compiled = CompileErrors[I].empty() && !Sources[I].empty();
    if (!R.Compiled && CompileErrors[I].empty())
      CompileErrors[I] = "the configuration has no kernels";
    for (const std::vector<KernelResources> &Ks : Resources[I])
      for (const KernelResources &K : Ks) {
        Flat[I].push_back(K);
        R.Resources.Registers = std::max(R.Resources.Registers, K.Registers);
        R.Resources.StackFrameBytes =
            std::max(R.Resources.StackFrameBytes, K.StackFrameBytes);
      }
  }
  if (Progress && !ToCompile.empty())
    *Progress << fmt::format("compiled {} candidates in {:.1f} s\n",
                             ToCompile.size(), CompileTimer.seconds());

  // 3. What the compiled code rules out: registers, spills. The default is
  // exempt from the spill rule (it is the baseline and runs anyway), never
  // from the rule that it must launch; and a candidate that spills no more
  // than the default risks nothing the baseline does not, so the allowance
  // is at least the default's stack frame.
  ResourceLimits Allowed = Space.Limits;
  if (Cands.front().IsDefault && Cands.front().Compiled)
    Allowed.MaxStackFrameBytes =
        std::max(Allowed.MaxStackFrameBytes,
                 Cands.front().Resources.StackFrameBytes);
  std::vector<size_t> ToTime;
  for (size_t I : ToCompile) {
    CandidateResult &R = Cands[I];
    if (!R.Compiled) {
      R.Status = CandidateStatus::CompileFailed;
      R.Reason = llvm::StringRef(CompileErrors[I]).split('\n').first.str();
      Report(R);
      continue;
    }
    ResourceLimits L = Allowed;
    if (R.IsDefault)
      L.MaxStackFrameBytes = INT_MAX;
    std::string Why = Space.PruneAfterCompile(R.Config, Flat[I], L);
    if (!Why.empty()) {
      R.Status = CandidateStatus::Pruned;
      R.Reason = Why;
      Report(R);
      continue;
    }
    ToTime.push_back(I);
  }

  // 4. Check, then time, one at a time (the GPU is one resource).
  for (size_t I : ToTime) {
    CandidateResult &R = Cands[I];
    if (Opts.BudgetSeconds > 0 && !R.IsDefault &&
        Timer.seconds() > Opts.BudgetSeconds) {
      R.Status = CandidateStatus::SkippedBudget;
      Report(R);
      continue;
    }
    std::string Wrong;
    try {
      Wrong = Runner.check(R.Config);
    } catch (const Error &E) {
      Wrong = E.what();
    }
    if (!Wrong.empty()) {
      R.Status = CandidateStatus::Rejected;
      R.Reason = Wrong;
      Report(R);
      continue;
    }
    R.Ms = Runner.time(R.Config);
    R.Tflops = R.Ms > 0 && Space.Flops > 0
                   ? Space.Flops / (R.Ms * 1e-3) / 1e12
                   : 0;
    R.Status = CandidateStatus::Timed;
    Report(R);
  }

  std::stable_sort(Cands.begin(), Cands.end(),
                   [](const CandidateResult &A, const CandidateResult &B) {
                     bool TA = A.Status == CandidateStatus::Timed,
                          TB = B.Status == CandidateStatus::Timed;
                     if (TA != TB)
                       return TA;
                     return TA && A.Ms < B.Ms;
                   });
  return Cands;
}

namespace {

/// The forward's target and policy under \p Sig, and the skeleton the
/// selector picks for them.
const Skeleton &forwardSkeleton(const CompiledDefinition &Def,
                                const Signature &Sig, GpuArch Arch,
                                KernelTarget &T) {
  T = kernelTarget(Def, Sig, Arch, Direction::Forward);
  return chooseSkeleton(T, KernelPolicy::parse(T, Sig.Skeleton, Sig.Config));
}

} // namespace

TuneKey makeTuneKey(const CompiledDefinition &Def, const Signature &Sig,
                    GpuArch Arch, const TuneShape &S,
                    const std::string &Device) {
  KernelTarget T;
  const Skeleton &Skel = forwardSkeleton(Def, Sig, Arch, T);
  return tuneKeyOf(Def, Skel, T, S, Device);
}

TuneKey tuneKeyFor(const CompiledDefinition &Def, const std::string &Skeleton,
                   DType Dtype, int HeadDim, int HeadDimV, GpuArch Arch,
                   const ShapeBucket &Bucket, const std::string &Device) {
  TuneKey K;
  K.Device = Device;
  K.Arch = archName(Arch).str();
  // Without NVRTC (a deployed program running bundled kernels) the key names
  // no toolchain, and TuneFileData::find takes an entry of any toolchain.
  static const std::string Nvrtc =
      nvrtcAvailable() ? nvrtcVersion() : std::string();
  K.Nvrtc = Nvrtc;
  K.Skeleton = Skeleton;
  K.Variant = cachedVariantKey(Def);
  K.Dtype = Dtype;
  K.HeadDim = HeadDim;
  K.HeadDimV = HeadDimV;
  K.Bucket = Bucket;
  return K;
}

TuneResult tuneForward(const CompiledDefinition &Def, const Signature &Sig,
                       GpuArch Arch, const TuneShape &S,
                       const TuneOptions &Opts, llvm::raw_ostream *Progress) {
  WallTimer Timer;
  CudaDriver::get().require();
  const DeviceInfo &Dev = currentDevice();
  ++TuneRuns;

  SearchPlan Plan;
  Plan.Skel = &forwardSkeleton(Def, Sig, Arch, Plan.Target);
  // The candidate runner launches the forward skeletons' entry point.
  if (Plan.Skel->isDecode())
    throw NotSupportedYet("tuning " + Plan.Skel->name().str());
  Plan.Limits = ResourceLimits::forDevice(Arch, Dev);
  Plan.Limits.MaxStackFrameBytes = Opts.MaxStackFrameBytes;
  Plan.Flops = forwardFlops(Def, S, Sig.HeadDim, Sig.HeadDimV);

  GpuCandidateRunner Runner(Def, Sig, Plan.Target, *Plan.Skel, S, Opts);
  if (Progress)
    *Progress << fmt::format("tuning {} ({}) {} d{}/{} b{} h{}/{} s{}x{} on {} "
                             "({}); reference in {:.1f} s\n",
                             Def.Graph->name(), Plan.Skel->name().str(),
                             std::string(dtypeName(Sig.Dtype)),
                             Sig.HeadDim, Sig.HeadDimV, S.Batch, S.Heads,
                             S.HeadsKv, S.SeqQ, S.SeqKv, Dev.Name,
                             archName(Arch).str(), Runner.referenceSeconds());
  TuneResult Result;
  Result.Candidates = searchSkeleton(Def, Plan, Runner, Opts, Progress);
  Result.Seconds = Timer.seconds();

  recordSearch(Result, Def.Graph->name(), Opts.RunnersUp, S, Sig.TensorLayout);
  Result.Entry.Key = tuneKeyOf(Def, *Plan.Skel, Plan.Target, S, Dev.Name);
  return Result;
}

void recordSearch(TuneResult &R, const std::string &Definition, unsigned RunnersUp,
                  const TuneShape &S, Layout L) {
  if (R.Candidates.empty())
    throw InternalError("tuning " + Definition + ": the search space is empty");
  const CandidateResult &Best = R.Candidates.front();
  if (Best.Status != CandidateStatus::Timed)
    throw InternalError(fmt::format(
        "tuning {}: no configuration passed the check against the reference "
        "(first: {}: {})",
        Definition, Best.Config, Best.Reason));
  TuneEntry &E = R.Entry;
  E.Definition = Definition;
  E.Batch = S.Batch;
  E.Heads = S.Heads;
  E.HeadsKv = S.HeadsKv;
  E.SeqQ = S.SeqQ;
  E.SeqKv = S.SeqKv;
  E.TensorLayout = L;
  for (const CandidateResult &C : R.Candidates) {
    if (C.Status == CandidateStatus::SkippedBudget)
      ++R.Skipped;
    if (C.Status != CandidateStatus::Timed)
      continue;
    TunedTiming T{C.Config, C.Ms, C.Tflops};
    if (&C == &Best)
      E.Best = T;
    else if (E.RunnersUp.size() < RunnersUp)
      E.RunnersUp.push_back(T);
    if (C.IsDefault)
      E.Default = T;
  }
  E.TuneSeconds = R.Seconds;
  E.TunedAt = utcNow();
}

unsigned tuneRunCount() { return TuneRuns.load(); }

} // namespace attn::runtime
