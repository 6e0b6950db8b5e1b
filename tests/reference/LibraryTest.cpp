// The DSL's building blocks (dsl/Library.h): each mask and score_mod, run
// through the fp64 reference, against softmax attention written out by
// hand here; the online softmax's written backward against the derived one.
#include "TestDefs.h"

#include "attn/Error.h"
#include "attn/dsl/Library.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>

using namespace attn;
using namespace attn::dsl;
using reference::Tensor;
using Catch::Matchers::Contains;

namespace {

constexpr int64_t B = 2, H = 2, Sq = 9, Skv = 9, D = 4, DV = 3;

using KeepFn = std::function<bool(int64_t b, int64_t h, int64_t i, int64_t j)>;
using ScoreFn =
    std::function<double(double s, int64_t b, int64_t h, int64_t i, int64_t j)>;

/// Softmax attention over the kept keys with scores score(q·k); a row with
/// no key gives 0.
Tensor softmaxByHand(const reference::AttentionInputs &In, const KeepFn &Keep,
                     const ScoreFn &Score) {
  Tensor O({B, H, Sq, DV});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        std::vector<double> S(Skv, -std::numeric_limits<double>::infinity());
        double Max = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < Skv; ++j) {
          if (!Keep(b, h, i, j))
            continue;
          double Dot = 0;
          for (int64_t x = 0; x < D; ++x)
            Dot += In.Q.at({b, h, i, x}) * In.K.at({b, h, j, x});
          S[j] = Score(Dot, b, h, i, j);
          Max = std::max(Max, S[j]);
        }
        if (Max == -std::numeric_limits<double>::infinity())
          continue;
        double Sum = 0;
        for (int64_t j = 0; j < Skv; ++j)
          Sum += std::exp(S[j] - Max);
        for (int64_t j = 0; j < Skv; ++j)
          for (int64_t y = 0; y < DV; ++y)
            O.at({b, h, i, y}) +=
                std::exp(S[j] - Max) / Sum * In.V.at({b, h, j, y});
      }
  return O;
}

double scaledScore(double S, int64_t, int64_t, int64_t, int64_t) {
  return S / std::sqrt(double(D));
}

/// Softmax attention with \p Mask and \p Score from the library.
AttentionDef softmaxDef(MaskMod Mask, ScoreMod Score = score_mods::scaled()) {
  AttentionDef Def("library_case");
  Def.score_mod = std::move(Score);
  Def.mask_mod = std::move(Mask);
  Def.online_func = onlineSoftmax();
  return Def;
}

/// Runs \p Def (whose inputs \p Set fills) in the reference, the direct
/// definition and the online algorithm over blocks of 2 keys, and compares
/// both with the hand-written attention.
void requireMatches(AttentionDef Def, const KeepFn &Keep, const ScoreFn &Score,
                    const std::function<void(reference::InputValues &)> &Set =
                        {}) {
  CompiledDefinition C = compile(Def);
  std::mt19937_64 Rng(5);
  reference::AttentionInputs In =
      testdefs::randomInputs(C, Rng, B, H, H, Sq, Skv, D, DV);
  if (Set)
    Set(In.Inputs);
  Tensor Want = softmaxByHand(In, Keep, Score);
  CHECK(reference::maxMixedError(reference::attentionDirect(C, In).O, Want) <
        1e-12);
  CHECK(reference::maxMixedError(reference::attentionOnline(C, In, 2).O,
                                 Want) < 1e-12);
}

} // namespace

TEST_CASE("library masks equal the masks written out", "[library]") {
  SECTION("causal") {
    requireMatches(softmaxDef(masks::causal()),
                   [](int64_t, int64_t, int64_t i, int64_t j) { return i >= j; },
                   scaledScore);
  }
  SECTION("sliding window of 3 keys") {
    requireMatches(softmaxDef(masks::slidingWindow(3)),
                   [](int64_t, int64_t, int64_t i, int64_t j) {
                     return i >= j && i - j < 3;
                   },
                   scaledScore);
  }
  SECTION("prefix-LM, P a runtime int32 scalar") {
    AttentionDef Def = softmaxDef(masks::prefixLm("P"));
    Def.inputs.declare("P", InputShape::Scalar, InputType::I32);
    requireMatches(
        Def,
        [](int64_t, int64_t, int64_t i, int64_t j) { return i >= j || j < 4; },
        scaledScore, [](reference::InputValues &V) { V["P"] = Tensor({}, 4); });
  }
  SECTION("documents of int32 per-token ids") {
    AttentionDef Def = softmaxDef(masks::document("dq", "dk"));
    Def.inputs.declare("dq", InputShape::PerQueryToken, InputType::I32)
        .declare("dk", InputShape::PerKeyToken, InputType::I32);
    // Batch 0: documents [0, 3), [3, 7), [7, 9); batch 1: one document.
    auto Doc = [](int64_t b, int64_t t) -> int64_t {
      return b == 1 ? 0 : t < 3 ? 0 : t < 7 ? 1 : 2;
    };
    requireMatches(
        Def,
        [&](int64_t b, int64_t, int64_t i, int64_t j) {
          return i >= j && Doc(b, i) == Doc(b, j);
        },
        scaledScore, [&](reference::InputValues &V) {
          Tensor Ids({B, Sq});
          for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < Sq; ++t)
              Ids.at({b, t}) = double(Doc(b, t));
          V["dq"] = Ids;
          V["dk"] = Ids;
        });
  }
  SECTION("chunks of C = 4 tokens") {
    AttentionDef Def = softmaxDef(masks::chunked("C"));
    Def.inputs.declare("C", InputShape::Scalar, InputType::I32);
    requireMatches(
        Def,
        [](int64_t, int64_t, int64_t i, int64_t j) {
          return i >= j && i / 4 == j / 4;
        },
        scaledScore, [](reference::InputValues &V) { V["C"] = Tensor({}, 4); });
  }
  SECTION("either and both") {
    MaskMod FirstKey = [](SymbolScalar, SymbolScalar, SymbolScalar,
                          SymbolScalar kv_idx) { return kv_idx == 0; };
    requireMatches(softmaxDef(masks::either(masks::slidingWindow(2), FirstKey)),
                   [](int64_t, int64_t, int64_t i, int64_t j) {
                     return (i >= j && i - j < 2) || j == 0;
                   },
                   scaledScore);
    MaskMod EvenKeys = [](SymbolScalar, SymbolScalar, SymbolScalar,
                          SymbolScalar kv_idx) { return mod(kv_idx, 2) == 0; };
    requireMatches(softmaxDef(masks::both(masks::causal(), EvenKeys)),
                   [](int64_t, int64_t, int64_t i, int64_t j) {
                     return i >= j && j % 2 == 0;
                   },
                   scaledScore);
  }
}

TEST_CASE("library score_mods equal the formulas written out", "[library]") {
  auto Everything = [](int64_t, int64_t, int64_t, int64_t) { return true; };
  SECTION("softcap after the 1/sqrt(D) scale") {
    requireMatches(
        softmaxDef({}, score_mods::then(score_mods::scaled(),
                                        score_mods::softcap(0.5))),
        Everything, [](double S, int64_t, int64_t, int64_t, int64_t) {
          return 0.5 * std::tanh(S / std::sqrt(double(D)) / 0.5);
        });
  }
  SECTION("ALiBi with per-head slopes, causal") {
    AttentionDef Def = softmaxDef(
        masks::causal(),
        score_mods::then(score_mods::scaled(), score_mods::alibi("slopes")));
    Def.inputs.declare("slopes", InputShape::PerHead);
    const double Slopes[H] = {0.25, 0.125};
    requireMatches(
        Def, [](int64_t, int64_t, int64_t i, int64_t j) { return i >= j; },
        [&](double S, int64_t, int64_t h, int64_t i, int64_t j) {
          return S / std::sqrt(double(D)) + Slopes[h] * double(j - i);
        },
        [&](reference::InputValues &V) {
          Tensor T({H});
          T.Data = {Slopes[0], Slopes[1]};
          V["slopes"] = T;
        });
  }
}

TEST_CASE("the online softmax's written backward equals the derived one",
          "[library]") {
  AttentionDef Written = softmaxDef(masks::slidingWindow(4));
  AttentionDef Derived = Written;
  Derived.online_func = onlineSoftmax(/*WrittenBackward=*/false);
  CompiledDefinition CW = compile(Written), CD = compile(Derived);
  std::mt19937_64 Rng(9);
  reference::AttentionInputs In =
      testdefs::randomInputs(CW, Rng, B, H, 1, Sq, Skv, D, DV);
  Tensor DO = Tensor::normal({B, H, Sq, DV}, Rng);
  reference::AttentionGrads GW = reference::attentionBackward(CW, In, DO);
  reference::AttentionGrads GD = reference::attentionBackward(CD, In, DO);
  CHECK(reference::maxMixedError(GD.DQ, GW.DQ) < 1e-12);
  CHECK(reference::maxMixedError(GD.DK, GW.DK) < 1e-12);
  CHECK(reference::maxMixedError(GD.DV, GW.DV) < 1e-12);
  // Not vacuous: the gradients are not all zero.
  double Norm = 0;
  for (double X : GW.DQ.Data)
    Norm += std::fabs(X);
  CHECK(Norm > 0);
}

TEST_CASE("library blocks refuse nonsense parameters by name", "[library]") {
  CHECK_THROWS_AS(masks::slidingWindow(0), UserError);
  CHECK_THROWS_WITH(masks::slidingWindow(-3),
                    Contains("masks::slidingWindow: window -3") &&
                        Contains("expected >= 1"));
  CHECK_THROWS_WITH(score_mods::softcap(0.0),
                    Contains("score_mods::softcap: cap 0") &&
                        Contains("expected > 0"));
  CHECK_THROWS_AS(score_mods::softcap(std::nan("")), UserError);
  CHECK_THROWS_AS(score_mods::softcap(INFINITY), UserError);
}
