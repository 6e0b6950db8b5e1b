// Definitions with learnable custom inputs and no hand-written backward:
// ALiBi with learned per-head slopes and a per-head bias, and a softcap
// with a learned scalar cap. attnc derives their backward and the inputs'
// gradients (docs/dsl.md, "Gradients").
#include "Examples.h"

namespace attn::examples {
using namespace dsl;

namespace {
/// The online softmax without a backward: the autodiff pass derives
/// dS = P∘(dP − doosum) from forward and the final rowscale lse.
class OnlineSoftmaxNoBackward final : public OnlineFunc {
public:
  OnlineSoftmaxNoBackward()
      : OnlineFunc({{"m", Var("-inf")}, {"r", Var(0.0)}}, {{"lse", Var(0.0)}}) {}

  OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                             SymbolScalar, SymbolScalar,
                             SymbolScalar) const override {
    SymbolScalar m_new = rs["m"].max(scores.get_reduce("max"));
    SymbolScalar scale = (rs["m"] - m_new).exp();
    SymbolScalar p = (scores - m_new).exp();
    return {p, {{"m", m_new}, {"r", rs["r"] * scale + p.get_reduce("sum")}},
            scale};
  }
  EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &rs,
                                     SymbolScalar, SymbolScalar,
                                     SymbolScalar) const override {
    return {o / rs["r"], {{"lse", rs["r"].log() + rs["m"]}}};
  }
  SymbolScalar forward(SymbolScalar scores, const Rowscales &fr, SymbolScalar,
                       SymbolScalar, SymbolScalar,
                       SymbolScalar) const override {
    return (scores - fr["lse"]).exp();
  }
};
} // namespace

std::shared_ptr<const OnlineFunc> onlineSoftmaxNoBackward() {
  return std::make_shared<OnlineSoftmaxNoBackward>();
}

AttentionDef alibiLearnable() {
  AttentionDef def("alibi_learnable");
  def.description = "causal softmax with learned ALiBi slopes and head bias";
  def.inputs.declare("slopes", InputShape::PerHead, 0.0, 0.5).requiresGrad();
  def.inputs.declare("head_bias", InputShape::PerHead).requiresGrad();
  def.score_mod = [](SymbolScalar score, const CustomInputs &in, SymbolScalar,
                     SymbolScalar, SymbolScalar q_idx, SymbolScalar kv_idx) {
    return score * in.head_dim().rsqrt() +
           in["slopes"] * (kv_idx - q_idx) + in["head_bias"];
  };
  def.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q_idx,
                    SymbolScalar kv_idx) { return q_idx >= kv_idx; };
  def.online_func = onlineSoftmaxNoBackward();
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
  def.online_func = onlineSoftmaxNoBackward();
  return def;
}

} // namespace attn::examples
