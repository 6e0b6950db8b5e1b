// The sm80 forward kernel: its tile configuration, and the generated Inputs
// and Variant structs rendered into the fwd_sm80 template.
#include "attn/codegen/Codegen.h"

#include "attn/Error.h"
#include "attn/codegen/Template.h"
#include "attn/codegen/Templates.h"
#include "attn/codegen/VariantSource.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Casting.h"

#include <fmt/format.h>

#include <algorithm>

namespace attn::codegen {

using ir::ParamKind;

const char *attncVersion() { return ATTNC_VERSION; }

std::string FwdConfig::str() const {
  return fmt::format("m{}n{}w{}s{}", BlockM, BlockN, Warps, Stages);
}

FwdConfig FwdConfig::parse(const std::string &Text) {
  FwdConfig C;
  if (std::sscanf(Text.c_str(), "m%dn%dw%ds%d", &C.BlockM, &C.BlockN,
                  &C.Warps, &C.Stages) != 4 ||
      C.str() != Text)
    throw UserError("config '" + Text +
                    "': expected m<block M>n<block N>w<warps>s<stages>, "
                    "e.g. m64n64w4s2");
  return C;
}

int FwdConfig::sharedBytes(int D, int DV) const {
  return 2 * (BlockM * D + Stages * BlockN * (D + DV));
}

FwdConfig FwdConfig::defaultFor(int D, int DV, GpuArch Arch) {
  int Widest = std::max(D, DV);
  FwdConfig Wide{128, 64, 4, 2};
  if (Widest <= 64)
    return FwdConfig{128, 32, 4, 2};
  if (Widest <= 128 && Wide.sharedBytes(D, DV) <= archSharedLimit(Arch))
    return Wide;
  if (Widest <= 128)
    return FwdConfig{128, 32, 4, 2};
  return FwdConfig{64, 32, 4, 2};
}

std::vector<FwdConfig> FwdConfig::enumerate() {
  std::vector<FwdConfig> Space;
  for (int M : {64, 128, 256})
    for (int N : {32, 64, 128})
      for (int W : {4, 8})
        for (int S : {2, 3}) {
          FwdConfig C{M, N, W, S};
          if (C.structuralError().empty())
            Space.push_back(C);
        }
  return Space;
}

std::string FwdConfig::structuralError() const {
  if (Warps != 4 && Warps != 8)
    return fmt::format("config {}: warps must be 4 or 8", str());
  if (BlockM < 16 * Warps || BlockM % (16 * Warps) != 0 || BlockM > 256)
    return fmt::format(
        "config {}: block M must be a multiple of 16 x warps ({}), at most 256",
        str(), 16 * Warps);
  if (BlockN % 16 != 0 || BlockN < 16 || BlockN > 256)
    return fmt::format(
        "config {}: block N must be a multiple of 16 between 16 and 256",
        str());
  if (Stages < 2 || Stages > 4)
    return fmt::format("config {}: stages must be 2, 3 or 4", str());
  return "";
}

std::string forwardHeadDimError(const char *Skeleton, int D, int DV) {
  llvm::ArrayRef<std::pair<int, int>> Pairs(ForwardHeadDimPairs);
  if (llvm::is_contained(Pairs, std::pair{D, DV}))
    return "";
  // Name the field whose value no pair has; each field's accepted values
  // are listed from the table.
  for (bool First : {true, false}) {
    int V = First ? D : DV;
    std::vector<int> Accepted;
    for (auto [PD, PDV] : Pairs)
      if (int A = First ? PD : PDV; !llvm::is_contained(Accepted, A))
        Accepted.push_back(A);
    if (llvm::is_contained(Accepted, V))
      continue;
    std::string List;
    for (size_t I = 0; I < Accepted.size(); ++I)
      List += (I == 0 ? "" : I + 1 == Accepted.size() ? " or " : ", ") +
              std::to_string(Accepted[I]);
    return fmt::format("{} {} is not supported by {}; expected {}",
                       First ? "head_dim" : "head_dim_v", V, Skeleton, List);
  }
  return fmt::format("head dims {}/{} are not supported together by {}", D,
                     DV, Skeleton);
}

void KernelSpec::validate() const {
  if (std::string Why = forwardHeadDimError("fwd_sm80", HeadDim, HeadDimV);
      !Why.empty())
    throw UserError(Why);
  const FwdConfig &C = Config;
  if (std::string Why = C.structuralError(); !Why.empty())
    throw UserError(Why);
  int Bytes = C.sharedBytes(HeadDim, HeadDimV);
  if (Bytes > archSharedLimit(Arch))
    throw UserError(fmt::format(
        "config {} needs {} bytes of shared memory for d{}/{}; {} has {}",
        C.str(), Bytes, HeadDim, HeadDimV, archName(Arch).str(), archSharedLimit(Arch)));
}

std::string forwardKey(const CompiledDefinition &Def, const KernelSpec &Spec) {
  return fmt::format("{}.fwd_sm80.{}.d{}x{}.{}.{}", Def.Graph->name(),
                     std::string(dtypeName(Spec.Dtype)), Spec.HeadDim, Spec.HeadDimV,
                     archName(Spec.Arch).str(), Spec.Config.str());
}


KernelSource generateForward(const CompiledDefinition &Def,
                             const KernelSpec &Spec) {
  if (Def.Graph->decls().Kind != ir::DefinitionKind::Transformer)
    throw NotSupportedYet("code generation for linear attention ('" +
                          Def.Graph->name() + "')");
  Spec.validate();
  KernelSource Src;
  Src.Key = forwardKey(Def, Spec);
  Src.Arch = Spec.Arch;
  Src.Entries = {"attnc_fwd", "attnc_block_classify", "attnc_block_compact"};
  std::map<std::string, std::string> Values =
      variantTemplateValues(Def, Spec, Src.Key);
  Values["threads"] = std::to_string(Spec.Config.Warps * 32);
  Values["block_m"] = std::to_string(Spec.Config.BlockM);
  Values["block_n"] = std::to_string(Spec.Config.BlockN);
  Values["warps"] = std::to_string(Spec.Config.Warps);
  Values["stages"] = std::to_string(Spec.Config.Stages);
  Src.Source = render("fwd_sm80.cu.in", templateText("fwd_sm80.cu.in"), Values);
  return Src;
}

KernelSource generatePagedPrefill(const CompiledDefinition &Def,
                                  const KernelSpec &Spec) {
  if (Def.Graph->decls().Kind != ir::DefinitionKind::Transformer)
    throw NotSupportedYet("paged prefill for linear attention ('" +
                          Def.Graph->name() + "')");
  Spec.validate();
  KernelSource Src;
  Src.Key = fmt::format("{}.fwd_paged_sm80.{}.d{}x{}.{}.{}", Def.Graph->name(),
                        std::string(dtypeName(Spec.Dtype)), Spec.HeadDim,
                        Spec.HeadDimV, archName(Spec.Arch).str(),
                        Spec.Config.str());
  Src.Arch = Spec.Arch;
  Src.Entries = {"attnc_fwd_paged"};
  std::map<std::string, std::string> Values =
      variantTemplateValues(Def, Spec, Src.Key);
  Values["threads"] = std::to_string(Spec.Config.Warps * 32);
  Values["block_m"] = std::to_string(Spec.Config.BlockM);
  Values["block_n"] = std::to_string(Spec.Config.BlockN);
  Values["warps"] = std::to_string(Spec.Config.Warps);
  Values["stages"] = std::to_string(Spec.Config.Stages);
  Src.Source = render("fwd_paged_sm80.cu.in",
                      templateText("fwd_paged_sm80.cu.in"), Values);
  return Src;
}

} // namespace attn::codegen
