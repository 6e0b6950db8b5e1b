// DCE: dead nodes go, everything a printer or a later pass can see stays.
#include "attn/transforms/DCE.h"
#include "attn/ir/Graph.h"
#include "attn/ir/Printer.h"
#include "attn/ir/Verifier.h"
#include "attn/ir/Walk.h"
#include "attn/transforms/Simplify.h"

#include <catch2/catch.hpp>

using namespace attn;
using ir::Node;
using ir::NodeKind;
using ir::ParamKind;
using ir::Space;
using ir::Type;

namespace {

/// score_mod and mask_mod over shared leaves, with dead nodes in between and
/// non-default declarations, so that every field DCE must copy is visible.
std::unique_ptr<ir::Graph> graphWithDeadNodes() {
  auto G = std::make_unique<ir::Graph>();
  G->setName("dce_demo");
  ir::Declarations &D = G->decls();
  D.OnlineRowscales = {{"m", -INFINITY}, {"r", 0.0}};
  D.FinalRowscales = {{"lse", 0.0}};
  D.Inputs = {{"bias", ir::InputShape::PerKey, -2.0, 3.0}};
  D.HasMask = true;
  D.HasBackward = false;
  D.DecaySampleLo = -0.5;
  D.DecaySampleHi = -0.25;
  const Node *X = G->param(ParamKind::Score, "score", Type::F32, Space::Tile);
  const Node *Bias = G->param(ParamKind::Input, "bias", Type::F32, Space::Col);
  G->unary(NodeKind::Exp, X);                    // dead
  G->binary(NodeKind::Mul, X, G->constant(3.0)); // dead, with a dead const
  const Node *Live = G->binary(NodeKind::Add, X, Bias);
  const Node *Q = G->param(ParamKind::Index, "q_idx", Type::I32, Space::Row);
  const Node *K = G->param(ParamKind::Index, "kv_idx", Type::I32, Space::Col);
  G->binary(NodeKind::Lt, Q, K); // dead
  const Node *Mask = G->binary(NodeKind::Ge, Q, K);
  G->addFunction("score_mod").Results.push_back({"score", Live});
  G->addFunction("mask_mod").Results.push_back({"mask", Mask});
  return G;
}

std::vector<const Node *> roots(const ir::Graph &G) {
  std::vector<const Node *> R;
  for (const ir::Function &F : G.functions())
    for (const ir::Result &Res : F.Results)
      R.push_back(Res.Value);
  return R;
}

} // namespace

TEST_CASE("DCE keeps exactly the nodes the results reach", "[dce]") {
  std::unique_ptr<ir::Graph> G = graphWithDeadNodes();
  size_t Live = ir::topologicalOrder(roots(*G)).size();
  REQUIRE(Live == 6); // score, bias, add, q_idx, kv_idx, ge
  REQUIRE(G->nodes().size() == 10);
  std::unique_ptr<ir::Graph> Out = transforms::eliminateDeadNodes(*G);
  CHECK(Out->nodes().size() == Live);
  CHECK(ir::topologicalOrder(roots(*Out)).size() == Out->nodes().size());
  for (const Node *N : Out->nodes()) {
    CHECK(N->getKind() != NodeKind::Exp);
    CHECK(N->getKind() != NodeKind::Lt);
    CHECK(N->getKind() != NodeKind::Const);
  }
  // The copy owns its nodes: none is shared with the original graph.
  for (const Node *N : Out->nodes())
    for (const Node *M : G->nodes())
      CHECK(N != M);
  CHECK_NOTHROW(ir::verify(*Out));
}

TEST_CASE("DCE preserves name, declarations, functions and text", "[dce]") {
  std::unique_ptr<ir::Graph> G = graphWithDeadNodes();
  std::unique_ptr<ir::Graph> Out = transforms::eliminateDeadNodes(*G);
  CHECK(ir::toText(*Out) == ir::toText(*G));
  CHECK(Out->name() == "dce_demo");
  const ir::Declarations &A = G->decls(), &B = Out->decls();
  CHECK(B.Kind == A.Kind);
  REQUIRE(B.OnlineRowscales.size() == 2);
  CHECK(B.OnlineRowscales[0].Name == "m");
  CHECK(B.OnlineRowscales[0].Init == -INFINITY);
  CHECK(B.OnlineRowscales[1].Name == "r");
  REQUIRE(B.FinalRowscales.size() == 1);
  CHECK(B.FinalRowscales[0].Name == "lse");
  REQUIRE(B.Inputs.size() == 1);
  CHECK(B.Inputs[0].Name == "bias");
  CHECK(B.Inputs[0].Shape == ir::InputShape::PerKey);
  CHECK(B.Inputs[0].SampleLo == -2.0);
  CHECK(B.Inputs[0].SampleHi == 3.0);
  CHECK(B.HasMask);
  CHECK_FALSE(B.HasBackward);
  CHECK(B.DecaySampleLo == -0.5);
  CHECK(B.DecaySampleHi == -0.25);
  REQUIRE(Out->functions().size() == 2);
  CHECK(Out->functions()[0].Name == "score_mod");
  CHECK(Out->functions()[1].Name == "mask_mod");
  CHECK(Out->functions()[0].Results[0].Name == "score");
  CHECK(Out->functions()[1].Results[0].Name == "mask");
  // Results point at the copies: same kind, type and space as before.
  const Node *Old = G->getFunction("score_mod")->result("score");
  const Node *New = Out->getFunction("score_mod")->result("score");
  CHECK(New->getKind() == Old->getKind());
  CHECK(New->getType() == Old->getType());
  CHECK(New->getSpace() == Old->getSpace());
}

TEST_CASE("DCE after simplify drops what simplify replaced", "[dce]") {
  ir::Graph G;
  G.setName("after_simplify");
  const Node *X = G.param(ParamKind::Score, "score", Type::F32, Space::Tile);
  const Node *Expr =
      G.binary(NodeKind::Add, G.binary(NodeKind::Mul, X, G.constant(1.0)),
               G.constant(0.0));
  G.addFunction("score_mod").Results.push_back({"score", Expr});
  transforms::simplify(G);
  REQUIRE(G.getFunction("score_mod")->result("score") == X);
  // Simplify frees nothing (it even adds the rebuilt add(x, 0)).
  REQUIRE(G.nodes().size() >= 5);
  std::unique_ptr<ir::Graph> Out = transforms::eliminateDeadNodes(G);
  CHECK(Out->nodes().size() == 1);
  CHECK(ir::toText(*Out) == ir::toText(G));
}

TEST_CASE("DCE of a graph without dead nodes is a same-size copy", "[dce]") {
  std::unique_ptr<ir::Graph> G = graphWithDeadNodes();
  std::unique_ptr<ir::Graph> Once = transforms::eliminateDeadNodes(*G);
  std::unique_ptr<ir::Graph> Twice = transforms::eliminateDeadNodes(*Once);
  CHECK(Twice->nodes().size() == Once->nodes().size());
  CHECK(ir::toText(*Twice) == ir::toText(*Once));
  // Node ids of the copy stay a topological order (the verifier's rule).
  for (const Node *N : Twice->nodes())
    for (const Node *Op : N->operands())
      CHECK(Op->getId() < N->getId());
}
