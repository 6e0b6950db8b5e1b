// The device's int32 floordiv and mod (runtime/kernels/int_div.cuh, what
// the generated masks call through attnc::floordiv/floormod, and
// floordiv_by/floormod_by with the host's multiplier where the divisor is
// an int32 scalar input), compiled for the host: against floor division in 64-bit arithmetic, every pair of a
// small square of numerators and divisors of both signs and 0, the ends of
// the int range, and random pairs.
#include "int_div.cuh"

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace {

/// floor(a / b) and a - b·floor(a / b) exactly, with the IR's zero-divisor
/// values (floordiv 0, mod a).
int64_t floorDivRef(int64_t A, int64_t B) {
  if (B == 0)
    return 0;
  int64_t Q = A / B;
  if (Q * B != A && ((A < 0) != (B < 0)))
    --Q;
  return Q;
}

/// Checks one pair; (-2^31, -1) is not defined and skipped.
void checkPair(int32_t A, int32_t B, int64_t &Checked) {
  if (A == std::numeric_limits<int32_t>::min() && B == -1)
    return;
  const int64_t Q = floorDivRef(A, B);
  const int64_t R = int64_t(A) - int64_t(B) * Q;
  INFO("a " << A << " b " << B);
  REQUIRE(attnc::floordiv_int(A, B) == Q);
  REQUIRE(attnc::floormod_int(A, B) == R);
  // By a scalar input: the host's multiplier and no division (nonzero for
  // every divisor but 0, so that the multiply-high path is the one run).
  const unsigned M = attnc::int_div_multiplier(B);
  REQUIRE((M != 0u) == (B != 0));
  REQUIRE(attnc::floordiv_by(A, B, M) == Q);
  REQUIRE(attnc::floormod_by(A, B, M) == R);
  ++Checked;
}

} // namespace

TEST_CASE("int floordiv and mod: every pair of a small square, both signs "
          "and a zero divisor",
          "[floordiv]") {
  int64_t Checked = 0;
  for (int32_t A = -1000; A <= 1000; ++A)
    for (int32_t B = -70; B <= 70; ++B)
      checkPair(A, B, Checked);
  CHECK(Checked == 2001 * 141);
  // The examples of docs/ir-semantics.md.
  CHECK(attnc::floordiv_int(-7, 2) == -4);
  CHECK(attnc::floormod_int(-7, 2) == 1);
  CHECK(attnc::floordiv_int(7, -2) == -4);
  CHECK(attnc::floormod_int(7, -2) == -1);
  CHECK(attnc::floordiv_int(5, 0) == 0);
  CHECK(attnc::floormod_int(5, 0) == 5);
}

TEST_CASE("int floordiv and mod: the ends of the int range", "[floordiv]") {
  const int32_t Min = std::numeric_limits<int32_t>::min();
  const int32_t Max = std::numeric_limits<int32_t>::max();
  // Numerators and divisors near 0, the powers of two and the ends, where
  // the folded numerator reaches 2^31 (a = -2^31 under a negative divisor)
  // and the unsigned divisor 2^31 (b = -2^31).
  std::vector<int32_t> Values = {Min, Min + 1, Min + 2, Max, Max - 1, Max - 2};
  for (int Shift = 0; Shift < 31; ++Shift)
    for (int32_t D : {-1, 0, 1}) {
      Values.push_back(int32_t((int64_t(1) << Shift) + D));
      Values.push_back(int32_t(-(int64_t(1) << Shift) + D));
    }
  for (int32_t V : {3, 7, 100, 255, 256, 257, 4095, 65537, 1000003})
    for (int32_t S : {1, -1}) {
      Values.push_back(S * V);
      Values.push_back(Min / V * V);
      Values.push_back(Max / V * V);
    }
  int64_t Checked = 0;
  for (int32_t A : Values)
    for (int32_t B : Values)
      checkPair(A, B, Checked);
  CHECK(Checked > 30000);
}

TEST_CASE("int floordiv and mod: random pairs over the int range and small "
          "divisors",
          "[floordiv]") {
  std::mt19937 Rng(17);
  std::uniform_int_distribution<int32_t> Any(std::numeric_limits<int32_t>::min(),
                                             std::numeric_limits<int32_t>::max());
  std::uniform_int_distribution<int32_t> Small(-300, 300);
  int64_t Checked = 0;
  for (int I = 0; I < 300000; ++I) {
    checkPair(Any(Rng), Any(Rng), Checked);
    checkPair(Any(Rng), Small(Rng), Checked);
  }
  CHECK(Checked > 599000);
}
