// Building blocks of the chunked linear-attention skeletons: mma operands
// from swizzled tiles, tile loads with a generated mod applied on the way
// into shared memory, the chunk-local cumulative decay, and one warp's share
// of a chunk's decay-masked product and of the state update.
#ifndef ATTNC_LINEAR_CHUNK_COMMON_CUH
#define ATTNC_LINEAR_CHUNK_COMMON_CUH

#include "attnc/common.cuh"
#include "attnc/linear_chunk_args.cuh"
#include "attnc/sm80_primitives.cuh"

namespace attnc {
namespace lin {

constexpr float kLog2e = 1.4426950408889634f;

/// 16 bytes in four 32-bit words: eight 16-bit elements.
struct U4 {
  u32 w[4];
};

__device__ __forceinline__ U4 ld_global_16(const void *p) {
  U4 r;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r.w[0]), "=r"(r.w[1]), "=r"(r.w[2]), "=r"(r.w[3])
               : "l"(p));
  return r;
}
__device__ __forceinline__ U4 ld_shared_16(u32 addr) {
  U4 r;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r.w[0]), "=r"(r.w[1]), "=r"(r.w[2]), "=r"(r.w[3])
               : "r"(addr));
  return r;
}
__device__ __forceinline__ void st_shared_16(u32 addr, const U4 &v) {
  asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(addr),
               "r"(v.w[0]), "r"(v.w[1]), "r"(v.w[2]), "r"(v.w[3]));
}
__device__ __forceinline__ void st_global_16(void *p, const U4 &v) {
  asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"l"(p), "r"(v.w[0]),
               "r"(v.w[1]), "r"(v.w[2]), "r"(v.w[3]));
}
__device__ __forceinline__ void st_shared_4(u32 addr, u32 v) {
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v));
}

/// One 16-bit element as float.
template <class T> __device__ __forceinline__ float to_float(u32 bits16) {
  if constexpr (T::kIsBf16) {
    return __uint_as_float(bits16 << 16);
  } else {
    const unsigned short h = static_cast<unsigned short>(bits16);
    float f;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(h));
    return f;
  }
}
template <class T> __device__ __forceinline__ float lo_of(u32 x) {
  return to_float<T>(x & 0xffffu);
}
template <class T> __device__ __forceinline__ float hi_of(u32 x) {
  return to_float<T>(x >> 16);
}
/// Both halves of \p x scaled, rounded back to T.
template <class T> __device__ __forceinline__ u32 scale2(u32 x, float lo, float hi) {
  return pack2<T>(lo_of<T>(x) * lo, hi_of<T>(x) * hi);
}

/// Sum over the 32 lanes, the same butterfly on every call (deterministic).
__device__ __forceinline__ float warp_sum_all(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

/// The dynamic shared memory this launch got; a kernel traps when the host
/// gave less than its layout needs (the two formulas must agree).
__device__ __forceinline__ u32 dynamic_smem_bytes() {
  u32 r;
  asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(r));
  return r;
}

// ---- mma operands (m16n8k16; layouts as in fwd_sm80) ----------------------

/// A (rows m0..m0+15, k-step kk) from a row-major [M][K] tile.
template <class Tile>
__device__ __forceinline__ void frag_a(u32 (&a)[4], u32 s, int m0, int kk) {
  const int lane = threadIdx.x % 32;
  const int r = m0 + (lane % 8) + 8 * ((lane / 8) % 2);
  ldmatrix_x4(a, s + Tile::offset(r, kk * 2 + lane / 16));
}
/// A (rows m0..m0+15, k-step kk) from a tile stored [K][M]: the transposed
/// read makes the stored columns the operand's rows.
template <class Tile>
__device__ __forceinline__ void frag_a_t(u32 (&a)[4], u32 s, int m0, int kk) {
  const int lane = threadIdx.x % 32, mi = lane / 8;
  const int r = kk * 16 + (lane % 8) + 8 * (mi / 2);
  ldmatrix_x4_trans(a, s + Tile::offset(r, m0 / 8 + (mi % 2)));
}
/// B of two n8 tiles (columns n0..n0+15, k-step kk) from a tile stored
/// [N][K]: b[0], b[1] for n0..n0+7, b[2], b[3] for n0+8..n0+15.
template <class Tile>
__device__ __forceinline__ void frag_b_nk(u32 (&b)[4], u32 s, int n0, int kk) {
  const int lane = threadIdx.x % 32, mi = lane / 8;
  const int r = n0 + (lane % 8) + 8 * (mi / 2);
  ldmatrix_x4(b, s + Tile::offset(r, kk * 2 + (mi % 2)));
}
/// The same from a tile stored [K][N] (read transposed).
template <class Tile>
__device__ __forceinline__ void frag_b_kn(u32 (&b)[4], u32 s, int n0, int kk) {
  const int lane = threadIdx.x % 32, mi = lane / 8;
  const int r = kk * 16 + (lane % 8) + 8 * (mi % 2);
  ldmatrix_x4_trans(b, s + Tile::offset(r, n0 / 8 + mi / 2));
}

// ---- tile loads -----------------------------------------------------------

/// Fills the swizzled tile at \p dst with mod(x, token) of each element of
/// rows [row0, row0 + kRows): from the staging tile at \p stage (same
/// layout) when kStaged, else straight from global memory. Rows at or past
/// \p limit (at least row0 + 1) are zero, never mod(0): they must add
/// nothing to any product. Every lane loads and mods a row inside the
/// sequence (past the end, the last one) and the rows past it are selected
/// to zero afterwards: the loads are volatile asm, which the compiler
/// cannot predicate, so `if (t < limit)` around them was a branch a chunk.
template <class T, class Tile, int kRows, int kCols, int kThreads, bool kStaged,
          bool kIdentity, class Mod>
__device__ __forceinline__ void mod_tile(u32 dst, u32 stage, const unsigned short *base,
                                         long long stride, int row0, int limit,
                                         Mod &&mod) {
  constexpr int kChunks = kCols / 8;
  constexpr int kTotal = kRows * kChunks;
  constexpr int kIters = (kTotal + kThreads - 1) / kThreads;
#pragma unroll 2
  for (int it = 0; it < kIters; ++it) {
    const int i = threadIdx.x + it * kThreads;
    if (kTotal % kThreads != 0 && i >= kTotal)
      break;
    const int r = i / kChunks, c = i % kChunks;
    const bool ok = row0 + r < limit;
    const int t = ok ? row0 + r : limit - 1;
    const u32 off = Tile::offset(r, c);
    U4 v;
    if constexpr (kStaged)
      v = ld_shared_16(stage + off);
    else
      v = ld_global_16(base + (long long)t * stride + c * 8);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if constexpr (!kIdentity)
        v.w[e] = pack2<T>(mod(lo_of<T>(v.w[e]), t), mod(hi_of<T>(v.w[e]), t));
      v.w[e] = ok ? v.w[e] : 0u;
    }
    st_shared_16(dst + off, v);
  }
}

// ---- the chunk-local decay ------------------------------------------------

/// decay_mod of token \p t of (batch \p b, value head \p h), reading the
/// decay input where the definition does.
template <class Variant>
__device__ __forceinline__ float token_decay(const LinearArgs &a,
                                             const typename Variant::Inputs &in, int b,
                                             int h, int t) {
  float d = 0.f;
  if constexpr (Variant::kReadsDecay)
    d = a.decay[b * a.decay_sb + h * a.decay_sh + t * a.decay_ss];
  return Variant::decay_mod(in, d, b, h, t);
}

/// Warp 0's lanes load the log-decays of the kC rows of the chunk starting
/// at token \p row0, kC / 32 consecutive rows a lane (rows at or past
/// \p limit give 0): chunk_decay's first half, apart so that a walk over
/// chunks can issue the next chunk's loads (the decay input and whatever
/// custom inputs decay_mod reads) before it computes the current one,
/// instead of waiting for them at the top of each chunk. \p decay(t) is the
/// log-decay of token t. Other warps leave \p d as it is.
template <int kC, class DecayFn>
__device__ __forceinline__ void chunk_decay_load(float (&d)[kC / 32], int row0, int limit,
                                                 DecayFn &&decay) {
  static_assert(kC % 32 == 0, "each lane scans kC / 32 consecutive rows");
  constexpr int E = kC / 32;
  if (threadIdx.x >= 32)
    return;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int t = row0 + threadIdx.x * E + e;
    d[e] = t < limit ? decay(t) : 0.f;
  }
}

/// Warp 0 writes, from the log-decays \p d of chunk_decay_load:
/// g2[r] = G_r·log2(e) with G_r the inclusive cumulative sum of the rows'
/// log-decays, g2[kC] = G_last·log2(e), rs[r] = exp(G_r) and
/// ws[r] = exp(G_last − G_r). The scan's order is fixed: the same bits each
/// run.
template <int kC>
__device__ __forceinline__ void chunk_decay_scan(float *g2, float *rs, float *ws,
                                                 const float (&d)[kC / 32]) {
  constexpr int E = kC / 32;
  if (threadIdx.x >= 32)
    return;
  const int lane = threadIdx.x;
  float v[E];
  float run = 0.f;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    run += d[e];
    v[e] = run;
  }
  float incl = run;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o)
      incl += y;
  }
  float excl = __shfl_up_sync(0xffffffffu, incl, 1);
  if (lane == 0)
    excl = 0.f;
  float mine[E];
#pragma unroll
  for (int e = 0; e < E; ++e)
    mine[e] = (excl + v[e]) * kLog2e;
  const float last = __shfl_sync(0xffffffffu, mine[E - 1], 31);
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int r = lane * E + e;
    g2[r] = mine[e];
    rs[r] = exp2_fast(mine[e]);
    ws[r] = exp2_fast(last - mine[e]);
  }
  if (lane == 0)
    g2[kC] = last;
}

/// chunk_decay_load then chunk_decay_scan: the chunk's decays in one step.
template <int kC, class DecayFn>
__device__ __forceinline__ void chunk_decay(float *g2, float *rs, float *ws, int row0,
                                            int limit, DecayFn &&decay) {
  float d[kC / 32];
  chunk_decay_load<kC>(d, row0, limit, decay);
  chunk_decay_scan<kC>(g2, rs, ws, d);
}

// ---- one warp's share of a chunk -------------------------------------------

/// chunk_out's default: nothing looks at the inter-chunk part.
struct NoInterHook {
  template <class Acc> __device__ __forceinline__ void operator()(const Acc &) const {}
};

/// Rows [m0, m0 + 16) and columns [n0, n0 + kNW) of
///   out = diag(rs)·(A·St) + ((A·Bᵀ) ⊙ M)·Val
/// for a chunk of kC rows. A and B are [kC][kDk] tiles; Val is [kC][N] (its
/// rows the chunk's tokens); St is stored [kDk][N] when kStKN, else [N][kDk].
/// M_rc = exp2(g2[r] − g2[c]) for c ≤ r (kLower), exp2(g2[c] − g2[r]) for
/// c ≥ r (otherwise), 0 elsewhere; M is rounded into T with the product
/// before it multiplies Val. Key blocks M zeroes are skipped. \p inter sees
/// acc when it holds diag(rs)·(A·St) alone (the decay gradient needs it).
template <class T, int kC, int kDk, int kNW, bool kStKN, bool kLower, class ATile,
          class BTile, class ValTile, class StTile, class InterFn = NoInterHook>
__device__ __forceinline__ void chunk_out(float (&acc)[kNW / 8][4], u32 sA, u32 sB,
                                          u32 sVal, u32 sSt, const float *g2,
                                          const float *rs, int m0, int n0,
                                          InterFn &&inter = InterFn{}) {
  constexpr int NT = kNW / 8, PT = kC / 8;
  static_assert(NT % 2 == 0, "B fragments come two n8 tiles at a time");
  static_assert(kDk % 16 == 0 && kC % 16 == 0, "k16 steps");
  const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  const int mt = m0 / 16;
  float p[PT][4];
  zero_tiles(acc);
  zero_tiles(p);
#pragma unroll
  for (int kk = 0; kk < kDk / 16; ++kk) {
    u32 a[4];
    frag_a<ATile>(a, sA, m0, kk);
#pragma unroll
    for (int t = 0; t < NT; t += 2) {
      u32 bf[4];
      if constexpr (kStKN)
        frag_b_kn<StTile>(bf, sSt, n0 + t * 8, kk);
      else
        frag_b_nk<StTile>(bf, sSt, n0 + t * 8, kk);
      mma_16816<T>(acc[t], a, bf[0], bf[1]);
      mma_16816<T>(acc[t + 1], a, bf[2], bf[3]);
    }
#pragma unroll
    for (int t = 0; t < PT; t += 2) {
      const bool needed = kLower ? (t / 2 <= mt) : (t / 2 >= mt);
      if (needed) {
        u32 bf[4];
        frag_b_nk<BTile>(bf, sB, t * 8, kk);
        mma_16816<T>(p[t], a, bf[0], bf[1]);
        mma_16816<T>(p[t + 1], a, bf[2], bf[3]);
      }
    }
  }
  const int r0 = m0 + g, r1 = r0 + 8;
  const float s0 = rs[r0], s1 = rs[r1];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    acc[t][0] *= s0;
    acc[t][1] *= s0;
    acc[t][2] *= s1;
    acc[t][3] *= s1;
  }
  inter(acc);
  const float gr0 = g2[r0], gr1 = g2[r1];
#pragma unroll
  for (int t = 0; t < PT; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e < 2 ? r0 : r1;
      const float gr = e < 2 ? gr0 : gr1;
      const int c = t * 8 + 2 * tq + (e & 1);
      const bool keep = kLower ? c <= r : c >= r;
      // The decay is computed for every element and the masked ones are
      // selected away: `keep ? p * exp2(… g2[c] …) : 0` compiled to a branch
      // per element (the compiler does not speculate the shared load).
      const float w = exp2_fast(kLower ? gr - g2[c] : g2[c] - gr);
      p[t][e] = keep ? p[t][e] * w : 0.f;
    }
#pragma unroll
  for (int kk = 0; kk < kC / 16; ++kk) {
    const bool needed = kLower ? (kk <= mt) : (kk >= mt);
    if (!needed)
      continue;
    u32 pf[4];
    pf[0] = pack2<T>(p[2 * kk][0], p[2 * kk][1]);
    pf[1] = pack2<T>(p[2 * kk][2], p[2 * kk][3]);
    pf[2] = pack2<T>(p[2 * kk + 1][0], p[2 * kk + 1][1]);
    pf[3] = pack2<T>(p[2 * kk + 1][2], p[2 * kk + 1][3]);
#pragma unroll
    for (int t = 0; t < NT; t += 2) {
      u32 bf[4];
      frag_b_kn<ValTile>(bf, sVal, n0 + t * 8, kk);
      mma_16816<T>(acc[t], pf, bf[0], bf[1]);
      mma_16816<T>(acc[t + 1], pf, bf[2], bf[3]);
    }
  }
}

/// This warp's state rows [srow0, srow0 + 16·kMT) (all kNS·8 columns):
///   st = decay·st + (diag(scale)·A)ᵀ·Val
/// with A a [kC][·] tile whose columns are the state's rows (read
/// transposed), scale[r] per chunk row (applied to A's 16-bit fragments
/// and rounded back), Val a [kC][kNS·8] tile.
template <class T, int kC, int kMT, int kNS, class ATile, class ValTile>
__device__ __forceinline__ void state_update(float (&st)[kMT][kNS][4], u32 sA, u32 sVal,
                                             const float *scale, int srow0,
                                             float decay) {
  static_assert(kNS % 2 == 0, "B fragments come two n8 tiles at a time");
  const int lane = threadIdx.x % 32, tq = lane % 4;
#pragma unroll
  for (int i = 0; i < kMT; ++i)
#pragma unroll
    for (int t = 0; t < kNS; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        st[i][t][e] *= decay;
#pragma unroll
  for (int kk = 0; kk < kC / 16; ++kk) {
    const int k0 = kk * 16 + 2 * tq;
    const float w0 = scale[k0], w1 = scale[k0 + 1];
    const float w2 = scale[k0 + 8], w3 = scale[k0 + 9];
    u32 a[kMT][4];
#pragma unroll
    for (int i = 0; i < kMT; ++i) {
      frag_a_t<ATile>(a[i], sA, srow0 + 16 * i, kk);
      a[i][0] = scale2<T>(a[i][0], w0, w1);
      a[i][1] = scale2<T>(a[i][1], w0, w1);
      a[i][2] = scale2<T>(a[i][2], w2, w3);
      a[i][3] = scale2<T>(a[i][3], w2, w3);
    }
#pragma unroll
    for (int t = 0; t < kNS; t += 2) {
      u32 bf[4];
      frag_b_kn<ValTile>(bf, sVal, t * 8, kk);
#pragma unroll
      for (int i = 0; i < kMT; ++i) {
        mma_16816<T>(st[i][t], a[i], bf[0], bf[1]);
        mma_16816<T>(st[i][t + 1], a[i], bf[2], bf[3]);
      }
    }
  }
}

/// Writes this warp's state rows, rounded to T, into the swizzled [D][kNS·8]
/// tile at \p s (the 16-bit operand the chunk products read).
template <class T, class Tile, int kMT, int kNS>
__device__ __forceinline__ void store_state(u32 s, const float (&st)[kMT][kNS][4],
                                            int srow0) {
  const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
#pragma unroll
  for (int i = 0; i < kMT; ++i)
#pragma unroll
    for (int t = 0; t < kNS; ++t) {
      const int r = srow0 + 16 * i + g;
      st_shared_4(s + Tile::offset(r, t) + 4 * tq, pack2<T>(st[i][t][0], st[i][t][1]));
      st_shared_4(s + Tile::offset(r + 8, t) + 4 * tq, pack2<T>(st[i][t][2], st[i][t][3]));
    }
}

/// Calls f(row, col, value) for each element of this warp's state rows;
/// row is the state row (0..D), col the column within the slice.
template <int kMT, int kNS, class F>
__device__ __forceinline__ void for_state(float (&st)[kMT][kNS][4], int srow0, F &&f) {
  const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
#pragma unroll
  for (int i = 0; i < kMT; ++i)
#pragma unroll
    for (int t = 0; t < kNS; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        f(srow0 + 16 * i + g + 8 * (e / 2), t * 8 + 2 * tq + (e & 1), st[i][t][e]);
}

} // namespace lin
} // namespace attnc

#endif
