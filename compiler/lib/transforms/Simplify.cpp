// Simplification: constant folding and algebraic identities.
#include "attn/transforms/Simplify.h"

#include "attn/Error.h"
#include "attn/ir/Eval.h"
#include "attn/ir/Printer.h"
#include "attn/ir/Walk.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Casting.h"

namespace attn::transforms {

using ir::ConstNode;
using ir::Node;
using ir::NodeKind;

namespace {

std::optional<double> constValue(const Node *N) {
  if (auto *C = llvm::dyn_cast<ConstNode>(N))
    return C->getValue();
  return std::nullopt;
}

bool isConst(const Node *N, double V) {
  std::optional<double> C = constValue(N);
  return C && *C == V;
}

bool isDivision(NodeKind K) {
  return K == NodeKind::Div || K == NodeKind::FloorDiv || K == NodeKind::Mod;
}

bool isCommutative(NodeKind K) {
  return K == NodeKind::Add || K == NodeKind::Mul || K == NodeKind::Max ||
         K == NodeKind::Min || K == NodeKind::Eq || K == NodeKind::Ne ||
         K == NodeKind::And || K == NodeKind::Or;
}

/// \p Replacement may stand for \p Original only with the same type and space.
const Node *ifSameKind(const Node *Original, const Node *Replacement) {
  if (Replacement->getType() == Original->getType() &&
      Replacement->getSpace() == Original->getSpace())
    return Replacement;
  return Original;
}

/// Folds a node whose operands are all constants.
const Node *fold(ir::Graph &G, const Node *N) {
  llvm::SmallVector<double, 3> Vals;
  for (const Node *Op : N->operands()) {
    std::optional<double> V = constValue(Op);
    if (!V)
      return nullptr;
    Vals.push_back(*V);
  }
  double R;
  if (ir::isUnaryKind(N->getKind()))
    R = ir::evalUnary(N->getKind(), Vals[0]);
  else if (N->getKind() == NodeKind::Select)
    R = ir::evalSelect(Vals[0], Vals[1], Vals[2]);
  else if (llvm::isa<ir::BinaryNode>(N))
    R = ir::evalBinary(N->getKind(), Vals[0], Vals[1]);
  else
    return nullptr; // reduce never has a constant operand
  return G.constant(R, N->getType());
}

/// Applies the identities to \p N (whose operands are already simplified).
const Node *rewrite(ir::Graph &G, const Node *N) {
  if (N->operands().empty())
    return N;
  if (const Node *F = fold(G, N))
    return F;
  NodeKind K = N->getKind();
  if (llvm::isa<ir::BinaryNode>(N)) {
    const Node *A = N->operand(0), *B = N->operand(1);
    if (isCommutative(K) && constValue(A) && !constValue(B))
      return rewrite(G, G.binary(K, B, A));
    if ((K == NodeKind::Add || K == NodeKind::Sub) && isConst(B, 0.0))
      return ifSameKind(N, A);
    if ((K == NodeKind::Mul || K == NodeKind::Div) && isConst(B, 1.0))
      return ifSameKind(N, A);
    // floor(x / 1) is x only for an integer x (ifSameKind keeps an f32 one).
    if (K == NodeKind::FloorDiv && isConst(B, 1.0) &&
        A->getType() == ir::Type::I32)
      return ifSameKind(N, A);
    if ((K == NodeKind::Max || K == NodeKind::Min) && A == B)
      return A;
    if (K == NodeKind::Add && B->getKind() == NodeKind::Neg)
      return rewrite(G, G.binary(NodeKind::Sub, A, B->operand(0)));
    if (K == NodeKind::Sub && B->getKind() == NodeKind::Neg)
      return rewrite(G, G.binary(NodeKind::Add, A, B->operand(0)));
    return N;
  }
  // to_float of a float is the value itself.
  if (K == NodeKind::ToFloat && N->operand(0)->getType() == ir::Type::F32)
    return N->operand(0);
  if ((K == NodeKind::Neg || K == NodeKind::Not) &&
      N->operand(0)->getKind() == K)
    return N->operand(0)->operand(0);
  if (K == NodeKind::Select) {
    if (std::optional<double> C = constValue(N->operand(0)))
      return ifSameKind(N, *C != 0.0 ? N->operand(1) : N->operand(2));
    if (N->operand(1) == N->operand(2))
      return ifSameKind(N, N->operand(1));
  }
  return N;
}

/// x / 0 is inf or NaN at every point, so a divisor that folds to 0 (x / (c -
/// c)) is the same mistake as the literal 0 that tracing refuses; floordiv
/// and mod by a constant 0 have a defined value (0 and x) but are the same
/// mistake. \p Div is
/// a node of the graph as it came in; the message names the first function
/// that reaches it.
[[noreturn]] void divisionByZero(const ir::Graph &G, const Node *Div) {
  std::string Where;
  for (const ir::Function &F : G.functions()) {
    std::vector<const Node *> Roots;
    for (const ir::Result &R : F.Results)
      Roots.push_back(R.Value);
    if (llvm::is_contained(ir::topologicalOrder(Roots), Div)) {
      Where = F.Name + ": ";
      break;
    }
  }
  const Node *Divisor = Div->operand(1);
  throw UserError(Where + "'" + ir::mnemonic(Div->getKind()).str() +
                  "' divides `" + ir::shortExpr(Div->operand(0)) +
                  "` by " +
                  (constValue(Divisor)
                       ? std::string("the constant 0")
                       : "`" + ir::shortExpr(Divisor) +
                             "`, which folds to the constant 0"));
}

} // namespace

void simplify(ir::Graph &G) {
  std::vector<const Node *> Roots;
  for (const ir::Function &F : G.functions())
    for (const ir::Result &R : F.Results)
      Roots.push_back(R.Value);
  llvm::DenseMap<const Node *, const Node *> New;
  for (const Node *N : ir::topologicalOrder(Roots)) {
    const Node *Rebuilt = N;
    if (!N->operands().empty()) {
      llvm::SmallVector<const Node *, 3> Ops;
      for (const Node *Op : N->operands())
        Ops.push_back(New.lookup(Op));
      Rebuilt = G.rebuild(N, Ops);
    }
    if (isDivision(Rebuilt->getKind()) && isConst(Rebuilt->operand(1), 0.0))
      divisionByZero(G, N);
    New[N] = rewrite(G, Rebuilt);
  }
  for (ir::Function &F : G.functions())
    for (ir::Result &R : F.Results)
      R.Value = New.lookup(R.Value);
}

} // namespace attn::transforms
