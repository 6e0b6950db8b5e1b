// The mask at one point by the IR's scalar semantics, for the tests that
// compare the mask analysis's block classes and the packed kernels' block
// ranges with brute-force element evaluation.
#ifndef ATTN_TESTS_CODEGEN_MASKTESTEVAL_H
#define ATTN_TESTS_CODEGEN_MASKTESTEVAL_H

#include "attn/Pipeline.h"
#include "attn/analysis/MaskBounds.h"
#include "attn/ir/Eval.h"
#include "attn/ir/Walk.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/Casting.h"

#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

namespace attn::test {

/// Values of the custom inputs at one (batch, head): per-row and per-key
/// inputs as arrays, scalars and per-head inputs as one value.
struct InputValues {
  std::map<std::string, std::vector<double>> Arrays;
  std::map<std::string, double> Values;
};

/// The mask at one point, node by node with ir::evalUnary/evalBinary (the
/// semantics the reference interpreter and constant folding share).
inline bool maskAt(const ir::Graph &G, const ir::Node *Mask,
                   const InputValues &In, int64_t B, int64_t H, int64_t Q,
                   int64_t K, int64_t HeadDim) {
  llvm::DenseMap<const ir::Node *, double> V;
  for (const ir::Node *N : ir::topologicalOrder({Mask})) {
    double X = 0;
    if (auto *C = llvm::dyn_cast<ir::ConstNode>(N)) {
      X = C->getValue();
    } else if (auto *P = llvm::dyn_cast<ir::ParamNode>(N)) {
      llvm::StringRef Name = P->getName();
      if (P->getParamKind() == ir::ParamKind::HeadDim)
        X = double(HeadDim);
      else if (P->getParamKind() == ir::ParamKind::Index)
        X = Name == "b" ? B : Name == "h" ? H : Name == "q_idx" ? Q : K;
      else {
        const ir::InputDecl *D = G.decls().findInput(Name);
        REQUIRE(D);
        if (D->Shape == ir::InputShape::PerRow)
          X = In.Arrays.at(Name.str()).at(Q);
        else if (D->Shape == ir::InputShape::PerKey)
          X = In.Arrays.at(Name.str()).at(K);
        else
          X = In.Values.at(Name.str());
      }
    } else if (N->getKind() == ir::NodeKind::Select) {
      X = ir::evalSelect(V[N->operand(0)], V[N->operand(1)], V[N->operand(2)]);
    } else if (N->operands().size() == 1) {
      X = ir::evalUnary(N->getKind(), V[N->operand(0)]);
    } else {
      X = ir::evalBinary(N->getKind(), V[N->operand(0)], V[N->operand(1)]);
    }
    V[N] = X;
  }
  return V[Mask] != 0.0;
}

/// A definition compiled, and its mask analysed.
struct Compiled {
  CompiledDefinition Def;
  analysis::MaskAnalysis A;
  explicit Compiled(const dsl::DefinitionBase &D)
      : Def(compile(D)), A(analysis::analyzeMask(*Def.Graph)) {}
  const ir::Graph &graph() const { return *Def.Graph; }
};

} // namespace attn::test

#endif
