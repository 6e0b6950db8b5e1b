// Options of `attnc bench` and `attnc tune` for linear definitions.
#include "LinearCommands.h"

#include "attn/codegen/LinearCodegen.h"

#include <fmt/format.h>

namespace attn {

LinearCommandArgs linearCommandArgs(const ShapeArg &S, int QkHeads,
                                    const std::string &Dtype,
                                    const std::string &Layout,
                                    const std::string &Config,
                                    const std::string &Arch) {
  LinearCommandArgs A;
  A.Sig.Dtype = parseDtypeArg(Dtype);
  A.Sig.TensorLayout = parseLayoutArg(Layout);
  A.Sig.HeadDim = S.HeadDim;
  A.Sig.HeadDimV = S.HeadDimV;
  A.Sig.Config = Config;
  A.Sig.Arch = Arch;
  if (QkHeads < 0 || (QkHeads > 0 && S.Heads % QkHeads != 0))
    throw UsageError(fmt::format("--qk-heads {}: expected a divisor of the "
                                 "{} heads of --shape",
                                 QkHeads, S.Heads));
  A.Shape = {S.Batch, S.Heads, QkHeads > 0 ? QkHeads : S.Heads, S.Seq};
  codegen::LinearKernelSpec Spec;
  Spec.Dtype = A.Sig.Dtype;
  Spec.HeadDim = S.HeadDim;
  Spec.HeadDimV = S.HeadDimV;
  Spec.Arch = Arch.empty() ? "sm_80" : Arch;
  if (!Config.empty()) {
    try {
      Spec.Config = codegen::LinearConfig::parse(Config);
    } catch (const UserError &E) {
      throw UsageError(std::string("--config: ") + E.what());
    }
  } else {
    Spec.Config =
        codegen::LinearConfig::defaultFor(S.HeadDim, S.HeadDimV, Spec.Arch);
  }
  Spec.validate();
  return A;
}

} // namespace attn
