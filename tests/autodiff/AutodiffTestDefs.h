// Online functions and helpers for the autodiff tests: online functions
// written as lambdas, and evaluation of IR nodes at a point.
#ifndef ATTN_TESTS_AUTODIFF_AUTODIFFTESTDEFS_H
#define ATTN_TESTS_AUTODIFF_AUTODIFFTESTDEFS_H

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/dsl/Definition.h"
#include "attn/reference/Evaluator.h"

#include <functional>
#include <map>
#include <memory>
#include <string>

namespace attn::autodifftest {

using dsl::OnlineFwdResult;
using dsl::Rowscales;
using dsl::SymbolScalar;

/// An online function from three lambdas and no backward.
class LambdaOnline final : public dsl::OnlineFunc {
public:
  using FwdFn = std::function<OnlineFwdResult(SymbolScalar, const Rowscales &)>;
  using EpiFn =
      std::function<dsl::EpilogueResult(SymbolScalar, const Rowscales &)>;
  using PFn = std::function<SymbolScalar(SymbolScalar, const Rowscales &)>;
  LambdaOnline(Decls Online, Decls Final, FwdFn F, EpiFn E, PFn P)
      : OnlineFunc(std::move(Online), std::move(Final)), F(std::move(F)),
        E(std::move(E)), P(std::move(P)) {}
  OnlineFwdResult online_fwd(SymbolScalar s, const Rowscales &rs,
                             SymbolScalar, SymbolScalar,
                             SymbolScalar) const override {
    return F(s, rs);
  }
  dsl::EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &rs,
                                          SymbolScalar, SymbolScalar,
                                          SymbolScalar) const override {
    return E(o, rs);
  }
  SymbolScalar forward(SymbolScalar s, const Rowscales &fr, SymbolScalar,
                       SymbolScalar, SymbolScalar,
                       SymbolScalar) const override {
    return P(s, fr);
  }

private:
  FwdFn F;
  EpiFn E;
  PFn P;
};

/// A definition around \p OF with score_mod = s/sqrt(D) and, if \p Causal,
/// a causal mask.
inline dsl::AttentionDef defWith(const std::string &Name,
                                 std::shared_ptr<const dsl::OnlineFunc> OF,
                                 bool Causal = true) {
  dsl::AttentionDef D(Name);
  D.score_mod = [](SymbolScalar s, const dsl::CustomInputs &in, SymbolScalar,
                   SymbolScalar, SymbolScalar, SymbolScalar) {
    return s * in.head_dim().rsqrt();
  };
  if (Causal)
    D.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q,
                    SymbolScalar k) { return q >= k; };
  D.online_func = std::move(OF);
  return D;
}

/// Softmax whose finals are the max m and the sum r: P = exp(s − m)/r.
inline std::shared_ptr<const dsl::OnlineFunc> softmaxMR() {
  return std::make_shared<LambdaOnline>(
      LambdaOnline::Decls{{"m", dsl::Var("-inf")}, {"r", dsl::Var(0.0)}},
      LambdaOnline::Decls{{"m", dsl::Var(0.0)}, {"r", dsl::Var(0.0)}},
      [](SymbolScalar s, const Rowscales &rs) {
        SymbolScalar m = rs["m"].max(s.get_reduce("max"));
        SymbolScalar scale = (rs["m"] - m).exp();
        SymbolScalar p = (s - m).exp();
        return OnlineFwdResult{
            p, {{"m", m}, {"r", rs["r"] * scale + p.get_reduce("sum")}},
            scale};
      },
      [](SymbolScalar o, const Rowscales &rs) {
        return dsl::EpilogueResult{o / rs["r"], {{"m", rs["m"]}, {"r", rs["r"]}}};
      },
      [](SymbolScalar s, const Rowscales &fr) {
        return (s - fr["m"]).exp() / fr["r"];
      });
}

/// P = exp(s − max_j s_j), not normalised: the max is no stabiliser here,
/// its gradient goes to the maximal key.
inline std::shared_ptr<const dsl::OnlineFunc> expMinusMax() {
  return std::make_shared<LambdaOnline>(
      LambdaOnline::Decls{{"m", dsl::Var("-inf")}},
      LambdaOnline::Decls{{"m", dsl::Var(0.0)}},
      [](SymbolScalar s, const Rowscales &rs) {
        SymbolScalar m = rs["m"].max(s.get_reduce("max"));
        return OnlineFwdResult{(s - m).exp(), {{"m", m}}, (rs["m"] - m).exp()};
      },
      [](SymbolScalar o, const Rowscales &rs) {
        return dsl::EpilogueResult{o, {{"m", rs["m"]}}};
      },
      [](SymbolScalar s, const Rowscales &fr) { return (s - fr["m"]).exp(); });
}

/// P = s / sqrt(Σ s²): the final n is solved for the sum, the score is
/// recovered from P as P·n.
inline std::shared_ptr<const dsl::OnlineFunc> l2Normalised() {
  return std::make_shared<LambdaOnline>(
      LambdaOnline::Decls{{"q", dsl::Var(0.0)}, {"n", dsl::Var(1.0)}},
      LambdaOnline::Decls{{"n", dsl::Var(0.0)}},
      [](SymbolScalar s, const Rowscales &rs) {
        SymbolScalar q = rs["q"] + (s * s).get_reduce("sum");
        SymbolScalar n = q.sqrt();
        return OnlineFwdResult{s / n, {{"q", q}, {"n", n}}, rs["n"] / n};
      },
      [](SymbolScalar o, const Rowscales &rs) {
        return dsl::EpilogueResult{o, {{"n", rs["n"]}}};
      },
      [](SymbolScalar s, const Rowscales &fr) { return s / fr["n"]; });
}

/// P = sigmoid(s − max): ∂P/∂m = −P(1 − P) is no multiple of P.
inline std::shared_ptr<const dsl::OnlineFunc> sigmoidMinusMax() {
  return std::make_shared<LambdaOnline>(
      LambdaOnline::Decls{{"m", dsl::Var("-inf")}},
      LambdaOnline::Decls{{"m", dsl::Var(0.0)}},
      [](SymbolScalar s, const Rowscales &rs) {
        SymbolScalar m = rs["m"].max(s.get_reduce("max"));
        return OnlineFwdResult{(s - m).sigmoid(), {{"m", m}}, 1.0};
      },
      [](SymbolScalar o, const Rowscales &rs) {
        return dsl::EpilogueResult{o, {{"m", rs["m"]}}};
      },
      [](SymbolScalar s, const Rowscales &fr) {
        return (s - fr["m"]).sigmoid();
      });
}

/// P = |s|: dP/ds = sign(s), and |·| cannot be solved for s from P.
inline std::shared_ptr<const dsl::OnlineFunc> absForward() {
  return std::make_shared<LambdaOnline>(
      LambdaOnline::Decls{}, LambdaOnline::Decls{},
      [](SymbolScalar s, const Rowscales &) {
        return OnlineFwdResult{s.abs(), {}, 1.0};
      },
      [](SymbolScalar o, const Rowscales &) {
        return dsl::EpilogueResult{o, {}};
      },
      [](SymbolScalar s, const Rowscales &) { return s.abs(); });
}

/// P = 1 whatever the scores: forward does not depend on them, so there is
/// no derivative to derive (the dsl fuzz target's find).
inline std::shared_ptr<const dsl::OnlineFunc> constantForward() {
  return std::make_shared<LambdaOnline>(
      LambdaOnline::Decls{}, LambdaOnline::Decls{},
      [](SymbolScalar s, const Rowscales &) {
        return OnlineFwdResult{s.constant(1.0), {}, 1.0};
      },
      [](SymbolScalar o, const Rowscales &) {
        return dsl::EpilogueResult{o, {}};
      },
      [](SymbolScalar s, const Rowscales &) { return s.constant(1.0); });
}

/// P = s / v with v = Σ s² − (Σ s)²: the final v does not determine Σ s,
/// which ∂v/∂s needs.
inline std::shared_ptr<const dsl::OnlineFunc> varianceNormalised() {
  return std::make_shared<LambdaOnline>(
      LambdaOnline::Decls{{"a", dsl::Var(0.0)}, {"q", dsl::Var(0.0)}},
      LambdaOnline::Decls{{"v", dsl::Var(0.0)}},
      [](SymbolScalar s, const Rowscales &rs) {
        SymbolScalar a = rs["a"] + s.get_reduce("sum");
        SymbolScalar q = rs["q"] + (s * s).get_reduce("sum");
        return OnlineFwdResult{s, {{"a", a}, {"q", q}}, 1.0};
      },
      [](SymbolScalar o, const Rowscales &rs) {
        return dsl::EpilogueResult{o, {{"v", rs["q"] - rs["a"] * rs["a"]}}};
      },
      [](SymbolScalar s, const Rowscales &fr) { return s / fr["v"]; });
}

/// Evaluates \p N of \p G at one point: each parameter's value by name
/// (params missing from \p Values are an error), D = 8.
inline double evalAt(const ir::Node *N,
                     const std::map<std::string, double> &Values) {
  reference::Evaluator E(
      [&](const ir::ParamNode &P) -> reference::Values {
        if (P.getParamKind() == ir::ParamKind::HeadDim)
          return {reference::Dual{8.0, 0.0}};
        auto It = Values.find(P.getName().str());
        if (It == Values.end())
          throw InternalError("test: no value for '" + P.getName().str() + "'");
        return {reference::Dual{It->second, 0.0}};
      },
      {true});
  return E.at(N, 0).V;
}

} // namespace attn::autodifftest

#endif
