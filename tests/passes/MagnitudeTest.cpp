// Magnitude bounds: which gradient factors the backward multiplies by a dS
// of 0 without a guard (attn/analysis/Magnitude.h).
#include "attn/analysis/Magnitude.h"
#include "attn/ir/Graph.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

using namespace attn;
using analysis::isProvablyFinite;
using analysis::magnitudeBound;
using ir::Node;
using ir::NodeKind;
using ir::ParamKind;
using ir::Space;
using ir::Type;

namespace {

struct Fixture {
  ir::Graph G;
  const Node *S = G.param(ParamKind::Score, "score", Type::F32, Space::Tile);
  const Node *In = G.param(ParamKind::Input, "slope", Type::F32, Space::Head);
  const Node *Q = G.param(ParamKind::Index, "q_idx", Type::I32, Space::Row);
  const Node *K = G.param(ParamKind::Index, "kv_idx", Type::I32, Space::Col);
  const Node *Dist = G.binary(NodeKind::Sub, K, Q); // i32 tile
  const Node *c(double V) { return G.constant(V); }
};

constexpr double Inf = std::numeric_limits<double>::infinity();

} // namespace

TEST_CASE("magnitude: integers, booleans and constants are bounded",
          "[passes][magnitude]") {
  Fixture F;
  CHECK(magnitudeBound(F.Dist) == 2147483648.0);
  CHECK(magnitudeBound(F.G.binary(NodeKind::Eq, F.K, F.Q)) == 1.0);
  CHECK(magnitudeBound(F.c(-3.5)) == 3.5);
  CHECK(magnitudeBound(F.c(Inf)) == Inf);
  CHECK(magnitudeBound(F.c(std::nan(""))) == Inf);
  // A distance as a float, times 1: ALiBi's slope gradient.
  const Node *D = F.G.binary(NodeKind::Mul, F.Dist, F.c(1.0));
  CHECK(isProvablyFinite(D));
  // A bias on the diagonal: select(kv == q, 1, 0).
  CHECK(isProvablyFinite(
      F.G.select(F.G.binary(NodeKind::Eq, F.K, F.Q), F.c(1.0), F.c(0.0))));
  CHECK(magnitudeBound(F.G.unary(NodeKind::Neg, D)) == 2147483648.0);
  CHECK(magnitudeBound(F.G.binary(NodeKind::Max, D, F.c(-5e9))) == 5e9);
}

TEST_CASE("magnitude: data, poles and overflow are unbounded",
          "[passes][magnitude]") {
  Fixture F;
  const Node *D = F.G.binary(NodeKind::Mul, F.Dist, F.c(1.0));
  CHECK_FALSE(isProvablyFinite(F.S));
  CHECK_FALSE(isProvablyFinite(F.In));
  CHECK_FALSE(isProvablyFinite(F.G.binary(NodeKind::Mul, F.In, D)));
  // 1 / distance is inf on the diagonal; log of a distance NaN above it.
  CHECK_FALSE(isProvablyFinite(F.G.binary(NodeKind::Div, F.c(1.0), D)));
  CHECK_FALSE(isProvablyFinite(F.G.unary(NodeKind::Log, D)));
  CHECK_FALSE(isProvablyFinite(F.G.unary(NodeKind::Sqrt, D)));
  // A product of three distances may pass FLT_MAX (2^93 < 3.4e38 < 2^124).
  const Node *D2 = F.G.binary(NodeKind::Mul, D, D);
  CHECK(isProvablyFinite(D2));
  CHECK(isProvablyFinite(F.G.binary(NodeKind::Mul, D2, D)));
  const Node *D4 = F.G.binary(NodeKind::Mul, D2, D2);
  CHECK(isProvablyFinite(D4));
  CHECK_FALSE(isProvablyFinite(F.G.binary(NodeKind::Mul, D4, D2)));
  // exp of a distance overflows; exp of a bounded tanh does not.
  CHECK_FALSE(isProvablyFinite(F.G.unary(NodeKind::Exp, D)));
  const Node *T = F.G.unary(NodeKind::Tanh, D);
  CHECK(magnitudeBound(T) == 1.0);
  CHECK(magnitudeBound(F.G.unary(NodeKind::Exp, T)) == std::exp(1.0));
  // tanh of data is NaN for a NaN score.
  CHECK_FALSE(isProvablyFinite(F.G.unary(NodeKind::Tanh, F.S)));
  // A select is as bounded as its worse branch.
  CHECK_FALSE(isProvablyFinite(F.G.select(F.G.binary(NodeKind::Ge, F.Q, F.K),
                                          F.c(1.0), F.S)));
}
