// attnc bundle: kernels of signatures compiled ahead of time into one
// bundle file, for programs deployed without NVRTC; and what a bundle holds.
#include "Commands.h"

#include "attn/Pipeline.h"
#include "attn/codegen/Arch.h"
#include "attn/runtime/Attention.h"
#include "attn/runtime/Bundle.h"
#include "attn/runtime/LinearAttention.h"
#include "attn/runtime/TuneFile.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"

#include <fmt/format.h>

#include <set>

namespace attn {

namespace cl = llvm::cl;

namespace {

class BundleCommand final : public Command {
public:
  BundleCommand()
      : Command("bundle",
                "bundle NAME... --arch A,.. [--dtype ..] [--head-dim ..] "
                "[--directions ..] [--tune F.json] -o FILE | bundle --show "
                "FILE",
                "Compile the kernels of signatures ahead of time into one "
                "bundle file") {}
  int run(const dsl::Registry &Registry, llvm::raw_ostream &OS) override;

private:
  int show(llvm::raw_ostream &OS);
  runtime::PrecompileSet directions() const;
  std::vector<runtime::PrecompiledKernel>
  tunedKernels(const dsl::DefinitionBase &Def, const std::string &Variant,
               DType Dt, int D, int DV, Layout L,
               const std::vector<GpuArch> &ArchList,
               const runtime::PrecompileSet &What) const;

  CallList<std::string> Names{cl::Positional, cl::desc("<definition>..."),
                              cl::ZeroOrMore, cl::sub(Sub)};
  CallList<std::string> Archs{
      "arch", cl::desc("Archs to compile for: sm_80, sm_86, sm_89, sm_90a"),
      cl::CommaSeparated, cl::sub(Sub)};
  CallList<std::string> Dtypes{"dtype", cl::desc("f16, bf16 (default f16)"),
                               cl::CommaSeparated, cl::sub(Sub)};
  CallList<int> HeadDims{"head-dim",
                         cl::desc("Head dims D of q and k (default 128)"),
                         cl::CommaSeparated, cl::sub(Sub)};
  CallOpt<int> HeadDimV{"head-dim-v",
                        cl::desc("Head dim of v (default: each --head-dim)"),
                        cl::init(0), cl::sub(Sub)};
  CallList<std::string> Layouts{
      "layout", cl::desc("bshd, bhsd, thd (default bshd)"), cl::CommaSeparated,
      cl::sub(Sub)};
  CallList<std::string> Directions{
      "directions",
      cl::desc("forward, backward, decode (default forward); decode is "
               "paged decode, append and merge (linear: the decode step)"),
      cl::CommaSeparated, cl::sub(Sub)};
  CallOpt<std::string> Output{"o", cl::desc("The bundle file to write"),
                              cl::value_desc("file"), cl::init(""),
                              cl::sub(Sub)};
  CallOpt<std::string> Tune{
      "tune",
      cl::desc("Also bundle the configurations a tune file (attnc tune) "
               "holds for these signatures, so that a program without NVRTC "
               "runs its tuned kernels"),
      cl::value_desc("file"), cl::init(""), cl::sub(Sub)};
  CallOpt<std::string> Show{"show", cl::desc("List the kernels of a bundle"),
                            cl::value_desc("file"), cl::init(""),
                            cl::sub(Sub)};
};

runtime::PrecompileSet BundleCommand::directions() const {
  if (Directions.empty())
    return {};
  runtime::PrecompileSet S;
  S.Forward = false;
  for (const std::string &D : Directions) {
    if (D == "forward")
      S.Forward = true;
    else if (D == "backward")
      S.Backward = true;
    else if (D == "decode")
      S.Decode = true;
    else
      throw UsageError("--directions '" + D +
                       "': expected forward, backward or decode");
  }
  return S;
}

/// The kernels of every configuration the tune file holds for one signature
/// (its definition's current variant, dtype and head dims, on one of the
/// bundle's archs): the forward's (linear attention: the directions asked
/// for, which share the configuration). Entries of any device and toolchain
/// are taken: the deployed machine applies those that are its own.
std::vector<runtime::PrecompiledKernel> BundleCommand::tunedKernels(
    const dsl::DefinitionBase &Def, const std::string &Variant, DType Dt,
    int D, int DV, Layout L, const std::vector<GpuArch> &ArchList,
    const runtime::PrecompileSet &What) const {
  bool Linear = Def.kind() == ir::DefinitionKind::Linear;
  if (!Linear && !What.Forward)
    return {};
  std::shared_ptr<const runtime::TuneFileData> Data =
      runtime::cachedTuneFile(Tune);
  std::set<std::pair<GpuArch, std::string>> Seen;
  std::vector<runtime::PrecompiledKernel> Out;
  for (const runtime::TuneEntry &E : Data->Entries) {
    const runtime::TuneKey &K = E.Key;
    std::optional<GpuArch> A = archFromName(K.Arch);
    if (K.Variant != Variant || K.Dtype != Dt || K.HeadDim != D ||
        K.HeadDimV != DV || !A ||
        llvm::find(ArchList, *A) == ArchList.end() ||
        !Seen.insert({*A, E.Best.Config}).second)
      continue;
    std::vector<runtime::PrecompiledKernel> Kernels;
    if (Linear) {
      runtime::LinearSignature S;
      S.Dtype = Dt;
      S.HeadDim = D;
      S.HeadDimV = DV;
      S.TensorLayout = L;
      S.Config = E.Best.Config;
      Kernels = runtime::precompileLinear(Def, S, What, {*A});
    } else {
      runtime::Signature S;
      S.Dtype = Dt;
      S.HeadDim = D;
      S.HeadDimV = DV;
      S.TensorLayout = L;
      S.Config = E.Best.Config;
      runtime::PrecompileSet Fwd;
      Kernels = runtime::precompileAttention(Def, S, Fwd, {*A});
    }
    Out.insert(Out.end(), Kernels.begin(), Kernels.end());
  }
  return Out;
}

int BundleCommand::show(llvm::raw_ostream &OS) {
  runtime::KernelBundle B = runtime::KernelBundle::read(Show);
  for (const runtime::BundleEntry *E : B.entries())
    OS << fmt::format("{:<7} nvrtc {:<6} {:>9} bytes  {}\n",
                      archName(E->Arch).str(), E->Nvrtc, E->Cubin->size(),
                      E->Key);
  OS << fmt::format("{}: {} kernels, {} bytes of CUBIN\n", Show.getValue(),
                    B.size(), B.cubinBytes());
  return 0;
}

int BundleCommand::run(const dsl::Registry &Registry, llvm::raw_ostream &OS) {
  if (!Show.empty()) {
    if (!Names.empty() || !Output.empty())
      throw UsageError("bundle --show FILE takes no definitions and no -o");
    return show(OS);
  }
  if (Names.empty())
    throw UsageError("bundle: no definition given; expected NAME... "
                     "(attnc list shows them)");
  if (Output.empty())
    throw UsageError("bundle: no output; expected -o FILE");
  if (Archs.empty())
    throw UsageError("bundle: no --arch; expected one or more of " +
                     archNamesText().str() + " (a bundle is for machines "
                     "other than this one, so there is no default)");
  std::vector<GpuArch> ArchList;
  for (const std::string &A : Archs)
    ArchList.push_back(
        parseOptionValue([&] { return parseArch(A, "--arch"); }));
  std::vector<DType> DtypeList;
  for (const std::string &D :
       Dtypes.empty() ? std::vector<std::string>{"f16"}
                      : std::vector<std::string>(Dtypes.begin(), Dtypes.end()))
    DtypeList.push_back(parseDtypeArg(D));
  std::vector<int> Dims = HeadDims.empty()
                              ? std::vector<int>{128}
                              : std::vector<int>(HeadDims.begin(),
                                                 HeadDims.end());
  std::vector<Layout> LayoutList;
  for (const std::string &L :
       Layouts.empty() ? std::vector<std::string>{"bshd"}
                       : std::vector<std::string>(Layouts.begin(),
                                                  Layouts.end())) {
    std::optional<Layout> Parsed = layoutFromName(L);
    if (!Parsed)
      throw UsageError("--layout '" + L + "': expected bshd, bhsd or thd");
    LayoutList.push_back(*Parsed);
  }
  runtime::PrecompileSet What = directions();

  if (!Tune.empty() && !llvm::sys::fs::exists(Tune.getValue()))
    throw UsageError("--tune '" + Tune.getValue() +
                     "': no such file (attnc tune writes one)");

  runtime::KernelBundle Bundle;
  for (const std::string &Name : Names) {
    const dsl::DefinitionBase &Def = Registry.get(Name);
    bool Linear = Def.kind() == ir::DefinitionKind::Linear;
    // The tune file's entries name the variant by its analysed IR's hash.
    std::string Variant =
        Tune.empty() ? std::string() : runtime::variantKey(compile(Def));
    for (DType Dt : DtypeList)
      for (int D : Dims)
        for (Layout L : LayoutList) {
          int DV = HeadDimV ? int(HeadDimV) : D;
          std::string Label = fmt::format(
              "{} {} d{}/{} {} ({})", Name, std::string(dtypeName(Dt)), D, DV,
              std::string(layoutName(L)),
              llvm::join(Archs.begin(), Archs.end(), ","));
          std::vector<runtime::PrecompiledKernel> Kernels;
          try {
            if (Linear) {
              runtime::LinearSignature S;
              S.Dtype = Dt;
              S.HeadDim = D;
              S.HeadDimV = DV;
              S.TensorLayout = L;
              Kernels = runtime::precompileLinear(Def, S, What, ArchList);
            } else {
              runtime::Signature S;
              S.Dtype = Dt;
              S.HeadDim = D;
              S.HeadDimV = DV;
              S.TensorLayout = L;
              Kernels = runtime::precompileAttention(Def, S, What, ArchList);
            }
          } catch (const Error &E) {
            // Which of the cross product failed, then why.
            throw UserError("bundle: " + Label + ": " + E.what());
          }
          size_t Tuned = 0;
          if (!Tune.empty()) {
            std::vector<runtime::PrecompiledKernel> FromTune;
            try {
              FromTune =
                  tunedKernels(Def, Variant, Dt, D, DV, L, ArchList, What);
            } catch (const Error &E) {
              throw UserError("bundle: " + Label + ": a configuration of " +
                              Tune.getValue() + ": " + E.what());
            }
            // The default's kernels (and the short-query decode kernel) may
            // be among them: count and add only the new ones.
            std::set<std::string> Have;
            for (const runtime::PrecompiledKernel &K : Kernels)
              Have.insert(K.Source.Key);
            for (runtime::PrecompiledKernel &K : FromTune)
              if (Have.insert(K.Source.Key).second) {
                Kernels.push_back(std::move(K));
                ++Tuned;
              }
          }
          size_t Compiled = 0;
          for (const runtime::PrecompiledKernel &K : Kernels)
            Compiled += K.From == "compiled";
          OS << fmt::format("{}: {} kernels ({} compiled now", Label,
                            Kernels.size(), Compiled);
          if (!Tune.empty())
            OS << fmt::format("; {} of tuned configurations", Tuned);
          OS << ")\n";
          Bundle.add(Kernels);
        }
  }
  Bundle.write(Output);
  OS << fmt::format("wrote {}: {} kernels, {} bytes of CUBIN\n",
                    Output.getValue(), Bundle.size(), Bundle.cubinBytes());
  return 0;
}

} // namespace

std::unique_ptr<Command> makeBundleCommand() {
  return std::make_unique<BundleCommand>();
}

} // namespace attn
