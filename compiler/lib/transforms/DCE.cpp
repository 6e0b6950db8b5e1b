// Dead-node elimination by copying the live part of a graph.
#include "attn/transforms/DCE.h"

#include "attn/ir/Walk.h"

namespace attn::transforms {

std::unique_ptr<ir::Graph> eliminateDeadNodes(const ir::Graph &G) {
  auto Out = std::make_unique<ir::Graph>();
  Out->setName(G.name());
  Out->decls() = G.decls();
  std::vector<const ir::Node *> Roots;
  for (const ir::Function &F : G.functions())
    for (const ir::Result &R : F.Results)
      Roots.push_back(R.Value);
  llvm::DenseMap<const ir::Node *, const ir::Node *> Memo;
  // Import in creation order so that the copy numbers nodes as the original.
  for (const ir::Node *N : ir::topologicalOrder(Roots))
    Out->import(N, Memo);
  for (const ir::Function &F : G.functions()) {
    ir::Function &NF = Out->addFunction(F.Name);
    for (const ir::Result &R : F.Results)
      NF.Results.push_back({R.Name, Memo.lookup(R.Value)});
  }
  return Out;
}

} // namespace attn::transforms
