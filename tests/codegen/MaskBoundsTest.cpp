// The mask analysis (analysis/MaskBounds.h): the host evaluator's block
// classes against brute-force element evaluation with the IR's scalar
// semantics, on random tilings with ragged tails; exactness where the
// bounds decide (causal, windows, documents); reasons of the masks left to
// element evaluation.
#include "CodegenTestDefs.h"
#include "MaskTestEval.h"

#include "Examples.h"

#include "attn/Error.h"
#include "attn/analysis/MaskBounds.h"
#include "attn/ir/Eval.h"
#include "attn/ir/Walk.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/Casting.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>

using namespace attn;
using analysis::BlockClass;
using analysis::MaskAnalysis;
using analysis::MaskGrouping;
using dsl::SymbolScalar;
using test::Compiled;
using test::InputValues;
using test::maskAt;

namespace {

struct Tiling {
  int64_t Sq, Skv, BlockM, BlockN;
};

/// Runs \p Check on every block of \p T: the host class and the brute-force
/// counts of kept and masked elements of the block (rows and keys past the
/// ends excluded, as the kernels' classification ignores them).
void forEachBlock(
    const ir::Graph &G, const MaskAnalysis &A, const Tiling &T,
    const InputValues &In, int64_t B, int64_t H,
    const std::function<void(const analysis::MaskBox &, BlockClass, int64_t,
                             int64_t)> &Check) {
  for (int64_t Q0 = 0; Q0 < T.Sq; Q0 += T.BlockM)
    for (int64_t K0 = 0; K0 < T.Skv; K0 += T.BlockN) {
      analysis::MaskBox Box;
      Box.B = B;
      Box.H = H;
      Box.QLo = Q0;
      Box.QHi = std::min(Q0 + T.BlockM, T.Sq) - 1;
      Box.KvLo = K0;
      Box.KvHi = std::min(K0 + T.BlockN, T.Skv) - 1;
      for (const analysis::BoundedInput &I : A.Bounded) {
        const std::vector<double> &X = In.Arrays.at(I.Name);
        int64_t Lo = I.ByKey ? Box.KvLo : Box.QLo;
        int64_t Hi = I.ByKey ? Box.KvHi : Box.QHi;
        Box.Lo.push_back(*std::min_element(X.begin() + Lo, X.begin() + Hi + 1));
        Box.Hi.push_back(*std::max_element(X.begin() + Lo, X.begin() + Hi + 1));
      }
      for (const auto &[Name, X] : In.Values)
        Box.Exact[Name] = X;
      int64_t Kept = 0, Masked = 0;
      for (int64_t Q = Box.QLo; Q <= Box.QHi; ++Q)
        for (int64_t K = Box.KvLo; K <= Box.KvHi; ++K)
          (maskAt(G, A.Mask, In, B, H, Q, K, Box.HeadDim) ? Kept : Masked)++;
      Check(Box, analysis::classifyBox(A, Box), Kept, Masked);
    }
}

/// Never FULL with a masked element, never EMPTY with a kept one.
void checkSound(const ir::Graph &G, const MaskAnalysis &A, const Tiling &T,
                const InputValues &In, int64_t B = 0, int64_t H = 0) {
  forEachBlock(G, A, T, In, B, H,
               [&](const analysis::MaskBox &Box, BlockClass C, int64_t Kept,
                   int64_t Masked) {
                 INFO("block q " << Box.QLo << ".." << Box.QHi << " kv "
                                 << Box.KvLo << ".." << Box.KvHi << " of "
                                 << G.name());
                 if (C == BlockClass::Full)
                   CHECK(Masked == 0);
                 if (C == BlockClass::Empty)
                   CHECK(Kept == 0);
               });
}

/// Random tilings with ragged tails: lengths not multiples of the blocks.
std::vector<Tiling> randomTilings(std::mt19937_64 &Rng, int Count) {
  std::vector<Tiling> Out;
  const int64_t Blocks[] = {16, 32, 64, 128};
  std::uniform_int_distribution<int64_t> Len(1, 300), Pick(0, 3);
  for (int I = 0; I < Count; ++I)
    Out.push_back({Len(Rng), Len(Rng), Blocks[Pick(Rng)], Blocks[Pick(Rng)]});
  return Out;
}

/// Document ids: sorted runs of random lengths, or (Sorted false) shuffled.
std::vector<double> documentIds(std::mt19937_64 &Rng, int64_t S, bool Sorted) {
  std::vector<double> Ids(S);
  std::uniform_int_distribution<int> Run(1, 90);
  double Id = 0;
  for (int64_t I = 0; I < S;) {
    int64_t N = std::min<int64_t>(Run(Rng), S - I);
    for (int64_t J = 0; J < N; ++J)
      Ids[I + J] = Id;
    I += N;
    Id += 1;
  }
  if (!Sorted)
    std::shuffle(Ids.begin(), Ids.end(), Rng);
  return Ids;
}

dsl::AttentionDef slidingWindowOrPrefix() {
  dsl::AttentionDef D = examples::mhaPrefixLm();
  D.name = "window_or_prefix";
  D.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q, SymbolScalar kv,
                  const dsl::CustomInputs &in) {
    return ((q >= kv) & (q - kv < 64)) | (kv < in["prefix_len"]);
  };
  return D;
}

dsl::AttentionDef documentWindow() {
  dsl::AttentionDef D = examples::mhaDocument();
  D.name = "document_window";
  D.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q, SymbolScalar kv,
                  const dsl::CustomInputs &in) {
    return (q >= kv) & (q - kv < 100) & (in["q_doc"] == in["k_doc"]);
  };
  return D;
}

/// Every interval rule in one place: mul by a negative, div, abs, neg,
/// relu, min, max, select, not, and, or, every comparison, mixed i32/f32,
/// head_dim.
dsl::AttentionDef arithmeticMask() {
  return test::maskedSoftmax(
      "arithmetic_mask", [](SymbolScalar, SymbolScalar h, SymbolScalar q,
                            SymbolScalar kv, const dsl::CustomInputs &in) {
        SymbolScalar d = (q * -3 + kv * 2).abs();
        SymbolScalar r = (q / 7.0 - kv / 5).relu();
        SymbolScalar s = select(q > kv, -d, r * 10.0 + in["doc_q"]);
        return !((s.max(q - 50) < kv.min(in["doc_k"] * 100.0)) |
                 (d != (q - kv) * 0 + 40)) |
               ((h + 1) * 0.5 > in.head_dim() / 200.0) |
               ((kv * 1.0 + 3 <= q / 2) & (in["doc_q"] == in["doc_k"] + 1.0));
      });
}

} // namespace

TEST_CASE("mask analysis: the everyday masks are analysed", "[mask][bounds]") {
  for (const dsl::AttentionDef &D :
       {examples::mha(), examples::mhaPrefixLm(), examples::mhaSlidingWindow(),
        examples::mhaDocument(), slidingWindowOrPrefix(), documentWindow(),
        arithmeticMask()}) {
    Compiled C(D);
    INFO(D.name);
    CHECK(C.A.Analysed);
    CHECK(C.A.Reason.empty());
  }
  Compiled Doc(examples::mhaDocument());
  REQUIRE(Doc.A.Bounded.size() == 2);
  CHECK(Doc.A.Bounded[0].Name == "q_doc");
  CHECK_FALSE(Doc.A.Bounded[0].ByKey);
  CHECK(Doc.A.Bounded[1].Name == "k_doc");
  CHECK(Doc.A.Bounded[1].ByKey);
  CHECK(Doc.A.ReadsTensorInput);
  Compiled Prefix(examples::mhaPrefixLm());
  CHECK(Prefix.A.Grouping == MaskGrouping::Shared);
  CHECK(Prefix.A.ScalarInputs == std::vector<std::string>{"prefix_len"});
  CHECK_FALSE(Prefix.A.ReadsTensorInput);
  // Without a mask there is nothing to analyse.
  CHECK(analysis::analyzeMask(*compile(examples::reluAttn()).Graph).Mask ==
        nullptr);
}

TEST_CASE("mask analysis: masks without an interval rule say why",
          "[mask][bounds]") {
  Compiled Exp(test::expMask());
  CHECK_FALSE(Exp.A.Analysed);
  CHECK_THAT(Exp.A.Reason,
             Catch::Matchers::Contains("(exp) has no interval rule"));
  CHECK_THAT(Exp.A.Reason, Catch::Matchers::Contains("exp("));
  CHECK(Exp.A.Bounded.empty());
  CHECK_THROWS_AS(analysis::classifyBox(Exp.A, {}), InternalError);

  Compiled Full(test::fullInputMask());
  CHECK_FALSE(Full.A.Analysed);
  CHECK(Full.A.Reason ==
        "input 'keep' is full (one value per query and key): it has no "
        "per-block bound");
  CHECK(Full.A.Grouping == MaskGrouping::PerBatchHead);
}

TEST_CASE("mask analysis: sound against element evaluation on random tilings",
          "[mask][bounds]") {
  std::mt19937_64 Rng(17);
  std::vector<Tiling> Tilings = randomTilings(Rng, 12);
  Tilings.push_back({1, 1, 64, 64});
  Tilings.push_back({300, 17, 128, 16}); // fewer keys than queries
  for (const Tiling &T : Tilings) {
    INFO("tiling " << T.Sq << "x" << T.Skv << " blocks " << T.BlockM << "x"
                   << T.BlockN);
    InputValues In;
    for (bool Sorted : {true, false}) {
      // One id sequence seen from both sides (self-attention over a
      // packed batch), cut to each side's length.
      std::vector<double> Ids = documentIds(Rng, std::max(T.Sq, T.Skv), Sorted);
      In.Arrays["q_doc"] = std::vector<double>(Ids.begin(), Ids.begin() + T.Sq);
      In.Arrays["k_doc"] =
          std::vector<double>(Ids.begin(), Ids.begin() + T.Skv);
      // The test definitions' own names for them.
      In.Arrays["doc_q"] = In.Arrays["q_doc"];
      In.Arrays["doc_k"] = In.Arrays["k_doc"];
      for (double P : {0.0, 37.0, 200.5}) {
        In.Values["prefix_len"] = P;
        for (const dsl::AttentionDef &D :
             {examples::mha(), examples::mhaPrefixLm(),
              examples::mhaSlidingWindow(), examples::mhaDocument(),
              slidingWindowOrPrefix(), documentWindow()}) {
          Compiled C(D);
          checkSound(C.graph(), C.A, T, In);
        }
      }
      // Batch and head values (a GQA call's heads read their own values).
      for (int64_t H : {0, 1, 3}) {
        Compiled C(arithmeticMask());
        checkSound(C.graph(), C.A, T, In, 1, H);
        Compiled HM(test::headMask());
        checkSound(HM.graph(), HM.A, T, In, 0, H);
        Compiled BM(test::batchMask());
        checkSound(BM.graph(), BM.A, T, In, H, 0);
      }
    }
  }
}

TEST_CASE("mask analysis: exact where the bounds decide", "[mask][bounds]") {
  std::mt19937_64 Rng(23);
  for (const Tiling &T : randomTilings(Rng, 8)) {
    INFO("tiling " << T.Sq << "x" << T.Skv << " blocks " << T.BlockM << "x"
                   << T.BlockN);
    InputValues In;
    // Causal: FULL strictly below the diagonal, EMPTY strictly above.
    Compiled Causal(examples::mha());
    forEachBlock(
        Causal.graph(), Causal.A, T, In, 0, 0,
        [&](const analysis::MaskBox &Box, BlockClass C, int64_t, int64_t) {
          if (Box.QLo >= Box.KvHi)
            CHECK(C == BlockClass::Full);
          else if (Box.QHi < Box.KvLo)
            CHECK(C == BlockClass::Empty);
          else
            CHECK(C == BlockClass::Partial);
        });
    // Window and prefix-LM: the class is the brute-force one wherever a
    // block is all kept or all masked (the masks are monotone in q and kv).
    In.Values["prefix_len"] = 64;
    for (const dsl::AttentionDef &D :
         {examples::mhaSlidingWindow(), examples::mhaPrefixLm()}) {
      Compiled C(D);
      forEachBlock(C.graph(), C.A, T, In, 0, 0,
                   [&](const analysis::MaskBox &, BlockClass Cl, int64_t Kept,
                       int64_t Masked) {
                     CHECK(Cl == (Masked == 0 ? BlockClass::Full
                                  : Kept == 0 ? BlockClass::Empty
                                              : BlockClass::Partial));
                   });
    }
    // Documents with sorted ids: a block inside one document below the
    // diagonal is FULL; one whose rows and keys lie in different documents
    // is EMPTY.
    std::vector<double> Ids = documentIds(Rng, std::max(T.Sq, T.Skv), true);
    In.Arrays["q_doc"] = std::vector<double>(Ids.begin(), Ids.begin() + T.Sq);
    In.Arrays["k_doc"] = std::vector<double>(Ids.begin(), Ids.begin() + T.Skv);
    Compiled Doc(examples::mhaDocument());
    forEachBlock(
        Doc.graph(), Doc.A, T, In, 0, 0,
        [&](const analysis::MaskBox &Box, BlockClass C, int64_t, int64_t) {
          bool OneDoc = Box.Lo[0] == Box.Hi[0] && Box.Lo[1] == Box.Hi[1] &&
                        Box.Lo[0] == Box.Lo[1];
          bool Apart = Box.Hi[0] < Box.Lo[1] || Box.Hi[1] < Box.Lo[0];
          if (OneDoc && Box.QLo >= Box.KvHi)
            CHECK(C == BlockClass::Full);
          if (Apart || Box.QHi < Box.KvLo)
            CHECK(C == BlockClass::Empty);
        });
  }
}

TEST_CASE("mask analysis: non-finite bounds and a divisor through 0 are "
          "unknown",
          "[mask][bounds]") {
  Compiled Doc(examples::mhaDocument());
  analysis::MaskBox Box;
  Box.QLo = 10, Box.QHi = 20, Box.KvLo = 0, Box.KvHi = 5;
  const double NaN = std::numeric_limits<double>::quiet_NaN();
  const double Inf = std::numeric_limits<double>::infinity();
  Box.Lo = {1, 1};
  Box.Hi = {1, 1};
  CHECK(analysis::classifyBox(Doc.A, Box) == BlockClass::Full);
  Box.Lo = {NaN, 1}; // a block holding a NaN id
  Box.Hi = {NaN, 1};
  CHECK(analysis::classifyBox(Doc.A, Box) == BlockClass::Partial);
  Box.Lo = {Inf, 1};
  Box.Hi = {Inf, 1};
  CHECK(analysis::classifyBox(Doc.A, Box) == BlockClass::Partial);

  Compiled Div(test::maskedSoftmax(
      "div_mask", [](SymbolScalar, SymbolScalar, SymbolScalar q,
                     SymbolScalar kv) { return 100.0 / (q - kv) > 1.0; }));
  REQUIRE(Div.A.Analysed);
  analysis::MaskBox Across; // q - kv in [-5, 5]: may be 0
  Across.QLo = 0, Across.QHi = 5, Across.KvLo = 0, Across.KvHi = 5;
  CHECK(analysis::classifyBox(Div.A, Across) == BlockClass::Partial);
  analysis::MaskBox Below; // q - kv in [10, 20]: 100 / that in [5, 10]
  Below.QLo = 20, Below.QHi = 25, Below.KvLo = 5, Below.KvHi = 10;
  CHECK(analysis::classifyBox(Div.A, Below) == BlockClass::Full);
}

namespace {

/// floordiv and mod every way the interval rules meet them: i32 by a
/// runtime scalar of either sign (or 0), by negative and positive
/// constants, f32 by a scalar and by a per-row input (an interval divisor),
/// mixed i32/f32.
dsl::AttentionDef floorMask() {
  dsl::AttentionDef D = test::maskedSoftmax(
      "floor_mask", [](SymbolScalar, SymbolScalar, SymbolScalar q,
                       SymbolScalar kv, const dsl::CustomInputs &in) {
        SymbolScalar a = floordiv(q - 40, in["d"]) - floordiv(kv, -7);
        SymbolScalar m = mod(kv - q, in["d"]) + mod(q, 5) - mod(kv, -3);
        SymbolScalar f = floordiv(q * 0.25 - kv * 0.5, in["e"]);
        SymbolScalar g = mod(kv * 1.5 + in["e"], in["doc_q"]);
        return ((a <= 2) & (m > 1)) | ((f >= -3.0) & (g < 2.0)) |
               (floordiv(kv, 9) == floordiv(q, in["d"]) + 1);
      });
  D.inputs.declare("d", dsl::InputShape::Scalar, dsl::InputType::I32)
      .declare("e", dsl::InputShape::Scalar);
  return D;
}

} // namespace

TEST_CASE("mask analysis: floordiv and mod are sound against element "
          "evaluation",
          "[mask][bounds][floordiv]") {
  Compiled C(floorMask());
  REQUIRE(C.A.Analysed);
  REQUIRE(C.A.Bounded.size() == 1); // doc_q, as the divisor of g
  std::mt19937_64 Rng(29);
  std::uniform_real_distribution<double> Div(-3.0, 3.0);
  std::vector<Tiling> Tilings = randomTilings(Rng, 10);
  Tilings.push_back({200, 200, 16, 16});
  for (const Tiling &T : Tilings) {
    INFO("tiling " << T.Sq << "x" << T.Skv << " blocks " << T.BlockM << "x"
                   << T.BlockN);
    InputValues In;
    // Per-row divisors: a constant run (a single value per block, often),
    // then random values of either sign, some exactly 0.
    std::vector<double> Row(T.Sq, 1.25);
    for (int64_t I = T.Sq / 2; I < T.Sq; ++I)
      Row[I] = I % 11 == 0 ? 0.0 : Div(Rng);
    In.Arrays["doc_q"] = Row;
    In.Arrays["doc_k"] = std::vector<double>(T.Skv, 0.0);
    for (double D : {-7.0, -1.0, 0.0, 1.0, 3.0, 16.0, 64.0}) {
      In.Values["d"] = D;
      for (double E : {-2.5, 0.0, 0.75, 33.0}) {
        In.Values["e"] = E;
        checkSound(C.graph(), C.A, T, In);
      }
    }
  }
}

TEST_CASE("mask analysis: chunked attention classifies from the chunks of "
          "a block's rows and keys",
          "[mask][bounds][floordiv]") {
  Compiled C(examples::mhaChunked());
  REQUIRE(C.A.Analysed);
  CHECK(C.A.Grouping == MaskGrouping::Shared);
  CHECK(C.A.ScalarInputs == std::vector<std::string>{"chunk"});
  CHECK_FALSE(C.A.ReadsTensorInput);
  std::mt19937_64 Rng(31);
  std::vector<Tiling> Tilings = randomTilings(Rng, 10);
  Tilings.push_back({512, 512, 64, 64});
  for (const Tiling &T : Tilings)
    for (int64_t Chunk : {1, 7, 16, 48, 64, 100, 256}) {
      INFO("tiling " << T.Sq << "x" << T.Skv << " blocks " << T.BlockM << "x"
                     << T.BlockN << " chunk " << Chunk);
      InputValues In;
      In.Values["chunk"] = double(Chunk);
      int64_t Decided = 0;
      forEachBlock(
          C.graph(), C.A, T, In, 0, 0,
          [&](const analysis::MaskBox &Box, BlockClass Cl, int64_t Kept,
              int64_t Masked) {
            // Sound, like every mask; and exact: when the rows lie in one
            // chunk and the keys in one chunk, the chunks' equality is
            // decided and what is left is causal, which the box decides
            // off the diagonal; chunks apart are EMPTY.
            if (Cl == BlockClass::Full)
              CHECK(Masked == 0);
            if (Cl == BlockClass::Empty)
              CHECK(Kept == 0);
            int64_t QC0 = Box.QLo / Chunk, QC1 = Box.QHi / Chunk;
            int64_t KC0 = Box.KvLo / Chunk, KC1 = Box.KvHi / Chunk;
            if (QC1 < KC0 || KC1 < QC0 || Box.QHi < Box.KvLo) {
              CHECK(Cl == BlockClass::Empty);
              ++Decided;
            } else if (QC0 == QC1 && KC0 == KC1 && Box.QLo >= Box.KvHi) {
              CHECK(Cl == BlockClass::Full);
              ++Decided;
            }
          });
      if (T.Sq == 512 && Chunk == 256)
        CHECK(Decided == 64 - 8); // all but the 8 blocks on the diagonal
    }
}

TEST_CASE("mask analysis: floordiv and mod intervals are exact for a single "
          "positive divisor",
          "[mask][bounds][floordiv]") {
  // floordiv(q_idx, d) and mod(q_idx, d) over a block's rows take every
  // value between their interval's ends when the rule is exact, so a
  // comparison with any constant k is decided exactly where it holds or
  // fails for the whole block.
  using MakeMask = SymbolScalar (*)(SymbolScalar, SymbolScalar, int);
  const MakeMask Masks[] = {
      [](SymbolScalar q, SymbolScalar d, int k) { return floordiv(q, d) >= k; },
      [](SymbolScalar q, SymbolScalar d, int k) { return floordiv(q, d) <= k; },
      [](SymbolScalar q, SymbolScalar d, int k) { return mod(q, d) >= k; },
      [](SymbolScalar q, SymbolScalar d, int k) { return mod(q, d) <= k; }};
  std::mt19937_64 Rng(37);
  std::vector<Tiling> Tilings = randomTilings(Rng, 6);
  for (const MakeMask &M : Masks)
    for (int K = -1; K <= 9; ++K) {
      dsl::AttentionDef Def = test::maskedSoftmax(
          "floor_exact", [M, K](SymbolScalar, SymbolScalar, SymbolScalar q,
                                SymbolScalar, const dsl::CustomInputs &in) {
            return M(q, in["d"], K);
          });
      Def.inputs.declare("d", dsl::InputShape::Scalar, dsl::InputType::I32);
      Compiled C(Def);
      REQUIRE(C.A.Analysed);
      for (const Tiling &T : Tilings)
        for (int64_t D : {1, 3, 8, 10, 64}) {
          INFO("k " << K << " d " << D << " tiling " << T.Sq << "x" << T.Skv
                    << " blocks " << T.BlockM << "x" << T.BlockN);
          InputValues In;
          In.Values["d"] = double(D);
          forEachBlock(C.graph(), C.A, T, In, 0, 0,
                       [&](const analysis::MaskBox &, BlockClass Cl,
                           int64_t Kept, int64_t Masked) {
                         CHECK(Cl == (Masked == 0 ? BlockClass::Full
                                      : Kept == 0 ? BlockClass::Empty
                                                  : BlockClass::Partial));
                       });
        }
    }
}

TEST_CASE("mask analysis: a packed sequence's blocks are full exactly where "
          "every element is kept (varlen.cuh's tile_full)",
          "[mask][bounds][varlen]") {
  // The device rule, with the host evaluator: a block of a packed sequence
  // is full when no key lies past the sequence's end and its box, rows
  // shifted by Skv - Sq (bottom-right) and cut at the sequence's last
  // query, classifies FULL. Ragged sequences: empty, one token, more keys
  // than queries and more queries than keys.
  const std::pair<int64_t, int64_t> Seqs[] = {{0, 3},    {1, 1},   {130, 300},
                                              {257, 257}, {64, 0},  {5, 70},
                                              {200, 129}, {513, 77}};
  const std::pair<int64_t, int64_t> Blocks[] = {
      {64, 64}, {128, 128}, {128, 64}, {64, 128}, {128, 176}};
  int64_t Full = 0;
  for (const dsl::AttentionDef &D :
       {examples::mha(), examples::mhaSlidingWindow(), examples::mhaPrefixLm(),
        examples::mhaChunked()}) {
    Compiled C(D);
    REQUIRE(C.A.Analysed);
    REQUIRE(C.A.Bounded.empty()); // the masks tile_full classifies
    for (double Scalar : {0.0, 37.0, 64.0, 100.0}) {
      InputValues In;
      In.Values["prefix_len"] = Scalar;
      In.Values["chunk"] = std::max(1.0, Scalar);
      for (const auto &[Sq, Skv] : Seqs)
        for (const auto &[BM, BN] : Blocks) {
          const int64_t Shift = Skv - Sq;
          for (int64_t Q0 = 0; Q0 < Sq; Q0 += BM)
            for (int64_t K0 = 0; K0 < Skv; K0 += BN) {
              INFO(D.name << " " << Scalar << " seq " << Sq << "x" << Skv
                          << " blocks " << BM << "x" << BN << " at " << Q0
                          << "," << K0);
              analysis::MaskBox Box;
              Box.QLo = Q0 + Shift;
              Box.QHi = std::min(Q0 + BM, Sq) - 1 + Shift;
              Box.KvLo = K0;
              Box.KvHi = K0 + BN - 1;
              for (const auto &[Name, X] : In.Values)
                Box.Exact[Name] = X;
              const bool TileFull =
                  K0 + BN <= Skv &&
                  analysis::classifyBox(C.A, Box) == BlockClass::Full;
              bool AllKept = K0 + BN <= Skv;
              for (int64_t Q = Box.QLo; Q <= Box.QHi && AllKept; ++Q)
                for (int64_t K = K0; K < K0 + BN && AllKept; ++K)
                  AllKept = maskAt(C.graph(), C.A.Mask, In, 0, 0, Q, K, 64);
              // Sound always; exact for these masks, which are monotone
              // in q and kv within a chunk.
              CHECK(TileFull == AllKept);
              Full += TileFull;
            }
        }
    }
  }
  CHECK(Full > 100); // the full path is taken, not only the masked one
}
