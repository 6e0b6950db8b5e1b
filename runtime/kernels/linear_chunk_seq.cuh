// linear_chunk_seq: where one sequence's tokens and chunks lie for the
// backward kernels, in a padded batch or a packed one (a.cu_seqlens), and
// the generated mods called with the packed token where the Variant takes it.
#ifndef ATTNC_LINEAR_CHUNK_SEQ_CUH
#define ATTNC_LINEAR_CHUNK_SEQ_CUH

#include "attnc/linear_chunk_args.cuh"
#include "attnc/linear_seq_order.cuh"

namespace attnc {
namespace lin {

/// One (sequence, value head)'s place. Padded: sequence b is batch row b,
/// tokens [0, a.seq). Packed (batch 1, a.seq the packed tokens): sequence b
/// is tokens [cu[b], cu[b+1]) of row 0, and its chunks start at chunk slot
/// cu[b] / chunk + b of its head. Those slots never overlap (the next
/// sequence's first slot is at least ceil(len / chunk) further), so the
/// per-chunk workspaces take a.chunks = T / chunk + sequences slots a head
/// with no prefix sum over the sequences.
struct Seq {
  int mb;         ///< batch row of the token tensors (the mods' b)
  int tok0;       ///< the sequence's first token in them
  int len;        ///< its tokens
  int chunks;     ///< ceil(len / chunk)
  long long crow; ///< its chunk 0 in the per-chunk workspaces (ws_h, ws_z)
  long long trow; ///< its token 0 in the per-token workspaces ([B][H][T])
};

template <bool kVarlen>
__device__ __forceinline__ Seq seq_of(const LinearArgs &a, int b, int h, int chunk) {
  Seq s;
  if constexpr (kVarlen) {
    s.mb = 0;
    s.tok0 = a.cu_seqlens[b];
    s.len = a.cu_seqlens[b + 1] - s.tok0;
    s.chunks = (s.len + chunk - 1) / chunk;
    s.crow = (long long)h * a.chunks + s.tok0 / chunk + b;
    s.trow = (long long)h * a.seq + s.tok0;
  } else {
    const long long bh = (long long)b * a.heads + h;
    s.mb = b;
    s.tok0 = 0;
    s.len = a.seq;
    s.chunks = a.chunks;
    s.crow = bh * a.chunks;
    s.trow = bh * a.seq;
  }
  return s;
}

/// Packed batches with at most this many sequences are walked longest first
/// (seq_job); ranking more costs each CTA O(seqs^2 / threads).
constexpr int kLongestFirstMaxSeqs = 128;

/// What one CTA row of the packed forward walks: sequence \p b (−1: no
/// work), all of it (part 0) or one of its two segments (parts 1 and 2,
/// split_chunk).
struct SeqJob {
  int b, part;
};

/// A packed sequence of this many chunks or more is split over two CTA
/// rows (seq_job) when it is also long against the mean: below it the
/// state-only walk of part 2 gains too little.
constexpr int kSplitMinChunks = 4;

/// Where a split sequence of \p chunks chunks is cut: part 1 writes the
/// outputs of chunks [0, x), part 2 walks them for the state only (k and v,
/// no q, no products but the state update) and writes those of [x, chunks)
/// and the final state. A state-only chunk moves half the bytes of a full
/// one (k and v against q, k, v and o at D = 2·DV; less at D = DV), so x =
/// 2·chunks / 3 gives both parts about the same time. 1 <= x < chunks.
__device__ __forceinline__ int split_chunk(int chunks) { return (2 * chunks + 1) / 3; }

/// The job of CTA row \p r (blockIdx.y / heads) of the packed forward, whose
/// grid has a.seqs + a.seq_split rows. The sequences are ranked longest
/// first (ties by index); those of at least
/// kSplitMinChunks chunks and more than 5/4 of the mean length, the first m
/// of that order, are split when a.seq_split rows allow: rows 2i and 2i + 1
/// take the two parts of the i-th longest for i < m, row r >= 2m the
/// (r − m)-th longest whole, and rows past the last sequence exit. The
/// longest sequences' single CTAs were the packed call's critical path
/// (mamba2 at H32 on an H100: 87% of the padded batch's throughput); split,
/// each part walks about 2/3 of them. Which rows do what depends only on
/// the lengths, so every run gives the same bits, and a split sequence's
/// outputs and final state are the bits of the unsplit walk (part 2's
/// state-only chunks update the state exactly as a full walk does). Above
/// kLongestFirstMaxSeqs sequences, row r takes sequence r whole. Every
/// thread of the CTA must call it before \p sh (2·seqs + 2 ints of shared
/// memory) is used for anything else.
__device__ __forceinline__ SeqJob seq_job(const LinearArgs &a, int r, int chunk, int *sh) {
  const int n = a.seqs;
  if (n > kLongestFirstMaxSeqs)
    return {r < n ? r : -1, 0};
  int *len = sh, *order = sh + n;
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    len[i] = a.cu_seqlens[i + 1] - a.cu_seqlens[i];
  __syncthreads();
  const long long total = a.cu_seqlens[n] - a.cu_seqlens[0];
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    order[longest_first_rank(len, n, i)] = i;
  if (threadIdx.x == 0) {
    // m: the split sequences, a prefix of the order (the rule is monotone
    // in the length), at most a.seq_split of them.
    int m = 0;
    for (int i = 0; i < n; ++i) {
      const int l = len[i];
      m += (l + chunk - 1) / chunk >= kSplitMinChunks && 4LL * l * n > 5LL * total;
    }
    order[n] = m < a.seq_split ? m : a.seq_split;
  }
  __syncthreads();
  const int m = order[n];
  SeqJob j;
  if (r < 2 * m) {
    j = {order[r / 2], 1 + r % 2};
  } else {
    const int i = r - m;
    j = {i < n ? order[i] : -1, 0};
  }
  __syncthreads(); // every thread has read sh before the caller reuses it
  return j;
}

/// The sequence of rank \p r (longest first, ties by index) of a packed
/// batch of at most kLongestFirstMaxSeqs sequences, for the backward's
/// state passes (lin::state_job). Every thread of the CTA must call it
/// before \p sh (2·seqs ints of shared memory) is used for anything else.
__device__ __forceinline__ int seq_of_rank(const LinearArgs &a, int r, int *sh) {
  const int n = a.seqs;
  int *len = sh, *order = sh + n;
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    len[i] = a.cu_seqlens[i + 1] - a.cu_seqlens[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    order[longest_first_rank(len, n, i)] = i;
  __syncthreads();
  const int b = order[r];
  __syncthreads(); // every thread has read sh before the caller reuses it
  return b;
}

/// The sequence of a packed batch's chunk slot: the last b with
/// cu[b] / chunk + b <= slot (slots past its chunks belong to no sequence:
/// the caller compares slot − that start with Seq::chunks).
__device__ __forceinline__ int seq_of_slot(const LinearArgs &a, int slot, int chunk) {
  int lo = 0, hi = a.seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a.cu_seqlens[mid] / chunk + mid <= slot)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/// The sequence of a packed token t < a.seq: the last b with cu[b] <= t
/// (empty sequences before it share its offset).
__device__ __forceinline__ int seq_of_token(const LinearArgs &a, int t) {
  int lo = 0, hi = a.seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a.cu_seqlens[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/// The Variant's mods and their derivatives at (b, h, t) and packed token
/// ti: a packed batch's Variant reads its inputs at ti (the six-argument
/// mods), a padded one's at t.
template <class V, bool kVarlen> struct Mods {
  using In = typename V::Inputs;
#define ATTNC_LIN_MOD(NAME)                                                               \
  __device__ static __forceinline__ float NAME(const In &in, float x, int b, int h,      \
                                               int t, int ti) {                          \
    if constexpr (kVarlen)                                                               \
      return V::NAME(in, x, b, h, t, ti);                                                \
    else                                                                                 \
      return V::NAME(in, x, b, h, t);                                                    \
  }
#define ATTNC_LIN_MOD_DIN(NAME)                                                           \
  __device__ static __forceinline__ void NAME(const In &in, float x, int b, int h, int t, \
                                              int ti, float *d) {                        \
    if constexpr (kVarlen)                                                               \
      V::NAME(in, x, b, h, t, ti, d);                                                    \
    else                                                                                 \
      V::NAME(in, x, b, h, t, d);                                                        \
  }
  ATTNC_LIN_MOD(q_mod)
  ATTNC_LIN_MOD(k_mod)
  ATTNC_LIN_MOD(v_mod)
  ATTNC_LIN_MOD(decay_mod)
  ATTNC_LIN_MOD(q_mod_dx)
  ATTNC_LIN_MOD(k_mod_dx)
  ATTNC_LIN_MOD(v_mod_dx)
  ATTNC_LIN_MOD(decay_mod_dx)
  ATTNC_LIN_MOD_DIN(q_mod_din)
  ATTNC_LIN_MOD_DIN(k_mod_din)
  ATTNC_LIN_MOD_DIN(v_mod_din)
  ATTNC_LIN_MOD_DIN(decay_mod_din)
#undef ATTNC_LIN_MOD
#undef ATTNC_LIN_MOD_DIN
};

/// Token t of \p s's decay after decay_mod.
template <class V, bool kVarlen>
__device__ __forceinline__ float seq_decay(const LinearArgs &a, const typename V::Inputs &in,
                                           const Seq &s, int h, int t) {
  float d = 0.f;
  if constexpr (V::kReadsDecay)
    d = a.decay[s.mb * a.decay_sb + h * a.decay_sh + (long long)(s.tok0 + t) * a.decay_ss];
  return Mods<V, kVarlen>::decay_mod(in, d, s.mb, h, t, s.tok0 + t);
}

} // namespace lin
} // namespace attnc

#endif
