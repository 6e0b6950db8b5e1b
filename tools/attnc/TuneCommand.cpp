// attnc tune: tune one definition's forward tile configuration (of fwd_sm80
// or fwd_sm90), or a linear definition's linear_chunk configuration (forward
// and backward), at one shape on this machine's GPU and merge the result
// into a tune file.
#include "Commands.h"
#include "KernelChoice.h"
#include "LinearCommands.h"

#include "attn/Pipeline.h"
#include "attn/codegen/Arch.h"
#include "attn/runtime/Selector.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/LinearProblem.h"
#include "attn/runtime/LinearTuner.h"
#include "attn/runtime/TuneFile.h"
#include "attn/runtime/Tuner.h"

#include <fmt/format.h>

namespace attn {

namespace cl = llvm::cl;

namespace {

class TuneCommand final : public Command {
public:
  TuneCommand()
      : Command("tune", "tune NAME --shape B,H,S,D -o F.json",
                "Tune a forward kernel's tile configuration on this GPU and "
                "write it to a tune file") {}
  int run(const dsl::Registry &Registry, llvm::raw_ostream &OS) override;

private:
  int runLinear(const dsl::DefinitionBase &Def, const ShapeArg &S,
                runtime::TuneOptions Opts, llvm::raw_ostream &OS);
  /// The summary on stdout: best, default, what happened to the candidates.
  void printSummary(const runtime::TuneResult &R, llvm::raw_ostream &OS);

  ProblemOptions ProblemArgs{Sub};
  CallOpt<std::string> Output{"o", cl::desc("The tune file to merge into"),
                              cl::value_desc("tune.json"), cl::init(""),
                              cl::sub(Sub)};
  CallOpt<double> Budget{
      "budget",
      cl::desc("Stop checking and timing new candidates after this many "
               "seconds (0: no limit)"),
      cl::value_desc("seconds"), cl::init(0), cl::sub(Sub)};
  CallOpt<int> MaxSpill{
      "max-spill",
      cl::desc("Stack frame (spilled registers) a candidate may have and "
               "still be timed (default 0: prune spilling candidates)"),
      cl::value_desc("bytes"), cl::init(0), cl::sub(Sub)};
  CallOpt<std::string> Skeleton{
      "skeleton",
      cl::desc(skeletonOptionHelp()),
      cl::init(""), cl::sub(Sub)};
  CallOpt<int> Repeats{"repeats",
                       cl::desc("Timed calls per candidate (the median "
                                "counts)"),
                       cl::init(15), cl::sub(Sub)};
};

int TuneCommand::run(const dsl::Registry &Registry, llvm::raw_ostream &OS) {
  if (ProblemArgs.Shape.empty())
    throw UsageError("tune: --shape B,H,S,D[,DV] is required");
  rejectEmptyValue(ProblemArgs.Arch, "sm_80, sm_86, sm_89 or sm_90a");
  rejectEmptyValue(Skeleton, "a skeleton's name");
  if (Output.empty())
    throw UsageError("tune: -o FILE (the tune file to write) is required");
  ShapeArg S = parseShapeArg(ProblemArgs.Shape);
  runtime::Signature Sig;
  Sig.Dtype = parseDtypeArg(ProblemArgs.Dtype);
  Sig.TensorLayout = parseLayoutArg(ProblemArgs.LayoutOpt);
  Sig.HeadDim = S.HeadDim;
  Sig.HeadDimV = S.HeadDimV;
  if (Budget < 0)
    throw UsageError("--budget: expected a number of seconds >= 0");
  if (Repeats < 1)
    throw UsageError("--repeats: expected at least 1");
  if (MaxSpill < 0)
    throw UsageError("--max-spill: expected a number of bytes >= 0");
  runtime::TuneOptions Opts;
  Opts.BudgetSeconds = Budget;
  Opts.MaxStackFrameBytes = MaxSpill;
  Opts.Repeats = Repeats;

  const dsl::DefinitionBase &Def = Registry.get(ProblemArgs.Name);
  if (Def.kind() == ir::DefinitionKind::Linear)
    return runLinear(Def, S, Opts, OS);
  if (ProblemArgs.QkHeads != 0)
    throw UsageError("--qk-heads: '" + ProblemArgs.Name +
                     "' is not linear attention (it has no q/k head groups)");
  Sig.Skeleton = Skeleton;
  // A tune file we could not merge into is refused before any work.
  (void)runtime::readTuneFile(Output);
  CompiledDefinition C = compile(Def);
  // A skeleton name is judged before the GPU is asked for, and with
  // --arch what the skeleton cannot serve too.
  runtime::KernelTarget T = runtime::kernelTarget(C, Sig, GpuArch::Sm80,
                                                  runtime::Direction::Forward);
  runtime::KernelPolicy Policy = policyFromOptions(T, Sig.Skeleton, "");
  if (ProblemArgs.Arch.empty()) {
    runtime::CudaDriver::get().require();
    T.Arch = runtime::resolveArch(std::nullopt);
  } else {
    T.Arch = parseArch(ProblemArgs.Arch, "--arch");
  }
  GpuArch KernelArch = T.Arch;
  // The skeleton is part of the tune key: an fwd_sm80 entry serves calls
  // that ask for fwd_sm80, an fwd_sm90 one the default path.
  runtime::KernelChoice Start = runtime::chooseWithoutShape(T, Policy);
  OS << fmt::format("tuning {} {}: {} from its default {}\n", C.Graph->name(),
                    T.str(), Start.Skel->name().str(), Start.configText());
  runtime::CudaDriver::get().require();
  runtime::TuneShape TS{S.Batch, S.Heads, S.Heads, S.Seq, S.Seq};
  runtime::TuneResult R =
      runtime::tuneForward(C, Sig, KernelArch, TS, Opts, &llvm::errs());
  runtime::mergeIntoTuneFile(Output, {R.Entry});
  printSummary(R, OS);
  return 0;
}

int TuneCommand::runLinear(const dsl::DefinitionBase &Def, const ShapeArg &S,
                           runtime::TuneOptions Opts, llvm::raw_ostream &OS) {
  LinearCommandArgs A =
      linearCommandArgs(S, ProblemArgs.QkHeads, ProblemArgs.Dtype,
                        ProblemArgs.LayoutOpt, Skeleton, "", ProblemArgs.Arch);
  (void)runtime::readTuneFile(Output);
  runtime::CudaDriver::get().require();
  GpuArch KernelArch = runtime::resolveArch(A.Sig.Arch);
  CompiledDefinition C = compile(Def);
  runtime::KernelTarget T = runtime::linearKernelTarget(
      C, A.Sig, KernelArch, runtime::Direction::Forward);
  runtime::KernelChoice Start = runtime::chooseWithoutShape(
      T, runtime::KernelPolicy::parse(T, A.Sig.Skeleton, A.Sig.Config));
  OS << fmt::format("tuning {} {}: {} from its default {}\n", C.Graph->name(),
                    T.str(), Start.Skel->name().str(), Start.configText());
  runtime::TuneResult R = runtime::tuneLinear(C, A.Sig, KernelArch, A.Shape,
                                              Opts, &llvm::errs());
  runtime::mergeIntoTuneFile(Output, {R.Entry});
  printSummary(R, OS);
  return 0;
}

void TuneCommand::printSummary(const runtime::TuneResult &R,
                               llvm::raw_ostream &OS) {
  const runtime::TuneEntry &E = R.Entry;
  // Linear entries report no FLOPs (their time is forward + backward).
  auto Timing = [](const runtime::TunedTiming &T) {
    return T.Tflops > 0 ? fmt::format("{:.3f} ms  {:.1f} TFLOPS", T.Ms, T.Tflops)
                        : fmt::format("{:.3f} ms", T.Ms);
  };
  OS << fmt::format("best:     {}  {}\n", E.Best.Config, Timing(E.Best));
  if (!E.Default.Config.empty())
    OS << fmt::format("default:  {}  {}  (best is {:.2f}x)\n",
                      E.Default.Config, Timing(E.Default),
                      E.Default.Ms / E.Best.Ms);
  unsigned Count[5] = {0, 0, 0, 0, 0};
  std::string Skipped;
  for (const runtime::CandidateResult &Cand : R.Candidates) {
    ++Count[unsigned(Cand.Status)];
    if (Cand.Status == runtime::CandidateStatus::SkippedBudget)
      Skipped += (Skipped.empty() ? "" : " ") + Cand.Config;
  }
  using CS = runtime::CandidateStatus;
  OS << fmt::format("candidates: {} timed, {} pruned, {} failed to compile, "
                    "{} rejected, {} skipped\n",
                    Count[unsigned(CS::Timed)], Count[unsigned(CS::Pruned)],
                    Count[unsigned(CS::CompileFailed)],
                    Count[unsigned(CS::Rejected)],
                    Count[unsigned(CS::SkippedBudget)]);
  if (!Skipped.empty())
    OS << fmt::format("skipped (budget of {:g} s spent): {}\n",
                      Budget.getValue(), Skipped);
  OS << fmt::format("tuned in {:.1f} s; wrote {} (device '{}', {}, bucket "
                    "{})\n",
                    R.Seconds, Output.getValue(), E.Key.Device, E.Key.Arch,
                    E.Key.Bucket.str());
}

} // namespace

std::unique_ptr<Command> makeTuneCommand() {
  return std::make_unique<TuneCommand>();
}

} // namespace attn
