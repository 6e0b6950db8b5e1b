// The local derivative rule of every IR node kind, and forward-mode tangents
// built from them.
#include "attn/transforms/Autodiff.h"
#include "attn/transforms/AutodiffBuilder.h"

#include "attn/ir/Eval.h"
#include "attn/ir/Printer.h"
#include "attn/ir/Walk.h"

#include "llvm/Support/Casting.h"

#include <cmath>

namespace attn::transforms {

using ir::Node;
using ir::NodeKind;

// ---- DerivBuilder ----------------------------------------------------------

static bool isConstValue(const Node *N, double V) {
  auto *C = llvm::dyn_cast_or_null<ir::ConstNode>(N);
  return C && C->getValue() == V;
}

static const Node *foldConstants(ir::Graph &G, NodeKind K, const Node *A,
                                 const Node *B) {
  auto *CA = llvm::dyn_cast<ir::ConstNode>(A);
  auto *CB = llvm::dyn_cast<ir::ConstNode>(B);
  if (!CA || !CB || CA->getType() == ir::Type::Bool ||
      CB->getType() == ir::Type::Bool)
    return nullptr;
  return G.constant(ir::evalBinary(K, CA->getValue(), CB->getValue()));
}

const Node *DerivBuilder::binary(NodeKind K, const Node *A, const Node *B) {
  if (ir::isBinaryKind(K))
    if (const Node *F = foldConstants(G, K, A, B))
      return F;
  if (K == NodeKind::Or) { // fold the constant sides of the NaN tests
    if (isConstValue(A, 0.0))
      return B;
    if (isConstValue(B, 0.0))
      return A;
  }
  if (ir::isCompareKind(K) && K == NodeKind::Ne && A == B &&
      llvm::isa<ir::ConstNode>(A))
    return G.constant(std::isnan(llvm::cast<ir::ConstNode>(A)->getValue()),
                      ir::Type::Bool);
  return G.binary(K, A, B);
}

const Node *DerivBuilder::unary(NodeKind K, const Node *A) {
  if (auto *C = llvm::dyn_cast<ir::ConstNode>(A))
    if (C->getType() != ir::Type::Bool)
      return G.constant(ir::evalUnary(K, C->getValue()));
  return G.unary(K, A);
}

const Node *DerivBuilder::add(const Node *A, const Node *B) {
  if (!A || isConstValue(A, 0.0))
    return B;
  if (!B || isConstValue(B, 0.0))
    return A;
  if (B->getKind() == NodeKind::Neg)
    return sub(A, B->operand(0));
  return binary(NodeKind::Add, A, B);
}

const Node *DerivBuilder::sub(const Node *A, const Node *B) {
  if (!B || isConstValue(B, 0.0))
    return A;
  if (!A || isConstValue(A, 0.0))
    return neg(B);
  return binary(NodeKind::Sub, A, B);
}

const Node *DerivBuilder::mul(const Node *A, const Node *B) {
  if (!A || !B || isConstValue(A, 0.0) || isConstValue(B, 0.0))
    return nullptr;
  if (isConstValue(A, 1.0) && B->getType() == ir::Type::F32)
    return B;
  if (isConstValue(B, 1.0) && A->getType() == ir::Type::F32)
    return A;
  if (isConstValue(A, -1.0))
    return neg(B);
  if (isConstValue(B, -1.0))
    return neg(A);
  return binary(NodeKind::Mul, A, B);
}

const Node *DerivBuilder::div(const Node *A, const Node *B) {
  if (!B)
    throw InternalError("autodiff: division by a zero derivative");
  if (!A || isConstValue(A, 0.0))
    return nullptr;
  if (isConstValue(B, 1.0) && A->getType() == ir::Type::F32)
    return A;
  return binary(NodeKind::Div, A, B);
}

const Node *DerivBuilder::neg(const Node *A) {
  if (!A)
    return nullptr;
  if (A->getKind() == NodeKind::Neg && A->getType() == ir::Type::F32)
    return A->operand(0);
  return unary(NodeKind::Neg, A);
}

const Node *DerivBuilder::select(const Node *Cond, const Node *A,
                                 const Node *B) {
  if (!A && !B)
    return nullptr;
  if (auto *C = llvm::dyn_cast<ir::ConstNode>(Cond))
    return C->getValue() != 0.0 ? A : B;
  return G.select(Cond, A ? A : c(0.0), B ? B : c(0.0));
}

const Node *DerivBuilder::sign(const Node *X) {
  const Node *Zero = X->getType() == ir::Type::I32 ? G.constant(0, ir::Type::I32)
                                                   : c(0.0);
  return select(binary(NodeKind::Gt, X, Zero), c(1.0),
                select(binary(NodeKind::Lt, X, Zero), c(-1.0), nullptr));
}

// ---- the rule table --------------------------------------------------------

/// The condition under which max(A, B) (or min) returns B: B wins the
/// comparison, or A is a NaN (fmax returns the number).
static const Node *secondWins(DerivBuilder &B, NodeKind Cmp, const Node *X,
                              const Node *Y) {
  const Node *Wins = B.binary(Cmp, Y, X);
  return B.binary(NodeKind::Or, B.binary(NodeKind::Ne, X, X), Wins);
}

const Node *localDerivative(ir::Graph &G, const Node *N, unsigned I) {
  DerivBuilder B(G);
  if (I >= N->operands().size())
    throw InternalError("autodiff: operand " + std::to_string(I) + " of " +
                        ir::mnemonic(N->getKind()).str());
  const Node *X = N->operand(0);
  const double Ln2 = std::log(2.0);
  switch (N->getKind()) {
  case NodeKind::Const:
  case NodeKind::Param:
    break; // no operands; caught above
  case NodeKind::Neg:
    return B.c(-1.0);
  case NodeKind::Exp:
    return N;
  case NodeKind::Exp2:
    return B.mul(N, B.c(Ln2));
  case NodeKind::Log:
    return B.div(B.c(1.0), X);
  case NodeKind::Log2:
    return B.div(B.c(1.0 / Ln2), X);
  case NodeKind::Abs: // 0 at 0, the conventional subgradient
    return B.sign(X);
  case NodeKind::Tanh:
    return B.sub(B.c(1.0), B.mul(N, N));
  case NodeKind::Sigmoid:
    return B.mul(N, B.sub(B.c(1.0), N));
  case NodeKind::Relu: // 0 at 0; [N > 0] needs only relu's value
    return B.select(B.binary(NodeKind::Gt, N, B.c(0.0)), B.c(1.0), nullptr);
  case NodeKind::Sqrt:
    return B.div(B.c(0.5), N);
  case NodeKind::Rsqrt:
    return B.mul(B.c(-0.5), B.mul(N, B.mul(N, N)));
  case NodeKind::Not:
    return nullptr;
  case NodeKind::ToFloat: // the identity on numbers
    return B.c(1.0);
  case NodeKind::Add:
    return B.c(1.0);
  case NodeKind::Sub:
    return B.c(I == 0 ? 1.0 : -1.0);
  case NodeKind::Mul:
    return N->operand(1 - I);
  case NodeKind::Div: // d(a/b)/db = -(a/b)/b
    return I == 0 ? B.div(B.c(1.0), N->operand(1))
                  : B.neg(B.div(N, N->operand(1)));
  case NodeKind::Max:
  case NodeKind::Min: {
    NodeKind Cmp = N->getKind() == NodeKind::Max ? NodeKind::Gt : NodeKind::Lt;
    const Node *Second = secondWins(B, Cmp, N->operand(0), N->operand(1));
    return I == 0 ? B.select(Second, nullptr, B.c(1.0))
                  : B.select(Second, B.c(1.0), nullptr);
  }
  case NodeKind::FloorDiv: // piecewise constant: 0 wherever it is defined
    return nullptr;
  case NodeKind::Mod: // a - b·floordiv(a, b) between the jumps
    return I == 0 ? B.c(1.0)
                  : B.neg(B.binary(NodeKind::FloorDiv, N->operand(0),
                                   N->operand(1)));
  case NodeKind::Lt:
  case NodeKind::Le:
  case NodeKind::Gt:
  case NodeKind::Ge:
  case NodeKind::Eq:
  case NodeKind::Ne:
  case NodeKind::And:
  case NodeKind::Or:
    return nullptr; // piecewise constant
  case NodeKind::Select:
    if (I == 0)
      return nullptr;
    return I == 1 ? B.select(X, B.c(1.0), nullptr)
                  : B.select(X, nullptr, B.c(1.0));
  case NodeKind::Reduce:
    switch (llvm::cast<ir::ReduceNode>(N)->getOp()) {
    case ir::ReduceOp::Sum:
      return B.c(1.0);
    case ir::ReduceOp::AbsSum:
      return B.sign(X);
    case ir::ReduceOp::Max: // every key that attains the maximum
      return B.select(B.binary(NodeKind::Eq, X, N), B.c(1.0), nullptr);
    }
    break;
  }
  throw InternalError("autodiff: no rule for " +
                      ir::mnemonic(N->getKind()).str());
}

// ---- tangents --------------------------------------------------------------

static bool isElementSpace(ir::Space S) {
  return S == ir::Space::Tile || S == ir::Space::Col;
}

/// The tangent of reduction \p R whose operand has tangent \p TX.
static const Node *reduceTangent(DerivBuilder &B, const ir::ReduceNode *R,
                                 const Node *TX) {
  const Node *X = R->operand(0);
  if (!isElementSpace(TX->getSpace())) {
    // A per-row shift of every key moves the maximum by the same amount;
    // a sum of it would need the number of keys, which the IR has no name
    // for.
    if (R->getOp() == ir::ReduceOp::Max)
      return TX;
    throw CannotDerive("the operand of get_reduce(\"" +
                       ir::reduceOpName(R->getOp()).str() + "\") `" +
                       ir::shortExpr(X) +
                       "` changes by the same amount at every key, and the "
                       "IR cannot count the keys");
  }
  ir::Graph &G = B.graph();
  switch (R->getOp()) {
  case ir::ReduceOp::Sum:
    return G.reduce(ir::ReduceOp::Sum, TX);
  case ir::ReduceOp::AbsSum:
    return G.reduce(ir::ReduceOp::Sum, B.mul(B.sign(X), TX));
  case ir::ReduceOp::Max:
    return G.reduce(ir::ReduceOp::Sum,
                    B.select(B.binary(NodeKind::Eq, X, R), TX, nullptr));
  }
  throw InternalError("autodiff: reduce op");
}

const Node *tangent(ir::Graph &G, const Node *Root, const TangentSeeds &Seeds) {
  DerivBuilder B(G);
  llvm::DenseMap<const Node *, const Node *> T;
  // A local derivative is built only where an operand's tangent is not
  // zero, so a subgraph that no seed reaches costs nothing.
  for (const Node *N : ir::topologicalOrder({Root})) {
    if (auto It = Seeds.find(N); It != Seeds.end()) {
      T[N] = It->second;
      continue;
    }
    const Node *Result = nullptr;
    if (N->getType() == ir::Type::F32 && !N->operands().empty()) {
      if (N->getKind() == NodeKind::Select) {
        Result = B.select(N->operand(0), T.lookup(N->operand(1)),
                          T.lookup(N->operand(2)));
      } else if (auto *R = llvm::dyn_cast<ir::ReduceNode>(N)) {
        if (const Node *TX = T.lookup(R->operand(0)))
          Result = reduceTangent(B, R, TX);
      } else {
        for (unsigned I = 0; I < N->operands().size(); ++I)
          if (const Node *TO = T.lookup(N->operand(I)))
            Result = B.add(Result, B.mul(localDerivative(G, N, I), TO));
      }
    }
    T[N] = Result;
  }
  return T.lookup(Root);
}

} // namespace attn::transforms
