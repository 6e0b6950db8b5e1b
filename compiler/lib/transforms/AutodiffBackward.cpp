// Deriving the online function's backward from forward and the final
// rowscales, which are reductions of the scores.
//
// With P_j = forward(s_j, F) and F the final rowscales, the gradient of
// Σ_j dP_j·P_j with respect to the score s_i is
//   dS_i = dP_i·∂fwd/∂s(s_i) + Σ_f ∂F_f/∂s_i · Σ_j dP_j·∂fwd/∂F_f(s_j).
// A kernel has only one row sum, doosum = Σ_j dP_j·P_j, so each
// ∂fwd/∂F_f must be c_f·P with c_f per row; then the inner sum is
// c_f·doosum. ∂F_f/∂s_i follows the final through the epilogue and
// online_fwd (one key block, rowscales at their initial values) to the
// reductions, and must then be written back in terms of the final
// rowscales and P alone, since that is all the backward sees.
#include "attn/transforms/Autodiff.h"
#include "attn/transforms/AutodiffAlgebra.h"
#include "attn/transforms/AutodiffBuilder.h"

#include "attn/ir/Printer.h"
#include "attn/ir/Walk.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/Casting.h"

namespace attn::transforms {

using ir::Node;
using ir::NodeKind;
using ir::ParamKind;

namespace {

/// Solves Root = Value for the node Target, which must occur on a single
/// path of invertible operations; nullptr otherwise.
const Node *invertFor(ir::Graph &G, const Node *Root, const Node *Target,
                      const Node *Value) {
  llvm::DenseSet<const Node *> Reaches;
  for (const Node *N : ir::topologicalOrder({Root})) {
    bool R = N == Target;
    for (const Node *Op : N->operands())
      R = R || Reaches.count(Op);
    if (R)
      Reaches.insert(N);
  }
  if (!Reaches.count(Root))
    return nullptr;
  DerivBuilder B(G);
  const Node *Cur = Root, *V = Value;
  while (Cur != Target) {
    int Which = -1;
    for (unsigned I = 0; I < Cur->operands().size(); ++I)
      if (Reaches.count(Cur->operand(I))) {
        if (Which >= 0)
          return nullptr; // on two paths: not solvable this way
        Which = int(I);
      }
    const Node *Other = Cur->operands().size() == 2
                            ? Cur->operand(1 - Which)
                            : nullptr;
    const Node *One = B.c(1.0);
    switch (Cur->getKind()) {
    case NodeKind::Neg:
      V = G.unary(NodeKind::Neg, V);
      break;
    case NodeKind::Add:
      V = G.binary(NodeKind::Sub, V, Other);
      break;
    case NodeKind::Sub:
      V = Which == 0 ? G.binary(NodeKind::Add, V, Other)
                     : G.binary(NodeKind::Sub, Other, V);
      break;
    case NodeKind::Mul:
      V = G.binary(NodeKind::Div, V, Other);
      break;
    case NodeKind::Div:
      V = Which == 0 ? G.binary(NodeKind::Mul, V, Other)
                     : G.binary(NodeKind::Div, Other, V);
      break;
    case NodeKind::Exp:
      V = G.unary(NodeKind::Log, V);
      break;
    case NodeKind::Exp2:
      V = G.unary(NodeKind::Log2, V);
      break;
    case NodeKind::Log:
      V = G.unary(NodeKind::Exp, V);
      break;
    case NodeKind::Log2:
      V = G.unary(NodeKind::Exp2, V);
      break;
    case NodeKind::Sqrt:
      V = G.binary(NodeKind::Mul, V, V);
      break;
    case NodeKind::Rsqrt:
      V = G.binary(NodeKind::Div, One, G.binary(NodeKind::Mul, V, V));
      break;
    case NodeKind::Sigmoid: // log(v / (1 - v))
      V = G.unary(NodeKind::Log,
                  G.binary(NodeKind::Div, V, G.binary(NodeKind::Sub, One, V)));
      break;
    case NodeKind::Tanh: // log((1 + v) / (1 - v)) / 2
      V = G.binary(NodeKind::Mul, B.c(0.5),
                   G.unary(NodeKind::Log,
                           G.binary(NodeKind::Div,
                                    G.binary(NodeKind::Add, One, V),
                                    G.binary(NodeKind::Sub, One, V))));
      break;
    case NodeKind::Const:
    case NodeKind::Param:
    case NodeKind::Abs:
    case NodeKind::Relu:
    case NodeKind::Not:
    case NodeKind::ToFloat:
    case NodeKind::Max:
    case NodeKind::Min:
    case NodeKind::FloorDiv:
    case NodeKind::Mod:
    case NodeKind::Lt:
    case NodeKind::Le:
    case NodeKind::Gt:
    case NodeKind::Ge:
    case NodeKind::Eq:
    case NodeKind::Ne:
    case NodeKind::And:
    case NodeKind::Or:
    case NodeKind::Select:
    case NodeKind::Reduce:
      return nullptr; // not invertible (or not as one value)
    }
    Cur = Cur->operand(Which);
  }
  return V;
}

bool allowedInBackward(const ir::ParamNode &P) {
  switch (P.getParamKind()) {
  case ParamKind::GradProbs:
  case ParamKind::Probs:
  case ParamKind::FinalRowscale:
  case ParamKind::Doosum:
  case ParamKind::Input:
  case ParamKind::HeadDim:
    return true;
  case ParamKind::Index:
    return P.getName() != "t";
  case ParamKind::Score:
  case ParamKind::Scores:
  case ParamKind::Output:
  case ParamKind::Rowscale:
  case ParamKind::Element:
  case ParamKind::OtherRowscale:
  case ParamKind::Decay:
    return false;
  }
  return false;
}

class Derivation {
public:
  explicit Derivation(ir::Graph &G) : G(G), A(G), B(G) {}
  void run();

private:
  [[noreturn]] void fail(const std::string &Where, const std::string &Why);
  void singleBlockFinals();
  void findStabilisers();
  void reductionDerivatives();
  void finalsSubstitution();
  const Node *express(const Node *E, const std::string &Where);
  bool dependsOnScores(const Node *N) {
    return ir::dependsOn(N, ParamKind::Scores);
  }

  ir::Graph &G;
  Algebra A;
  DerivBuilder B;
  const Node *S = nullptr, *Fwd = nullptr, *P = nullptr;
  std::vector<std::string> FinalNames;
  std::vector<const Node *> FinalParams, FinalExprs;
  std::vector<const ir::ReduceNode *> Reductions;
  llvm::DenseSet<const Node *> Stabilisers;
  NodeMap DR; ///< reduction → ∂R/∂s_i (element-level), nullptr for zero
  NodeMap FinalSubst;
  const Node *Inverse = nullptr; ///< the score from P, once solved for
};

void Derivation::fail(const std::string &Where, const std::string &Why) {
  throw CannotDerive(G.name() + ": cannot derive backward: " + Where + ": " +
                     Why + "; write OnlineFunc::backward");
}

/// Each final rowscale as a function of the reductions: the epilogue over
/// online_fwd's results for one key block holding every key, with the
/// online rowscales at their initial values (the direct definition, which
/// `attnc check` holds the online algorithm to).
void Derivation::singleBlockFinals() {
  const ir::Function &On = *G.getFunction("online_fwd");
  const ir::Function &Epi = *G.getFunction("online_fwd_epilogue");
  NodeMap Init, After;
  for (const ir::RowscaleDecl &D : G.decls().OnlineRowscales)
    Init[G.param(ParamKind::Rowscale, D.Name, ir::Type::F32, ir::Space::Row)] =
        G.constant(D.Init);
  for (const ir::RowscaleDecl &D : G.decls().OnlineRowscales)
    After[G.param(ParamKind::Rowscale, D.Name, ir::Type::F32,
                  ir::Space::Row)] = replaceNodes(G, On.result(D.Name), Init);
  for (const ir::RowscaleDecl &D : G.decls().FinalRowscales) {
    FinalNames.push_back(D.Name);
    FinalParams.push_back(G.param(ParamKind::FinalRowscale, D.Name,
                                  ir::Type::F32, ir::Space::Row));
    FinalExprs.push_back(replaceNodes(G, Epi.result(D.Name), After));
  }
  for (const Node *N : ir::topologicalOrder(FinalExprs))
    if (auto *R = llvm::dyn_cast<ir::ReduceNode>(N))
      Reductions.push_back(R);
}

/// A reduction is a stabiliser when forward, with the finals written in
/// terms of the reductions, does not change when the reduction moves (the
/// running max of softmax: exp(s − m)/Σ exp(s − m) ignores m). Its
/// gradient terms cancel exactly, so they are left out rather than built
/// and hoped to cancel in floating point.
void Derivation::findStabilisers() {
  NodeMap ToExprs;
  for (size_t F = 0; F < FinalParams.size(); ++F)
    ToExprs[FinalParams[F]] = FinalExprs[F];
  const Node *PFull = replaceNodes(G, Fwd, ToExprs);
  for (const ir::ReduceNode *R : Reductions) {
    try {
      if (A.isZero(tangent(G, PFull, {{R, B.c(1.0)}})))
        Stabilisers.insert(R);
    } catch (const CannotDerive &) {
      // Not provably constant: it takes part in the derivative.
    }
  }
}

/// ∂R/∂s_i for each reduction that is not a stabiliser, in dependency
/// order: the reduction's own rule at key i, plus the change through the
/// reductions its operand reads.
void Derivation::reductionDerivatives() {
  for (const ir::ReduceNode *R : Reductions) {
    if (Stabilisers.count(R))
      continue;
    const Node *X = R->operand(0);
    TangentSeeds Diag{{S, B.c(1.0)}};
    for (const ir::ReduceNode *O : Reductions)
      Diag[O] = nullptr;
    const Node *D =
        B.mul(localDerivative(G, R, 0), tangent(G, X, Diag));
    for (const ir::ReduceNode *O : Reductions) {
      if (O == R || !DR.lookup(O))
        continue;
      TangentSeeds Cross;
      for (const ir::ReduceNode *Q : Reductions)
        if (Q != R)
          Cross[Q] = Q == O ? B.c(1.0) : nullptr;
      D = B.add(D, B.mul(tangent(G, R, Cross), DR.lookup(O)));
    }
    DR[R] = D;
  }
}

/// What the backward can read instead of the reductions: a final that is
/// one atom (a reduction, max(a, 1), ...) stands for it; a final built from
/// one reduction besides stabilisers (lse = log Σ exp(s − m) + m) is solved
/// for that reduction.
void Derivation::finalsSubstitution() {
  for (size_t F = 0; F < FinalParams.size(); ++F)
    if (const Node *At = A.asAtom(FinalExprs[F]))
      FinalSubst.try_emplace(At, FinalParams[F]);
  for (size_t F = 0; F < FinalParams.size(); ++F) {
    const ir::ReduceNode *Only = nullptr;
    unsigned Count = 0;
    for (const Node *N : ir::topologicalOrder({FinalExprs[F]}))
      if (auto *R = llvm::dyn_cast<ir::ReduceNode>(N))
        if (!Stabilisers.count(R)) {
          Only = R;
          ++Count;
        }
    if (Count != 1)
      continue;
    const Node *At = A.asAtom(Only);
    if (!At || FinalSubst.count(At))
      continue;
    if (const Node *V = invertFor(G, FinalExprs[F], Only, FinalParams[F]))
      FinalSubst[At] = A.canonical(V);
  }
}

/// \p E rewritten over dp, P, the final rowscales, doosum, indices and
/// inputs, or a CannotDerive naming \p Where.
const Node *Derivation::express(const Node *E, const std::string &Where) {
  if (!E)
    return nullptr;
  const Node *X = A.substitute(E, FinalSubst);
  for (const Node *N : ir::topologicalOrder({X}))
    if (auto *R = llvm::dyn_cast<ir::ReduceNode>(N))
      fail(Where, "its derivative needs the reduction `" + ir::shortExpr(R) +
                      "`, which cannot be recovered from the final rowscales "
                      "(make it, or what determines it, a final rowscale)");
  auto Uses = [&](const Node *N) { return dependsOnScores(N); };
  X = A.factorUnit(X, Fwd, P, Uses);
  if (dependsOnScores(X)) {
    if (!Inverse) {
      const Node *V = invertFor(G, Fwd, S, P);
      if (!V)
        fail(Where, "its derivative `" + ir::shortExpr(X) +
                        "` needs the score itself, and forward `" +
                        ir::shortExpr(Fwd) +
                        "` cannot be solved for the score from P");
      Inverse = A.canonical(V);
    }
    X = A.substitute(X, {{S, Inverse}});
  }
  for (const ir::ParamNode *Prm : ir::reachableParams({X}))
    if (!allowedInBackward(*Prm))
      fail(Where, "its derivative `" + ir::shortExpr(X) + "` reads '" +
                      Prm->getName().str() + "', which backward does not see");
  return X;
}

void Derivation::run() {
  S = G.param(ParamKind::Scores, "scores", ir::Type::F32, ir::Space::Tile);
  // In the order the tracer makes them (dp, p, doosum): the printed IR, and
  // so the variant key, numbers nodes in creation order, and a graph loaded
  // from JSON (which keeps only reachable nodes) must print as the traced
  // one does.
  const Node *Dp =
      G.param(ParamKind::GradProbs, "dp", ir::Type::F32, ir::Space::Tile);
  P = G.param(ParamKind::Probs, "p", ir::Type::F32, ir::Space::Tile);
  const Node *Doosum =
      G.param(ParamKind::Doosum, "doosum", ir::Type::F32, ir::Space::Row);
  Fwd = G.getFunction("forward")->result("p");
  singleBlockFinals();
  findStabilisers();
  reductionDerivatives();
  finalsSubstitution();

  // dP_i · ∂fwd/∂s at s_i.
  const Node *Own = express(tangent(G, Fwd, {{S, B.c(1.0)}}),
                            "forward `" + ir::shortExpr(Fwd) + "`");
  // Σ_f c_f · ∂F_f/∂s_i, times doosum.
  const Node *ThroughFinals = nullptr;
  TangentSeeds ToDR;
  for (const ir::ReduceNode *R : Reductions)
    ToDR[R] = DR.lookup(R);
  for (size_t F = 0; F < FinalParams.size(); ++F) {
    std::string Where = "final rowscale '" + FinalNames[F] + "'";
    const Node *DFwd = tangent(G, Fwd, {{FinalParams[F], B.c(1.0)}});
    if (A.isZero(DFwd))
      continue;
    const Node *C = A.divide(DFwd, Fwd);
    if (!ir::isPerRowOrCoarser(C->getSpace()) || dependsOnScores(C))
      fail(Where,
           "forward's derivative with respect to it, `" + ir::shortExpr(DFwd) +
               "`, is not a per-row multiple of forward; the backward would "
               "need the row sum of dP times it, and a kernel has only "
               "doosum = rowsum(dP*P)");
    const Node *DFinal = tangent(G, FinalExprs[F], ToDR);
    if (A.isZero(DFinal))
      continue;
    ThroughFinals =
        B.add(ThroughFinals, express(B.mul(C, DFinal), Where));
  }
  const Node *DScores =
      A.canonical(B.add(B.mul(Dp, Own), B.mul(Doosum, ThroughFinals)));
  // Nothing of forward depends on the scores: there is no gradient to
  // derive (found by the dsl fuzz target; it reached the verifier empty).
  if (!DScores)
    fail("forward", "`" + ir::shortExpr(Fwd) +
                        "` does not depend on the scores, so its derivative "
                        "is zero everywhere; write a backward if that is "
                        "meant");
  ir::Function &Bwd = G.addFunction("backward");
  Bwd.Results.push_back({"dscores", DScores});
  G.decls().HasBackward = true;
  G.decls().BackwardDerived = true;
}

} // namespace

void deriveBackward(ir::Graph &G) {
  if (G.getFunction("backward"))
    throw InternalError("autodiff: '" + G.name() + "' already has a backward");
  if (!G.getFunction("forward") || !G.getFunction("online_fwd") ||
      !G.getFunction("online_fwd_epilogue"))
    throw InternalError("autodiff: '" + G.name() +
                        "' has no online function to differentiate");
  Derivation(G).run();
}

} // namespace attn::transforms
