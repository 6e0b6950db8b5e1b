// Simplify: one before/expected graph per rule of Simplify.h's doc comment.
#include "attn/transforms/Simplify.h"
#include "attn/Error.h"
#include "attn/ir/Eval.h"
#include "attn/ir/Graph.h"
#include "attn/ir/Printer.h"

#include "llvm/Support/Casting.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>

using namespace attn;
using ir::Node;
using ir::NodeKind;
using ir::ParamKind;
using ir::Space;
using ir::Type;

namespace {

constexpr double Inf = std::numeric_limits<double>::infinity();
constexpr double NaN = std::numeric_limits<double>::quiet_NaN();

/// A graph with a few leaves of each type and space; the expression under
/// test becomes score_mod's result. The leaves are created in the same order
/// in every fixture, so two fixtures print alike when their results are built
/// alike.
struct Fixture {
  ir::Graph G;
  const Node *X = G.param(ParamKind::Score, "score", Type::F32, Space::Tile);
  const Node *Y = G.param(ParamKind::Input, "y", Type::F32, Space::Row);
  const Node *Q = G.param(ParamKind::Index, "q_idx", Type::I32, Space::Row);
  const Node *K = G.param(ParamKind::Index, "kv_idx", Type::I32, Space::Col);
  const Node *Cond = G.binary(NodeKind::Ge, Q, K); // an i1 tile value
  // A runtime scalar: const space like a constant, so a rewrite to a
  // constant would keep its space and only the inf/NaN rule forbids it.
  const Node *S = G.param(ParamKind::Input, "s", Type::F32, Space::Const);

  const Node *c(double V, Type T = Type::F32) { return G.constant(V, T); }
  void setResult(const Node *Root) {
    G.addFunction("score_mod").Results.push_back({"score", Root});
  }
  const Node *result() const {
    return G.getFunction("score_mod")->result("score");
  }
  /// Simplifies a graph returning \p Root and gives the new result.
  const Node *simplified(const Node *Root) {
    setResult(Root);
    transforms::simplify(G);
    return result();
  }
};

/// The printed form of a fixture whose result \p Build returns.
std::string expectedText(const std::function<const Node *(Fixture &)> &Build) {
  Fixture E;
  E.setResult(Build(E));
  return ir::toText(E.G);
}

/// Equal as IEEE values, NaN equal to NaN, and the sign of zero kept.
bool sameDouble(double A, double B) {
  if (std::isnan(A) || std::isnan(B))
    return std::isnan(A) && std::isnan(B);
  return A == B && std::signbit(A) == std::signbit(B);
}

/// Checks that simplify turns \p N (all operands constant) into the constant
/// \p Expected of \p N's own type.
void requireFoldsTo(Fixture &F, const Node *N, double Expected) {
  Type T = N->getType();
  const Node *R = F.simplified(N);
  auto *C = llvm::dyn_cast<ir::ConstNode>(R);
  INFO(ir::mnemonic(N->getKind()).str() << " folded to " << ir::toText(F.G));
  REQUIRE(C);
  CHECK(sameDouble(C->getValue(), Expected));
  CHECK(C->getType() == T);
}

const NodeKind UnaryNumeric[] = {
    NodeKind::Neg,  NodeKind::Exp,  NodeKind::Exp2, NodeKind::Log,
    NodeKind::Log2, NodeKind::Abs,  NodeKind::Tanh, NodeKind::Sigmoid,
    NodeKind::Relu, NodeKind::Sqrt, NodeKind::Rsqrt};
const NodeKind BinaryAll[] = {
    NodeKind::Add,      NodeKind::Sub, NodeKind::Mul, NodeKind::Div,
    NodeKind::Max,      NodeKind::Min, NodeKind::FloorDiv, NodeKind::Mod,
    NodeKind::Lt,       NodeKind::Le,  NodeKind::Gt,  NodeKind::Ge,
    NodeKind::Eq,       NodeKind::Ne};

} // namespace

TEST_CASE("simplify folds every unary kind on constants as evalUnary does",
          "[simplify][fold]") {
  // Points inside and outside each domain, including the IEEE edge cases:
  // folding must agree with the reference interpreter there too.
  for (NodeKind K : UnaryNumeric)
    for (double V : {0.7, -1.3, 0.0, 4.0, -Inf, Inf}) {
      Fixture F;
      INFO(ir::mnemonic(K).str() << "(" << V << ")");
      requireFoldsTo(F, F.G.unary(K, F.c(V)), ir::evalUnary(K, V));
    }
  for (double V : {0.0, 1.0}) {
    Fixture F;
    requireFoldsTo(F, F.G.unary(NodeKind::Not, F.c(V, Type::Bool)),
                   ir::evalUnary(NodeKind::Not, V));
  }
}

TEST_CASE("simplify folds i32 constants to i32 where the kind keeps the type",
          "[simplify][fold]") {
  for (NodeKind K : {NodeKind::Neg, NodeKind::Abs, NodeKind::Relu}) {
    Fixture F;
    requireFoldsTo(F, F.G.unary(K, F.c(-3, Type::I32)), ir::evalUnary(K, -3));
  }
  Fixture F;
  // i32 / i32 is an f32 division: 7 / 2 folds to 3.5, not 3.
  const Node *D =
      F.G.binary(NodeKind::Div, F.c(7, Type::I32), F.c(2, Type::I32));
  REQUIRE(D->getType() == Type::F32);
  requireFoldsTo(F, D, 3.5);
}

TEST_CASE("simplify folds every binary, comparison and logic kind",
          "[simplify][fold]") {
  const std::pair<double, double> Points[] = {
      {2.5, -4.0}, {-4.0, 2.5}, {3.0, 3.0}, {0.0, 0.0}, {1.0, NaN}};
  for (NodeKind K : BinaryAll)
    for (auto [A, B] : Points) {
      Fixture F;
      INFO(ir::mnemonic(K).str() << "(" << A << ", " << B << ")");
      // A division by the constant 0 is refused, not folded (below).
      if ((K == NodeKind::Div || K == NodeKind::FloorDiv ||
           K == NodeKind::Mod) &&
          B == 0.0)
        continue;
      requireFoldsTo(F, F.G.binary(K, F.c(A), F.c(B)), ir::evalBinary(K, A, B));
    }
  for (NodeKind K : {NodeKind::And, NodeKind::Or})
    for (double A : {0.0, 1.0})
      for (double B : {0.0, 1.0}) {
        Fixture F;
        INFO(ir::mnemonic(K).str() << "(" << A << ", " << B << ")");
        requireFoldsTo(F, F.G.binary(K, F.c(A, Type::Bool), F.c(B, Type::Bool)),
                       ir::evalBinary(K, A, B));
      }
}

TEST_CASE("simplify refuses a divisor that is or folds to the constant 0",
          "[simplify][fold]") {
  {
    Fixture F;
    REQUIRE_THROWS_AS(
        F.simplified(F.G.binary(NodeKind::Div, F.c(0.0), F.c(0.0))),
        UserError);
  }
  {
    Fixture F;
    REQUIRE_THROWS_WITH(
        F.simplified(F.G.binary(NodeKind::Div, F.X, F.c(-0.0))),
        "score_mod: 'div' divides `score` by the constant 0");
  }
  {
    Fixture F;
    const Node *Zero = F.G.binary(NodeKind::Sub, F.c(2.0), F.c(2.0));
    REQUIRE_THROWS_WITH(F.simplified(F.G.binary(NodeKind::Div, F.X, Zero)),
                        "score_mod: 'div' divides `score` by `2 - 2`, which "
                        "folds to the constant 0");
  }
  // floordiv and mod by 0 have a value (0 and x) but are refused alike.
  for (NodeKind K : {NodeKind::FloorDiv, NodeKind::Mod}) {
    Fixture F;
    const Node *Zero =
        F.G.binary(NodeKind::Sub, F.c(3, Type::I32), F.c(3, Type::I32));
    REQUIRE_THROWS_WITH(F.simplified(F.G.binary(K, F.Q, Zero)),
                        "score_mod: '" + ir::mnemonic(K).str() +
                            "' divides `q_idx` by `3 - 3`, which folds to "
                            "the constant 0");
  }
  // x - x is not folded (x may be inf), so x / (x - x) stays.
  Fixture F;
  const Node *Diff = F.G.binary(NodeKind::Sub, F.X, F.X);
  REQUIRE_NOTHROW(F.simplified(F.G.binary(NodeKind::Div, F.Y, Diff)));
}

TEST_CASE("simplify folds floordiv and mod of i32 constants to i32, with "
          "floor semantics",
          "[simplify][fold][floordiv]") {
  // {a, b, floordiv, mod}: Python's // and %, not C++'s truncation.
  const double Table[][4] = {{7, 2, 3, 1},    {-7, 2, -4, 1},  {7, -2, -4, -1},
                             {-7, -2, 3, -1}, {6, 3, 2, 0},    {-6, 3, -2, 0},
                             {0, 5, 0, 0},    {-1, 64, -1, 63}, {2147483647, 2, 1073741823, 1}};
  for (const auto &Row : Table) {
    INFO(Row[0] << " // " << Row[1]);
    Fixture F;
    const Node *D = F.G.binary(NodeKind::FloorDiv, F.c(Row[0], Type::I32),
                               F.c(Row[1], Type::I32));
    REQUIRE(D->getType() == Type::I32);
    requireFoldsTo(F, D, Row[2]);
    Fixture G;
    const Node *M = G.G.binary(NodeKind::Mod, G.c(Row[0], Type::I32),
                               G.c(Row[1], Type::I32));
    REQUIRE(M->getType() == Type::I32);
    requireFoldsTo(G, M, Row[3]);
    // a = b·floordiv + mod.
    CHECK(Row[1] * Row[2] + Row[3] == Row[0]);
  }
  // An f32 operand makes both f32: floor(-7.5 / 2) = -4, -7.5 - 2·-4 = 0.5.
  Fixture F;
  const Node *D =
      F.G.binary(NodeKind::FloorDiv, F.c(-7.5), F.c(2, Type::I32));
  REQUIRE(D->getType() == Type::F32);
  requireFoldsTo(F, D, -4.0);
  Fixture G;
  requireFoldsTo(G, G.G.binary(NodeKind::Mod, G.c(-7.5), G.c(2.0)), 0.5);
  // The zero-divisor values, for the runtime case the folds never see.
  CHECK(ir::evalBinary(NodeKind::FloorDiv, 5, 0) == 0.0);
  CHECK(ir::evalBinary(NodeKind::Mod, 5, 0) == 5.0);
  CHECK(ir::evalBinary(NodeKind::Mod, -5.5, 0) == -5.5);
}

TEST_CASE("simplify drops floordiv by 1 of an i32 value only",
          "[simplify][identity][floordiv]") {
  {
    Fixture F;
    CHECK(F.simplified(F.G.binary(NodeKind::FloorDiv, F.Q,
                                  F.c(1, Type::I32))) == F.Q);
  }
  // floor(score / 1) is floor(score): kept.
  Fixture F;
  const Node *N = F.G.binary(NodeKind::FloorDiv, F.X, F.c(1.0));
  CHECK(F.simplified(N) == N);
}

TEST_CASE("simplify folds select on constants and folding cascades",
          "[simplify][fold]") {
  {
    Fixture F;
    requireFoldsTo(F, F.G.select(F.c(1, Type::Bool), F.c(2.0), F.c(3.0)), 2.0);
  }
  {
    Fixture F;
    requireFoldsTo(F, F.G.select(F.c(0, Type::Bool), F.c(2.0), F.c(3.0)), 3.0);
  }
  // exp(1 + 2) folds bottom-up to one constant.
  Fixture F;
  requireFoldsTo(
      F,
      F.G.unary(NodeKind::Exp, F.G.binary(NodeKind::Add, F.c(1.0), F.c(2.0))),
      std::exp(3.0));
}

TEST_CASE("simplify removes additive and multiplicative identities",
          "[simplify][identity]") {
  using Build = std::function<const Node *(Fixture &)>;
  const std::pair<const char *, Build> Cases[] = {
      {"x+0",
       [](Fixture &F) { return F.G.binary(NodeKind::Add, F.X, F.c(0)); }},
      {"0+x",
       [](Fixture &F) { return F.G.binary(NodeKind::Add, F.c(0), F.X); }},
      {"x-0",
       [](Fixture &F) { return F.G.binary(NodeKind::Sub, F.X, F.c(0)); }},
      {"x*1",
       [](Fixture &F) { return F.G.binary(NodeKind::Mul, F.X, F.c(1)); }},
      {"1*x",
       [](Fixture &F) { return F.G.binary(NodeKind::Mul, F.c(1), F.X); }},
      {"x/1",
       [](Fixture &F) { return F.G.binary(NodeKind::Div, F.X, F.c(1)); }},
      {"-(-x)",
       [](Fixture &F) {
         return F.G.unary(NodeKind::Neg, F.G.unary(NodeKind::Neg, F.X));
       }},
      {"max(x,x)",
       [](Fixture &F) { return F.G.binary(NodeKind::Max, F.X, F.X); }},
      {"min(x,x)",
       [](Fixture &F) { return F.G.binary(NodeKind::Min, F.X, F.X); }},
      {"(x*1)+0",
       [](Fixture &F) {
         return F.G.binary(NodeKind::Add,
                           F.G.binary(NodeKind::Mul, F.X, F.c(1)), F.c(0));
       }},
  };
  const std::string OnlyX = expectedText([](Fixture &F) { return F.X; });
  for (const auto &[Name, B] : Cases) {
    Fixture F;
    INFO(Name);
    const Node *Before = B(F);
    REQUIRE(Before != F.X); // the builders themselves do not simplify
    CHECK(F.simplified(Before) == F.X);
    CHECK(ir::toText(F.G) == OnlyX);
  }
  // The same rules hold on i32 values (q_idx + 0 stays i32).
  Fixture F;
  CHECK(F.simplified(F.G.binary(NodeKind::Add, F.Q, F.c(0, Type::I32))) == F.Q);
}

TEST_CASE("simplify removes double negation of booleans",
          "[simplify][identity]") {
  Fixture F;
  const Node *NotNot =
      F.G.unary(NodeKind::Not, F.G.unary(NodeKind::Not, F.Cond));
  CHECK(F.simplified(NotNot) == F.Cond);
  CHECK(ir::toText(F.G) == expectedText([](Fixture &E) { return E.Cond; }));
  // An odd number of nots keeps one.
  Fixture G3;
  const Node *Not3 =
      G3.G.unary(NodeKind::Not,
                 G3.G.unary(NodeKind::Not, G3.G.unary(NodeKind::Not, G3.Cond)));
  CHECK(G3.simplified(Not3) == G3.G.unary(NodeKind::Not, G3.Cond));
}

TEST_CASE("simplify picks the branch of a select on a constant condition",
          "[simplify][select]") {
  SECTION("true") {
    Fixture F;
    const Node *E = F.G.unary(NodeKind::Exp, F.X);
    CHECK(F.simplified(F.G.select(F.c(1, Type::Bool), F.X, E)) == F.X);
    CHECK(ir::toText(F.G) == expectedText([](Fixture &E) { return E.X; }));
  }
  SECTION("false") {
    Fixture F;
    const Node *E = F.G.unary(NodeKind::Exp, F.X);
    CHECK(F.simplified(F.G.select(F.c(0, Type::Bool), F.X, E)) == E);
    CHECK(ir::toText(F.G) == expectedText([](Fixture &E) {
            return E.G.unary(NodeKind::Exp, E.X);
          }));
  }
  SECTION("equal branches") {
    Fixture F;
    CHECK(F.simplified(F.G.select(F.Cond, F.X, F.X)) == F.X);
  }
}

TEST_CASE("simplify turns additions of negations into subtractions and back",
          "[simplify][identity]") {
  SECTION("x + (-y) -> x - y") {
    Fixture F;
    const Node *R = F.simplified(
        F.G.binary(NodeKind::Add, F.X, F.G.unary(NodeKind::Neg, F.Y)));
    CHECK(R == F.G.binary(NodeKind::Sub, F.X, F.Y));
    CHECK(ir::toText(F.G) == expectedText([](Fixture &E) {
            return E.G.binary(NodeKind::Sub, E.X, E.Y);
          }));
  }
  SECTION("x - (-y) -> x + y") {
    Fixture F;
    const Node *R = F.simplified(
        F.G.binary(NodeKind::Sub, F.X, F.G.unary(NodeKind::Neg, F.Y)));
    CHECK(R == F.G.binary(NodeKind::Add, F.X, F.Y));
    CHECK(ir::toText(F.G) == expectedText([](Fixture &E) {
            return E.G.binary(NodeKind::Add, E.X, E.Y);
          }));
  }
  SECTION("2 - (-x) -> x + 2, the constant then moved right") {
    Fixture F;
    const Node *R = F.simplified(
        F.G.binary(NodeKind::Sub, F.c(2), F.G.unary(NodeKind::Neg, F.X)));
    CHECK(R == F.G.binary(NodeKind::Add, F.X, F.c(2)));
  }
}

TEST_CASE("simplify moves a constant operand of a commutative op right",
          "[simplify][canonical]") {
  for (NodeKind K : {NodeKind::Add, NodeKind::Mul, NodeKind::Max, NodeKind::Min,
                     NodeKind::Eq, NodeKind::Ne}) {
    Fixture F;
    INFO(ir::mnemonic(K).str());
    const Node *C = F.c(2.5);
    const Node *R = F.simplified(F.G.binary(K, C, F.X));
    CHECK(R == F.G.binary(K, F.X, C));
    CHECK(ir::toText(F.G) == expectedText([K](Fixture &E) {
            return E.G.binary(K, E.X, E.c(2.5));
          }));
  }
  for (NodeKind K : {NodeKind::And, NodeKind::Or}) {
    Fixture F;
    const Node *T = F.c(1, Type::Bool);
    CHECK(F.simplified(F.G.binary(K, T, F.Cond)) == F.G.binary(K, F.Cond, T));
  }
  // 0 * x is commuted but, like x * 0, not folded.
  Fixture F;
  CHECK(F.simplified(F.G.binary(NodeKind::Mul, F.c(0), F.X)) ==
        F.G.binary(NodeKind::Mul, F.X, F.c(0)));
}

TEST_CASE("simplify leaves what would change inf/NaN results, types or spaces",
          "[simplify][keep]") {
  using Build = std::function<const Node *(Fixture &)>;
  const std::pair<const char *, Build> Cases[] = {
      // inf * 0 and inf - inf are NaN, not 0.
      {"x*0",
       [](Fixture &F) { return F.G.binary(NodeKind::Mul, F.X, F.c(0)); }},
      {"x-x", [](Fixture &F) { return F.G.binary(NodeKind::Sub, F.X, F.X); }},
      {"s*0",
       [](Fixture &F) { return F.G.binary(NodeKind::Mul, F.S, F.c(0)); }},
      {"s-s", [](Fixture &F) { return F.G.binary(NodeKind::Sub, F.S, F.S); }},
      // i32 + f32 is f32: returning the i32 q_idx would change the type.
      {"i32 x + f32 0",
       [](Fixture &F) { return F.G.binary(NodeKind::Add, F.Q, F.c(0.0)); }},
      // i32 / 1 is an f32 division.
      {"i32 x / 1",
       [](Fixture &F) {
         return F.G.binary(NodeKind::Div, F.Q, F.c(1, Type::I32));
       }},
      // select(true, 2, x) is per-element; the constant 2 is not.
      {"select(true, const, tile)",
       [](Fixture &F) {
         return F.G.select(F.c(1, Type::Bool), F.c(2.0), F.X);
       }},
      // Neither subtraction nor comparison is commutative.
      {"2-x",
       [](Fixture &F) { return F.G.binary(NodeKind::Sub, F.c(2), F.X); }},
      {"2<x", [](Fixture &F) { return F.G.binary(NodeKind::Lt, F.c(2), F.X); }},
      {"0-x",
       [](Fixture &F) { return F.G.binary(NodeKind::Sub, F.c(0), F.X); }},
      {"x+1",
       [](Fixture &F) { return F.G.binary(NodeKind::Add, F.X, F.c(1)); }},
      {"x*2",
       [](Fixture &F) { return F.G.binary(NodeKind::Mul, F.X, F.c(2)); }},
      {"max(x,y)",
       [](Fixture &F) { return F.G.binary(NodeKind::Max, F.X, F.Y); }},
  };
  for (const auto &[Name, B] : Cases) {
    Fixture F;
    INFO(Name);
    const Node *Before = B(F);
    F.setResult(Before);
    std::string Text = ir::toText(F.G);
    transforms::simplify(F.G);
    CHECK(F.result() == Before);
    CHECK(ir::toText(F.G) == Text);
  }
}

TEST_CASE("simplify keeps the old nodes for DCE and rewrites every function",
          "[simplify]") {
  Fixture F;
  F.setResult(F.G.binary(NodeKind::Mul, F.X, F.c(1)));
  F.G.addFunction("mask_mod")
      .Results.push_back(
          {"mask", F.G.unary(NodeKind::Not, F.G.unary(NodeKind::Not, F.Cond))});
  size_t Before = F.G.nodes().size();
  transforms::simplify(F.G);
  CHECK(F.G.nodes().size() >= Before);
  CHECK(F.result() == F.X);
  CHECK(F.G.getFunction("mask_mod")->result("mask") == F.Cond);
  // A second run finds nothing more to do.
  std::string Once = ir::toText(F.G);
  transforms::simplify(F.G);
  CHECK(ir::toText(F.G) == Once);
}
