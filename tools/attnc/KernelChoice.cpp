// The kernel of `attnc emit` and `attnc compile`: the options as a kernel
// target and policy, and the selector's choice for them.
#include "KernelChoice.h"
#include "Commands.h"

#include "attn/Pipeline.h"
#include "attn/codegen/Arch.h"
#include "attn/codegen/Codegen.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Selector.h"

#include <fmt/format.h>

namespace attn {

namespace {

using runtime::Direction;
using runtime::KernelChoice;
using runtime::KernelPolicy;
using runtime::KernelTarget;

/// The arch without --arch: emit's sm_80, compile's GPU (sm_80 without one).
GpuArch defaultArch(const KernelRequest &Req) {
  if (Req.ForCompile && runtime::CudaDriver::get().available())
    if (std::optional<GpuArch> A = runtime::currentDevice().arch())
      return *A;
  return GpuArch::Sm80;
}

/// The target of \p Req for \p Def, its arch left at sm_80 (the policy's
/// names do not depend on it).
KernelTarget baseTarget(const KernelRequest &Req, const CompiledDefinition &Def,
                        DType Dtype) {
  Direction Dir = Req.Backward ? Direction::Backward : Direction::Forward;
  int DV = Req.HeadDimV ? Req.HeadDimV : Req.HeadDim;
  return KernelTarget::of(Def, Dir, Dtype, Req.HeadDim, DV, GpuArch::Sm80);
}

/// \p T with its arch resolved: --arch, else the default arch unless the
/// skeleton \p P names cannot run there and runs on a later one (the first
/// such).
KernelTarget resolveArch(const KernelRequest &Req, KernelTarget T,
                         const KernelPolicy &P) {
  if (!Req.Arch.empty()) {
    T.Arch = parseArch(Req.Arch, "--arch");
    return T;
  }
  T.Arch = defaultArch(Req);
  const runtime::Skeleton *Named = P.Named ? P.Named : P.ConfigOf;
  if (!Named || Named->unsupported(T).empty())
    return T;
  for (GpuArch A : AllGpuArchs) {
    KernelTarget Other = T;
    Other.Arch = A;
    if (Named->unsupported(Other).empty())
      return Other;
  }
  return T; // the selector says why none serves
}

/// The dtype of \p Req; UsageError for an unknown backend or dtype.
DType checkBackendAndDtype(const KernelRequest &Req) {
  if (Req.Backend != "generated" && Req.Backend != "reference")
    throw UsageError("--backend '" + Req.Backend +
                     "': expected generated or reference");
  std::optional<DType> Dtype = dtypeFromName(Req.Dtype);
  if (!Dtype || !isAttentionDtype(*Dtype))
    throw UsageError("--dtype '" + Req.Dtype + "': expected f16 or bf16");
  return *Dtype;
}

std::string describe(const CompiledDefinition &Def, const KernelTarget &T,
                     const std::string &What) {
  return fmt::format("{} {}: {}", Def.Graph->name(), T.str(), What);
}

} // namespace

const std::string &skeletonOptionHelp() {
  static const std::string Help =
      "The skeleton, by name: " + runtime::skeletonNames() +
      " (default: the one the runtime runs for the definition, direction, "
      "dtype, head dims and arch)";
  return Help;
}

const std::string &configOptionHelp() {
  static const std::string Help = [] {
    std::string H = "The configuration, in its skeleton's form (default: "
                    "tuned or the skeleton's default):";
    for (const runtime::Skeleton *S : runtime::skeletonTable())
      H += " " + S->name().str() + " " + S->configForm().str() + ";";
    H.back() = '.';
    return H;
  }();
  return Help;
}

runtime::KernelPolicy policyFromOptions(const KernelTarget &T,
                                        const std::string &Skeleton,
                                        const std::string &Config) {
  try {
    (void)KernelPolicy::parse(T, Skeleton, "");
  } catch (const UserError &E) {
    throw UsageError(std::string("--skeleton: ") + E.what());
  }
  try {
    return KernelPolicy::parse(T, Skeleton, Config);
  } catch (const UserError &E) {
    throw UsageError(std::string("--config: ") + E.what());
  }
}

ChosenKernel kernelForOptions(const KernelRequest &Req,
                              const dsl::Registry &Registry) {
  checkBackendAndDtype(Req);
  const dsl::DefinitionBase &D = Registry.get(Req.Name);
  return kernelForDefinition(Req, D.kind(), D.name,
                             [&] { return compile(D); });
}

ChosenKernel
kernelForDefinition(const KernelRequest &Req, ir::DefinitionKind Kind,
                    const std::string &Name,
                    llvm::function_ref<CompiledDefinition()> Compile) {
  DType Dtype = checkBackendAndDtype(Req);
  bool Linear = Kind == ir::DefinitionKind::Linear;
  if (Req.Backend == "reference") {
    if (Linear)
      throw UsageError("--backend 'reference': '" + Name +
                       "' is linear attention, which has the generated "
                       "kernels only");
    if (Req.Backward)
      throw UsageError("--backward: the reference backend has no backward "
                       "kernel; the backward is the generated backend's");
    if (!Req.Skeleton.empty() || !Req.Config.empty())
      throw UsageError("--backend reference runs its own kernel (ref_fwd); "
                       "--skeleton and --config choose the generated "
                       "backend's");
  }
  CompiledDefinition Def = Compile();
  KernelTarget Base = baseTarget(Req, Def, Dtype);
  KernelPolicy P = policyFromOptions(Base, Req.Skeleton, Req.Config);
  KernelTarget T = resolveArch(Req, Base, P);
  if (Req.Backend == "reference")
    return {codegen::generateReference(Def, T.kernelSpec()),
            describe(Def, T, "ref_fwd (the reference backend)")};
  KernelChoice C = runtime::chooseWithoutShape(T, P);
  return {C.Skel->generate(Def, T, C.Config), describe(Def, T, C.str())};
}

} // namespace attn
