// Option parsing shared by the subcommands in their own files.
#include "Commands.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

namespace attn {

Command::Command(llvm::StringRef Name, llvm::StringRef Usage,
                 llvm::StringRef Description)
    : Sub(Name, Description), Usage(Usage) {}

Command::~Command() = default;

namespace cl = llvm::cl;

ProblemOptions::ProblemOptions(cl::SubCommand &Sub)
    : Name(cl::Positional, cl::desc("<definition>"), cl::Required, cl::sub(Sub)),
      Shape("shape", cl::desc("B,H,S,D[,DV]: batch, heads, sequence length, head dims"),
            cl::value_desc("B,H,S,D[,DV]"), cl::init(""), cl::sub(Sub)),
      QkHeads("qk-heads",
              cl::desc("Linear attention: q/k heads, a divisor of H (default H)"),
              cl::value_desc("N"), cl::init(0), cl::sub(Sub)),
      Dtype("dtype", cl::desc("f16 or bf16"), cl::init("f16"), cl::sub(Sub)),
      LayoutOpt("layout", cl::desc("bshd or bhsd"), cl::init("bshd"), cl::sub(Sub)),
      Arch("arch", cl::desc("Kernel arch (default: the GPU's)"), cl::init(""),
           cl::sub(Sub)) {}

ShapeArg parseShapeArg(const std::string &Text) {
  llvm::SmallVector<llvm::StringRef, 5> Parts;
  llvm::StringRef(Text).split(Parts, ',');
  auto Bad = [&](const std::string &Why) {
    return UsageError("--shape '" + Text + "': " + Why +
                      "; expected B,H,S,D or B,H,S,D,DV (e.g. 4,32,4096,128)");
  };
  if (Parts.size() != 4 && Parts.size() != 5)
    throw Bad("expected 4 or 5 numbers");
  int64_t V[5] = {0, 0, 0, 0, 0};
  for (size_t I = 0; I < Parts.size(); ++I)
    if (Parts[I].trim().getAsInteger(10, V[I]) || V[I] < 1)
      throw Bad("'" + Parts[I].str() + "' is not a positive integer");
  ShapeArg S;
  S.Batch = V[0];
  S.Heads = V[1];
  S.Seq = V[2];
  if (V[3] > 1024 || (Parts.size() == 5 && V[4] > 1024))
    throw Bad("head dims are at most 1024");
  S.HeadDim = int(V[3]);
  S.HeadDimV = Parts.size() == 5 ? int(V[4]) : S.HeadDim;
  return S;
}

void rejectEmptyValue(const cl::opt<std::string> &Opt,
                      llvm::StringRef Expected) {
  if (Opt.getNumOccurrences() == 0 || !Opt.getValue().empty())
    return;
  std::string Name = (Opt.ArgStr.size() == 1 ? "-" : "--") + Opt.ArgStr.str();
  throw UsageError(Name + ": empty value; expected " + Expected.str() +
                   " (leave " + Name + " out for its default)");
}

DType parseDtypeArg(const std::string &Text) {
  std::optional<DType> T = dtypeFromName(Text);
  if (T && isAttentionDtype(*T))
    return *T;
  throw UsageError("--dtype '" + Text + "': expected f16 or bf16");
}

Layout parseLayoutArg(const std::string &Text) {
  // thd (packed variable-length batches) needs cu_seqlens, which only the
  // C++ API's VarlenBatch passes.
  std::optional<Layout> L = layoutFromName(Text);
  if (L && *L != Layout::THD)
    return *L;
  throw UsageError("--layout '" + Text + "': expected bshd or bhsd");
}

} // namespace attn
