// linear_chunk_seq: where one sequence's tokens and chunks lie for the
// backward kernels, in a padded batch or a packed one (a.cu_seqlens), and
// the generated mods called with the packed token where the Variant takes it.
#ifndef ATTNC_LINEAR_CHUNK_SEQ_CUH
#define ATTNC_LINEAR_CHUNK_SEQ_CUH

#include "attnc/linear_chunk_args.cuh"

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
/// (seq_longest_first); ranking more costs each CTA O(seqs^2 / threads).
constexpr int kLongestFirstMaxSeqs = 128;

/// The sequence of rank \p r when a packed batch's sequences are ordered by
/// length, longest first (ties by index), so that the CTAs of the longest
/// ones, dispatched in blockIdx order, start in the first wave instead of
/// making the tail of the last one (a CTA's time is its sequence's chunks).
/// Above kLongestFirstMaxSeqs sequences, r itself. Every thread of the CTA
/// must call it before \p sh (seqs + 1 ints of shared memory) is used for
/// anything else; the lengths stay on the device.
__device__ __forceinline__ int seq_longest_first(const LinearArgs &a, int r, int *sh) {
  const int n = a.seqs;
  if (n > kLongestFirstMaxSeqs)
    return r;
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    sh[i] = a.cu_seqlens[i + 1] - a.cu_seqlens[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int li = sh[i];
    int rank = 0;
    for (int j = 0; j < n; ++j)
      rank += sh[j] > li || (sh[j] == li && j < i);
    if (rank == r)
      sh[n] = i;
  }
  __syncthreads();
  const int b = sh[n];
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
