// bwd_sm80's fused dQ mode: the dK/dV kernel also computes dQ = dS·K, and
// the products of the key blocks are added in a fixed order.
//
// Each step of the dK/dV kernel (one query block m of one head) has its
// dSᵀ tile in shared memory (rows: keys; bwd_sm80_dkdv.cuh), multiplies it,
// read transposed, by the K tile it already holds, and adds the product to
// m's rows of an fp32 workspace. The key blocks that visit m add in one
// order, their rank: a per-(batch·head, m) semaphore counts the
// contributions made, a CTA waits until it equals its rank, then rank 0
// stores its product (so the workspace needs no zeroing) and every later
// rank adds with red.global.add, which reads nothing back into the SM. The
// CTA publishes rank + 1 one step later, after the next step's Pᵀ/dSᵀ
// barrier: by then its adds have reached L2 and the release seldom waits.
// The sum's order depends on the ranks only, never on timing: the bits are
// the same on every run. attnc_bwd_dq_convert rounds the sums to dq's type.
//
// The order. Key block n runs in CTA kv_n_blocks − 1 − n, and a CTA
// publishes a turn before it waits for its next one.
//  * With a mask, rank(n, m) is the number of key blocks n' > n that visit
//    m, so a CTA only waits for CTAs of its row with a smaller blockIdx.x,
//    dispatched before it (resident or done): no deadlock whatever the grid
//    size. Each CTA walks its query blocks upwards; with a causal or
//    sliding-window mask a key block's first query block is its diagonal,
//    where it is rank 0, and key block n + 1 reaches query block m
//    kBlockN / kBlockM steps (two at 64 x 128) before key block n, having
//    started earlier: it should not wait.
//  * Without a mask the walks are rotated (first_block, unmasked_rank):
//    each key block starts at its own query block and wraps around, and the
//    ranks follow the order in which the walks reach m, so CTAs that start
//    together never wait. A CTA may then wait for one dispatched after it,
//    which is deadlock-free only while a whole grid row can be resident:
//    the host sets dq_rotate only where two rows' CTAs are no more than the
//    SMs (rotation also spreads a head's live tiles over all its query
//    blocks, which costs L2 hits on long rows), and otherwise every walk
//    starts at 0 and ranks follow dispatch order as with a mask.
// Both rely on the GPU dispatching CTAs in blockIdx order.
#ifndef ATTNC_BWD_SM80_FUSED_DQ_CUH
#define ATTNC_BWD_SM80_FUSED_DQ_CUH

#include "attnc/attention_args.cuh"
#include "attnc/block_mask.cuh"
#include "attnc/sm80_primitives.cuh"

namespace attnc {

/// Workspace stores at L2 (.cg): other SMs add to the values next.
__device__ __forceinline__ void st_cg_f2(float *p, float x, float y) {
  asm volatile("st.global.cg.v2.f32 [%0], {%1,%2};\n" ::"l"(p), "f"(x), "f"(y)
               : "memory");
}
/// Adds two adjacent floats at L2 without reading them back (one vector
/// reduction on sm_90, two scalar ones before).
__device__ __forceinline__ void red_add_f2(float *p, float x, float y) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.relaxed.gpu.global.add.v2.f32 [%0], {%1,%2};\n" ::"l"(p), "f"(x),
               "f"(y)
               : "memory");
#else
  asm volatile("red.relaxed.gpu.global.add.f32 [%0], %1;\n" ::"l"(p), "f"(x) : "memory");
  asm volatile("red.relaxed.gpu.global.add.f32 [%0], %1;\n" ::"l"(p + 1), "f"(y)
               : "memory");
#endif
}
__device__ __forceinline__ int ld_acquire_gpu(const int *p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(int *p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

/// The fused dQ product's warp grid: the number of row groups WR (the
/// column groups are kWarps / WR) that reads the fewest operand bytes a
/// warp (2·MT + NT 256-byte fragments per k16 step) among the splits into
/// whole m16 row tiles and pairs of n8 column tiles; 0 when none exists
/// (validateBackward refuses such configs).
constexpr int fused_dq_warp_rows(int row_tiles, int col_tiles, int warps) {
  int best = 0, best_cost = 1 << 30;
  for (int wr = 1; wr <= warps; wr *= 2) {
    const int wc = warps / wr;
    if (row_tiles % wr != 0 || warps % wr != 0 || col_tiles % (2 * wc) != 0)
      continue;
    const int cost = 2 * (row_tiles / wr) + col_tiles / wc;
    if (cost < best_cost) {
      best = wr;
      best_cost = cost;
    }
  }
  return best;
}

/// A contribution whose semaphore has not been advanced yet.
struct DqTurn {
  int bh, m, rank;
  bool pending;
};

/// The fused dQ of BwdDkDvSm80<..., kFusedDq = true>: a query step of
/// kBlockM rows, a key block of kBlockN keys, kWarps warps.
template <class T, int kD, int kBlockM, int kBlockN, int kWarps> struct BwdFusedDq {
  /// dSᵀ of one step, [key][query row], 16-bit, as the dK/dV kernel
  /// writes it (BwdDkDvSm80::store_pair).
  using DsTile = SwizzledTile<kBlockN, kBlockM>;
  using KTile = SwizzledTile<kBlockN, kD>;
  /// dQ's [kBlockM x kD] split over the warps: WR groups of rows times WC
  /// groups of columns; each warp MT m16 row tiles by NT n8 column tiles.
  static constexpr int RT = kBlockM / 16, CT = kD / 8;
  static constexpr int WR = fused_dq_warp_rows(RT, CT, kWarps), WC = kWarps / (WR ? WR : 1);
  static constexpr int MT = RT / (WR ? WR : 1), NT = CT / WC;
  static_assert(WR > 0, "the query step's m16 tiles and the head dim's n8 pairs must "
                        "split evenly over the warps (validateBackward)");
  static_assert(kBlockM % 64 == 0 || kBlockM == 32,
                "dSᵀ rows are swizzled in groups of 64 queries, or 32");

  /// Rows (padded to whole query blocks) of the fp32 workspace per head.
  __device__ static __forceinline__ long long accum_rows(const BwdArgs &a) {
    return (long long)a.kv_m_blocks * kBlockM;
  }

  /// Thread 0, at the start of a step: the first look at the semaphore of
  /// query block \p m, its value or \p rank where there is no need to wait.
  /// Issued early so that its L2 round trip overlaps the step's matmuls; an
  /// acquire whose value is not used before wait_turn() stalls nothing.
  __device__ static __forceinline__ int peek(const BwdArgs &a, int bh, int m, int rank) {
    if (rank > 0 && threadIdx.x == 0)
      return ld_acquire_gpu(a.dq_sem + (long long)bh * a.kv_m_blocks + m);
    return rank;
  }

  /// This warp's part of the step's product dS·K; after a barrier that
  /// follows every warp's store_ds().
  __device__ static __forceinline__ void product(float (&acc)[MT][NT][4], u32 s_ds,
                                                 u32 s_k) {
    const int warp = threadIdx.x / 32;
    zero_tiles(acc);
    warp_mma_ss<T, DsTile, KTile, MT, NT, kBlockN / 16, /*kATransposed=*/true>(
        acc, s_ds, (warp % WR) * MT * 16, s_k, (warp / WR) * NT);
  }

  /// Thread 0 waits until query block \p m of head \p bh is this CTA's turn
  /// (\p seen: what peek() read). A CTA barrier must follow before add().
  /// (One thread, not each warp's lane 0 and no barrier: every acquire
  /// invalidates the SM's L1, and waits per warp measured 2-4% slower.)
  __device__ static __forceinline__ void wait_turn(const BwdArgs &a, int bh, int m,
                                                   int rank, int seen) {
    if (threadIdx.x != 0)
      return;
    const int *sem = a.dq_sem + (long long)bh * a.kv_m_blocks + m;
    while (seen != rank)
      seen = ld_acquire_gpu(sem);
  }

  /// Adds the product to query block \p m's rows of the sum (rank 0
  /// stores it).
  __device__ static __forceinline__ void add(const BwdArgs &a, const float (&acc)[MT][NT][4],
                                             int bh, int m, int rank) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, tq = lane % 4;
    const int row0 = (warp % WR) * MT * 16, tile0 = (warp / WR) * NT;
    float *ws = a.dq_accum + ((long long)bh * accum_rows(a) + (long long)m * kBlockM) * kD +
                (row0 + g) * kD + tile0 * 8 + 2 * tq;
    // One branch for the whole tile: an asm statement cannot be predicated,
    // and a choice per element compiles to a branch per element.
    if (rank == 0) {
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
          for (int half = 0; half < 2; ++half)
            st_cg_f2(ws + (i * 16 + 8 * half) * kD + t * 8, acc[i][t][2 * half],
                     acc[i][t][2 * half + 1]);
    } else {
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
          for (int half = 0; half < 2; ++half)
            red_add_f2(ws + (i * 16 + 8 * half) * kD + t * 8, acc[i][t][2 * half],
                       acc[i][t][2 * half + 1]);
    }
  }

  /// Without a mask, and where a grid row's CTAs can all be resident
  /// (rotated(), as the host says), key block n starts its walk at query block
  /// first_block(n) and wraps around: n reaches each query block
  /// kv_m_blocks / kv_n_blocks steps after key block n + 1, so CTAs that
  /// start together do not wait for each other. (Walking from 0, CTA r
  /// could add to a block only a turn after CTA r − 1: CTAs that start
  /// together wait a step per rank, on every wave of the grid.)
  __device__ static __forceinline__ int first_block(const BwdArgs &a, int n) {
    return rotated(a) ? (int)((long long)n * a.kv_m_blocks / a.kv_n_blocks) : 0;
  }

  /// Whether the dense grid's rows walk rotated (BwdArgs::dq_rotate).
  __device__ static __forceinline__ bool rotated(const BwdArgs &a) {
    return a.kv_n_blocks <= a.dq_rotate;
  }

  /// Without a mask: key block \p n's rank at query block \p m, the order
  /// of the walks' visits. Rotated, the last key block whose walk starts at
  /// or before m comes first, then the key blocks below it, then from the
  /// top down; else the highest key block first.
  __device__ static __forceinline__ int unmasked_rank(const BwdArgs &a, int n, int m) {
    const int nb = a.kv_n_blocks;
    if (!rotated(a))
      return nb - 1 - n;
    const int first = (int)(((long long)(m + 1) * nb - 1) / a.kv_m_blocks);
    return first >= n ? first - n : first - n + nb;
  }

  /// Thread 0 passes \p turn on, after a CTA barrier that follows every
  /// warp's add(): every thread's stores and reductions precede the release
  /// (the barrier orders them at CTA scope, the release is cumulative). The
  /// semaphores are reset by attnc_bwd_dq_init before each call.
  __device__ static __forceinline__ void publish(const BwdArgs &a, DqTurn &turn) {
    if (turn.pending && threadIdx.x == 0)
      st_release_gpu(a.dq_sem + (long long)turn.bh * a.kv_m_blocks + turn.m,
                     turn.rank + 1);
    turn.pending = false;
  }
};

/// Zeroes the fused mode's semaphores before the dK/dV kernel; grid
/// (ceil(batch·heads·kv_m_blocks / 256)) x 256.
__device__ inline void bwd_dq_init(const BwdArgs &a) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < (long long)a.batch * a.heads * a.kv_m_blocks)
    a.dq_sem[i] = 0;
}

/// After the dK/dV kernel: dq = the fp32 sums rounded to T. Rows of query
/// blocks that no key block visits (every key masked) have no sum and are
/// zeros. Grid (ceil(seq_q / rows a CTA), batch·heads) x 256, four columns
/// a thread; rows a CTA = 256 / (kD / 4), whole rows (at kD = 192, 5 rows:
/// the last 16 threads idle).
template <class T, int kD, int kBlockM, bool kHasMask>
__device__ void bwd_dq_convert(const BwdArgs &a) {
  static_assert(kD % 4 == 0 && kD / 4 <= 256, "whole rows per CTA");
  constexpr int kThreadsPerRow = kD / 4, kRows = 256 / kThreadsPerRow;
  const int row = blockIdx.x * kRows + threadIdx.x / kThreadsPerRow;
  const int col = (threadIdx.x % kThreadsPerRow) * 4;
  const int bh = blockIdx.y, b = bh / a.heads, h = bh % a.heads;
  if (threadIdx.x >= kRows * kThreadsPerRow || row >= a.seq_q)
    return;
  float x[4] = {0.f, 0.f, 0.f, 0.f};
  bool visited = true;
  if constexpr (kHasMask)
    visited = a.q_count[mask_group(a.mask_grouping, bh, a.heads) * a.q_m_blocks +
                        row / kBlockM] != 0;
  if (visited) {
    const float *src = a.dq_accum +
                       ((long long)bh * a.kv_m_blocks * kBlockM + row) * kD + col;
    asm volatile("ld.global.cg.v4.f32 {%0,%1,%2,%3}, [%4];\n"
                 : "=f"(x[0]), "=f"(x[1]), "=f"(x[2]), "=f"(x[3])
                 : "l"(src));
  }
  // dq rows are only known to be 4-byte aligned.
  u32 *dst = reinterpret_cast<u32 *>(static_cast<unsigned short *>(a.dq) + b * a.dq_sb +
                                     h * a.dq_sh + (long long)row * a.dq_ss + col);
  dst[0] = pack2<T>(x[0], x[1]);
  dst[1] = pack2<T>(x[2], x[3]);
}

} // namespace attnc

#endif
