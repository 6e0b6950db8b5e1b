// Where decode_sm80 reads its keys and values: contiguous rows of one
// (batch entry, KV head) here, a sequence's pages in decode_paged_kv.cuh.
// Each source loads one key block of K and V into the ring and says how
// long the sequence is and how its q_idx is aligned.
#ifndef ATTNC_DECODE_KV_CUH
#define ATTNC_DECODE_KV_CUH

#include "attnc/sm80_primitives.cuh"

namespace attnc {

/// K/V rows of one (batch entry or packed sequence, KV head) at fixed
/// strides; bad: the packed sequence's key range is malformed (len 0).
struct ContiguousKV {
  const unsigned short *k, *v;
  long long k_ss, v_ss;
  int len;
  int qshift = 0;
  bool bad = false;
  template <class KTile, class VTile, int kRows, int kD, int kDV, int kThreads>
  __device__ __forceinline__ void load(u32 sk, u32 sv, int row0) const {
    load_tile_async<KTile, kRows, kD, kThreads>(sk, k, k_ss, row0, len);
    load_tile_async<VTile, kRows, kDV, kThreads>(sv, v, v_ss, row0, len);
  }
  /// The ring's first kN blocks from row0 (count of them exist), one
  /// commit group each.
  template <class KTile, class VTile, int kRows, int kD, int kDV, int kThreads,
            int kN>
  __device__ __forceinline__ void prologue(u32 s_kv, int stage_bytes, int row0,
                                           int count) const {
#pragma unroll
    for (int s = 0; s < kN; ++s) {
      if (s < count) {
        const u32 sk = s_kv + s * stage_bytes;
        load<KTile, VTile, kRows, kD, kDV, kThreads>(sk, sk + KTile::kBytes,
                                                     row0 + s * kRows);
      }
      cp_async_commit();
    }
  }
};

} // namespace attnc

#endif
