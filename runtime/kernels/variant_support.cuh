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

/// tanh(x) = 1 - 2 / (1 + e^(2x)) through the exp2 unit, as sigmoid above:
/// within about 2e-7 of tanh absolutely (the relative error grows where
/// |x| < 1e-3, where tanh(x) is about x), exactly 0 at 0, +-1 past
/// |x| = 45, NaN for NaN. Five instructions, two of them MUFU, where tanhf
/// takes sixteen (its polynomial below |x| = 0.6 and this form both, then a
/// select): a soft cap evaluates it once an element in the forward and once
/// more in the backward.
__device__ __forceinline__ float tanh_fast(float x) {
  return fmaf(-2.0f, __fdividef(1.0f, 1.0f + exp2_fast(x * (2.0f * kLog2e))), 1.0f);
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
/// never stored). The comparisons are 32-bit: n (a sequence length) is loop
/// invariant, so its conversion is hoisted, while 64-bit compares and
/// selects would cost about six instructions a key in a partial block's
/// mask (the document mask's step: one per key of the thread's 32). The
/// result is the 64-bit form's for every n: past INT_MAX nothing is
/// clamped from above, and n <= 0 gives n - 1 as it did.
__device__ __forceinline__ int clamp_index(int i, long long n) {
  const int last = n > 0x7fffffffLL ? 0x7fffffff : static_cast<int>(n) - 1;
  return i < 0 ? 0 : (i > last ? last : i);
}

/// c ? a : b with both operands evaluated first. The generated code spells a
/// select this way when a branch reads a custom input that is the same over
/// the whole tile (a scalar or per-head input): inside a conditional
/// expression its load would be predicated per element and never shared,
/// while evaluated eagerly it is one load for all of a thread's elements.
/// Such a load reads the tile's own head (a scalar reads no memory), so
/// loading where the branch is not taken is always in bounds.
template <class T> __device__ __forceinline__ T select_eager(bool c, T a, T b) {
  return c ? a : b;
}

} // namespace attnc

#endif
