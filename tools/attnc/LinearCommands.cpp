// Options of `attnc bench` and `attnc tune` for linear definitions.
#include "LinearCommands.h"
#include "KernelChoice.h"

#include "attn/codegen/Arch.h"
#include "attn/codegen/LinearCodegen.h"

#include <fmt/format.h>

namespace attn {

LinearCommandArgs linearCommandArgs(const ShapeArg &S, int QkHeads,
                                    const std::string &Dtype,
                                    const std::string &Layout,
                                    const std::string &Skeleton,
                                    const std::string &Config,
                                    const std::string &Arch) {
  LinearCommandArgs A;
  A.Sig.Dtype = parseDtypeArg(Dtype);
  A.Sig.TensorLayout = parseLayoutArg(Layout);
  A.Sig.HeadDim = S.HeadDim;
  A.Sig.HeadDimV = S.HeadDimV;
  if (QkHeads < 0 || (QkHeads > 0 && S.Heads % QkHeads != 0))
    throw UsageError(fmt::format("--qk-heads {}: expected a divisor of the "
                                 "{} heads of --shape",
                                 QkHeads, S.Heads));
  A.Shape = {S.Batch, S.Heads, QkHeads > 0 ? QkHeads : S.Heads, S.Seq};
  if (!Arch.empty())
    A.Sig.Arch = parseArch(Arch, "--arch");
  A.Sig.Skeleton = Skeleton;
  A.Sig.Config = Config;
  // Judged before any GPU work: for --arch, or with sm_80's rules (the
  // GPU's arch is judged again once it is known).
  runtime::KernelTarget T;
  T.Kind = ir::DefinitionKind::Linear;
  T.Dtype = A.Sig.Dtype;
  T.HeadDim = S.HeadDim;
  T.HeadDimV = S.HeadDimV;
  T.Arch = A.Sig.Arch.value_or(GpuArch::Sm80);
  (void)runtime::chooseWithoutShape(T, policyFromOptions(T, Skeleton, Config));
  return A;
}

} // namespace attn
