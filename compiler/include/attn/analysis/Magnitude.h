// Magnitude bounds: an upper bound on |value| of an IR expression at every
// point where it is evaluated, masked or out-of-range elements included.
#ifndef ATTN_ANALYSIS_MAGNITUDE_H
#define ATTN_ANALYSIS_MAGNITUDE_H

#include "attn/ir/Node.h"

namespace attn::analysis {

/// An upper bound on the magnitude of \p N wherever it is evaluated, or
/// +inf when none is known. Integers and booleans are bounded by their
/// type; constants by their value; sums, products, selects, tanh and the
/// sigmoid of bounded operands by interval arithmetic. Scores and custom
/// inputs (data), divisions, logarithms and roots (poles and NaN at points
/// the mask may exclude) are unbounded.
double magnitudeBound(const ir::Node *N);

/// Whether \p N is finite at every point: magnitudeBound(N) is below the
/// largest float. The backward multiplies such a factor by a dS of 0 at a
/// masked element without a guard (0 · inf would be NaN).
bool isProvablyFinite(const ir::Node *N);

} // namespace attn::analysis

#endif
