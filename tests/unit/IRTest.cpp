// Unit tests of the IR: node uniquing, the space lattice and the printer.
#include "attn/dsl/Symbol.h"
#include "attn/ir/Graph.h"
#include "attn/ir/Printer.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <optional>

using namespace attn;
using ir::NodeKind;
using ir::ParamKind;
using ir::Space;
using ir::Type;

namespace {
constexpr double Inf = std::numeric_limits<double>::infinity();
constexpr double NaN = std::numeric_limits<double>::quiet_NaN();
} // namespace

TEST_CASE("building the same expression twice gives the same node") {
  ir::Graph G;
  auto Build = [&G] {
    dsl::SymbolScalar S{&G, G.param(ParamKind::Scores, "scores", Type::F32,
                                    Space::Tile)};
    dsl::SymbolScalar M{&G, G.param(ParamKind::Rowscale, "m", Type::F32,
                                    Space::Row)};
    dsl::SymbolScalar MNew = M.max(S.get_reduce("max"));
    return ((S - MNew).exp() * 0.5).node();
  };
  const ir::Node *First = Build();
  size_t Count = G.nodes().size();
  const ir::Node *Second = Build();
  CHECK(First == Second);
  // Nothing new was created the second time.
  CHECK(G.nodes().size() == Count);
}

TEST_CASE("Graph::nodes grows only when a new node is built") {
  ir::Graph G;
  CHECK(G.nodes().empty());
  const ir::Node *A = G.constant(1.0);
  CHECK(G.nodes().size() == 1);
  CHECK(G.constant(1.0) == A);
  CHECK(G.nodes().size() == 1);
  const ir::Node *B = G.constant(2.0);
  CHECK(B != A);
  CHECK(G.nodes().size() == 2);
  const ir::Node *Sum = G.binary(NodeKind::Add, A, B);
  CHECK(G.binary(NodeKind::Add, A, B) == Sum);
  CHECK(G.nodes().size() == 3);
  // Operand order is part of a node's identity (no silent commuting).
  CHECK(G.binary(NodeKind::Add, B, A) != Sum);
  CHECK(G.nodes().size() == 4);
  // Nodes are numbered in creation order.
  CHECK(A->getId() == 0);
  CHECK(B->getId() == 1);
  CHECK(Sum->getId() == 2);
}

TEST_CASE("constants unique by value and type, and NaN is one node") {
  ir::Graph G;
  CHECK(G.constant(0.5) != G.constant(0.25));
  CHECK(G.constant(1.0, Type::F32) != G.constant(1.0, Type::I32));
  CHECK(G.constant(Inf) != G.constant(-Inf));
  // +0 and -0 are different values (1/x tells them apart).
  CHECK(G.constant(0.0) != G.constant(-0.0));
  size_t Before = G.nodes().size();
  const ir::Node *N1 = G.constant(NaN);
  const ir::Node *N2 = G.constant(NaN);
  CHECK(N1 == N2);
  // A NaN with another bit pattern is still the one NaN node.
  CHECK(G.constant(std::nan("7")) == N1);
  CHECK(G.nodes().size() == Before + 1);
}

TEST_CASE("parameters unique by kind, name, type and space") {
  ir::Graph G;
  const ir::Node *R = G.param(ParamKind::Rowscale, "r", Type::F32, Space::Row);
  CHECK(G.param(ParamKind::Rowscale, "r", Type::F32, Space::Row) == R);
  // The online rowscale r and the final rowscale r are different values.
  CHECK(G.param(ParamKind::FinalRowscale, "r", Type::F32, Space::Row) != R);
  CHECK(G.param(ParamKind::Rowscale, "r2", Type::F32, Space::Row) != R);
}

TEST_CASE("group markers bracket exactly the kinds Nodes.def lists per group") {
  // Membership straight from the .def's group macros, independent of the
  // markers the predicates use.
  struct Entry {
    NodeKind K;
    ir::KindGroup G;
  };
  const Entry Entries[] = {
#define ATTN_LEAF(Name, M) {NodeKind::Name, ir::KindGroup::Leaf},
#define ATTN_UNARY(Name, M) {NodeKind::Name, ir::KindGroup::Unary},
#define ATTN_BINARY(Name, M) {NodeKind::Name, ir::KindGroup::Binary},
#define ATTN_COMPARE(Name, M) {NodeKind::Name, ir::KindGroup::Compare},
#define ATTN_LOGIC(Name, M) {NodeKind::Name, ir::KindGroup::Logic},
#define ATTN_SELECT(Name, M) {NodeKind::Name, ir::KindGroup::Select},
#define ATTN_REDUCE(Name, M) {NodeKind::Name, ir::KindGroup::Reduce},
#include "attn/ir/Nodes.def"
  };
  REQUIRE(std::size(Entries) == ir::NumNodeKinds);
  for (const Entry &E : Entries) {
    INFO(ir::mnemonic(E.K).str());
    CHECK(ir::kindGroup(E.K) == E.G);
    CHECK(ir::isLeafKind(E.K) == (E.G == ir::KindGroup::Leaf));
    CHECK(ir::isUnaryKind(E.K) == (E.G == ir::KindGroup::Unary));
    CHECK(ir::isBinaryKind(E.K) == (E.G == ir::KindGroup::Binary));
    CHECK(ir::isCompareKind(E.K) == (E.G == ir::KindGroup::Compare));
    CHECK(ir::isLogicKind(E.K) == (E.G == ir::KindGroup::Logic));
  }
  CHECK(NodeKind::FirstUnary == NodeKind::Neg);
  CHECK(NodeKind::LastUnary == NodeKind::ToFloat);
  CHECK(NodeKind::FirstCompare == NodeKind::Lt);
  CHECK(NodeKind::LastCompare == NodeKind::Ne);
  CHECK(NodeKind::FirstReduce == NodeKind::LastReduce);
}

TEST_CASE("joinSpaces for every pair of spaces") {
  using S = Space;
  const S C = S::Const, H = S::Head, R = S::Row, K = S::Col, T = S::Tile,
          O = S::Out;
  const S All[] = {C, H, R, K, T, O};
  // Expected join, row by row in the order of All; nullopt where tile or
  // col meet out.
  const std::optional<S> Table[6][6] = {
      /* const */ {C, H, R, K, T, O},
      /* head  */ {H, H, R, K, T, O},
      /* row   */ {R, R, R, T, T, O},
      /* col   */ {K, K, T, K, T, std::nullopt},
      /* tile  */ {T, T, T, T, T, std::nullopt},
      /* out   */ {O, O, O, std::nullopt, std::nullopt, O}};
  for (int I = 0; I < 6; ++I)
    for (int J = 0; J < 6; ++J) {
      INFO(ir::spaceName(All[I]).str() << " with "
                                       << ir::spaceName(All[J]).str());
      CHECK(ir::joinSpaces(All[I], All[J]) == Table[I][J]);
    }
}

TEST_CASE("isPerRowOrCoarser holds for const, head and row only") {
  CHECK(ir::isPerRowOrCoarser(Space::Const));
  CHECK(ir::isPerRowOrCoarser(Space::Head));
  CHECK(ir::isPerRowOrCoarser(Space::Row));
  CHECK_FALSE(ir::isPerRowOrCoarser(Space::Col));
  CHECK_FALSE(ir::isPerRowOrCoarser(Space::Tile));
  CHECK_FALSE(ir::isPerRowOrCoarser(Space::Out));
}

TEST_CASE("names of kinds, types, spaces and reductions round-trip") {
  for (NodeKind K : {NodeKind::Const, NodeKind::Exp, NodeKind::Sub,
                     NodeKind::Ge, NodeKind::And, NodeKind::Select,
                     NodeKind::Reduce})
    CHECK(ir::kindFromMnemonic(ir::mnemonic(K)) == K);
  CHECK(ir::mnemonic(NodeKind::Rsqrt) == "rsqrt");
  CHECK(ir::arity(NodeKind::Select) == 3);
  CHECK(ir::arity(NodeKind::Param) == 0);
  CHECK_FALSE(ir::kindFromMnemonic("frobnicate"));
  CHECK(ir::typeName(Type::Bool) == "i1");
  CHECK(ir::typeFromName("i32") == Type::I32);
  CHECK(ir::spaceFromName("tile") == Space::Tile);
  CHECK(ir::spaceDescription(Space::Col) == "per-key");
  CHECK(ir::reduceOpFromName("abssum") == ir::ReduceOp::AbsSum);
  CHECK_FALSE(ir::reduceOpFromName("mean"));
  CHECK(ir::paramKindFromName("acc") == ParamKind::Output);
}

TEST_CASE("toText prints declarations and functions in the stable form") {
  ir::Graph G;
  G.setName("tiny");
  G.decls().OnlineRowscales = {{"m", -Inf}, {"r", 0.0}};
  G.decls().FinalRowscales = {{"lse", 0.0}};
  G.decls().Inputs = {{"bias", ir::InputShape::PerKey}};
  G.decls().HasMask = true;

  const ir::Node *Q = G.param(ParamKind::Index, "q_idx", Type::I32, Space::Row);
  const ir::Node *K = G.param(ParamKind::Index, "kv_idx", Type::I32,
                              Space::Col);
  const ir::Node *Ge = G.binary(NodeKind::Ge, Q, K);
  G.addFunction("mask_mod").Results = {{"mask", Ge}};

  const ir::Node *S = G.param(ParamKind::Scores, "scores", Type::F32,
                              Space::Tile);
  const ir::Node *M = G.param(ParamKind::Rowscale, "m", Type::F32, Space::Row);
  const ir::Node *Red = G.reduce(ir::ReduceOp::Max, S);
  const ir::Node *MNew = G.binary(NodeKind::Max, M, Red);
  const ir::Node *P = G.unary(NodeKind::Exp, G.binary(NodeKind::Sub, S, MNew));
  const ir::Node *Half = G.constant(0.5);
  const ir::Node *Sel = G.select(Ge, P, G.constant(-Inf));
  G.addFunction("online_fwd").Results = {
      {"scores", Sel}, {"m", MNew}, {"o_scale", Half}};

  const char *Expected = "attention tiny\n"
                         "  rowscale m = -inf\n"
                         "  rowscale r = 0\n"
                         "  final lse\n"
                         "  input bias : per_key\n"
                         "\n"
                         "func mask_mod {\n"
                         "  %0 = index q_idx : i32 row\n"
                         "  %1 = index kv_idx : i32 col\n"
                         "  %2 = ge %0, %1 : i1 tile\n"
                         "  return mask = %2\n"
                         "}\n"
                         "\n"
                         "func online_fwd {\n"
                         "  %0 = index q_idx : i32 row\n"
                         "  %1 = index kv_idx : i32 col\n"
                         "  %2 = ge %0, %1 : i1 tile\n"
                         "  %3 = scores : f32 tile\n"
                         "  %4 = rowscale m : f32 row\n"
                         "  %5 = reduce.max %3 : f32 row\n"
                         "  %6 = max %4, %5 : f32 row\n"
                         "  %7 = sub %3, %6 : f32 tile\n"
                         "  %8 = exp %7 : f32 tile\n"
                         "  %9 = const 0.5 : f32 const\n"
                         "  %10 = const -inf : f32 const\n"
                         "  %11 = select %2, %8, %10 : f32 tile\n"
                         "  return scores = %11\n"
                         "  return m = %6\n"
                         "  return o_scale = %9\n"
                         "}\n";
  CHECK(ir::toText(G) == Expected);
}

TEST_CASE("shortExpr writes infix operators, calls and elides deep parts") {
  ir::Graph G;
  dsl::SymbolScalar S{&G, G.param(ParamKind::Scores, "scores", Type::F32,
                                  Space::Tile)};
  dsl::SymbolScalar M{&G, G.param(ParamKind::Rowscale, "m", Type::F32,
                                  Space::Row)};
  CHECK(ir::shortExpr((M - M.max(S.get_reduce("max"))).node()) ==
        "m - max(m, reduce_max(scores))");
  CHECK(ir::shortExpr((-(S * 2.5)).node()) == "-(scores * 2.5)");
  CHECK(ir::shortExpr(S.exp().exp().exp().node(), 2) == "exp(exp(…))");
}

TEST_CASE("formatNumber writes the shortest round-trip form") {
  CHECK(ir::formatNumber(0.1) == "0.1");
  CHECK(ir::formatNumber(1.0) == "1");
  CHECK(ir::formatNumber(-Inf) == "-inf");
  CHECK(ir::formatNumber(Inf) == "inf");
  CHECK(ir::formatNumber(NaN) == "nan");
}

TEST_CASE("every graph has its own serial; fromSerial finds live graphs") {
  uint64_t Gone;
  {
    ir::Graph A;
    Gone = A.serial();
    CHECK(ir::Graph::fromSerial(Gone) == &A);
  }
  CHECK(ir::Graph::fromSerial(Gone) == nullptr);
  // A graph created after A was destroyed (possibly at A's address) has a
  // new serial.
  ir::Graph B, C;
  CHECK(B.serial() > Gone);
  CHECK(C.serial() != B.serial());
  CHECK(ir::Graph::fromSerial(B.serial()) == &B);
  CHECK(ir::Graph::fromSerial(C.serial()) == &C);
  CHECK(ir::Graph::fromSerial(0) == nullptr);
}
