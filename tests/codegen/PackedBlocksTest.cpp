// The grid of a packed call's CTAs (block_range.cuh's packed_block_of and
// packed_block_bound): run on the host with a 32-lane prefix sum and vote,
// every CTA of the grid maps to the block that a brute-force list of
// (sequence, block) work items has at its place, on ragged sequences
// (empty ones, length 1, more than 32 sequences, block sizes that do and do
// not divide the lengths), and the grid holds every block with at most one
// spare CTA a sequence; packed_block_of_sorted's grid likewise, with up to
// 32 sequences longest first where one has kSortMinBlocks blocks or more.
#include "block_range.cuh"

#include "HostWarp.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

namespace {

using attnc::test::HostWarp;

/// cu_seqlens of the lengths.
std::vector<int> cumulative(const std::vector<int> &Lens) {
  std::vector<int> Cu{0};
  for (int L : Lens)
    Cu.push_back(Cu.back() + L);
  return Cu;
}

using Work = std::vector<std::pair<int, int>>;

/// Every CTA of the grid (packed_block_bound's) against \p W, the
/// (sequence, block) work items in grid order: \p Of(cu, batch, block, x)
/// maps CTA x; the CTAs past the work find none, at most one a sequence.
template <class Map>
void checkAgainst(const std::vector<int> &Lens, int Block, const Work &W, const Map &Of) {
  const std::vector<int> Cu = cumulative(Lens);
  const int Batch = int(Lens.size());
  const int MaxLen = Lens.empty() ? 0 : *std::max_element(Lens.begin(), Lens.end());
  const long long Grid = attnc::packed_block_bound(Cu.back(), Batch, Block, MaxLen);
  INFO("sequences " << Batch << ", block " << Block << ", grid " << Grid << ", work "
                    << W.size());
  REQUIRE(Grid >= (long long)W.size());
  CHECK(Grid - (long long)W.size() <= Batch);
  for (long long X = 0; X < Grid; ++X) {
    const attnc::PackedBlock P = Of(Cu.data(), Batch, Block, X);
    INFO("CTA " << X);
    if (X < (long long)W.size()) {
      CHECK(P.seq == W[X].first);
      CHECK(P.index == W[X].second);
    } else {
      CHECK(P.seq == -1);
    }
  }
}

/// packed_block_of against the work list built by hand: sequence by
/// sequence, its blocks 0, 1, ... in order.
void checkGrid(const std::vector<int> &Lens, int Block) {
  Work W;
  for (int B = 0; B < int(Lens.size()); ++B)
    for (int J = 0; J < (Lens[B] + Block - 1) / Block; ++J)
      W.push_back({B, J});
  checkAgainst(Lens, Block, W, [](const int *Cu, int Batch, int Blk, long long X) {
    return attnc::packed_block_of(Cu, Batch, Blk, X, HostWarp{});
  });
}

/// packed_block_of_sorted against the work list built by hand: at most 32
/// sequences, one of at least kSortMinBlocks blocks, ordered by block
/// count, most first (ties by index); otherwise in the given order; each
/// sequence's blocks 0, 1, ... in order.
void checkSortedGrid(const std::vector<int> &Lens, int Block) {
  const int Batch = int(Lens.size());
  auto blocks = [&](int B) { return (Lens[B] + Block - 1) / Block; };
  std::vector<int> Order;
  int Most = 0;
  for (int B = 0; B < Batch; ++B) {
    Order.push_back(B);
    Most = std::max(Most, blocks(B));
  }
  if (Batch <= 32 && Most >= attnc::kSortMinBlocks)
    std::stable_sort(Order.begin(), Order.end(),
                     [&](int X, int Y) { return blocks(X) > blocks(Y); });
  Work W;
  for (int B : Order)
    for (int J = 0; J < blocks(B); ++J)
      W.push_back({B, J});
  const int MaxLen = Lens.empty() ? 0 : *std::max_element(Lens.begin(), Lens.end());
  checkAgainst(Lens, Block, W, [&](const int *Cu, int Bn, int Blk, long long X) {
    return attnc::packed_block_of_sorted(Cu, Bn, Blk, MaxLen, X, HostWarp{});
  });
}

} // namespace

TEST_CASE("packed grid, longest first: up to 32 sequences sorted, blocks in order",
          "[varlen][grid]") {
  checkSortedGrid({0, 1, 5, 9, 0, 3}, 1);        // sorted: 9 blocks
  checkSortedGrid({0, 1, 5, 9, 0, 3}, 4);        // given: at most 3 blocks
  checkSortedGrid({128, 256, 129, 1, 127}, 16);  // sorted, ties of 8 blocks
  checkSortedGrid({128, 256, 129, 1, 127}, 128); // given: at most 2 blocks
  checkSortedGrid({0, 0, 0}, 64);
  checkSortedGrid({7}, 1);
  std::mt19937 Rng32(29);
  std::vector<int> Batch32(32); // the bench's batch: 32 in [64, 8192]
  for (int &L : Batch32)
    L = 64 + int(Rng32() % 8129);
  checkSortedGrid(Batch32, 128);
  checkSortedGrid(Batch32, 64);
  std::vector<int> Lens(97, 0);
  for (int B = 0; B < 97; ++B)
    Lens[B] = B % 32 == 31 || B % 32 == 0 ? 0 : (B * 37) % 300;
  checkSortedGrid(Lens, 64);
  checkSortedGrid(Lens, 8);
  std::mt19937 Rng(23);
  for (int Trial = 0; Trial < 6; ++Trial) {
    std::vector<int> R(1 + int(Rng() % 70));
    for (int &L : R)
      L = Rng() % 5 == 0 ? int(Rng() % 3) : 64 + int(Rng() % 8129);
    checkSortedGrid(R, 128);
  }
}

TEST_CASE("packed grid: ragged sequences map to their blocks in order", "[varlen][grid]") {
  checkGrid({0, 1, 5, 9, 0, 3}, 4);
  checkGrid({0, 1, 5, 9, 0, 3}, 128);
  checkGrid({128, 256, 129, 1, 127}, 128);
  checkGrid({0, 0, 0}, 64);
  checkGrid({7}, 1);
}

TEST_CASE("packed grid: more than 32 sequences, empty ones at group ends",
          "[varlen][grid]") {
  std::vector<int> Lens(97, 0);
  for (int B = 0; B < 97; ++B)
    Lens[B] = B % 32 == 31 || B % 32 == 0 ? 0 : (B * 37) % 300;
  checkGrid(Lens, 64);
  checkGrid(Lens, 128);
  checkGrid(Lens, 8);
}

TEST_CASE("packed grid: random U[64, 8192] batches", "[varlen][grid]") {
  std::mt19937 Rng(17);
  for (int Trial = 0; Trial < 6; ++Trial) {
    const int Batch = 1 + int(Rng() % 70);
    std::vector<int> Lens(Batch);
    for (int &L : Lens)
      L = Rng() % 5 == 0 ? int(Rng() % 3) : 64 + int(Rng() % 8129);
    checkGrid(Lens, 128);
    checkGrid(Lens, 64);
  }
}

TEST_CASE("packed grid: the bound takes the smaller of its two counts", "[varlen][grid]") {
  // Two sequences of 100 tokens in blocks of 64: 4 blocks; by the tokens
  // (200 + 2 * 63) / 64 = 5, by the longest one 2 * 2 = 4.
  CHECK(attnc::packed_block_bound(200, 2, 64, 100) == 4);
  // One token of four sequences: by the tokens (1 + 4 * 127) / 128 = 3,
  // by the longest one 4.
  CHECK(attnc::packed_block_bound(1, 4, 128, 1) == 3);
  // 8192 and 64 tokens: 65 blocks; by the tokens 66, by the longest 128.
  CHECK(attnc::packed_block_bound(8192 + 64, 2, 128, 8192) == 66);
}
