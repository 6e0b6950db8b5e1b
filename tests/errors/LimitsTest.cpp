// Graph size and depth limits (attn/ir/Limits.h): a runaway definition gets a
// UserError naming the function and the limit at trace time, never a crash.
#include "Examples.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/dsl/Definition.h"
#include "attn/ir/Limits.h"
#include "attn/reference/Checker.h"

#include <catch2/catch.hpp>

using namespace attn;
using namespace attn::dsl;
using Catch::Contains;
using Catch::StartsWith;

namespace {

/// mha whose score_mod adds 1e-4 to the score \p Length times in a chain.
AttentionDef chainedScoreMod(int Length) {
  AttentionDef Def = examples::mha();
  Def.name = "chain";
  Def.score_mod = [Length](SymbolScalar score, const CustomInputs &in,
                           SymbolScalar, SymbolScalar, SymbolScalar,
                           SymbolScalar) {
    SymbolScalar S = score * in.head_dim().rsqrt();
    for (int I = 0; I < Length; ++I)
      S = S + 1e-4;
    return S;
  };
  return Def;
}

} // namespace

TEST_CASE("a score_mod chaining 10k operations is a UserError naming the "
          "function and the depth limit",
          "[errors][limits]") {
  for (int Length : {10'000, 100'000}) {
    INFO("chain of " << Length);
    CHECK_THROWS_WITH(compile(chainedScoreMod(Length)),
                      StartsWith("score_mod: ") && Contains("MaxNodeDepth") &&
                          Contains(std::to_string(ir::MaxNodeDepth)));
  }
}

TEST_CASE("a mask_mod chaining 10k operations names mask_mod",
          "[errors][limits]") {
  AttentionDef Def = examples::mha();
  Def.name = "chain";
  Def.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q_idx,
                    SymbolScalar kv_idx) {
    SymbolScalar Q = q_idx;
    for (int I = 0; I < 10'000; ++I)
      Q = Q + 1;
    return Q >= kv_idx;
  };
  CHECK_THROWS_WITH(compile(Def),
                    StartsWith("mask_mod: ") && Contains("MaxNodeDepth"));
}

TEST_CASE("a score_mod building more nodes than MaxGraphNodes is a UserError",
          "[errors][limits]") {
  AttentionDef Def = examples::mha();
  Def.name = "wide";
  // Shallow but many: each score + i is a new node.
  Def.score_mod = [](SymbolScalar score, const CustomInputs &, SymbolScalar,
                     SymbolScalar, SymbolScalar, SymbolScalar) {
    SymbolScalar Last = score;
    for (unsigned I = 0; I <= ir::MaxGraphNodes; ++I)
      Last = score + static_cast<double>(I);
    return Last;
  };
  CHECK_THROWS_WITH(compile(Def),
                    StartsWith("score_mod: ") && Contains("MaxGraphNodes"));
}

TEST_CASE("a chain under the depth limit compiles and passes the check",
          "[errors][limits]") {
  // Deep enough that recursive evaluation over it would have used hundreds
  // of frames; still a correct definition.
  CompiledDefinition C = compile(chainedScoreMod(ir::MaxNodeDepth / 4));
  reference::CheckReport R = reference::check(C);
  CHECK(R.passed());
}
