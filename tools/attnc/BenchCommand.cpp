// attnc bench: time one definition's forward (and, for linear attention,
// backward, dense or packed) at one shape on this machine's GPU, with the
// configuration a tune file, --config or the default gives; decode shapes
// (--kv-len, --kv-heads) contiguous or over a paged cache (--page-size);
// with $ATTNC_BENCH_JSON set, each timed dense row is also appended there
// as a JSON line (BenchJson.h).
#include "BenchJson.h"
#include "Commands.h"
#include "KernelChoice.h"
#include "LinearCommands.h"

#include "attn/codegen/Arch.h"
#include "attn/codegen/DecodeCodegen.h"
#include "attn/runtime/Attention.h"
#include "attn/runtime/Selector.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/EventTiming.h"
#include "attn/runtime/LinearProblem.h"
#include "attn/runtime/LinearTuner.h"
#include "attn/runtime/Paged.h"
#include "attn/runtime/RandomProblem.h"
#include "attn/runtime/TuneFile.h"
#include "attn/runtime/Tuner.h"

#include "llvm/ADT/StringExtras.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>

namespace attn {

namespace cl = llvm::cl;

namespace {

class BenchCommand final : public Command {
public:
  BenchCommand()
      : Command("bench", "bench NAME --shape B,H,S,D",
                "Time a forward kernel or a decode (--kv-len, --page-size) on "
                "this GPU (linear attention: forward and backward, or "
                "--decode-step)") {}
  int run(const dsl::Registry &Registry, llvm::raw_ostream &OS) override;

private:
  int runLinear(const dsl::DefinitionBase &Def, const ShapeArg &S,
                llvm::raw_ostream &OS);
  /// --decode-step: LinearAttention::decodeStep on states in place, against
  /// a device copy of the same state bytes.
  int runLinearStep(const dsl::DefinitionBase &Def, const LinearCommandArgs &A,
                    llvm::raw_ostream &OS);
  /// --seqlens: the lengths, checked to add up to B·S of \p S.
  std::vector<int64_t> packedLengths(const ShapeArg &S) const;
  /// The call's shape: --shape's, with --kv-len keys and --kv-heads K/V
  /// heads where given; UsageError for values that cannot make one.
  runtime::TuneShape attentionShape(const ShapeArg &S) const;
  /// --page-size: the paged decode of \p TS over pages of --page-size
  /// tokens viewed over the random k, v of \p Problem (a shuffled block
  /// table), timed as the contiguous call is.
  double timePaged(runtime::Attention &Att, const runtime::RandomProblem &Problem,
                   const runtime::TuneShape &TS, int &Splits);

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
  CallOpt<int> KvLen{
      "kv-len",
      cl::desc("Keys per sequence (default: S of --shape); with S at most 16 "
               "queries the call is a decode"),
      cl::value_desc("N"), cl::init(0), cl::sub(Sub)};
  CallOpt<int> KvHeads{"kv-heads",
                           cl::desc("Key/value heads (default: H; H a multiple "
                                    "of it: grouped-query attention)"),
                           cl::value_desc("N"), cl::init(0), cl::sub(Sub)};
  CallOpt<int> PageSize{
      "page-size",
      cl::desc("Time paged decode (a plan's runDecode) over pages of this many "
               "tokens, a power of two, instead of contiguous k and v"),
      cl::value_desc("P"), cl::init(0), cl::sub(Sub)};
  CallOpt<bool> DecodeStep{
      "decode-step",
      cl::desc("Linear attention: time the recurrent decode step instead (S of "
               "--shape new tokens, 1 to 16, for each of B sequences; states "
               "updated in place)"),
      cl::init(false), cl::sub(Sub)};
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
  if (Def.kind() == ir::DefinitionKind::Linear) {
    for (const auto &[Name, Set] : {std::pair<const char *, bool>{"--kv-len", KvLen != 0},
                                    {"--kv-heads", KvHeads != 0},
                                    {"--page-size", PageSize != 0}})
      if (Set)
        throw UsageError(fmt::format("{}: '{}' is linear attention (its keys are its "
                                     "tokens; --qk-heads groups its q/k heads)",
                                     Name, ProblemArgs.Name.getValue()));
    return runLinear(Def, S, OS);
  }
  if (!Seqlens.empty())
    throw UsageError("--seqlens: '" + ProblemArgs.Name +
                     "' is not linear attention (packed batches are timed "
                     "for linear definitions)");
  if (DecodeStep)
    throw UsageError("--decode-step: '" + ProblemArgs.Name +
                     "' is not linear attention; its decode is timed with 1 "
                     "to 16 queries (S of --shape) and --kv-len keys");
  if (ProblemArgs.QkHeads != 0)
    throw UsageError("--qk-heads: '" + ProblemArgs.Name +
                     "' is not linear attention (it has no q/k head groups)");
  const runtime::TuneShape TS = attentionShape(S);
  const bool Decode = TS.SeqQ <= codegen::DecodeMaxQueries;
  if (PageSize != 0) {
    if (!Decode)
      throw UsageError(fmt::format(
          "--page-size times paged decode: 1 to {} queries a sequence; --shape "
          "has S = {}",
          codegen::DecodeMaxQueries, TS.SeqQ));
    if (Sig.TensorLayout != Layout::BSHD)
      throw UsageError("--page-size: the pages are views of k's and v's memory "
                       "in the bshd layout; --layout is bhsd");
    if (Backend == "reference")
      throw UsageError("--page-size: paged decode runs on the generated "
                       "backend; --backend is reference");
    if (TS.SeqKv % PageSize != 0)
      throw UsageError(fmt::format("--page-size {}: the {} keys of a sequence "
                                   "(--kv-len) are not a whole number of pages",
                                   int(PageSize), TS.SeqKv));
  }
  // Names are judged before any GPU work.
  runtime::KernelPolicy Policy = policyFromOptions(
      runtime::kernelTarget(compile(Def), Sig, Sig.Arch.value_or(GpuArch::Sm80),
                            runtime::Direction::Forward),
      Skeleton, Config);
  // Paged decode runs decode_sm80 (with a named configuration of it): any
  // other skeleton named would be shown and not run.
  const runtime::Skeleton *Named = Policy.Named ? Policy.Named : Policy.ConfigOf;
  if (PageSize != 0 && Named && !Named->isDecode())
    throw UsageError("--page-size: paged decode runs decode_sm80; --skeleton or "
                     "--config names " +
                     Named->name().str());
  runtime::CudaDriver &D = runtime::CudaDriver::get();
  D.require();

  runtime::Attention Att(Def, Sig);
  const CompiledDefinition &C = Att.definition();
  // At least three sets, more until a call's q, k and v over all of them
  // make 256 MiB: a decode call reads little, and repeated over one set it
  // would read the 50 MB L2, not the memory.
  const double SetBytes =
      2.0 * double(TS.Batch) *
      (double(TS.SeqQ) * TS.Heads * S.HeadDim +
       double(TS.SeqKv) * TS.HeadsKv * (S.HeadDim + S.HeadDimV));
  const int Sets = int(std::clamp(std::ceil(double(256 << 20) / SetBytes), 3.0, 64.0));
  runtime::RandomProblem Problem(C, Sig, TS, Sets, /*Seed=*/7);
  runtime::RandomProblem::Call Call = Problem.call();
  int Splits = 0;
  double Median = 0;
  if (PageSize != 0) {
    Median = timePaged(Att, Problem, TS, Splits);
  } else {
    Median = runtime::medianEventMs(
        [&](int I) {
          const int Set = I % Problem.sets();
          Att.forward(Call.Q[Set], Call.K[Set], Call.V[Set], Call.Out, Call.finals(),
                      Call.Inputs);
        },
        Warmup, Repeats);
  }

  // What ran: the backend, and for the generated one the skeleton, the
  // configuration and where it came from.
  std::string What = PageSize != 0 ? std::string("generated") : Att.lastBackend();
  if (What == "generated")
    What += " " + (PageSize != 0 ? Att.pagedDecodeChoice(PageSize) : Att.callChoiceFor(TS)).str();
  bool Masked = C.Graph->decls().HasMask;
  const std::string Name = ProblemArgs.Name.getValue();
  const std::string Dt(dtypeName(Sig.Dtype));
  if (!Decode) {
    double Flops = runtime::forwardFlops(C, TS, S.HeadDim, S.HeadDimV);
    std::string Keys = TS.SeqKv == TS.SeqQ ? "" : fmt::format("x{}", TS.SeqKv);
    std::string KvH = TS.HeadsKv == TS.Heads ? "" : fmt::format("/{}", TS.HeadsKv);
    OS << fmt::format("{} {} b{} h{}{} s{}{} d{}/{} {} {}: {}: {:.3f} ms  {:.1f} "
                      "TFLOPS\n",
                      Name, Dt, S.Batch, S.Heads, KvH, S.Seq, Keys, S.HeadDim, S.HeadDimV,
                      std::string(layoutName(Sig.TensorLayout)),
                      Masked ? "masked" : "full", What, Median,
                      Flops / (Median * 1e-3) / 1e12);
    bench::recordBenchRow({"fwd", "attnc", Name, Dt, Masked ? "masked" : "full", What,
                           S.Batch, S.Heads, S.Seq, S.HeadDim, S.HeadDimV, Median,
                           Flops / (Median * 1e-3) / 1e12});
    return 0;
  }
  // Decode: the bandwidth of reading every key and value once.
  const double KvBytes = 2.0 * double(TS.Batch) * double(TS.SeqKv) * double(TS.HeadsKv) *
                         double(S.HeadDim + S.HeadDimV);
  const double Gbps = KvBytes / (Median * 1e-3) / 1e9;
  std::string Source = PageSize != 0
                           ? fmt::format("paged {} (splits {})", int(PageSize), Splits)
                           : std::string("contiguous");
  OS << fmt::format("{} {} decode b{} h{}/{} q{} kv{} d{}/{} {} {}: {}: {:.4f} ms  "
                    "{:.0f} GB/s of K/V\n",
                    Name, Dt, TS.Batch, TS.Heads, TS.HeadsKv, TS.SeqQ, TS.SeqKv, S.HeadDim,
                    S.HeadDimV, Source, Masked ? "masked" : "full", What, Median, Gbps);
  if (Masked && PageSize == 0)
    OS << fmt::format("note: '{}' has a mask, and a dense call's queries are "
                      "positions 0 to {}: the mask keeps few of the keys, which "
                      "the GB/s counts all of; --page-size aligns the queries to "
                      "the end of the keys, as a serving engine's decode does\n",
                      Name, TS.SeqQ - 1);
  bench::BenchRow Row{"decode", "attnc", Name, Dt,
                      PageSize != 0 ? fmt::format("paged{}", int(PageSize))
                                    : std::string("contiguous"),
                      What, TS.Batch, TS.Heads, TS.SeqKv, S.HeadDim, S.HeadDimV, Median,
                      0};
  Row.Gbps = Gbps;
  bench::recordBenchRow(Row);
  return 0;
}

runtime::TuneShape BenchCommand::attentionShape(const ShapeArg &S) const {
  if (KvLen < 0)
    throw UsageError(fmt::format("--kv-len {}: expected a number of keys from 1",
                                 int(KvLen)));
  if (KvHeads < 0)
    throw UsageError(fmt::format("--kv-heads {}: expected a number of heads from 1",
                                 int(KvHeads)));
  if (PageSize < 0 || (PageSize & (PageSize - 1)) != 0)
    throw UsageError(fmt::format("--page-size {}: expected a power of two (1, 2, "
                                 "..., 16, ...)",
                                 int(PageSize)));
  runtime::TuneShape TS{S.Batch, S.Heads, S.Heads, S.Seq, S.Seq};
  if (KvLen > 0)
    TS.SeqKv = KvLen;
  if (KvHeads > 0) {
    if (S.Heads % KvHeads != 0)
      throw UsageError(fmt::format("--kv-heads {}: the {} query heads of --shape "
                                   "are not a multiple of it",
                                   int(KvHeads), S.Heads));
    TS.HeadsKv = KvHeads;
  }
  return TS;
}

double BenchCommand::timePaged(runtime::Attention &Att,
                               const runtime::RandomProblem &Problem,
                               const runtime::TuneShape &TS, int &Splits) {
  // The same bytes as the contiguous call's, read in no sequential order.
  const runtime::ShuffledPages Pages(TS.Batch, TS.SeqKv, PageSize);
  runtime::DecodePlan Plan = Att.planDecode(
      runtime::DecodeBounds{TS.Batch, TS.Heads, TS.HeadsKv, TS.SeqQ, TS.SeqKv, PageSize});
  Splits = Plan.Splits;
  runtime::DeviceAlloc Work(std::max<size_t>(16, Plan.WorkspaceBytes));
  runtime::RandomProblem::Call Call = Problem.call();
  return runtime::medianEventMs(
      [&](int I) {
        const int Set = I % Problem.sets();
        const runtime::PagedKV KV = Pages.view(Call.K[Set], Call.V[Set]);
        Att.runDecode(Plan, Call.Q[Set], KV, Call.Out, Call.finals(), Work.get(),
                      Work.size(), Call.Inputs);
      },
      Warmup, Repeats);
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
  if (DecodeStep && !Lengths.empty())
    throw UsageError("--decode-step times the step of B sequences of S new "
                     "tokens; --seqlens a packed forward and backward: one or "
                     "the other");
  if (DecodeStep && S.Seq > runtime::LinearDecodeMaxTokens)
    throw UsageError(fmt::format("--decode-step: 1 to {} new tokens a sequence; "
                                 "--shape has S = {}",
                                 runtime::LinearDecodeMaxTokens, S.Seq));
  runtime::CudaDriver::get().require();
  if (DecodeStep)
    return runLinearStep(Def, A, OS);

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

int BenchCommand::runLinearStep(const dsl::DefinitionBase &Def,
                                const LinearCommandArgs &A, llvm::raw_ostream &OS) {
  runtime::CudaDriver &D = runtime::CudaDriver::get();
  runtime::LinearAttention Lin(Def, A.Sig);
  runtime::LinearProblem P(Lin.definition(), A.Sig, A.Shape, /*Sets=*/1, /*Seed=*/7);
  const double StateBytes = P.decodeStateBytes();
  // State pools rotated until they make 256 MiB (the L2 cannot hold what a
  // step reads), each filled with random values: a block of normal(0, 1)
  // floats repeated.
  const int Pools = int(std::clamp(std::ceil(double(256 << 20) / StateBytes), 1.0, 64.0));
  std::vector<float> Block(size_t(1) << 20);
  std::mt19937_64 Rng(7);
  std::normal_distribution<float> Normal(0.f, 1.f);
  for (float &X : Block)
    X = Normal(Rng);
  std::vector<std::unique_ptr<runtime::DeviceAlloc>> States, Copies;
  for (int I = 0; I < Pools; ++I) {
    States.push_back(std::make_unique<runtime::DeviceAlloc>(size_t(StateBytes)));
    Copies.push_back(std::make_unique<runtime::DeviceAlloc>(size_t(StateBytes)));
    for (size_t Off = 0; Off < size_t(StateBytes); Off += Block.size() * 4)
      D.check(D.cuMemcpyHtoD(States.back()->ptr() + Off, Block.data(),
                             std::min(Block.size() * 4, size_t(StateBytes) - Off)),
              "cuMemcpyHtoD (states)");
  }
  const runtime::LinearShape &Sh = A.Shape;
  const int DHead = A.Sig.HeadDim, DVal = A.Sig.HeadDimV;
  double StepMs = runtime::medianEventMs(
      [&](int I) {
        P.decodeStep(Lin, 0,
                     runtime::TensorView::contiguous(States[I % Pools]->get(), DType::F32,
                                                     {Sh.Batch, Sh.Heads, DHead, DVal}));
      },
      Warmup, Repeats);
  double CopyMs = runtime::medianEventMs(
      [&](int I) {
        D.check(D.cuMemcpyDtoDAsync(Copies[I % Pools]->ptr(), States[I % Pools]->ptr(),
                                    size_t(StateBytes), nullptr),
                "cuMemcpyDtoDAsync");
      },
      Warmup, Repeats);
  const double Gbps = 2.0 * StateBytes / (StepMs * 1e-3) / 1e9;
  const double CopyGbps = 2.0 * StateBytes / (CopyMs * 1e-3) / 1e9;
  OS << fmt::format("{} {} decode step b{} h{}/{} n{} d{}/{}: {:.4f} ms  {:.0f} GB/s "
                    "of state (read + write); device copy {:.0f} GB/s, {:.2f} of it\n",
                    ProblemArgs.Name.getValue(), std::string(dtypeName(A.Sig.Dtype)),
                    Sh.Batch, Sh.Heads, Sh.HeadsQK, Sh.Seq, DHead, DVal, StepMs, Gbps,
                    CopyGbps, Gbps / CopyGbps);
  bench::BenchRow Row{"linear_decode", "attnc", ProblemArgs.Name.getValue(),
                      std::string(dtypeName(A.Sig.Dtype)), "none", "linear_decode",
                      Sh.Batch, Sh.Heads, Sh.Seq, DHead, DVal, StepMs, 0};
  Row.Gbps = Gbps;
  bench::recordBenchRow(Row);
  return 0;
}

} // namespace

std::unique_ptr<Command> makeBenchCommand() {
  return std::make_unique<BenchCommand>();
}

} // namespace attn
