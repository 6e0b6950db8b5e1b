// The reference over packed variable-length batches: each sequence is the
// bottom rows of a square dense call (FlashAttention's bottom-right rule),
// sequences do not see each other, and empty ones work.
#include "TestDefs.h"

#include "Examples.h"
#include "attn/Error.h"
#include "attn/reference/InputBinding.h"
#include "attn/reference/Varlen.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace attn;
using reference::Tensor;

namespace {

// Six sequences: keys past the queries (shift 4), no queries, length 1,
// square, more queries than keys (shift -2), and queries without keys.
const std::vector<int64_t> CuQ = {0, 3, 3, 4, 9, 13, 15};
const std::vector<int64_t> CuKv = {0, 7, 11, 12, 17, 19, 19};
constexpr int64_t H = 4, Hkv = 2, D = 8;

reference::VarlenInputs randomVarlen(const CompiledDefinition &C,
                                     std::mt19937_64 &Rng) {
  reference::VarlenInputs In;
  In.Q = Tensor::normal({CuQ.back(), H, D}, Rng);
  In.K = Tensor::normal({CuKv.back(), Hkv, D}, Rng);
  In.V = Tensor::normal({CuKv.back(), Hkv, D}, Rng);
  In.CuSeqlensQ = CuQ;
  In.CuSeqlensKv = CuKv;
  In.Inputs = reference::sampleInputs(*C.Graph, Rng, 1, H, 1, 1);
  return In;
}

/// Sequence \p B as a square dense call: Skv query rows, the last Sq of
/// them the sequence's queries (the others random), with dout zero on the
/// others so that they add nothing to any gradient.
struct Square {
  reference::AttentionInputs In;
  Tensor DO;
  int64_t Shift;
};

Square squareOf(const reference::VarlenInputs &V, const Tensor &DO, size_t B,
                std::mt19937_64 &Rng) {
  int64_t Q0 = CuQ[B], Sq = CuQ[B + 1] - Q0;
  int64_t K0 = CuKv[B], Skv = CuKv[B + 1] - K0;
  Square S;
  S.Shift = Skv - Sq;
  S.In.Q = Tensor::normal({1, H, Skv, D}, Rng);
  S.In.K = Tensor({1, Hkv, Skv, D});
  S.In.V = Tensor({1, Hkv, Skv, D});
  S.DO = Tensor({1, H, Skv, D});
  S.In.Inputs = V.Inputs;
  for (int64_t Hi = 0; Hi < H; ++Hi)
    for (int64_t X = 0; X < D; ++X) {
      for (int64_t I = 0; I < Sq; ++I)
        if (I + S.Shift >= 0) {
          S.In.Q.at({0, Hi, I + S.Shift, X}) = V.Q.at({Q0 + I, Hi, X});
          S.DO.at({0, Hi, I + S.Shift, X}) = DO.at({Q0 + I, Hi, X});
        }
      if (Hi < Hkv)
        for (int64_t J = 0; J < Skv; ++J) {
          S.In.K.at({0, Hi, J, X}) = V.K.at({K0 + J, Hi, X});
          S.In.V.at({0, Hi, J, X}) = V.V.at({K0 + J, Hi, X});
        }
    }
  return S;
}

void checkAgainstSquares(const dsl::AttentionDef &Def) {
  INFO("definition " << Def.name);
  CompiledDefinition C = compile(Def);
  std::mt19937_64 Rng(17);
  reference::VarlenInputs V = randomVarlen(C, Rng);
  Tensor DO = Tensor::normal({CuQ.back(), H, D}, Rng);
  reference::AttentionOutputs Out = reference::attentionVarlen(C, V, 4);
  reference::AttentionGrads G = reference::attentionVarlenBackward(C, V, DO);
  std::map<std::string, Tensor> InputGrads;
  for (size_t B = 0; B + 1 < CuQ.size(); ++B) {
    INFO("sequence " << B);
    int64_t Q0 = CuQ[B], Sq = CuQ[B + 1] - Q0;
    int64_t K0 = CuKv[B], Skv = CuKv[B + 1] - K0;
    if (Skv == 0) {
      // Queries without keys: fully masked rows, zero gradients.
      for (int64_t I = 0; I < Sq; ++I)
        for (int64_t Hi = 0; Hi < H; ++Hi) {
          for (int64_t X = 0; X < D; ++X) {
            CHECK(Out.O.at({Q0 + I, Hi, X}) == 0.0);
            CHECK(G.DQ.at({Q0 + I, Hi, X}) == 0.0);
          }
          CHECK(Out.Finals.at("lse").at({Hi, Q0 + I}) == -INFINITY);
        }
      continue;
    }
    Square S = squareOf(V, DO, B, Rng);
    reference::AttentionOutputs SO = reference::attentionOnline(C, S.In, 4);
    reference::AttentionGrads SG = reference::attentionBackward(C, S.In, S.DO);
    for (int64_t I = 0; I < Sq; ++I)
      for (int64_t Hi = 0; Hi < H; ++Hi) {
        INFO("query " << I << " head " << Hi);
        int64_t R = I + S.Shift;
        double Lse = Out.Finals.at("lse").at({Hi, Q0 + I});
        if (R < 0) {
          // q_idx < 0: a causal mask keeps no key.
          CHECK(Lse == -INFINITY);
          for (int64_t X = 0; X < D; ++X)
            CHECK(Out.O.at({Q0 + I, Hi, X}) == 0.0);
          continue;
        }
        CHECK(Lse == Approx(SO.Finals.at("lse").at({0, Hi, R})).margin(1e-12));
        for (int64_t X = 0; X < D; ++X) {
          CHECK(Out.O.at({Q0 + I, Hi, X}) ==
                Approx(SO.O.at({0, Hi, R, X})).margin(1e-12));
          CHECK(G.DQ.at({Q0 + I, Hi, X}) ==
                Approx(SG.DQ.at({0, Hi, R, X})).margin(1e-12));
        }
      }
    for (int64_t J = 0; J < Skv; ++J)
      for (int64_t Hi = 0; Hi < Hkv; ++Hi)
        for (int64_t X = 0; X < D; ++X) {
          CHECK(G.DK.at({K0 + J, Hi, X}) ==
                Approx(SG.DK.at({0, Hi, J, X})).margin(1e-12));
          CHECK(G.DV.at({K0 + J, Hi, X}) ==
                Approx(SG.DV.at({0, Hi, J, X})).margin(1e-12));
        }
    for (auto &[Name, T] : SG.DInputs) {
      auto [It, New] = InputGrads.try_emplace(Name, T);
      if (!New)
        for (int64_t I = 0; I < T.numel(); ++I)
          It->second.Data[I] += T.Data[I];
    }
  }
  REQUIRE(G.DInputs.size() == InputGrads.size());
  for (auto &[Name, T] : InputGrads) {
    INFO("input gradient " << Name);
    for (int64_t I = 0; I < T.numel(); ++I)
      CHECK(G.DInputs.at(Name).Data[I] == Approx(T.Data[I]).margin(1e-10));
  }
}

} // namespace

TEST_CASE("varlen reference: each sequence is the bottom rows of a square "
          "call (causal)",
          "[reference][varlen]") {
  checkAgainstSquares(examples::mha());
}

TEST_CASE("varlen reference: score_mod sees the shifted q_idx (ALiBi with "
          "per-head inputs and their gradients)",
          "[reference][varlen]") {
  checkAgainstSquares(examples::alibiLearnable());
}

TEST_CASE("varlen reference: sequences do not see each other",
          "[reference][varlen]") {
  CompiledDefinition C = compile(examples::mha());
  std::mt19937_64 Rng(5);
  reference::VarlenInputs V = randomVarlen(C, Rng);
  reference::AttentionOutputs A = reference::attentionVarlen(C, V, 0);
  // New keys and values for sequence 3 (tokens 12..16) only.
  for (int64_t J = CuKv[3]; J < CuKv[4]; ++J)
    for (int64_t Hi = 0; Hi < Hkv; ++Hi)
      for (int64_t X = 0; X < D; ++X) {
        V.K.at({J, Hi, X}) += 1.0;
        V.V.at({J, Hi, X}) -= 2.0;
      }
  reference::AttentionOutputs B = reference::attentionVarlen(C, V, 0);
  for (int64_t T = 0; T < CuQ.back(); ++T)
    for (int64_t Hi = 0; Hi < H; ++Hi) {
      bool Mine = T >= CuQ[3] && T < CuQ[4];
      INFO("token " << T << " head " << Hi);
      CHECK((A.O.at({T, Hi, 0}) != B.O.at({T, Hi, 0})) == Mine);
    }
}

TEST_CASE("varlen reference: bad batches are refused", "[reference][varlen]") {
  CompiledDefinition C = compile(examples::mha());
  std::mt19937_64 Rng(1);
  reference::VarlenInputs V = randomVarlen(C, Rng);
  SECTION("start") {
    V.CuSeqlensQ[0] = 1;
    CHECK_THROWS_WITH(reference::attentionVarlen(C, V, 0),
                      "reference: cu_seqlens_q must start at 0, got 1");
  }
  SECTION("decreasing") {
    V.CuSeqlensKv[2] = 6;
    CHECK_THROWS_WITH(reference::attentionVarlen(C, V, 0),
                      "reference: cu_seqlens_kv must not decrease, got 6 "
                      "after 7 at entry 2");
  }
  SECTION("past the tokens") {
    V.CuSeqlensQ.back() = 16;
    CHECK_THROWS_WITH(reference::attentionVarlen(C, V, 0),
                      "reference: cu_seqlens_q ends at 16, past the 15 tokens");
  }
  SECTION("lengths") {
    V.CuSeqlensKv.pop_back();
    CHECK_THROWS_WITH(reference::attentionVarlen(C, V, 0),
                      "reference: cu_seqlens_q and cu_seqlens_kv must have "
                      "the same B + 1 >= 2 entries, got 7 and 6");
  }
}
