// Scalar semantics of every elementwise node kind, shared by constant
// folding and the reference interpreter so that both agree by construction.
#ifndef ATTN_IR_EVAL_H
#define ATTN_IR_EVAL_H

#include "attn/ir/Node.h"

#include <cmath>

namespace attn::ir {

/// Booleans are 0.0 and 1.0; i32 values are exact integers in a double.
double evalUnary(NodeKind K, double X);
double evalBinary(NodeKind K, double A, double B);
/// floordiv and mod (docs/ir-semantics.md): floor(A / B) and the remainder
/// with the divisor's sign, A − B·floor(A / B) (computed as an adjusted
/// fmod); a zero divisor gives 0 and A, so A = B·floordiv + mod still holds.
double floorDiv(double A, double B);
double floorMod(double A, double B);
inline double evalSelect(double C, double A, double B) { return C != 0.0 ? A : B; }

/// The identity of a reduction (the value of an empty one).
double reduceIdentity(ReduceOp Op);
/// Folds one element into a running reduction.
double reduceStep(ReduceOp Op, double Acc, double X);

} // namespace attn::ir

#endif
