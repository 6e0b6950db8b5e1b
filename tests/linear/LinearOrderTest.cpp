// The packed backward state passes' longest-first order
// (runtime/kernels/linear_seq_order.cuh, the device code run on the host):
// the ranks are a permutation that puts the longest sequences first (ties by
// index), and the state-pass CTAs of a grid take every (sequence, head,
// part) job exactly once, the longest sequence's first.
#include "linear_seq_order.cuh"

#include <catch2/catch.hpp>

#include <random>
#include <vector>

namespace {

/// order[rank] = sequence, as each CTA builds it.
std::vector<int> orderOf(const std::vector<int> &Len) {
  const int N = int(Len.size());
  std::vector<int> Order(N, -1);
  for (int I = 0; I < N; ++I) {
    const int R = attnc::lin::longest_first_rank(Len.data(), N, I);
    REQUIRE(R >= 0);
    REQUIRE(R < N);
    REQUIRE(Order[R] == -1); // no two sequences share a rank
    Order[R] = I;
  }
  return Order;
}

void checkLongestFirst(const std::vector<int> &Len) {
  const std::vector<int> Order = orderOf(Len);
  std::vector<int> Seen(Len.size(), 0);
  for (int B : Order)
    ++Seen.at(B);
  for (int S : Seen)
    CHECK(S == 1);
  for (size_t R = 1; R < Order.size(); ++R) {
    const int P = Order[R - 1], C = Order[R];
    CHECK((Len[P] > Len[C] || (Len[P] == Len[C] && P < C)));
  }
}

} // namespace

TEST_CASE("Packed sequences rank longest first, ties by index",
          "[linear][varlen][order]") {
  CHECK(orderOf({5, 9, 1, 9, 0}) == std::vector<int>{1, 3, 0, 2, 4});
  CHECK(orderOf({0}) == std::vector<int>{0});
  CHECK(orderOf({3, 3, 3}) == std::vector<int>{0, 1, 2});
  // The benchmark's 32 lengths: the 7898-token sequence (index 21) first,
  // the 343-token one (index 20) last.
  const std::vector<int> Bench = {
      366,  4918, 2207, 6759, 2540, 4496, 6927, 1269, 1431, 2388, 3288,
      2007, 7868, 7787, 2259, 7637, 772,  6584, 1388, 3869, 343,  7898,
      7578, 1405, 6170, 1735, 398,  4850, 6137, 5383, 4079, 1298};
  const std::vector<int> O = orderOf(Bench);
  CHECK(O.front() == 21);
  CHECK(O.back() == 20);
  checkLongestFirst(Bench);
  std::mt19937 Rng(7);
  for (int Trial = 0; Trial < 50; ++Trial) {
    std::vector<int> Len(1 + Rng() % 128);
    for (int &L : Len)
      L = int(Rng() % 5) == 0 ? int(Rng() % 3) : int(Rng() % 9000); // ties, zeros
    checkLongestFirst(Len);
  }
}

TEST_CASE("The state passes' CTAs take each job once, longest sequence first",
          "[linear][varlen][order]") {
  const std::vector<int> Len = {40, 700, 0, 700, 33, 1};
  const int N = int(Len.size());
  const std::vector<int> Order = orderOf(Len);
  for (int Heads : {1, 3, 32})
    for (int ZParts : {2, 4}) {
      // The launch: x slices (the same job), y seqs·heads, z zparts.
      const int GY = N * Heads;
      std::vector<int> Seen(size_t(N) * Heads * ZParts, 0);
      int LastRank = 0;
      for (int Z = 0; Z < ZParts; ++Z)
        for (int Y = 0; Y < GY; ++Y) {
          const long long L = Y + (long long)GY * Z;
          const attnc::lin::StateJob J = attnc::lin::state_job(L, Heads, ZParts);
          REQUIRE(J.rank >= 0);
          REQUIRE(J.rank < N);
          REQUIRE(J.h >= 0);
          REQUIRE(J.h < Heads);
          REQUIRE(J.z >= 0);
          REQUIRE(J.z < ZParts);
          ++Seen[(size_t(Order[J.rank]) * Heads + J.h) * ZParts + J.z];
          // Launch order walks the ranks in order: no longer sequence after
          // a shorter one.
          CHECK(J.rank >= LastRank);
          LastRank = J.rank;
        }
      for (int S : Seen)
        CHECK(S == 1);
    }
}
