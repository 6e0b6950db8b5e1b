// Linear-attention gradients on the CPU: the reference backward against
// finite differences (custom inputs included), and the kernels' chunked
// algorithm (the model the GPU tests use) against the reference.
#include "Examples.h"

#include "attn/Pipeline.h"
#include "attn/reference/InputBinding.h"
#include "attn/reference/Linear.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace attn;
using reference::LinearGrads;
using reference::LinearInputs;
using reference::Tensor;

namespace {

dsl::LinearAttentionDef linearDef(const std::string &Name) {
  if (Name == "mamba2")
    return examples::mamba2();
  if (Name == "simple_gla")
    return examples::simpleGla();
  REQUIRE(Name == "retention_linear");
  return examples::retentionLinear();
}

struct Problem {
  LinearInputs In;
  Tensor DO;
  std::optional<Tensor> DFinal;
};

Problem randomProblem(const CompiledDefinition &C, uint64_t Seed, int64_t B,
                      int64_t H, int64_t Hq, int64_t Hk, int64_t T, int64_t D,
                      int64_t DV, bool State, bool DFinal) {
  std::mt19937_64 Rng(Seed);
  Problem P;
  P.In.Q = Tensor::normal({B, Hq, T, D}, Rng);
  P.In.K = Tensor::normal({B, Hk, T, D}, Rng);
  P.In.V = Tensor::normal({B, H, T, DV}, Rng);
  P.In.Decay = Tensor::uniform({B, H, T}, Rng, -1.0, 0.0);
  P.In.Inputs = reference::sampleInputs(*C.Graph, Rng, B, H, T, T);
  if (State)
    P.In.InitialState = Tensor::normal({B, H, D, DV}, Rng);
  P.DO = Tensor::normal({B, H, T, DV}, Rng);
  if (DFinal)
    P.DFinal = Tensor::normal({B, H, D, DV}, Rng);
  return P;
}

/// L = Σ O ⊙ DO + Σ S_T ⊙ DFinal, by the token recurrence.
double loss(const CompiledDefinition &C, const Problem &P) {
  reference::LinearOutputs O = reference::linearRecurrent(C, P.In);
  double L = 0;
  for (int64_t I = 0; I < O.O.numel(); ++I)
    L += O.O.Data[I] * P.DO.Data[I];
  if (P.DFinal)
    for (int64_t I = 0; I < O.FinalState.numel(); ++I)
      L += O.FinalState.Data[I] * P.DFinal->Data[I];
  return L;
}

/// Every element of \p X against a central difference of the loss.
void checkAgainstFD(const CompiledDefinition &C, Problem &P, Tensor &X,
                    const Tensor &Grad, const std::string &What) {
  REQUIRE(Grad.Shape == X.Shape);
  const double Step = 1e-5;
  for (int64_t I = 0; I < X.numel(); ++I) {
    double Saved = X.Data[I];
    X.Data[I] = Saved + Step;
    double Up = loss(C, P);
    X.Data[I] = Saved - Step;
    double Down = loss(C, P);
    X.Data[I] = Saved;
    double FD = (Up - Down) / (2 * Step);
    INFO(What << "[" << I << "]: analytic " << Grad.Data[I] << ", finite "
              << "difference " << FD);
    CHECK(std::fabs(Grad.Data[I] - FD) <= 1e-6 * (1 + std::fabs(FD)));
  }
}

double maxError(const Tensor &A, const Tensor &B) {
  REQUIRE(A.Shape == B.Shape);
  return reference::maxMixedError(A, B);
}

double maxGradError(const LinearGrads &A, const LinearGrads &B) {
  double E = std::max({maxError(A.DQ, B.DQ), maxError(A.DK, B.DK),
                       maxError(A.DV, B.DV), maxError(A.DDecay, B.DDecay)});
  REQUIRE(A.DInitialState.has_value() == B.DInitialState.has_value());
  if (A.DInitialState)
    E = std::max(E, maxError(*A.DInitialState, *B.DInitialState));
  for (const auto &[Name, T] : A.DInputs)
    E = std::max(E, maxError(T, B.DInputs.at(Name)));
  return E;
}

} // namespace

TEST_CASE("reference gradients match finite differences", "[linear]") {
  std::string Name = GENERATE("mamba2", "simple_gla", "retention_linear");
  bool State = GENERATE(false, true);
  CompiledDefinition C = compile(linearDef(Name));
  // Two value heads sharing one q head (the seeds' ngroups), seven tokens.
  Problem P = randomProblem(C, 7 + State, 1, 2, 1, 2, 7, 3, 2, State, State);
  LinearGrads G = reference::linearBackward(C, P.In, P.DO, P.DFinal);
  INFO(Name << (State ? " with" : " without") << " initial state");
  checkAgainstFD(C, P, P.In.Q, G.DQ, "dq");
  checkAgainstFD(C, P, P.In.K, G.DK, "dk");
  checkAgainstFD(C, P, P.In.V, G.DV, "dv");
  checkAgainstFD(C, P, P.In.Decay, G.DDecay, "ddecay");
  if (State)
    checkAgainstFD(C, P, *P.In.InitialState, *G.DInitialState,
                   "dinitial_state");
  for (auto &[Input, Value] : P.In.Inputs)
    checkAgainstFD(C, P, Value, G.DInputs.at(Input), "d" + Input);
  if (Name == "mamba2") {
    // The custom inputs carry the decay: their gradients cannot be zero.
    double Sum = 0;
    for (double X : G.DInputs.at("A").Data)
      Sum += std::fabs(X);
    CHECK(Sum > 0);
  }
}

TEST_CASE("the decay gradient is zero where decay_mod ignores the decay",
          "[linear]") {
  CompiledDefinition C = compile(examples::mamba2());
  Problem P = randomProblem(C, 3, 1, 1, 1, 1, 5, 2, 2, false, false);
  LinearGrads G = reference::linearBackward(C, P.In, P.DO, P.DFinal);
  for (double X : G.DDecay.Data)
    CHECK(X == 0.0);
}

TEST_CASE("reference gradients do not depend on the thread count",
          "[linear]") {
  CompiledDefinition C = compile(examples::simpleGla());
  // Six (batch, head) pairs: 4 workers leave two with one pair, 16 are
  // capped at six.
  Problem P = randomProblem(C, 11, 2, 3, 3, 3, 5, 3, 2, true, true);
  LinearGrads One = reference::linearBackward(C, P.In, P.DO, P.DFinal, 1);
  for (unsigned Threads : {2u, 4u, 16u}) {
    INFO(Threads << " threads");
    LinearGrads G = reference::linearBackward(C, P.In, P.DO, P.DFinal, Threads);
    CHECK(G.DQ.Data == One.DQ.Data);
    CHECK(G.DK.Data == One.DK.Data);
    CHECK(G.DV.Data == One.DV.Data);
    CHECK(G.DDecay.Data == One.DDecay.Data);
    REQUIRE(G.DInitialState);
    CHECK(G.DInitialState->Data == One.DInitialState->Data);
  }
}

TEST_CASE("the kernels' chunked algorithm equals the reference", "[linear]") {
  std::string Name = GENERATE("mamba2", "simple_gla", "retention_linear");
  int64_t T = GENERATE(1, 5, 9);
  int64_t Chunk = GENERATE(1, 3, 4, 64);
  bool State = GENERATE(false, true);
  CompiledDefinition C = compile(linearDef(Name));
  Problem P =
      randomProblem(C, 11 + T * 7 + Chunk, 2, 2, 2, 1, T, 4, 3, State, State);
  INFO(Name << " T " << T << " chunk " << Chunk << " state " << State);
  auto Exact = [](double X) { return X; };
  reference::LinearOutputs Want = reference::linearRecurrent(C, P.In);
  reference::LinearOutputs Got =
      reference::linearChunkedModel(C, P.In, Chunk, Exact, 2);
  CHECK(maxError(Got.O, Want.O) < 1e-10);
  CHECK(maxError(Got.FinalState, Want.FinalState) < 1e-10);
  LinearGrads GW = reference::linearBackward(C, P.In, P.DO, P.DFinal);
  LinearGrads GG = reference::linearChunkedModelBackward(C, P.In, P.DO,
                                                         P.DFinal, Chunk, Exact,
                                                         2);
  CHECK(maxGradError(GG, GW) < 1e-9);
}

TEST_CASE("the rounded model differs from the exact one by rounding",
          "[linear]") {
  CompiledDefinition C = compile(examples::simpleGla());
  Problem P = randomProblem(C, 5, 1, 2, 2, 2, 40, 8, 8, true, true);
  // Round to 8 significant bits (bf16's precision).
  auto Round = [](double X) {
    int E;
    double M = std::frexp(X, &E);
    return std::ldexp(std::nearbyint(M * 256) / 256, E);
  };
  reference::LinearOutputs Exact = reference::linearRecurrent(C, P.In);
  reference::LinearOutputs Plain =
      reference::linearChunkedModel(C, P.In, 16, Round);
  double E = maxError(Plain.O, Exact.O);
  CHECK(E > 1e-5);
  CHECK(E < 0.1);
  LinearGrads GE = reference::linearBackward(C, P.In, P.DO, P.DFinal);
  LinearGrads GP = reference::linearChunkedModelBackward(C, P.In, P.DO,
                                                         P.DFinal, 16, Round);
  double EG = maxGradError(GP, GE);
  CHECK(EG > 1e-5);
  CHECK(EG < 0.1);
}

TEST_CASE("linear gradients reject mismatched shapes", "[linear]") {
  CompiledDefinition C = compile(examples::simpleGla());
  Problem P = randomProblem(C, 1, 1, 1, 1, 1, 4, 2, 2, false, false);
  Tensor BadDO({1, 1, 3, 2});
  CHECK_THROWS_WITH(reference::linearBackward(C, P.In, BadDO, std::nullopt),
                    Catch::Contains("dout must be [1, 1, 4, 2]"));
  Tensor BadFinal({1, 1, 2, 3});
  CHECK_THROWS_WITH(reference::linearBackward(C, P.In, P.DO, BadFinal),
                    Catch::Contains("final state's gradient must be"));
  CHECK_THROWS_WITH(reference::linearChunkedModel(C, P.In, 0,
                                                  [](double X) { return X; }),
                    Catch::Contains("chunk size must be at least 1"));
}
