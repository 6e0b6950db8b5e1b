// Packed variable-length batches: where a CTA's sequence lies in the packed
// tensors, and which blocks of it a masked variant visits. A dense call is
// the same code with one sequence per batch entry at token 0.
#ifndef ATTNC_VARLEN_CUH
#define ATTNC_VARLEN_CUH

#include "attnc/block_range.cuh"

namespace attnc {

/// The sequence a CTA works on: batch entry b of a dense call, or sequence
/// b of a packed one (cu_q non-null).
struct SeqSpan {
  int seq_q, seq_kv; ///< this sequence's lengths
  int q0, kv0;       ///< its first query and key token (0 in a dense call)
  /// Added to a query's position for the variant's q_idx: Skv − Sq in a
  /// packed call (queries aligned to the end of their keys, FlashAttention's
  /// bottom-right rule), 0 in a dense one.
  int shift;
  /// Per-row fp32 arrays (finals, doosum): the element of (b, h)'s query
  /// row 0, and the elements of one final rowscale.
  long long rows, plane;
  bool packed;
};

/// The span of a packed sequence of query tokens [q0, q1) and key tokens
/// [kv0, kv1), head \p h.
__device__ __forceinline__ SeqSpan packed_span(int q0, int q1, int kv0, int kv1, int total_q,
                                               int heads, int h) {
  SeqSpan s;
  s.packed = true;
  s.q0 = q0;
  s.kv0 = kv0;
  s.seq_q = q1 - q0;
  s.seq_kv = kv1 - kv0;
  s.shift = s.seq_kv - s.seq_q;
  s.rows = (long long)h * total_q + s.q0;
  s.plane = (long long)heads * total_q;
  return s;
}

/// The span of batch entry \p b, head \p h. The kernels add q0 · seq stride
/// to their pointers: the host passes batch strides of 0 in a packed call.
__device__ __forceinline__ SeqSpan seq_span(const int *cu_q, const int *cu_kv,
                                            int total_q, int batch, int heads,
                                            int seq_q, int seq_kv, int b, int h) {
  if (cu_q != nullptr)
    return packed_span(cu_q[b], cu_q[b + 1], cu_kv[b], cu_kv[b + 1], total_q, heads, h);
  SeqSpan s;
  s.packed = false;
  s.q0 = s.kv0 = s.shift = 0;
  s.seq_q = seq_q;
  s.seq_kv = seq_kv;
  s.rows = ((long long)b * heads + h) * seq_q;
  s.plane = (long long)batch * heads * seq_q;
  return s;
}

/// The custom inputs sequence \p s of a call reads. A variant with no
/// per-row, per-key or per-token input (Inputs::kSequenceInputs false) gets
/// the call's own, by reference: no copy, no registers, today's code. One
/// with such inputs gets, in a packed call, a copy rebased to the sequence
/// (Inputs::of_sequence: pointers at its first token, bounds its lengths,
/// query-side inputs read at q_idx − shift, the row's token); in a dense
/// call the call's own. Every packed entry point calls it right after
/// seq_span; the sequence's heads share it (no head moves an input's
/// token axis).
template <class Inputs, bool = Inputs::kSequenceInputs> struct SequenceInputs {
  __device__ static __forceinline__ const Inputs &of(const Inputs &in, SeqSpan) {
    return in;
  }
};
template <class Inputs> struct SequenceInputs<Inputs, true> {
  __device__ static __forceinline__ Inputs of(const Inputs &in, SeqSpan s) {
    return s.packed ? in.of_sequence(s.q0, s.kv0, s.seq_q, s.seq_kv, s.shift) : in;
  }
};
/// SequenceInputs<Inputs>::of: a reference or a rebased copy (bind it to a
/// `const auto &`, which keeps a copy alive). The span comes by value: taken
/// by reference it would escape into the helper, and nvcc then lays out the
/// kernels of variants without such inputs differently (their CUBINs must
/// stay byte-identical).
template <class Inputs>
__device__ __forceinline__ decltype(auto) sequence_inputs(const Inputs &in, SeqSpan s) {
  return SequenceInputs<Inputs>::of(in, s);
}

/// Whether the mask keeps any element of queries [q_lo, q_lo + kRows) ×
/// keys [k_lo, k_lo + kCols) inside the sequence; every thread of the CTA
/// calls it (a CTA-wide vote).
template <class Variant, int kRows, int kCols>
__device__ __forceinline__ bool tile_keeps_any(const typename Variant::Inputs &in, int b,
                                               int h, int q_lo, int k_lo, const SeqSpan &s) {
  bool any = false;
  for (int i = threadIdx.x; i < kRows * kCols && !any; i += blockDim.x) {
    const int q = q_lo + i / kCols, k = k_lo + i % kCols;
    any = q < s.seq_q && k < s.seq_kv && Variant::mask(in, b, h, q + s.shift, k);
  }
  return __syncthreads_or(any);
}

/// Whether every element of queries [q_lo, q_lo + kRows) x keys [k_lo,
/// k_lo + kCols) of the sequence is kept, as the analysis proves it from
/// the block's box (class 2 of mask_block_class; rows past the sequence's
/// end are never stored, as in classify_from_bounds): such a block runs the
/// kernels' full path, with no per-element mask. A block with keys past
/// the sequence's end is never full (they must be masked), and a mask the
/// analysis does not bound from the box alone (not analysed, or bounding an
/// input) never proves one: its blocks keep the per-element mask. An
/// unmasked variant (no mask members) never asks.
template <class Variant, int kRows, int kCols>
__device__ __forceinline__ bool tile_full(const typename Variant::Inputs &in, int b, int h,
                                          int q_lo, int k_lo, const SeqSpan &s) {
  if constexpr (Variant::kHasMask) {
    if constexpr (Variant::kMaskAnalysed && Variant::kMaskBounds == 0) {
      if (k_lo + kCols > s.seq_kv)
        return false;
      const int q_hi = min(q_lo + kRows, s.seq_q) - 1;
      const float none[1] = {0.0f}; // no bounded input
      return Variant::mask_block_class(in, b, h, q_lo + s.shift, q_hi + s.shift, k_lo,
                                       k_lo + kCols - 1, none, none) == 2;
    }
  }
  return false;
}

/// Whether the mask may keep an element of queries [q_lo, q_hi] x keys
/// [k_lo, k_hi] of the sequence (rows shifted by the bottom-right rule), for
/// a mask the compiler's analysis bounds from the box alone (analysed, no
/// input bounded by its per-block minimum and maximum: causal, windows,
/// prefix-LM and chunked masks with scalar inputs): the box's class
/// (mask_block_class, as attnc_block_classify) in a few instructions, the
/// same on every thread, for a box of any size.
template <class Variant>
__device__ __forceinline__ bool box_may_keep(const typename Variant::Inputs &in, int b,
                                             int h, int q_lo, int q_hi, int k_lo, int k_hi,
                                             const SeqSpan &s) {
  const float none[1] = {0.0f}; // no bounded input
  return Variant::mask_block_class(in, b, h, q_lo + s.shift, q_hi + s.shift, k_lo, k_hi,
                                   none, none) != 0;
}

/// The ballot of pred(lane) over the calling warp (all lanes converged).
struct WarpVote {
  int lane;
  template <class Pred> __device__ __forceinline__ unsigned operator()(const Pred &pred) const {
    return __ballot_sync(0xffffffffu, pred(lane));
  }
};

/// The calling warp's values, prefix sums and votes over its lanes, for
/// packed_block_of and packed_block_of_sorted (block_range.cuh); all lanes
/// converged.
struct WarpLanes {
  int lane;
  struct Sums {
    int mine; ///< this lane's value (from sums: its inclusive sum)
    __device__ __forceinline__ int at(int l) const { return __shfl_sync(0xffffffffu, mine, l); }
  };
  template <class F> __device__ __forceinline__ Sums sums(const F &f) const {
    int v = f(lane);
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int t = __shfl_up_sync(0xffffffffu, v, d);
      v += lane >= d ? t : 0;
    }
    return {v};
  }
  template <class Pred> __device__ __forceinline__ unsigned vote(const Pred &pred) const {
    return __ballot_sync(0xffffffffu, pred(lane));
  }
  /// f(lane) on each lane, at(l) reading lane l's.
  template <class F> __device__ __forceinline__ Sums values(const F &f) const {
    return {f(lane)};
  }
};

/// The sequence and block of this CTA in a packed call's grid of blocks
/// of \p block tokens (packed_block_of over blockIdx.x: only the blocks
/// the sequences have, see packed_block_bound). Every warp finds it alone,
/// so no barrier is needed; each calls it converged.
__device__ __forceinline__ PackedBlock packed_cta_block(const int *cu, int batch, int block) {
  return packed_block_of(cu, batch, block, (long long)blockIdx.x,
                         WarpLanes{int(threadIdx.x % 32)});
}

/// packed_cta_block with a batch of at most 32 sequences taken longest
/// first (packed_block_of_sorted).
__device__ __forceinline__ PackedBlock packed_cta_block_sorted(const int *cu, int batch,
                                                               int block, int max_len) {
  return packed_block_of_sorted(cu, batch, block, max_len, (long long)blockIdx.x,
                                WarpLanes{int(threadIdx.x % 32)});
}

/// A packed call has no block lists (they would cost a classification per
/// call over every sequence): a masked variant visits the key blocks from
/// the first to the last one that may keep an element of query block \p m.
/// This skips what a causal, sliding-window, chunked or prefix mask leaves
/// empty at either end. Where the analysis bounds the mask from the box
/// alone, each warp finds the two ends by votes over boxes of 32 blocks,
/// then of single blocks (block_range.cuh): a few box classes a thread, not
/// one per block of the sequence, and no CTA-wide barrier. Otherwise the
/// CTA scans the blocks from either end, evaluating the mask on each
/// block's elements (tile_keeps_any). Of the visited blocks, those
/// tile_full proves full run without the per-element mask; the others
/// evaluate it per element. Every thread of the CTA calls it, converged;
/// returns [first, last + 1) in x, y.
///
/// Not done yet: masks with bounded inputs classified from their bounds
/// here (their blocks are evaluated per element).
template <class Variant, int kBlockM, int kBlockN>
__device__ __forceinline__ int2 key_block_range(const typename Variant::Inputs &in, int b,
                                                int h, int m, const SeqSpan &s) {
  const int blocks = (s.seq_kv + kBlockN - 1) / kBlockN;
  if constexpr (Variant::kMaskAnalysed && Variant::kMaskBounds == 0) {
    const int q_lo = m * kBlockM, q_hi = min(q_lo + kBlockM, s.seq_q) - 1;
    auto may_keep = [&](int lo, int hi) {
      return box_may_keep<Variant>(in, b, h, q_lo, q_hi, lo * kBlockN,
                                   min(hi * kBlockN, s.seq_kv) - 1, s);
    };
    const WarpVote vote{int(threadIdx.x % 32)};
    const int first = first_block_kept(0, blocks, may_keep, vote);
    return make_int2(first, last_block_kept(first, blocks, may_keep, vote));
  } else {
    int lo = 0, hi = blocks;
    while (lo < hi &&
           !tile_keeps_any<Variant, kBlockM, kBlockN>(in, b, h, m * kBlockM, lo * kBlockN, s))
      ++lo;
    while (hi > lo && !tile_keeps_any<Variant, kBlockM, kBlockN>(in, b, h, m * kBlockM,
                                                                 (hi - 1) * kBlockN, s))
      --hi;
    return make_int2(lo, hi);
  }
}

/// Whether the mask may keep an element of query blocks [\p lo, \p hi) (of
/// kBlockM rows) x key block \p n (of kBlockN keys) of the sequence: one
/// box class over the box the blocks cover inside the sequence (bwd_sm90's
/// packed walk; query_block_range below keeps its own form, whose key
/// bounds bwd_sm80 computes once).
template <class Variant, int kBlockM, int kBlockN>
__device__ __forceinline__ bool query_blocks_may_keep(const typename Variant::Inputs &in, int b,
                                                      int h, int lo, int hi, int n,
                                                      const SeqSpan &s) {
  return box_may_keep<Variant>(in, b, h, lo * kBlockM, min(hi * kBlockM, s.seq_q) - 1,
                               n * kBlockN, min((n + 1) * kBlockN, s.seq_kv) - 1, s);
}

/// The query blocks of kBlockM rows that key block \p n (of kBlockN keys)
/// visits in a packed call: key_block_range with the roles swapped (the
/// backward's dK/dV kernel).
template <class Variant, int kBlockM, int kBlockN>
__device__ __forceinline__ int2 query_block_range(const typename Variant::Inputs &in, int b,
                                                  int h, int n, const SeqSpan &s) {
  const int blocks = (s.seq_q + kBlockM - 1) / kBlockM;
  if constexpr (Variant::kMaskAnalysed && Variant::kMaskBounds == 0) {
    const int k_lo = n * kBlockN, k_hi = min(k_lo + kBlockN, s.seq_kv) - 1;
    auto may_keep = [&](int lo, int hi) {
      return box_may_keep<Variant>(in, b, h, lo * kBlockM, min(hi * kBlockM, s.seq_q) - 1,
                                   k_lo, k_hi, s);
    };
    const WarpVote vote{int(threadIdx.x % 32)};
    const int first = first_block_kept(0, blocks, may_keep, vote);
    return make_int2(first, last_block_kept(first, blocks, may_keep, vote));
  } else {
    int lo = 0, hi = blocks;
    while (lo < hi &&
           !tile_keeps_any<Variant, kBlockM, kBlockN>(in, b, h, lo * kBlockM, n * kBlockN, s))
      ++lo;
    while (hi > lo && !tile_keeps_any<Variant, kBlockM, kBlockN>(in, b, h, (hi - 1) * kBlockM,
                                                                 n * kBlockN, s))
      --hi;
    return make_int2(lo, hi);
  }
}

} // namespace attnc

#endif
