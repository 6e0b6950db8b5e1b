// The blocks a packed call visits (varlen.cuh's key_block_range and
// query_block_range): the search of runtime/kernels/block_range.cuh, run on
// the host with the mask analysis's host evaluator as the box test and a
// 32-lane vote, against the blocks that keep an element by brute force, on
// ragged sequences; and on long sequences against a scan of single blocks,
// in a few votes.
#include "MaskTestEval.h"

#include "Examples.h"

#include "block_range.cuh"

#include <catch2/catch.hpp>

#include <algorithm>
#include <utility>
#include <vector>

using namespace attn;
using analysis::BlockClass;
using test::Compiled;
using test::InputValues;

namespace {

/// The ballot of 32 lanes, counted.
struct HostVote {
  int *Votes;
  template <class Pred> unsigned operator()(const Pred &P) const {
    ++*Votes;
    unsigned V = 0;
    for (int Lane = 0; Lane < attnc::kRangeLanes; ++Lane)
      if (P(Lane))
        V |= 1u << Lane;
    return V;
  }
};

/// One packed sequence of Sq queries and Skv keys in blocks of BM x BN.
struct Seq {
  int64_t Sq, Skv, BM, BN;
  int64_t shift() const { return Skv - Sq; } // bottom-right
};

/// Whether the analysis may keep an element of queries [QLo, QHi] x keys
/// [KLo, KHi] of \p S (box_may_keep: rows shifted).
bool boxMayKeep(const Compiled &C, const InputValues &In, const Seq &S,
                int64_t QLo, int64_t QHi, int64_t KLo, int64_t KHi) {
  analysis::MaskBox Box;
  Box.QLo = QLo + S.shift();
  Box.QHi = QHi + S.shift();
  Box.KvLo = KLo;
  Box.KvHi = KHi;
  for (const auto &[Name, X] : In.Values)
    Box.Exact[Name] = X;
  return analysis::classifyBox(C.A, Box) != BlockClass::Empty;
}

/// key_block_range (ByKey) or query_block_range of block \p I, as
/// varlen.cuh builds its boxes; \p Votes counts the votes.
std::pair<int, int> blockRange(const Compiled &C, const InputValues &In,
                               const Seq &S, bool ByKey, int64_t I,
                               int &Votes) {
  const int64_t Blocks = ByKey ? (S.Skv + S.BN - 1) / S.BN
                               : (S.Sq + S.BM - 1) / S.BM;
  auto MayKeep = [&](int Lo, int Hi) {
    if (ByKey)
      return boxMayKeep(C, In, S, I * S.BM, std::min(I * S.BM + S.BM, S.Sq) - 1,
                        Lo * S.BN, std::min(Hi * S.BN, S.Skv) - 1);
    return boxMayKeep(C, In, S, Lo * S.BM, std::min(Hi * S.BM, S.Sq) - 1,
                      I * S.BN, std::min(I * S.BN + S.BN, S.Skv) - 1);
  };
  const HostVote Vote{&Votes};
  const int First = attnc::first_block_kept(0, int(Blocks), MayKeep, Vote);
  return {First, attnc::last_block_kept(First, int(Blocks), MayKeep, Vote)};
}

/// The values each everyday mask is tried with: its scalar input (prefix
/// length, chunk) at several values, or one run without one.
std::vector<InputValues> scalarsOf(const dsl::AttentionDef &D) {
  const std::vector<ir::InputDecl> &Decls = D.inputs.decls();
  if (Decls.empty())
    return {InputValues()};
  std::vector<InputValues> Out;
  for (double X : {0.0, 1.0, 37.0, 64.0, 300.0}) {
    InputValues In;
    In.Values[Decls.front().Name] = Decls.front().Name == "chunk" ? std::max(1.0, X) : X;
    Out.push_back(In);
  }
  return Out;
}

const dsl::AttentionDef *everydayMasks() {
  static const dsl::AttentionDef Defs[] = {
      examples::mha(), examples::mhaSlidingWindow(), examples::mhaPrefixLm(),
      examples::mhaChunked()};
  return Defs;
}

} // namespace

TEST_CASE("packed block ranges: the blocks that keep an element, from either "
          "side, on ragged sequences",
          "[mask][bounds][varlen]") {
  // Empty sequences, one token, more keys than queries and more queries
  // than keys; blocks of 16 give sequences of more than 32 blocks (the
  // coarse votes).
  const std::pair<int64_t, int64_t> Lengths[] = {
      {0, 3},     {1, 1},   {130, 300}, {257, 257}, {64, 0},
      {5, 70},    {200, 129}, {600, 77}, {77, 600},  {520, 520}};
  const std::pair<int64_t, int64_t> Tiles[] = {
      {16, 16}, {64, 64}, {128, 128}, {16, 64}, {64, 16}, {128, 48}};
  int64_t Visited = 0, Skipped = 0;
  for (int DI = 0; DI < 4; ++DI) {
    const dsl::AttentionDef &D = everydayMasks()[DI];
    Compiled C(D);
    REQUIRE(C.A.Analysed);
    REQUIRE(C.A.Bounded.empty()); // the masks the search serves
    for (const InputValues &In : scalarsOf(D))
      for (const auto &[Sq, Skv] : Lengths) {
        // Kept elements by brute force, rows shifted (bottom-right).
        std::vector<char> Kept(size_t(Sq * Skv));
        for (int64_t Q = 0; Q < Sq; ++Q)
          for (int64_t K = 0; K < Skv; ++K)
            Kept[size_t(Q * Skv + K)] =
                test::maskAt(C.graph(), C.A.Mask, In, 0, 0, Q + Skv - Sq, K, 64);
        for (const auto &[BM, BN] : Tiles) {
          const Seq S{Sq, Skv, BM, BN};
          for (bool ByKey : {true, false}) {
            const int64_t Lines = ByKey ? (Sq + BM - 1) / BM : (Skv + BN - 1) / BN;
            const int64_t Blocks = ByKey ? (Skv + BN - 1) / BN : (Sq + BM - 1) / BM;
            for (int64_t I = 0; I < Lines; ++I) {
              // The first and one past the last block holding a kept
              // element of line I (a query block's keys, or a key block's
              // queries).
              int64_t First = Blocks, End = 0;
              for (int64_t J = 0; J < Blocks; ++J) {
                const int64_t M = ByKey ? I : J, N = ByKey ? J : I;
                bool Any = false;
                for (int64_t Q = M * BM; Q < std::min(M * BM + BM, Sq) && !Any; ++Q)
                  for (int64_t K = N * BN; K < std::min(N * BN + BN, Skv) && !Any; ++K)
                    Any = Kept[size_t(Q * Skv + K)];
                if (Any) {
                  First = std::min(First, J);
                  End = J + 1;
                }
              }
              if (First == Blocks) // nothing kept: an empty range
                First = End = Blocks;
              int Votes = 0;
              const auto [Lo, Hi] = blockRange(C, In, S, ByKey, I, Votes);
              INFO(D.name << " seq " << Sq << "x" << Skv << " blocks " << BM
                          << "x" << BN << (ByKey ? " query" : " key")
                          << " block " << I);
              // Exact for these masks: no block with a kept element left
              // out, no empty block at either end visited.
              CHECK(Lo == First);
              CHECK(Hi == std::max(End, First));
              Visited += Hi - Lo;
              Skipped += Blocks - (Hi - Lo);
            }
          }
        }
      }
  }
  CHECK(Visited > 1000);
  CHECK(Skipped > 1000); // the ends are cut, not only whole ranges kept
}

TEST_CASE("packed block ranges: long sequences in a few votes, the same "
          "blocks as a scan of single blocks",
          "[mask][bounds][varlen]") {
  // 1251 blocks of 16 queries and keys: two rounds of coarse votes (1024
  // blocks each) where a scan would classify up to every block.
  const Seq S{20000, 20016, 16, 16};
  for (int DI = 0; DI < 4; ++DI) {
    const dsl::AttentionDef &D = everydayMasks()[DI];
    Compiled C(D);
    for (const InputValues &In : scalarsOf(D)) {
      int MostVotes = 0;
      for (bool ByKey : {true, false}) {
        const int64_t Lines = ByKey ? (S.Sq + S.BM - 1) / S.BM : (S.Skv + S.BN - 1) / S.BN;
        const int64_t Blocks = ByKey ? (S.Skv + S.BN - 1) / S.BN : (S.Sq + S.BM - 1) / S.BM;
        for (int64_t I = 0; I < Lines; I += (I < 40 || I + 40 > Lines) ? 1 : 37) {
          auto Single = [&](int64_t J) {
            const int64_t M = ByKey ? I : J, N = ByKey ? J : I;
            return boxMayKeep(C, In, S, M * S.BM, std::min(M * S.BM + S.BM, S.Sq) - 1,
                              N * S.BN, std::min(N * S.BN + S.BN, S.Skv) - 1);
          };
          int64_t Lo = 0, Hi = Blocks; // the scan varlen.cuh replaced
          while (Lo < Hi && !Single(Lo))
            ++Lo;
          while (Hi > Lo && !Single(Hi - 1))
            --Hi;
          int Votes = 0;
          const auto [First, End] = blockRange(C, In, S, ByKey, I, Votes);
          INFO(D.name << (ByKey ? " query" : " key") << " block " << I);
          CHECK(First == Lo);
          CHECK(End == Hi);
          MostVotes = std::max(MostVotes, Votes);
        }
      }
      INFO(D.name);
      // Each end: at most two coarse votes (1251 blocks) and a fine one,
      // and one more fine vote per coarse group whose box is not cleared
      // but holds no kept block.
      CHECK(MostVotes <= (DI == 3 ? 10 : 6));
    }
  }
}
