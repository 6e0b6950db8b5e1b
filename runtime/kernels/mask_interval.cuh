// Interval arithmetic for the analysed block classification: the device twin
// of compiler/lib/analysis/MaskBounds.cpp, whose comment says why each rule
// is sound. A generated Variant::mask_block_class evaluates its mask with
// these over a block's box.
#ifndef ATTNC_MASK_INTERVAL_CUH
#define ATTNC_MASK_INTERVAL_CUH

#include "attnc/int_div.cuh"

namespace attnc {

/// An fp32 interval. Either end non-finite means "unknown". The lower end is
/// rounded down and the upper end up, so the interval holds what the
/// element path computes at any point of the box, rounded to nearest, with
/// or without FMA contraction.
struct IvF {
  float lo, hi;
};
/// An i32 interval, exact; top when an end leaves the int range (the
/// element path's int arithmetic would overflow there).
struct IvI {
  long long lo, hi;
  bool top;
};
/// The truth values a boolean may take: bit 0 false, bit 1 true.
struct Tri {
  unsigned bits;
};

__device__ __forceinline__ IvF mb_unknown_f() {
  return {__int_as_float(0x7fffffff), __int_as_float(0x7fffffff)};
}
__device__ __forceinline__ bool mb_known(IvF a) {
  return isfinite(a.lo) && isfinite(a.hi);
}
__device__ __forceinline__ IvF mb_f(float x) { return {x, x}; }
__device__ __forceinline__ IvF mb_f(IvF a) { return a; }
/// int to float: round the ends outwards.
__device__ __forceinline__ IvF mb_f(IvI a) {
  if (a.top)
    return mb_unknown_f();
  return {__ll2float_rd(a.lo), __ll2float_ru(a.hi)};
}
__device__ __forceinline__ IvI mb_i(long long lo, long long hi) {
  const bool top = lo < -2147483648LL || hi > 2147483647LL;
  return {lo, hi, top};
}
__device__ __forceinline__ IvI mb_i(long long x) { return mb_i(x, x); }
/// An int32 input's bounds as the bounds buffer (fp32) holds them: the
/// ints' bits (block_mask.cuh's bound_blocks), exact for every int.
__device__ __forceinline__ IvI mb_i_bits(float lo, float hi) {
  return mb_i((long long)__float_as_int(lo), (long long)__float_as_int(hi));
}
__device__ __forceinline__ Tri mb_tri(bool x) { return {x ? 2u : 1u}; }

// ---- arithmetic ----
__device__ __forceinline__ IvF mb_add(IvF a, IvF b) {
  if (!mb_known(a) || !mb_known(b))
    return mb_unknown_f();
  return {__fadd_rd(a.lo, b.lo), __fadd_ru(a.hi, b.hi)};
}
__device__ __forceinline__ IvI mb_add(IvI a, IvI b) {
  if (a.top || b.top)
    return {0, 0, true};
  return mb_i(a.lo + b.lo, a.hi + b.hi);
}
__device__ __forceinline__ IvF mb_sub(IvF a, IvF b) {
  if (!mb_known(a) || !mb_known(b))
    return mb_unknown_f();
  return {__fsub_rd(a.lo, b.hi), __fsub_ru(a.hi, b.lo)};
}
__device__ __forceinline__ IvI mb_sub(IvI a, IvI b) {
  if (a.top || b.top)
    return {0, 0, true};
  return mb_i(a.lo - b.hi, a.hi - b.lo);
}
__device__ __forceinline__ IvF mb_mul(IvF a, IvF b) {
  if (!mb_known(a) || !mb_known(b))
    return mb_unknown_f();
  const float l = fminf(fminf(__fmul_rd(a.lo, b.lo), __fmul_rd(a.lo, b.hi)),
                        fminf(__fmul_rd(a.hi, b.lo), __fmul_rd(a.hi, b.hi)));
  const float h = fmaxf(fmaxf(__fmul_ru(a.lo, b.lo), __fmul_ru(a.lo, b.hi)),
                        fmaxf(__fmul_ru(a.hi, b.lo), __fmul_ru(a.hi, b.hi)));
  return {l, h};
}
__device__ __forceinline__ IvI mb_mul(IvI a, IvI b) {
  if (a.top || b.top)
    return {0, 0, true};
  // Ends within int range: every product fits a long long.
  const long long c0 = a.lo * b.lo, c1 = a.lo * b.hi, c2 = a.hi * b.lo,
                  c3 = a.hi * b.hi;
  return mb_i(min(min(c0, c1), min(c2, c3)), max(max(c0, c1), max(c2, c3)));
}
/// True division (the element path divides as floats); unknown when the
/// divisor's interval holds 0.
__device__ __forceinline__ IvF mb_div(IvF a, IvF b) {
  if (!mb_known(a) || !mb_known(b) || (b.lo <= 0.f && b.hi >= 0.f))
    return mb_unknown_f();
  const float l = fminf(fminf(__fdiv_rd(a.lo, b.lo), __fdiv_rd(a.lo, b.hi)),
                        fminf(__fdiv_rd(a.hi, b.lo), __fdiv_rd(a.hi, b.hi)));
  const float h = fmaxf(fmaxf(__fdiv_ru(a.lo, b.lo), __fdiv_ru(a.lo, b.hi)),
                        fmaxf(__fdiv_ru(a.hi, b.lo), __fdiv_ru(a.hi, b.hi)));
  return {l, h};
}
/// floordiv: the floors of the quotient's ends (floor is monotone); the
/// int quotient is exact, so a single divisor gives the exact interval.
__device__ __forceinline__ IvF mb_floordiv(IvF a, IvF b) {
  const IvF q = mb_div(a, b);
  if (!mb_known(q))
    return q;
  return {floorf(q.lo), floorf(q.hi)};
}
__device__ __forceinline__ long long mb_floor_div_ll(long long a, long long b) {
  const long long q = a / b;
  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
/// x // c for an int x and c > 0, in 32-bit arithmetic (the quotient
/// truncates toward zero; a negative remainder steps it down).
__device__ __forceinline__ int mb_floor_div_pos(int x, int c) {
  const int q = x / c;
  return x - q * c < 0 ? q - 1 : q;
}
__device__ __forceinline__ IvI mb_floordiv(IvI a, IvI b) {
  if (a.top || b.top || (b.lo <= 0 && b.hi >= 0))
    return {0, 0, true};
  // One positive divisor (a chunk length, say): x // c is nondecreasing in
  // x, so the ends' quotients are the interval, in two 32-bit divisions
  // instead of four 64-bit ones (ends not top are ints). The packed
  // kernels evaluate mask_block_class per block and per vote.
  if (b.lo == b.hi && b.lo > 0)
    return mb_i(mb_floor_div_pos(int(a.lo), int(b.lo)), mb_floor_div_pos(int(a.hi), int(b.lo)));
  const long long c0 = mb_floor_div_ll(a.lo, b.lo),
                  c1 = mb_floor_div_ll(a.lo, b.hi),
                  c2 = mb_floor_div_ll(a.hi, b.lo),
                  c3 = mb_floor_div_ll(a.hi, b.hi);
  // -2^31 // -1 leaves the int range: top, as the element path overflows.
  return mb_i(min(min(c0, c1), min(c2, c3)), max(max(c0, c1), max(c2, c3)));
}
/// a mod b for a divisor interval b of one sign, a not within one period
/// of a single divisor: a itself where 0 <= a < b (b > 0; b < a <= 0 for
/// b < 0), else [0, b.hi - 1] ([b.lo + 1, 0]). mb_mod's and mb_mod_by's
/// last rule.
__device__ __forceinline__ IvI mb_mod_periods(IvI a, IvI b) {
  if (b.lo > 0)
    return (a.lo >= 0 && a.hi < b.lo) ? a : mb_i(0, b.hi - 1);
  return (a.hi <= 0 && a.lo > b.hi) ? a : mb_i(b.lo + 1, 0);
}
/// mb_floordiv by one int32 scalar input d with the host's multiplier \p m
/// (int_div.cuh's floordiv_by): x // d is monotone in x, so
/// the ends' quotients are the interval (reversed for d < 0), in 32-bit
/// arithmetic; d = 0, or -2^31 // -1, which leaves the int range, is top as
/// in mb_floordiv. The generated box classes call it where the divisor is
/// such an input (a chunk length), every division a multiply-high.
__device__ __forceinline__ IvI mb_floordiv_by(IvI a, int d, unsigned m) {
  if (a.top || d == 0 || (d == -1 && a.lo == -2147483648LL))
    return {0, 0, true};
  const int q0 = floordiv_by(int(a.lo), d, m), q1 = floordiv_by(int(a.hi), d, m);
  return d > 0 ? mb_i(q0, q1) : mb_i(q1, q0);
}
/// mb_mod by one int32 scalar input d (mb_mod's single-divisor rules, the
/// quotients by floordiv_by).
__device__ __forceinline__ IvI mb_mod_by(IvI a, int d, unsigned m) {
  if (a.top || d == 0)
    return {0, 0, true};
  if (!(d == -1 && a.lo == -2147483648LL)) {
    const int ql = floordiv_by(int(a.lo), d, m), qh = floordiv_by(int(a.hi), d, m);
    if (ql == qh)
      return mb_i(a.lo - (long long)ql * d, a.hi - (long long)ql * d);
  }
  return mb_mod_periods(a, mb_i(d));
}
/// mod, with the divisor's sign: within [0, b) for a divisor interval of
/// b > 0 ([0, b] for floats, where r + b may round to b), a itself when
/// 0 <= a < b, and a - c·q exact for ints over one period of a single
/// divisor c; mirrored for b < 0; no bound when the divisor may be 0.
__device__ __forceinline__ IvF mb_mod(IvF a, IvF b) {
  if (!mb_known(a) || !mb_known(b))
    return mb_unknown_f();
  if (b.lo > 0.f)
    return (a.lo >= 0.f && a.hi < b.lo) ? a : IvF{0.f, b.hi};
  if (b.hi < 0.f)
    return (a.hi <= 0.f && a.lo > b.hi) ? a : IvF{b.lo, 0.f};
  return mb_unknown_f();
}
__device__ __forceinline__ IvI mb_mod(IvI a, IvI b) {
  if (a.top || b.top || (b.lo <= 0 && b.hi >= 0))
    return {0, 0, true};
  if (b.lo == b.hi) {
    const long long ql = mb_floor_div_ll(a.lo, b.lo),
                    qh = mb_floor_div_ll(a.hi, b.lo);
    if (ql == qh)
      return mb_i(a.lo - ql * b.lo, a.hi - ql * b.lo);
  }
  return mb_mod_periods(a, b);
}
__device__ __forceinline__ IvF mb_max(IvF a, IvF b) {
  if (!mb_known(a) || !mb_known(b))
    return mb_unknown_f(); // fmaxf would drop a NaN
  return {fmaxf(a.lo, b.lo), fmaxf(a.hi, b.hi)};
}
__device__ __forceinline__ IvI mb_max(IvI a, IvI b) {
  if (a.top || b.top)
    return {0, 0, true};
  return {max(a.lo, b.lo), max(a.hi, b.hi), false};
}
__device__ __forceinline__ IvF mb_min(IvF a, IvF b) {
  if (!mb_known(a) || !mb_known(b))
    return mb_unknown_f();
  return {fminf(a.lo, b.lo), fminf(a.hi, b.hi)};
}
__device__ __forceinline__ IvI mb_min(IvI a, IvI b) {
  if (a.top || b.top)
    return {0, 0, true};
  return {min(a.lo, b.lo), min(a.hi, b.hi), false};
}
__device__ __forceinline__ IvF mb_neg(IvF a) { return {-a.hi, -a.lo}; }
__device__ __forceinline__ IvI mb_neg(IvI a) {
  if (a.top)
    return a;
  return mb_i(-a.hi, -a.lo);
}
__device__ __forceinline__ IvF mb_abs(IvF a) {
  if (!mb_known(a))
    return mb_unknown_f();
  if (a.lo >= 0.f)
    return a;
  if (a.hi <= 0.f)
    return {-a.hi, -a.lo};
  return {0.f, fmaxf(-a.lo, a.hi)};
}
__device__ __forceinline__ IvI mb_abs(IvI a) {
  if (a.top)
    return a;
  if (a.lo >= 0)
    return a;
  if (a.hi <= 0)
    return mb_i(-a.hi, -a.lo);
  return mb_i(0, max(-a.lo, a.hi));
}
__device__ __forceinline__ IvF mb_relu(IvF a) {
  if (!mb_known(a))
    return mb_unknown_f();
  return {fmaxf(a.lo, 0.f), fmaxf(a.hi, 0.f)};
}
__device__ __forceinline__ IvI mb_relu(IvI a) {
  if (a.top)
    return a;
  return {max(a.lo, 0LL), max(a.hi, 0LL), false};
}

// ---- comparisons: decided only when they hold (fail) for every pair ----
__device__ __forceinline__ Tri mb_decide(bool always_true, bool always_false) {
  return {always_true ? 2u : (always_false ? 1u : 3u)};
}
#define ATTNC_MB_COMPARE(T, KNOWN)                                             \
  __device__ __forceinline__ Tri mb_lt(T a, T b) {                             \
    if (!(KNOWN))                                                              \
      return {3u};                                                             \
    return mb_decide(a.hi < b.lo, a.lo >= b.hi);                               \
  }                                                                            \
  __device__ __forceinline__ Tri mb_le(T a, T b) {                             \
    if (!(KNOWN))                                                              \
      return {3u};                                                             \
    return mb_decide(a.hi <= b.lo, a.lo > b.hi);                               \
  }                                                                            \
  __device__ __forceinline__ Tri mb_gt(T a, T b) { return mb_lt(b, a); }       \
  __device__ __forceinline__ Tri mb_ge(T a, T b) { return mb_le(b, a); }       \
  __device__ __forceinline__ Tri mb_eq(T a, T b) {                             \
    if (!(KNOWN))                                                              \
      return {3u};                                                             \
    return mb_decide(a.lo == a.hi && b.lo == b.hi && a.lo == b.lo,             \
                     a.hi < b.lo || b.hi < a.lo);                              \
  }                                                                            \
  __device__ __forceinline__ Tri mb_ne(T a, T b) {                             \
    const Tri e = mb_eq(a, b);                                                 \
    return {((e.bits & 1u) << 1) | ((e.bits >> 1) & 1u)};                      \
  }
ATTNC_MB_COMPARE(IvF, mb_known(a) && mb_known(b))
ATTNC_MB_COMPARE(IvI, !a.top && !b.top)
#undef ATTNC_MB_COMPARE

// ---- logic and select ----
__device__ __forceinline__ Tri mb_not(Tri a) {
  return {((a.bits & 1u) << 1) | ((a.bits >> 1) & 1u)};
}
__device__ __forceinline__ Tri mb_and(Tri a, Tri b) {
  return {((a.bits & b.bits) & 2u) | ((a.bits | b.bits) & 1u)};
}
__device__ __forceinline__ Tri mb_or(Tri a, Tri b) {
  return {((a.bits | b.bits) & 2u) | ((a.bits & b.bits) & 1u)};
}
__device__ __forceinline__ IvF mb_select(Tri c, IvF a, IvF b) {
  if (c.bits == 2u)
    return a;
  if (c.bits == 1u)
    return b;
  if (!mb_known(a) || !mb_known(b))
    return mb_unknown_f();
  return {fminf(a.lo, b.lo), fmaxf(a.hi, b.hi)};
}
__device__ __forceinline__ IvI mb_select(Tri c, IvI a, IvI b) {
  if (c.bits == 2u)
    return a;
  if (c.bits == 1u)
    return b;
  if (a.top || b.top)
    return {0, 0, true};
  return {min(a.lo, b.lo), max(a.hi, b.hi), false};
}
__device__ __forceinline__ Tri mb_select(Tri c, Tri a, Tri b) {
  if (c.bits == 2u)
    return a;
  if (c.bits == 1u)
    return b;
  return {a.bits | b.bits};
}

/// The block class of a mask whose value over the box is \p m: 0 empty
/// (only false), 2 full (only true), 1 partial.
__device__ __forceinline__ int mb_class(Tri m) {
  return m.bits == 2u ? 2 : (m.bits == 1u ? 0 : 1);
}

} // namespace attnc

#endif
