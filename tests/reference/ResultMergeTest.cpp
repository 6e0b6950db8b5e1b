// The public merge's rule in double precision: for every transformer
// example whose results merge (analysis::analyzeResultMerge), the results
// (o and finals, after the epilogue) of random parts of the keys, each run
// alone with its keys' own kv_idx, merged by analysis::mergeResults give
// the result over all keys; the examples that cannot merge say why.
#include "ExampleRegistry.h"

#include "attn/analysis/Merge.h"
#include "attn/reference/Attention.h"
#include "attn/reference/InputBinding.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

using namespace attn;
using analysis::MergeKind;
using reference::Tensor;

namespace {

/// Keys [Lo, Hi) of a [B, H, S, D] tensor.
Tensor keys(const Tensor &T, int64_t Lo, int64_t Hi) {
  Tensor R({T.dim(0), T.dim(1), Hi - Lo, T.dim(3)});
  for (int64_t B = 0; B < T.dim(0); ++B)
    for (int64_t H = 0; H < T.dim(1); ++H)
      for (int64_t S = Lo; S < Hi; ++S)
        for (int64_t D = 0; D < T.dim(3); ++D)
          R.at({B, H, S - Lo, D}) = T.at({B, H, S, D});
  return R;
}

/// Entries [Lo, Hi) of the last dimension of \p T (a per-key input's
/// keys).
Tensor lastDim(const Tensor &T, int64_t Lo, int64_t Hi) {
  std::vector<int64_t> Shape = T.Shape;
  int64_t N = Shape.back();
  Shape.back() = Hi - Lo;
  Tensor R(Shape);
  for (int64_t Row = 0; Row < T.numel() / N; ++Row)
    for (int64_t J = Lo; J < Hi; ++J)
      R.Data[Row * (Hi - Lo) + J - Lo] = T.Data[Row * N + J];
  return R;
}

/// Row (b, h, i) of a result.
analysis::ResultState rowOf(const ir::Graph &G,
                            const reference::AttentionOutputs &R, int64_t B,
                            int64_t H, int64_t I) {
  analysis::ResultState S;
  for (int64_t D = 0; D < R.O.dim(3); ++D)
    S.O.push_back(R.O.at({B, H, I, D}));
  for (const ir::RowscaleDecl &F : G.decls().FinalRowscales)
    S.Finals.push_back(R.Finals.at(F.Name).at({B, H, I}));
  return S;
}

double error(double X, double Y) {
  if (std::isinf(X) || std::isinf(Y))
    return X == Y ? 0.0 : INFINITY;
  double D = std::abs(X - Y) / (1 + std::abs(Y));
  return std::isnan(D) ? INFINITY : D;
}

} // namespace

TEST_CASE("result merge: the derived rule of each example",
          "[merge][reference]") {
  auto Info = [](const char *Name) {
    return analysis::analyzeResultMerge(
        *compile(testsupport::registry().get(Name)).Graph);
  };
  CHECK(Info("mha").Kind == MergeKind::LogSumExp);
  CHECK(Info("mha").LseFinal == 0);
  CHECK(Info("softcap_learnable").Kind == MergeKind::LogSumExp);
  CHECK(Info("sigmoid_attn").Kind == MergeKind::Sum);
  CHECK(Info("relu_attn").Kind == MergeKind::Sum);
  analysis::ResultMergeInfo R = Info("retention");
  CHECK(R.Kind == MergeKind::None);
  CHECK_THAT(R.Reason, Catch::Matchers::StartsWith(
                           "its partial states have no merge: o_scale"));
}

TEST_CASE("result merge: results of random parts of the keys merge into the "
          "whole",
          "[merge][reference]") {
  std::mt19937_64 Rng(20261127);
  int Merged = 0;
  for (const dsl::DefinitionBase *Def : testsupport::registry().all()) {
    if (Def->kind() != ir::DefinitionKind::Transformer)
      continue;
    CompiledDefinition C = compile(*Def);
    const ir::Graph &G = *C.Graph;
    analysis::ResultMergeInfo M = analysis::analyzeResultMerge(G);
    if (M.Kind == MergeKind::None)
      continue;
    ++Merged;
    const int64_t B = 2, H = 4, Hkv = 2, D = 5, Sq = 3, Skv = 29;
    reference::AttentionInputs In;
    In.Q = Tensor::normal({B, H, Sq, D}, Rng);
    In.K = Tensor::normal({B, Hkv, Skv, D}, Rng);
    In.V = Tensor::normal({B, Hkv, Skv, D}, Rng);
    In.Inputs = reference::sampleInputs(G, Rng, B, H, Sq, Skv);
    In.QIndexOffset = Skv - Sq;
    reference::AttentionOutputs Whole = reference::attentionOnline(C, In, 0);
    for (int Parts : {2, 3}) {
      std::uniform_int_distribution<int64_t> Cut(1, Skv - 1);
      std::vector<int64_t> Bounds{0, Skv};
      for (int P = 1; P < Parts; ++P)
        Bounds.push_back(Cut(Rng));
      std::sort(Bounds.begin(), Bounds.end());
      Bounds.erase(std::unique(Bounds.begin(), Bounds.end()), Bounds.end());
      std::vector<reference::AttentionOutputs> Results;
      for (size_t P = 0; P + 1 < Bounds.size(); ++P) {
        reference::AttentionInputs Part = In;
        Part.K = keys(In.K, Bounds[P], Bounds[P + 1]);
        Part.V = keys(In.V, Bounds[P], Bounds[P + 1]);
        Part.KvIndexOffset = Bounds[P];
        for (const ir::InputDecl &Decl : G.decls().Inputs)
          if (Decl.Shape == ir::InputShape::PerKey ||
              Decl.Shape == ir::InputShape::Full ||
              Decl.Shape == ir::InputShape::PerKeyToken)
            Part.Inputs[Decl.Name] =
                lastDim(In.Inputs.at(Decl.Name), Bounds[P], Bounds[P + 1]);
        Results.push_back(reference::attentionOnline(C, Part, 0));
      }
      double Err = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < Sq; ++i) {
            analysis::ResultState S = rowOf(G, Results[0], b, h, i);
            for (size_t P = 1; P < Results.size(); ++P)
              analysis::mergeResults(M, S, rowOf(G, Results[P], b, h, i));
            analysis::ResultState W = rowOf(G, Whole, b, h, i);
            for (size_t X = 0; X < W.O.size(); ++X)
              Err = std::max(Err, error(S.O[X], W.O[X]));
            for (size_t X = 0; X < W.Finals.size(); ++X)
              Err = std::max(Err, error(S.Finals[X], W.Finals[X]));
          }
      INFO(Def->name << " parts " << Bounds.size() - 1);
      CHECK(Err < 1e-12);
    }
  }
  CHECK(Merged >= 4);
}

TEST_CASE("result merge: a part without keys is the identity; two parts "
          "by hand",
          "[merge][reference]") {
  analysis::ResultMergeInfo Lse;
  Lse.Kind = MergeKind::LogSumExp;
  Lse.LseFinal = 0;
  analysis::ResultState A{{1.0, 2.0}, {std::log(3.0)}};
  analysis::ResultState Empty{{0.0, 0.0}, {-INFINITY}};
  analysis::ResultState S = A;
  analysis::mergeResults(Lse, S, Empty);
  CHECK(S.O == A.O);
  CHECK(S.Finals == A.Finals);
  S = Empty;
  analysis::mergeResults(Lse, S, A);
  CHECK(S.O == A.O);
  // Weights 3/4 and 1/4: lse = log(3 + 1).
  analysis::ResultState B{{5.0, 6.0}, {0.0}};
  analysis::mergeResults(Lse, S, B);
  CHECK(S.O[0] == Approx(0.75 * 1.0 + 0.25 * 5.0));
  CHECK(S.Finals[0] == Approx(std::log(4.0)));
  analysis::ResultMergeInfo None;
  CHECK_THROWS_WITH(analysis::mergeResults(None, S, B),
                    "internal error: mergeResults: the definition's results do not merge");
}
