// retention_linear: RetNet's recurrent form, a fixed per-head decay
// gamma_h = 1 - 2^(-5-h); q is scaled by 1/sqrt(D).
#include "Examples.h"

namespace attn::examples {
using namespace dsl;

LinearAttentionDef retentionLinear() {
  LinearAttentionDef def("retention_linear");
  def.description = "RetNet retention, recurrent form, fixed per-head decay";
  def.q_mod = [](SymbolScalar q, const CustomInputs &in) {
    return q * in.head_dim().rsqrt();
  };
  def.decay_mod = [](SymbolScalar, const CustomInputs &, SymbolScalar,
                     SymbolScalar h, SymbolScalar) {
    return (1.0 - (-5 - h).exp2()).log();
  };
  return def;
}

} // namespace attn::examples
