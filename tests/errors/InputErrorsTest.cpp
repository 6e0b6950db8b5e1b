// User mistakes with custom inputs: reading, declaring and supplying them.
// Each gives its own message naming the function and the input.
#include "Examples.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/dsl/Definition.h"
#include "attn/reference/Attention.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace attn;
using namespace attn::dsl;
using Catch::Contains;
using Catch::Equals;
using Catch::StartsWith;

namespace {

/// mha with its score_mod replaced.
AttentionDef mhaWithScoreMod(ScoreMod Mod) {
  AttentionDef Def = examples::mha();
  Def.name = "bad";
  Def.score_mod = std::move(Mod);
  return Def;
}

/// Inputs for sigmoid_attn's reference: q [1,2,4,8], k/v [1,2,5,8], and
/// the declared scalar softmax_bias.
reference::AttentionInputs sigmoidInputs() {
  reference::AttentionInputs In;
  In.Q = reference::Tensor({1, 2, 4, 8}, 0.1);
  In.K = reference::Tensor({1, 2, 5, 8}, 0.2);
  In.V = reference::Tensor({1, 2, 5, 8}, 0.3);
  In.Inputs["softmax_bias"] = reference::Tensor(std::vector<int64_t>{}, -1.0);
  return In;
}

} // namespace

TEST_CASE("reading a custom input that is not declared") {
  AttentionDef Def = mhaWithScoreMod(
      [](SymbolScalar s, const CustomInputs &in, SymbolScalar, SymbolScalar,
         SymbolScalar, SymbolScalar) { return s + in["nope"]; });
  Def.inputs.declare("bias", InputShape::Scalar);
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("score_mod: ") &&
                          Contains("custom input 'nope' is not declared; "
                                   "declared inputs: bias"));
  // Two declared inputs are listed in declaration order, none as "none".
  Def.inputs.declare("scale", InputShape::PerHead);
  REQUIRE_THROWS_WITH(compile(Def), Contains("declared inputs: bias, scale"));
  AttentionDef Bare = mhaWithScoreMod(
      [](SymbolScalar s, const CustomInputs &in, SymbolScalar, SymbolScalar,
         SymbolScalar, SymbolScalar) { return s + in["nope"]; });
  REQUIRE_THROWS_WITH(compile(Bare), Contains("declared inputs: none"));
}

TEST_CASE("a per_key custom input used in the epilogue") {
  struct F : OnlineFunc {
    F() : OnlineFunc({{"r", Var(0.0)}}, {}) {}
    OnlineFwdResult online_fwd(SymbolScalar s, const Rowscales &rs,
                               SymbolScalar, SymbolScalar,
                               SymbolScalar) const override {
      return {s, {{"r", rs["r"] + s.get_reduce("sum")}}, 1.0};
    }
    EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &rs,
                                       SymbolScalar, SymbolScalar,
                                       SymbolScalar) const override {
      return {o / rs["r"] * inputs()["key_bias"], {}};
    }
    SymbolScalar forward(SymbolScalar s, const Rowscales &, SymbolScalar,
                         SymbolScalar, SymbolScalar,
                         SymbolScalar) const override {
      return s;
    }
  };
  AttentionDef Def("bad");
  Def.inputs.declare("key_bias", InputShape::PerKey);
  Def.online_func = std::make_shared<F>();
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("online_fwd_epilogue: ") &&
                          Contains("custom input 'key_bias' is per_key, but "
                                   "online_fwd_epilogue has no key "
                                   "dimension"));
}

TEST_CASE("linear decay_mod reading a per_key input") {
  LinearAttentionDef Def("bad");
  Def.inputs.declare("gate", InputShape::PerKey);
  Def.decay_mod = [](SymbolScalar g, const CustomInputs &in) {
    return g * in["gate"];
  };
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("decay_mod: ") &&
                          Contains("custom input 'gate' is per_key, but "
                                   "decay_mod has no key dimension"));
}

TEST_CASE("a custom input name that is not an identifier") {
  CustomInputs In;
  REQUIRE_THROWS_AS(In.declare("a b", InputShape::Scalar), UserError);
  REQUIRE_THROWS_WITH(In.declare("a b", InputShape::Scalar),
                      Contains("custom input 'a b': not a valid name"));
  REQUIRE_THROWS_WITH(In.declare("1x", InputShape::Scalar),
                      Contains("custom input '1x': not a valid name"));
  CHECK(In.decls().empty());
}

TEST_CASE("a custom input declared twice") {
  CustomInputs In;
  In.declare("x", InputShape::PerRow);
  REQUIRE_THROWS_AS(In.declare("x", InputShape::Scalar), UserError);
  REQUIRE_THROWS_WITH(In.declare("x", InputShape::Scalar),
                      Contains("custom input 'x' is declared twice"));
  // The first declaration is kept as it was.
  REQUIRE(In.decls().size() == 1);
  CHECK(In.decls()[0].Shape == InputShape::PerRow);
}

TEST_CASE("a custom input with an empty sample range") {
  CustomInputs In;
  REQUIRE_THROWS_AS(In.declare("y", InputShape::Scalar, 1.0, 0.0), UserError);
  REQUIRE_THROWS_WITH(In.declare("y", InputShape::Scalar, 1.0, 0.0),
                      Contains("custom input 'y': sample range is empty"));
}

TEST_CASE("a custom input with a NaN sample bound says it is NaN") {
  CustomInputs In;
  REQUIRE_THROWS_WITH(In.declare("y", InputShape::Scalar, NAN, 1.0),
                      Equals("custom input 'y': sample range bound lo is NaN"));
  REQUIRE_THROWS_WITH(In.declare("y", InputShape::Scalar, 0.0, NAN),
                      Equals("custom input 'y': sample range bound hi is NaN"));
  dsl::LinearAttentionDef L = examples::retentionLinear();
  L.decay_sample_hi = NAN;
  REQUIRE_THROWS_WITH(compile(L), Equals("definition 'retention_linear': "
                                         "decay sample range bound hi is "
                                         "NaN"));
}

TEST_CASE("custom inputs read outside a traced function") {
  AttentionDef Def = examples::sigmoidAttn();
  REQUIRE_THROWS_AS(Def.inputs["softmax_bias"], UserError);
  REQUIRE_THROWS_WITH(Def.inputs["softmax_bias"],
                      Contains("custom input 'softmax_bias' read outside a "
                               "traced function"));
  REQUIRE_THROWS_WITH(Def.inputs.head_dim(),
                      Contains("head_dim() read outside a traced function"));
}

TEST_CASE("reference: a declared custom input with no value") {
  CompiledDefinition C = compile(examples::sigmoidAttn());
  reference::AttentionInputs In = sigmoidInputs();
  // With the value the call works: the error below is the missing input's.
  REQUIRE_NOTHROW(reference::attentionDirect(C, In));
  In.Inputs.erase("softmax_bias");
  REQUIRE_THROWS_AS(reference::attentionDirect(C, In), UserError);
  REQUIRE_THROWS_WITH(reference::attentionDirect(C, In),
                      Contains("custom input 'softmax_bias' is declared but "
                               "no value was supplied"));
}

TEST_CASE("reference: a custom input value of the wrong shape") {
  CompiledDefinition C = compile(examples::sigmoidAttn());
  reference::AttentionInputs In = sigmoidInputs();
  In.Inputs["softmax_bias"] = reference::Tensor({2});
  REQUIRE_THROWS_AS(reference::attentionDirect(C, In), UserError);
  REQUIRE_THROWS_WITH(reference::attentionDirect(C, In),
                      Contains("custom input 'softmax_bias' (scalar) must "
                               "have shape [], got [2]"));
}

TEST_CASE("reference: a value for a custom input that is not declared") {
  CompiledDefinition C = compile(examples::sigmoidAttn());
  reference::AttentionInputs In = sigmoidInputs();
  In.Inputs["extra"] = reference::Tensor(std::vector<int64_t>{});
  REQUIRE_THROWS_AS(reference::attentionDirect(C, In), UserError);
  REQUIRE_THROWS_WITH(reference::attentionDirect(C, In),
                      Contains("custom input 'extra' is supplied but "
                               "'sigmoid_attn' does not declare it"));
}
