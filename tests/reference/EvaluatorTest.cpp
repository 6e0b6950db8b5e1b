// Evaluator derivative rules against central differences of ir/Eval.h.
#include "attn/reference/Evaluator.h"
#include "attn/ir/Eval.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace attn;
using ir::NodeKind;
using reference::Dual;

namespace {

constexpr double H = 1e-6;

double centralUnary(NodeKind K, double X) {
  return (ir::evalUnary(K, X + H) - ir::evalUnary(K, X - H)) / (2 * H);
}

/// Points at least 0.2 away from every kink (0 for abs and relu) and inside
/// every domain (log, sqrt and rsqrt need positive arguments).
std::vector<double> pointsFor(NodeKind K) {
  if (K == NodeKind::Log || K == NodeKind::Log2 || K == NodeKind::Sqrt ||
      K == NodeKind::Rsqrt)
    return {0.3, 0.9, 1.7, 4.2};
  return {-2.1, -0.6, 0.35, 1.2, 2.4};
}

} // namespace

TEST_CASE("applyUnary's derivative matches a central difference",
          "[evaluator]") {
  for (NodeKind K :
       {NodeKind::Neg, NodeKind::Exp, NodeKind::Exp2, NodeKind::Log,
        NodeKind::Log2, NodeKind::Abs, NodeKind::Tanh, NodeKind::Sigmoid,
        NodeKind::Relu, NodeKind::Sqrt, NodeKind::Rsqrt})
    for (double X : pointsFor(K)) {
      INFO(ir::mnemonic(K).str() << " at " << X);
      Dual R = reference::applyUnary(K, {X, 1.0});
      CHECK(R.V == ir::evalUnary(K, X));
      CHECK(R.D == Approx(centralUnary(K, X)).epsilon(0).margin(1e-6));
      // The chain rule: a seed of 2.5 scales the derivative.
      CHECK(reference::applyUnary(K, {X, 2.5}).D == Approx(2.5 * R.D));
      // No seed, no derivative.
      CHECK(reference::applyUnary(K, {X, 0.0}).D == 0.0);
    }
}

TEST_CASE("applyUnary(not) is piecewise constant", "[evaluator]") {
  CHECK(reference::applyUnary(NodeKind::Not, {1.0, 1.0}).V == 0.0);
  CHECK(reference::applyUnary(NodeKind::Not, {0.0, 1.0}).V == 1.0);
  CHECK(reference::applyUnary(NodeKind::Not, {0.0, 1.0}).D == 0.0);
}

TEST_CASE("applyBinary's partial derivatives match central differences",
          "[evaluator]") {
  // (a, b) pairs with b away from 0 (div) and a, b well apart (max, min).
  const std::pair<double, double> Points[] = {
      {0.7, -1.9}, {-1.4, 0.5}, {2.2, 3.1}, {-0.3, -2.6}};
  for (NodeKind K : {NodeKind::Add, NodeKind::Sub, NodeKind::Mul, NodeKind::Div,
                     NodeKind::Max, NodeKind::Min})
    for (auto [A, B] : Points) {
      INFO(ir::mnemonic(K).str() << "(" << A << ", " << B << ")");
      double DA =
          (ir::evalBinary(K, A + H, B) - ir::evalBinary(K, A - H, B)) / (2 * H);
      double DB =
          (ir::evalBinary(K, A, B + H) - ir::evalBinary(K, A, B - H)) / (2 * H);
      Dual RA = reference::applyBinary(K, {A, 1.0}, {B, 0.0});
      Dual RB = reference::applyBinary(K, {A, 0.0}, {B, 1.0});
      CHECK(RA.V == ir::evalBinary(K, A, B));
      CHECK(RA.D == Approx(DA).epsilon(0).margin(1e-6));
      CHECK(RB.D == Approx(DB).epsilon(0).margin(1e-6));
      // Forward mode is linear in the seeds: both at once is the sum.
      Dual Both = reference::applyBinary(K, {A, 1.0}, {B, 1.0});
      CHECK(Both.D == Approx(RA.D + RB.D));
    }
}

TEST_CASE("the gradient of max and min goes to the chosen operand, the first "
          "on a tie",
          "[evaluator]") {
  CHECK(reference::applyBinary(NodeKind::Max, {1.0, 1.0}, {1.0, 0.0}).D == 1.0);
  CHECK(reference::applyBinary(NodeKind::Max, {1.0, 0.0}, {1.0, 1.0}).D == 0.0);
  CHECK(reference::applyBinary(NodeKind::Min, {1.0, 1.0}, {1.0, 0.0}).D == 1.0);
  CHECK(reference::applyBinary(NodeKind::Min, {1.0, 0.0}, {1.0, 1.0}).D == 0.0);
  // fmax semantics: the number wins over NaN, and so does its gradient.
  Dual R = reference::applyBinary(NodeKind::Max, {NAN, 1.0}, {2.0, 3.0});
  CHECK(R.V == 2.0);
  CHECK(R.D == 3.0);
  R = reference::applyBinary(NodeKind::Min, {2.0, 3.0}, {NAN, 1.0});
  CHECK(R.V == 2.0);
  CHECK(R.D == 3.0);
}

TEST_CASE("comparisons and logic have zero derivative", "[evaluator]") {
  for (NodeKind K : {NodeKind::Lt, NodeKind::Le, NodeKind::Gt, NodeKind::Ge,
                     NodeKind::Eq, NodeKind::Ne, NodeKind::And, NodeKind::Or}) {
    INFO(ir::mnemonic(K).str());
    Dual R = reference::applyBinary(K, {1.0, 1.0}, {2.0, 1.0});
    CHECK(R.V == ir::evalBinary(K, 1.0, 2.0));
    CHECK(R.D == 0.0);
  }
}
