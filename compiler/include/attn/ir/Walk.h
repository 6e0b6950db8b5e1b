// Graph traversal helpers: reachable nodes in a dependency-respecting order.
#ifndef ATTN_IR_WALK_H
#define ATTN_IR_WALK_H

#include "attn/ir/Node.h"

#include "llvm/ADT/ArrayRef.h"

#include <vector>

namespace attn::ir {

/// Every node reachable from \p Roots, operands before users (creation order,
/// which a graph guarantees is a topological order).
std::vector<const Node *> topologicalOrder(llvm::ArrayRef<const Node *> Roots);

/// The parameters reachable from \p Roots, in creation order.
std::vector<const ParamNode *> reachableParams(
    llvm::ArrayRef<const Node *> Roots);

/// True when \p Root depends on a parameter of kind \p K.
bool dependsOn(const Node *Root, ParamKind K);

} // namespace attn::ir

#endif
