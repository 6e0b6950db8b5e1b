// The host side of user-given block masks (BlockMaskData.h): every malformed
// field of BlockLists refused by name, re-tiling equal to an element-by-
// element evaluation on ragged shapes, the kernels' list format, and the
// lists' mean visits a query block (ListVisits) that the host knows.
#include "BlockMaskData.h"
#include "ListVisits.h"

#include "attn/runtime/Errors.h"

#include <catch2/catch.hpp>

#include <random>

using namespace attn;
using namespace attn::runtime;

namespace {

/// Lists of one (batch, head) group: query block m visits key block n as
/// class Cls[m][n] (0 none, 1 partial, 2 full).
BlockLists listsOf(const std::vector<std::vector<int>> &Cls, int BlockQ,
                   int BlockKv) {
  BlockLists L;
  L.BlockQ = BlockQ;
  L.BlockKv = BlockKv;
  const int N = int(Cls[0].size());
  for (const std::vector<int> &Row : Cls) {
    int P = 0, F = 0;
    std::vector<int32_t> PI(N, 0), FI(N, 0);
    for (int K = 0; K < N; ++K) {
      if (Row[K] == 1)
        PI[P++] = K;
      if (Row[K] == 2)
        FI[F++] = K;
    }
    L.KvNumBlocks.push_back(P);
    L.FullKvNumBlocks.push_back(F);
    L.KvIndices.insert(L.KvIndices.end(), PI.begin(), PI.end());
    L.FullKvIndices.insert(L.FullKvIndices.end(), FI.begin(), FI.end());
  }
  return L;
}

MaskShape shapeOf(int64_t B, int64_t H, int64_t Sq, int64_t Skv) {
  MaskShape S;
  S.Batch = B;
  S.Heads = H;
  S.SeqQ = Sq;
  S.SeqKv = Skv;
  return S;
}

} // namespace

TEST_CASE("block lists: every malformed field is named with what was "
          "expected", "[runtime][blockmask]") {
  // 3 query blocks x 2 key blocks of 64 for seq 130 x 100.
  const MaskShape S = shapeOf(2, 4, 130, 100);
  const BlockLists Good = listsOf({{2, 0}, {1, 2}, {1, 1}}, 64, 64);
  CHECK(checkBlockLists(Good, S).Groups == 1);

  auto Refused = [&](BlockLists L, const std::string &Msg) {
    CHECK_THROWS_WITH(checkBlockLists(L, S), Catch::Contains(Msg));
    CHECK_THROWS_AS(checkBlockLists(L, S), InvalidArgument);
  };
  BlockLists L = Good;
  L.KvNumBlocks.pop_back();
  Refused(L, "KvNumBlocks has 2 entries; expected Batch x Heads x QBlocks = "
             "1 x 1 x 3 = 3");
  L = Good;
  L.KvIndices.push_back(0);
  Refused(L, "KvIndices has 7 entries; expected Batch x Heads x QBlocks x "
             "KvBlocks = 1 x 1 x 3 x 2 = 6");
  L = Good;
  L.KvNumBlocks[1] = 3;
  Refused(L, "KvNumBlocks[0][0][1] is 3; expected 0 to KvBlocks = 2");
  L = Good;
  L.FullKvNumBlocks[0] = -1;
  Refused(L, "FullKvNumBlocks[0][0][0] is -1; expected 0 to KvBlocks = 2");
  L = Good;
  L.KvIndices[2 * 2 + 1] = 2;
  Refused(L, "KvIndices[0][0][2][1] is 2; expected a key block in [0, 2)");
  L = Good;
  L.KvIndices[2 * 2 + 1] = 0;
  Refused(L, "KvIndices[0][0][2] names key block 0 twice");
  L = Good;
  L.FullKvIndices[1 * 2] = 0; // query block 1: partial 0 and full 0
  Refused(L, "KvIndices and FullKvIndices both name key block 0 of query "
             "block 1 (batch 0, head 0)");
  L = Good;
  L.FullKvIndices.clear();
  Refused(L, "FullKvIndices is empty and FullKvNumBlocks is not");
  L = Good;
  L.Batch = 3;
  Refused(L, "Batch is 3; expected 1 or the shape's batch 2");
  L = Good;
  L.Heads = 2;
  Refused(L, "Heads is 2; expected 1 or the shape's heads 4");
  L = Good;
  L.BlockKv = 0;
  Refused(L, "block size 64x0; expected BlockQ and BlockKv of at least 1");
}

TEST_CASE("block lists: one list per batch or per head gives the kernels' "
          "grouping", "[runtime][blockmask]") {
  const MaskShape S = shapeOf(2, 3, 10, 10);
  BlockLists One = listsOf({{1}}, 16, 16);
  CHECK(checkBlockLists(One, S).Grouping == 0);
  BlockLists PerBatch = One;
  PerBatch.Batch = 2;
  for (auto *V : {&PerBatch.KvNumBlocks, &PerBatch.KvIndices,
                  &PerBatch.FullKvNumBlocks, &PerBatch.FullKvIndices})
    V->push_back(V->back());
  PerBatch.KvNumBlocks[1] = 0; // batch 1: nothing visited
  HostClasses B = checkBlockLists(PerBatch, S);
  CHECK(B.Grouping == 1);
  CHECK(B.Groups == 2);
  CHECK(B.at(0, 0, 0) == 1);
  CHECK(B.at(1, 0, 0) == 0);
  // Per head for one batch: the same heads' lists in every batch.
  BlockLists PerHead = One;
  PerHead.Heads = 3;
  PerHead.KvNumBlocks = {1, 0, 0};
  PerHead.KvIndices = {0, 0, 0};
  PerHead.FullKvNumBlocks = {0, 1, 0};
  PerHead.FullKvIndices = {0, 0, 0};
  HostClasses H = checkBlockLists(PerHead, S);
  CHECK(H.Grouping == 2);
  REQUIRE(H.Groups == 6);
  for (int G = 0; G < 6; ++G)
    CHECK(int(H.at(G, 0, 0)) == (G % 3 == 0 ? 1 : G % 3 == 1 ? 2 : 0));
}

TEST_CASE("block lists: re-tiled classes equal an element-by-element "
          "evaluation on ragged shapes", "[runtime][blockmask]") {
  std::mt19937 Rng(7);
  for (int Trial = 0; Trial < 60; ++Trial) {
    const int Sq = 1 + int(Rng() % 300), Skv = 1 + int(Rng() % 300);
    const int Sizes[] = {16, 32, 48, 64, 128};
    const int UQ = Sizes[Rng() % 5], UK = Sizes[Rng() % 5];
    const int TM = Sizes[Rng() % 5], TN = Sizes[Rng() % 5];
    const int QB = (Sq + UQ - 1) / UQ, KB = (Skv + UK - 1) / UK;
    std::vector<std::vector<int>> Cls(QB, std::vector<int>(KB));
    for (auto &Row : Cls)
      for (int &C : Row)
        C = int(Rng() % 3);
    HostClasses U = checkBlockLists(listsOf(Cls, UQ, UK), shapeOf(1, 1, Sq, Skv));
    HostClasses T = retile(U, Sq, Skv, TM, TN);
    REQUIRE(T.MBlocks == (Sq + TM - 1) / TM);
    REQUIRE(T.NBlocks == (Skv + TN - 1) / TN);
    for (int M = 0; M < T.MBlocks; ++M)
      for (int N = 0; N < T.NBlocks; ++N) {
        // Every element of the tile: a key past the end counts as masked.
        bool Any = false, All = true;
        for (int Q = M * TM; Q < std::min((M + 1) * TM, Sq); ++Q)
          for (int K = N * TN; K < (N + 1) * TN; ++K) {
            const int C = K < Skv ? Cls[Q / UQ][K / UK] : 0;
            Any = Any || C != 0;
            All = All && C == 2;
          }
        INFO("trial " << Trial << " tile " << M << "," << N);
        CHECK(int(T.at(0, M, N)) == (Any ? (All ? 2 : 1) : 0));
      }
    // Lists in the kernels' format, rows and columns, and the columns'
    // ranks among the rows.
    HostLists R = listRows(T), C = listColumns(T);
    std::vector<int32_t> Rank = columnRanks(R, C, 1);
    for (int M = 0; M < T.MBlocks; ++M) {
      int Count = 0;
      for (int N = 0; N < T.NBlocks; ++N)
        if (T.at(0, M, N)) {
          REQUIRE(Count < R.Count[M]);
          CHECK(R.List[M * R.Len + Count] ==
                (N | (T.at(0, M, N) == 2 ? 1 << 30 : 0)));
          ++Count;
        }
      CHECK(R.Count[M] == Count);
    }
    for (int N = 0; N < T.NBlocks; ++N) {
      int Count = 0;
      for (int M = 0; M < T.MBlocks; ++M)
        if (T.at(0, M, N)) {
          CHECK((C.List[N * C.Len + Count] & 0x3fffffff) == M);
          int After = 0; // key blocks after N that visit M
          for (int K = N + 1; K < T.NBlocks; ++K)
            After += T.at(0, M, K) != 0;
          CHECK(Rank[N * C.Len + Count] == After);
          ++Count;
        }
      CHECK(C.Count[N] == Count);
    }
  }
}

TEST_CASE("block lists: the mean visits a query block, known on the host",
          "[runtime][blockmask]") {
  // Two query blocks of one group, retiled to the kernels' 128 x 128 from
  // 64 x 64: rows 0-127 keep key block 0, rows 128-255 key blocks 0 and 1.
  const MaskShape S = shapeOf(1, 1, 256, 256);
  BlockLists L = listsOf({{2, 0, 0, 0}, {2, 2, 0, 0}, {1, 0, 1, 0}, {0, 2, 2, 2}},
                         64, 64);
  HostLists R = listRows(retile(checkBlockLists(L, S), 256, 256, 128, 128));
  REQUIRE(R.Count == std::vector<int32_t>{1, 2});
  ListVisits V;
  CHECK_FALSE(V.mean()); // nothing counted yet
  V.setKnown(R.Count);
  REQUIRE(V.mean());
  CHECK(*V.mean() == 1.5);
  // Lists of another shape replace the mean.
  V.setKnown({4, 0, 0, 1});
  CHECK(*V.mean() == 1.25);
}
