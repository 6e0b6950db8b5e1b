// The skeleton table: the one list of skeletons, lookups by name, and the
// kernel target every entry is asked about.
#include "attn/codegen/Arch.h"
#include "attn/runtime/Skeleton.h"

#include "skeletons/Entries.h"

#include "attn/Error.h"

#include "llvm/ADT/StringExtras.h"

#include <fmt/format.h>

namespace attn::runtime {

Skeleton::~Skeleton() = default;

llvm::StringRef directionName(Direction D) {
  switch (D) {
  case Direction::Forward:
    return "forward";
  case Direction::Backward:
    return "backward";
  }
  return "?";
}

KernelTarget KernelTarget::of(const CompiledDefinition &Def, Direction D,
                              DType Dtype, int HeadDim, int HeadDimV,
                              GpuArch Arch) {
  KernelTarget T;
  T.Kind = Def.Graph->decls().Kind;
  T.Dir = D;
  T.Dtype = Dtype;
  T.HeadDim = HeadDim;
  T.HeadDimV = HeadDimV;
  T.Arch = Arch;
  T.NumFinals = int(Def.Graph->decls().FinalRowscales.size());
  T.BackwardUsesDoosum = Def.Info.BackwardUsesDoosum;
  return T;
}

namespace {

/// The attention or linear spec of \p T, its configuration at the default.
template <typename SpecT> SpecT specOf(const KernelTarget &T) {
  SpecT S;
  S.Dtype = T.Dtype;
  S.HeadDim = T.HeadDim;
  S.HeadDimV = T.HeadDimV;
  S.Arch = T.Arch;
  return S;
}

} // namespace

codegen::KernelSpec KernelTarget::kernelSpec() const {
  return specOf<codegen::KernelSpec>(*this);
}

codegen::LinearKernelSpec KernelTarget::linearSpec() const {
  return specOf<codegen::LinearKernelSpec>(*this);
}

std::string KernelTarget::str() const {
  return fmt::format("{} {} d{}/{} {}", directionName(Dir).str(),
                     std::string(dtypeName(Dtype)), HeadDim, HeadDimV,
                     archName(Arch).str());
}

llvm::ArrayRef<const Skeleton *> skeletonTable() {
  // Order is preference: the Hopper kernels before the portable ones. The
  // decode skeleton comes after the forwards: the selector's short-query
  // rule picks it (decodeChoice), never the first-that-supports rule.
  static const Skeleton *const Table[] = {
      &skeletons::fwdSm90(), &skeletons::fwdSm80(), &skeletons::bwdSm90(),
      &skeletons::bwdSm80(), &skeletons::linearChunk(),
      &skeletons::decodeSm80()};
  return Table;
}

const Skeleton *findSkeleton(llvm::StringRef Name) {
  for (const Skeleton *S : skeletonTable())
    if (S->name() == Name)
      return S;
  return nullptr;
}

std::string skeletonNames() {
  std::vector<std::string> Names;
  for (const Skeleton *S : skeletonTable())
    Names.push_back(S->name().str());
  return llvm::join(Names, ", ");
}

std::string skeletonNames(ir::DefinitionKind Kind, Direction D) {
  std::vector<std::string> Names;
  for (const Skeleton *S : skeletonTable())
    if (S->kind() == Kind && S->serves(D))
      Names.push_back(S->name().str());
  return llvm::join(Names, ", ");
}

const Skeleton &skeletonNamed(llvm::StringRef Name, llvm::StringRef What) {
  if (const Skeleton *S = findSkeleton(Name))
    return *S;
  throw UserError(fmt::format("{} '{}': no such skeleton; expected one of {}",
                              What.str(), Name.str(), skeletonNames()));
}

std::optional<SkeletonConfig> Skeleton::tryParse(llvm::StringRef Text) const {
  try {
    return parse(Text);
  } catch (const UserError &) {
    return std::nullopt;
  }
}

} // namespace attn::runtime
