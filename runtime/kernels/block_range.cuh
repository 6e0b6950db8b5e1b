// The first and last block of a packed sequence that a mask may keep, found
// by warp votes over boxes of many blocks and then of single blocks, in a
// few steps where a scan would take one per block. Plain C++ apart from the
// vote, which the caller passes, so that the host tests run the same code
// (tests/codegen/VarlenRangeTest.cpp).
#ifndef ATTNC_BLOCK_RANGE_CUH
#define ATTNC_BLOCK_RANGE_CUH

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define ATTNC_RANGE_FN __device__ __forceinline__
#else
#define ATTNC_RANGE_FN inline
#endif

namespace attnc {

/// Lanes of one vote, and the blocks of one coarse box.
constexpr int kRangeLanes = 32;

/// The lowest set bit of a non-zero vote.
ATTNC_RANGE_FN int range_lowest_lane(unsigned v) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  return __ffs(v) - 1;
#else
  return __builtin_ctz(v);
#endif
}

/// The first block in [from, to) for which \p may_keep(n, n + 1) holds, or
/// \p to, skipping the groups of kRangeLanes blocks that one box over the
/// group clears. may_keep(lo, hi) says whether the mask may keep an element
/// of the blocks [lo, hi) (one box over all of them); it must be sound
/// (false only when every element is masked), so that a skipped group holds
/// no kept element. Where it is exact on single blocks and monotone (a box
/// inside a cleared one is cleared: interval rules are), nothing is skipped
/// that a scan of single blocks would visit. vote(pred) is the ballot of
/// pred(lane) over kRangeLanes lanes, the same on every lane; the result is
/// then warp-uniform.
template <class MayKeep, class Vote>
ATTNC_RANGE_FN int first_block_kept(int from, int to, const MayKeep &may_keep,
                                    const Vote &vote) {
  constexpr int L = kRangeLanes;
  // Single blocks of the group [lo, lo + L) ∩ [from, to).
  auto fine = [&](int lo) {
    return vote([&](int lane) {
      const int n = lo + lane;
      return n < to && may_keep(n, n + 1);
    });
  };
  if (to - from <= L) {
    const unsigned v = fine(from);
    return v ? from + range_lowest_lane(v) : to;
  }
  for (int base = from; base < to; base += L * L) {
    // Lane i: the group of L blocks from base + L·i.
    unsigned coarse = vote([&](int lane) {
      const int lo = base + L * lane;
      return lo < to && may_keep(lo, lo + L < to ? lo + L : to);
    });
    while (coarse) {
      const int lo = base + L * range_lowest_lane(coarse);
      coarse &= coarse - 1;
      const unsigned v = fine(lo);
      if (v)
        return lo + range_lowest_lane(v);
    }
  }
  return to;
}

/// One past the last block in [from, to) for which \p may_keep(n, n + 1)
/// holds, or \p from: first_block_kept scanning down.
template <class MayKeep, class Vote>
ATTNC_RANGE_FN int last_block_kept(int from, int to, const MayKeep &may_keep,
                                   const Vote &vote) {
  constexpr int L = kRangeLanes;
  // Single blocks of the group (hi - L, hi] - 1 ∩ [from, to), lane i the
  // block hi - 1 - i.
  auto fine = [&](int hi) {
    return vote([&](int lane) {
      const int n = hi - 1 - lane;
      return n >= from && may_keep(n, n + 1);
    });
  };
  if (to - from <= L) {
    const unsigned v = fine(to);
    return v ? to - range_lowest_lane(v) : from;
  }
  for (int top = to; top > from; top -= L * L) {
    // Lane i: the group of L blocks ending at top - L·i.
    unsigned coarse = vote([&](int lane) {
      const int hi = top - L * lane;
      return hi > from && may_keep(hi - L > from ? hi - L : from, hi);
    });
    while (coarse) {
      const int hi = top - L * range_lowest_lane(coarse);
      coarse &= coarse - 1;
      const unsigned v = fine(hi);
      if (v)
        return hi - range_lowest_lane(v);
    }
  }
  return from;
}

} // namespace attnc

#endif
