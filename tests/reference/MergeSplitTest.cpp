// The derived merge in double precision: for every transformer example
// with a merge, splitting the keys of each row at random points, running
// the online algorithm over each part and merging the parts' states gives
// the unsplit result.
#include "ExampleRegistry.h"

#include "attn/analysis/Merge.h"
#include "attn/reference/Attention.h"
#include "attn/reference/InputBinding.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

using namespace attn;
using reference::Tensor;

namespace {

/// max |a - b| / (1 + |b|) over two tensors of one shape; infinities must
/// match exactly, a NaN on either side is an infinite error.
double maxError(const Tensor &A, const Tensor &B) {
  REQUIRE(A.Data.size() == B.Data.size());
  double E = 0;
  for (size_t I = 0; I < A.Data.size(); ++I) {
    double X = A.Data[I], Y = B.Data[I];
    if (std::isinf(X) || std::isinf(Y)) {
      if (X != Y)
        return INFINITY;
      continue;
    }
    double D = std::abs(X - Y) / (1 + std::abs(Y));
    if (!(D <= E))
      E = std::isnan(D) ? INFINITY : D;
  }
  return E;
}

/// Key bounds 0 = b0 <= b1 <= ... = Skv with \p Parts parts, some empty.
std::vector<int64_t> randomBounds(std::mt19937_64 &Rng, int64_t Skv,
                                  int Parts) {
  std::uniform_int_distribution<int64_t> Cut(0, Skv);
  std::vector<int64_t> B{0, Skv};
  for (int I = 1; I < Parts; ++I)
    B.push_back(Cut(Rng));
  std::sort(B.begin(), B.end());
  return B;
}


reference::AttentionInputs inputsFor(const ir::Graph &G, std::mt19937_64 &Rng,
                                     int64_t Sq, int64_t Skv) {
  const int64_t B = 2, H = 4, Hkv = 2, D = 5;
  reference::AttentionInputs In;
  In.Q = Tensor::normal({B, H, Sq, D}, Rng);
  In.K = Tensor::normal({B, Hkv, Skv, D}, Rng);
  In.V = Tensor::normal({B, Hkv, Skv, D}, Rng);
  In.Inputs = reference::sampleInputs(G, Rng, B, H, Sq, Skv);
  // With several queries, one whole row masked: every part of it is empty.
  In.MaskedRows.assign(Sq, false);
  if (Sq > 1)
    In.MaskedRows[Sq / 2] = true;
  return In;
}

} // namespace

TEST_CASE("merge: random splits of the keys give the unsplit result",
          "[merge][reference]") {
  std::mt19937_64 Rng(20261126);
  int Merged = 0;
  for (const dsl::DefinitionBase *D : testsupport::registry().all()) {
    if (D->kind() != ir::DefinitionKind::Transformer)
      continue;
    CompiledDefinition C = compile(*D);
    analysis::MergeInfo M = analysis::analyzeMerge(*C.Graph);
    if (M.Kind == analysis::MergeKind::None)
      continue;
    ++Merged;
    // Decode shapes: a few queries (bottom-right of the keys for the causal
    // ones: q_idx runs to Skv - 1 by the index offset) over many keys.
    for (int64_t Sq : {1, 4}) {
      const int64_t Skv = 37;
      reference::AttentionInputs In = inputsFor(*C.Graph, Rng, Sq, Skv);
      In.QIndexOffset = Skv - Sq;
      reference::AttentionOutputs Whole =
          reference::attentionOnline(C, In, /*BlockN=*/0);
      for (int Parts : {2, 3, 7}) {
        std::vector<int64_t> Bounds = randomBounds(Rng, Skv, Parts);
        INFO(D->name << " sq " << Sq << " parts " << Parts);
        reference::AttentionOutputs Split =
            reference::attentionSplitMerged(C, In, Bounds, M);
        CHECK(maxError(Split.O, Whole.O) < 1e-12);
        for (const auto &[Name, T] : Whole.Finals) {
          INFO("final " << Name);
          CHECK(maxError(Split.Finals.at(Name), T) < 1e-12);
        }
      }
    }
  }
  // Every transformer example but retention; retention_combine by its own
  // combine.
  CHECK(Merged == 11);
}

TEST_CASE("merge: the wrong rule is caught", "[merge][reference]") {
  // Summing softmax states that were normalised to different maxima is
  // not the unsplit result: the property above is a real check.
  std::mt19937_64 Rng(7);
  CompiledDefinition C = compile(testsupport::registry().get("mha"));
  reference::AttentionInputs In = inputsFor(*C.Graph, Rng, 1, 16);
  In.QIndexOffset = 15;
  analysis::MergeInfo Wrong;
  Wrong.Kind = analysis::MergeKind::Sum;
  reference::AttentionOutputs Whole = reference::attentionOnline(C, In, 0);
  reference::AttentionOutputs Split =
      reference::attentionSplitMerged(C, In, {0, 5, 16}, Wrong);
  CHECK(maxError(Split.O, Whole.O) > 1e-3);
}

TEST_CASE("merge: split bounds are checked", "[merge][reference]") {
  std::mt19937_64 Rng(1);
  CompiledDefinition C = compile(testsupport::registry().get("relu_attn"));
  reference::AttentionInputs In = inputsFor(*C.Graph, Rng, 1, 8);
  analysis::MergeInfo M = analysis::analyzeMerge(*C.Graph);
  for (std::vector<int64_t> Bad :
       {std::vector<int64_t>{0}, {1, 8}, {0, 7}, {0, 5, 3, 8}})
    CHECK_THROWS_WITH(reference::attentionSplitMerged(C, In, Bad, M),
                      "attentionSplitMerged: the bounds must rise from 0 to "
                      "seq_kv (8)");
}
