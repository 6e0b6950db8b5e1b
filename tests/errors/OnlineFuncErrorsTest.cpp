// User mistakes in an OnlineFunc: each gives its own message naming the
// function and the symbol.
#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/dsl/Definition.h"

#include <catch2/catch.hpp>

#include <memory>

using namespace attn;
using namespace attn::dsl;
using Catch::Contains;
using Catch::Equals;
using Catch::StartsWith;

namespace {

/// mha's online softmax, correct; each test overrides one function with the
/// mistake under test, so the message can only come from that mistake.
class Softmax : public OnlineFunc {
public:
  Softmax() : OnlineFunc({{"m", Var("-inf")}, {"r", Var(0.0)}},
                         {{"lse", Var(0.0)}}) {}
  OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                             SymbolScalar, SymbolScalar,
                             SymbolScalar) const override {
    SymbolScalar m_new = rs["m"].max(scores.get_reduce("max"));
    SymbolScalar scale = (rs["m"] - m_new).exp();
    SymbolScalar p = (scores - m_new).exp();
    return {p, {{"m", m_new}, {"r", rs["r"] * scale + p.get_reduce("sum")}},
            scale};
  }
  EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &rs,
                                     SymbolScalar, SymbolScalar,
                                     SymbolScalar) const override {
    return {o / rs["r"], {{"lse", rs["r"].log() + rs["m"]}}};
  }
  SymbolScalar forward(SymbolScalar scores, const Rowscales &fr, SymbolScalar,
                       SymbolScalar, SymbolScalar,
                       SymbolScalar) const override {
    return (scores - fr["lse"]).exp();
  }
  std::optional<SymbolScalar>
  backward(SymbolScalar dp, SymbolScalar scores, const Rowscales &,
           SymbolScalar doosum, SymbolScalar, SymbolScalar, SymbolScalar,
           SymbolScalar) const override {
    return (dp - doosum) * scores;
  }
};

template <typename OnlineT> AttentionDef defWith() {
  AttentionDef Def("bad");
  Def.online_func = std::make_shared<OnlineT>();
  return Def;
}

/// online_fwd returning \p Scores, \p R and \p OScale with m as in mha.
OnlineFwdResult softmaxWith(SymbolScalar scores, const Rowscales &rs,
                            SymbolScalar R, SymbolOrNumber OScale) {
  return {scores, {{"m", rs["m"].max(scores.get_reduce("max"))}, {"r", R}},
          OScale};
}

} // namespace

TEST_CASE("the correct base online function compiles") {
  // Guards every test below: the base is right, so each error comes from
  // the one function a test overrides.
  REQUIRE_NOTHROW(compile(defWith<Softmax>()));
}

TEST_CASE("a new online rowscale that is per-element") {
  struct F : Softmax {
    OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                               SymbolScalar, SymbolScalar,
                               SymbolScalar) const override {
      return softmaxWith(scores, rs, scores, 1.0); // forgot get_reduce("sum")
    }
  };
  AttentionDef Def = defWith<F>();
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("online_fwd: ") &&
                          Contains("new rowscale 'r' is per-element") &&
                          Contains("get_reduce(\"sum\")"));
}

TEST_CASE("o_scale that is per-element") {
  struct F : Softmax {
    OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                               SymbolScalar, SymbolScalar,
                               SymbolScalar) const override {
      return softmaxWith(scores, rs, rs["r"], scores.exp());
    }
  };
  AttentionDef Def = defWith<F>();
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("online_fwd: ") &&
                          Contains("o_scale is per-element `exp(scores)`"));
}

TEST_CASE("get_reduce on a value that is already per-row") {
  struct F : Softmax {
    OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                               SymbolScalar, SymbolScalar,
                               SymbolScalar) const override {
      return softmaxWith(scores, rs, rs["m"].get_reduce("max"), 1.0);
    }
  };
  AttentionDef Def = defWith<F>();
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("online_fwd: ") &&
                          Contains("`m` is per-row (already reduced)"));
}

TEST_CASE("reading an undeclared rowscale") {
  struct F : Softmax {
    OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                               SymbolScalar, SymbolScalar,
                               SymbolScalar) const override {
      return softmaxWith(scores, rs, rs["x"], 1.0);
    }
  };
  AttentionDef Def = defWith<F>();
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("online_fwd: ") &&
                          Contains("unknown rowscale 'x'; declared: m, r"));
}

TEST_CASE("online_fwd not returning a declared rowscale") {
  struct F : Softmax {
    OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                               SymbolScalar, SymbolScalar,
                               SymbolScalar) const override {
      return {scores, {{"m", rs["m"]}}, 1.0};
    }
  };
  AttentionDef Def = defWith<F>();
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("online_fwd: ") &&
                          Contains("rowscale 'r' is never produced"));
}

TEST_CASE("online_fwd returning an undeclared rowscale") {
  struct F : Softmax {
    OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                               SymbolScalar, SymbolScalar,
                               SymbolScalar) const override {
      return {scores, {{"m", rs["m"]}, {"r", rs["r"]}, {"zz", rs["r"]}}, 1.0};
    }
  };
  AttentionDef Def = defWith<F>();
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("online_fwd: ") &&
                          Contains("returns unknown rowscale 'zz'; declared: "
                                   "m, r"));
}

TEST_CASE("online_fwd returning a rowscale twice") {
  struct F : Softmax {
    OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                               SymbolScalar, SymbolScalar,
                               SymbolScalar) const override {
      SymbolScalar m_new = rs["m"].max(scores.get_reduce("max"));
      return {scores,
              {{"m", m_new}, {"r", rs["r"]}, {"r", scores.get_reduce("sum")}},
              1.0};
    }
  };
  AttentionDef Def = defWith<F>();
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      Catch::Equals("online_fwd: rowscale 'r' is returned "
                                    "twice"));
}

TEST_CASE("the epilogue returning a final rowscale twice") {
  struct F : Softmax {
    EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &rs,
                                       SymbolScalar, SymbolScalar,
                                       SymbolScalar) const override {
      return {o / rs["r"], {{"lse", rs["m"]}, {"lse", rs["r"].log()}}};
    }
  };
  AttentionDef Def = defWith<F>();
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      Catch::Equals("online_fwd_epilogue: final rowscale "
                                    "'lse' is returned twice"));
}

TEST_CASE("Rowscales remembers a name its initializer list repeats") {
  ir::Graph G;
  SymbolScalar A{&G, G.param(ir::ParamKind::Rowscale, "a", ir::Type::F32,
                             ir::Space::Row)};
  SymbolScalar B{&G, G.param(ir::ParamKind::Rowscale, "b", ir::Type::F32,
                             ir::Space::Row)};
  Rowscales Twice{{"r", A}, {"m", A}, {"r", B}, {"r", A}};
  CHECK(Twice.repeated() == std::vector<std::string>{"r"});
  CHECK(Twice.entries().size() == 2);
  CHECK(Twice["r"].node() == A.node()); // the last value
  Rowscales Once{{"r", A}, {"m", B}};
  CHECK(Once.repeated().empty());
  // set() replaces a value; that is no repetition.
  Once.set("r", B);
  CHECK(Once.repeated().empty());
  CHECK(Once["r"].node() == B.node());
}

TEST_CASE("the epilogue not producing a declared final rowscale") {
  struct F : Softmax {
    EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &rs,
                                       SymbolScalar, SymbolScalar,
                                       SymbolScalar) const override {
      return {o / rs["r"], {}};
    }
  };
  AttentionDef Def = defWith<F>();
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("online_fwd_epilogue: ") &&
                          Contains("final rowscale 'lse' is never produced"));
}

TEST_CASE("get_reduce with an unknown reduction name") {
  struct F : Softmax {
    OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                               SymbolScalar, SymbolScalar,
                               SymbolScalar) const override {
      return softmaxWith(scores, rs, scores.get_reduce("mean"), 1.0);
    }
  };
  AttentionDef Def = defWith<F>();
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("online_fwd: ") &&
                          Contains("unknown reduction \"mean\"; expected "
                                   "\"max\", \"sum\" or \"abssum\""));
}

TEST_CASE("the per-element scores captured into the epilogue") {
  struct F : Softmax {
    mutable SymbolScalar Captured; // the mistake: carried across functions
    OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                               SymbolScalar b, SymbolScalar h,
                               SymbolScalar q) const override {
      Captured = scores;
      return Softmax::online_fwd(scores, rs, b, h, q);
    }
    EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &rs,
                                       SymbolScalar, SymbolScalar,
                                       SymbolScalar) const override {
      return {o / rs["r"], {{"lse", rs["m"] + Captured.get_reduce("max")}}};
    }
  };
  AttentionDef Def = defWith<F>();
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("online_fwd_epilogue: ") &&
                          Contains("uses the per-element scores"));
}

// A symbol kept from one function and used in another: the message names
// the function that uses it and the one that made it (all the functions it
// may come from, when the symbol is an argument of several).
TEST_CASE("a kept symbol: the message names both functions") {
  auto Kept = std::make_shared<SymbolScalar>();
  AttentionDef Def = defWith<Softmax>();
  Def.score_mod = [Kept](SymbolScalar s, const CustomInputs &, SymbolScalar,
                         SymbolScalar, SymbolScalar, SymbolScalar) {
    *Kept = s;
    return s;
  };
  Def.mask_mod = [Kept](SymbolScalar, SymbolScalar, SymbolScalar q_idx,
                        SymbolScalar kv_idx) {
    return (q_idx >= kv_idx) & (*Kept > 0.0);
  };
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(
      compile(Def),
      Equals("mask_mod: uses 'score' (score), which is not an argument of "
             "mask_mod: the symbol was made in score_mod; a symbol cannot be "
             "carried from one function to another"));

  struct F : Softmax {
    std::shared_ptr<SymbolScalar> KvIdx = std::make_shared<SymbolScalar>();
    OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                               SymbolScalar b, SymbolScalar h,
                               SymbolScalar q) const override {
      return Softmax::online_fwd(scores + *KvIdx, rs, b, h, q);
    }
  };
  auto Online = std::make_shared<F>();
  AttentionDef KvDef("bad");
  KvDef.online_func = Online;
  KvDef.mask_mod = [Kv = Online->KvIdx](SymbolScalar, SymbolScalar,
                                        SymbolScalar q_idx,
                                        SymbolScalar kv_idx) {
    *Kv = kv_idx;
    return q_idx >= kv_idx;
  };
  REQUIRE_THROWS_WITH(
      compile(KvDef),
      Equals("online_fwd: uses 'kv_idx' (index), which is not an argument "
             "of online_fwd: the symbol was made in score_mod or mask_mod; a "
             "symbol cannot be carried from one function to another"));
}

TEST_CASE("backward returning a per-row dscores") {
  struct F : Softmax {
    std::optional<SymbolScalar>
    backward(SymbolScalar, SymbolScalar, const Rowscales &,
             SymbolScalar doosum, SymbolScalar, SymbolScalar, SymbolScalar,
             SymbolScalar) const override {
      return doosum;
    }
  };
  AttentionDef Def = defWith<F>();
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def), StartsWith("backward: ") &&
                                        Contains("dscores is per-row `doosum`"));
}

TEST_CASE("a per-element value combined with the output accumulator") {
  struct F : Softmax {
    mutable SymbolScalar Captured;
    OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                               SymbolScalar b, SymbolScalar h,
                               SymbolScalar q) const override {
      Captured = scores;
      return Softmax::online_fwd(scores, rs, b, h, q);
    }
    EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &rs,
                                       SymbolScalar, SymbolScalar,
                                       SymbolScalar) const override {
      return {o * Captured, {{"lse", rs["m"]}}};
    }
  };
  AttentionDef Def = defWith<F>();
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("online_fwd_epilogue: 'mul' combines ") &&
                          Contains("with per-element `scores`") &&
                          Contains("cannot meet the output accumulator"));
}

TEST_CASE("a final rowscale that depends on o") {
  struct F : Softmax {
    EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &rs,
                                       SymbolScalar, SymbolScalar,
                                       SymbolScalar) const override {
      return {o / rs["r"], {{"lse", rs["m"] + o}}};
    }
  };
  AttentionDef Def = defWith<F>();
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("online_fwd_epilogue: ") &&
                          Contains("final rowscale 'lse' depends on o "
                                   "`m + o`"));
}

TEST_CASE("get_reduce used in forward") {
  struct F : Softmax {
    SymbolScalar forward(SymbolScalar scores, const Rowscales &, SymbolScalar,
                         SymbolScalar, SymbolScalar,
                         SymbolScalar) const override {
      return (scores - scores.get_reduce("max")).exp();
    }
  };
  AttentionDef Def = defWith<F>();
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("forward: ") &&
                          Contains("get_reduce(\"max\") is only available in "
                                   "online_fwd"));
}

TEST_CASE("forward reading a rowscale that is not final") {
  struct F : Softmax {
    SymbolScalar forward(SymbolScalar scores, const Rowscales &fr,
                         SymbolScalar, SymbolScalar, SymbolScalar,
                         SymbolScalar) const override {
      return (scores - fr["m"]).exp();
    }
  };
  AttentionDef Def = defWith<F>();
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("forward: ") &&
                          Contains("unknown final rowscale 'm'; declared: "
                                   "lse"));
}

TEST_CASE("an online rowscale captured into forward") {
  struct F : Softmax {
    mutable SymbolScalar Captured;
    OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                               SymbolScalar b, SymbolScalar h,
                               SymbolScalar q) const override {
      Captured = rs["m"];
      return Softmax::online_fwd(scores, rs, b, h, q);
    }
    SymbolScalar forward(SymbolScalar scores, const Rowscales &, SymbolScalar,
                         SymbolScalar, SymbolScalar,
                         SymbolScalar) const override {
      return (scores - Captured).exp();
    }
  };
  AttentionDef Def = defWith<F>();
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("forward: ") &&
                          Contains("uses 'm' (rowscale), which is not an "
                                   "argument of forward"));
}

TEST_CASE("online_fwd returning an empty SymbolScalar as the scores") {
  struct F : Softmax {
    OnlineFwdResult online_fwd(SymbolScalar, const Rowscales &rs,
                               SymbolScalar, SymbolScalar,
                               SymbolScalar) const override {
      SymbolScalar p; // never assigned
      return {p, {{"m", rs["m"]}, {"r", rs["r"]}}, 1.0};
    }
  };
  AttentionDef Def = defWith<F>();
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("online_fwd: ") &&
                          Contains("result 'scores' is an empty "
                                   "SymbolScalar"));
}

TEST_CASE("online_fwd returning a boolean as the scores") {
  struct F : Softmax {
    OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                               SymbolScalar, SymbolScalar,
                               SymbolScalar) const override {
      return {scores > 0.0, {{"m", rs["m"]}, {"r", rs["r"]}}, 1.0};
    }
  };
  AttentionDef Def = defWith<F>();
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("online_fwd: ") &&
                          Contains("result 'scores' is a boolean `scores > "
                                   "0`; turn it into a number with select"));
}

TEST_CASE("get_reduce on a boolean") {
  struct F : Softmax {
    OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                               SymbolScalar, SymbolScalar,
                               SymbolScalar) const override {
      return softmaxWith(scores, rs, (scores > 0.0).get_reduce("sum"), 1.0);
    }
  };
  AttentionDef Def = defWith<F>();
  REQUIRE_THROWS_AS(compile(Def), UserError);
  REQUIRE_THROWS_WITH(compile(Def),
                      StartsWith("online_fwd: ") &&
                          Contains("get_reduce(\"sum\") needs a number, but "
                                   "`scores > 0` is a boolean"));
}
