// retention: RetNet's parallel form. Scores decay as gamma_h^(i-j) with
// gamma_h = 1 - 2^(-5-h), causal; each row is normalised by
// max(sum_j |s_ij|, 1), carried online as a running abssum.
// retention_combine: the same, with its own combine, so that decode can
// split a row's keys (the merge analysis derives none for this o_scale).
#include "Examples.h"

namespace attn::examples {
using namespace dsl;

namespace {
class OnlineRetention : public OnlineFunc {
public:
  OnlineRetention()
      : OnlineFunc({{"r_raw", Var(0.0)}, {"r", Var(0.0)}},
                   {{"r", Var(0.0)}, {"r_raw", Var(0.0)}}) {}

  OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                             SymbolScalar, SymbolScalar,
                             SymbolScalar) const override {
    SymbolScalar r_raw = rs["r_raw"] + scores.get_reduce("abssum");
    SymbolScalar r_new = r_raw.max(1.0);
    SymbolScalar o_scale = rs["r"] / r_new;
    return {scores / r_new, {{"r_raw", r_raw}, {"r", r_new}}, o_scale};
  }

  EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &rs,
                                     SymbolScalar, SymbolScalar,
                                     SymbolScalar) const override {
    return {o, {{"r", rs["r"]}, {"r_raw", rs["r_raw"]}}};
  }

  SymbolScalar forward(SymbolScalar scores, const Rowscales &final_rowscales,
                       SymbolScalar, SymbolScalar, SymbolScalar,
                       SymbolScalar) const override {
    return scores / final_rowscales["r"];
  }

  /// The exact gradient: the normaliser depends on the scores wherever it is
  /// not clamped, which brings in doosum = rowsum(dO∘O):
  /// dS = (dP − [r_raw > 1]·sign(S)·doosum) / r.
  std::optional<SymbolScalar>
  backward(SymbolScalar dp, SymbolScalar scores, const Rowscales &fr,
           SymbolScalar doosum, SymbolScalar, SymbolScalar, SymbolScalar,
           SymbolScalar) const override {
    // One statement per node-making operand: a function's arguments are
    // evaluated in an order the compiler picks, and the IR numbers nodes in
    // the order they are made.
    SymbolScalar negative = select(scores < 0.0, -1.0, 0.0);
    SymbolScalar sign = select(scores > 0.0, 1.0, negative);
    SymbolScalar through_doosum = sign * doosum;
    SymbolScalar unclamped = fr["r_raw"] > 1.0;
    SymbolScalar through_norm = select(unclamped, through_doosum, 0.0);
    return (dp - through_norm) / fr["r"];
  }
};
/// o of a part is (sum over its keys of s·v) / r with r = max(r_raw, 1):
/// the union's o rescales each part's o by r_part / r of the summed r_raw.
class OnlineRetentionCombine final : public OnlineRetention {
public:
  std::optional<CombineResult> combine(const Rowscales &a,
                                       const Rowscales &b) const override {
    SymbolScalar r_raw = a["r_raw"] + b["r_raw"];
    SymbolScalar r = r_raw.max(1.0);
    return CombineResult{{{"r_raw", r_raw}, {"r", r}}, a["r"] / r, b["r"] / r};
  }
};
} // namespace

AttentionDef retention() {
  AttentionDef def("retention");
  def.description = "RetNet retention, parallel form, causal decay mask";
  def.score_mod = [](SymbolScalar score, const CustomInputs &in, SymbolScalar,
                     SymbolScalar h, SymbolScalar q_idx, SymbolScalar kv_idx) {
    SymbolScalar log_gamma = (1.0 - (-5 - h).exp2()).log();
    SymbolScalar decay = ((q_idx - kv_idx) * log_gamma).exp();
    return score * in.head_dim().rsqrt() * decay;
  };
  def.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q_idx,
                    SymbolScalar kv_idx) { return q_idx >= kv_idx; };
  def.online_func = std::make_shared<OnlineRetention>();
  return def;
}

AttentionDef retentionCombine() {
  AttentionDef def = retention();
  def.name = "retention_combine";
  def.description = "RetNet retention, parallel form, with a combine: decode "
                    "splits its keys";
  def.online_func = std::make_shared<OnlineRetentionCombine>();
  return def;
}

} // namespace attn::examples
