// Reference attention over packed variable-length batches: sequence by
// sequence through the dense reference, with q_idx shifted bottom-right.
#include "attn/reference/Varlen.h"

#include "attn/Error.h"

#include <fmt/format.h>

#include <limits>
#include <tuple>

namespace attn::reference {

namespace {

struct Span {
  int64_t Q0, Sq, K0, Skv;
};

Span spanOf(const VarlenInputs &In, size_t B) {
  return {In.CuSeqlensQ[B], In.CuSeqlensQ[B + 1] - In.CuSeqlensQ[B],
          In.CuSeqlensKv[B], In.CuSeqlensKv[B + 1] - In.CuSeqlensKv[B]};
}

/// Tokens [T0, T0 + S) of packed \p P ([T, H, X]) as a dense [1, H, S, X].
Tensor unpack(const Tensor &P, int64_t T0, int64_t S) {
  int64_t H = P.dim(1), X = P.dim(2);
  Tensor D({1, H, S, X});
  for (int64_t I = 0; I < S; ++I)
    for (int64_t Hi = 0; Hi < H; ++Hi)
      for (int64_t J = 0; J < X; ++J)
        D.at({0, Hi, I, J}) = P.at({T0 + I, Hi, J});
  return D;
}

/// Adds dense [1, H, S, X] \p D into tokens [T0, T0 + S) of packed \p P.
void pack(Tensor &P, int64_t T0, const Tensor &D) {
  for (int64_t I = 0; I < D.dim(2); ++I)
    for (int64_t Hi = 0; Hi < D.dim(1); ++Hi)
      for (int64_t J = 0; J < D.dim(3); ++J)
        P.at({T0 + I, Hi, J}) += D.at({0, Hi, I, J});
}

/// Tokens [T0, T0 + S) of a packed input: [H, T] as a dense [1, H, S], [T]
/// as [1, S].
Tensor sliceTokens(const Tensor &P, int64_t T0, int64_t S) {
  if (P.Shape.size() == 1) {
    Tensor D({1, S});
    for (int64_t I = 0; I < S; ++I)
      D.at({0, I}) = P.at({T0 + I});
    return D;
  }
  Tensor D({1, P.dim(0), S});
  for (int64_t Hi = 0; Hi < P.dim(0); ++Hi)
    for (int64_t I = 0; I < S; ++I)
      D.at({0, Hi, I}) = P.at({Hi, T0 + I});
  return D;
}

/// Sequence \p B of \p In as a dense call of one batch. Per-row and
/// per-query-token inputs take the sequence's query tokens, per-key and
/// per-key-token ones its key tokens: a row reads its token's value, whatever
/// q_idx the bottom-right rule gives it (as the dense reference indexes
/// them by the row, not by q_idx).
AttentionInputs denseOf(const ir::Graph &G, const VarlenInputs &In, size_t B,
                        const Span &S) {
  AttentionInputs D;
  D.Q = unpack(In.Q, S.Q0, S.Sq);
  D.K = unpack(In.K, S.K0, S.Skv);
  D.V = unpack(In.V, S.K0, S.Skv);
  D.Inputs = In.Inputs;
  for (const ir::InputDecl &Decl : G.decls().Inputs) {
    auto It = D.Inputs.find(Decl.Name);
    if (It == D.Inputs.end())
      continue; // validateVarlenInputs reported it
    switch (Decl.Shape) {
    case ir::InputShape::Scalar:
    case ir::InputShape::PerHead:
    case ir::InputShape::Full: // refused by validateVarlenInputs
      break;
    case ir::InputShape::PerRow:
    case ir::InputShape::PerQueryToken:
      It->second = sliceTokens(It->second, S.Q0, S.Sq);
      break;
    case ir::InputShape::PerKey:
    case ir::InputShape::PerKeyToken:
      It->second = sliceTokens(It->second, S.K0, S.Skv);
      break;
    }
  }
  D.RoundProbs = In.RoundProbs;
  D.QIndexOffset = S.Skv - S.Sq;
  D.BatchIndexOffset = int64_t(B);
  return D;
}

} // namespace

void validateVarlenInputs(const ir::Graph &G, const VarlenInputs &In) {
  for (const auto *T : {&In.Q, &In.K, &In.V})
    if (T->Shape.size() != 3)
      throw UserError("reference: packed q, k and v must be [tokens, heads, "
                      "dim], got " +
                      T->shapeString());
  int64_t H = In.Q.dim(1), Hkv = In.K.dim(1);
  if (In.V.dim(1) != Hkv || Hkv < 1 || H % Hkv != 0 ||
      In.V.dim(0) != In.K.dim(0) || In.K.dim(2) != In.Q.dim(2))
    throw UserError("reference: packed k and v must have the same tokens and "
                    "heads (dividing q's), k q's head dim; got q " +
                    In.Q.shapeString() + ", k " + In.K.shapeString() +
                    ", v " + In.V.shapeString());
  if (In.CuSeqlensQ.size() < 2 ||
      In.CuSeqlensKv.size() != In.CuSeqlensQ.size())
    throw UserError(fmt::format(
        "reference: cu_seqlens_q and cu_seqlens_kv must have the same B + 1 "
        ">= 2 entries, got {} and {}",
        In.CuSeqlensQ.size(), In.CuSeqlensKv.size()));
  for (auto [Name, Cu, Tokens] :
       {std::tuple{"cu_seqlens_q", &In.CuSeqlensQ, In.Q.dim(0)},
        {"cu_seqlens_kv", &In.CuSeqlensKv, In.K.dim(0)}}) {
    if ((*Cu)[0] != 0)
      throw UserError(fmt::format("reference: {} must start at 0, got {}",
                                  Name, (*Cu)[0]));
    for (size_t I = 1; I < Cu->size(); ++I)
      if ((*Cu)[I] < (*Cu)[I - 1])
        throw UserError(fmt::format("reference: {} must not decrease, got "
                                    "{} after {} at entry {}",
                                    Name, (*Cu)[I], (*Cu)[I - 1], I));
    if (Cu->back() > Tokens)
      throw UserError(fmt::format("reference: {} ends at {}, past the {} "
                                  "tokens",
                                  Name, Cu->back(), Tokens));
  }
  const int64_t Tq = In.Q.dim(0), Tkv = In.K.dim(0);
  for (const ir::InputDecl &D : G.decls().Inputs) {
    std::vector<int64_t> Want;
    switch (D.Shape) {
    case ir::InputShape::Scalar:
    case ir::InputShape::PerHead:
      continue; // the dense reference checks them
    case ir::InputShape::Full:
      throw NotSupportedYet(fmt::format(
          "input '{}': full inputs in packed variable-length calls", D.Name));
    case ir::InputShape::PerRow:
      Want = {H, Tq};
      break;
    case ir::InputShape::PerKey:
      Want = {H, Tkv};
      break;
    case ir::InputShape::PerQueryToken:
      Want = {Tq};
      break;
    case ir::InputShape::PerKeyToken:
      Want = {Tkv};
      break;
    }
    auto It = In.Inputs.find(D.Name);
    if (It == In.Inputs.end())
      throw UserError("custom input '" + D.Name +
                      "' is declared but no value was supplied");
    if (It->second.Shape != Want)
      throw UserError(fmt::format(
          "custom input '{}' ({}) must have shape {} in a packed call, got {}",
          D.Name, ir::inputShapeName(D.Shape).str(), Tensor(Want).shapeString(),
          It->second.shapeString()));
  }
}

AttentionOutputs attentionVarlen(const CompiledDefinition &Def,
                                 const VarlenInputs &In, int64_t BlockN) {
  const ir::Graph &G = *Def.Graph;
  validateVarlenInputs(G, In);
  int64_t Tq = In.Q.dim(0), H = In.Q.dim(1), DV = In.V.dim(2);
  AttentionOutputs Out;
  Out.O = Tensor({Tq, H, DV});
  for (const ir::RowscaleDecl &D : G.decls().FinalRowscales)
    Out.Finals[D.Name] =
        Tensor({H, Tq}, -std::numeric_limits<double>::infinity());
  for (size_t B = 0; B + 1 < In.CuSeqlensQ.size(); ++B) {
    Span S = spanOf(In, B);
    // No keys: every row is fully masked (o = 0, finals = -inf, as set).
    if (S.Sq == 0 || S.Skv == 0)
      continue;
    AttentionOutputs D = attentionOnline(Def, denseOf(G, In, B, S), BlockN);
    pack(Out.O, S.Q0, D.O);
    for (auto &[Name, F] : D.Finals)
      for (int64_t Hi = 0; Hi < H; ++Hi)
        for (int64_t I = 0; I < S.Sq; ++I)
          Out.Finals[Name].at({Hi, S.Q0 + I}) = F.at({0, Hi, I});
  }
  return Out;
}

AttentionGrads attentionVarlenBackward(const CompiledDefinition &Def,
                                       const VarlenInputs &In,
                                       const Tensor &DO) {
  const ir::Graph &G = *Def.Graph;
  validateVarlenInputs(G, In);
  if (DO.Shape != std::vector<int64_t>{In.Q.dim(0), In.Q.dim(1), In.V.dim(2)})
    throw UserError("reference: dout must be [tokens, heads, head_dim_v] as "
                    "q's, got " +
                    DO.shapeString());
  AttentionGrads Grads{Tensor(In.Q.Shape), Tensor(In.K.Shape),
                       Tensor(In.V.Shape), {}};
  for (size_t B = 0; B + 1 < In.CuSeqlensQ.size(); ++B) {
    Span S = spanOf(In, B);
    if (S.Sq == 0 || S.Skv == 0)
      continue; // no score reads this sequence's q or k: zero gradients
    AttentionGrads D =
        attentionBackward(Def, denseOf(G, In, B, S), unpack(DO, S.Q0, S.Sq));
    pack(Grads.DQ, S.Q0, D.DQ);
    pack(Grads.DK, S.K0, D.DK);
    pack(Grads.DV, S.K0, D.DV);
    for (auto &[Name, T] : D.DInputs) {
      const ir::InputDecl *Decl = G.decls().findInput(Name);
      if (Decl && (Decl->Shape == ir::InputShape::PerRow ||
                   Decl->Shape == ir::InputShape::PerKey ||
                   Decl->Shape == ir::InputShape::PerQueryToken ||
                   Decl->Shape == ir::InputShape::PerKeyToken)) {
        // The sequence's slice ([1, H, S] or [1, S]) into its tokens.
        const bool QuerySide = Decl->Shape == ir::InputShape::PerRow ||
                               Decl->Shape == ir::InputShape::PerQueryToken;
        const int64_t T0 = QuerySide ? S.Q0 : S.K0;
        Tensor &P = Grads.DInputs.try_emplace(Name, Tensor(In.Inputs.at(Name).Shape))
                        .first->second;
        if (P.Shape.size() == 1)
          for (int64_t I = 0; I < T.dim(1); ++I)
            P.at({T0 + I}) += T.at({0, I});
        else
          for (int64_t Hi = 0; Hi < T.dim(1); ++Hi)
            for (int64_t I = 0; I < T.dim(2); ++I)
              P.at({Hi, T0 + I}) += T.at({0, Hi, I});
        continue;
      }
      auto [It, New] = Grads.DInputs.try_emplace(Name, T);
      if (!New)
        for (int64_t I = 0; I < T.numel(); ++I)
          It->second.Data[I] += T.Data[I];
    }
  }
  // Inputs whose gradient no sequence reached are zeros of their shape.
  for (const auto &[Name, Value] : In.Inputs)
    if (!Grads.DInputs.count(Name) && G.decls().findInput(Name) &&
        G.decls().findInput(Name)->RequiresGrad)
      Grads.DInputs[Name] = Tensor(Value.Shape);
  return Grads;
}

} // namespace attn::reference
