// Forward-mode evaluation: the value rules come from ir/Eval.h, the local
// derivative rules are below, one per node kind.
#include "attn/reference/Evaluator.h"

#include "attn/Error.h"
#include "attn/ir/Eval.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Casting.h"

#include <cmath>

namespace attn::reference {

using ir::NodeKind;

Dual applyUnary(NodeKind K, Dual X) {
  double V = ir::evalUnary(K, X.V);
  double Dx = 0.0; // d(result)/dx
  switch (K) {
  case NodeKind::Neg:
    Dx = -1.0;
    break;
  case NodeKind::Exp:
    Dx = V;
    break;
  case NodeKind::Exp2:
    Dx = V * M_LN2;
    break;
  case NodeKind::Log:
    Dx = 1.0 / X.V;
    break;
  case NodeKind::Log2:
    Dx = 1.0 / (X.V * M_LN2);
    break;
  case NodeKind::Abs:
    Dx = X.V > 0 ? 1.0 : (X.V < 0 ? -1.0 : 0.0);
    break;
  case NodeKind::Tanh:
    Dx = 1.0 - V * V;
    break;
  case NodeKind::Sigmoid:
    Dx = V * (1.0 - V);
    break;
  case NodeKind::Relu:
    Dx = X.V > 0 ? 1.0 : 0.0;
    break;
  case NodeKind::Sqrt:
    Dx = 0.5 / V;
    break;
  case NodeKind::Rsqrt:
    Dx = -0.5 * V * V * V;
    break;
  case NodeKind::Not:
    Dx = 0.0;
    break;
  case NodeKind::ToFloat:
    Dx = 1.0;
    break;
  case NodeKind::Const:
  case NodeKind::Param:
  case NodeKind::Add:
  case NodeKind::Sub:
  case NodeKind::Mul:
  case NodeKind::Div:
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
    throw InternalError("applyUnary on " + ir::mnemonic(K).str());
  }
  return {V, X.D == 0.0 ? 0.0 : Dx * X.D};
}

Dual applyBinary(NodeKind K, Dual A, Dual B) {
  double V = ir::evalBinary(K, A.V, B.V);
  double D = 0.0;
  switch (K) {
  case NodeKind::Add:
    D = A.D + B.D;
    break;
  case NodeKind::Sub:
    D = A.D - B.D;
    break;
  case NodeKind::Mul:
    D = A.D * B.V + A.V * B.D;
    break;
  case NodeKind::Div:
    D = (A.D * B.V - A.V * B.D) / (B.V * B.V);
    break;
  case NodeKind::Max: // the gradient goes to the larger, the first on a tie
    D = (std::isnan(A.V) || (!std::isnan(B.V) && B.V > A.V)) ? B.D : A.D;
    break;
  case NodeKind::Min:
    D = (std::isnan(A.V) || (!std::isnan(B.V) && B.V < A.V)) ? B.D : A.D;
    break;
  case NodeKind::FloorDiv:
    D = 0.0; // piecewise constant
    break;
  case NodeKind::Mod: // a - b·floordiv(a, b), floordiv piecewise constant
    D = A.D - B.D * ir::floorDiv(A.V, B.V);
    break;
  case NodeKind::Lt:
  case NodeKind::Le:
  case NodeKind::Gt:
  case NodeKind::Ge:
  case NodeKind::Eq:
  case NodeKind::Ne:
  case NodeKind::And:
  case NodeKind::Or:
    D = 0.0; // piecewise constant
    break;
  case NodeKind::Const:
  case NodeKind::Param:
  case NodeKind::Neg:
  case NodeKind::Exp:
  case NodeKind::Exp2:
  case NodeKind::Log:
  case NodeKind::Log2:
  case NodeKind::Abs:
  case NodeKind::Tanh:
  case NodeKind::Sigmoid:
  case NodeKind::Relu:
  case NodeKind::Sqrt:
  case NodeKind::Rsqrt:
  case NodeKind::Not:
  case NodeKind::ToFloat:
  case NodeKind::Select:
  case NodeKind::Reduce:
    throw InternalError("applyBinary on " + ir::mnemonic(K).str());
  }
  return {V, D};
}

const Values &Evaluator::eval(const ir::Node *N) {
  auto It = Memo.find(N);
  if (It != Memo.end())
    return *It->second;
  // Operands first, with an explicit stack rather than recursion: compute()
  // then finds every operand in the memo, so no graph is too deep to
  // evaluate.
  llvm::SmallVector<const ir::Node *, 16> Stack{N};
  while (!Stack.empty()) {
    const ir::Node *Cur = Stack.back();
    if (Memo.count(Cur)) {
      Stack.pop_back();
      continue;
    }
    bool Ready = true;
    for (const ir::Node *Op : llvm::reverse(Cur->operands()))
      if (!Memo.count(Op)) {
        Stack.push_back(Op);
        Ready = false;
      }
    if (!Ready)
      continue;
    Stack.pop_back();
    Memo[Cur] = std::make_unique<Values>(compute(Cur));
  }
  return *Memo.find(N)->second;
}

/// Width of a broadcast of operand widths (1 broadcasts).
static size_t broadcastWidth(llvm::ArrayRef<size_t> Widths) {
  size_t W = 1;
  for (size_t X : Widths) {
    if (X == 1)
      continue;
    if (W != 1 && W != X)
      throw InternalError("evaluator: operands of widths " +
                          std::to_string(W) + " and " + std::to_string(X));
    W = X;
  }
  return W;
}

Values Evaluator::compute(const ir::Node *N) {
  if (auto *C = llvm::dyn_cast<ir::ConstNode>(N))
    return {Dual{C->getValue(), 0.0}};
  if (auto *P = llvm::dyn_cast<ir::ParamNode>(N))
    return Bind(*P);
  if (auto *R = llvm::dyn_cast<ir::ReduceNode>(N)) {
    const Values &X = eval(R->operand(0));
    if (X.size() != Active.size())
      throw InternalError("evaluator: reduce over " +
                          std::to_string(X.size()) + " values, block has " +
                          std::to_string(Active.size()) + " keys");
    Dual Acc{ir::reduceIdentity(R->getOp()), 0.0};
    for (size_t I = 0; I < X.size(); ++I) {
      if (!Active[I])
        continue;
      switch (R->getOp()) {
      case ir::ReduceOp::Max:
        Acc = applyBinary(NodeKind::Max, Acc, X[I]);
        break;
      case ir::ReduceOp::Sum:
        Acc = applyBinary(NodeKind::Add, Acc, X[I]);
        break;
      case ir::ReduceOp::AbsSum:
        Acc = applyBinary(NodeKind::Add, Acc, applyUnary(NodeKind::Abs, X[I]));
        break;
      }
    }
    return {Acc};
  }
  llvm::SmallVector<const Values *, 3> Ops;
  llvm::SmallVector<size_t, 3> Widths;
  for (const ir::Node *Op : N->operands()) {
    Ops.push_back(&eval(Op));
    Widths.push_back(Ops.back()->size());
  }
  size_t W = broadcastWidth(Widths);
  auto Arg = [&](unsigned K, size_t I) {
    return Ops[K]->size() == 1 ? (*Ops[K])[0] : (*Ops[K])[I];
  };
  Values Out(W);
  for (size_t I = 0; I < W; ++I) {
    if (ir::isUnaryKind(N->getKind()))
      Out[I] = applyUnary(N->getKind(), Arg(0, I));
    else if (N->getKind() == NodeKind::Select)
      Out[I] = Arg(0, I).V != 0.0 ? Arg(1, I) : Arg(2, I);
    else
      Out[I] = applyBinary(N->getKind(), Arg(0, I), Arg(1, I));
  }
  return Out;
}

} // namespace attn::reference
