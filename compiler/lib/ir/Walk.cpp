// Graph traversal helpers.
#include "attn/ir/Walk.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/Casting.h"

#include <algorithm>

namespace attn::ir {

std::vector<const Node *> topologicalOrder(llvm::ArrayRef<const Node *> Roots) {
  llvm::DenseSet<const Node *> Seen;
  std::vector<const Node *> Order;
  std::vector<const Node *> Stack(Roots.begin(), Roots.end());
  while (!Stack.empty()) {
    const Node *N = Stack.back();
    Stack.pop_back();
    if (!N || !Seen.insert(N).second)
      continue;
    Order.push_back(N);
    for (const Node *Op : N->operands())
      Stack.push_back(Op);
  }
  std::sort(Order.begin(), Order.end(), [](const Node *A, const Node *B) {
    return A->getId() < B->getId();
  });
  return Order;
}

std::vector<const ParamNode *> reachableParams(
    llvm::ArrayRef<const Node *> Roots) {
  std::vector<const ParamNode *> Params;
  for (const Node *N : topologicalOrder(Roots))
    if (auto *P = llvm::dyn_cast<ParamNode>(N))
      Params.push_back(P);
  return Params;
}

bool dependsOn(const Node *Root, ParamKind K) {
  for (const ParamNode *P : reachableParams({Root}))
    if (P->getParamKind() == K)
      return true;
  return false;
}

} // namespace attn::ir
