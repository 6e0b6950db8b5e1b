// Small device functions the generated Variant code calls.
#ifndef ATTNC_VARIANT_SUPPORT_CUH
#define ATTNC_VARIANT_SUPPORT_CUH

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

/// An index clamped into [0, n): rows past the end of a sequence still read
/// a valid element of a per-row or per-key custom input (their results are
/// never stored).
__device__ __forceinline__ long long clamp_index(int i, long long n) {
  return i < 0 ? 0 : (i >= n ? n - 1 : i);
}

} // namespace attnc

#endif
