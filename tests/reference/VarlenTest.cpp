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

/// The packed call's dK and dV of keys [K0, K0 + Skv) equal the dense
/// call's (batch 0) of that sequence.
template <class Grads>
void checkKeyGrads(const Grads &G, const Grads &SG, int64_t K0, int64_t Skv) {
  for (int64_t J = 0; J < Skv; ++J)
    for (int64_t Hi = 0; Hi < Hkv; ++Hi)
      for (int64_t X = 0; X < D; ++X) {
        CHECK(G.DK.at({K0 + J, Hi, X}) == Approx(SG.DK.at({0, Hi, J, X})).margin(1e-12));
        CHECK(G.DV.at({K0 + J, Hi, X}) == Approx(SG.DV.at({0, Hi, J, X})).margin(1e-12));
      }
}

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
    checkKeyGrads(G, SG, K0, Skv);
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

namespace {

/// The document id of key position \p J of a sequence, at head \p Hi (runs
/// of 2 + Hi keys; the per-token form, Hi = -1, runs of 3).
double documentOf(int64_t J, int64_t Hi) {
  return J < 0 ? -1.0 : double(J / (Hi < 0 ? 3 : 2 + Hi));
}

/// Packed inputs of mha_document (per_row q_doc [H, Tq], per_key k_doc
/// [H, Tkv]) or mha_document_ids (per_query_token doc_q [Tq],
/// per_key_token doc_k [Tkv]): documents as runs over each sequence's keys,
/// a query taking the id of the key position the bottom-right rule aligns
/// it with (q_idx = row + Skv - Sq), as a packed batch of documents has.
reference::VarlenInputs documentVarlen(bool PerToken, std::mt19937_64 &Rng) {
  reference::VarlenInputs In;
  In.Q = Tensor::normal({CuQ.back(), H, D}, Rng);
  In.K = Tensor::normal({CuKv.back(), Hkv, D}, Rng);
  In.V = Tensor::normal({CuKv.back(), Hkv, D}, Rng);
  In.CuSeqlensQ = CuQ;
  In.CuSeqlensKv = CuKv;
  Tensor Qd = PerToken ? Tensor({CuQ.back()}) : Tensor({H, CuQ.back()});
  Tensor Kd = PerToken ? Tensor({CuKv.back()}) : Tensor({H, CuKv.back()});
  for (size_t B = 0; B + 1 < CuQ.size(); ++B) {
    int64_t Sq = CuQ[B + 1] - CuQ[B], Skv = CuKv[B + 1] - CuKv[B];
    for (int64_t Hi = PerToken ? -1 : 0; Hi < (PerToken ? 0 : H); ++Hi) {
      for (int64_t I = 0; I < Sq; ++I) {
        double Id = documentOf(I + Skv - Sq, Hi);
        (PerToken ? Qd.at({CuQ[B] + I}) : Qd.at({Hi, CuQ[B] + I})) = Id;
      }
      for (int64_t J = 0; J < Skv; ++J) {
        double Id = documentOf(J, Hi);
        (PerToken ? Kd.at({CuKv[B] + J}) : Kd.at({Hi, CuKv[B] + J})) = Id;
      }
    }
  }
  In.Inputs[PerToken ? "doc_q" : "q_doc"] = Qd;
  In.Inputs[PerToken ? "doc_k" : "k_doc"] = Kd;
  return In;
}

/// Tokens [T0, T0 + S) of packed [T, heads, X] as dense [1, heads, S, X].
Tensor denseTokens(const Tensor &P, int64_t T0, int64_t S) {
  Tensor Out({1, P.dim(1), S, P.dim(2)});
  for (int64_t I = 0; I < S; ++I)
    for (int64_t Hi = 0; Hi < P.dim(1); ++Hi)
      for (int64_t X = 0; X < P.dim(2); ++X)
        Out.at({0, Hi, I, X}) = P.at({T0 + I, Hi, X});
  return Out;
}

/// A packed call of \p Def (documentVarlen's inputs) equals, sequence by
/// sequence, a dense call of that sequence whose per-row, per-key and
/// per-token inputs are its tokens' values ([1, H, S] and [1, S]), with
/// q_idx shifted bottom-right: o, lse, dq, dk and dv.
void checkDocumentVarlen(const dsl::AttentionDef &Def, bool PerToken) {
  INFO("definition " << Def.name);
  CompiledDefinition C = compile(Def);
  std::mt19937_64 Rng(23);
  reference::VarlenInputs V = documentVarlen(PerToken, Rng);
  Tensor DO = Tensor::normal({CuQ.back(), H, D}, Rng);
  reference::AttentionOutputs Out = reference::attentionVarlen(C, V, 4);
  reference::AttentionGrads G = reference::attentionVarlenBackward(C, V, DO);
  const std::string QName = PerToken ? "doc_q" : "q_doc";
  const std::string KName = PerToken ? "doc_k" : "k_doc";
  int64_t Kept = 0, Masked = 0;
  for (size_t B = 0; B + 1 < CuQ.size(); ++B) {
    INFO("sequence " << B);
    int64_t Q0 = CuQ[B], Sq = CuQ[B + 1] - Q0;
    int64_t K0 = CuKv[B], Skv = CuKv[B + 1] - K0;
    if (Sq == 0 || Skv == 0)
      continue; // checkAgainstSquares covers sequences without keys
    reference::AttentionInputs Dense;
    Dense.Q = denseTokens(V.Q, Q0, Sq);
    Dense.K = denseTokens(V.K, K0, Skv);
    Dense.V = denseTokens(V.V, K0, Skv);
    Dense.QIndexOffset = Skv - Sq;
    Dense.BatchIndexOffset = int64_t(B);
    Tensor Qd = PerToken ? Tensor({1, Sq}) : Tensor({1, H, Sq});
    Tensor Kd = PerToken ? Tensor({1, Skv}) : Tensor({1, H, Skv});
    for (int64_t Hi = 0; Hi < (PerToken ? 1 : H); ++Hi) {
      for (int64_t I = 0; I < Sq; ++I)
        (PerToken ? Qd.at({0, I}) : Qd.at({0, Hi, I})) =
            PerToken ? V.Inputs.at(QName).at({Q0 + I})
                     : V.Inputs.at(QName).at({Hi, Q0 + I});
      for (int64_t J = 0; J < Skv; ++J)
        (PerToken ? Kd.at({0, J}) : Kd.at({0, Hi, J})) =
            PerToken ? V.Inputs.at(KName).at({K0 + J})
                     : V.Inputs.at(KName).at({Hi, K0 + J});
    }
    Dense.Inputs[QName] = Qd;
    Dense.Inputs[KName] = Kd;
    Tensor DenseDO = denseTokens(DO, Q0, Sq);
    reference::AttentionOutputs SO = reference::attentionOnline(C, Dense, 4);
    reference::AttentionGrads SG = reference::attentionBackward(C, Dense, DenseDO);
    reference::MaskStats Stats = reference::attentionMaskStats(C, Dense);
    Kept += Stats.Elements - Stats.MaskedElements;
    Masked += Stats.MaskedElements;
    for (int64_t I = 0; I < Sq; ++I)
      for (int64_t Hi = 0; Hi < H; ++Hi) {
        INFO("query " << I << " head " << Hi);
        double Lse = Out.Finals.at("lse").at({Hi, Q0 + I});
        double Want = SO.Finals.at("lse").at({0, Hi, I});
        if (std::isinf(Want))
          CHECK(Lse == Want);
        else
          CHECK(Lse == Approx(Want).margin(1e-12));
        for (int64_t X = 0; X < D; ++X) {
          CHECK(Out.O.at({Q0 + I, Hi, X}) ==
                Approx(SO.O.at({0, Hi, I, X})).margin(1e-12));
          CHECK(G.DQ.at({Q0 + I, Hi, X}) ==
                Approx(SG.DQ.at({0, Hi, I, X})).margin(1e-12));
        }
      }
    checkKeyGrads(G, SG, K0, Skv);
  }
  // The documents both keep and mask keys: the check is not vacuous.
  CHECK(Kept > 0);
  CHECK(Masked > 0);
}

} // namespace

TEST_CASE("varlen reference: per-row and per-key inputs are read by token "
          "([H, total] slices per sequence, mha_document)",
          "[reference][varlen][inputs]") {
  checkDocumentVarlen(examples::mhaDocument(), /*PerToken=*/false);
}

TEST_CASE("varlen reference: int32 per-token inputs are read by token "
          "([total] slices per sequence, mha_document_ids)",
          "[reference][varlen][inputs]") {
  checkDocumentVarlen(examples::mhaDocumentIds(), /*PerToken=*/true);
}

TEST_CASE("varlen reference: a query row reads its token's input, not the "
          "one at its shifted q_idx",
          "[reference][varlen][inputs]") {
  // One sequence of 2 queries over 5 keys (shift 3): query 0's document is
  // its token's (id 7, kept with every key of id 7), whatever id the token
  // at q_idx = 3 holds.
  CompiledDefinition C = compile(examples::mhaDocumentIds());
  std::mt19937_64 Rng(3);
  reference::VarlenInputs V;
  V.Q = Tensor::normal({4, 1, D}, Rng);
  V.K = Tensor::normal({5, 1, D}, Rng);
  V.V = Tensor::normal({5, 1, D}, Rng);
  V.CuSeqlensQ = {0, 2};
  V.CuSeqlensKv = {0, 5};
  Tensor Dq({4}), Dk({5});
  Dq.Data = {7, 7, 1, 1}; // tokens 2 and 3 lie past the sequence
  Dk.Data = {7, 7, 1, 1, 1};
  V.Inputs["doc_q"] = Dq;
  V.Inputs["doc_k"] = Dk;
  reference::AttentionOutputs Out = reference::attentionVarlen(C, V, 0);
  // Query 0 (q_idx 3) keeps keys 0 and 1 (id 7, kv_idx <= 3); had it read
  // token 3's id (1) it would keep keys 2 and 3 instead.
  reference::AttentionInputs Dense;
  Dense.Q = denseTokens(V.Q, 0, 1);
  Dense.K = denseTokens(V.K, 0, 2);
  Dense.V = denseTokens(V.V, 0, 2);
  Dense.QIndexOffset = 1; // causal keeps both keys
  reference::AttentionOutputs Two = reference::attentionOnline(
      compile(examples::mha()), Dense, 0);
  for (int64_t X = 0; X < D; ++X)
    CHECK(Out.O.at({0, 0, X}) == Approx(Two.O.at({0, 0, 0, X})).margin(1e-12));
}

TEST_CASE("varlen reference: packed input shapes are checked",
          "[reference][varlen][inputs]") {
  CompiledDefinition C = compile(examples::mhaDocument());
  std::mt19937_64 Rng(2);
  reference::VarlenInputs V = documentVarlen(/*PerToken=*/false, Rng);
  V.Inputs["k_doc"] = Tensor({1, H, CuKv.back()});
  CHECK_THROWS_WITH(reference::attentionVarlen(C, V, 0),
                    "custom input 'k_doc' (per_key) must have shape [4, 19] "
                    "in a packed call, got [1, 4, 19]");
  V.Inputs.erase("k_doc");
  CHECK_THROWS_WITH(reference::attentionVarlen(C, V, 0),
                    "custom input 'k_doc' is declared but no value was "
                    "supplied");
}
