// Small device functions the generated Variant code calls.
#ifndef ATTNC_VARIANT_SUPPORT_CUH
#define ATTNC_VARIANT_SUPPORT_CUH

#include "attnc/int_div.cuh"
#include "attnc/mask_interval.cuh"
#include "attnc/sm80_primitives.cuh"

namespace attnc {

constexpr float kLog2e = 1.4426950408889634f;

/// exp(x - y) as a single FMA feeding exp2: the FlashAttention trick, with
/// the log2(e) factor folded into both operands.
__device__ __forceinline__ float exp_diff(float x, float y) {
  return exp2_fast(fmaf(x, kLog2e, -y * kLog2e));
}

__device__ __forceinline__ float sigmoid(float x) {
  return __fdividef(1.0f, 1.0f + exp2_fast(-x * kLog2e));
}

/// max(x, 0) that keeps a NaN, as the IR's relu does (fmaxf would give 0).
__device__ __forceinline__ float relu(float x) {
  return x != x ? x : fmaxf(x, 0.0f);
}

/// The IR's floordiv and mod (docs/ir-semantics.md): floor division and the
/// remainder with the divisor's sign; a zero divisor gives 0 and a. On
/// int32 int_div.cuh's branch-free form.
__device__ __forceinline__ int floordiv(int a, int b) { return floordiv_int(a, b); }
__device__ __forceinline__ int floormod(int a, int b) { return floormod_int(a, b); }
__device__ __forceinline__ float floordiv(float a, float b) {
  return b == 0.0f ? 0.0f : floorf(a / b);
}
__device__ __forceinline__ float floormod(float a, float b) {
  if (b == 0.0f)
    return a;
  const float r = fmodf(a, b);
  if (r == 0.0f)
    return copysignf(0.0f, b); // as the reference: the divisor's sign
  return ((r < 0.0f) != (b < 0.0f)) ? r + b : r;
}

/// An index clamped into [0, n): rows past the end of a sequence still read
/// a valid element of a per-row or per-key custom input (their results are
/// never stored).
__device__ __forceinline__ long long clamp_index(int i, long long n) {
  return i < 0 ? 0 : (i >= n ? n - 1 : i);
}

} // namespace attnc

#endif
