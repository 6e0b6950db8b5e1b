// Every local derivative rule against central finite differences of the
// scalar semantics (ir/Eval.h) and against the reference interpreter's
// forward-mode rules, and tangents of random compositions.
#include "AutodiffTestDefs.h"

#include "attn/ir/Eval.h"
#include "attn/ir/Printer.h"
#include "attn/reference/Evaluator.h"
#include "attn/transforms/Autodiff.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <set>

using namespace attn;
using ir::NodeKind;
using transforms::localDerivative;
using transforms::tangent;

namespace {

const NodeKind AllKinds[] = {
#define ATTN_NODE(Name, Mnemonic, Arity) NodeKind::Name,
#include "attn/ir/Nodes.def"
};

bool near(double A, double B, double Tol = 1e-6) {
  return std::fabs(A - B) <= Tol * (1.0 + std::fabs(B));
}

/// Central difference of \p F at \p X.
template <typename Fn> double central(Fn F, double X) {
  double H = 1e-6 * std::max(1.0, std::fabs(X));
  return (F(X + H) - F(X - H)) / (2 * H);
}

/// The value of a derivative node (nullptr = 0) with x and y bound.
double derivAt(const ir::Node *D, double X, double Y = 0.0) {
  return D ? autodifftest::evalAt(D, {{"x", X}, {"y", Y}}) : 0.0;
}

bool needsPositive(NodeKind K) {
  return K == NodeKind::Log || K == NodeKind::Log2 || K == NodeKind::Sqrt ||
         K == NodeKind::Rsqrt;
}

} // namespace

TEST_CASE("rules: every unary kind against finite differences",
          "[autodiff][rules]") {
  std::mt19937_64 Rng(11);
  std::uniform_real_distribution<double> Any(-3.0, 3.0), Pos(0.2, 3.0);
  unsigned Tested = 0;
  for (NodeKind K : AllKinds) {
    if (!ir::isUnaryKind(K) || K == NodeKind::Not)
      continue;
    INFO(ir::mnemonic(K).str());
    ir::Graph G;
    const ir::Node *X = G.param(ir::ParamKind::Input, "x", ir::Type::F32,
                                ir::Space::Const);
    const ir::Node *N = G.unary(K, X);
    const ir::Node *D = localDerivative(G, N, 0);
    for (int I = 0; I < 20; ++I) {
      double V = needsPositive(K) ? Pos(Rng) : Any(Rng);
      if (std::fabs(V) < 0.05)
        continue; // the kinks of abs and relu
      INFO("x = " << V);
      double Fd = central([&](double T) { return ir::evalUnary(K, T); }, V);
      double Sym = derivAt(D, V);
      CHECK(near(Sym, Fd));
      // The reference interpreter's own rule agrees.
      CHECK(near(Sym, reference::applyUnary(K, {V, 1.0}).D, 1e-12));
    }
    ++Tested;
  }
  // neg exp exp2 log log2 abs tanh sigmoid relu sqrt rsqrt to_float
  CHECK(Tested == 12);
}

TEST_CASE("rules: every binary kind against finite differences",
          "[autodiff][rules]") {
  std::mt19937_64 Rng(12);
  std::uniform_real_distribution<double> Any(-3.0, 3.0);
  unsigned Tested = 0;
  for (NodeKind K : AllKinds) {
    if (!ir::isBinaryKind(K))
      continue;
    INFO(ir::mnemonic(K).str());
    ir::Graph G;
    const ir::Node *X = G.param(ir::ParamKind::Input, "x", ir::Type::F32,
                                ir::Space::Const);
    const ir::Node *Y = G.param(ir::ParamKind::Input, "y", ir::Type::F32,
                                ir::Space::Const);
    const ir::Node *N = G.binary(K, X, Y);
    const ir::Node *DX = localDerivative(G, N, 0);
    const ir::Node *DY = localDerivative(G, N, 1);
    for (int I = 0; I < 20; ++I) {
      double A = Any(Rng), B = Any(Rng);
      if (std::fabs(A - B) < 0.05 || std::fabs(B) < 0.05)
        continue; // ties of max/min, division by ~0
      if (std::fabs(A / B - std::round(A / B)) < 0.01)
        continue; // the jumps of floordiv and mod
      INFO("x = " << A << ", y = " << B);
      double FdX = central([&](double T) { return ir::evalBinary(K, T, B); }, A);
      double FdY = central([&](double T) { return ir::evalBinary(K, A, T); }, B);
      CHECK(near(derivAt(DX, A, B), FdX));
      CHECK(near(derivAt(DY, A, B), FdY));
      reference::Dual RX = reference::applyBinary(K, {A, 1.0}, {B, 0.0});
      reference::Dual RY = reference::applyBinary(K, {A, 0.0}, {B, 1.0});
      CHECK(near(derivAt(DX, A, B), RX.D, 1e-12));
      CHECK(near(derivAt(DY, A, B), RY.D, 1e-12));
    }
    ++Tested;
  }
  CHECK(Tested == 8); // add sub mul div max min floordiv mod
}

TEST_CASE("rules: max and min send the gradient to the number, not the NaN, "
          "and to the first operand on a tie",
          "[autodiff][rules]") {
  const double NaN = std::numeric_limits<double>::quiet_NaN();
  for (NodeKind K : {NodeKind::Max, NodeKind::Min}) {
    INFO(ir::mnemonic(K).str());
    ir::Graph G;
    const ir::Node *X = G.param(ir::ParamKind::Input, "x", ir::Type::F32,
                                ir::Space::Const);
    const ir::Node *Y = G.param(ir::ParamKind::Input, "y", ir::Type::F32,
                                ir::Space::Const);
    const ir::Node *N = G.binary(K, X, Y);
    const ir::Node *DX = localDerivative(G, N, 0);
    const ir::Node *DY = localDerivative(G, N, 1);
    CHECK(derivAt(DX, NaN, 1.0) == 0.0);
    CHECK(derivAt(DY, NaN, 1.0) == 1.0);
    CHECK(derivAt(DX, 1.0, NaN) == 1.0);
    CHECK(derivAt(DY, 1.0, NaN) == 0.0);
    CHECK(derivAt(DX, 2.0, 2.0) == 1.0);
    CHECK(derivAt(DY, 2.0, 2.0) == 0.0);
  }
}

TEST_CASE("rules: comparisons, logic, not and select's condition have no "
          "derivative; select's branches do",
          "[autodiff][rules]") {
  ir::Graph G;
  const ir::Node *X = G.param(ir::ParamKind::Input, "x", ir::Type::F32,
                              ir::Space::Const);
  const ir::Node *Y = G.param(ir::ParamKind::Input, "y", ir::Type::F32,
                              ir::Space::Const);
  unsigned Tested = 0;
  for (NodeKind K : AllKinds)
    if (ir::isCompareKind(K)) {
      const ir::Node *N = G.binary(K, X, Y);
      CHECK(localDerivative(G, N, 0) == nullptr);
      CHECK(localDerivative(G, N, 1) == nullptr);
      ++Tested;
    }
  const ir::Node *C = G.binary(NodeKind::Lt, X, Y);
  for (NodeKind K : AllKinds)
    if (ir::isLogicKind(K)) {
      const ir::Node *N = G.binary(K, C, C);
      CHECK(localDerivative(G, N, 0) == nullptr);
      ++Tested;
    }
  CHECK(localDerivative(G, G.unary(NodeKind::Not, C), 0) == nullptr);
  CHECK(Tested == 8);
  const ir::Node *S = G.select(C, X, Y);
  CHECK(localDerivative(G, S, 0) == nullptr);
  // select(x < y, x, y): the gradient follows the branch taken.
  CHECK(derivAt(localDerivative(G, S, 1), 1.0, 2.0) == 1.0);
  CHECK(derivAt(localDerivative(G, S, 2), 1.0, 2.0) == 0.0);
  CHECK(derivAt(localDerivative(G, S, 1), 3.0, 2.0) == 0.0);
  CHECK(derivAt(localDerivative(G, S, 2), 3.0, 2.0) == 1.0);
  // Leaves have no operands.
  CHECK_THROWS_AS(localDerivative(G, X, 0), InternalError);
}

TEST_CASE("rules: each reduction's derivative per key against finite "
          "differences",
          "[autodiff][rules]") {
  const std::vector<double> Keys = {0.5, -1.25, 2.0, -0.75, 1.5};
  for (ir::ReduceOp Op :
       {ir::ReduceOp::Sum, ir::ReduceOp::AbsSum, ir::ReduceOp::Max}) {
    INFO(ir::reduceOpName(Op).str());
    ir::Graph G;
    const ir::Node *X = G.param(ir::ParamKind::Scores, "scores", ir::Type::F32,
                                ir::Space::Tile);
    const ir::Node *R = G.reduce(Op, X);
    const ir::Node *D = localDerivative(G, R, 0);
    REQUIRE(D);
    auto Bind = [&](const std::vector<double> &Vals) {
      return [Vals](const ir::ParamNode &) {
        reference::Values V;
        for (double X : Vals)
          V.push_back({X, 0.0});
        return V;
      };
    };
    reference::Evaluator E(Bind(Keys), std::vector<bool>(Keys.size(), true));
    for (size_t J = 0; J < Keys.size(); ++J) {
      auto Reduced = [&](double T) {
        double Acc = ir::reduceIdentity(Op);
        for (size_t I = 0; I < Keys.size(); ++I)
          Acc = ir::reduceStep(Op, Acc, I == J ? T : Keys[I]);
        return Acc;
      };
      INFO("key " << J);
      CHECK(near(E.at(D, J).V, central(Reduced, Keys[J])));
    }
  }
}

TEST_CASE("rules: every node kind is covered by a rule test",
          "[autodiff][rules]") {
  // A new kind in Nodes.def must be added to one of the sweeps above.
  std::set<std::string> Covered;
  for (NodeKind K : AllKinds)
    if (ir::isUnaryKind(K) || ir::isBinaryKind(K) || ir::isCompareKind(K) ||
        ir::isLogicKind(K) || K == NodeKind::Select || K == NodeKind::Reduce ||
        K == NodeKind::Const || K == NodeKind::Param)
      Covered.insert(ir::mnemonic(K).str());
  CHECK(Covered.size() == std::size(AllKinds));
}

namespace {

/// A random expression over x (and the constant-space input y) of depth
/// \p Depth using every differentiable kind.
const ir::Node *randomExpr(ir::Graph &G, std::mt19937_64 &Rng, int Depth) {
  const ir::Node *X = G.param(ir::ParamKind::Input, "x", ir::Type::F32,
                              ir::Space::Const);
  const ir::Node *Y = G.param(ir::ParamKind::Input, "y", ir::Type::F32,
                              ir::Space::Const);
  std::uniform_int_distribution<int> Pick(0, 15);
  if (Depth == 0)
    return Pick(Rng) % 3 == 0 ? Y : X;
  const ir::Node *A = randomExpr(G, Rng, Depth - 1);
  const ir::Node *B = randomExpr(G, Rng, Depth - 1);
  // Squashing keeps logs, roots and divisions in their domains.
  auto Positive = [&](const ir::Node *N) {
    return G.binary(NodeKind::Add, G.unary(NodeKind::Sigmoid, N),
                    G.constant(0.5));
  };
  switch (Pick(Rng)) {
  case 0:
    return G.binary(NodeKind::Add, A, B);
  case 1:
    return G.binary(NodeKind::Sub, A, B);
  case 2:
    return G.binary(NodeKind::Mul, A, B);
  case 3:
    return G.binary(NodeKind::Div, A, Positive(B));
  case 4:
    return G.binary(NodeKind::Max, A, B);
  case 5:
    return G.binary(NodeKind::Min, A, B);
  case 6:
    return G.unary(NodeKind::Tanh, A);
  case 7:
    return G.unary(NodeKind::Sigmoid, A);
  case 8:
    return G.unary(NodeKind::Log, Positive(A));
  case 9:
    return G.unary(NodeKind::Log2, Positive(A));
  case 10:
    return G.unary(NodeKind::Sqrt, Positive(A));
  case 11:
    return G.unary(NodeKind::Rsqrt, Positive(A));
  case 12:
    return G.unary(NodeKind::Exp, G.unary(NodeKind::Tanh, A));
  case 13:
    return G.unary(NodeKind::Exp2, G.unary(NodeKind::Tanh, A));
  case 14:
    return G.select(G.binary(NodeKind::Gt, A, B), G.unary(NodeKind::Abs, A),
                    G.unary(NodeKind::Neg, B));
  default:
    return G.unary(NodeKind::Relu, A);
  }
}

} // namespace

TEST_CASE("tangent: random compositions of every kind against finite "
          "differences",
          "[autodiff][rules]") {
  std::mt19937_64 Rng(13);
  std::uniform_real_distribution<double> Point(-2.0, 2.0);
  unsigned Compared = 0;
  for (int Trial = 0; Trial < 300; ++Trial) {
    ir::Graph G;
    const ir::Node *F = randomExpr(G, Rng, 3);
    const ir::Node *X = G.param(ir::ParamKind::Input, "x", ir::Type::F32,
                                ir::Space::Const);
    const ir::Node *T = tangent(G, F, {{X, G.constant(1.0)}});
    double A = Point(Rng), B = Point(Rng);
    auto Fx = [&](double V) {
      return autodifftest::evalAt(F, {{"x", V}, {"y", B}});
    };
    double H = 1e-5;
    // Skip points next to a kink: the one-sided slopes differ there.
    double Left = (Fx(A) - Fx(A - H)) / H, Right = (Fx(A + H) - Fx(A)) / H;
    if (!near(Left, Right, 1e-3))
      continue;
    INFO(ir::shortExpr(F) << " at x = " << A << ", y = " << B);
    CHECK(near(derivAt(T, A, B), central(Fx, A), 1e-5));
    ++Compared;
  }
  CHECK(Compared > 200);
}
