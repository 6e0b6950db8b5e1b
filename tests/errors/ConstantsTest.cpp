// NaN and infinite constants, and division by a constant zero, are user
// mistakes found while tracing; each message names the function and the
// operation. An infinity that is meant is written x.constant(±INFINITY).
#include "Examples.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/dsl/Definition.h"
#include "attn/reference/Checker.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>

using namespace attn;
using namespace attn::dsl;
using Catch::Contains;
using Catch::Equals;
using Catch::StartsWith;

namespace {

using Body = std::function<SymbolScalar(SymbolScalar score)>;

AttentionDef withScoreMod(Body F) {
  AttentionDef Def = examples::mha();
  Def.name = "consts";
  Def.score_mod = [F](SymbolScalar score, const CustomInputs &, SymbolScalar,
                      SymbolScalar, SymbolScalar, SymbolScalar) {
    return F(score);
  };
  return Def;
}

} // namespace

TEST_CASE("a lifted infinite constant names the function and the operation",
          "[errors][constants]") {
  CHECK_THROWS_WITH(compile(withScoreMod([](SymbolScalar s) {
                      return s + INFINITY;
                    })),
                    StartsWith("score_mod: 'add' with the constant inf; ") &&
                        Contains("x.constant(INFINITY)"));
  CHECK_THROWS_WITH(compile(withScoreMod([](SymbolScalar s) {
                      return s.max(-INFINITY);
                    })),
                    StartsWith("score_mod: 'max' with the constant -inf"));
  CHECK_THROWS_WITH(compile(withScoreMod([](SymbolScalar s) {
                      return select(s > 0.0, s, -INFINITY);
                    })),
                    StartsWith("score_mod: 'select' with the constant -inf"));
}

TEST_CASE("a NaN constant names the function and the operation",
          "[errors][constants]") {
  CHECK_THROWS_WITH(
      compile(withScoreMod([](SymbolScalar s) { return NAN * s; })),
      StartsWith("score_mod: 'mul' with the constant NaN"));
  CHECK_THROWS_WITH(
      compile(withScoreMod([](SymbolScalar s) { return s + s.constant(NAN); })),
      StartsWith("score_mod: 'constant' of NaN"));
  AttentionDef Def = examples::mha();
  Def.name = "consts";
  Def.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q_idx,
                    SymbolScalar kv_idx) { return q_idx >= kv_idx + NAN; };
  CHECK_THROWS_WITH(compile(Def),
                    StartsWith("mask_mod: 'add' with the constant NaN"));
}

TEST_CASE("division by a constant zero names the function and the operands",
          "[errors][constants]") {
  for (Body F : {Body([](SymbolScalar s) { return s / 0; }),
                 Body([](SymbolScalar s) { return s / 0.0; }),
                 Body([](SymbolScalar s) { return s / -0.0; }),
                 Body([](SymbolScalar s) { return s / s.constant(0.0); })})
    CHECK_THROWS_WITH(compile(withScoreMod(F)),
                      Equals("score_mod: 'div' divides `score` by the "
                             "constant 0"));
  // A divisor that is zero only for some values is not a constant.
  CHECK_NOTHROW(compile(withScoreMod([](SymbolScalar s) {
    return s / (s * s + 1.0);
  })));
}

TEST_CASE("floordiv and mod by a constant zero name the function and the "
          "operation",
          "[errors][constants][floordiv]") {
  AttentionDef Def = examples::mha();
  Def.name = "consts";
  Def.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q_idx,
                    SymbolScalar kv_idx) {
    return floordiv(q_idx, 0) == floordiv(kv_idx, 64);
  };
  CHECK_THROWS_WITH(compile(Def),
                    Equals("mask_mod: 'floordiv' divides `q_idx` by the "
                           "constant 0"));
  Def.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q_idx,
                    SymbolScalar kv_idx) {
    return mod(q_idx, 0.0) <= mod(kv_idx, 3);
  };
  CHECK_THROWS_WITH(compile(Def), Equals("mask_mod: 'mod' divides `q_idx` "
                                         "by the constant 0"));
  // A runtime divisor is never refused: 0 gives floordiv 0 and mod x.
  CHECK_NOTHROW(compile(examples::mhaChunked()));
}

// The trace sees a subtraction there; simplify folds it to 0, and refuses it
// as the trace refuses a literal 0, naming the function where it is.
TEST_CASE("a divisor that folds to the constant zero names the function",
          "[errors][constants]") {
  CHECK_THROWS_AS(compile(withScoreMod([](SymbolScalar s) {
                    return s / (s.constant(2.0) - 2.0);
                  })),
                  UserError);
  CHECK_THROWS_WITH(compile(withScoreMod([](SymbolScalar s) {
                      return s / (s.constant(2.0) - 2.0);
                    })),
                    Equals("score_mod: 'div' divides `score` by `2 - 2`, "
                           "which folds to the constant 0"));
  // In a later function, and with constants only on both sides.
  AttentionDef Def = examples::mha();
  Def.name = "consts";
  Def.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q_idx,
                    SymbolScalar kv_idx) {
    SymbolScalar One = q_idx.constant(1.0);
    return (q_idx >= kv_idx) & (One / (One * 0.0) > 0.0);
  };
  CHECK_THROWS_WITH(compile(Def),
                    StartsWith("mask_mod: 'div' divides `1` by `1 * 0`, "
                               "which folds"));
  // A divisor that folds to anything else is fine.
  CHECK_NOTHROW(compile(withScoreMod([](SymbolScalar s) {
    return s / (s.constant(2.0) - 1.0);
  })));
}

TEST_CASE("an infinity opted in with constant() is accepted",
          "[errors][constants]") {
  // A hand-written causal mask through score_mod: -inf is meant here.
  AttentionDef Def = examples::mha();
  Def.name = "score_masked";
  Def.mask_mod = MaskMod();
  Def.score_mod = [](SymbolScalar score, const CustomInputs &in, SymbolScalar,
                     SymbolScalar, SymbolScalar q_idx, SymbolScalar kv_idx) {
    return select(q_idx >= kv_idx, score * in.head_dim().rsqrt(),
                  score.constant(-INFINITY));
  };
  CompiledDefinition C = compile(Def);
  CHECK(C.Graph->getFunction("score_mod"));
  // Var("-inf") for mha's initial max stays legal too: mha compiles.
  CHECK_NOTHROW(compile(examples::mha()));
}
