// Block lists for the backward: the backward's two kernels tile the problem
// differently (the dQ kernel walks key blocks for a query block, the dK/dV
// kernel walks query blocks for a key block), so the mask is classified once
// on a fine grid (classify_blocks of block_mask.cuh) and each kernel's list
// is made by combining fine blocks into its own, coarser ones. In the fused
// dQ mode both lists use the dK/dV tiling and the columns also carry each
// entry's rank (the order of dQ's partial sums, bwd_sm80_fused_dq.cuh).
// Plain C++ apart from the kernel's entry (compact_coarse_blocks), so that
// the host tests run the lists' code (tests/codegen/BlockCompactTest.cpp).
#ifndef ATTNC_BWD_BLOCK_MASK_CUH
#define ATTNC_BWD_BLOCK_MASK_CUH

#include "attnc/attention_args.cuh"
#include "attnc/block_range.cuh"

namespace attnc {

/// The class of coarse block (m, n): 0 empty, 1 partial, 2 full. A fine
/// block past the last key makes it partial (keys past the end must be
/// masked); fine rows past the last query do not exist and are skipped, as
/// classify_blocks ignores rows past the end.
ATTNC_RANGE_FN int coarse_class(const BwdListArgs &a, long long group, int m, int n) {
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

/// Fused dQ: query block \p m's rank among the key blocks visiting it (the
/// number of them above key block \p n: m's row list is sorted, a binary
/// search), the order of n's contribution to m's dQ sum
/// (bwd_sm80_fused_dq.cuh). The rows' lists were made by an earlier launch
/// on the same tiling.
ATTNC_RANGE_FN int column_rank(const BwdListArgs &a, long long group, int m, int n) {
  const long long row = group * a.m_blocks + m;
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
  return len - 1 - lo;
}

/// Line \p id (group · lines + line) of the lists: a coarse row
/// (kTransposed false: the key blocks of a query block, in increasing
/// order) or a coarse column (true: the query blocks of a key block, and
/// in the fused dQ mode each entry's rank), listed by one warp 32 blocks at
/// a time (compact_line, \p warp as there). Entries are visit_entry's.
template <bool kTransposed, class Warp>
ATTNC_RANGE_FN void list_coarse_line(const BwdListArgs &a, long long id, const Warp &warp) {
  const int lines = kTransposed ? a.n_blocks : a.m_blocks;
  const int len = kTransposed ? a.m_blocks : a.n_blocks;
  const long long group = id / lines;
  const int line = static_cast<int>(id % lines);
  int *list = a.list + id * len;
  int *rank = kTransposed && a.rank ? a.rank + id * len : nullptr;
  const int count = compact_line(
      len,
      [&](int x) {
        return kTransposed ? coarse_class(a, group, x, line)
                           : coarse_class(a, group, line, x);
      },
      [&](int slot, int x, int c) {
        list[slot] = visit_entry(x, c);
        if (rank) // each lane ranks its own entry
          rank[slot] = column_rank(a, group, x, line);
      },
      warp);
  warp.each([&](int lane) {
    if (lane == 0)
      a.count[id] = count;
  });
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
/// grid (ceil(groups·lines / warps a CTA)) x (32 · warps a CTA): a warp a
/// line (list_coarse_line); the host picks the CTA's warps so that the
/// grid covers the SMs (listWarpsPerCta). One thread walking a line took
/// 117 us a call at S = 16k for a window mask (H100), 366 us for
/// prefix-LM's long columns with their ranks; a warp takes a line of 256
/// blocks in 8 steps.
template <bool kTransposed>
__device__ void compact_coarse_blocks(const BwdListArgs &a) {
  const int lines = kTransposed ? a.n_blocks : a.m_blocks;
  const long long id = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (id >= (long long)a.groups * lines)
    return; // the whole warp
  list_coarse_line<kTransposed>(a, id, LineWarp{int(threadIdx.x % 32)});
}
#endif

} // namespace attnc

#endif
