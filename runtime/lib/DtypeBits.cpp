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

NormalPool::NormalPool(DType T, std::mt19937_64 &Rng, uint64_t StreamSeed)
    : Pool(1 << 16), State(StreamSeed) {
  std::normal_distribution<double> Normal(0.0, 1.0);
  for (uint16_t &P : Pool)
    P = toDtypeBits(T, Normal(Rng));
}

void NormalPool::fill(std::vector<uint16_t> &Out, size_t N) {
  Out.resize(N);
  for (size_t I = 0; I < N; I += 4) {
    uint64_t Z = (State += 0x9e3779b97f4a7c15ull); // splitmix64
    Z = (Z ^ (Z >> 30)) * 0xbf58476d1ce4e5b9ull;
    Z = (Z ^ (Z >> 27)) * 0x94d049bb133111ebull;
    const uint64_t R = Z ^ (Z >> 31);
    for (size_t J = 0; J < 4 && I + J < N; ++J)
      Out[I + J] = Pool[(R >> (16 * J)) & 0xffff];
  }
}

} // namespace attn::runtime
