// f16 / bf16 bits from and to doubles on the host.
#include "attn/runtime/DtypeBits.h"

#include <cstring>

namespace attn::runtime {

uint16_t toDtypeBits(DType T, double X) {
  if (T == DType::F16) {
    _Float16 H = static_cast<_Float16>(static_cast<float>(X));
    uint16_t B;
    std::memcpy(&B, &H, 2);
    return B;
  }
  // bf16: the top half of the float, rounded to nearest even.
  float F = static_cast<float>(X);
  uint32_t U;
  std::memcpy(&U, &F, 4);
  U += 0x7fffu + ((U >> 16) & 1u);
  return static_cast<uint16_t>(U >> 16);
}

double fromDtypeBits(DType T, uint16_t B) {
  if (T == DType::F16) {
    _Float16 H;
    std::memcpy(&H, &B, 2);
    return static_cast<double>(H);
  }
  uint32_t U = uint32_t(B) << 16;
  float F;
  std::memcpy(&F, &U, 4);
  return F;
}

} // namespace attn::runtime
