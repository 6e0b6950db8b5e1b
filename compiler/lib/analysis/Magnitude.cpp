// Magnitude bounds of IR expressions (attn/analysis/Magnitude.h).
#include "attn/analysis/Magnitude.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/Casting.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

namespace attn::analysis {

using ir::Node;
using ir::NodeKind;

namespace {

constexpr double Unbounded = std::numeric_limits<double>::infinity();
/// |x| of any int32.
constexpr double IntBound = 2147483648.0;

class Bounder {
public:
  double bound(const Node *N) {
    auto It = Memo.find(N);
    if (It != Memo.end())
      return It->second;
    double B = compute(N);
    // A bound that is not finite, or NaN from inf · 0, is no bound.
    if (!(B < Unbounded))
      B = Unbounded;
    Memo[N] = B;
    return B;
  }

private:
  llvm::DenseMap<const Node *, double> Memo;

  double compute(const Node *N) {
    // Whatever computes them, an i32 wraps and a boolean is 0 or 1.
    if (N->getType() == ir::Type::Bool)
      return 1.0;
    if (N->getType() == ir::Type::I32)
      return IntBound;
    switch (N->getKind()) {
    case NodeKind::Const: {
      double V = llvm::cast<ir::ConstNode>(N)->getValue();
      return std::isfinite(V) ? std::fabs(V) : Unbounded;
    }
    case NodeKind::Param:
      return Unbounded; // a float parameter is data: scores, inputs, finals
    case NodeKind::Neg:
    case NodeKind::Abs:
    case NodeKind::Relu:
    case NodeKind::ToFloat:
      return bound(N->operand(0));
    case NodeKind::Tanh:
    case NodeKind::Sigmoid:
      return bound(N->operand(0)) < Unbounded ? 1.0 : Unbounded;
    case NodeKind::Exp:
      return expBound(bound(N->operand(0)), 1.0);
    case NodeKind::Exp2:
      return expBound(bound(N->operand(0)), std::log(2.0));
    case NodeKind::Log:
    case NodeKind::Log2:
    case NodeKind::Sqrt:
    case NodeKind::Rsqrt:
    case NodeKind::Div:
    case NodeKind::FloorDiv:
    case NodeKind::Mod:
    case NodeKind::Reduce:
      return Unbounded;
    case NodeKind::Add:
    case NodeKind::Sub:
      return bound(N->operand(0)) + bound(N->operand(1));
    case NodeKind::Mul:
      return bound(N->operand(0)) * bound(N->operand(1));
    case NodeKind::Max:
    case NodeKind::Min:
      return std::max(bound(N->operand(0)), bound(N->operand(1)));
    case NodeKind::Select:
      return std::max(bound(N->operand(1)), bound(N->operand(2)));
    case NodeKind::Not:
    case NodeKind::Lt:
    case NodeKind::Le:
    case NodeKind::Gt:
    case NodeKind::Ge:
    case NodeKind::Eq:
    case NodeKind::Ne:
    case NodeKind::And:
    case NodeKind::Or:
      return 1.0;
    }
    return Unbounded;
  }

  /// exp(k·x) for |x| ≤ B, while it stays far from overflow.
  static double expBound(double B, double K) {
    return B * K < 80.0 ? std::exp(B * K) : Unbounded;
  }
};

} // namespace

double magnitudeBound(const Node *N) { return Bounder().bound(N); }

bool isProvablyFinite(const Node *N) { return magnitudeBound(N) < FLT_MAX; }

} // namespace attn::analysis
