// Custom-input values for the reference interpreter.
#include "attn/reference/InputBinding.h"

#include "attn/Error.h"

namespace attn::reference {

std::vector<int64_t> expectedInputShape(ir::InputShape S, int64_t B,
                                        int64_t H, int64_t Sq, int64_t Skv) {
  switch (S) {
  case ir::InputShape::Scalar:
    return {};
  case ir::InputShape::PerHead:
    return {H};
  case ir::InputShape::PerRow:
    return {B, H, Sq};
  case ir::InputShape::PerKey:
    return {B, H, Skv};
  case ir::InputShape::Full:
    return {B, H, Sq, Skv};
  }
  return {};
}

void validateInputValues(const ir::Graph &G, const InputValues &Values,
                         int64_t B, int64_t H, int64_t Sq, int64_t Skv) {
  for (const ir::InputDecl &D : G.decls().Inputs) {
    auto It = Values.find(D.Name);
    if (It == Values.end())
      throw UserError("custom input '" + D.Name +
                      "' is declared but no value was supplied");
    Tensor Expected(expectedInputShape(D.Shape, B, H, Sq, Skv));
    if (It->second.Shape != Expected.Shape)
      throw UserError("custom input '" + D.Name + "' (" +
                      ir::inputShapeName(D.Shape).str() +
                      ") must have shape " + Expected.shapeString() +
                      ", got " + It->second.shapeString());
  }
  for (const auto &[Name, Value] : Values)
    if (!G.decls().findInput(Name))
      throw UserError("custom input '" + Name + "' is supplied but '" +
                      G.name() + "' does not declare it");
}

InputValues sampleInputs(const ir::Graph &G, std::mt19937_64 &Rng, int64_t B,
                         int64_t H, int64_t Sq, int64_t Skv) {
  InputValues Out;
  for (const ir::InputDecl &D : G.decls().Inputs)
    Out[D.Name] = Tensor::uniform(expectedInputShape(D.Shape, B, H, Sq, Skv),
                                  Rng, D.SampleLo, D.SampleHi);
  return Out;
}

Values bindInput(const ir::Graph &G, const InputValues &Vals,
                 llvm::StringRef Name, int64_t B, int64_t H, int64_t I,
                 int64_t C0, int64_t C1) {
  const ir::InputDecl *D = G.decls().findInput(Name);
  if (!D)
    throw InternalError("reference: unknown input '" + Name.str() + "'");
  const Tensor &T = Vals.at(Name.str());
  switch (D->Shape) {
  case ir::InputShape::Scalar:
    return {Dual{T.Data.at(0), 0.0}};
  case ir::InputShape::PerHead:
    return {Dual{T.at({H}), 0.0}};
  case ir::InputShape::PerRow:
    return {Dual{T.at({B, H, I}), 0.0}};
  case ir::InputShape::PerKey:
  case ir::InputShape::Full: {
    Values V;
    for (int64_t J = C0; J < C1; ++J)
      V.push_back({D->Shape == ir::InputShape::PerKey ? T.at({B, H, J})
                                                      : T.at({B, H, I, J}),
                   0.0});
    return V;
  }
  }
  return {};
}

} // namespace attn::reference
