// Where decode_sm80 reads its keys and values: contiguous rows of one
// (batch entry, KV head), or a sequence's pages (paged decode). Each source
// loads one key block of K and V into the ring and says how long the
// sequence is and how its q_idx is aligned.
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

/// K/V rows of one (sequence, KV head) in pages: token t lives in page
/// pages[t >> shift], slot t & (page size - 1). A page index outside
/// [0, num_pages) is not read; it sets bad, which poisons the CTA's rows.
/// Each thread keeps the page indices of its rows of the next block in
/// registers (prefetch), loaded a block ahead so that a block's copies
/// never wait on the table; the ring's first blocks take their indices in
/// one round of table loads (prologue), so that a short split does not
/// wait for the table once per stage before its first copies. kRows rows
/// of kD and kDV columns a block, kThreads threads, 16-byte copies.
template <int kRows, int kD, int kDV, int kThreads> struct PagedKV {
  static constexpr int kKIters = (kRows * (kD / 8) + kThreads - 1) / kThreads;
  static constexpr int kVIters = (kRows * (kDV / 8) + kThreads - 1) / kThreads;
  const unsigned short *k, *v;
  long long k_ps, k_ss, v_ps, v_ss; // page and slot strides
  const int *pages;
  int shift, num_pages, len, qshift;
  bool bad;
  int pk[kKIters], pv[kVIters];

  template <int kCols, int kIters>
  __device__ __forceinline__ void fetch(int (&pg)[kIters], int row0) const {
    constexpr int kChunks = kCols / 8;
    constexpr int kTotal = kRows * kChunks;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int i = threadIdx.x + it * kThreads;
      const int t = row0 + i / kChunks;
      pg[it] = (kTotal % kThreads == 0 || i < kTotal) && t < len
                   ? __ldg(pages + (t >> shift))
                   : 0;
    }
  }
  /// The page indices of block row0's rows, for the load that follows.
  __device__ __forceinline__ void prefetch(int row0) {
    fetch<kD>(pk, row0);
    if constexpr (kDV == kD)
      return; // the same rows: pk serves V too
    else
      fetch<kDV>(pv, row0);
  }
  template <class Tile, int kCols, int kIters>
  __device__ __forceinline__ void load_one(u32 smem, const unsigned short *base,
                                           long long ps, long long ss, int row0,
                                           const int (&pg)[kIters]) {
    constexpr int kChunks = kCols / 8;
    constexpr int kTotal = kRows * kChunks;
    const int mask = (1 << shift) - 1;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int i = threadIdx.x + it * kThreads;
      if (kTotal % kThreads != 0 && i >= kTotal)
        break;
      const int r = i / kChunks, c = i % kChunks;
      const int t = row0 + r;
      const int page = pg[it];
      const bool in_range = unsigned(page) < unsigned(num_pages);
      bad = bad || (t < len && !in_range);
      const bool ok = t < len && in_range;
      cp_async_16(smem + Tile::offset(r, c),
                  ok ? base + page * ps + (t & mask) * ss + c * 8 : base, ok);
    }
  }
  /// The ring's first kN blocks from row0 (count of them exist), one
  /// commit group each: the page indices of blocks 0..kN are all loaded
  /// before the first copy waits on one (block kN's are load's next).
  template <class KTile, class VTile, int, int, int, int, int kN>
  __device__ __forceinline__ void prologue(u32 s_kv, int stage_bytes, int row0,
                                           int count) {
    int gk[kN + 1][kKIters];
    int gv[kDV == kD ? 1 : kN + 1][kDV == kD ? 1 : kVIters];
#pragma unroll
    for (int s = 0; s <= kN; ++s) {
      fetch<kD>(gk[s], row0 + s * kRows);
      if constexpr (kDV != kD)
        fetch<kDV>(gv[s], row0 + s * kRows);
    }
#pragma unroll
    for (int s = 0; s < kN; ++s) {
      if (s < count) {
        const u32 sk = s_kv + s * stage_bytes;
        load_one<KTile, kD>(sk, k, k_ps, k_ss, row0 + s * kRows, gk[s]);
        if constexpr (kDV == kD)
          load_one<VTile, kDV>(sk + KTile::kBytes, v, v_ps, v_ss, row0 + s * kRows,
                               gk[s]);
        else
          load_one<VTile, kDV>(sk + KTile::kBytes, v, v_ps, v_ss, row0 + s * kRows,
                               gv[s]);
      }
      cp_async_commit();
    }
#pragma unroll
    for (int it = 0; it < kKIters; ++it)
      pk[it] = gk[kN][it];
    if constexpr (kDV != kD)
#pragma unroll
      for (int it = 0; it < kVIters; ++it)
        pv[it] = gv[kN][it];
  }
  /// Block row0 (whose pages prefetch(row0) fetched), then the pages of
  /// the block after it.
  template <class KTile, class VTile, int, int, int, int>
  __device__ __forceinline__ void load(u32 sk, u32 sv, int row0) {
    load_one<KTile, kD>(sk, k, k_ps, k_ss, row0, pk);
    if constexpr (kDV == kD)
      load_one<VTile, kDV>(sv, v, v_ps, v_ss, row0, pk);
    else
      load_one<VTile, kDV>(sv, v, v_ps, v_ss, row0, pv);
    prefetch(row0 + kRows);
  }
};

} // namespace attnc

#endif
