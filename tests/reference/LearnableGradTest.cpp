// The examples' learnable inputs get gradients that are not identically
// zero, and that agree with finite differences of the fp64 reference: a
// gradient that is zero whatever the data (a per-head bias added to every
// key of a softmax row) would pass any comparison without checking anything.
#include "ExampleRegistry.h"

#include "Examples.h"

#include "attn/Pipeline.h"
#include "attn/reference/Attention.h"
#include "attn/reference/InputBinding.h"
#include "attn/transforms/Autodiff.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

using namespace attn;
using reference::AttentionInputs;
using reference::Tensor;

namespace {

/// q, k, v and the custom inputs (drawn from their sample ranges) of a
/// small problem with more keys than queries.
AttentionInputs smallProblem(const CompiledDefinition &Def,
                             std::mt19937_64 &Rng) {
  const int64_t B = 2, H = 3, Sq = 7, Skv = 9, D = 4, DV = 3;
  AttentionInputs In;
  In.Q = Tensor::normal({B, H, Sq, D}, Rng);
  In.K = Tensor::normal({B, H, Skv, D}, Rng);
  In.V = Tensor::normal({B, H, Skv, DV}, Rng);
  In.Inputs = reference::sampleInputs(*Def.Graph, Rng, B, H, Sq, Skv);
  In.MaskedRows.assign(Sq, false);
  return In;
}

/// sum(o ∘ dO) of the direct definition.
double loss(const CompiledDefinition &Def, const AttentionInputs &In,
            const Tensor &DO) {
  reference::AttentionOutputs Out = reference::attentionDirect(Def, In);
  double L = 0;
  for (int64_t I = 0; I < Out.O.numel(); ++I)
    L += Out.O.Data[I] * DO.Data[I];
  return L;
}

double maxAbs(const Tensor &T) {
  double M = 0;
  for (double V : T.Data)
    M = std::max(M, std::fabs(V));
  return M;
}

/// Every input gradient of \p Name: not zero, and each element within
/// 1e-6 (relative to the largest) of central finite differences.
void checkInputGradients(const std::string &Name, uint64_t Seed) {
  CompiledDefinition Def = compile(testsupport::registry().get(Name));
  std::vector<const ir::InputDecl *> GradIns =
      transforms::gradInputDecls(*Def.Graph);
  REQUIRE(!GradIns.empty());
  std::mt19937_64 Rng(Seed);
  AttentionInputs In = smallProblem(Def, Rng);
  Tensor DO = Tensor::normal(
      {In.Q.dim(0), In.Q.dim(1), In.Q.dim(2), In.V.dim(3)}, Rng);
  reference::AttentionGrads Grads = reference::attentionBackward(Def, In, DO);
  for (const ir::InputDecl *Decl : GradIns) {
    INFO(Name << ": d_" << Decl->Name);
    const Tensor &Symbolic = Grads.DInputs.at(Decl->Name);
    Tensor &X = In.Inputs.at(Decl->Name);
    Tensor Fd(X.Shape);
    for (int64_t I = 0; I < X.numel(); ++I) {
      double Saved = X.Data[I];
      double Step = 1e-6 * std::max(1.0, std::fabs(Saved));
      X.Data[I] = Saved + Step;
      double Up = loss(Def, In, DO);
      X.Data[I] = Saved - Step;
      double Down = loss(Def, In, DO);
      X.Data[I] = Saved;
      Fd.Data[I] = (Up - Down) / (2 * Step);
    }
    // Both must be far from zero: the finite differences say the input
    // moves the output, the symbolic gradient says the kernels' formula
    // sees it.
    CHECK(maxAbs(Fd) > 1e-2);
    CHECK(maxAbs(Symbolic) > 1e-2);
    double Scale = 1.0 + maxAbs(Fd);
    for (int64_t I = 0; I < X.numel(); ++I) {
      INFO("element " << I << ": symbolic " << Symbolic.Data[I]
                      << ", finite differences " << Fd.Data[I]);
      CHECK(std::fabs(Symbolic.Data[I] - Fd.Data[I]) / Scale < 1e-6);
    }
  }
}

} // namespace

TEST_CASE("alibi_learnable: head_bias and slopes have non-zero gradients "
          "that match finite differences",
          "[reference][gradients][alibi_learnable]") {
  for (uint64_t Seed : {1u, 2u, 3u})
    checkInputGradients("alibi_learnable", Seed);
}

TEST_CASE("every input that requires a gradient moves some example's "
          "output",
          "[reference][gradients]") {
  // A new learnable example is held to the same rule: its inputs'
  // gradients are checked here, not only in `attnc check`, where a zero
  // gradient agrees with zero finite differences.
  int Learnable = 0;
  for (const std::string &Name : testsupport::exampleNames()) {
    const dsl::DefinitionBase &D = testsupport::registry().get(Name);
    if (D.kind() != ir::DefinitionKind::Transformer)
      continue;
    CompiledDefinition Def = compile(D);
    if (transforms::gradInputDecls(*Def.Graph).empty())
      continue;
    ++Learnable;
    checkInputGradients(Name, 5);
  }
  CHECK(Learnable == 2);
}
