// mha: causal softmax attention with the online-softmax algorithm.
#include "Examples.h"

namespace attn::examples {
using namespace dsl;

namespace {
/// The FlashAttention online softmax: a running max m and a running sum r.
class OnlineSoftmax final : public OnlineFunc {
public:
  OnlineSoftmax() : OnlineFunc({{"m", Var("-inf")}, {"r", Var(0.0)}},
                               {{"lse", Var(0.0)}}) {}

  OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                             SymbolScalar, SymbolScalar,
                             SymbolScalar) const override {
    SymbolScalar m = rs["m"], r = rs["r"];
    SymbolScalar m_new = m.max(scores.get_reduce("max"));
    SymbolScalar scale_tmp = (m - m_new).exp();
    r = r * scale_tmp;
    scores = (scores - m_new).exp();
    r = r + scores.get_reduce("sum");
    return {scores, {{"m", m_new}, {"r", r}}, scale_tmp};
  }

  EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &rs,
                                     SymbolScalar, SymbolScalar,
                                     SymbolScalar) const override {
    return {o / rs["r"], {{"lse", rs["r"].log() + rs["m"]}}};
  }

  SymbolScalar forward(SymbolScalar scores, const Rowscales &final_rowscales,
                       SymbolScalar, SymbolScalar, SymbolScalar,
                       SymbolScalar) const override {
    return (scores - final_rowscales["lse"]).exp();
  }

  std::optional<SymbolScalar>
  backward(SymbolScalar dp, SymbolScalar scores, const Rowscales &,
           SymbolScalar doosum, SymbolScalar, SymbolScalar, SymbolScalar,
           SymbolScalar) const override {
    return (dp - doosum) * scores;
  }
};
} // namespace

AttentionDef mha() {
  AttentionDef def("mha");
  def.description = "softmax attention, causal (online softmax)";
  def.score_mod = [](SymbolScalar score, const CustomInputs &in, SymbolScalar,
                     SymbolScalar, SymbolScalar, SymbolScalar) {
    return score * in.head_dim().rsqrt();
  };
  def.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q_idx,
                    SymbolScalar kv_idx) { return q_idx >= kv_idx; };
  def.online_func = std::make_shared<OnlineSoftmax>();
  return def;
}

} // namespace attn::examples
