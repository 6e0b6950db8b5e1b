// attnc bench: time one definition's forward (and, for linear attention,
// backward, dense or packed) at one shape on this machine's GPU, with the
// configuration a tune file, --config or the default gives; with
// $ATTNC_BENCH_JSON set, each timed dense row is also appended there as a
// JSON line (BenchJson.h).
#include "BenchJson.h"
#include "Commands.h"
#include "KernelChoice.h"
#include "LinearCommands.h"

#include "attn/codegen/Arch.h"
#include "attn/runtime/Attention.h"
#include "attn/runtime/Selector.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/EventTiming.h"
#include "attn/runtime/LinearProblem.h"
#include "attn/runtime/LinearTuner.h"
#include "attn/runtime/RandomProblem.h"
#include "attn/runtime/TuneFile.h"
#include "attn/runtime/Tuner.h"

#include "llvm/ADT/StringExtras.h"

#include <fmt/format.h>

#include <algorithm>

namespace attn {

namespace cl = llvm::cl;

namespace {

class BenchCommand final : public Command {
public:
  BenchCommand()
      : Command("bench", "bench NAME --shape B,H,S,D",
                "Time a forward kernel (linear attention: forward and "
                "backward) on this GPU") {}
  int run(const dsl::Registry &Registry, llvm::raw_ostream &OS) override;

private:
  int runLinear(const dsl::DefinitionBase &Def, const ShapeArg &S,
                llvm::raw_ostream &OS);
  /// --seqlens: the lengths, checked to add up to B·S of \p S.
  std::vector<int64_t> packedLengths(const ShapeArg &S) const;

  ProblemOptions ProblemArgs{Sub};
  CallOpt<std::string> TuneFile{
      "tune-file", cl::desc("Use the tuned configuration from this file"),
      cl::value_desc("tune.json"), cl::init(""), cl::sub(Sub)};
  CallOpt<std::string> Skeleton{
      "skeleton",
      cl::desc(skeletonOptionHelp()),
      cl::init(""), cl::sub(Sub)};
  CallOpt<std::string> Config{"config", cl::desc(configOptionHelp()),
                              cl::init(""), cl::sub(Sub)};
  CallOpt<std::string> Backend{"backend",
                               cl::desc("generated or reference (default: automatic)"),
                               cl::init(""), cl::sub(Sub)};
  CallOpt<int> Warmup{"warmup", cl::desc("Untimed calls first"), cl::init(5),
                      cl::sub(Sub)};
  CallOpt<int> Repeats{"repeats",
                       cl::desc("Timed calls (the median is printed)"),
                       cl::init(30), cl::sub(Sub)};
  CallOpt<std::string> Seqlens{
      "seqlens",
      cl::desc("Linear attention: also time a packed batch of sequences of "
               "these lengths, adding up to B*S of --shape"),
      cl::value_desc("L1,L2,..."), cl::init(""), cl::sub(Sub)};
};

int BenchCommand::run(const dsl::Registry &Registry, llvm::raw_ostream &OS) {
  if (ProblemArgs.Shape.empty())
    throw UsageError("bench: --shape B,H,S,D[,DV] is required");
  rejectEmptyValue(ProblemArgs.Arch, "sm_80, sm_86, sm_89 or sm_90a");
  rejectEmptyValue(Skeleton, "a skeleton's name");
  rejectEmptyValue(Config, "a tile configuration such as m128n64w4s2");
  rejectEmptyValue(TuneFile, "a tune file");
  ShapeArg S = parseShapeArg(ProblemArgs.Shape);
  runtime::Signature Sig;
  Sig.Dtype = parseDtypeArg(ProblemArgs.Dtype);
  Sig.TensorLayout = parseLayoutArg(ProblemArgs.LayoutOpt);
  Sig.HeadDim = S.HeadDim;
  Sig.HeadDimV = S.HeadDimV;
  Sig.Skeleton = Skeleton;
  Sig.Config = Config;
  Sig.TuneFile = TuneFile;
  Sig.Backend = Backend;
  if (!ProblemArgs.Arch.empty())
    Sig.Arch = parseArch(ProblemArgs.Arch, "--arch");
  if (!Backend.empty() && Backend != "generated" && Backend != "reference")
    throw UsageError("--backend '" + Backend +
                     "': expected generated or reference");
  // The reference kernel has no tiles: a --skeleton or --config would be
  // ignored.
  if (Backend == "reference" && (!Skeleton.empty() || !Config.empty()))
    throw UsageError("--backend reference runs its own kernel; --skeleton "
                     "and --config choose the generated backend's");
  if (Warmup < 0 || Repeats < 1)
    throw UsageError("--warmup must be >= 0 and --repeats >= 1");

  rejectEmptyValue(Seqlens, "sequence lengths L1,L2,...");
  const dsl::DefinitionBase &Def = Registry.get(ProblemArgs.Name);
  if (Def.kind() == ir::DefinitionKind::Linear)
    return runLinear(Def, S, OS);
  if (!Seqlens.empty())
    throw UsageError("--seqlens: '" + ProblemArgs.Name +
                     "' is not linear attention (packed batches are timed "
                     "for linear definitions)");
  if (ProblemArgs.QkHeads != 0)
    throw UsageError("--qk-heads: '" + ProblemArgs.Name +
                     "' is not linear attention (it has no q/k head groups)");
  // Names are judged before any GPU work.
  (void)policyFromOptions(
      runtime::kernelTarget(compile(Def), Sig, Sig.Arch.value_or(GpuArch::Sm80),
                            runtime::Direction::Forward),
      Skeleton, Config);
  runtime::CudaDriver &D = runtime::CudaDriver::get();
  D.require();

  runtime::Attention Att(Def, Sig);
  const CompiledDefinition &C = Att.definition();
  runtime::TuneShape TS{S.Batch, S.Heads, S.Heads, S.Seq, S.Seq};
  runtime::RandomProblem Problem(C, Sig, TS, /*Sets=*/3, /*Seed=*/7);
  runtime::RandomProblem::Call Call = Problem.call();
  auto Run = [&](int Set) {
    Att.forward(Call.Q[Set], Call.K[Set], Call.V[Set], Call.Out,
                Call.finals(), Call.Inputs);
  };
  for (int I = 0; I < Warmup; ++I)
    Run(I % Problem.sets());
  D.check(D.cuCtxSynchronize(), "warm-up");
  CUevent E0, E1;
  D.check(D.cuEventCreate(&E0, 0), "cuEventCreate");
  D.check(D.cuEventCreate(&E1, 0), "cuEventCreate");
  std::vector<float> Times;
  for (int I = 0; I < Repeats; ++I) {
    D.check(D.cuEventRecord(E0, nullptr), "cuEventRecord");
    Run(I % Problem.sets());
    D.check(D.cuEventRecord(E1, nullptr), "cuEventRecord");
    D.check(D.cuEventSynchronize(E1), "cuEventSynchronize");
    float Ms = 0;
    D.check(D.cuEventElapsedTime(&Ms, E0, E1), "cuEventElapsedTime");
    Times.push_back(Ms);
  }
  D.cuEventDestroy(E0);
  D.cuEventDestroy(E1);
  std::sort(Times.begin(), Times.end());
  double Median = Times[Times.size() / 2];

  // What ran: the backend, and for the generated one the skeleton, the
  // configuration and where it came from.
  std::string What = Att.lastBackend();
  if (What == "generated")
    What += " " + Att.forwardChoiceFor(TS).str();
  bool Masked = C.Graph->decls().HasMask;
  double Flops = runtime::forwardFlops(C, TS, S.HeadDim, S.HeadDimV);
  OS << fmt::format("{} {} b{} h{} s{} d{}/{} {} {}: {}: {:.3f} ms  {:.1f} "
                    "TFLOPS\n",
                    ProblemArgs.Name.getValue(), std::string(dtypeName(Sig.Dtype)), S.Batch,
                    S.Heads, S.Seq, S.HeadDim, S.HeadDimV,
                    std::string(layoutName(Sig.TensorLayout)), Masked ? "masked" : "full", What,
                    Median, Flops / (Median * 1e-3) / 1e12);
  bench::recordBenchRow({"fwd", "attnc", ProblemArgs.Name.getValue(),
                         std::string(dtypeName(Sig.Dtype)),
                         Masked ? "masked" : "full", What, S.Batch, S.Heads,
                         S.Seq, S.HeadDim, S.HeadDimV, Median,
                         Flops / (Median * 1e-3) / 1e12});
  return 0;
}

std::vector<int64_t> BenchCommand::packedLengths(const ShapeArg &S) const {
  std::vector<int64_t> Lengths;
  int64_t Sum = 0;
  for (llvm::StringRef L : llvm::split(llvm::StringRef(Seqlens), ',')) {
    int64_t N = 0;
    if (L.trim().getAsInteger(10, N) || N < 0 || N > S.Batch * S.Seq)
      throw UsageError("--seqlens '" + Seqlens + "': '" + L.str() +
                       "' is not a sequence length (an integer from 0)");
    Lengths.push_back(N);
    Sum += N;
  }
  if (Sum != S.Batch * S.Seq)
    throw UsageError(fmt::format(
        "--seqlens: the lengths add up to {} tokens; expected B*S = {} of "
        "--shape, the dense batch timed beside the packed one",
        Sum, S.Batch * S.Seq));
  return Lengths;
}

int BenchCommand::runLinear(const dsl::DefinitionBase &Def,
                            const ShapeArg &S, llvm::raw_ostream &OS) {
  if (!Backend.empty())
    throw UsageError("--backend '" + Backend + "': '" + ProblemArgs.Name +
                     "' is linear attention, which has the generated "
                     "kernels only");
  LinearCommandArgs A =
      linearCommandArgs(S, ProblemArgs.QkHeads, ProblemArgs.Dtype,
                        ProblemArgs.LayoutOpt, Skeleton, Config, ProblemArgs.Arch);
  A.Sig.TuneFile = TuneFile;
  std::vector<int64_t> Lengths;
  if (!Seqlens.empty())
    Lengths = packedLengths(S);
  runtime::CudaDriver::get().require();

  runtime::LinearAttention Lin(Def, A.Sig);
  runtime::LinearProblem P(Lin.definition(), A.Sig, A.Shape, /*Sets=*/3,
                           /*Seed=*/7);
  // The skeleton and configuration, and where they came from (named, a
  // tune-file entry for this device and bucket, or the default).
  runtime::KernelChoice Choice = Lin.choiceFor(A.Shape);
  double FwdMs = runtime::medianEventMs(
      [&](int I) { P.forward(Lin, I % P.sets()); }, Warmup, Repeats);
  double BwdMs = runtime::medianEventMs(
      [&](int I) { P.backward(Lin, I % P.sets()); }, Warmup, Repeats);
  if (Lengths.empty()) {
    OS << fmt::format("{} {} {} d{}/{} {}: {}: fwd {:.3f} ms  {:.0f} GB/s  "
                      "bwd {:.3f} ms  {:.0f} GB/s\n",
                      ProblemArgs.Name.getValue(), std::string(dtypeName(A.Sig.Dtype)),
                      runtime::linearShapeText(A.Shape), S.HeadDim, S.HeadDimV,
                      std::string(layoutName(A.Sig.TensorLayout)), Choice.str(), FwdMs,
                      P.forwardBytes() / FwdMs / 1e6, BwdMs,
                      P.backwardBytes() / BwdMs / 1e6);
    for (bool Bwd : {false, true}) {
      double Ms = Bwd ? BwdMs : FwdMs;
      bench::BenchRow Row{Bwd ? "linear_bwd" : "linear_fwd", "attnc",
                          ProblemArgs.Name.getValue(),
                          std::string(dtypeName(A.Sig.Dtype)), "none",
                          Choice.str(), A.Shape.Batch, A.Shape.Heads,
                          A.Shape.Seq, S.HeadDim, S.HeadDimV, Ms, 0};
      Row.Gbps = (Bwd ? P.backwardBytes() : P.forwardBytes()) / Ms / 1e6;
      bench::recordBenchRow(Row);
    }
    return 0;
  }
  // The same tokens packed: the configuration the packed calls take is the
  // one for their sequences at the mean length.
  P.setPacked(Lengths);
  const int64_t Seqs = int64_t(Lengths.size());
  runtime::LinearShape PackedShape{
      Seqs, A.Shape.Heads, A.Shape.HeadsQK,
      std::max<int64_t>(1, A.Shape.Batch * A.Shape.Seq / Seqs)};
  runtime::KernelChoice PackedChoice = Lin.choiceFor(PackedShape);
  double PackedFwdMs = runtime::medianEventMs(
      [&](int I) { P.forwardPacked(Lin, I % P.sets()); }, Warmup, Repeats);
  double PackedBwdMs = runtime::medianEventMs(
      [&](int I) { P.backwardPacked(Lin, I % P.sets()); }, Warmup, Repeats);
  OS << fmt::format("{} {} packed {} sequences t{} h{}/{} d{}/{}: {}: fwd "
                    "{:.3f} ms  bwd {:.3f} ms; dense {} {}: {}: fwd {:.3f} ms  "
                    "bwd {:.3f} ms; packed/dense throughput fwd {:.2f}x  bwd "
                    "{:.2f}x\n",
                    ProblemArgs.Name.getValue(), std::string(dtypeName(A.Sig.Dtype)),
                    Seqs, A.Shape.Batch * A.Shape.Seq, A.Shape.Heads,
                    A.Shape.HeadsQK, S.HeadDim, S.HeadDimV, PackedChoice.str(),
                    PackedFwdMs, PackedBwdMs, runtime::linearShapeText(A.Shape),
                    std::string(layoutName(A.Sig.TensorLayout)), Choice.str(), FwdMs,
                    BwdMs, FwdMs / PackedFwdMs, BwdMs / PackedBwdMs);
  return 0;
}

} // namespace

std::unique_ptr<Command> makeBenchCommand() {
  return std::make_unique<BenchCommand>();
}

} // namespace attn
