// Block classification (the FlexAttention BlockMask idea): once per problem,
// each (query block, key block) is found empty, partial or full by
// evaluating the variant's mask on every element; the forward then skips
// empty blocks and evaluates the mask only on partial ones.
#ifndef ATTNC_BLOCK_MASK_CUH
#define ATTNC_BLOCK_MASK_CUH

#include "attnc/attention_args.cuh"

namespace attnc {

/// grid (n_blocks, m_blocks, groups), any block size. Keys past seq_kv make
/// a block partial, never full; rows past seq_q are ignored (never stored).
template <class Variant, int kBlockM, int kBlockN>
__device__ void classify_blocks(const MaskArgs &a, const typename Variant::Inputs &in) {
  const int n = blockIdx.x, m = blockIdx.y, group = blockIdx.z;
  const int b = a.mask_per_head ? group / a.heads : 0;
  const int h = a.mask_per_head ? group % a.heads : 0;
  bool any = false, all = true;
  for (int i = threadIdx.x; i < kBlockM * kBlockN; i += blockDim.x) {
    const int q = m * kBlockM + i / kBlockN, k = n * kBlockN + i % kBlockN;
    if (q >= a.seq_q)
      continue; // rows past the end are never stored
    const bool keep = k < a.seq_kv && Variant::mask(in, b, h, q, k);
    any = any || keep;
    all = all && keep;
  }
  any = __syncthreads_or(any);
  all = __syncthreads_and(all);
  if (threadIdx.x == 0)
    a.classes[((long long)group * a.m_blocks + m) * a.n_blocks + n] =
        any ? (all ? 2 : 1) : 0;
}

/// grid (ceil(m_blocks*groups / blockDim.x)): one thread compacts one row
/// of classes into a count and an ordered list of blocks to visit.
__device__ inline void compact_blocks(const MaskArgs &a) {
  const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long groups = a.mask_per_head ? (long long)a.batch * a.heads : 1;
  if (row >= groups * a.m_blocks)
    return;
  const unsigned char *c = a.classes + row * a.n_blocks;
  int *list = a.block_list + row * a.n_blocks;
  int count = 0;
  for (int n = 0; n < a.n_blocks; ++n)
    if (c[n])
      list[count++] = n | (c[n] == 2 ? (1 << 30) : 0);
  a.block_count[row] = count;
}

/// The blocks a CTA visits, in order: for a masked variant the entries of
/// a block list (the block index, bit 30 set when the classification found
/// every element kept: compact_blocks and the backward's list kernels write
/// them so), else every block, entry j being j.
template <bool kHasMask> struct BlockVisits {
  int count;
  const int *list;
  __device__ __forceinline__ int at(int j, bool &full) const {
    return decode(entry(j), full);
  }
  /// The raw entry \p j (0 past the end), for loading ahead of its use.
  __device__ __forceinline__ int entry(int j) const {
    if constexpr (kHasMask)
      return j < count ? list[j] : 0;
    else
      return j;
  }
  /// The block index of entry \p e. Without a mask \p full is true: the
  /// caller checks the sequence's end (per element, or per block).
  __device__ static __forceinline__ int decode(int e, bool &full) {
    if constexpr (kHasMask) {
      full = (e >> 30) & 1;
      return e & 0x3fffffff;
    } else {
      full = true;
      return e;
    }
  }
};

} // namespace attnc

#endif
