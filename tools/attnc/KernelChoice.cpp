// The kernel of `attnc emit` and `attnc compile`: skeleton, specification
// and configuration from the kernel options.
#include "KernelChoice.h"
#include "Commands.h"

#include "attn/Pipeline.h"
#include "attn/codegen/Codegen.h"
#include "attn/codegen/LinearCodegen.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"

namespace attn {

namespace {

/// The kernel spec of an attention definition's kernel.
codegen::KernelSpec kernelSpec(const KernelRequest &Req) {
  codegen::KernelSpec Spec;
  Spec.Dtype = parseDtypeArg(Req.Dtype);
  Spec.HeadDim = Req.HeadDim;
  Spec.HeadDimV = Req.HeadDimV ? Req.HeadDimV : Req.HeadDim;
  Spec.Arch = Req.Arch;
  // fwd_sm90 exists for sm_90a only: asking for it picks that arch.
  bool Sm90 = !Req.Backward && codegen::Sm90Config::names(Req.Config);
  if (Spec.Arch.empty() && Sm90)
    Spec.Arch = "sm_90a";
  if (Spec.Arch.empty()) {
    Spec.Arch = "sm_80";
    if (Req.ForCompile && runtime::CudaDriver::get().available())
      Spec.Arch = runtime::currentDevice().arch();
  }
  // A backward's --config is a BwdConfig (chooseKernel), an fwd_sm90 one an
  // Sm90Config (sm90Kernel); the fwd_sm80 tiles then keep their default,
  // which neither looks at.
  Spec.Config = Req.Config.empty() || Req.Config == "sm80" || Req.Backward ||
                        Sm90
                    ? codegen::FwdConfig::defaultFor(Spec.HeadDim,
                                                      Spec.HeadDimV, Spec.Arch)
                    : parseOptionValue(
                          [&] { return codegen::FwdConfig::parse(Req.Config); });
  if (!Req.Backward && !Sm90)
    Spec.validate();
  return Spec;
}

/// The fwd_sm90 kernel that --config sm90 or sm90.mXnYsS asks for: the
/// generated backend only; UserError where fwd_sm90 cannot serve the
/// dtype, head dims, arch or configuration.
codegen::KernelSource sm90Kernel(const KernelRequest &Req,
                                 const CompiledDefinition &C,
                                 const codegen::KernelSpec &Spec) {
  if (Req.Backend != "generated")
    throw UsageError("--config " + Req.Config +
                     ": fwd_sm90 is the generated backend's; the " +
                     Req.Backend + " backend takes no configuration");
  codegen::Sm90Config Config =
      Req.Config == "sm90"
          ? codegen::Sm90Config::defaultFor(Spec.HeadDim, Spec.HeadDimV)
          : parseOptionValue(
                [&] { return codegen::Sm90Config::parse(Req.Config); });
  return codegen::generateForwardSm90(C, Spec, Config);
}

/// The forward kernel --backend names for \p C.
codegen::KernelSource backendKernel(const KernelRequest &Req,
                                    const CompiledDefinition &C,
                                    const codegen::KernelSpec &Spec) {
  if (Req.Backend == "generated")
    return codegen::generateForward(C, Spec);
  if (Req.Backend == "reference")
    return codegen::generateReference(C, Spec);
  throw UsageError("--backend '" + Req.Backend +
                   "': expected generated or reference");
}

/// The linear_chunk kernel (forward, or with --backward the backward's) of
/// a linear definition; --config is a LinearConfig ("c64v64w4b8").
codegen::KernelSource linearKernel(const KernelRequest &Req,
                                   const dsl::DefinitionBase &Def) {
  codegen::LinearKernelSpec Spec;
  Spec.Dtype = parseDtypeArg(Req.Dtype);
  Spec.HeadDim = Req.HeadDim;
  Spec.HeadDimV = Req.HeadDimV ? Req.HeadDimV : Req.HeadDim;
  Spec.Arch = Req.Arch;
  if (Spec.Arch.empty()) {
    Spec.Arch = "sm_80";
    if (Req.ForCompile && runtime::CudaDriver::get().available())
      Spec.Arch = runtime::currentDevice().arch();
  }
  Spec.Config = Req.Config.empty()
                    ? codegen::LinearConfig::defaultFor(
                          Spec.HeadDim, Spec.HeadDimV, Spec.Arch)
                    : parseOptionValue([&] {
                        return codegen::LinearConfig::parse(Req.Config);
                      });
  if (Req.Backend != "generated")
    throw UsageError("--backend '" + Req.Backend + "': '" + Def.name +
                     "' is linear attention, which has the generated kernels "
                     "only");
  Spec.validate();
  CompiledDefinition C = compile(Def);
  return Req.Backward ? codegen::generateLinearBackward(C, Spec)
                      : codegen::generateLinearForward(C, Spec);
}

} // namespace

codegen::KernelSource chooseKernel(const KernelRequest &Req,
                                   const dsl::Registry &Registry) {
  const dsl::DefinitionBase *D = Registry.find(Req.Name);
  if (D && D->kind() == ir::DefinitionKind::Linear)
    return linearKernel(Req, *D);
  // ref_fwd has no tiles: a --config with it would be ignored, so it is
  // refused (fwd_sm90's configurations say so in sm90Kernel).
  if (Req.Backend == "reference" && !Req.Backward && !Req.Config.empty() &&
      !codegen::Sm90Config::names(Req.Config))
    throw UsageError("--config " + Req.Config +
                     ": the reference backend takes no configuration");
  codegen::KernelSpec Spec = kernelSpec(Req);
  if (Req.Backward && Req.Backend != "generated")
    throw UsageError("--backward: the " + Req.Backend +
                     " backend has no backward kernel; the backward is "
                     "generated (bwd_sm80)");
  CompiledDefinition C = compile(Registry.get(Req.Name));
  if (Req.Backward)
    return Req.Config.empty()
               ? codegen::generateBackward(C, Spec)
               : codegen::generateBackward(C, Spec, parseOptionValue([&] {
                   return codegen::BwdConfig::parse(Req.Config);
                 }));
  if (codegen::Sm90Config::names(Req.Config))
    return sm90Kernel(Req, C, Spec);
  return backendKernel(Req, C, Spec);
}

} // namespace attn
