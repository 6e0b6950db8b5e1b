// Host conversions between doubles and the 16-bit element formats (f16,
// bf16) of q, k, v and o: random inputs are written with them and kernel
// outputs read back.
#ifndef ATTN_RUNTIME_DTYPEBITS_H
#define ATTN_RUNTIME_DTYPEBITS_H

#include "attn/dsl/Problem.h"

#include <cstdint>
#include <random>
#include <vector>

namespace attn::runtime {

/// \p X rounded to nearest even into \p T's 16 bits (X finite).
uint16_t toDtypeBits(DType T, double X);

/// The value of \p T's 16 bits \p B.
double fromDtypeBits(DType T, uint16_t B);

/// \p X rounded to \p T and back: what a kernel reading \p X in \p T sees.
inline double roundToDtype(DType T, double X) {
  return fromDtypeBits(T, toDtypeBits(T, X));
}

/// Standard-normal values in \p T's 16 bits at memory speed, for the large
/// random inputs of tuning and benchmarks: a pool of 64 Ki normal draws
/// (std::normal_distribution on \p Rng, which the caller may go on using),
/// then each element picked from it by 16 bits of a splitmix64 stream
/// started at \p StreamSeed, four per 64-bit draw. Drawing every element
/// would take the host minutes at B·S = 16k, H = 32, D = 128. The same
/// seeds give the same values.
class NormalPool {
public:
  NormalPool(DType T, std::mt19937_64 &Rng, uint64_t StreamSeed);
  /// \p Out resized to \p N and filled with the next \p N picks.
  void fill(std::vector<uint16_t> &Out, size_t N);

private:
  std::vector<uint16_t> Pool;
  uint64_t State;
};

} // namespace attn::runtime

#endif
