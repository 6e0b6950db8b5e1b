// Block classification (the FlexAttention BlockMask idea): once per problem,
// each (query block, key block) is found empty, partial or full, from
// interval bounds over the block's box where the compiler's mask analysis
// proved them sound (Variant::kMaskAnalysed), else by evaluating the mask
// on every element; the forward then skips empty blocks and evaluates the
// mask only on partial ones.
#ifndef ATTNC_BLOCK_MASK_CUH
#define ATTNC_BLOCK_MASK_CUH

#include "attnc/attention_args.cuh"
#include "attnc/block_range.cuh"

namespace attnc {

/// The classification group of batch·head \p bh: 0 with one shared
/// classification (grouping 0), the batch (1) or bh itself (2).
__device__ __forceinline__ long long mask_group(int grouping, int bh, int heads) {
  return grouping == 2 ? bh : (grouping == 1 ? bh / heads : 0);
}

/// The batch and head a classification group stands for (0 for what the
/// grouping shares: the mask reads neither).
__device__ __forceinline__ void mask_group_coords(int grouping, long long group,
                                                  int heads, int &b, int &h) {
  b = grouping == 2 ? int(group / heads) : (grouping == 1 ? int(group) : 0);
  h = grouping == 2 ? int(group % heads) : 0;
}

/// Whether \p Variant bounds int32 inputs as ints (it then has
/// kMaskBoundsInt, mask_bound_is_int and mask_bound_int; MaskClassifier.cpp
/// writes them only where a bounded input is int32).
template <class V, class = void> struct mask_bounds_int {
  static constexpr bool value = false;
};
template <class V>
struct mask_bounds_int<V, decltype(void(V::kMaskBoundsInt))> {
  static constexpr bool value = V::kMaskBoundsInt;
};

/// Phase 0 for an int32 input: its minimum and maximum as ints, stored as
/// their bits (an int past 2^24 has no exact float), read back by
/// attnc::mb_i_bits.
template <class Variant, int kBlockM, int kBlockN>
__device__ void bound_int_line(const MaskArgs &a,
                               const typename Variant::Inputs &in, int i,
                               int b, int h, int first, int end, int lane,
                               float *out) {
  int lo = 0x7fffffff, hi = -0x7fffffff - 1;
  for (int x = first + lane; x < end; x += 32) {
    const int v = Variant::mask_bound_int(in, i, b, h, x);
    lo = min(lo, v);
    hi = max(hi, v);
  }
  for (int o = 16; o > 0; o /= 2) {
    lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
  if (lane == 0) {
    out[0] = __int_as_float(lo);
    out[1] = __int_as_float(hi);
  }
}

/// Analysed masks, phase 0. grid (ceil(bound_lines / 4), kMaskBounds,
/// groups) x 128: one warp reduces bounded input blockIdx.y over one row
/// block (or key block) of a group to its minimum and maximum. Rows and keys
/// past the sequence's end are not read. A block holding a NaN or an
/// infinity gets NaN bounds, which the interval rules treat as unknown.
template <class Variant, int kBlockM, int kBlockN>
__device__ void bound_blocks(const MaskArgs &a, const typename Variant::Inputs &in) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int line = blockIdx.x * 4 + warp, i = blockIdx.y;
  const long long group = blockIdx.z;
  const bool by_key = Variant::mask_bound_by_key(i);
  if (line >= (by_key ? a.n_blocks : a.m_blocks))
    return; // the whole warp
  int b, h;
  mask_group_coords(a.mask_grouping, group, a.heads, b, h);
  const int first = line * (by_key ? kBlockN : kBlockM);
  const int end = min(first + (by_key ? kBlockN : kBlockM),
                      by_key ? a.seq_kv : a.seq_q);
  if constexpr (mask_bounds_int<Variant>::value) {
    if (Variant::mask_bound_is_int(i)) {
      bound_int_line<Variant, kBlockM, kBlockN>(
          a, in, i, b, h, first, end, lane,
          a.bounds + (((long long)i * gridDim.z + group) * a.bound_lines +
                      line) * 2);
      return;
    }
  }
  float lo = __int_as_float(0x7f800000), hi = __int_as_float(0xff800000);
  bool finite = true;
  for (int x = first + lane; x < end; x += 32) {
    const float v = Variant::mask_bound_value(in, i, b, h, x);
    finite = finite && isfinite(v);
    lo = fminf(lo, v);
    hi = fmaxf(hi, v);
  }
  for (int o = 16; o > 0; o /= 2) {
    lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
  finite = __all_sync(0xffffffffu, finite);
  if (lane == 0) {
    float *out = a.bounds + (((long long)i * gridDim.z + group) * a.bound_lines +
                             line) * 2;
    out[0] = finite ? lo : __int_as_float(0x7fffffff);
    out[1] = finite ? hi : __int_as_float(0x7fffffff);
  }
}

/// Block (m, n)'s bound of each of the mask's bounded inputs, from the
/// lines bound_blocks wrote (a key block's line for a per-key input, the
/// query block's otherwise).
template <class Variant>
__device__ __forceinline__ void load_block_bounds(const MaskArgs &a, long long group,
                                                  int m, int n, float *lo, float *hi) {
#pragma unroll
  for (int i = 0; i < Variant::kMaskBounds; ++i) {
    const int line = Variant::mask_bound_by_key(i) ? n : m;
    const float *bd = a.bounds + (((long long)i * gridDim.z + group) *
                                      a.bound_lines + line) * 2;
    lo[i] = bd[0];
    hi[i] = bd[1];
  }
}

/// Analysed masks, phase 1. grid (ceil(m_blocks·n_blocks / 256), 1, groups)
/// x 256: one thread classifies one block from its box and the bounds of
/// phase 0 (Variant::mask_block_class), with no element evaluation. The box
/// ends at the last row and key of the sequences; keys past seq_kv make a
/// full block partial, as in the element path.
template <class Variant, int kBlockM, int kBlockN>
__device__ void classify_from_bounds(const MaskArgs &a,
                                     const typename Variant::Inputs &in) {
  const long long cell = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (cell >= (long long)a.m_blocks * a.n_blocks)
    return;
  const int m = int(cell / a.n_blocks), n = int(cell % a.n_blocks);
  const long long group = blockIdx.z;
  int b, h;
  mask_group_coords(a.mask_grouping, group, a.heads, b, h);
  constexpr int kBounds = Variant::kMaskBounds > 0 ? Variant::kMaskBounds : 1;
  float lo[kBounds], hi[kBounds];
  load_block_bounds<Variant>(a, group, m, n, lo, hi);
  const int q_lo = m * kBlockM, q_hi = min(q_lo + kBlockM, a.seq_q) - 1;
  const int k_lo = n * kBlockN, k_end = k_lo + kBlockN;
  int c = Variant::mask_block_class(in, b, h, q_lo, q_hi, k_lo,
                                    min(k_end, a.seq_kv) - 1, lo, hi);
  if (c == 2 && k_end > a.seq_kv)
    c = 1; // keys past the end must be masked
  a.classes[(group * a.m_blocks + m) * a.n_blocks + n] = (unsigned char)c;
}

/// Analysed masks, phase 2: phase 1 and compact_blocks in one launch, for
/// the forward's lists (no classes written). grid (ceil(m_blocks / 4), 1,
/// groups) x 128: one warp per query block, whose lanes classify 32 key
/// blocks at a time (as classify_from_bounds) and place the visited ones
/// in order by a ballot (compact_line). One launch instead of two, and no
/// byte per block written and read back: at S = 16k the forward of a
/// chunked or window mask takes about 0.3 ms, so each launch counts against
/// the classification's 5%.
template <class Variant, int kBlockM, int kBlockN>
__device__ void classify_rows(const MaskArgs &a, const typename Variant::Inputs &in) {
  const int lane = threadIdx.x % 32;
  const int m = blockIdx.x * 4 + threadIdx.x / 32;
  if (m >= a.m_blocks)
    return; // the whole warp
  const long long group = blockIdx.z;
  int b, h;
  mask_group_coords(a.mask_grouping, group, a.heads, b, h);
  const long long row = group * a.m_blocks + m;
  int *list = a.block_list + row * a.n_blocks;
  const int q_lo = m * kBlockM, q_hi = min(q_lo + kBlockM, a.seq_q) - 1;
  constexpr int kBounds = Variant::kMaskBounds > 0 ? Variant::kMaskBounds : 1;
  const int count = compact_line(
      a.n_blocks,
      [&](int n) {
        float lo[kBounds], hi[kBounds];
        load_block_bounds<Variant>(a, group, m, n, lo, hi);
        const int k_lo = n * kBlockN, k_end = k_lo + kBlockN;
        int c = Variant::mask_block_class(in, b, h, q_lo, q_hi, k_lo,
                                          min(k_end, a.seq_kv) - 1, lo, hi);
        if (c == 2 && k_end > a.seq_kv)
          c = 1; // keys past the end must be masked
        return c;
      },
      [&](int slot, int n, int c) { list[slot] = visit_entry(n, c); }, LineWarp{lane});
  if (lane == 0)
    a.block_count[row] = count;
}

/// Element-evaluated masks: grid (n_blocks, m_blocks, groups), any block
/// size. Keys past seq_kv make a block partial, never full; rows past seq_q
/// are ignored (never stored). Analysed masks go to the phase a.phase of
/// theirs (bound_blocks, then classify_from_bounds or classify_rows).
template <class Variant, int kBlockM, int kBlockN>
__device__ void classify_blocks(const MaskArgs &a, const typename Variant::Inputs &in) {
  if constexpr (Variant::kHasMask) {
    if constexpr (Variant::kMaskAnalysed) {
      if (a.phase == 0)
        bound_blocks<Variant, kBlockM, kBlockN>(a, in);
      else if (a.phase == 1)
        classify_from_bounds<Variant, kBlockM, kBlockN>(a, in);
      else
        classify_rows<Variant, kBlockM, kBlockN>(a, in);
      return;
    }
  }
  const int n = blockIdx.x, m = blockIdx.y, group = blockIdx.z;
  int b, h;
  mask_group_coords(a.mask_grouping, group, a.heads, b, h);
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
  const long long groups = a.mask_grouping == 2
                               ? (long long)a.batch * a.heads
                               : (a.mask_grouping == 1 ? a.batch : 1);
  if (row >= groups * a.m_blocks)
    return;
  const unsigned char *c = a.classes + row * a.n_blocks;
  int *list = a.block_list + row * a.n_blocks;
  int count = 0;
  for (int n = 0; n < a.n_blocks; ++n)
    if (c[n])
      list[count++] = visit_entry(n, c[n]);
  a.block_count[row] = count;
}

/// The blocks a CTA visits, in order: for a masked variant the entries of
/// a block list (the block index, bit 30 set when the classification found
/// every element kept: every list kernel writes them with visit_entry,
/// block_range.cuh), else every block, entry j being j.
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
