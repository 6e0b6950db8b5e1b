// attnc bundle: kernels of signatures compiled ahead of time into one
// bundle file, for programs deployed without NVRTC; and what a bundle holds.
#include "Commands.h"

#include "attn/Pipeline.h"
#include "attn/codegen/Arch.h"
#include "attn/runtime/Attention.h"
#include "attn/runtime/Bundle.h"
#include "attn/runtime/LinearAttention.h"

#include "llvm/ADT/StringExtras.h"

#include <fmt/format.h>

namespace attn {

namespace cl = llvm::cl;

namespace {

class BundleCommand final : public Command {
public:
  BundleCommand()
      : Command("bundle",
                "bundle NAME... --arch A,.. [--dtype ..] [--head-dim ..] "
                "[--directions ..] -o FILE | bundle --show FILE",
                "Compile the kernels of signatures ahead of time into one "
                "bundle file") {}
  int run(const dsl::Registry &Registry, llvm::raw_ostream &OS) override;

private:
  int show(llvm::raw_ostream &OS);
  runtime::PrecompileSet directions() const;

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

  runtime::KernelBundle Bundle;
  for (const std::string &Name : Names) {
    const dsl::DefinitionBase &Def = Registry.get(Name);
    bool Linear = Def.kind() == ir::DefinitionKind::Linear;
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
          size_t Compiled = 0;
          for (const runtime::PrecompiledKernel &K : Kernels)
            Compiled += K.From == "compiled";
          OS << fmt::format("{}: {} kernels ({} compiled now)\n", Label,
                            Kernels.size(), Compiled);
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
