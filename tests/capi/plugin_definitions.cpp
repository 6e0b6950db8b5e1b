// A small plugin for the tests: a softmax variant with a learned per-head
// temperature, and a linear variant, written as a user's plugin would be.
#include "attnc/plugin.h"

namespace {
using namespace attn::dsl;

class Softmax final : public OnlineFunc {
public:
  Softmax() : OnlineFunc({{"m", Var("-inf")}, {"r", Var(0.0)}},
                         {{"lse", Var(0.0)}}) {}
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

void attnc_plugin::registerDefinitions(attn::dsl::Registry &R) {
  AttentionDef T("plugin_temperature");
  T.description = "softmax with a learned per-head temperature";
  T.inputs.declare("temperature", InputShape::PerHead, 0.5, 2.0)
      .requiresGrad();
  T.score_mod = [](SymbolScalar score, const CustomInputs &in, SymbolScalar,
                   SymbolScalar, SymbolScalar, SymbolScalar) {
    return score * in.head_dim().rsqrt() / in["temperature"];
  };
  T.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q_idx,
                  SymbolScalar kv_idx) { return q_idx >= kv_idx; };
  T.online_func = std::make_shared<Softmax>();
  R.add(std::move(T));

  LinearAttentionDef L("plugin_gla");
  L.q_mod = [](SymbolScalar q, const CustomInputs &in) {
    return q * in.head_dim().rsqrt();
  };
  R.add(std::move(L));
}
