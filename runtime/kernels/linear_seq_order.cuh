// linear_seq_order: the longest-first order of a packed batch's sequences
// and the packed backward state passes' CTA jobs in that order. Plain C++
// (each CTA ranks the lengths in shared memory, no host copy of cu_seqlens
// and no workspace), so that the host test (tests/linear/LinearOrderTest.cpp)
// runs the same code.
#ifndef ATTNC_LINEAR_SEQ_ORDER_CUH
#define ATTNC_LINEAR_SEQ_ORDER_CUH

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define ATTNC_ORDER_FN __device__ __forceinline__
#else
#define ATTNC_ORDER_FN inline
#endif

namespace attnc {
namespace lin {

/// The rank of sequence \p i among the \p n lengths \p len, longest first,
/// ties by index: order[rank(i)] = i is a permutation of [0, n).
ATTNC_ORDER_FN int longest_first_rank(const int *len, int n, int i) {
  const int li = len[i];
  int rank = 0;
  for (int j = 0; j < n; ++j)
    rank += len[j] > li || (len[j] == li && j < i);
  return rank;
}

/// One CTA of the packed backward's state passes: the rank of its sequence
/// in the longest-first order, its value head and its pass part (blockIdx.z
/// of the padded grid: forward parts, then reverse ones).
struct StateJob {
  int rank, h, z;
};

/// The job of state-pass CTA \p l = blockIdx.y + gridDim.y · blockIdx.z
/// (the grid's CTAs in launch order, the value slice blockIdx.x aside) of a
/// grid of seqs·heads rows and \p zparts parts: all of the longest
/// sequence's (head, part) CTAs first, then the next one's. The CTAs start
/// about in launch order and each one's time is its sequence's chunks, so
/// the longest start first and the last wave is the short sequences
/// (list scheduling, longest job first) instead of whichever came last in
/// cu_seqlens.
ATTNC_ORDER_FN StateJob state_job(long long l, int heads, int zparts) {
  const long long per = (long long)heads * zparts;
  const int rem = int(l % per);
  return {int(l / per), rem % heads, rem / heads};
}

} // namespace lin
} // namespace attnc

#endif
