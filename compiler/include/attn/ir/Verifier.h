// Structural checks of a graph: the invariants every pass relies on.
#ifndef ATTN_IR_VERIFIER_H
#define ATTN_IR_VERIFIER_H

#include "attn/ir/Graph.h"

namespace attn::ir {

/// Throws InternalError on the first broken invariant: a node's operand count
/// differs from its kind's arity; its type or space differs from what its
/// operands imply; a reduce is not per-row over a per-element operand; an
/// operand was created after its user; a function has no results, an empty
/// result, or the wrong result names for its kind; a declaration names an
/// input twice. (Contract violations a user can cause are the row-reduce
/// analysis's business and are UserErrors.)
void verify(const Graph &G);

} // namespace attn::ir

#endif
