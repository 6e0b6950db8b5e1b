// Block lists for the backward: the backward's two kernels tile the problem
// differently (the dQ kernel walks key blocks for a query block, the dK/dV
// kernel walks query blocks for a key block), so the mask is classified once
// on a fine grid (classify_blocks of block_mask.cuh) and each kernel's list
// is made by combining fine blocks into its own, coarser ones. In the fused
// dQ mode both lists use the dK/dV tiling and the columns also carry each
// entry's rank (the order of dQ's partial sums, bwd_sm80_fused_dq.cuh).
#ifndef ATTNC_BWD_BLOCK_MASK_CUH
#define ATTNC_BWD_BLOCK_MASK_CUH

#include "attnc/attention_args.cuh"

namespace attnc {

/// The class of coarse block (m, n): 0 empty, 1 partial, 2 full. A fine
/// block past the last key makes it partial (keys past the end must be
/// masked); fine rows past the last query do not exist and are skipped, as
/// classify_blocks ignores rows past the end.
__device__ inline int coarse_class(const BwdListArgs &a, long long group, int m, int n) {
  bool any = false, all = true;
  for (int i = 0; i < a.ratio_m; ++i) {
    const int fm = m * a.ratio_m + i;
    if (fm >= a.fine_m)
      break;
    const unsigned char *row =
        a.classes + (group * a.fine_m + fm) * (long long)a.fine_n;
    for (int j = 0; j < a.ratio_n; ++j) {
      const int fn = n * a.ratio_n + j;
      if (fn >= a.fine_n) {
        all = false;
        break;
      }
      any = any || row[fn] != 0;
      all = all && row[fn] == 2;
    }
  }
  return any ? (all ? 2 : 1) : 0;
}

/// Fused dQ: for each query block m of key block \p n's column (\p list,
/// \p count entries), n's rank among the key blocks visiting m, the number
/// of them above n (m's row list is sorted: a binary search), the order of
/// its contribution to m's dQ sum (bwd_sm80_fused_dq.cuh). The rows' lists
/// were made by an earlier launch on the same tiling.
__device__ inline void column_ranks(const BwdListArgs &a, long long group, int n,
                                    const int *list, int count) {
  int *rank = a.rank + (group * a.n_blocks + n) * (long long)a.m_blocks;
  for (int j = 0; j < count; ++j) {
    const long long row = group * a.m_blocks + (list[j] & 0x3fffffff);
    const int len = a.row_count[row];
    const int *keys = a.row_list + row * a.n_blocks;
    int lo = 0, hi = len; // first entry whose key block is >= n
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if ((keys[mid] & 0x3fffffff) < n)
        lo = mid + 1;
      else
        hi = mid;
    }
    rank[j] = len - 1 - lo;
  }
}

/// grid (ceil(groups·lines / blockDim.x)): one thread lists one coarse row
/// (kTransposed false: the key blocks of a query block, in increasing order)
/// or one coarse column (true: the query blocks of a key block). Entries are
/// the block index with bit 30 set for a full block, as compact_blocks.
template <bool kTransposed>
__device__ void compact_coarse_blocks(const BwdListArgs &a) {
  const int lines = kTransposed ? a.n_blocks : a.m_blocks;
  const int len = kTransposed ? a.m_blocks : a.n_blocks;
  const long long id = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (id >= (long long)a.groups * lines)
    return;
  const long long group = id / lines;
  const int line = static_cast<int>(id % lines);
  int *list = a.list + id * len;
  int count = 0;
  for (int x = 0; x < len; ++x) {
    const int c = kTransposed ? coarse_class(a, group, x, line)
                              : coarse_class(a, group, line, x);
    if (c)
      list[count++] = x | (c == 2 ? (1 << 30) : 0);
  }
  a.count[id] = count;
  if constexpr (kTransposed) {
    if (a.rank)
      column_ranks(a, group, line, list, count);
  }
}

} // namespace attnc

#endif
