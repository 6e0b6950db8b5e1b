// relu_attn: ReLU attention, max(s/sqrt(D), 0), no mask.
#include "Examples.h"
#include "identity_online.h"

namespace attn::examples {
using namespace dsl;

AttentionDef reluAttn() {
  AttentionDef def("relu_attn");
  def.description = "ReLU attention, no mask";
  def.score_mod = [](SymbolScalar score, const CustomInputs &in, SymbolScalar,
                     SymbolScalar, SymbolScalar, SymbolScalar) {
    return (score * in.head_dim().rsqrt()).max(0.0);
  };
  def.online_func = std::make_shared<OnlineIdentity>();
  return def;
}

} // namespace attn::examples
