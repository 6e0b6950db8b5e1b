// Fully masked rows: O == 0 exactly, finals -inf, no NaN fwd or bwd.
#include "TestDefs.h"

#include "Examples.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace attn;
using dsl::SymbolScalar;
using reference::Tensor;

namespace {

bool anyNaN(const Tensor &T) {
  for (double X : T.Data)
    if (std::isnan(X))
      return true;
  return false;
}

/// Checks row \p I of every (b, h): O == 0 exactly and finals == -inf.
void requireMaskedRow(const reference::AttentionOutputs &Out, int64_t I) {
  for (int64_t B = 0; B < Out.O.dim(0); ++B)
    for (int64_t H = 0; H < Out.O.dim(1); ++H) {
      for (int64_t X = 0; X < Out.O.dim(3); ++X)
        CHECK(Out.O.at({B, H, I, X}) == 0.0);
      for (const auto &[Name, T] : Out.Finals) {
        INFO("final " << Name);
        CHECK(T.at({B, H, I}) == -INFINITY);
      }
    }
}

std::vector<dsl::AttentionDef> definitions() {
  return {examples::mha(), examples::sigmoidAttn(), examples::reluAttn(),
          examples::retention()};
}

} // namespace

TEST_CASE("rows masked by MaskedRows give O = 0 and finals = -inf, no NaN",
          "[masked]") {
  for (const dsl::AttentionDef &Def : definitions()) {
    INFO(Def.name);
    CompiledDefinition C = compile(Def);
    std::mt19937_64 Rng(17);
    reference::AttentionInputs In =
        testdefs::randomInputs(C, Rng, 2, 2, 1, 6, 8, 3, 4);
    In.MaskedRows = {true, false, false, true, false, true};
    std::vector<reference::AttentionOutputs> Outs = {
        reference::attentionDirect(C, In)};
    for (int64_t Block : {1, 2, 3, 0})
      Outs.push_back(reference::attentionOnline(C, In, Block));
    for (const reference::AttentionOutputs &Out : Outs) {
      for (int64_t I : {0, 3, 5})
        requireMaskedRow(Out, I);
      CHECK_FALSE(anyNaN(Out.O));
      for (const auto &[Name, T] : Out.Finals)
        CHECK_FALSE(anyNaN(T));
      // Unmasked rows are not zero (a mask that leaked to every row would
      // pass the checks above).
      double Norm = 0;
      for (int64_t X = 0; X < Out.O.dim(3); ++X)
        Norm += std::fabs(Out.O.at({0, 0, 1, X}));
      CHECK(Norm > 0);
    }
  }
}

TEST_CASE("rows that mask_mod masks completely behave the same", "[masked]") {
  // Keys only ahead of the query, so query rows at or past the last key have
  // none: with Sq = 6 and Skv = 4, rows 3, 4, 5 are empty.
  dsl::AttentionDef Def = examples::mha();
  Def.name = "mha_ahead";
  Def.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q,
                    SymbolScalar kv) { return kv > q; };
  CompiledDefinition C = compile(Def);
  std::mt19937_64 Rng(23);
  reference::AttentionInputs In =
      testdefs::randomInputs(C, Rng, 1, 2, 2, 6, 4, 3, 2);
  for (int64_t Block : {1, 3, 0}) {
    INFO("block " << Block);
    reference::AttentionOutputs Out = reference::attentionOnline(C, In, Block);
    for (int64_t I : {3, 4, 5})
      requireMaskedRow(Out, I);
    CHECK_FALSE(anyNaN(Out.O));
    CHECK(std::isfinite(Out.Finals.at("lse").at({0, 0, 0})));
  }
  reference::AttentionOutputs Direct = reference::attentionDirect(C, In);
  for (int64_t I : {3, 4, 5})
    requireMaskedRow(Direct, I);
}

TEST_CASE("a definition whose mask keeps nothing gives zeros everywhere",
          "[masked]") {
  dsl::AttentionDef Def = examples::retention();
  Def.name = "retention_none";
  Def.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q,
                    SymbolScalar kv) { return kv > q + 100; };
  CompiledDefinition C = compile(Def);
  std::mt19937_64 Rng(29);
  reference::AttentionInputs In =
      testdefs::randomInputs(C, Rng, 1, 1, 1, 3, 5, 2, 2);
  reference::AttentionOutputs Out = reference::attentionOnline(C, In, 2);
  for (int64_t I = 0; I < 3; ++I)
    requireMaskedRow(Out, I);
  CHECK(Out.Finals.size() == 2); // retention's r and r_raw
}

TEST_CASE("backward through masked rows is finite and gives them no gradient",
          "[masked][backward]") {
  CompiledDefinition C = compile(examples::mha());
  std::mt19937_64 Rng(31);
  reference::AttentionInputs In =
      testdefs::randomInputs(C, Rng, 1, 2, 1, 5, 5, 3, 2);
  In.MaskedRows = {false, true, false, false, true};
  Tensor DO = Tensor::normal({1, 2, 5, 2}, Rng);
  reference::AttentionGrads G = reference::attentionBackward(C, In, DO);
  CHECK_FALSE(anyNaN(G.DQ));
  CHECK_FALSE(anyNaN(G.DK));
  CHECK_FALSE(anyNaN(G.DV));
  for (int64_t H = 0; H < 2; ++H)
    for (int64_t I : {1, 4})
      for (int64_t X = 0; X < 3; ++X)
        CHECK(G.DQ.at({0, H, I, X}) == 0.0);
  // An unmasked row does get a gradient.
  CHECK(G.DQ.at({0, 0, 2, 0}) != 0.0);
}
