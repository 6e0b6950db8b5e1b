// Unit tests of the DSL frontend: SymbolScalar operators, types, spaces, Var.
#include "attn/Error.h"
#include "attn/dsl/Symbol.h"
#include "attn/ir/Graph.h"

#include "llvm/Support/Casting.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

using namespace attn;
using namespace attn::dsl;
using ir::NodeKind;
using ir::ParamKind;
using ir::Space;
using ir::Type;

namespace {

/// A graph with one placeholder of each space and type the DSL hands out, as
/// the tracer would create them.
struct Symbols {
  ir::Graph G;
  SymbolScalar scores{&G, G.param(ParamKind::Scores, "scores", Type::F32,
                                  Space::Tile)};
  SymbolScalar m{&G, G.param(ParamKind::Rowscale, "m", Type::F32, Space::Row)};
  SymbolScalar q_idx{&G, G.param(ParamKind::Index, "q_idx", Type::I32,
                                 Space::Row)};
  SymbolScalar kv_idx{&G, G.param(ParamKind::Index, "kv_idx", Type::I32,
                                  Space::Col)};
  SymbolScalar h{&G, G.param(ParamKind::Index, "h", Type::I32, Space::Head)};
  SymbolScalar o{&G, G.param(ParamKind::Output, "o", Type::F32, Space::Out)};
  SymbolScalar mask = q_idx >= kv_idx;
};

/// The constant operand a C++ number was lifted to.
const ir::ConstNode *asConst(const ir::Node *N) {
  return llvm::dyn_cast<ir::ConstNode>(N);
}

} // namespace

TEST_CASE_METHOD(Symbols, "binary operators on two symbols build the right "
                          "node with operands in order") {
  struct Case {
    SymbolScalar Result;
    NodeKind Kind;
  } Cases[] = {{scores + m, NodeKind::Add},
               {scores - m, NodeKind::Sub},
               {scores * m, NodeKind::Mul},
               {scores / m, NodeKind::Div}};
  for (const Case &C : Cases) {
    INFO(ir::mnemonic(C.Kind).str());
    REQUIRE(C.Result.graph() == &G);
    CHECK(C.Result.node()->getKind() == C.Kind);
    REQUIRE(C.Result.node()->operands().size() == 2);
    // Order matters for sub and div: the left operand comes first.
    CHECK(C.Result.node()->operand(0) == scores.node());
    CHECK(C.Result.node()->operand(1) == m.node());
    CHECK(C.Result.node()->getType() == Type::F32);
  }
}

TEST_CASE_METHOD(Symbols, "a C++ number on either side of an operator becomes "
                          "a constant on that side") {
  SymbolScalar L = 1 + m, R = m + 1;
  CHECK(L.node()->getKind() == NodeKind::Add);
  CHECK(R.node()->getKind() == NodeKind::Add);
  REQUIRE(asConst(L.node()->operand(0)));
  CHECK(asConst(L.node()->operand(0))->getValue() == 1.0);
  CHECK(L.node()->operand(1) == m.node());
  CHECK(R.node()->operand(0) == m.node());
  REQUIRE(asConst(R.node()->operand(1)));
  CHECK(asConst(R.node()->operand(1))->getValue() == 1.0);

  SymbolScalar F = 2.5 * scores;
  CHECK(F.node()->getKind() == NodeKind::Mul);
  REQUIRE(asConst(F.node()->operand(0)));
  CHECK(asConst(F.node()->operand(0))->getValue() == 2.5);
  CHECK(asConst(F.node()->operand(0))->getType() == Type::F32);
  CHECK(F.node()->operand(1) == scores.node());

  // Subtraction and division keep the number where it was written.
  SymbolScalar S = 3 - m, D = m / 4.0;
  CHECK(S.node()->getKind() == NodeKind::Sub);
  REQUIRE(asConst(S.node()->operand(0)));
  CHECK(asConst(S.node()->operand(0))->getValue() == 3.0);
  CHECK(D.node()->getKind() == NodeKind::Div);
  REQUIRE(asConst(D.node()->operand(1)));
  CHECK(asConst(D.node()->operand(1))->getValue() == 4.0);
}

TEST_CASE_METHOD(Symbols, "integer literals stay i32 next to i32 operands and "
                          "give f32 next to f32 ones") {
  SymbolScalar I = q_idx - 1;
  CHECK(I.node()->getType() == Type::I32);
  REQUIRE(asConst(I.node()->operand(1)));
  CHECK(asConst(I.node()->operand(1))->getType() == Type::I32);
  CHECK((2 * h).node()->getType() == Type::I32);
  CHECK((q_idx - kv_idx).node()->getType() == Type::I32);
  // A floating-point literal makes even an index expression f32.
  CHECK((q_idx - 1.0).node()->getType() == Type::F32);
  // An integer literal next to an f32 value: the result is f32.
  CHECK((m + 1).node()->getType() == Type::F32);
  CHECK((1 - scores).node()->getType() == Type::F32);
}

TEST_CASE_METHOD(Symbols, "division always gives f32, even of two integers") {
  CHECK((q_idx / kv_idx).node()->getType() == Type::F32);
  CHECK((q_idx / 2).node()->getType() == Type::F32);
  CHECK((1 / h).node()->getType() == Type::F32);
}

TEST_CASE_METHOD(Symbols, "unary minus is a neg node that keeps the type") {
  SymbolScalar N = -m;
  CHECK(N.node()->getKind() == NodeKind::Neg);
  CHECK(N.node()->operand(0) == m.node());
  CHECK(N.node()->getType() == Type::F32);
  CHECK((-q_idx).node()->getType() == Type::I32);
  CHECK((-q_idx).node()->getSpace() == Space::Row);
}

TEST_CASE_METHOD(Symbols, "comparisons give booleans (i1) of the joined space") {
  struct Case {
    SymbolScalar Result;
    NodeKind Kind;
  } Cases[] = {{q_idx < kv_idx, NodeKind::Lt},  {q_idx <= kv_idx, NodeKind::Le},
               {q_idx > kv_idx, NodeKind::Gt},  {q_idx >= kv_idx, NodeKind::Ge},
               {q_idx == kv_idx, NodeKind::Eq}, {q_idx != kv_idx, NodeKind::Ne}};
  for (const Case &C : Cases) {
    INFO(ir::mnemonic(C.Kind).str());
    CHECK(C.Result.node()->getKind() == C.Kind);
    CHECK(C.Result.node()->getType() == Type::Bool);
    CHECK(C.Result.node()->getSpace() == Space::Tile);
  }
  // A number on either side of a comparison works too.
  CHECK((m > 0.0).node()->getType() == Type::Bool);
  CHECK((0 < q_idx).node()->getKind() == NodeKind::Lt);
}

TEST_CASE_METHOD(Symbols, "&, | and ! combine booleans into booleans") {
  SymbolScalar Near = q_idx - kv_idx < 128;
  SymbolScalar A = mask & Near, O = mask | Near, N = !mask;
  CHECK(A.node()->getKind() == NodeKind::And);
  CHECK(O.node()->getKind() == NodeKind::Or);
  CHECK(N.node()->getKind() == NodeKind::Not);
  for (const SymbolScalar &S : {A, O, N})
    CHECK(S.node()->getType() == Type::Bool);
  CHECK(A.node()->operand(0) == mask.node());
  CHECK(A.node()->operand(1) == Near.node());
  CHECK(N.node()->operand(0) == mask.node());
}

TEST_CASE_METHOD(Symbols, "select builds a select node from symbols or numbers") {
  SymbolScalar S = select(mask, scores, m);
  CHECK(S.node()->getKind() == NodeKind::Select);
  CHECK(S.node()->operand(0) == mask.node());
  CHECK(S.node()->operand(1) == scores.node());
  CHECK(S.node()->operand(2) == m.node());
  CHECK(S.node()->getType() == Type::F32);
  CHECK(S.node()->getSpace() == Space::Tile);

  SymbolScalar N = select(mask, 1.0, -1.0);
  REQUIRE(asConst(N.node()->operand(1)));
  CHECK(asConst(N.node()->operand(1))->getValue() == 1.0);
  REQUIRE(asConst(N.node()->operand(2)));
  CHECK(asConst(N.node()->operand(2))->getValue() == -1.0);
  CHECK(select(mask, scores, 0.0).node()->operand(1) == scores.node());
  CHECK(select(mask, 0.0, scores).node()->operand(2) == scores.node());
  // Two i32 branches keep i32.
  CHECK(select(mask, q_idx, kv_idx).node()->getType() == Type::I32);
}

TEST_CASE_METHOD(Symbols, "each method builds its own node kind") {
  struct Case {
    SymbolScalar Result;
    NodeKind Kind;
  } Cases[] = {{m.exp(), NodeKind::Exp},         {m.exp2(), NodeKind::Exp2},
               {m.log(), NodeKind::Log},         {m.log2(), NodeKind::Log2},
               {m.abs(), NodeKind::Abs},         {m.tanh(), NodeKind::Tanh},
               {m.sigmoid(), NodeKind::Sigmoid}, {m.relu(), NodeKind::Relu},
               {m.sqrt(), NodeKind::Sqrt},       {m.rsqrt(), NodeKind::Rsqrt},
               {m.max(scores), NodeKind::Max},   {m.min(scores), NodeKind::Min},
               {m.max(0.0), NodeKind::Max},      {m.min(1.0), NodeKind::Min},
               {exp(m), NodeKind::Exp},          {log(m), NodeKind::Log},
               {max(m, scores), NodeKind::Max},  {min(m, scores), NodeKind::Min}};
  for (const Case &C : Cases) {
    INFO(ir::mnemonic(C.Kind).str());
    CHECK(C.Result.node()->getKind() == C.Kind);
    CHECK(C.Result.node()->operand(0) == m.node());
  }
  // Transcendentals of an integer are real; abs keeps the integer.
  CHECK(q_idx.exp().node()->getType() == Type::F32);
  CHECK(h.rsqrt().node()->getType() == Type::F32);
  CHECK(q_idx.abs().node()->getType() == Type::I32);
  REQUIRE(asConst(m.max(0.5).node()->operand(1)));
  CHECK(asConst(m.max(0.5).node()->operand(1))->getValue() == 0.5);
}

TEST_CASE_METHOD(Symbols, "get_reduce by name and by enum gives one per-row "
                          "reduce node") {
  struct Case {
    const char *Name;
    ir::ReduceOp Op;
  } Cases[] = {{"max", ir::ReduceOp::Max},
               {"sum", ir::ReduceOp::Sum},
               {"abssum", ir::ReduceOp::AbsSum}};
  for (const Case &C : Cases) {
    INFO(C.Name);
    SymbolScalar ByName = scores.get_reduce(C.Name);
    auto *R = llvm::dyn_cast<ir::ReduceNode>(ByName.node());
    REQUIRE(R);
    CHECK(R->getOp() == C.Op);
    CHECK(R->operand(0) == scores.node());
    CHECK(R->getSpace() == Space::Row);
    CHECK(R->getType() == Type::F32);
    // The enum spelling is the same node (uniqued).
    CHECK(scores.get_reduce(C.Op).node() == ByName.node());
  }
  CHECK(scores.get_reduce("max").node() != scores.get_reduce("sum").node());
}

TEST_CASE_METHOD(Symbols, "implicit broadcast takes the join of the spaces") {
  CHECK((m * scores).node()->getSpace() == Space::Tile);   // row op tile
  CHECK((scores - m).node()->getSpace() == Space::Tile);   // tile op row
  CHECK((m + kv_idx).node()->getSpace() == Space::Tile);   // row op col
  CHECK((kv_idx + m).node()->getSpace() == Space::Tile);   // col op row
  CHECK((h * m).node()->getSpace() == Space::Row);         // head op row
  CHECK((h + kv_idx).node()->getSpace() == Space::Col);    // head op col
  CHECK((o / m).node()->getSpace() == Space::Out);         // out op row
  CHECK((m * o).node()->getSpace() == Space::Out);         // row op out
  CHECK((o * h).node()->getSpace() == Space::Out);         // out op head
  CHECK((m + 1).node()->getSpace() == Space::Row);         // row op const
  CHECK(m.constant(2.0).node()->getSpace() == Space::Const);
}

TEST_CASE_METHOD(Symbols, "compound assignment rebinds the handle to the new "
                          "node") {
  SymbolScalar X = m;
  X += scores;
  CHECK(X.node() == (m + scores).node());
  X = m;
  X -= scores;
  CHECK(X.node() == (m - scores).node());
  X = m;
  X *= scores;
  CHECK(X.node() == (m * scores).node());
  X = m;
  X /= scores;
  CHECK(X.node() == (m / scores).node());
  // The original handle is untouched.
  CHECK(m.node()->getKind() == NodeKind::Param);
}

TEST_CASE_METHOD(Symbols, "compound assignment takes C++ numbers like the "
                          "binary operators") {
  SymbolScalar X = m;
  X += 1.0;
  CHECK(X.node() == (m + 1.0).node());
  X = m;
  X -= 2;
  CHECK(X.node() == (m - 2).node());
  X = m;
  X *= 0.5f;
  CHECK(X.node() == (m * 0.5f).node());
  X = m;
  X /= 4;
  CHECK(X.node() == (m / 4).node());
  // Literal types follow the C++ type: an integer keeps an index i32.
  SymbolScalar I = q_idx;
  I += 1;
  CHECK(I.node() == (q_idx + 1).node());
  CHECK(I.node()->getType() == Type::I32);
  REQUIRE(asConst(I.node()->operand(1)));
  CHECK(asConst(I.node()->operand(1))->getType() == Type::I32);
  I -= 2LL;
  CHECK(I.node()->getType() == Type::I32);
  I *= 3u;
  CHECK(I.node()->getType() == Type::I32);
  I += 0.5;
  CHECK(I.node()->getType() == Type::F32);
  I = q_idx;
  I /= 2; // division is real
  CHECK(I.node()->getType() == Type::F32);
}

TEST_CASE_METHOD(Symbols, "max and min with a C++ number lift it like the "
                          "binary operators") {
  // An integer keeps an i32 index i32 ...
  SymbolScalar Max0 = q_idx.max(0);
  CHECK(Max0.node()->getKind() == NodeKind::Max);
  CHECK(Max0.node()->getType() == Type::I32);
  REQUIRE(asConst(Max0.node()->operand(1)));
  CHECK(asConst(Max0.node()->operand(1))->getType() == Type::I32);
  CHECK(q_idx.min(7L).node()->getType() == Type::I32);
  CHECK(Max0.node() == max(q_idx, q_idx.constantInt(0)).node());
  // ... a floating-point number is an f32 constant ...
  CHECK(q_idx.max(0.0).node()->getType() == Type::F32);
  CHECK(q_idx.min(1.0f).node()->getType() == Type::F32);
  // ... and an f32 symbol stays f32 either way.
  CHECK(m.max(0).node()->getType() == Type::F32);
  CHECK(m.min(1).node()->getType() == Type::F32);
  CHECK(m.max(0.0).node() == max(m, m.constant(0.0)).node());
}

TEST_CASE_METHOD(Symbols, "constant() and constantInt() make typed constants") {
  CHECK(asConst(m.constant(3.0).node())->getType() == Type::F32);
  CHECK(asConst(m.constantInt(3).node())->getType() == Type::I32);
  CHECK(m.constant(3.0).node() != m.constantInt(3).node());
  CHECK(asConst(m.constant(-0.25).node())->getValue() == -0.25);
}

TEST_CASE("Var reads inf, -inf and numbers") {
  constexpr double Inf = std::numeric_limits<double>::infinity();
  CHECK(Var("-inf").value() == -Inf);
  CHECK(Var("inf").value() == Inf);
  CHECK(Var("+inf").value() == Inf);
  CHECK(Var("0.5").value() == 0.5);
  CHECK(Var("1").value() == 1.0);
  CHECK(Var("-3e2").value() == -300.0);
  CHECK(Var(" 2 ").value() == 2.0); // surrounding blanks are trimmed
  // Numbers are read as strtod reads them (llvm::to_float): hexadecimal,
  // a leading '+', and infinity in any case, spelled short or long.
  CHECK(Var("0x1p-2").value() == 0.25);
  CHECK(Var("+.5e1").value() == 5.0);
  CHECK(Var("INF").value() == Inf);
  CHECK(Var("-Infinity").value() == -Inf);
  // A number too small for a double rounds to 0, as the literal does.
  CHECK(Var("1e-400").value() == 0.0);
  CHECK(Var(0.0).value() == 0.0);
  CHECK(Var(7).value() == 7.0);
  CHECK(Var(-1.5).value() == -1.5);
}

TEST_CASE("Var rejects text that is not an initial value") {
  for (const char *Bad : {"abc", "", "1.5x", "nan", "1e999", "- inf", "-1e999",
                          "NaN", "infx", "1e", "0x", "--1", "1 2"}) {
    INFO(Bad);
    CHECK_THROWS_AS(Var(Bad), UserError);
  }
}

TEST_CASE("SymbolScalar is an empty handle until assigned") {
  SymbolScalar E;
  CHECK(E.empty());
  CHECK(E.node() == nullptr);
  CHECK(E.graph() == nullptr);
  Symbols S;
  CHECK_FALSE(S.m.empty());
}
