// mamba2: the Mamba2 SSD as linear attention (q = C, k = B, v = x): per-head
// A < 0 and per-token dt > 0 give the log-decay g = A·dt, and v is scaled by
// dt. The decay tensor input is not needed: dt arrives as a custom input.
#include "Examples.h"

namespace attn::examples {
using namespace dsl;

LinearAttentionDef mamba2() {
  LinearAttentionDef def("mamba2");
  def.description = "Mamba2 SSD: g = A*dt, v scaled by dt";
  def.inputs.declare("A", InputShape::PerHead, -2.0, -0.2);
  def.inputs.declare("dt", InputShape::PerRow, 0.05, 1.0);
  def.decay_mod = [](SymbolScalar, const CustomInputs &in) {
    SymbolScalar dt = in["dt"]; // named: the operands' order is then fixed
    return dt * in["A"];
  };
  def.v_mod = [](SymbolScalar v, const CustomInputs &in) {
    return v * in["dt"];
  };
  return def;
}

} // namespace attn::examples
