// The block lists' compaction (block_range.cuh's compact_line, and the
// backward's coarse rows and columns of bwd_block_mask.cuh's
// list_coarse_line): run on the host with a 32-lane vote, the lists equal a
// serial walk over random class maps (lines with no entry and with every
// entry, lengths that are and are not multiples of 32), and the backward's
// coarse lists and fused-dQ ranks equal a brute-force combination of the
// fine classes.
#include "attnc/attention_args.cuh"
#include "attnc/block_range.cuh"
#include "attnc/bwd_block_mask.cuh"

#include "HostWarp.h"

#include <catch2/catch.hpp>

#include <random>
#include <vector>

namespace {

using attnc::test::HostWarp;

constexpr int Poison = -7;

/// Classes of \p Len blocks: all empty, all full, all partial, or drawn
/// with P(empty) = \p Empty and full or partial evenly.
std::vector<int> classes(int Len, int Kind, double Empty, std::mt19937 &Rng) {
  std::vector<int> C(Len);
  std::uniform_real_distribution<double> U(0, 1);
  for (int &X : C) {
    if (Kind < 3)
      X = Kind;
    else
      X = U(Rng) < Empty ? 0 : (U(Rng) < 0.5 ? 1 : 2);
  }
  return C;
}

} // namespace

TEST_CASE("compact_line lists a line as a serial walk does", "[blockcompact]") {
  std::mt19937 Rng(17);
  for (int Len : {0, 1, 5, 31, 32, 33, 63, 64, 65, 100, 128, 255, 256, 257, 1000})
    for (int Kind = 0; Kind < 6; ++Kind) {
      const double Empty = Kind == 3 ? 0.1 : (Kind == 4 ? 0.5 : 0.95);
      const std::vector<int> C = classes(Len, Kind, Empty, Rng);
      std::vector<int> Want;
      for (int X = 0; X < Len; ++X)
        if (C[X])
          Want.push_back(X | (C[X] == 2 ? 1 << 30 : 0));
      std::vector<int> Got(Len + 1, Poison), Calls(Len, 0);
      const int Count = attnc::compact_line(
          Len,
          [&](int X) {
            ++Calls[X];
            return C[X];
          },
          [&](int Slot, int X, int Cls) {
            REQUIRE(Slot >= 0);
            REQUIRE(Slot < Len);
            REQUIRE(Got[Slot] == Poison); // each slot written once
            Got[Slot] = attnc::visit_entry(X, Cls);
          },
          HostWarp{});
      INFO("length " << Len << ", kind " << Kind);
      REQUIRE(Count == int(Want.size()));
      for (int I = 0; I < Count; ++I)
        REQUIRE(Got[I] == Want[I]);
      for (int I = Count; I <= Len; ++I)
        REQUIRE(Got[I] == Poison); // nothing past the count
      for (int X = 0; X < Len; ++X)
        REQUIRE(Calls[X] == 1); // every block classified, once
    }
}

namespace {

/// The fine classes of a backward problem, and its coarse rows' and
/// columns' lists made by list_coarse_line.
struct Problem {
  int Groups, FineM, FineN, RatioM, RatioN;
  std::vector<unsigned char> Fine;
  int M() const { return (FineM + RatioM - 1) / RatioM; }
  int N() const { return (FineN + RatioN - 1) / RatioN; }
  int fine(int G, int Fm, int Fn) const {
    return Fine[(size_t(G) * FineM + Fm) * FineN + Fn];
  }
  /// Coarse block (m, n)'s class by brute force: the fine blocks inside it
  /// that exist; a fine block past the keys' end makes a full block
  /// partial; rows past the end do not count.
  int coarse(int G, int Mb, int Nb) const {
    bool Any = false, All = true;
    for (int Fm = Mb * RatioM; Fm < (Mb + 1) * RatioM && Fm < FineM; ++Fm)
      for (int Fn = Nb * RatioN; Fn < (Nb + 1) * RatioN; ++Fn) {
        const int C = Fn < FineN ? fine(G, Fm, Fn) : 1;
        Any |= Fn < FineN && C != 0;
        All &= C == 2;
      }
    return Any ? (All ? 2 : 1) : 0;
  }
};

Problem draw(int Groups, int FineM, int FineN, int RatioM, int RatioN, double Empty,
             std::mt19937 &Rng) {
  Problem P{Groups, FineM, FineN, RatioM, RatioN, {}};
  std::uniform_real_distribution<double> U(0, 1);
  P.Fine.resize(size_t(Groups) * FineM * FineN);
  for (int G = 0; G < Groups; ++G)
    for (int Fm = 0; Fm < FineM; ++Fm) {
      // Some fine rows keep nothing, some everything.
      const int Row = int(U(Rng) * 8);
      for (int Fn = 0; Fn < FineN; ++Fn) {
        unsigned char &C = P.Fine[(size_t(G) * FineM + Fm) * FineN + Fn];
        C = Row == 0 ? 0
            : Row == 1 ? 2
                       : (U(Rng) < Empty ? 0 : (U(Rng) < 0.7 ? 1 : 2));
      }
    }
  return P;
}

void checkLists(const Problem &P, bool Fused) {
  const int M = P.M(), N = P.N();
  attnc::BwdListArgs A{};
  A.classes = P.Fine.data();
  A.groups = P.Groups;
  A.fine_m = P.FineM;
  A.fine_n = P.FineN;
  A.ratio_m = P.RatioM;
  A.ratio_n = P.RatioN;
  A.m_blocks = M;
  A.n_blocks = N;
  std::vector<int> RowCount(size_t(P.Groups) * M, Poison),
      RowList(size_t(P.Groups) * M * N, Poison);
  A.count = RowCount.data();
  A.list = RowList.data();
  for (long long Id = 0; Id < (long long)P.Groups * M; ++Id)
    attnc::list_coarse_line<false>(A, Id, HostWarp{});
  attnc::BwdListArgs C = A;
  std::vector<int> ColCount(size_t(P.Groups) * N, Poison),
      ColList(size_t(P.Groups) * N * M, Poison), Rank(size_t(P.Groups) * N * M, Poison);
  C.count = ColCount.data();
  C.list = ColList.data();
  if (Fused) {
    C.row_count = RowCount.data();
    C.row_list = RowList.data();
    C.rank = Rank.data();
  }
  for (long long Id = 0; Id < (long long)P.Groups * N; ++Id)
    attnc::list_coarse_line<true>(C, Id, HostWarp{});
  INFO("groups " << P.Groups << " fine " << P.FineM << "x" << P.FineN << " ratio "
                 << P.RatioM << "x" << P.RatioN << (Fused ? " fused" : ""));
  for (int G = 0; G < P.Groups; ++G) {
    for (int Mb = 0; Mb < M; ++Mb) {
      std::vector<int> Want;
      for (int Nb = 0; Nb < N; ++Nb)
        if (int Cls = P.coarse(G, Mb, Nb))
          Want.push_back(Nb | (Cls == 2 ? 1 << 30 : 0));
      const size_t Row = size_t(G) * M + Mb;
      REQUIRE(RowCount[Row] == int(Want.size()));
      for (size_t J = 0; J < Want.size(); ++J)
        REQUIRE(RowList[Row * N + J] == Want[J]);
    }
    for (int Nb = 0; Nb < N; ++Nb) {
      const size_t Col = size_t(G) * N + Nb;
      int J = 0;
      for (int Mb = 0; Mb < M; ++Mb) {
        const int Cls = P.coarse(G, Mb, Nb);
        if (!Cls)
          continue;
        REQUIRE(ColList[Col * M + J] == (Mb | (Cls == 2 ? 1 << 30 : 0)));
        if (Fused) {
          // The key blocks after Nb that visit query block Mb.
          int Above = 0;
          for (int K = Nb + 1; K < N; ++K)
            Above += P.coarse(G, Mb, K) != 0;
          REQUIRE(Rank[Col * M + J] == Above);
        }
        ++J;
      }
      REQUIRE(ColCount[Col] == J);
      if (!Fused)
        REQUIRE(Rank[Col * M] == Poison); // no ranks outside the fused mode
    }
  }
}

} // namespace

TEST_CASE("the backward's coarse lists and ranks equal brute force",
          "[blockcompact]") {
  std::mt19937 Rng(29);
  struct Shape {
    int Groups, FineM, FineN, RatioM, RatioN;
  };
  // Ratios 1 (the fused mode's tiling), 2 and 4 (two-kernel mode), fine
  // grids short of a whole coarse block, lines shorter and longer than 32.
  const Shape Shapes[] = {{1, 1, 1, 1, 1},    {2, 7, 5, 1, 1},   {1, 33, 70, 1, 1},
                          {3, 64, 64, 2, 1},  {1, 65, 129, 1, 2}, {2, 100, 37, 4, 2},
                          {1, 256, 128, 1, 1}, {1, 129, 257, 2, 4}};
  for (const Shape &S : Shapes)
    for (double Empty : {0.0, 0.3, 0.9, 1.0})
      for (bool Fused : {false, true}) {
        if (Fused && (S.RatioM != 1 || S.RatioN != 1))
          continue; // fused: rows and columns on one tiling
        checkLists(draw(S.Groups, S.FineM, S.FineN, S.RatioM, S.RatioN, Empty, Rng),
                   Fused);
      }
}
