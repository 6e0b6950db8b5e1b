// Host conversions between doubles and the 16-bit element formats (f16,
// bf16) of q, k, v and o: random inputs are written with them and kernel
// outputs read back.
#ifndef ATTN_RUNTIME_DTYPEBITS_H
#define ATTN_RUNTIME_DTYPEBITS_H

#include "attn/dsl/Problem.h"

#include <cstdint>

namespace attn::runtime {

/// \p X rounded to nearest even into \p T's 16 bits (X finite).
uint16_t toDtypeBits(DType T, double X);

/// The value of \p T's 16 bits \p B.
double fromDtypeBits(DType T, uint16_t B);

/// \p X rounded to \p T and back: what a kernel reading \p X in \p T sees.
inline double roundToDtype(DType T, double X) {
  return fromDtypeBits(T, toDtypeBits(T, X));
}

} // namespace attn::runtime

#endif
