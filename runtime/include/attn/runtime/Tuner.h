// The autotuner: enumerate a skeleton's configurations, prune them with the
// resource model, compile the survivors in parallel, check each against a
// reference and time it with CUDA events. The search is generic over
// SearchSpace, which each skeleton's table entry fills.
#ifndef ATTN_RUNTIME_TUNER_H
#define ATTN_RUNTIME_TUNER_H

#include "attn/runtime/Attention.h"
#include "attn/runtime/RandomProblem.h"
#include "attn/runtime/ResourceModel.h"
#include "attn/runtime/Skeleton.h"
#include "attn/runtime/TuneFile.h"

#include "llvm/Support/raw_ostream.h"

#include <functional>
#include <string>
#include <vector>

namespace attn::runtime {

/// FLOPs of one forward: 2·B·H·Sq·Skv·(D + DV) (4·B·H·Sq·Skv·D when
/// DV = D), halved when the definition has a mask — the rule of
/// docs/performance.md, exact for causal masks on square problems.
double forwardFlops(const CompiledDefinition &Def, const TuneShape &S, int D,
                    int DV);

struct TuneOptions {
  /// Untimed calls before timing each candidate.
  int Warmup = 3;
  /// Timed calls per candidate; the median is its time.
  int Repeats = 15;
  /// Sets of random q, k, v rotated between calls, so that no call finds
  /// its inputs in L2 from the call before.
  int InputSets = 3;
  /// Stop checking and timing new candidates once this many seconds have
  /// passed since the run began (0: no limit). Those left are reported as
  /// skipped; the default configuration is always timed first.
  double BudgetSeconds = 0;
  /// Threads compiling candidates (0: the machine's hardware threads).
  unsigned CompileThreads = 0;
  /// Stack frame (spilled registers) a candidate may have and still be
  /// timed; 0 prunes every spilling configuration except the default,
  /// which is the baseline and always timed.
  int MaxStackFrameBytes = 0;
  /// How many runners-up an entry keeps.
  unsigned RunnersUp = 5;
  uint64_t Seed = 20261126;
  /// Test hook: called after a candidate's checked run, before its output
  /// is compared with the reference (a test corrupts one output here to
  /// show that the check rejects it).
  std::function<void(const std::string &Config, const TensorView &Out)>
      AfterCheckedRun;
};

enum class CandidateStatus {
  Timed,          ///< passed the check and was timed
  Pruned,         ///< the resource model removed it (Reason says why)
  CompileFailed,  ///< NVRTC rejected it (Reason holds the message)
  Rejected,       ///< its output differs from the reference (or it failed)
  SkippedBudget,  ///< the time budget ran out before it was reached
};
const char *candidateStatusName(CandidateStatus S);

struct CandidateResult {
  /// The configuration as Signature::Config takes it ("m128n64w4s2",
  /// "sm90.m128n128s3", "c64v64w4b8").
  std::string Config;
  CandidateStatus Status = CandidateStatus::Pruned;
  std::string Reason;
  /// Registers and stack frame once compiled: the largest over the
  /// candidate's kernels.
  KernelResources Resources;
  bool Compiled = false;
  bool IsDefault = false;
  double Ms = 0;
  double Tflops = 0;
};

/// The device side of a search, replaceable in tests: checks a candidate's
/// output against the reference and times it.
class CandidateRunner {
public:
  virtual ~CandidateRunner();
  /// Empty when \p Config's output matches the reference, else why not.
  virtual std::string check(const std::string &Config) = 0;
  /// The median time of \p Config in milliseconds (called after check
  /// passed).
  virtual double time(const std::string &Config) = 0;
};

/// One skeleton's search space as the search drives it. Configurations are
/// strings in the form the skeleton's Config field takes.
struct SearchSpace {
  /// The tune-key skeleton name (a table entry's name()).
  std::string Skeleton;
  /// The configuration used without tuning: the baseline, timed first and
  /// whatever the budget.
  std::string Default;
  /// The whole space (Default may be among them; it is not repeated).
  std::vector<std::string> Candidates;
  /// Why a configuration cannot launch whatever the compiler does (its
  /// structure, shared memory, threads), or empty. Such a configuration is
  /// never compiled.
  std::function<std::string(const std::string &)> PruneBeforeCompile;
  /// The kernels of a configuration. Called on the searching thread: code
  /// generation does not run concurrently.
  std::function<std::vector<codegen::KernelSource>(const std::string &)>
      Sources;
  /// Compiles one kernel (through the kernel cache) and returns the
  /// resources of the entries the resource model judges; throws
  /// (CompileError) on failure. Called from several threads at once.
  std::function<std::vector<KernelResources>(const codegen::KernelSource &)>
      Compile;
  /// Why a compiled configuration must not be timed (registers a block
  /// cannot hold, spills over \p L's allowance), or empty. The default is
  /// judged with an unlimited spill allowance.
  std::function<std::string(const std::string &,
                            const std::vector<KernelResources> &,
                            const ResourceLimits &L)>
      PruneAfterCompile;
  ResourceLimits Limits;
  /// The work of one timed call, for TFLOPS (0: none reported).
  double Flops = 0;
};

/// Runs the search over \p Space: prunes before compiling, compiles the
/// survivors in parallel, prunes on their resources, then checks and times
/// them one by one (the default first) through \p Runner. Writes one
/// progress line per candidate ("[12/30] m128n64w4s2: 1.921 ms  245.1
/// TFLOPS") to \p Progress when given. Returns every candidate, timed ones
/// sorted fastest first.
std::vector<CandidateResult> searchCandidates(const SearchSpace &Space,
                                              CandidateRunner &Runner,
                                              const TuneOptions &Opts,
                                              llvm::raw_ostream *Progress);

/// How a search over one skeleton's configurations compiles and inspects
/// candidates. The skeleton's table entry gives the space, the resource
/// model and the kernels; this gives what may be replaced in tests.
struct SearchPlan {
  const Skeleton *Skel = nullptr;
  /// Kind, dtype, head dims and arch (the direction is each kernel's).
  KernelTarget Target;
  ResourceLimits Limits;
  /// The baseline; empty: the skeleton's default for Target.
  std::string Default;
  /// FLOPs of one timed call, for TFLOPS.
  double Flops = 0;
  /// Compiles one kernel; default: KernelCache::global().getOrCompile.
  std::function<CacheResult(const codegen::KernelSource &)> Compile;
  /// Reads one compiled entry's resources; default: readCubinResources.
  std::function<KernelResources(const CacheResult &, llvm::StringRef Entry)>
      Resources;
};

/// The search space of \p Plan's skeleton for \p Def: its entry's
/// enumerate(), pruned by its resource model; a candidate's kernels are
/// those of every direction the skeleton serves (linear_chunk: forward and
/// backward, which one configuration selects together).
SearchSpace skeletonSearchSpace(const CompiledDefinition &Def,
                                const SearchPlan &Plan);

/// searchCandidates over skeletonSearchSpace(Def, Plan).
std::vector<CandidateResult> searchSkeleton(const CompiledDefinition &Def,
                                            const SearchPlan &Plan,
                                            CandidateRunner &Runner,
                                            const TuneOptions &Opts,
                                            llvm::raw_ostream *Progress);

struct TuneResult {
  /// The entry to store: key, best configuration, runners-up.
  TuneEntry Entry;
  std::vector<CandidateResult> Candidates;
  double Seconds = 0;
  /// Candidates left untimed because the budget ran out.
  unsigned Skipped = 0;
};

/// Completes \p R after a search (R.Candidates sorted, R.Seconds set):
/// the entry's best, runners-up (up to \p RunnersUp) and default timings,
/// R.Skipped, the definition's name, the tuned shape \p S and layout \p L,
/// the tuning time and the UTC time now. The caller fills the entry's key.
/// InternalError when no candidate passed the check: a kernel wrong in
/// every configuration is a compiler bug.
void recordSearch(TuneResult &R, const std::string &Definition, unsigned RunnersUp,
                  const TuneShape &S, Layout L);

/// A tune key of any skeleton: \p Def's variant key (computed once per
/// graph), this NVRTC's version, and the fields given.
TuneKey tuneKeyFor(const CompiledDefinition &Def, const std::string &Skeleton,
                   DType Dtype, int HeadDim, int HeadDimV, GpuArch Arch,
                   const ShapeBucket &Bucket, const std::string &Device);

/// The tune-file key of \p Def's forward under \p Sig for a problem of
/// \p S on the device named \p Device: the skeleton is the one the
/// selector picks for the signature on \p Arch.
TuneKey makeTuneKey(const CompiledDefinition &Def, const Signature &Sig,
                    GpuArch Arch, const TuneShape &S,
                    const std::string &Device);

/// Tunes \p Def's forward (dtype, head dims and layout of \p Sig, kernels
/// for \p Arch; the skeleton Sig names or the selector picks) on the
/// current device, on random inputs of shape \p S: every candidate is
/// checked against the reference backend before it is timed. DriverError
/// without a GPU; InternalError if no candidate passes.
TuneResult tuneForward(const CompiledDefinition &Def, const Signature &Sig,
                       GpuArch Arch, const TuneShape &S,
                       const TuneOptions &Opts, llvm::raw_ostream *Progress);

/// How many times this process has run tuneForward (tests use it to see
/// that a tune file was used without tuning again).
unsigned tuneRunCount();

} // namespace attn::runtime

#endif
