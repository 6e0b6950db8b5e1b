// The int rules of runtime/kernels/mask_interval.cuh (the device twin of the
// mask analysis's interval arithmetic), compiled for the host: floordiv's
// interval against the quotients of every point of small boxes, for one
// positive divisor (its 32-bit path) and for divisor intervals and negative
// divisors (the four-corner path), ends near the int range's included; for
// single divisors, the multiplier forms the generated code uses for int32
// scalar inputs give the same intervals.
#include <algorithm>
#include <cmath>
#include <cstring>

// Host stand-ins for the CUDA names the header uses; the float rules'
// directed rounding is not what this test checks.
#define __device__
#define __forceinline__ inline
inline float __int_as_float(int I) {
  float F;
  std::memcpy(&F, &I, sizeof F);
  return F;
}
inline int __float_as_int(float F) {
  int I;
  std::memcpy(&I, &F, sizeof I);
  return I;
}
inline float __ll2float_rd(long long X) { return float(X); }
inline float __ll2float_ru(long long X) { return float(X); }
inline float __fadd_rd(float A, float B) { return A + B; }
inline float __fadd_ru(float A, float B) { return A + B; }
inline float __fsub_rd(float A, float B) { return A - B; }
inline float __fsub_ru(float A, float B) { return A - B; }
inline float __fmul_rd(float A, float B) { return A * B; }
inline float __fmul_ru(float A, float B) { return A * B; }
inline float __fdiv_rd(float A, float B) { return A / B; }
inline float __fdiv_ru(float A, float B) { return A / B; }
using std::isfinite;
using std::max;
using std::min;

#include "mask_interval.cuh"

#include <catch2/catch.hpp>

#include <random>

namespace {

long long floorDiv(long long X, long long Y) {
  const long long Q = X / Y;
  return (Q * Y != X && ((X < 0) != (Y < 0))) ? Q - 1 : Q;
}

/// mb_floordiv(a, b) against the smallest and largest quotient over the
/// box's points (b's points without 0, which the rule leaves unbounded).
void checkBox(long long ALo, long long AHi, long long BLo, long long BHi) {
  const attnc::IvI R = attnc::mb_floordiv(attnc::mb_i(ALo, AHi), attnc::mb_i(BLo, BHi));
  INFO("a [" << ALo << ", " << AHi << "] b [" << BLo << ", " << BHi << "]");
  if (BLo <= 0 && BHi >= 0) {
    CHECK(R.top);
    return;
  }
  long long Lo = 0, Hi = 0;
  bool First = true;
  // The quotient is monotone in x for a fixed y: the ends of a suffice,
  // and every y of b is visited.
  for (long long Y = BLo; Y <= BHi; ++Y)
    for (long long X : {ALo, AHi}) {
      const long long Q = floorDiv(X, Y);
      Lo = First ? Q : std::min(Lo, Q);
      Hi = First ? Q : std::max(Hi, Q);
      First = false;
    }
  const bool Top = Lo < -2147483648LL || Hi > 2147483647LL;
  REQUIRE(R.top == Top);
  if (!Top) {
    CHECK(R.lo == Lo);
    CHECK(R.hi == Hi);
  }
  // One divisor that an int32 scalar input holds: the generated classes'
  // mb_floordiv_by and mb_mod_by (the host's multiplier, no division)
  // give mb_floordiv's and mb_mod's intervals.
  if (BLo == BHi && !(ALo < -2147483648LL || AHi > 2147483647LL) &&
      BLo >= -2147483648LL && BLo <= 2147483647LL) {
    const int D = int(BLo);
    const unsigned M = attnc::int_div_multiplier(D);
    const attnc::IvI F = attnc::mb_floordiv_by(attnc::mb_i(ALo, AHi), D, M);
    REQUIRE(F.top == R.top);
    if (!F.top) {
      CHECK(F.lo == R.lo);
      CHECK(F.hi == R.hi);
    }
    const attnc::IvI Mod = attnc::mb_mod(attnc::mb_i(ALo, AHi), attnc::mb_i(BLo));
    const attnc::IvI ModBy = attnc::mb_mod_by(attnc::mb_i(ALo, AHi), D, M);
    REQUIRE(ModBy.top == Mod.top);
    if (!Mod.top) {
      CHECK(ModBy.lo == Mod.lo);
      CHECK(ModBy.hi == Mod.hi);
    }
  }
}

} // namespace

TEST_CASE("mask intervals: floordiv by one positive divisor", "[mask][interval]") {
  std::mt19937 Rng(17);
  for (int I = 0; I < 4000; ++I) {
    const long long Lo = (long long)(Rng() % 4001) - 2000;
    const long long Hi = Lo + (long long)(Rng() % 700);
    const long long C = 1 + (long long)(Rng() % 300);
    checkBox(Lo, Hi, C, C);
  }
  // Every point of small boxes against a brute-force scan of x too.
  for (long long C : {1, 2, 3, 7, 128, 256})
    for (long long Lo = -20; Lo <= 20; ++Lo)
      for (long long Hi = Lo; Hi <= Lo + 9; ++Hi) {
        const attnc::IvI R = attnc::mb_floordiv(attnc::mb_i(Lo, Hi), attnc::mb_i(C));
        long long Min = floorDiv(Lo, C), Max = Min;
        for (long long X = Lo; X <= Hi; ++X) {
          Min = std::min(Min, floorDiv(X, C));
          Max = std::max(Max, floorDiv(X, C));
        }
        CHECK(R.lo == Min);
        CHECK(R.hi == Max);
      }
  // Ends at the int range's limits.
  checkBox(-2147483648LL, -2147483600LL, 1, 1);
  checkBox(-2147483648LL, 2147483647LL, 7, 7);
  checkBox(2147483600LL, 2147483647LL, 256, 256);
}

TEST_CASE("mask intervals: floordiv by divisor intervals and negative divisors",
          "[mask][interval]") {
  std::mt19937 Rng(18);
  for (int I = 0; I < 2000; ++I) {
    const long long Lo = (long long)(Rng() % 4001) - 2000;
    const long long Hi = Lo + (long long)(Rng() % 700);
    const long long BLo = (long long)(Rng() % 61) - 30;
    const long long BHi = BLo + (long long)(Rng() % 8);
    checkBox(Lo, Hi, BLo, BHi);
  }
  checkBox(-2147483648LL, -2147483648LL, -1, -1); // leaves the int range: top
  checkBox(10, 20, -3, -3);
}
