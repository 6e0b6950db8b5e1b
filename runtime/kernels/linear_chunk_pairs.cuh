// linear_chunk_pairs: the backward's state pairs. The state passes
// (linear_chunk_states) write H, the state before a chunk, only before the
// even chunks of a sequence, and dH, the gradient of the state after a
// chunk, only after the odd chunks and the last. A chunk-gradient CTA
// (linear_chunk_grads) then loads the one state of its pair that is
// missing from the neighbour's and recomputes it from the neighbour
// chunk's tiles:
//   odd n:  H_n  = exp(G_last)·H_{n−1} + (diag(w)·K_{n−1})ᵀ·V_{n−1}
//   even n: dH_n = exp(G_last)·dH_{n+1} + (diag(exp G)·Q_{n+1})ᵀ·dO_{n+1}
// (G, w of the neighbour chunk), the state passes' own update on the 16-bit
// state they wrote. The states written and read per chunk halve (at D = DV
// = 128 and chunks of 32 they are twice the bytes of q, k, v and dO
// together); the price is one D × C × DV product a CTA and the neighbour's
// two tiles, which the neighbour's own CTA reads at about the same time
// (adjacent blockIdx.x), so that they should mostly come from L2.
#ifndef ATTNC_LINEAR_CHUNK_PAIRS_CUH
#define ATTNC_LINEAR_CHUNK_PAIRS_CUH

#include "attnc/linear_chunk_common.cuh"
#include "attnc/linear_chunk_seq.cuh"

namespace attnc {
namespace lin {

/// Which chunks' stored H and dH chunk \p n of a sequence of \p chunks
/// reads, and the neighbour chunk whose tiles complete its pair (−1: none;
/// both states are stored).
struct PairPlan {
  int h_chunk, dh_chunk, neighbour;
};

__device__ __forceinline__ PairPlan pair_plan(bool pairs, int n, int chunks) {
  if (!pairs)
    return {n, n, -1};
  if (n & 1)
    return {n - 1, n, n - 1};
  if (n + 1 < chunks)
    return {n, n + 1, n + 1};
  return {n, n, -1}; // an even last chunk: its dH (dfinal_state) is stored
}

/// This warp's state rows [srow0, srow0 + 16·kMT) from the 16-bit tile at
/// \p s: what store_state wrote, as float.
template <class T, class Tile, int kMT, int kNS>
__device__ __forceinline__ void load_state(float (&st)[kMT][kNS][4], u32 s, int srow0) {
  const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
#pragma unroll
  for (int i = 0; i < kMT; ++i)
#pragma unroll
    for (int t = 0; t < kNS; ++t) {
      const int r = srow0 + 16 * i + g;
      u32 lo, hi;
      asm volatile("ld.shared.u32 %0, [%1];\n"
                   : "=r"(lo)
                   : "r"(s + Tile::offset(r, t) + 4 * tq));
      asm volatile("ld.shared.u32 %0, [%1];\n"
                   : "=r"(hi)
                   : "r"(s + Tile::offset(r + 8, t) + 4 * tq));
      st[i][t][0] = lo_of<T>(lo);
      st[i][t][1] = hi_of<T>(lo);
      st[i][t][2] = lo_of<T>(hi);
      st[i][t][3] = hi_of<T>(hi);
    }
}

/// The CTA's missing state of chunk \p n's pair, in place in its tile: H at
/// \p sH for odd n, dH at \p sDh for even n (nothing when \p plan has no
/// neighbour). The neighbour's raw k and v (odd) or q and dout (even) tiles
/// are at \p sA and \p sVal, copied by cp.async by the calling threads
/// (waited for here); its mods are applied in place as the state passes
/// apply them, and its decays go to \p g2 (g2, rs, ws as chunk_decay
/// writes them), which the caller rewrites with its own chunk's after this
/// returns. Every warp owns 16 of the kD state rows. Ends with a barrier:
/// the tile and g2 are then free for the caller.
template <class Variant, class T, bool kVarlen, int kC, int kD, int kVs, int kThreads,
          class DTile, class VTile, class STile>
__device__ __forceinline__ void pair_state(const LinearArgs &a,
                                           const typename Variant::Inputs &in,
                                           const Seq &sq, int h, const PairPlan &plan,
                                           u32 sA, u32 sVal, u32 sH, u32 sDh, float *g2) {
  static_assert(kD == 16 * (kThreads / 32), "each warp owns one m16 tile of state rows");
  if (plan.neighbour < 0)
    return;
  using M = Mods<Variant, kVarlen>;
  const bool fwd = plan.neighbour < plan.dh_chunk; // odd: H from the chunk before
  const int t0 = plan.neighbour * kC;
  cp_async_wait<0>();
  if (fwd) {
    if constexpr (!Variant::kKIdentity)
      mod_tile<T, DTile, kC, kD, kThreads, true, false>(
          sA, sA, nullptr, 0, t0, sq.len,
          [&](float x, int t) { return M::k_mod(in, x, sq.mb, h, t, sq.tok0 + t); });
    if constexpr (!Variant::kVIdentity)
      mod_tile<T, VTile, kC, kVs, kThreads, true, false>(
          sVal, sVal, nullptr, 0, t0, sq.len,
          [&](float x, int t) { return M::v_mod(in, x, sq.mb, h, t, sq.tok0 + t); });
  } else if constexpr (!Variant::kQIdentity) {
    mod_tile<T, DTile, kC, kD, kThreads, true, false>(
        sA, sA, nullptr, 0, t0, sq.len,
        [&](float x, int t) { return M::q_mod(in, x, sq.mb, h, t, sq.tok0 + t); });
  }
  float *rs = g2 + kC + 4, *ws = rs + kC;
  chunk_decay<kC>(g2, rs, ws, t0, sq.len,
                  [&](int t) { return seq_decay<Variant, kVarlen>(a, in, sq, h, t); });
  __syncthreads(); // the neighbour's modded tiles and decays are visible
  constexpr int kNS = kVs / 8;
  const int srow0 = threadIdx.x / 32 * 16;
  const u32 sSt = fwd ? sH : sDh;
  float st[1][kNS][4];
  load_state<T, STile, 1, kNS>(st, sSt, srow0);
  state_update<T, kC, 1, kNS, DTile, VTile>(st, sA, sVal, fwd ? ws : rs, srow0,
                                            exp2_fast(g2[kC]));
  store_state<T, STile, 1, kNS>(sSt, st, srow0);
  __syncthreads(); // the state is whole; g2 is read
}

} // namespace lin
} // namespace attnc

#endif
