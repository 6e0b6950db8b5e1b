// Shared test definitions: a breakable online softmax, inputs.
#ifndef ATTN_TESTS_COMMON_TESTDEFS_H
#define ATTN_TESTS_COMMON_TESTDEFS_H

#include "attn/Pipeline.h"
#include "attn/dsl/Definition.h"
#include "attn/reference/Attention.h"
#include "attn/reference/InputBinding.h"

#include <memory>
#include <random>

namespace attn::testdefs {

using dsl::Rowscales;
using dsl::SymbolScalar;

/// The backward an OnlineSoftmax has.
enum class SoftmaxBackward {
  Exact,    ///< (dp - doosum) * p
  NoDoosum, ///< dp * p: forgets that the normaliser depends on the scores
  None,     ///< not written
};

/// mha's online softmax; \p RescaleSum = false forgets `r = r * scale_tmp`,
/// so the running sum of earlier blocks is not rescaled to the new maximum.
class OnlineSoftmax final : public dsl::OnlineFunc {
public:
  explicit OnlineSoftmax(bool RescaleSum = true,
                         SoftmaxBackward Bwd = SoftmaxBackward::Exact)
      : OnlineFunc({{"m", dsl::Var("-inf")}, {"r", dsl::Var(0.0)}},
                   {{"lse", dsl::Var(0.0)}}),
        RescaleSum(RescaleSum), Bwd(Bwd) {}

  dsl::OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                                  SymbolScalar, SymbolScalar,
                                  SymbolScalar) const override {
    SymbolScalar m = rs["m"], r = rs["r"];
    SymbolScalar m_new = m.max(scores.get_reduce("max"));
    SymbolScalar scale_tmp = (m - m_new).exp();
    if (RescaleSum)
      r = r * scale_tmp;
    scores = (scores - m_new).exp();
    r = r + scores.get_reduce("sum");
    return {scores, {{"m", m_new}, {"r", r}}, scale_tmp};
  }
  dsl::EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &rs,
                                          SymbolScalar, SymbolScalar,
                                          SymbolScalar) const override {
    return {o / rs["r"], {{"lse", rs["r"].log() + rs["m"]}}};
  }
  SymbolScalar forward(SymbolScalar scores, const Rowscales &fr, SymbolScalar,
                       SymbolScalar, SymbolScalar,
                       SymbolScalar) const override {
    return (scores - fr["lse"]).exp();
  }
  std::optional<SymbolScalar> backward(SymbolScalar dp, SymbolScalar p,
                                       const Rowscales &, SymbolScalar doosum,
                                       SymbolScalar, SymbolScalar, SymbolScalar,
                                       SymbolScalar) const override {
    switch (Bwd) {
    case SoftmaxBackward::Exact:
      return (dp - doosum) * p;
    case SoftmaxBackward::NoDoosum:
      return dp * p;
    case SoftmaxBackward::None:
      break;
    }
    return std::nullopt;
  }

private:
  bool RescaleSum;
  SoftmaxBackward Bwd;
};

/// Softmax attention scaled by 1/sqrt(D), no mask, with the given online
/// function.
inline dsl::AttentionDef softmaxDef(const std::string &Name,
                                    std::shared_ptr<const dsl::OnlineFunc> F) {
  dsl::AttentionDef Def(Name);
  Def.score_mod = [](SymbolScalar s, const dsl::CustomInputs &in, SymbolScalar,
                     SymbolScalar, SymbolScalar,
                     SymbolScalar) { return s * in.head_dim().rsqrt(); };
  Def.online_func = std::move(F);
  return Def;
}

/// A combine written by the definition (OnlineFunc::combine): the right
/// one, or one that forgets to rescale each part's o to the union's
/// normaliser (o = o_a + o_b).
enum class UserCombine { None, Exact, NoRescale };

/// retention's online function, a running abssum normaliser r = max(sum
/// |s|, 1) that the merge analysis cannot classify, with a chosen combine.
class OnlineAbsNorm final : public dsl::OnlineFunc {
public:
  explicit OnlineAbsNorm(UserCombine C)
      : OnlineFunc({{"r_raw", dsl::Var(0.0)}, {"r", dsl::Var(0.0)}},
                   {{"r", dsl::Var(0.0)}, {"r_raw", dsl::Var(0.0)}}),
        C(C) {}
  dsl::OnlineFwdResult online_fwd(SymbolScalar s, const Rowscales &rs,
                                  SymbolScalar, SymbolScalar,
                                  SymbolScalar) const override {
    SymbolScalar r_raw = rs["r_raw"] + s.get_reduce("abssum");
    SymbolScalar r_new = r_raw.max(1.0);
    SymbolScalar o_scale = rs["r"] / r_new;
    return {s / r_new, {{"r_raw", r_raw}, {"r", r_new}}, o_scale};
  }
  dsl::EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &rs,
                                          SymbolScalar, SymbolScalar,
                                          SymbolScalar) const override {
    return {o, {{"r", rs["r"]}, {"r_raw", rs["r_raw"]}}};
  }
  SymbolScalar forward(SymbolScalar s, const Rowscales &fr, SymbolScalar,
                       SymbolScalar, SymbolScalar,
                       SymbolScalar) const override {
    return s / fr["r"];
  }
  /// retention's exact gradient (the check compares it with differences).
  std::optional<SymbolScalar>
  backward(SymbolScalar dp, SymbolScalar s, const Rowscales &fr,
           SymbolScalar doosum, SymbolScalar, SymbolScalar, SymbolScalar,
           SymbolScalar) const override {
    SymbolScalar negative = dsl::select(s < 0.0, -1.0, 0.0);
    SymbolScalar sign = dsl::select(s > 0.0, 1.0, negative);
    SymbolScalar through_doosum = sign * doosum;
    SymbolScalar unclamped = fr["r_raw"] > 1.0;
    SymbolScalar through_norm = dsl::select(unclamped, through_doosum, 0.0);
    return (dp - through_norm) / fr["r"];
  }
  std::optional<dsl::CombineResult>
  combine(const Rowscales &a, const Rowscales &b) const override {
    if (C == UserCombine::None)
      return std::nullopt;
    SymbolScalar r_raw = a["r_raw"] + b["r_raw"];
    SymbolScalar r = r_raw.max(1.0);
    if (C == UserCombine::NoRescale)
      return dsl::CombineResult{{{"r_raw", r_raw}, {"r", r}}, 1.0, 1.0};
    return dsl::CombineResult{{{"r_raw", r_raw}, {"r", r}}, a["r"] / r,
                              b["r"] / r};
  }

private:
  UserCombine C;
};

/// mha's online softmax (no backward) with a combine of its own, which the
/// derived log-sum-exp merge takes precedence over.
class OnlineSoftmaxCombine final : public dsl::OnlineFunc {
public:
  explicit OnlineSoftmaxCombine(UserCombine C)
      : OnlineFunc({{"m", dsl::Var("-inf")}, {"r", dsl::Var(0.0)}},
                   {{"lse", dsl::Var(0.0)}}),
        C(C) {}
  dsl::OnlineFwdResult online_fwd(SymbolScalar s, const Rowscales &rs,
                                  SymbolScalar, SymbolScalar,
                                  SymbolScalar) const override {
    SymbolScalar m_new = rs["m"].max(s.get_reduce("max"));
    SymbolScalar scale = (rs["m"] - m_new).exp();
    SymbolScalar p = (s - m_new).exp();
    SymbolScalar r = rs["r"] * scale + p.get_reduce("sum");
    return {p, {{"m", m_new}, {"r", r}}, scale};
  }
  dsl::EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &rs,
                                          SymbolScalar, SymbolScalar,
                                          SymbolScalar) const override {
    return {o / rs["r"], {{"lse", rs["r"].log() + rs["m"]}}};
  }
  SymbolScalar forward(SymbolScalar s, const Rowscales &fr, SymbolScalar,
                       SymbolScalar, SymbolScalar,
                       SymbolScalar) const override {
    return (s - fr["lse"]).exp();
  }
  std::optional<dsl::CombineResult>
  combine(const Rowscales &a, const Rowscales &b) const override {
    if (C == UserCombine::None)
      return std::nullopt;
    SymbolScalar m = a["m"].max(b["m"]);
    SymbolScalar fa = (a["m"] - m).exp();
    SymbolScalar fb = (b["m"] - m).exp();
    if (C == UserCombine::NoRescale)
      return dsl::CombineResult{{{"m", m}, {"r", a["r"] + b["r"]}}, 1.0, 1.0};
    SymbolScalar ra = a["r"] * fa;
    SymbolScalar r = ra + b["r"] * fb;
    return dsl::CombineResult{{{"m", m}, {"r", r}}, fa, fb};
  }

private:
  UserCombine C;
};

/// Random q, k, v ([B,H,Sq,D], [B,Hkv,Skv,D], [B,Hkv,Skv,DV]) and sampled
/// custom inputs for \p C's graph.
inline reference::AttentionInputs randomInputs(const CompiledDefinition &C,
                                               std::mt19937_64 &Rng, int64_t B,
                                               int64_t H, int64_t Hkv,
                                               int64_t Sq, int64_t Skv,
                                               int64_t D, int64_t DV) {
  reference::AttentionInputs In;
  In.Q = reference::Tensor::normal({B, H, Sq, D}, Rng);
  In.K = reference::Tensor::normal({B, Hkv, Skv, D}, Rng);
  In.V = reference::Tensor::normal({B, Hkv, Skv, DV}, Rng);
  In.Inputs = reference::sampleInputs(*C.Graph, Rng, B, H, Sq, Skv);
  return In;
}

} // namespace attn::testdefs

#endif
