// The IR's int32 floordiv and mod without branches: the numerator folded
// to [0, 2^31] by the quotient's sign, then one unsigned division. The
// signed division's sign fix-up and the zero-divisor test took a branch
// region per element, which ptxas neither interleaves with the next
// element's nor shares the divisor's reciprocal across (a chunked mask's
// partial blocks in fwd_sm90, whose step now evaluates the elements
// unconditionally). Plain C++, so that the host tests run the same code
// (tests/codegen/IntDivTest.cpp).
#ifndef ATTNC_INT_DIV_CUH
#define ATTNC_INT_DIV_CUH

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define ATTNC_DIV_FN __device__ __forceinline__
#else
#define ATTNC_DIV_FN inline
#endif

namespace attnc {

/// floor(a / b) for int32 (docs/ir-semantics.md): 0 when b = 0;
/// floordiv(-2^31, -1) is not defined. floor(a / b) = floor(a' / |b|)
/// with a' = a·sign(b), within [-2^31 + 1, 2^31]; with s all ones when
/// a' < 0, n = a' ^ s is a' or -a' - 1, within [0, 2^31] and so an
/// unsigned int, and the floor is q = n / |b| for a' >= 0 and -1 - q = ~q
/// below. Bit operations and no selects on the divisor's sign, which the
/// compiler would turn into a branch per element (and then repeat a row's
/// quotient in every branch instead of sharing it).
ATTNC_DIV_FN int floordiv_int(int a, int b) {
  const unsigned sb = unsigned(b >> 31);        // all ones when b < 0
  const unsigned ap = (unsigned(a) ^ sb) - sb;  // a' modulo 2^32
  // a' = 2^31 (a = -2^31, b < 0) reads as negative; it is not.
  const unsigned big = a == -2147483647 - 1 ? sb : 0u;
  const unsigned s = unsigned(int(ap) >> 31) & ~big;
  const unsigned d = ((unsigned(b) ^ sb) - sb) + (b == 0 ? 1u : 0u);
  const int q = int(((ap ^ s) / d) ^ s);
  return b == 0 ? 0 : q;
}

/// a - b·floordiv(a, b), with the divisor's sign; a when b = 0 (the
/// quotient is then 0). Exact in wrapping arithmetic: the true remainder
/// fits an int.
ATTNC_DIV_FN int floormod_int(int a, int b) {
  return int(unsigned(a) - unsigned(b) * unsigned(floordiv_int(a, b)));
}

/// ceil(log2(d)) for d >= 1 (0 for d = 1).
ATTNC_DIV_FN int ceil_log2_u32(unsigned d) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  return d <= 1u ? 0 : 32 - __clz(int(d - 1u));
#else
  return d <= 1u ? 0 : 32 - __builtin_clz(d - 1u);
#endif
}

/// The multiplier of floordiv_by for a divisor d (the host computes it
/// once a call for each int32 scalar input, inputSlots): with l =
/// ceil(log2 |d|), m = floor(2^32 · (2^l - |d|) / |d|) + 1, at least 1 and
/// below 2^32; 0 for d = 0.
ATTNC_DIV_FN unsigned int_div_multiplier(int d) {
  if (d == 0)
    return 0u;
  const unsigned long long ad = d < 0 ? 0ull - (unsigned long long)(long long)d
                                      : (unsigned long long)d;
  const int l = ceil_log2_u32(unsigned(ad));
  return unsigned((((1ull << l) - ad) << 32) / ad + 1ull);
}

/// floordiv_int(a, d) by a divisor whose multiplier \p m the host computed
/// (int_div_multiplier), with no division: floordiv_int's folding gives n
/// in [0, 2^31] and the floor as q = n / |d| or ~q; q = (umulhi(n, m) + n)
/// >> l exactly for every n < 2^32 (division by invariant integers, the
/// round-up multiplier), and t + n cannot wrap since t < n <= 2^31. A
/// multiply-high, an add, shifts and bit operations where a division takes
/// a reciprocal on the MUFU unit, conversions and corrections; d = 0 gives
/// 0. \p m must be d's multiplier: inputSlots writes it beside every int32
/// scalar (no test here: a trap in the element loop made ptxas serialise
/// the forward's wgmma).
ATTNC_DIV_FN int floordiv_by(int a, int d, unsigned m) {
  const unsigned sb = unsigned(d >> 31);
  const unsigned ap = (unsigned(a) ^ sb) - sb;
  const unsigned big = a == -2147483647 - 1 ? sb : 0u;
  const unsigned s = unsigned(int(ap) >> 31) & ~big;
  const unsigned n = ap ^ s;
  const unsigned ad = (unsigned(d) ^ sb) - sb;
  const unsigned t = unsigned(((unsigned long long)n * m) >> 32);
  const int q = int(((t + n) >> ceil_log2_u32(ad)) ^ s);
  return d == 0 ? 0 : q;
}

/// floormod_int(a, d) through floordiv_by.
ATTNC_DIV_FN int floormod_by(int a, int d, unsigned m) {
  return int(unsigned(a) - unsigned(d) * unsigned(floordiv_by(a, d, m)));
}

} // namespace attnc

#endif
