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
