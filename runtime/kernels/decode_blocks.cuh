// Which key blocks a decode CTA visits: the mask's block classes over the
// box of the CTA's rows (query heads x q_idx), from the compiler's mask
// analysis where it bounds the mask from the box alone.
#ifndef ATTNC_DECODE_BLOCKS_CUH
#define ATTNC_DECODE_BLOCKS_CUH

#include "attnc/decode_args.cuh"

namespace attnc {

/// Query heads [h_lo, h_hi] and q_idx [q_lo, q_hi]: a box that holds every
/// row of a decode CTA.
struct DecodeRowBox {
  int h_lo, h_hi, q_lo, q_hi;
};

/// The box of row block \p rb of KV head \p hk, whose group has \p rows
/// rows of \p n queries each (row j·n + i is query head hk·group + j at
/// q_idx i + qshift). Rows that span two heads or more take every q_idx of
/// the sequence.
template <int kBlockM>
__device__ __forceinline__ DecodeRowBox decode_row_box(int rows, int n, int group,
                                                       int qshift, int rb, int hk) {
  const int r_lo = rb * kBlockM, r_hi = min(r_lo + kBlockM, rows) - 1;
  const int j_lo = r_lo / n, j_hi = r_hi / n;
  DecodeRowBox box;
  box.h_lo = hk * group + j_lo;
  box.h_hi = hk * group + j_hi;
  box.q_lo = qshift + (j_lo == j_hi ? r_lo % n : 0);
  box.q_hi = qshift + (j_lo == j_hi ? r_hi % n : n - 1);
  return box;
}

/// Key block \p n (of kBlockN keys) for every row of \p box: 0 when the
/// mask keeps none of its elements, 2 when it keeps all of them and no key
/// is past the sequence's end, 1 otherwise. The classes are the compiler's
/// (mask_block_class over the box, once per head of the box; sound, as for
/// the forward's block classification) where the analysis bounds the mask
/// from the box alone (no input bounded by per-block minima); any other
/// mask answers 1 for every block (visited, masked per element), and an
/// unmasked variant 2 except for a block past the end.
template <class Variant, int kBlockN>
__device__ __forceinline__ int decode_key_block_class(const typename Variant::Inputs &in,
                                                      int b, const DecodeRowBox &box,
                                                      int n, int seq_kv) {
  const int k_lo = n * kBlockN, k_end = k_lo + kBlockN;
  const int whole = k_end <= seq_kv ? 2 : 1; // keys past the end are masked
  if constexpr (Variant::kHasMask) {
    if constexpr (Variant::kMaskAnalysed && Variant::kMaskBounds == 0) {
      const float none[1] = {0.0f}; // no bounded input
      bool any = false, all = true;
      for (int h = box.h_lo; h <= box.h_hi; ++h) {
        const int c = Variant::mask_block_class(in, b, h, box.q_lo, box.q_hi, k_lo,
                                                min(k_end, seq_kv) - 1, none, none);
        any = any || c != 0;
        all = all && c == 2;
      }
      return !any ? 0 : (all ? whole : 1);
    } else {
      return 1;
    }
  } else {
    return whole;
  }
}

} // namespace attnc

#endif
