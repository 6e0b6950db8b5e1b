// Definitions with learnable custom inputs and no hand-written backward:
// ALiBi with learned per-head slopes and a per-head bias on the diagonal
// (a query's own key), and a softcap
// with a learned scalar cap. attnc derives their backward and the inputs'
// gradients (docs/dsl.md, "Gradients").
#include "Examples.h"

#include "attn/dsl/Library.h"

namespace attn::examples {
using namespace dsl;

AttentionDef alibiLearnable() {
  AttentionDef def("alibi_learnable");
  def.description =
      "causal softmax with learned ALiBi slopes and diagonal head bias";
  def.inputs.declare("slopes", InputShape::PerHead, 0.0, 0.5).requiresGrad();
  def.inputs.declare("head_bias", InputShape::PerHead).requiresGrad();
  // The head bias is added where a query meets its own key only: a bias
  // added to every key of a row would cancel in the softmax, and its
  // gradient would be zero. One statement per traced call, so that the IR's
  // numbering does not depend on the compiler's order of evaluation.
  def.score_mod = [](SymbolScalar score, const CustomInputs &in, SymbolScalar,
                     SymbolScalar, SymbolScalar q_idx, SymbolScalar kv_idx) {
    SymbolScalar scaled = score * in.head_dim().rsqrt();
    SymbolScalar distance = kv_idx - q_idx;
    SymbolScalar slope_term = in["slopes"] * distance;
    SymbolScalar own_key = kv_idx == q_idx;
    SymbolScalar self_bias = select(own_key, in["head_bias"], 0.0);
    return scaled + slope_term + self_bias;
  };
  def.mask_mod = masks::causal();
  def.online_func = onlineSoftmax(/*WrittenBackward=*/false);
  return def;
}

AttentionDef softcapLearnable() {
  AttentionDef def("softcap_learnable");
  def.description = "softmax with a learned tanh soft cap c*tanh(s/c)";
  def.inputs.declare("cap", InputShape::Scalar, 1.0, 3.0).requiresGrad();
  def.score_mod = [](SymbolScalar score, const CustomInputs &in, SymbolScalar,
                     SymbolScalar, SymbolScalar, SymbolScalar) {
    SymbolScalar c = in["cap"];
    return c * (score * in.head_dim().rsqrt() / c).tanh();
  };
  def.online_func = onlineSoftmax(/*WrittenBackward=*/false);
  return def;
}

} // namespace attn::examples
