// The host's f16 / bf16 conversions: exact bit patterns, rounding to nearest
// even, and round trips, as the random inputs and the tuners' checks use them.
#include "attn/runtime/DtypeBits.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace attn;
using namespace attn::runtime;

TEST_CASE("dtype bits: known patterns", "[runtime][dtype]") {
  CHECK(toDtypeBits(DType::F16, 1.0) == 0x3c00);
  CHECK(toDtypeBits(DType::F16, -2.0) == 0xc000);
  CHECK(toDtypeBits(DType::F16, 65504.0) == 0x7bff);
  CHECK(toDtypeBits(DType::BF16, 1.0) == 0x3f80);
  CHECK(toDtypeBits(DType::BF16, -2.0) == 0xc000);
  CHECK(fromDtypeBits(DType::F16, 0x3555) == Approx(0.333251953125));
  CHECK(fromDtypeBits(DType::BF16, 0x3eab) == Approx(0.333984375));
  CHECK(fromDtypeBits(DType::F16, 0x0001) == std::ldexp(1.0, -24));
}

TEST_CASE("dtype bits: round to nearest even", "[runtime][dtype]") {
  // bf16 keeps 8 significant bits: 1 + 2^-8 is a tie between 1 and
  // 1 + 2^-7 and goes to the even one, 1; 1 + 3·2^-8 goes up to 1 + 2^-6.
  CHECK(roundToDtype(DType::BF16, 1.0 + std::ldexp(1.0, -8)) == 1.0);
  CHECK(roundToDtype(DType::BF16, 1.0 + 3 * std::ldexp(1.0, -8)) ==
        1.0 + std::ldexp(1.0, -6));
  // f16 keeps 11: the same at 2^-11.
  CHECK(roundToDtype(DType::F16, 1.0 + std::ldexp(1.0, -11)) == 1.0);
  CHECK(roundToDtype(DType::F16, 1.0 + 3 * std::ldexp(1.0, -11)) ==
        1.0 + std::ldexp(1.0, -9));
}

TEST_CASE("dtype bits: every pattern of a finite value round-trips",
          "[runtime][dtype]") {
  for (DType T : {DType::F16, DType::BF16}) {
    unsigned Checked = 0;
    for (uint32_t B = 0; B < 0x10000; ++B) {
      double X = fromDtypeBits(T, uint16_t(B));
      if (!std::isfinite(X) || (X == 0 && B != 0))
        continue; // NaNs, infinities and -0 have no unique finite value
      INFO("dtype " << int(T) << " bits " << B);
      REQUIRE(toDtypeBits(T, X) == B);
      ++Checked;
    }
    CHECK(Checked > 60000);
  }
}

TEST_CASE("NormalPool: the same seeds give the same normal values",
          "[runtime][dtype]") {
  for (DType T : {DType::F16, DType::BF16}) {
    std::mt19937_64 R1(11), R2(11);
    NormalPool A(T, R1, 5), B(T, R2, 5);
    // Both generators were advanced by the pool's draws alike.
    CHECK(R1() == R2());
    std::vector<uint16_t> X, Y;
    A.fill(X, 100003); // not a multiple of four
    B.fill(Y, 100003);
    REQUIRE(X.size() == 100003);
    CHECK(X == Y);
    A.fill(Y, 100003); // the stream goes on: other values
    CHECK(X != Y);
    double Sum = 0, Sq = 0;
    for (uint16_t V : X) {
      double D = fromDtypeBits(T, V);
      REQUIRE(std::isfinite(D));
      Sum += D;
      Sq += D * D;
    }
    const double Mean = Sum / X.size(), Var = Sq / X.size() - Mean * Mean;
    CHECK(std::abs(Mean) < 0.02);
    CHECK(std::abs(Var - 1.0) < 0.03);
  }
}
