// Simplification: constant folding and algebraic identities.
#ifndef ATTN_TRANSFORMS_SIMPLIFY_H
#define ATTN_TRANSFORMS_SIMPLIFY_H

#include "attn/ir/Graph.h"

namespace attn::transforms {

/// Rewrites every function of \p G in place (nodes are immutable, so results
/// are re-pointed at new nodes; the old ones are left for DCE):
///  * folds any elementwise node whose operands are all constants, with the
///    same scalar semantics as the reference interpreter (ir/Eval.h);
///  * x+0, 0+x, x-0, x*1, 1*x, x/1 → x; -(-x) → x; !!x → x;
///    max(x,x), min(x,x) → x; select(true,a,b) → a, select(false,a,b) → b,
///    select(c,a,a) → a;
///    x + (-y) → x - y; x - (-y) → x + y;
///  * puts a constant operand of a commutative operation on the right.
/// Nothing is rewritten in a way that differs for inf or NaN operands (x*0
/// and x-x stay), and no rewrite changes a value's type or space.
/// A division whose divisor is or folds to the constant 0 (x / (c - c)) is a
/// UserError naming the function, as a literal 0 divisor is while tracing.
void simplify(ir::Graph &G);

} // namespace attn::transforms

#endif
