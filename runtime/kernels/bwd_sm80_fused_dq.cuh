// bwd_sm80's fused dQ mode: the dK/dV kernel also computes dQ = dS·K, and
// the partial sums of the key blocks are added in a fixed order.
//
// Each step of the dK/dV kernel (one query block m of one head) writes its
// dS tile to shared memory, multiplies it by the K tile it already holds and
// adds the product to dQ's fp32 partial sum in a global workspace. The key
// blocks that visit m add in one order, their rank: a per-(batch·head, m)
// semaphore counts the contributions made, a CTA waits until it equals its
// rank, adds (rank 0 writes without reading, so the workspace needs no
// zeroing), and publishes rank + 1. The last contributor converts the sum to
// the element type and writes dq itself. The sum's order depends on ranks
// only, never on timing: the bits are the same on every run.
//
// Ranks follow dispatch order. Key block n runs in CTA kv_n_blocks − 1 − n
// and rank(n, m) is the number of key blocks n' > n that visit m, so a CTA
// only waits for CTAs of its row with a smaller blockIdx.x, dispatched
// before it (resident or done): no deadlock whatever the grid size. Each
// CTA walks its query blocks upwards. Without a mask, CTA r is expected to
// settle about one step behind CTA r − 1 (a ramp at the start, then no
// waiting: CTAs that finish are replaced in dispatch order). With a causal
// or sliding-window mask a key block's first query block is its diagonal,
// where it is the first contributor (rank 0), and key block n + 1 reaches
// query block m kBlockN / kBlockM steps (two at 64 x 128) before key block
// n, having started earlier: it should not wait. (Reasoning, not profiled.)
#ifndef ATTNC_BWD_SM80_FUSED_DQ_CUH
#define ATTNC_BWD_SM80_FUSED_DQ_CUH

#include "attnc/attention_args.cuh"
#include "attnc/sm80_primitives.cuh"

namespace attnc {

__device__ __forceinline__ void st_shared_16(u32 addr, unsigned short v) {
  asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(addr), "h"(v) : "memory");
}
/// Workspace accesses at L2 (.cg): another SM wrote the values, and L1 is
/// not coherent.
__device__ __forceinline__ void ld_cg_f2(const float *p, float &x, float &y) {
  asm volatile("ld.global.cg.v2.f32 {%0,%1}, [%2];\n" : "=f"(x), "=f"(y) : "l"(p));
}
__device__ __forceinline__ void st_cg_f2(float *p, float x, float y) {
  asm volatile("st.global.cg.v2.f32 [%0], {%1,%2};\n" ::"l"(p), "f"(x), "f"(y)
               : "memory");
}
__device__ __forceinline__ int ld_acquire_gpu(const int *p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(int *p, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

/// The fused dQ of BwdDkDvSm80<..., kFusedDq = true>: a query step of
/// kBlockM rows, a key block of kBlockN keys, kWarps warps.
template <class T, int kD, int kBlockM, int kBlockN, int kWarps> struct BwdFusedDq {
  /// dS of one step, [query row][key], 16-bit.
  using DsTile = SwizzledTile<kBlockM, kBlockN>;
  using KTile = SwizzledTile<kBlockN, kD>;
  static constexpr int kBytes = DsTile::kBytes;
  /// dQ's [kBlockM x kD] split over the warps: WR groups of rows times WC
  /// groups of columns; each warp MT m16 row tiles by NT n8 column tiles.
  static constexpr int RT = kBlockM / 16, CT = kD / 8;
  static constexpr int WR = RT >= kWarps ? kWarps : RT, WC = kWarps / WR;
  static constexpr int MT = RT / WR, NT = CT / WC;
  static_assert(RT % WR == 0 && kWarps % WR == 0 && CT % WC == 0 && NT % 2 == 0,
                "the query step's m16 tiles and the head dim's n8 pairs must "
                "split evenly over the warps (validateBackward)");

  /// Rows (padded to whole query blocks) of the fp32 workspace per head.
  __device__ static __forceinline__ long long accum_rows(const BwdArgs &a) {
    return (long long)a.kv_m_blocks * kBlockM;
  }

  /// Element (query row \p qr, key \p key) of this step's dS; \p lo and \p hi
  /// are rows qr and qr + 1 of one key (adjacent in the Sᵀ fragment).
  __device__ static __forceinline__ void store_ds(u32 s_ds, int qr, int key, float lo,
                                                  float hi) {
    const u32 w = pack2<T>(lo, hi);
    // Rows qr and qr + 1 are swizzled differently.
    st_shared_16(s_ds + DsTile::offset(qr, key / 8) + (key % 8) * 2,
                 static_cast<unsigned short>(w & 0xffffu));
    st_shared_16(s_ds + DsTile::offset(qr + 1, key / 8) + (key % 8) * 2,
                 static_cast<unsigned short>(w >> 16));
  }

  /// Thread 0, at the start of a step: the first look at the semaphore of
  /// query block \p m, its value or \p rank where there is no need to wait.
  /// Issued early so that its L2 round trip overlaps the step's matmuls; an
  /// acquire whose value is not used before accumulate() stalls nothing.
  __device__ static __forceinline__ int peek(const BwdArgs &a, int bh, int m, int rank) {
    if (rank > 0 && threadIdx.x == 0)
      return ld_acquire_gpu(a.dq_sem + (long long)bh * a.kv_m_blocks + m);
    return rank;
  }

  /// After this step's dS tile is complete in shared memory (no barrier
  /// needed before the call): waits for this CTA's turn on query block \p m
  /// of head \p bh (\p seen: what peek() read), adds dS·K to the partial
  /// sum, or, when \p last, writes dq rows [m·kBlockM, ...) below seq_q. The
  /// caller's next __syncthreads must come before publish().
  __device__ static __forceinline__ void accumulate(const BwdArgs &a, u32 s_ds, u32 s_k,
                                                    int b, int h, int bh, int m,
                                                    int rank, bool last, int seen) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, tq = lane % 4;
    const int row0 = (warp % WR) * MT * 16, tile0 = (warp / WR) * NT;
    if (threadIdx.x == 0) {
      const int *sem = a.dq_sem + (long long)bh * a.kv_m_blocks + m;
      while (seen != rank)
        seen = ld_acquire_gpu(sem);
    }
    __syncthreads(); // the dS tile is complete; the turn is this CTA's
    float *acc_ws =
        a.dq_accum + ((long long)bh * accum_rows(a) + (long long)m * kBlockM) * kD;
    // This thread's pair of elements (row half) of n8 tile t of row tile i.
    auto ws_at = [&](int i, int t, int half) {
      return acc_ws + (row0 + i * 16 + g + 8 * half) * kD + (tile0 + t) * 8 + 2 * tq;
    };
    // The earlier contributors' sum, loaded before the product is computed
    // so that the L2 round trip overlaps the mma.
    float old[MT][NT][4];
    if (rank > 0) {
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
          for (int half = 0; half < 2; ++half)
            ld_cg_f2(ws_at(i, t, half), old[i][t][2 * half], old[i][t][2 * half + 1]);
    } else {
      zero_tiles(old);
    }
    float acc[MT][NT][4];
    zero_tiles(acc);
    warp_mma_ss<T, DsTile, KTile, MT, NT, kBlockN / 16>(acc, s_ds, row0, s_k, tile0);
    // The partial sum of the key blocks before this one, plus this one's
    // product: the same association on every run.
    if (last) {
      unsigned short *dq =
          static_cast<unsigned short *>(a.dq) + b * a.dq_sb + h * a.dq_sh;
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int qi = m * kBlockM + row0 + i * 16 + g + 8 * half;
          if (qi >= a.seq_q)
            continue;
#pragma unroll
          for (int t = 0; t < NT; ++t)
            *reinterpret_cast<u32 *>(dq + (long long)qi * a.dq_ss + (tile0 + t) * 8 +
                                     2 * tq) =
                pack2<T>(old[i][t][2 * half] + acc[i][t][2 * half],
                         old[i][t][2 * half + 1] + acc[i][t][2 * half + 1]);
        }
    } else {
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int t = 0; t < NT; ++t)
#pragma unroll
          for (int half = 0; half < 2; ++half)
            st_cg_f2(ws_at(i, t, half), old[i][t][2 * half] + acc[i][t][2 * half],
                     old[i][t][2 * half + 1] + acc[i][t][2 * half + 1]);
    }
  }

  /// After a __syncthreads that follows accumulate(): every thread's
  /// workspace stores precede thread 0's release (the barrier orders them
  /// at CTA scope, the release is cumulative), which passes the turn on.
  /// The last contributor passes nothing (the semaphores are reset by
  /// attnc_bwd_dq_init before each call).
  __device__ static __forceinline__ void publish(const BwdArgs &a, int bh, int m, int rank,
                                                 bool last) {
    if (!last && threadIdx.x == 0)
      st_release_gpu(a.dq_sem + (long long)bh * a.kv_m_blocks + m, rank + 1);
  }

  /// Masked variants: dq rows of query blocks that no key block visits
  /// (every key masked) get no contributor; one CTA per (batch, kv head)
  /// writes them as zeros for the heads of its group.
  __device__ static void zero_unvisited(const BwdArgs &a, int b, int hk) {
    const int group_size = a.heads / a.heads_kv;
    constexpr int kPairs = kD / 2; // dq rows are only known 4-byte aligned
    for (int hi = 0; hi < group_size; ++hi) {
      const int h = hk * group_size + hi;
      const long long bh = (long long)b * a.heads + h;
      const int *count = a.q_count + (a.mask_per_head ? bh : 0LL) * a.q_m_blocks;
      unsigned short *dq = static_cast<unsigned short *>(a.dq) + b * a.dq_sb + h * a.dq_sh;
      for (int m = 0; m < a.kv_m_blocks; ++m) {
        if (count[m] != 0)
          continue;
        for (int i = threadIdx.x; i < kBlockM * kPairs; i += blockDim.x) {
          const int qi = m * kBlockM + i / kPairs;
          if (qi < a.seq_q)
            *reinterpret_cast<u32 *>(dq + (long long)qi * a.dq_ss + (i % kPairs) * 2) = 0u;
        }
      }
    }
  }
};

/// Zeroes the fused mode's semaphores before the dK/dV kernel; grid
/// (ceil(batch·heads·kv_m_blocks / 256)) x 256.
__device__ inline void bwd_dq_init(const BwdArgs &a) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < (long long)a.batch * a.heads * a.kv_m_blocks)
    a.dq_sem[i] = 0;
}

} // namespace attnc

#endif
