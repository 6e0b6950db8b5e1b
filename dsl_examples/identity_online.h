// The identity online function shared by attention variants without
// normalisation (sigmoid, ReLU): P is the modified score itself.
#ifndef ATTN_DSL_EXAMPLES_IDENTITY_ONLINE_H
#define ATTN_DSL_EXAMPLES_IDENTITY_ONLINE_H

#include "attn/dsl/Definition.h"

namespace attn::examples {

class OnlineIdentity final : public dsl::OnlineFunc {
public:
  OnlineIdentity() : OnlineFunc({}, {}) {}

  dsl::OnlineFwdResult online_fwd(dsl::SymbolScalar scores,
                                  const dsl::Rowscales &, dsl::SymbolScalar,
                                  dsl::SymbolScalar,
                                  dsl::SymbolScalar) const override {
    return {scores, {}, 1.0};
  }
  dsl::EpilogueResult online_fwd_epilogue(dsl::SymbolScalar o,
                                          const dsl::Rowscales &,
                                          dsl::SymbolScalar, dsl::SymbolScalar,
                                          dsl::SymbolScalar) const override {
    return {o, {}};
  }
  dsl::SymbolScalar forward(dsl::SymbolScalar scores, const dsl::Rowscales &,
                            dsl::SymbolScalar, dsl::SymbolScalar,
                            dsl::SymbolScalar,
                            dsl::SymbolScalar) const override {
    return scores;
  }
  /// P = scores, so dscores = dP; the non-linearity lives in score_mod and
  /// its derivative is applied by the chain rule through score_mod.
  std::optional<dsl::SymbolScalar>
  backward(dsl::SymbolScalar dp, dsl::SymbolScalar, const dsl::Rowscales &,
           dsl::SymbolScalar, dsl::SymbolScalar, dsl::SymbolScalar,
           dsl::SymbolScalar, dsl::SymbolScalar) const override {
    return dp;
  }
};

} // namespace attn::examples

#endif
