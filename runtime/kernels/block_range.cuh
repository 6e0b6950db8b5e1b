// The first and last block of a packed sequence that a mask may keep, found
// by warp votes over boxes of many blocks and then of single blocks, in a
// few steps where a scan would take one per block; which block of which
// sequence a packed call's CTA takes (packed_block_of); and the warp's
// compaction of one row or column of block classes into a block list
// (compact_line). Plain C++ apart from the warp's vote and prefix sum, which
// the caller passes, so that the host tests run the same code
// (tests/codegen/VarlenRangeTest.cpp, PackedBlocksTest.cpp,
// BlockCompactTest.cpp).
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

/// The set bits of a vote.
ATTNC_RANGE_FN int range_popcount(unsigned v) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  return __popc(v);
#else
  return __builtin_popcount(v);
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

/// The work of a packed call's CTA: block \p index (from 0) of sequence
/// \p seq, or seq = -1 for a CTA past the last sequence's blocks.
struct PackedBlock {
  int seq, index;
};

/// A grid of CTAs over the blocks that packed sequences really have, not
/// the longest sequence's block count per sequence: CTA x takes block
/// x - start(b) of the sequence b whose blocks [start(b), start(b) +
/// ceil(len(b) / block)) hold x, where start(b) is the sum of the block
/// counts of the sequences before b (empty sequences have none). cu is
/// cu_seqlens (batch + 1 entries). The warp finds b by a prefix sum over 32
/// sequences' block counts at a time and a vote: warp.sums(f) is the
/// inclusive prefix sum of f(lane) over the lanes, whose at(l) reads lane
/// l's sum (every lane calls it, converged, with the same l or its own
/// lane); warp.vote(pred) the ballot of pred(lane). The result is the same
/// on every lane. The grid's size is packed_block_bound's, so that only
/// its last CTAs (at most batch) find no block.
template <class Warp>
ATTNC_RANGE_FN PackedBlock packed_block_of(const int *cu, int batch, int block, long long x,
                                           const Warp &warp) {
  constexpr int L = kRangeLanes;
  long long base = 0; // the blocks of sequences [0, b0)
  for (int b0 = 0; b0 < batch; b0 += L) {
    const auto ends = warp.sums([&](int lane) {
      const int b = b0 + lane;
      return b < batch ? (cu[b + 1] - cu[b] + block - 1) / block : 0;
    });
    // The sequences of this group whose blocks end at or before x: a
    // prefix of the group, since their ends increase.
    const unsigned done = warp.vote([&](int lane) {
      const long long end = base + ends.at(lane); // every lane reads, converged
      return b0 + lane < batch && end <= x;
    });
    const int n = range_popcount(done);
    const int live = batch - b0 < L ? batch - b0 : L;
    if (n < live) {
      const long long start = base + (n > 0 ? ends.at(n - 1) : 0);
      return {b0 + n, int(x - start)};
    }
    base += ends.at(L - 1);
  }
  return {-1, 0};
}

/// packed_block_of with the sequences of a batch of at most 32 taken
/// longest first: by block count, then by index. Its CTAs are the same
/// blocks, each sequence's still in order and contiguous; only the
/// sequences' order changes. Where a call's CTAs wait for each other within
/// a sequence (the backward's dQ turns), neighbours of similar lengths let a
/// sequence's CTAs start together, as a dense batch's do: in a batch of 32
/// sequences of lengths in [64, 8192] in random order, the unmasked backward
/// ran 0.938-0.945x dense, and 0.963-0.970x so (H200, 2026-11-30). The
/// ranking costs each warp about 200 instructions, which a CTA of a few
/// short steps would feel: a larger batch, or one whose longest sequence
/// (\p max_len, the call's bound) has fewer than kSortMinBlocks blocks,
/// keeps the given order (packed_block_of). warp.values(f) holds f(lane)
/// (at(l) reads lane l's, every lane converged, with the same l or its own
/// lane).
constexpr int kSortMinBlocks = 8;

template <class Warp>
ATTNC_RANGE_FN PackedBlock packed_block_of_sorted(const int *cu, int batch, int block,
                                                  int max_len, long long x,
                                                  const Warp &warp) {
  constexpr int L = kRangeLanes;
  if (batch > L || (max_len + block - 1) / block < kSortMinBlocks)
    return packed_block_of(cu, batch, block, x, warp);
  const auto count = warp.values([&](int lane) {
    return lane < batch ? (cu[lane + 1] - cu[lane] + block - 1) / block : 0;
  });
  // The blocks before lane's sequence in the sorted order: those of the
  // sequences with more blocks, or as many and a lower index.
  const auto start = warp.values([&](int lane) {
    const int mine = count.at(lane);
    int before = 0;
    for (int l = 0; l < L; ++l) {
      const int c = count.at(l);
      before += c > mine || (c == mine && l < lane) ? c : 0;
    }
    return before;
  });
  // The starts partition [0, total): one lane holds x, none past the
  // blocks (the bound's spare CTAs). Both reads before the test: a shuffle
  // is made by every lane, never behind a short-circuit (a lane left out of
  // one hangs the warp).
  const unsigned v = warp.vote([&](int lane) {
    const int s = start.at(lane), c = count.at(lane);
    return x >= s && x < s + c;
  });
  if (v == 0)
    return {-1, 0};
  const int lane = range_lowest_lane(v);
  return {lane, int(x - start.at(lane))};
}

/// An upper bound on the blocks of \p batch packed sequences of \p total
/// tokens in all, none longer than \p max_len: the grid of
/// packed_block_of. Each sequence rounds up by less than one block.
ATTNC_RANGE_FN long long packed_block_bound(long long total, long long batch, int block,
                                            long long max_len) {
  const long long by_total = (total + batch * (block - 1)) / block;
  const long long by_max = batch * ((max_len + block - 1) / block);
  return by_total < by_max ? by_total : by_max;
}

/// A block list's entry: the block's index, bit 30 set for a full block
/// (class 2; 1 is partial). BlockVisits (block_mask.cuh) decodes it.
ATTNC_RANGE_FN int visit_entry(int index, int cls) {
  return index | (cls == 2 ? (1 << 30) : 0);
}

/// The block list of one line (a query block's key blocks, or a key block's
/// query blocks): the blocks x in [0, len) whose class_of(x) is not 0 (0
/// empty, 1 partial, 2 full), in increasing order, kRangeLanes at a time,
/// lane i classifying block x0 + i; each kept block's place is the count
/// before its group plus the kept lanes below it in the group's vote, so
/// that a warp lists a line in len / 32 steps where one thread took len.
/// put(slot, x, cls) stores block x's entry at list position slot (its
/// caller's lane's block only on the device). warp.values(f) holds f(lane)
/// for the calling lane (on the host: every lane), read back by at(lane);
/// warp.vote(pred) is the ballot of pred(lane); warp.each(g) runs g(lane)
/// for the calling lane (on the host: every lane, in order). Returns the
/// count, the same on every lane (all lanes converged).
template <class Warp, class ClassOf, class Put>
ATTNC_RANGE_FN int compact_line(int len, const ClassOf &class_of, const Put &put,
                                const Warp &warp) {
  constexpr int L = kRangeLanes;
  int count = 0;
  for (int x0 = 0; x0 < len; x0 += L) {
    const auto cls = warp.values([&](int lane) {
      const int x = x0 + lane;
      return x < len ? class_of(x) : 0;
    });
    const unsigned kept = warp.vote([&](int lane) { return cls.at(lane) != 0; });
    warp.each([&](int lane) {
      const int c = cls.at(lane);
      if (c)
        put(count + range_popcount(kept & ((1u << lane) - 1u)), x0 + lane, c);
    });
    count += range_popcount(kept);
  }
  return count;
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
/// compact_line's warp on the device: each lane holds and runs its own.
struct LineWarp {
  int lane;
  struct Value {
    int mine;
    __device__ __forceinline__ int at(int) const { return mine; }
  };
  template <class F> __device__ __forceinline__ Value values(const F &f) const {
    return {f(lane)};
  }
  template <class Pred> __device__ __forceinline__ unsigned vote(const Pred &pred) const {
    return __ballot_sync(0xffffffffu, pred(lane));
  }
  template <class G> __device__ __forceinline__ void each(const G &g) const { g(lane); }
};
#endif

} // namespace attnc

#endif
