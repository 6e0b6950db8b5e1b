// Scalar semantics of the elementwise node kinds.
#include "attn/ir/Eval.h"

#include "attn/Error.h"

#include <limits>

namespace attn::ir {

// For i32 operands floor(A / B) is exact in double: a quotient of two ints
// below 2^31 that is not an integer is at least 1/|B| away from one, more
// than the division's rounding error (|A/B|·2^-53 < 2^-22/|B|).
double floorDiv(double A, double B) {
  if (B == 0.0)
    return 0.0;
  return std::floor(A / B);
}

double floorMod(double A, double B) {
  if (B == 0.0)
    return A;
  // fmod is exact; moving its result to the divisor's sign is one exact
  // addition when it lands in range (for a tiny opposite-signed remainder
  // of a float it may round to B itself). A zero remainder is a zero of the
  // divisor's sign, as Python's (fmod's has the dividend's).
  double R = std::fmod(A, B);
  if (R == 0.0)
    return std::copysign(0.0, B);
  if ((R < 0.0) != (B < 0.0))
    R += B;
  return R;
}

double evalUnary(NodeKind K, double X) {
  switch (K) {
  case NodeKind::Neg:
    return -X;
  case NodeKind::Exp:
    return std::exp(X);
  case NodeKind::Exp2:
    return std::exp2(X);
  case NodeKind::Log:
    return std::log(X);
  case NodeKind::Log2:
    return std::log2(X);
  case NodeKind::Abs:
    return std::fabs(X);
  case NodeKind::Tanh:
    return std::tanh(X);
  case NodeKind::Sigmoid:
    return 1.0 / (1.0 + std::exp(-X));
  case NodeKind::Relu:
    return std::isnan(X) ? X : (X > 0.0 ? X : 0.0);
  case NodeKind::Sqrt:
    return std::sqrt(X);
  case NodeKind::Rsqrt:
    return 1.0 / std::sqrt(X);
  case NodeKind::Not:
    return X != 0.0 ? 0.0 : 1.0;
  case NodeKind::ToFloat:
    return X; // an i32 value is exact in a double
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
    break;
  }
  throw InternalError("evalUnary on " + mnemonic(K).str());
}

double evalBinary(NodeKind K, double A, double B) {
  switch (K) {
  case NodeKind::Add:
    return A + B;
  case NodeKind::Sub:
    return A - B;
  case NodeKind::Mul:
    return A * B;
  case NodeKind::Div:
    return A / B;
  case NodeKind::Max:
    return std::fmax(A, B);
  case NodeKind::Min:
    return std::fmin(A, B);
  case NodeKind::FloorDiv:
    return floorDiv(A, B);
  case NodeKind::Mod:
    return floorMod(A, B);
  case NodeKind::Lt:
    return A < B;
  case NodeKind::Le:
    return A <= B;
  case NodeKind::Gt:
    return A > B;
  case NodeKind::Ge:
    return A >= B;
  case NodeKind::Eq:
    return A == B;
  case NodeKind::Ne:
    return A != B;
  case NodeKind::And:
    return (A != 0.0) && (B != 0.0);
  case NodeKind::Or:
    return (A != 0.0) || (B != 0.0);
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
    break;
  }
  throw InternalError("evalBinary on " + mnemonic(K).str());
}

double reduceIdentity(ReduceOp Op) {
  switch (Op) {
  case ReduceOp::Max:
    return -std::numeric_limits<double>::infinity();
  case ReduceOp::Sum:
  case ReduceOp::AbsSum:
    return 0.0;
  }
  return 0.0;
}

double reduceStep(ReduceOp Op, double Acc, double X) {
  switch (Op) {
  case ReduceOp::Max:
    return std::fmax(Acc, X);
  case ReduceOp::Sum:
    return Acc + X;
  case ReduceOp::AbsSum:
    return Acc + std::fabs(X);
  }
  return Acc;
}

} // namespace attn::ir
