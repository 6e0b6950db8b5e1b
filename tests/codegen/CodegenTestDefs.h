// Small definitions shared by the codegen tests: custom inputs and masks.
#ifndef ATTN_TESTS_CODEGEN_CODEGENTESTDEFS_H
#define ATTN_TESTS_CODEGEN_CODEGENTESTDEFS_H

#include "Examples.h"

#include "attn/Pipeline.h"
#include "attn/dsl/Definition.h"
#include "attn/dsl/Registry.h"

#include <memory>
#include <vector>

namespace attn::test {

/// Online softmax (m, r; final lse) without a backward.
class Softmax final : public dsl::OnlineFunc {
public:
  Softmax()
      : OnlineFunc({{"m", dsl::Var("-inf")}, {"r", dsl::Var(0.0)}},
                   {{"lse", dsl::Var(0.0)}}) {}
  dsl::OnlineFwdResult online_fwd(dsl::SymbolScalar s, const dsl::Rowscales &rs,
                                  dsl::SymbolScalar, dsl::SymbolScalar,
                                  dsl::SymbolScalar) const override {
    dsl::SymbolScalar m = rs["m"].max(s.get_reduce("max"));
    dsl::SymbolScalar scale = (rs["m"] - m).exp();
    dsl::SymbolScalar p = (s - m).exp();
    return {p, {{"m", m}, {"r", rs["r"] * scale + p.get_reduce("sum")}}, scale};
  }
  dsl::EpilogueResult online_fwd_epilogue(dsl::SymbolScalar o,
                                          const dsl::Rowscales &rs,
                                          dsl::SymbolScalar, dsl::SymbolScalar,
                                          dsl::SymbolScalar) const override {
    return {o / rs["r"], {{"lse", rs["r"].log() + rs["m"]}}};
  }
  dsl::SymbolScalar forward(dsl::SymbolScalar s, const dsl::Rowscales &fr,
                            dsl::SymbolScalar, dsl::SymbolScalar,
                            dsl::SymbolScalar,
                            dsl::SymbolScalar) const override {
    return (s - fr["lse"]).exp();
  }
};

/// A causal softmax whose score_mod reads a scalar and one input of each
/// tensor shape class, declared in this order: temp, slopes (per_head),
/// row_bias (per_row), key_bias (per_key), bias (full).
inline dsl::AttentionDef tensorInputs() {
  dsl::AttentionDef Def("tensor_inputs");
  Def.inputs.declare("temp", dsl::InputShape::Scalar)
      .declare("slopes", dsl::InputShape::PerHead)
      .declare("row_bias", dsl::InputShape::PerRow)
      .declare("key_bias", dsl::InputShape::PerKey)
      .declare("bias", dsl::InputShape::Full);
  Def.score_mod = [](dsl::SymbolScalar s, const dsl::CustomInputs &in,
                     dsl::SymbolScalar, dsl::SymbolScalar, dsl::SymbolScalar q,
                     dsl::SymbolScalar kv) {
    return s * in["temp"] - in["slopes"] * (q - kv) + in["row_bias"] +
           in["key_bias"] + in["bias"];
  };
  Def.mask_mod = [](dsl::SymbolScalar, dsl::SymbolScalar, dsl::SymbolScalar q,
                    dsl::SymbolScalar kv) { return q >= kv; };
  Def.online_func = std::make_shared<Softmax>();
  return Def;
}

/// Softmax with a mask built by \p Mask (a five-argument mask_mod).
inline dsl::AttentionDef maskedSoftmax(const char *Name, dsl::MaskMod Mask) {
  dsl::AttentionDef Def(Name);
  Def.inputs.declare("doc_q", dsl::InputShape::PerRow, 0.0, 0.0)
      .declare("doc_k", dsl::InputShape::PerKey, 0.0, 0.0);
  Def.score_mod = [](dsl::SymbolScalar s, const dsl::CustomInputs &,
                     dsl::SymbolScalar, dsl::SymbolScalar, dsl::SymbolScalar,
                     dsl::SymbolScalar) { return s; };
  Def.mask_mod = std::move(Mask);
  Def.online_func = std::make_shared<Softmax>();
  return Def;
}

/// Heads above 0 see everything; head 0 is causal.
inline dsl::AttentionDef headMask() {
  return maskedSoftmax("head_mask",
                       [](dsl::SymbolScalar, dsl::SymbolScalar h,
                          dsl::SymbolScalar q, dsl::SymbolScalar kv) {
                         return (q >= kv) | (h > 0);
                       });
}

inline dsl::AttentionDef batchMask() {
  return maskedSoftmax("batch_mask",
                       [](dsl::SymbolScalar b, dsl::SymbolScalar,
                          dsl::SymbolScalar q, dsl::SymbolScalar kv) {
                         return (q >= kv) | (b > 0);
                       });
}

/// Causal within documents whose ids are per-row/per-key inputs.
inline dsl::AttentionDef documentMask() {
  return maskedSoftmax("document_mask",
                       [](dsl::SymbolScalar, dsl::SymbolScalar,
                          dsl::SymbolScalar q, dsl::SymbolScalar kv,
                          const dsl::CustomInputs &in) {
                         return (q >= kv) & (in["doc_q"] == in["doc_k"]);
                       });
}

/// A mask through exp, which has no interval rule: element-evaluated.
inline dsl::AttentionDef expMask() {
  return maskedSoftmax("exp_mask", [](dsl::SymbolScalar, dsl::SymbolScalar,
                                      dsl::SymbolScalar q, dsl::SymbolScalar kv) {
    return ((kv - q) * 0.01).exp() <= 1.0;
  });
}

/// A mask reading a full [B,H,Sq,Skv] input: element-evaluated.
inline dsl::AttentionDef fullInputMask() {
  dsl::AttentionDef Def = maskedSoftmax(
      "full_input_mask", [](dsl::SymbolScalar, dsl::SymbolScalar,
                            dsl::SymbolScalar q, dsl::SymbolScalar kv,
                            const dsl::CustomInputs &in) {
        return (q >= kv) & (in["keep"] > 0.0);
      });
  Def.inputs.declare("keep", dsl::InputShape::Full);
  return Def;
}

/// The registered linear-attention examples.
inline std::vector<const dsl::DefinitionBase *> linearExamples() {
  static const dsl::Registry R = [] {
    dsl::Registry X;
    examples::registerExamples(X);
    return X;
  }();
  std::vector<const dsl::DefinitionBase *> Linear;
  for (const dsl::DefinitionBase *D : R.all())
    if (D->kind() == ir::DefinitionKind::Linear)
      Linear.push_back(D);
  return Linear;
}

} // namespace attn::test

#endif
