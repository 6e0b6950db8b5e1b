// Custom-input values for the reference interpreter.
#include "attn/reference/InputBinding.h"

#include "attn/Error.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

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
  case ir::InputShape::PerQueryToken:
    return {B, Sq};
  case ir::InputShape::PerKeyToken:
    return {B, Skv};
  }
  return {};
}

int64_t inputOffset(const Tensor &T, ir::InputShape S, int64_t B, int64_t H,
                    int64_t I, int64_t J) {
  switch (S) {
  case ir::InputShape::Scalar:
    return 0;
  case ir::InputShape::PerHead:
    return T.offset({H});
  case ir::InputShape::PerRow:
    return T.offset({B, H, I});
  case ir::InputShape::PerKey:
    return T.offset({B, H, J});
  case ir::InputShape::Full:
    return T.offset({B, H, I, J});
  case ir::InputShape::PerQueryToken:
    return T.offset({B, I});
  case ir::InputShape::PerKeyToken:
    return T.offset({B, J});
  }
  throw InternalError("reference: input shape");
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
    if (D.Elem == ir::InputType::I32)
      for (double V : It->second.Data)
        if (V != std::trunc(V) || std::fabs(V) >= 2147483648.0)
          throw UserError("custom input '" + D.Name +
                          "' is int32, but holds " + std::to_string(V) +
                          ", not a whole number within int32");
  }
  for (const auto &[Name, Value] : Values)
    if (!G.decls().findInput(Name))
      throw UserError("custom input '" + Name + "' is supplied but '" +
                      G.name() + "' does not declare it");
}

InputValues sampleInputs(const ir::Graph &G, std::mt19937_64 &Rng, int64_t B,
                         int64_t H, int64_t Sq, int64_t Skv) {
  InputValues Out;
  // Token ids by sample range: [B, max(Sq, Skv)], of which each per-token
  // input of that range takes its sequence's prefix, so that the query and
  // the key side agree on the ids of the tokens they share.
  std::map<std::pair<double, double>, Tensor> TokenIds;
  auto SortRuns = [](Tensor &T, int64_t Run) {
    for (size_t At = 0; Run > 1 && At + size_t(Run) <= T.Data.size();
         At += size_t(Run))
      std::sort(T.Data.begin() + At, T.Data.begin() + At + Run);
  };
  for (const ir::InputDecl &D : G.decls().Inputs) {
    std::vector<int64_t> Shape = expectedInputShape(D.Shape, B, H, Sq, Skv);
    if (D.Elem == ir::InputType::F32) {
      Out[D.Name] = Tensor::uniform(Shape, Rng, D.SampleLo, D.SampleHi);
      continue;
    }
    std::uniform_int_distribution<int64_t> U(
        int64_t(std::ceil(D.SampleLo)), int64_t(std::floor(D.SampleHi)));
    auto Draw = [&](std::vector<int64_t> S) {
      Tensor T(std::move(S));
      for (double &V : T.Data)
        V = double(U(Rng));
      return T;
    };
    if (D.Shape == ir::InputShape::PerQueryToken ||
        D.Shape == ir::InputShape::PerKeyToken) {
      int64_t L = std::max(Sq, Skv);
      auto Range = std::make_pair(D.SampleLo, D.SampleHi);
      auto It = TokenIds.find(Range);
      if (It == TokenIds.end()) {
        Tensor Ids = Draw({B, L});
        SortRuns(Ids, L);
        It = TokenIds.emplace(Range, std::move(Ids)).first;
      }
      Tensor T(Shape);
      for (int64_t Bi = 0; Bi < B; ++Bi)
        for (int64_t J = 0; J < Shape[1]; ++J)
          T.at({Bi, J}) = It->second.at({Bi, J});
      Out[D.Name] = std::move(T);
      continue;
    }
    Tensor T = Draw(Shape);
    // Non-decreasing runs along the sequence (the last dimension).
    if (D.Shape == ir::InputShape::PerRow || D.Shape == ir::InputShape::PerKey)
      SortRuns(T, Shape.back());
    Out[D.Name] = std::move(T);
  }
  return Out;
}

Values bindInput(const ir::Graph &G, const InputValues &Vals,
                 llvm::StringRef Name, int64_t B, int64_t H, int64_t I,
                 int64_t C0, int64_t C1) {
  const ir::InputDecl *D = G.decls().findInput(Name);
  if (!D)
    throw InternalError("reference: unknown input '" + Name.str() + "'");
  const Tensor &T = Vals.at(Name.str());
  if (ir::inputShapeSpace(D->Shape) != ir::Space::Col &&
      ir::inputShapeSpace(D->Shape) != ir::Space::Tile)
    return {Dual{T.Data.at(inputOffset(T, D->Shape, B, H, I, 0)), 0.0}};
  Values V;
  for (int64_t J = C0; J < C1; ++J)
    V.push_back({T.Data.at(inputOffset(T, D->Shape, B, H, I, J)), 0.0});
  return V;
}

} // namespace attn::reference
