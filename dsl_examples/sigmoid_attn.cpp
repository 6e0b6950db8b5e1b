// sigmoid_attn: causal sigmoid attention, sigmoid(s/sqrt(D) + bias), with
// the bias a runtime scalar (FlashSigmoid uses -log(seq_len)).
#include "Examples.h"
#include "identity_online.h"

namespace attn::examples {
using namespace dsl;

AttentionDef sigmoidAttn() {
  AttentionDef def("sigmoid_attn");
  def.description = "sigmoid attention, causal, runtime bias scalar";
  def.inputs.declare("softmax_bias", InputShape::Scalar, -3.0, 0.0);
  def.score_mod = [](SymbolScalar score, const CustomInputs &in, SymbolScalar,
                     SymbolScalar, SymbolScalar, SymbolScalar) {
    // Named first: with both operands of `+` making nodes, the IR's
    // numbering would follow the compiler's order of evaluation.
    SymbolScalar bias = in["softmax_bias"];
    SymbolScalar s = score * in.head_dim().rsqrt() + bias;
    return s.sigmoid();
  };
  def.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q_idx,
                    SymbolScalar kv_idx) { return q_idx >= kv_idx; };
  def.online_func = std::make_shared<OnlineIdentity>();
  return def;
}

} // namespace attn::examples
