// Forward configuration choice: explicit, tuned, or the default heuristic.
#include "attn/runtime/ConfigSelect.h"

namespace attn::runtime {

codegen::FwdConfig initialForwardConfig(const Signature &Sig,
                                        const std::string &Arch) {
  if (!Sig.Config.empty())
    return codegen::FwdConfig::parse(Sig.Config);
  return codegen::FwdConfig::defaultFor(Sig.HeadDim, Sig.HeadDimV, Arch);
}

codegen::FwdConfig selectForwardConfig(const BackendProblem &P) {
  // Tune files are not read yet: every call uses the initial configuration.
  return initialForwardConfig(P.Sig, P.Arch);
}

} // namespace attn::runtime
