// Unit tests of tracing (functions, results, declarations) and of the
// row-reduce analysis on the shipped examples.
#include "Examples.h"

#include "attn/Pipeline.h"
#include "attn/analysis/RowReduce.h"
#include "attn/dsl/Library.h"
#include "attn/dsl/Trace.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

using namespace attn;
using namespace attn::dsl;
using ir::ReduceOp;
using ir::Space;

namespace {

std::vector<std::string> functionNames(const ir::Graph &G) {
  std::vector<std::string> Names;
  for (const ir::Function &F : G.functions())
    Names.push_back(F.Name);
  return Names;
}

std::vector<std::string> resultNames(const ir::Graph &G,
                                     llvm::StringRef Function) {
  std::vector<std::string> Names;
  if (const ir::Function *F = G.getFunction(Function))
    for (const ir::Result &R : F->Results)
      Names.push_back(R.Name);
  return Names;
}

} // namespace

TEST_CASE("mha traces into the six functions with their result names") {
  std::unique_ptr<ir::Graph> G = trace(examples::mha());
  CHECK(G->name() == "mha");
  CHECK(functionNames(*G) ==
        std::vector<std::string>{"score_mod", "mask_mod", "online_fwd",
                                 "online_fwd_epilogue", "forward", "backward"});
  CHECK(resultNames(*G, "score_mod") == std::vector<std::string>{"score"});
  CHECK(resultNames(*G, "mask_mod") == std::vector<std::string>{"mask"});
  CHECK(resultNames(*G, "online_fwd") ==
        std::vector<std::string>{"scores", "m", "r", "o_scale"});
  CHECK(resultNames(*G, "online_fwd_epilogue") ==
        std::vector<std::string>{"o", "lse"});
  CHECK(resultNames(*G, "forward") == std::vector<std::string>{"p"});
  CHECK(resultNames(*G, "backward") == std::vector<std::string>{"dscores"});

  const ir::Declarations &D = G->decls();
  CHECK(D.Kind == ir::DefinitionKind::Transformer);
  CHECK(D.HasMask);
  CHECK(D.HasBackward);
  REQUIRE(D.OnlineRowscales.size() == 2);
  CHECK(D.OnlineRowscales[0].Name == "m");
  CHECK(D.OnlineRowscales[0].Init == -INFINITY);
  CHECK(D.OnlineRowscales[1].Name == "r");
  CHECK(D.OnlineRowscales[1].Init == 0.0);
  REQUIRE(D.FinalRowscales.size() == 1);
  CHECK(D.FinalRowscales[0].Name == "lse");
  CHECK(D.Inputs.empty());

  // The results have the spaces the contract promises.
  const ir::Function *F = G->getFunction("online_fwd");
  CHECK(F->result("scores")->getSpace() == Space::Tile);
  CHECK(F->result("m")->getSpace() == Space::Row);
  CHECK(F->result("o_scale")->getSpace() == Space::Row);
  CHECK(G->getFunction("online_fwd_epilogue")->result("o")->getSpace() ==
        Space::Out);
  CHECK(G->getFunction("mask_mod")->result("mask")->getType() ==
        ir::Type::Bool);
}

TEST_CASE("a definition without backward has no backward function") {
  AttentionDef Def("nobwd");
  Def.online_func = dsl::onlineSoftmax(/*WrittenBackward=*/false);
  std::unique_ptr<ir::Graph> G = trace(Def);
  CHECK(G->getFunction("backward") == nullptr);
  CHECK_FALSE(G->decls().HasBackward);
  // No mask_mod set: no mask function either.
  CHECK_FALSE(G->decls().HasMask);
  CHECK(functionNames(*G) ==
        std::vector<std::string>{"score_mod", "online_fwd",
                                 "online_fwd_epilogue", "forward"});
  // The pipeline derives one (the autodiff pass); softmax's needs doosum.
  CompiledDefinition C = compile(Def);
  CHECK(C.Graph->getFunction("backward") != nullptr);
  CHECK(C.Graph->decls().BackwardDerived);
  CHECK(C.Info.BackwardUsesDoosum);
}

TEST_CASE("linear examples trace into q_mod, k_mod, v_mod and decay_mod") {
  for (const LinearAttentionDef &Def :
       {examples::mamba2(), examples::simpleGla(),
        examples::retentionLinear()}) {
    INFO(Def.name);
    std::unique_ptr<ir::Graph> G = trace(Def);
    CHECK(G->decls().Kind == ir::DefinitionKind::Linear);
    CHECK(functionNames(*G) == std::vector<std::string>{"q_mod", "k_mod",
                                                        "v_mod", "decay_mod"});
    CHECK(resultNames(*G, "q_mod") == std::vector<std::string>{"q"});
    CHECK(resultNames(*G, "k_mod") == std::vector<std::string>{"k"});
    CHECK(resultNames(*G, "v_mod") == std::vector<std::string>{"v"});
    CHECK(resultNames(*G, "decay_mod") == std::vector<std::string>{"g"});
    CHECK(G->getFunction("decay_mod")->result("g")->getSpace() != Space::Tile);
    CHECK(G->decls().OnlineRowscales.empty());
  }
}

TEST_CASE("mamba2 declares its inputs with their shapes and sample ranges") {
  std::unique_ptr<ir::Graph> G = trace(examples::mamba2());
  const ir::InputDecl *A = G->decls().findInput("A");
  const ir::InputDecl *Dt = G->decls().findInput("dt");
  REQUIRE(A);
  REQUIRE(Dt);
  CHECK(A->Shape == ir::InputShape::PerHead);
  CHECK(A->SampleLo == -2.0);
  CHECK(A->SampleHi == -0.2);
  CHECK(Dt->Shape == ir::InputShape::PerRow);
  CHECK(G->decls().findInput("B") == nullptr);
}

TEST_CASE("mha: two reductions in online_fwd, backward reads doosum") {
  CompiledDefinition C = compile(examples::mha());
  const analysis::RowReduceInfo &I = C.Info;
  REQUIRE(I.Reductions.size() == 2);
  std::vector<ReduceOp> Ops;
  for (const auto &R : I.Reductions) {
    CHECK(R.Function == "online_fwd");
    CHECK(R.Node->operand(0)->getSpace() == Space::Tile);
    Ops.push_back(R.Node->getOp());
  }
  CHECK(std::count(Ops.begin(), Ops.end(), ReduceOp::Max) == 1);
  CHECK(std::count(Ops.begin(), Ops.end(), ReduceOp::Sum) == 1);
  CHECK(I.BackwardUsesDoosum);
  CHECK_FALSE(I.OScaleIsOne);
  CHECK_FALSE(I.UsesDecayInput);
}

TEST_CASE("relu_attn: o_scale is one and nothing is reduced") {
  CompiledDefinition C = compile(examples::reluAttn());
  CHECK(C.Info.OScaleIsOne);
  CHECK(C.Info.Reductions.empty());
  CHECK_FALSE(C.Info.BackwardUsesDoosum);
}

TEST_CASE("sigmoid_attn's backward does not read doosum") {
  CompiledDefinition C = compile(examples::sigmoidAttn());
  CHECK_FALSE(C.Info.BackwardUsesDoosum);
  CHECK(C.Info.OScaleIsOne);
  CHECK(C.Info.Reductions.empty());
}

TEST_CASE("retention: one abssum reduction, backward reads doosum") {
  CompiledDefinition C = compile(examples::retention());
  REQUIRE(C.Info.Reductions.size() == 1);
  CHECK(C.Info.Reductions[0].Node->getOp() == ReduceOp::AbsSum);
  CHECK(C.Info.BackwardUsesDoosum);
  CHECK_FALSE(C.Info.OScaleIsOne);
}

TEST_CASE("UsesDecayInput: only a decay_mod that reads the decay needs it") {
  CHECK_FALSE(compile(examples::mamba2()).Info.UsesDecayInput);
  CHECK_FALSE(compile(examples::retentionLinear()).Info.UsesDecayInput);
  CHECK(compile(examples::simpleGla()).Info.UsesDecayInput);
}

TEST_CASE("analyzeRowReduce on the traced graph agrees with the pipeline") {
  // The analysis runs before and after simplification; both must agree on
  // what later stages read.
  for (const AttentionDef &Def :
       {examples::mha(), examples::reluAttn(), examples::retention()}) {
    INFO(Def.name);
    analysis::RowReduceInfo Before =
        analysis::analyzeRowReduce(*trace(Def));
    CompiledDefinition After = compile(Def);
    CHECK(Before.Reductions.size() == After.Info.Reductions.size());
    CHECK(Before.BackwardUsesDoosum == After.Info.BackwardUsesDoosum);
    CHECK(Before.OScaleIsOne == After.Info.OScaleIsOne);
  }
}

TEST_CASE("compile calls the pass callback once per pass, in order") {
  std::vector<std::string> Seen;
  compile(examples::mha(),
          [&](llvm::StringRef Pass, const ir::Graph &) {
            Seen.push_back(Pass.str());
          });
  CHECK(Seen == pipelinePasses());
}
