// User mistakes in definitions, mods, rowscale declarations and symbols:
// each gives its own message naming the function and the symbol.
#include "Examples.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/dsl/Definition.h"
#include "attn/dsl/Trace.h"

#include <catch2/catch.hpp>

using namespace attn;
using namespace attn::dsl;
using Catch::Contains;
using Catch::Equals;
using Catch::StartsWith;

namespace {

/// mha with its mask replaced: the mask tests change only the mask.
AttentionDef mhaWithMask(MaskMod Mask) {
  AttentionDef Def = examples::mha();
  Def.name = "bad";
  Def.mask_mod = std::move(Mask);
  return Def;
}

/// mha with its score_mod replaced.
AttentionDef mhaWithScoreMod(ScoreMod Mod) {
  AttentionDef Def = examples::mha();
  Def.name = "bad";
  Def.score_mod = std::move(Mod);
  return Def;
}

/// The identity online function with the given rowscale declarations.
struct PassThrough : OnlineFunc {
  explicit PassThrough(Decls Online = {}, Decls Final = {})
      : OnlineFunc(std::move(Online), std::move(Final)) {}
  OnlineFwdResult online_fwd(SymbolScalar s, const Rowscales &, SymbolScalar,
                             SymbolScalar, SymbolScalar) const override {
    return {s, {}, 1.0};
  }
  EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &,
                                     SymbolScalar, SymbolScalar,
                                     SymbolScalar) const override {
    return {o, {}};
  }
  SymbolScalar forward(SymbolScalar s, const Rowscales &, SymbolScalar,
                       SymbolScalar, SymbolScalar,
                       SymbolScalar) const override {
    return s;
  }
};

/// A definition whose online function declares \p Online and \p Final.
AttentionDef withRowscales(OnlineFunc::Decls Online, OnlineFunc::Decls Final) {
  AttentionDef Def("bad");
  Def.online_func =
      std::make_shared<PassThrough>(std::move(Online), std::move(Final));
  return Def;
}

/// PassThrough whose online_fwd adds the scores of the previous trace: a
/// symbol carried from one definition's trace into another's.
struct CarriesScores : PassThrough {
  mutable SymbolScalar Previous;
  OnlineFwdResult online_fwd(SymbolScalar s, const Rowscales &, SymbolScalar,
                             SymbolScalar, SymbolScalar) const override {
    SymbolScalar p = Previous.empty() ? s : s + Previous;
    Previous = s;
    return {p, {}, 1.0};
  }
};

/// PassThrough that keeps the scores of its first trace in a mutable member
/// (the mistake) and uses them in every later trace.
struct KeepsScores : PassThrough {
  enum Use { Add, Exp, Return };
  explicit KeepsScores(Use U) : U(U) {}
  Use U;
  mutable SymbolScalar Kept;
  OnlineFwdResult online_fwd(SymbolScalar s, const Rowscales &, SymbolScalar,
                             SymbolScalar, SymbolScalar) const override {
    if (Kept.empty()) {
      Kept = s;
      return {s, {}, 1.0};
    }
    switch (U) {
    case Add:
      return {s + Kept, {}, 1.0};
    case Exp:
      return {Kept.exp(), {}, 1.0};
    case Return:
      break;
    }
    return {Kept, {}, 1.0};
  }
};

} // namespace

TEST_CASE("mask_mod returning a number") {
  AttentionDef Def = mhaWithMask(
      [](SymbolScalar, SymbolScalar, SymbolScalar q, SymbolScalar k) {
        return q - k; // meant q - k >= 0
      });
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("mask_mod: ") &&
                          Contains("must return a boolean") &&
                          Contains("returns the number `q_idx - kv_idx`"));
}

TEST_CASE("score_mod returning a boolean") {
  AttentionDef Def = mhaWithScoreMod(
      [](SymbolScalar s, const CustomInputs &, SymbolScalar, SymbolScalar,
         SymbolScalar, SymbolScalar) { return s > 0.0; });
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("score_mod: ") &&
                          Contains("result 'score' is a boolean `score > 0`"));
}

TEST_CASE("arithmetic on a boolean") {
  AttentionDef Def = mhaWithMask(
      [](SymbolScalar, SymbolScalar, SymbolScalar q, SymbolScalar k) {
        return (q >= k) + 1 > 0;
      });
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("mask_mod: ") &&
                          Contains("'add' needs numbers, but `q_idx >= "
                                   "kv_idx` is a boolean"));
}

TEST_CASE("'&' on numbers") {
  AttentionDef Def = mhaWithMask(
      [](SymbolScalar, SymbolScalar, SymbolScalar q, SymbolScalar k) {
        return (q >= k) & (q - k);
      });
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("mask_mod: ") &&
                          Contains("'and' needs booleans, but `q_idx - "
                                   "kv_idx` is a number"));
}

TEST_CASE("'!' on a number") {
  AttentionDef Def = mhaWithMask(
      [](SymbolScalar, SymbolScalar, SymbolScalar q, SymbolScalar) {
        return !q;
      });
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("mask_mod: ") &&
                          Contains("'not' needs a boolean, but `q_idx` is a "
                                   "number"));
}

TEST_CASE("select with a numeric condition") {
  AttentionDef Def = mhaWithScoreMod(
      [](SymbolScalar s, const CustomInputs &, SymbolScalar, SymbolScalar,
         SymbolScalar q, SymbolScalar k) { return select(q - k, s, 0.0); });
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("score_mod: ") &&
                          Contains("select: the condition `q_idx - kv_idx` "
                                   "is a number"));
}

TEST_CASE("select with a boolean and a numeric branch") {
  AttentionDef Def = mhaWithScoreMod(
      [](SymbolScalar s, const CustomInputs &, SymbolScalar, SymbolScalar,
         SymbolScalar q, SymbolScalar k) {
        return select(q >= k, s, q > k);
      });
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("score_mod: ") &&
                          Contains("one branch is a boolean and the other a "
                                   "number"));
}

TEST_CASE("linear decay sample range that is empty") {
  LinearAttentionDef Def("bad");
  Def.decay_sample_lo = 0.5;
  Def.decay_sample_hi = -0.5;
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      Contains("definition 'bad': decay sample range is "
                               "empty"));
}

TEST_CASE("Var with text that is not an initial value") {
  REQUIRE_THROWS_AS(Var("abc"), UserError);
  REQUIRE_THROWS_WITH(Var("abc"),
                      Contains("Var(\"abc\"): not an initial value; use a "
                               "number, \"inf\" or \"-inf\""));
  REQUIRE_THROWS_WITH(Var("nan"), Contains("Var(\"nan\"): not an initial "
                                           "value"));
}

TEST_CASE("a definition name that is not an identifier, traced directly") {
  // The registry checks names when a definition is added; tracing (and so
  // compile) checks them too, for definitions that never go through it.
  AttentionDef Def = examples::mha();
  Def.name = "my attn";
  REQUIRE_THROWS_AS(trace(Def), UserError);
  REQUIRE_THROWS_WITH(trace(Def), Equals("definition 'my attn': not a valid "
                                         "name; use letters, digits and '_', "
                                         "starting with a letter or '_'"));
  REQUIRE_THROWS_WITH(compile(Def), Contains("definition 'my attn': not a "
                                             "valid name"));
  LinearAttentionDef Lin = examples::mamba2();
  Lin.name = "";
  REQUIRE_THROWS_WITH(compile(Lin), Contains("definition '': not a valid "
                                             "name"));
}

TEST_CASE("an attention definition with no online function") {
  AttentionDef Def("bad");
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      Contains("definition 'bad' has no online function; "
                               "set online_func"));
}

TEST_CASE("symbols of two different definitions combined") {
  ir::Graph G1, G2;
  SymbolScalar A{&G1, G1.param(ir::ParamKind::Scores, "scores", ir::Type::F32,
                               ir::Space::Tile)};
  SymbolScalar B{&G2, G2.param(ir::ParamKind::Scores, "scores", ir::Type::F32,
                               ir::Space::Tile)};
  REQUIRE_THROWS_AS(A + B, UserError);
  REQUIRE_THROWS_WITH(A + B, Contains("'add' combines symbols of two "
                                      "different definitions"));
  REQUIRE_THROWS_WITH(select(A > 0.0, A, B),
                      Contains("'select' combines symbols of two different "
                               "definitions"));
}

TEST_CASE("an empty SymbolScalar used in an expression") {
  ir::Graph G;
  SymbolScalar X{&G, G.param(ir::ParamKind::Scores, "scores", ir::Type::F32,
                             ir::Space::Tile)};
  SymbolScalar Empty;
  REQUIRE_THROWS_AS(X * Empty, UserError);
  REQUIRE_THROWS_WITH(X * Empty, Contains("'mul' on an empty SymbolScalar"));
  REQUIRE_THROWS_WITH(Empty.exp(), Contains("'exp' on an empty SymbolScalar"));
  REQUIRE_THROWS_WITH(Empty.get_reduce("sum"),
                      Contains("'get_reduce' on an empty SymbolScalar"));
  REQUIRE_THROWS_WITH(1.0 + Empty, Contains("empty SymbolScalar"));
}

TEST_CASE("an empty SymbolScalar returned from a mod") {
  AttentionDef Def = mhaWithScoreMod(
      [](SymbolScalar, const CustomInputs &, SymbolScalar, SymbolScalar,
         SymbolScalar, SymbolScalar) { return SymbolScalar(); });
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("score_mod: ") &&
                          Contains("result 'score' is an empty SymbolScalar"));
}

TEST_CASE("kv_idx captured from score_mod into online_fwd") {
  // online_fwd runs once per row: it has no kv_idx argument.
  auto Captured = std::make_shared<SymbolScalar>();
  AttentionDef Def = mhaWithScoreMod(
      [Captured](SymbolScalar s, const CustomInputs &, SymbolScalar,
                 SymbolScalar, SymbolScalar, SymbolScalar k) {
        *Captured = k;
        return s;
      });
  struct F : PassThrough {
    explicit F(std::shared_ptr<SymbolScalar> K) : K(std::move(K)) {}
    std::shared_ptr<SymbolScalar> K;
    OnlineFwdResult online_fwd(SymbolScalar s, const Rowscales &, SymbolScalar,
                               SymbolScalar, SymbolScalar) const override {
      return {s * *K, {}, 1.0};
    }
  };
  Def.online_func = std::make_shared<F>(Captured);
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("online_fwd: ") &&
                          Contains("uses 'kv_idx' (index), which is not an "
                                   "argument of online_fwd"));
}

TEST_CASE("a rowscale named like a function result") {
  AttentionDef Online = withRowscales({{"o_scale", Var(1)}}, {});
  REQUIRE_THROWS_AS(compile(Online), UserError);
  REQUIRE_THROWS_WITH(compile(Online),
                      Contains("online rowscale 'o_scale': the name is "
                               "reserved"));
  AttentionDef Final = withRowscales({}, {{"scores", Var(0.0)}});
  REQUIRE_THROWS_AS(compile(Final), UserError);
  REQUIRE_THROWS_WITH(compile(Final), Contains("final rowscale 'scores': the "
                                               "name is reserved"));
}

TEST_CASE("a rowscale declared twice") {
  AttentionDef Online = withRowscales({{"m", Var(0.0)}, {"m", Var(1)}}, {});
  REQUIRE_THROWS_AS(compile(Online), UserError);
  REQUIRE_THROWS_WITH(compile(Online),
                      Contains("online rowscale 'm' is declared twice"));
  AttentionDef Final =
      withRowscales({}, {{"lse", Var(0.0)}, {"lse", Var(0.0)}});
  REQUIRE_THROWS_AS(compile(Final), UserError);
  REQUIRE_THROWS_WITH(compile(Final),
                      Contains("final rowscale 'lse' is declared twice"));
}

TEST_CASE("a rowscale name that is not an identifier") {
  AttentionDef Def = withRowscales({{"a b", Var(0.0)}}, {});
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      Contains("online rowscale 'a b': not a valid name"));
}

TEST_CASE("OnlineFunc::inputs() outside a traced function") {
  PassThrough F;
  REQUIRE_THROWS_AS(F.inputs(), UserError);
  REQUIRE_THROWS_WITH(F.inputs(), Contains("OnlineFunc::inputs() read outside "
                                           "a traced function"));
}

TEST_CASE("a symbol carried from one trace into another") {
  AttentionDef Def("carry");
  Def.online_func = std::make_shared<CarriesScores>();
  // The first trace stays alive, so its graph cannot be mistaken for the
  // second one's.
  std::unique_ptr<ir::Graph> First = trace(Def);
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def), Contains("'add' combines symbols of two "
                                             "different definitions"));
}

// Like every other tracing error, the two messages below name the function
// being traced.
TEST_CASE("a symbol from another trace: the message names the function") {
  AttentionDef Def("carry");
  Def.online_func = std::make_shared<CarriesScores>();
  std::unique_ptr<ir::Graph> First = trace(Def);
  REQUIRE_THROWS_WITH(compile(Def), StartsWith("online_fwd: "));
}

TEST_CASE("an empty SymbolScalar in a mod: the message names the function") {
  AttentionDef Def = mhaWithScoreMod(
      [](SymbolScalar s, const CustomInputs &, SymbolScalar, SymbolScalar,
         SymbolScalar, SymbolScalar) {
        SymbolScalar bias; // never assigned
        return s + bias;
      });
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def), StartsWith("score_mod: ") &&
                                        Contains("empty SymbolScalar"));
}

TEST_CASE("a symbol kept from mask_mod and used in score_mod: the message "
          "says it may come from a function traced later") {
  // score_mod is traced first, so the kept mask is still empty there.
  auto Kept = std::make_shared<SymbolScalar>();
  AttentionDef Def = examples::mha();
  Def.name = "bad";
  Def.mask_mod = [Kept](SymbolScalar, SymbolScalar, SymbolScalar q_idx,
                        SymbolScalar kv_idx) {
    *Kept = q_idx >= kv_idx;
    return *Kept;
  };
  Def.score_mod = [Kept](SymbolScalar s, const CustomInputs &, SymbolScalar,
                         SymbolScalar, SymbolScalar, SymbolScalar) {
    return select(*Kept, s, s * 0.5);
  };
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("score_mod: 'select' on an empty "
                                 "SymbolScalar") &&
                          Contains("kept for a function traced later") &&
                          Contains("score_mod is traced before mask_mod"));
}

// The first definition's graphs are destroyed when compile returns, so the
// kept symbol refers to freed memory; a later graph may even be allocated at
// the same address, with its nodes where the old ones were. The symbol is
// still recognised as one of a trace that has ended, whichever way the
// addresses fall.
TEST_CASE("a symbol kept in a member and used in a later trace") {
  using Use = KeepsScores::Use;
  const char *Tail =
      " a symbol of a trace that has ended; a symbol cannot be carried from "
      "one trace to another";
  for (auto [U, Message] :
       {std::pair{Use::Add, std::string("online_fwd: 'add' uses") + Tail},
        std::pair{Use::Exp, std::string("online_fwd: 'exp' uses") + Tail},
        std::pair{Use::Return,
                  std::string("online_fwd: result 'scores' is") + Tail}}) {
    INFO(Message);
    auto F = std::make_shared<KeepsScores>(U);
    AttentionDef First("first");
    First.online_func = F;
    REQUIRE_NOTHROW(compile(First));
    AttentionDef Second("second");
    Second.online_func = F;
    REQUIRE_THROWS_AS(compile(Second), UserError);
    REQUIRE_THROWS_WITH(compile(Second), Equals(Message));
  }
  // One definition traced twice in a row: the second trace allocates the
  // same objects in the same order as the first, whose graph it typically
  // replaces at the same address.
  auto F = std::make_shared<KeepsScores>(Use::Add);
  AttentionDef Def("again");
  Def.online_func = F;
  REQUIRE_NOTHROW(trace(Def));
  REQUIRE_THROWS_WITH(trace(Def),
                      Equals(std::string("online_fwd: 'add' uses") + Tail));
}

TEST_CASE("a symbol whose graph was destroyed, outside any trace") {
  SymbolScalar X;
  {
    ir::Graph G;
    X = SymbolScalar(&G, G.param(ir::ParamKind::Scores, "scores",
                                 ir::Type::F32, ir::Space::Tile));
    REQUIRE(X.graph() == &G);
  }
  CHECK(X.graph() == nullptr);
  CHECK_FALSE(X.empty());
  ir::Graph Other;
  SymbolScalar Y{&Other, Other.param(ir::ParamKind::Scores, "scores",
                                     ir::Type::F32, ir::Space::Tile)};
  REQUIRE_THROWS_AS(X + Y, UserError);
  REQUIRE_THROWS_WITH(Y + X, Equals("'add' uses a symbol of a trace that has "
                                    "ended; a symbol cannot be carried from "
                                    "one trace to another"));
  REQUIRE_THROWS_WITH(X.sqrt(), Contains("'sqrt' uses a symbol of a trace "
                                         "that has ended"));
}
