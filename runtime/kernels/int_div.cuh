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

} // namespace attnc

#endif
