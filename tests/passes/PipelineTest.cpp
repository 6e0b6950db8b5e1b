// The pipeline on every example: pass order, verify per pass, meaning kept.
#include "ExampleRegistry.h"
#include "Examples.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/dsl/Trace.h"
#include "attn/ir/Printer.h"
#include "attn/ir/Verifier.h"
#include "attn/reference/Attention.h"
#include "attn/reference/InputBinding.h"
#include "attn/reference/Linear.h"
#include "attn/transforms/DCE.h"
#include "attn/transforms/Simplify.h"

#include <catch2/catch.hpp>

#include <map>

using namespace attn;

using attn::testsupport::exampleNames;
using attn::testsupport::registry;

TEST_CASE("there are fifteen registered examples", "[pipeline]") {
  CHECK(exampleNames() ==
        std::vector<std::string>{"mha", "sigmoid_attn", "relu_attn",
                                 "retention", "retention_combine",
                                 "alibi_learnable",
                                 "softcap_learnable", "mha_document_ids",
                                 "mha_prefix_lm",
                                 "mha_sliding_window", "mha_document",
                                 "mha_chunked",
                                 "mamba2", "simple_gla", "retention_linear"});
}

TEST_CASE("the pipeline runs trace, verify, row-reduce, autodiff, simplify, "
          "dce and every graph verifies",
          "[pipeline]") {
  std::string Name = GENERATE(from_range(exampleNames()));
  INFO(Name);
  std::vector<std::string> Seen;
  std::map<std::string, std::string> Text;
  std::map<std::string, size_t> Size;
  CompiledDefinition C =
      compile(registry().get(Name), [&](llvm::StringRef P, const ir::Graph &G) {
        Seen.push_back(P.str());
        Text[P.str()] = ir::toText(G);
        Size[P.str()] = G.nodes().size();
        CHECK_NOTHROW(ir::verify(G));
      });
  CHECK(Seen == std::vector<std::string>{"trace", "verify", "row-reduce",
                                         "autodiff", "simplify", "dce"});
  CHECK(Seen == pipelinePasses());
  // verify and the analysis do not touch the graph.
  CHECK(Text["verify"] == Text["trace"]);
  CHECK(Text["row-reduce"] == Text["trace"]);
  // DCE changes no printed line, only what is stored.
  CHECK(Text["dce"] == Text["simplify"]);
  CHECK(Size["dce"] <= Size["simplify"]);
  CHECK(ir::toText(*C.Graph) == Text["dce"]);
  // Simplify is idempotent on what it produced.
  ir::Graph &G = *C.Graph;
  transforms::simplify(G);
  CHECK(ir::toText(G) == Text["dce"]);
}

TEST_CASE("simplify inside the pipeline rewrites a traced score_mod",
          "[pipeline]") {
  // A user's redundant arithmetic, (s*1 + 0) * (rsqrt(D) * (2 - 1)) with
  // 2 - 1 traced as IR, reaches the simplify pass and leaves as s * rsqrt(D).
  dsl::AttentionDef Def = examples::mha();
  Def.name = "mha_folds";
  Def.score_mod = [](dsl::SymbolScalar S, const dsl::CustomInputs &In,
                     dsl::SymbolScalar, dsl::SymbolScalar, dsl::SymbolScalar,
                     dsl::SymbolScalar) {
    return (S * 1.0 + 0.0) * (In.head_dim().rsqrt() * (S.constant(2.0) - 1.0));
  };
  std::string Trace, Simplified;
  compile(Def, [&](llvm::StringRef P, const ir::Graph &G) {
    const ir::Function &F = *G.getFunction("score_mod");
    std::string S;
    llvm::raw_string_ostream OS(S);
    ir::printFunction(G, F, OS);
    if (P == "trace")
      Trace = OS.str();
    if (P == "simplify")
      Simplified = OS.str();
  });
  CHECK(Trace.find("add") != std::string::npos);
  CHECK(Simplified == "func score_mod {\n"
                      "  %0 = score : f32 tile\n"
                      "  %1 = headdim D : i32 const\n"
                      "  %2 = rsqrt %1 : f32 const\n"
                      "  %3 = mul %0, %2 : f32 tile\n"
                      "  return score = %3\n"
                      "}\n");
}

TEST_CASE("verify rejects broken graphs (so accepting the examples means "
          "something)",
          "[pipeline][verify]") {
  SECTION("a function without results") {
    ir::Graph G;
    G.addFunction("score_mod");
    CHECK_THROWS_AS(ir::verify(G), InternalError);
  }
  SECTION("a function the definition kind does not have") {
    ir::Graph G;
    G.addFunction("q_mod").Results.push_back(
        {"q",
         G.param(ir::ParamKind::Element, "q", ir::Type::F32, ir::Space::Tile)});
    CHECK_THROWS_AS(ir::verify(G), InternalError);
  }
  SECTION("an input declared twice") {
    ir::Graph G;
    G.decls().Inputs = {{"a", ir::InputShape::Scalar},
                        {"a", ir::InputShape::PerHead}};
    CHECK_THROWS_AS(ir::verify(G), InternalError);
  }
}

TEST_CASE("simplify and DCE do not change what the reference computes",
          "[pipeline][semantics]") {
  // The traced graph and the compiled one, evaluated on the same inputs,
  // agree bit for bit: folding uses the interpreter's own scalar rules
  // (ir/Eval.h) and no rule reassociates arithmetic.
  std::string Name = GENERATE(from_range(exampleNames()));
  INFO(Name);
  const dsl::DefinitionBase &Def = registry().get(Name);
  CompiledDefinition Compiled = compile(Def);
  CompiledDefinition Traced;
  Traced.Graph = dsl::trace(Def);
  std::mt19937_64 Rng(7);
  const ir::Graph &G = *Compiled.Graph;
  if (G.decls().Kind == ir::DefinitionKind::Transformer) {
    reference::AttentionInputs In;
    In.Q = reference::Tensor::normal({1, 2, 5, 3}, Rng);
    In.K = reference::Tensor::normal({1, 1, 6, 3}, Rng);
    In.V = reference::Tensor::normal({1, 1, 6, 2}, Rng);
    In.Inputs = reference::sampleInputs(G, Rng, 1, 2, 5, 6);
    auto A = reference::attentionOnline(Compiled, In, 2);
    auto B = reference::attentionOnline(Traced, In, 2);
    CHECK(A.O.Data == B.O.Data);
    for (const auto &[N, T] : A.Finals)
      CHECK(T.Data == B.Finals.at(N).Data);
  } else {
    reference::LinearInputs In;
    In.Q = reference::Tensor::normal({1, 2, 5, 3}, Rng);
    In.K = reference::Tensor::normal({1, 2, 5, 3}, Rng);
    In.V = reference::Tensor::normal({1, 2, 5, 2}, Rng);
    In.Decay = reference::Tensor::uniform({1, 2, 5}, Rng, -1.0, 0.0);
    In.Inputs = reference::sampleInputs(G, Rng, 1, 2, 5, 5);
    CHECK(reference::linearRecurrent(Compiled, In).O.Data ==
          reference::linearRecurrent(Traced, In).O.Data);
  }
}

// Verifier.h promises to reject "the wrong result names for its kind": a
// score_mod whose result is named "bogus" instead of "score" would make the
// reference dereference a null Function::result("score").
TEST_CASE("verify rejects a result name the function does not have",
          "[pipeline][verify]") {
  ir::Graph G;
  G.addFunction("score_mod")
      .Results.push_back({"bogus", G.param(ir::ParamKind::Score, "score",
                                           ir::Type::F32, ir::Space::Tile)});
  CHECK_THROWS_AS(ir::verify(G), InternalError);
  CHECK_THROWS_WITH(ir::verify(G),
                    Catch::Contains("function 'score_mod' has results "
                                    "{bogus}; expected {score}"));
}

TEST_CASE("every example's functions have the result names of their kind",
          "[pipeline][verify]") {
  // Each example's compiled graph has the names its kinds require.
  std::string Name = GENERATE(from_range(exampleNames()));
  INFO(Name);
  CompiledDefinition C = compile(registry().get(Name));
  CHECK_NOTHROW(ir::verify(*C.Graph));
}

TEST_CASE("verify rejects missing, repeated and misnamed results",
          "[pipeline][verify]") {
  // online_fwd must return scores, each online rowscale and o_scale.
  CompiledDefinition M = compile(registry().get("mha"));
  ir::Function *Fwd = M.Graph->getFunction("online_fwd");
  REQUIRE(Fwd);
  std::vector<ir::Result> Kept = Fwd->Results;
  Fwd->Results.pop_back(); // o_scale
  CHECK_THROWS_AS(ir::verify(*M.Graph), InternalError);
  CHECK_THROWS_WITH(ir::verify(*M.Graph), Catch::Contains("expected {scores, "));
  // A result named twice is as wrong as a missing one.
  Fwd->Results = Kept;
  Fwd->Results.push_back(Kept.front());
  CHECK_THROWS_AS(ir::verify(*M.Graph), InternalError);
  Fwd->Results = Kept;
  CHECK_NOTHROW(ir::verify(*M.Graph));
  // The epilogue's final rowscales follow the declarations.
  M.Graph->decls().FinalRowscales.push_back({"extra", 0.0});
  CHECK_THROWS_WITH(ir::verify(*M.Graph),
                    Catch::Contains("function 'online_fwd_epilogue' has "
                                    "results"));
  M.Graph->decls().FinalRowscales.pop_back();

  // decay_mod's result is g.
  CompiledDefinition L = compile(registry().get("mamba2"));
  ir::Function *Decay = L.Graph->getFunction("decay_mod");
  REQUIRE(Decay);
  Decay->Results.front().Name = "decay";
  CHECK_THROWS_WITH(ir::verify(*L.Graph),
                    Catch::Contains("function 'decay_mod' has results "
                                    "{decay}; expected {g}"));
}
