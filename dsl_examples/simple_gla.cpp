// simple_gla: gated retention. The decay input is the per-token log-gate g
// itself; q is scaled by 1/sqrt(D).
#include "Examples.h"

namespace attn::examples {
using namespace dsl;

LinearAttentionDef simpleGla() {
  LinearAttentionDef def("simple_gla");
  def.description = "simple GLA (gated retention): per-token log-gate";
  def.q_mod = [](SymbolScalar q, const CustomInputs &in) {
    return q * in.head_dim().rsqrt();
  };
  return def;
}

} // namespace attn::examples
