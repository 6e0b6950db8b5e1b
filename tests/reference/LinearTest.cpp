// Linear attention: chunked == recurrent, state, GQA, hand-computed cases.
#include "Examples.h"

#include "attn/Pipeline.h"
#include "attn/reference/InputBinding.h"
#include "attn/reference/Linear.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace attn;
using reference::LinearInputs;
using reference::LinearOutputs;
using reference::Tensor;

namespace {

const dsl::LinearAttentionDef &linearDef(const std::string &Name) {
  static const dsl::LinearAttentionDef Defs[] = {
      examples::mamba2(), examples::simpleGla(), examples::retentionLinear()};
  for (const dsl::LinearAttentionDef &D : Defs)
    if (D.name == Name)
      return D;
  FAIL("no linear example " << Name);
  return Defs[0];
}

LinearInputs randomLinear(const CompiledDefinition &C, std::mt19937_64 &Rng,
                          int64_t B, int64_t H, int64_t Hq, int64_t Hk,
                          int64_t T, int64_t D, int64_t DV, bool State) {
  LinearInputs In;
  In.Q = Tensor::normal({B, Hq, T, D}, Rng);
  In.K = Tensor::normal({B, Hk, T, D}, Rng);
  In.V = Tensor::normal({B, H, T, DV}, Rng);
  In.Decay = Tensor::uniform({B, H, T}, Rng, -1.0, 0.0);
  In.Inputs = reference::sampleInputs(*C.Graph, Rng, B, H, T, T);
  if (State)
    In.InitialState = Tensor::normal({B, H, D, DV}, Rng);
  return In;
}

double error(const LinearOutputs &A, const LinearOutputs &B) {
  return std::max(reference::maxMixedError(A.O, B.O),
                  reference::maxMixedError(A.FinalState, B.FinalState));
}

/// A tensor of \p Shape holding \p Data in row-major order.
Tensor tensor(std::vector<int64_t> Shape, std::vector<double> Data) {
  Tensor T(std::move(Shape));
  REQUIRE(T.Data.size() == Data.size());
  T.Data = std::move(Data);
  return T;
}

} // namespace

TEST_CASE("chunked equals recurrent for chunk sizes 1..T+1", "[linear]") {
  std::string Name = GENERATE("mamba2", "simple_gla", "retention_linear");
  bool State = GENERATE(false, true);
  INFO(Name << (State ? " with initial state" : ""));
  CompiledDefinition C = compile(linearDef(Name));
  std::mt19937_64 Rng(41);
  const int64_t T = 9;
  LinearInputs In = randomLinear(C, Rng, 2, 2, 2, 2, T, 3, 4, State);
  LinearOutputs Rec = reference::linearRecurrent(C, In);
  for (int64_t Chunk = 1; Chunk <= T + 1; ++Chunk) {
    INFO("chunk " << Chunk);
    CHECK(error(reference::linearChunked(C, In, Chunk), Rec) < 1e-12);
  }
}

TEST_CASE("the initial state changes the output and is carried through",
          "[linear]") {
  CompiledDefinition C = compile(linearDef("simple_gla"));
  std::mt19937_64 Rng(43);
  LinearInputs With = randomLinear(C, Rng, 1, 2, 2, 2, 5, 3, 2, true);
  LinearInputs Without = With;
  Without.InitialState.reset();
  LinearOutputs A = reference::linearRecurrent(C, With);
  LinearOutputs B = reference::linearRecurrent(C, Without);
  CHECK(reference::maxMixedError(A.O, B.O) > 1e-3);
  // Linearity in the state: the difference is exp(G_t) q_t S0, which decays
  // but is still there at the end.
  CHECK(reference::maxMixedError(A.FinalState, B.FinalState) > 1e-6);
}

TEST_CASE("GQA heads: one q head and fewer k heads serve four v heads",
          "[linear]") {
  std::string Name = GENERATE("mamba2", "simple_gla", "retention_linear");
  int64_t Hk = GENERATE(1, 2, 4);
  INFO(Name << " hk " << Hk);
  CompiledDefinition C = compile(linearDef(Name));
  std::mt19937_64 Rng(47);
  LinearInputs In = randomLinear(C, Rng, 1, 4, 1, Hk, 7, 3, 2, true);
  LinearOutputs Rec = reference::linearRecurrent(C, In);
  for (int64_t Chunk : {1, 2, 3, 7, 8})
    CHECK(error(reference::linearChunked(C, In, Chunk), Rec) < 1e-12);
  // Heads share q and k but not v or the decay, so outputs differ by head.
  CHECK(Rec.O.at({0, 0, 6, 0}) != Rec.O.at({0, 3, 6, 0}));
  // With Hk = 1 the single k head is read for every v head: expanding k to
  // four identical heads gives the same result.
  if (Hk == 1) {
    LinearInputs Wide = In;
    Wide.K = Tensor({1, 4, 7, 3});
    for (int64_t H = 0; H < 4; ++H)
      for (int64_t T = 0; T < 7; ++T)
        for (int64_t X = 0; X < 3; ++X)
          Wide.K.at({0, H, T, X}) = In.K.at({0, 0, T, X});
    CHECK(reference::maxMixedError(reference::linearRecurrent(C, Wide).O,
                                   Rec.O) == 0.0);
  }
}

TEST_CASE("simple_gla on T=2, D=1, DV=1 equals the closed form", "[linear]") {
  // q = (2, 3), k = (0.5, -1), v = (4, 5), g = (log 1/2, log 1/4), D = 1 so
  // q_mod's 1/sqrt(D) is 1:
  //   S1 = 1/2·S0 + 0.5·4,  o1 = 2·S1
  //   S2 = 1/4·S1 + (−1)·5, o2 = 3·S2
  CompiledDefinition C = compile(linearDef("simple_gla"));
  LinearInputs In;
  In.Q = tensor({1, 1, 2, 1}, {2, 3});
  In.K = tensor({1, 1, 2, 1}, {0.5, -1});
  In.V = tensor({1, 1, 2, 1}, {4, 5});
  In.Decay = tensor({1, 1, 2}, {std::log(0.5), std::log(0.25)});
  struct Expect {
    std::optional<double> S0;
    double O1, O2, S2;
  };
  for (Expect E : {Expect{std::nullopt, 4.0, -13.5, -4.5},
                   Expect{10.0, 14.0, -9.75, -3.25}}) {
    if (E.S0)
      In.InitialState = tensor({1, 1, 1, 1}, {*E.S0});
    std::vector<LinearOutputs> Outs = {reference::linearRecurrent(C, In)};
    for (int64_t Chunk : {1, 2, 3})
      Outs.push_back(reference::linearChunked(C, In, Chunk));
    for (const LinearOutputs &Out : Outs) {
      CHECK(Out.O.at({0, 0, 0, 0}) == Approx(E.O1).epsilon(1e-14));
      CHECK(Out.O.at({0, 0, 1, 0}) == Approx(E.O2).epsilon(1e-14));
      CHECK(Out.FinalState.at({0, 0, 0, 0}) == Approx(E.S2).epsilon(1e-14));
    }
  }
}

TEST_CASE("mamba2 on T=2, D=1, DV=1 equals the closed form", "[linear]") {
  // g_t = A·dt_t and v_t scaled by dt_t; the decay tensor is not read.
  CompiledDefinition C = compile(linearDef("mamba2"));
  const double A = -0.7, Dt0 = 0.5, Dt1 = 0.25;
  LinearInputs In;
  In.Q = tensor({1, 1, 2, 1}, {1.5, -2});
  In.K = tensor({1, 1, 2, 1}, {3, 0.5});
  In.V = tensor({1, 1, 2, 1}, {2, -4});
  In.Decay = tensor({1, 1, 2}, {123.0, 456.0}); // would blow up if read
  In.Inputs["A"] = tensor({1}, {A});
  In.Inputs["dt"] = tensor({1, 1, 2}, {Dt0, Dt1});
  double S1 = 3 * (2 * Dt0);
  double S2 = std::exp(A * Dt1) * S1 + 0.5 * (-4 * Dt1);
  std::vector<LinearOutputs> Outs = {reference::linearRecurrent(C, In)};
  for (int64_t Chunk : {1, 2})
    Outs.push_back(reference::linearChunked(C, In, Chunk));
  for (const LinearOutputs &Out : Outs) {
    CHECK(Out.O.at({0, 0, 0, 0}) == Approx(1.5 * S1).epsilon(1e-14));
    CHECK(Out.O.at({0, 0, 1, 0}) == Approx(-2 * S2).epsilon(1e-14));
    CHECK(Out.FinalState.at({0, 0, 0, 0}) == Approx(S2).epsilon(1e-14));
  }
  // With an initial state the first decay exp(A·dt0) shows up too.
  In.InitialState = tensor({1, 1, 1, 1}, {2.0});
  double S1s = std::exp(A * Dt0) * 2.0 + S1;
  CHECK(reference::linearChunked(C, In, 2).O.at({0, 0, 0, 0}) ==
        Approx(1.5 * S1s).epsilon(1e-14));
}

TEST_CASE("retention_linear decays by gamma_h = 1 - 2^(-5-h)", "[linear]") {
  // T = 2, D = 1, two heads: o2 = q2·(gamma_h·k1·v1 + k2·v2) with S0 = 0.
  CompiledDefinition C = compile(linearDef("retention_linear"));
  LinearInputs In;
  In.Q = tensor({1, 2, 2, 1}, {1, 1, 1, 1});
  In.K = tensor({1, 2, 2, 1}, {1, 1, 1, 1});
  In.V = tensor({1, 2, 2, 1}, {1, 0, 1, 0});
  In.Decay = tensor({1, 2, 2}, {0, 0, 0, 0});
  LinearOutputs Out = reference::linearChunked(C, In, 2);
  for (int64_t H = 0; H < 2; ++H) {
    double Gamma = 1 - std::exp2(-5.0 - double(H));
    CHECK(Out.O.at({0, H, 1, 0}) == Approx(Gamma).epsilon(1e-14));
  }
}
