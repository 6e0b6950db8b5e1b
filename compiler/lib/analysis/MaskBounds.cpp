// Mask analysis: grouping, analysability and the host evaluator of the
// interval rules (the device's twin is runtime/kernels/mask_interval.cuh).
//
// Why the rules are sound. A numeric node's abstract value is an interval
// [lo, hi] holding the node's value at every point of the box; a boolean
// node's is the set of values it may take (false, true or both).
//  * Leaves: q_idx and kv_idx range over the box's ends; b, h, head_dim,
//    constants and scalar or per-head inputs have one value; a per-row
//    (per-key) input lies between its minimum and maximum over the box's
//    rows (keys), which the caller computes from the data.
//  * add, sub, mul, div, min, max, abs, neg, relu are monotone in each
//    operand on the regions the rules use (div only by an interval that
//    excludes 0, floordiv likewise as floor of that quotient; mod has its
//    own rule, floorModulo below; mul takes the extremes of the four corner products, where a
//    bilinear function has its extremes), so the exact results over the box
//    lie between the results at the ends. Round-to-nearest is monotone, so a
//    value computed in the evaluator's own precision from a point of the box
//    lies between the same computations at the ends: the host evaluates in
//    double, node by node as the reference interpreter does. The device
//    rounds the lower end down and the upper end up (directed rounding),
//    which also encloses what a contracted (FMA) evaluation computes.
//  * An interval with an infinite or NaN end is "unknown": every comparison
//    on it is unknown, and min/max/select, which would drop a NaN, keep it
//    unknown. A finite interval from monotone operations on finite
//    intervals holds no NaN or infinity, since an overflow or an invalid
//    operation at an inner point shows at an end.
//  * A comparison is true (false) only when it holds (fails) for every pair
//    of values of the operands' intervals; and, or, not and select combine
//    the sets of possible values, which over-approximates the correlated
//    truth but never excludes a value that occurs.
// The class is FULL when the mask's set is {true}, EMPTY when it is
// {false}, PARTIAL otherwise.
#include "attn/analysis/MaskBounds.h"

#include "attn/Error.h"
#include "attn/ir/Eval.h"
#include "attn/ir/Printer.h"
#include "attn/ir/Walk.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/Casting.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attn::analysis {

using ir::InputShape;
using ir::Node;
using ir::NodeKind;
using ir::ParamKind;

llvm::StringRef maskGroupingName(MaskGrouping G) {
  switch (G) {
  case MaskGrouping::Shared:
    return "shared";
  case MaskGrouping::PerBatch:
    return "per batch";
  case MaskGrouping::PerBatchHead:
    return "per batch*head";
  }
  return "shared";
}

namespace {

/// The grouping an input of shape \p S asks for: what the input varies with
/// among batch and head (the per-head class is [heads], shared by batches,
/// but groups nest: per head means per batch·head).
MaskGrouping inputGrouping(InputShape S) {
  switch (S) {
  case InputShape::Scalar:
    return MaskGrouping::Shared;
  case InputShape::PerQueryToken: // [B, S]: shared by the heads
  case InputShape::PerKeyToken:
    return MaskGrouping::PerBatch;
  case InputShape::PerHead:
  case InputShape::PerRow:
  case InputShape::PerKey:
  case InputShape::Full:
    return MaskGrouping::PerBatchHead;
  }
  return MaskGrouping::PerBatchHead;
}

/// How the box evaluation reads an input of shape \p S: exactly, bounded
/// over the block's rows or keys, or not at all (the mask is then
/// element-evaluated).
enum class InputRead { Exact, ByRow, ByKey, Unbounded };
InputRead inputRead(InputShape S) {
  switch (S) {
  case InputShape::Scalar:
  case InputShape::PerHead:
    return InputRead::Exact;
  case InputShape::PerRow:
  case InputShape::PerQueryToken:
    return InputRead::ByRow;
  case InputShape::PerKey:
  case InputShape::PerKeyToken:
    return InputRead::ByKey;
  case InputShape::Full:
    return InputRead::Unbounded;
  }
  return InputRead::Unbounded;
}

/// Why no interval rule covers node \p N, or empty when one does.
std::string unboundedReason(const Node *N) {
  switch (N->getKind()) {
  case NodeKind::Const:
  case NodeKind::Param: // parameters are checked by the caller
  case NodeKind::Neg:
  case NodeKind::Abs:
  case NodeKind::Relu:
  case NodeKind::Not:
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
    return "";
  case NodeKind::ToFloat: // no interval rule yet: element evaluation
  case NodeKind::Exp:
  case NodeKind::Exp2:
  case NodeKind::Log:
  case NodeKind::Log2:
  case NodeKind::Tanh:
  case NodeKind::Sigmoid:
  case NodeKind::Sqrt:
  case NodeKind::Rsqrt:
    // The device computes these with approximate instructions that are not
    // proven monotone, so end-point evaluation would not be sound.
    return "'" + ir::shortExpr(N) + "' (" + ir::mnemonic(N->getKind()).str() +
           ") has no interval rule";
  case NodeKind::Reduce:
    return "'" + ir::shortExpr(N) + "' is a reduction";
  }
  return "unknown node";
}

} // namespace

MaskAnalysis analyzeMask(const ir::Graph &G) {
  MaskAnalysis A;
  const ir::Function *F = G.getFunction("mask_mod");
  if (!F || !F->result("mask"))
    return A;
  A.Mask = F->result("mask");
  A.Analysed = true;
  auto Group = [&](MaskGrouping X) { A.Grouping = std::max(A.Grouping, X); };
  auto Refuse = [&](std::string Why) {
    if (A.Analysed) {
      A.Analysed = false;
      A.Reason = std::move(Why);
    }
  };
  for (const Node *N : ir::topologicalOrder({A.Mask})) {
    auto *P = llvm::dyn_cast<ir::ParamNode>(N);
    if (!P) {
      std::string Why = unboundedReason(N);
      if (!Why.empty())
        Refuse(std::move(Why));
      continue;
    }
    switch (P->getParamKind()) {
    case ParamKind::Index:
      if (P->getName() == "b")
        Group(MaskGrouping::PerBatch);
      else if (P->getName() == "h")
        Group(MaskGrouping::PerBatchHead);
      continue;
    case ParamKind::HeadDim:
      continue;
    case ParamKind::Input:
      break;
    case ParamKind::Score:
    case ParamKind::Scores:
    case ParamKind::Output:
    case ParamKind::Rowscale:
    case ParamKind::FinalRowscale:
    case ParamKind::Probs:
    case ParamKind::GradProbs:
    case ParamKind::Doosum:
    case ParamKind::Element:
    case ParamKind::OtherRowscale:
    case ParamKind::Decay:
      throw InternalError("mask analysis: the mask reads parameter '" +
                          P->getName().str() + "'");
    }
    const ir::InputDecl *D = G.decls().findInput(P->getName());
    if (!D)
      throw InternalError("mask analysis: undeclared input '" +
                          P->getName().str() + "'");
    Group(inputGrouping(D->Shape));
    if (D->Shape == InputShape::Scalar)
      A.ScalarInputs.push_back(D->Name);
    else
      A.ReadsTensorInput = true;
    switch (inputRead(D->Shape)) {
    case InputRead::Exact:
      break;
    case InputRead::ByRow:
    case InputRead::ByKey:
      A.Bounded.push_back({D->Name, inputRead(D->Shape) == InputRead::ByKey});
      break;
    case InputRead::Unbounded:
      Refuse("input '" + D->Name + "' is " +
             ir::inputShapeName(D->Shape).str() +
             " (one value per query and key): it has no per-block bound");
      break;
    }
  }
  // Declaration order, whatever order the mask reads them in.
  auto DeclIndex = [&](llvm::StringRef Name) {
    return G.decls().findInput(Name) - G.decls().Inputs.data();
  };
  llvm::sort(A.ScalarInputs, [&](const std::string &X, const std::string &Y) {
    return DeclIndex(X) < DeclIndex(Y);
  });
  llvm::sort(A.Bounded, [&](const BoundedInput &X, const BoundedInput &Y) {
    return DeclIndex(X.Name) < DeclIndex(Y.Name);
  });
  if (!A.Analysed)
    A.Bounded.clear();
  return A;
}

namespace {

/// An abstract value: an interval for numbers, a set of truth values (bit
/// 0: may be false, bit 1: may be true) for booleans.
struct Abstract {
  double Lo = 0, Hi = 0;
  unsigned Truth = 3;
};
constexpr unsigned MayFalse = 1, MayTrue = 2;

bool known(const Abstract &V) {
  return std::isfinite(V.Lo) && std::isfinite(V.Hi);
}
Abstract unknownNumber() {
  double NaN = std::numeric_limits<double>::quiet_NaN();
  return {NaN, NaN, 3};
}
Abstract number(double Lo, double Hi) { return {Lo, Hi, 3}; }
Abstract truth(unsigned T) { return {0, 0, T}; }

Abstract compare(NodeKind K, const Abstract &A, const Abstract &B) {
  if (!known(A) || !known(B))
    return truth(MayFalse | MayTrue);
  auto Decide = [](bool AlwaysTrue, bool AlwaysFalse) {
    return truth(AlwaysTrue    ? MayTrue
                 : AlwaysFalse ? MayFalse
                               : MayFalse | MayTrue);
  };
  bool Same = A.Lo == A.Hi && B.Lo == B.Hi && A.Lo == B.Lo;
  bool Apart = A.Hi < B.Lo || B.Hi < A.Lo;
  if (K == NodeKind::Lt)
    return Decide(A.Hi < B.Lo, A.Lo >= B.Hi);
  if (K == NodeKind::Le)
    return Decide(A.Hi <= B.Lo, A.Lo > B.Hi);
  if (K == NodeKind::Gt)
    return Decide(A.Lo > B.Hi, A.Hi <= B.Lo);
  if (K == NodeKind::Ge)
    return Decide(A.Lo >= B.Hi, A.Hi < B.Lo);
  if (K == NodeKind::Eq)
    return Decide(Same, Apart);
  if (K == NodeKind::Ne)
    return Decide(Apart, Same);
  throw InternalError("mask analysis: not a comparison");
}

Abstract arithmetic(NodeKind K, const Abstract &A, const Abstract &B) {
  if (!known(A) || !known(B))
    return unknownNumber();
  if (K == NodeKind::Add)
    return number(A.Lo + B.Lo, A.Hi + B.Hi);
  if (K == NodeKind::Sub)
    return number(A.Lo - B.Hi, A.Hi - B.Lo);
  if (K == NodeKind::Max)
    return number(std::max(A.Lo, B.Lo), std::max(A.Hi, B.Hi));
  if (K == NodeKind::Min)
    return number(std::min(A.Lo, B.Lo), std::min(A.Hi, B.Hi));
  if (K == NodeKind::Mul || K == NodeKind::Div) {
    if (K == NodeKind::Div && B.Lo <= 0 && B.Hi >= 0)
      return unknownNumber(); // the divisor may be 0: no bound
    double C[4];
    int I = 0;
    for (double X : {A.Lo, A.Hi})
      for (double Y : {B.Lo, B.Hi})
        C[I++] = K == NodeKind::Mul ? X * Y : X / Y;
    // An overflowing corner is infinite, which known() turns into unknown.
    return number(*std::min_element(C, C + 4), *std::max_element(C, C + 4));
  }
  throw InternalError("mask analysis: not an arithmetic node");
}

/// floordiv: floor is monotone, so over a divisor interval of one sign the
/// result lies between the floors of the quotient's corners. For i32
/// operands and a single divisor (a constant or a scalar input) this is
/// exact: floor(lo / c) and floor(hi / c) are taken at the box's ends.
Abstract floorDivide(const Abstract &A, const Abstract &B) {
  Abstract Q = arithmetic(NodeKind::Div, A, B); // unknown when B holds 0
  if (!known(Q))
    return unknownNumber();
  return number(std::floor(Q.Lo), std::floor(Q.Hi));
}

/// mod: the remainder of a divisor in [bl, bh] with bl > 0 lies in [0, bh)
/// for ints ([0, bh] for floats, where adding b to a tiny negative fmod may
/// round to b); it is a itself when 0 <= a < bl; and for an i32 a over one
/// period of a single divisor c (the same floor(a / c) at both ends) it is
/// a - c·q, exact. A negative divisor mirrors this; one whose interval
/// holds 0 has no bound.
Abstract floorModulo(const Abstract &A, const Abstract &B, bool Int) {
  if (!known(A) || !known(B))
    return unknownNumber();
  const double Step = Int ? 1.0 : 0.0;
  if (B.Lo > 0) {
    if (Int && B.Lo == B.Hi) {
      double QL = ir::floorDiv(A.Lo, B.Lo), QH = ir::floorDiv(A.Hi, B.Lo);
      if (QL == QH)
        return number(A.Lo - QL * B.Lo, A.Hi - QL * B.Lo);
    }
    if (A.Lo >= 0 && A.Hi < B.Lo)
      return A;
    return number(0, B.Hi - Step);
  }
  if (B.Hi < 0) {
    if (Int && B.Lo == B.Hi) {
      double QL = ir::floorDiv(A.Lo, B.Lo), QH = ir::floorDiv(A.Hi, B.Lo);
      if (QL == QH)
        return number(A.Lo - QL * B.Lo, A.Hi - QL * B.Lo);
    }
    if (A.Hi <= 0 && A.Lo > B.Hi)
      return A;
    return number(B.Lo + Step, 0);
  }
  return unknownNumber();
}

Abstract unary(NodeKind K, const Abstract &A) {
  if (K == NodeKind::Not)
    return truth(((A.Truth & MayFalse) ? MayTrue : 0) |
                 ((A.Truth & MayTrue) ? MayFalse : 0));
  if (!known(A))
    return unknownNumber();
  if (K == NodeKind::Neg)
    return number(-A.Hi, -A.Lo);
  if (K == NodeKind::Abs) {
    if (A.Lo >= 0)
      return A;
    if (A.Hi <= 0)
      return number(-A.Hi, -A.Lo);
    return number(0, std::max(-A.Lo, A.Hi));
  }
  if (K == NodeKind::Relu)
    return number(std::max(A.Lo, 0.0), std::max(A.Hi, 0.0));
  throw InternalError("mask analysis: no rule for " + ir::mnemonic(K).str());
}

} // namespace

BlockClass classifyBox(const MaskAnalysis &A, const MaskBox &Box) {
  if (!A.Mask || !A.Analysed)
    throw InternalError("classifyBox: the mask is not analysed");
  llvm::DenseMap<const Node *, Abstract> Val;
  auto Leaf = [&](const ir::ParamNode &P) -> Abstract {
    if (P.getParamKind() == ParamKind::HeadDim)
      return number(double(Box.HeadDim), double(Box.HeadDim));
    if (P.getParamKind() == ParamKind::Index) {
      llvm::StringRef Name = P.getName();
      if (Name == "b")
        return number(double(Box.B), double(Box.B));
      if (Name == "h")
        return number(double(Box.H), double(Box.H));
      if (Name == "q_idx")
        return number(double(Box.QLo), double(Box.QHi));
      if (Name == "kv_idx")
        return number(double(Box.KvLo), double(Box.KvHi));
      throw InternalError("classifyBox: index '" + Name.str() + "'");
    }
    for (size_t I = 0; I < A.Bounded.size(); ++I)
      if (A.Bounded[I].Name == P.getName())
        return number(Box.Lo.at(I), Box.Hi.at(I));
    auto It = Box.Exact.find(P.getName());
    if (It == Box.Exact.end())
      throw InternalError("classifyBox: no value for input '" +
                          P.getName().str() + "'");
    return number(It->second, It->second);
  };
  for (const Node *N : ir::topologicalOrder({A.Mask})) {
    Abstract V;
    auto Op = [&](unsigned I) { return Val.lookup(N->operand(I)); };
    switch (N->getKind()) {
    case NodeKind::Const: {
      double C = llvm::cast<ir::ConstNode>(N)->getValue();
      V = N->getType() == ir::Type::Bool ? truth(C != 0 ? MayTrue : MayFalse)
                                         : number(C, C);
      break;
    }
    case NodeKind::Param:
      V = Leaf(*llvm::cast<ir::ParamNode>(N));
      break;
    case NodeKind::Neg:
    case NodeKind::Abs:
    case NodeKind::Relu:
    case NodeKind::Not:
      V = unary(N->getKind(), Op(0));
      break;
    case NodeKind::Add:
    case NodeKind::Sub:
    case NodeKind::Mul:
    case NodeKind::Div:
    case NodeKind::Max:
    case NodeKind::Min:
      V = arithmetic(N->getKind(), Op(0), Op(1));
      break;
    case NodeKind::FloorDiv:
      V = floorDivide(Op(0), Op(1));
      break;
    case NodeKind::Mod:
      V = floorModulo(Op(0), Op(1), N->getType() == ir::Type::I32);
      break;
    case NodeKind::Lt:
    case NodeKind::Le:
    case NodeKind::Gt:
    case NodeKind::Ge:
    case NodeKind::Eq:
    case NodeKind::Ne:
      V = compare(N->getKind(), Op(0), Op(1));
      break;
    case NodeKind::And: {
      unsigned X = Op(0).Truth, Y = Op(1).Truth;
      V = truth(((X & MayTrue) && (Y & MayTrue) ? MayTrue : 0) |
                ((X & MayFalse) || (Y & MayFalse) ? MayFalse : 0));
      break;
    }
    case NodeKind::Or: {
      unsigned X = Op(0).Truth, Y = Op(1).Truth;
      V = truth(((X & MayTrue) || (Y & MayTrue) ? MayTrue : 0) |
                ((X & MayFalse) && (Y & MayFalse) ? MayFalse : 0));
      break;
    }
    case NodeKind::Select: {
      unsigned C = Op(0).Truth;
      Abstract T = Op(1), E = Op(2);
      if (C == MayTrue)
        V = T;
      else if (C == MayFalse)
        V = E;
      else if (N->getType() == ir::Type::Bool)
        V = truth(T.Truth | E.Truth);
      else if (!known(T) || !known(E))
        V = unknownNumber();
      else
        V = number(std::min(T.Lo, E.Lo), std::max(T.Hi, E.Hi));
      break;
    }
    case NodeKind::ToFloat:
    case NodeKind::Exp:
    case NodeKind::Exp2:
    case NodeKind::Log:
    case NodeKind::Log2:
    case NodeKind::Tanh:
    case NodeKind::Sigmoid:
    case NodeKind::Sqrt:
    case NodeKind::Rsqrt:
    case NodeKind::Reduce:
      throw InternalError("classifyBox: no rule for " +
                          ir::mnemonic(N->getKind()).str());
    }
    Val[N] = V;
  }
  unsigned T = Val.lookup(A.Mask).Truth;
  if (T == MayTrue)
    return BlockClass::Full;
  if (T == MayFalse)
    return BlockClass::Empty;
  return BlockClass::Partial;
}

} // namespace attn::analysis
