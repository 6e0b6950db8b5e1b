// attnc bench: time one definition's forward (and, for linear attention,
// backward) at one shape on this machine's GPU, with the configuration a
// tune file, --config or the default gives.
#include "Commands.h"
#include "LinearCommands.h"

#include "attn/runtime/Attention.h"
#include "attn/runtime/ConfigSelect.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/EventTiming.h"
#include "attn/runtime/LinearProblem.h"
#include "attn/runtime/LinearTuner.h"
#include "attn/runtime/RandomProblem.h"
#include "attn/runtime/TuneFile.h"
#include "attn/runtime/Tuner.h"

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

  ProblemOptions ProblemArgs{Sub};
  CallOpt<std::string> TuneFile{
      "tune-file", cl::desc("Use the tuned configuration from this file"),
      cl::value_desc("tune.json"), cl::init(""), cl::sub(Sub)};
  CallOpt<std::string> Config{"config",
                              cl::desc("Tile configuration, e.g. m128n64w4s2 "
                                       "or, for linear attention, c64v64w4b8 "
                                       "(wins over --tune-file)"),
                              cl::init(""), cl::sub(Sub)};
  CallOpt<std::string> Backend{"backend",
                               cl::desc("generated or reference (default: automatic)"),
                               cl::init(""), cl::sub(Sub)};
  CallOpt<int> Warmup{"warmup", cl::desc("Untimed calls first"), cl::init(5),
                      cl::sub(Sub)};
  CallOpt<int> Repeats{"repeats",
                       cl::desc("Timed calls (the median is printed)"),
                       cl::init(30), cl::sub(Sub)};
};

int BenchCommand::run(const dsl::Registry &Registry, llvm::raw_ostream &OS) {
  if (ProblemArgs.Shape.empty())
    throw UsageError("bench: --shape B,H,S,D[,DV] is required");
  rejectEmptyValue(ProblemArgs.Arch, "sm_80, sm_86, sm_89 or sm_90a");
  rejectEmptyValue(Config, "a tile configuration such as m128n64w4s2");
  rejectEmptyValue(TuneFile, "a tune file");
  ShapeArg S = parseShapeArg(ProblemArgs.Shape);
  runtime::Signature Sig;
  Sig.Dtype = parseDtypeArg(ProblemArgs.Dtype);
  Sig.TensorLayout = parseLayoutArg(ProblemArgs.LayoutOpt);
  Sig.HeadDim = S.HeadDim;
  Sig.HeadDimV = S.HeadDimV;
  Sig.Config = Config;
  Sig.TuneFile = TuneFile;
  Sig.Backend = Backend;
  Sig.Arch = ProblemArgs.Arch;
  if (!Backend.empty() && Backend != "generated" && Backend != "reference")
    throw UsageError("--backend '" + Backend +
                     "': expected generated or reference");
  // The reference kernel has no tiles: a --config would be ignored.
  if (Backend == "reference" && !Config.empty())
    throw UsageError("--config " + Config +
                     ": the reference backend takes no configuration");
  if (Warmup < 0 || Repeats < 1)
    throw UsageError("--warmup must be >= 0 and --repeats >= 1");

  const dsl::DefinitionBase &Def = Registry.get(ProblemArgs.Name);
  if (Def.kind() == ir::DefinitionKind::Linear)
    return runLinear(Def, S, OS);
  if (ProblemArgs.QkHeads != 0)
    throw UsageError("--qk-heads: '" + ProblemArgs.Name +
                     "' is not linear attention (it has no q/k head groups)");
  // A malformed --config is refused before the GPU is asked for; "sm80" and
  // "sm90" name a skeleton, its configuration the default or tuned one.
  if (!Config.empty() && Config != "sm80" && Config != "sm90")
    parseOptionValue([&] {
      if (codegen::Sm90Config::names(Config))
        (void)codegen::Sm90Config::parse(Config);
      else
        (void)codegen::FwdConfig::parse(Config);
    });
  runtime::CudaDriver &D = runtime::CudaDriver::get();
  D.require();
  std::string KernelArch = ProblemArgs.Arch.empty() ? runtime::currentDevice().arch()
                                                    : ProblemArgs.Arch.getValue();

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

  // What ran: the backend, and for the generated one the configuration and
  // where it came from.
  std::string What = Att.lastBackend();
  if (What == "generated") {
    runtime::BackendProblem P{C, Sig, KernelArch, Call.Shape};
    std::string Cfg = runtime::selectForwardConfig(P);
    std::string From = "default";
    if (!Sig.Config.empty())
      From = "--config";
    else if (!Sig.TuneFile.empty() &&
             runtime::cachedTuneFile(Sig.TuneFile)
                 ->find(runtime::makeTuneKey(C, Sig, KernelArch, TS,
                                             runtime::currentDevice().Name)))
      From = "tuned";
    What += fmt::format(" {} ({})", Cfg, From);
  }
  bool Masked = C.Graph->decls().HasMask;
  double Flops = runtime::forwardFlops(C, TS, S.HeadDim, S.HeadDimV);
  OS << fmt::format("{} {} b{} h{} s{} d{}/{} {} {}: {}: {:.3f} ms  {:.1f} "
                    "TFLOPS\n",
                    ProblemArgs.Name.getValue(), dtypeName(Sig.Dtype).str(), S.Batch,
                    S.Heads, S.Seq, S.HeadDim, S.HeadDimV,
                    layoutName(Sig.TensorLayout).str(), Masked ? "masked" : "full", What,
                    Median, Flops / (Median * 1e-3) / 1e12);
  return 0;
}

int BenchCommand::runLinear(const dsl::DefinitionBase &Def,
                            const ShapeArg &S, llvm::raw_ostream &OS) {
  if (!Backend.empty())
    throw UsageError("--backend '" + Backend + "': '" + ProblemArgs.Name +
                     "' is linear attention, which has the generated "
                     "kernels only");
  LinearCommandArgs A =
      linearCommandArgs(S, ProblemArgs.QkHeads, ProblemArgs.Dtype, ProblemArgs.LayoutOpt,
                        Config, ProblemArgs.Arch);
  A.Sig.TuneFile = TuneFile;
  runtime::CudaDriver::get().require();

  runtime::LinearAttention Lin(Def, A.Sig);
  runtime::LinearProblem P(Lin.definition(), A.Sig, A.Shape, /*Sets=*/3,
                           /*Seed=*/7);
  // Where the configuration came from: --config, a tune-file entry for this
  // device and bucket, or the default.
  codegen::LinearConfig Cfg = Lin.configFor(A.Shape);
  std::string From = "default";
  if (!A.Sig.Config.empty())
    From = "--config";
  else if (!A.Sig.TuneFile.empty() &&
           runtime::cachedTuneFile(A.Sig.TuneFile)
               ->find(runtime::makeLinearTuneKey(
                   Lin.definition(), A.Sig, Lin.spec().Arch, A.Shape,
                   runtime::currentDevice().Name)))
    From = "tuned";
  double FwdMs = runtime::medianEventMs(
      [&](int I) { P.forward(Lin, I % P.sets()); }, Warmup, Repeats);
  double BwdMs = runtime::medianEventMs(
      [&](int I) { P.backward(Lin, I % P.sets()); }, Warmup, Repeats);
  OS << fmt::format("{} {} {} d{}/{} {}: {} ({}): fwd {:.3f} ms  {:.0f} GB/s  "
                    "bwd {:.3f} ms  {:.0f} GB/s\n",
                    ProblemArgs.Name.getValue(), dtypeName(A.Sig.Dtype).str(),
                    runtime::linearShapeText(A.Shape), S.HeadDim, S.HeadDimV,
                    layoutName(A.Sig.TensorLayout).str(), Cfg.str(), From, FwdMs,
                    P.forwardBytes() / FwdMs / 1e6, BwdMs,
                    P.backwardBytes() / BwdMs / 1e6);
  return 0;
}

} // namespace

std::unique_ptr<Command> makeBenchCommand() {
  return std::make_unique<BenchCommand>();
}

} // namespace attn
