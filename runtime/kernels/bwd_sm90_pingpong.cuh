// bwd_sm90's ping-pong step and its dQ writer warp (BwdDkDvSm90's
// kPingPong and kDqWriter modes; bwd_sm90.cuh says what they do): the
// step of one warpgroup of 64 keys that takes turns at the tensor cores
// and sums dQ's partials in shared memory, and the producer warpgroup's
// warp that adds those sums to dQ's in the semaphore turns with bulk
// copies.
#ifndef ATTNC_BWD_SM90_PINGPONG_CUH
#define ATTNC_BWD_SM90_PINGPONG_CUH

#include "attnc/attention_args.cuh"
#include "attnc/bwd_sm80_fused_dq.cuh"
#include "attnc/sm90_primitives.cuh"
#include "attnc/sm90_wgmma.cuh"

namespace attnc {

/// K: the BwdDkDvSm90 instantiation (its tiles, barriers, helpers).
template <class K> struct BwdSm90PingPong {
  using Variant = typename K::VariantType;
  using T = typename K::ElemType;
  using Elems = typename K::Elems;
  using Sem = typename K::Sem;
  using Walk = typename K::Walk;
  static constexpr int kD = K::kHeadDim, kDV = K::kHeadDimV, kBlockM = K::kStepRows,
                       kBlockN = K::kKeyRows, QT = K::QT, kThreads = K::kThreads;
  static constexpr int kQBytes = K::kQBytes, kKSlab = K::kKSlab, kQSlab = K::kQSlab,
                       kDsSlab = K::kDsSlab;
  static constexpr int kDqRowBytes = K::kDqRowBytes, kDqSlotBytes = K::kDqSlotBytes;
  static constexpr int kBarToken = K::kBarToken, kBarPartial = K::kBarPartial,
                       kBarDs = K::kBarDs;
  static constexpr bool kAtomicDq = K::kAtomic;
  /// At head dim 64 a thread's dQ partial (32 floats) fits beside dK's,
  /// dV's, Pᵀ and dSᵀ (96), so the dSᵀ rows are stored first and dQ's
  /// product joins dV's and dK's group under the token: one wgmma wait a
  /// step instead of two, and dQ's product no longer runs alone. At d128
  /// its 64 floats do not fit beside them (240 registers).
  static constexpr bool kDqInGroup = kD == 64;

  /// This warpgroup's dSᵀ rows (its 64 keys) into the shared tile, for its
  /// dQ product (dS_w·K_w), visible to the async proxy once the
  /// warpgroup's threads meet.
  __device__ static __forceinline__ void store_ds(u32 s_ds, const u32 (&df)[kBlockM / 16][4]) {
    const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4;
    const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int key = wg * 64 + warp * 16 + g + 8 * (r & 1);
        const int qr = kk * 16 + 8 * (r >> 1) + 2 * tq;
        st_shared_32(s_ds + SwizzledTile<kBlockN, 64>::offset(key, qr / 8) + (qr % 8) * 2,
                     df[kk][r]);
      }
    fence_proxy_async_shared();
    named_bar_sync(kBarDs + wg, 128);
  }

  /// dQ_w += dS_w·K_w, issued: A = dS_w, [key][query] (MN-major, M = the
  /// 64 queries), B = K_w, [key][column] (MN-major, N = kD over kD / 64
  /// slabs); a k16 step is 16 key rows (2048 bytes) further in both.
  __device__ static __forceinline__ void issue_dq(u32 s_k, u32 s_ds,
                                                  float (&acc_dq)[kD / 8][4]) {
    const int wg = threadIdx.x / 128;
    const u64 ds_desc = wgmma_desc_sw128(s_ds + wg * 64 * 128, kDsSlab, 1024);
    const u64 k_desc_t = wgmma_desc_sw128(s_k + wg * 64 * 128, kKSlab, 1024);
#pragma unroll
    for (int kk = 0; kk < 64 / 16; ++kk)
      Wgmma<kD>::template ss_mn<T>(acc_dq, ds_desc + kk * (2048 >> 4),
                                   k_desc_t + kk * (2048 >> 4), kk > 0);
  }

  /// Ping-pong's step m for this warpgroup's 64 keys: Sᵀ and dPᵀ, P and
  /// dS, dV += Pᵀ·dO and dK += dSᵀ·Q (each group issued holding the
  /// tensor-core token, which then passes to the other warpgroup), dSᵀ
  /// rows to the shared tile, dQ_w = dS_w·K_w over all kD columns, and the
  /// partial into dQ slot it % 2: warpgroup 0 stores it (once the writer
  /// has emptied the slot), warpgroup 1 adds its own and marks it full.
  /// (kDqInGroup: the dSᵀ rows first, dQ's product in dV's and dK's group.)
  template <bool kFull>
  __device__ static __forceinline__ void
  step(const BwdArgs &a, const typename Variant::Inputs &in, u32 s_k, u32 s_v,
          u32 s_stage, u32 s_ds, u32 s_dq, u32 dq_bars, int it, u32 empty, const float *rows,
          int m, int b, int h, int key0, float (&acc_dk)[kD / 8][4],
          float (&acc_dv)[kDV / 8][4], float *gacc) {
    const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4;
    const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const u32 s_q = s_stage, s_do = s_stage + kQBytes;
    float acc_s[QT][4], acc_dp[QT][4];
    zero_tiles(acc_s);
    zero_tiles(acc_dp);
    {
      const u64 k_desc = wgmma_desc_sw128(s_k + wg * 64 * 128, 16, 1024);
      const u64 v_desc = wgmma_desc_sw128(s_v + wg * 64 * 128, 16, 1024);
      const u64 q_desc = wgmma_desc_sw128(s_q, 16, 1024);
      const u64 o_desc = wgmma_desc_sw128(s_do, 16, 1024);
      named_bar_sync(kBarToken + wg, kThreads);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk)
        Wgmma<kBlockM>::template ss<T>(acc_s, k_desc + (kk / 4) * (kKSlab >> 4) + (kk % 4) * 2,
                                       q_desc + (kk / 4) * (kQSlab >> 4) + (kk % 4) * 2,
                                       kk > 0);
#pragma unroll
      for (int kk = 0; kk < kDV / 16; ++kk)
        Wgmma<kBlockM>::template ss<T>(acc_dp, v_desc + (kk / 4) * (kKSlab >> 4) + (kk % 4) * 2,
                                       o_desc + (kk / 4) * (kQSlab >> 4) + (kk % 4) * 2,
                                       kk > 0);
      wgmma_commit();
      named_bar_arrive(kBarToken + 1 - wg, kThreads);
      wgmma_wait<0>();
      fence_regs(acc_s);
      fence_regs(acc_dp);
    }
    u32 pf[kBlockM / 16][4], df[kBlockM / 16][4];
    Elems::template elements<kFull>(a, in, rows, m, b, h, key0, acc_s, acc_dp, gacc);
    Elems::pack(acc_s, pf);
    Elems::pack(acc_dp, df);
    const u64 o_desc_t = wgmma_desc_sw128(s_do, kQSlab, 1024);
    const u64 q_desc_t = wgmma_desc_sw128(s_q, kQSlab, 1024);
    float acc_dq[kD / 8][4];
    if constexpr (kDqInGroup) {
      zero_tiles(acc_dq);
      store_ds(s_ds, df);
    }
    named_bar_sync(kBarToken + wg, kThreads);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
      Wgmma<kDV>::template rs<T>(acc_dv, pf[kk], o_desc_t + kk * (2048 >> 4), 1);
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
      Wgmma<kD>::template rs<T>(acc_dk, df[kk], q_desc_t + kk * (2048 >> 4), 1);
    if constexpr (kDqInGroup)
      issue_dq(s_k, s_ds, acc_dq);
    wgmma_commit();
    named_bar_arrive(kBarToken + 1 - wg, kThreads);
    // This warpgroup's dSᵀ rows (as step() writes them) while dV's and
    // dK's products run; its own dQ product of the previous step, which
    // read them, has been waited for.
    if constexpr (!kDqInGroup)
      store_ds(s_ds, df);
    // dV's and dK's products are waited for before dQ's is issued: Pᵀ and
    // dSᵀ are then no longer held beside dQ's 64 accumulators.
    wgmma_wait<0>();
    fence_regs(acc_dv);
    fence_regs(acc_dk);
    K::release(empty); // Q, dO and the rows are read
    if constexpr (!kDqInGroup) {
      zero_tiles(acc_dq);
      wgmma_fence();
      issue_dq(s_k, s_ds, acc_dq);
      wgmma_commit();
      wgmma_wait<0>();
    }
    fence_regs(acc_dq);
    // The partial: fragment rows 16·warp + g (+8), columns 8t + 2tq, the
    // same elements in both warpgroups.
    const int slot = it & 1;
    const u32 row_addr =
        s_dq + slot * kDqSlotBytes + (warp * 16 + g) * kDqRowBytes + 2 * tq * 4;
    if (wg == 0) {
      if (it >= 2)
        mbar_wait(dq_bars + 16 + 8 * slot, ((it / 2) + 1) & 1);
#pragma unroll
      for (int t = 0; t < kD / 8; ++t)
#pragma unroll
        for (int half = 0; half < 2; ++half)
          st_shared_f2(row_addr + 8 * half * kDqRowBytes + t * 32, acc_dq[t][2 * half],
                       acc_dq[t][2 * half + 1]);
      named_bar_arrive(kBarPartial, kThreads);
    } else {
      named_bar_sync(kBarPartial, kThreads);
#pragma unroll
      for (int t = 0; t < kD / 8; ++t)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const u32 at = row_addr + 8 * half * kDqRowBytes + t * 32;
          float x, y;
          ld_shared_f2(at, x, y);
          st_shared_f2(at, x + acc_dq[t][2 * half], y + acc_dq[t][2 * half + 1]);
        }
      // Read by the writer's bulk copies (the async proxy).
      fence_proxy_async_shared();
      mbar_arrive(dq_bars + 8 * slot); // every thread: see the empty barrier's init
    }
  }

  /// Ping-pong's dQ writer (the producer warpgroup's second warp): per
  /// step, once the slot is full, the semaphore turn (thread 0 of the warp
  /// waits), then every lane copies rows of the slot to query block m's
  /// rows of the fp32 sum (rank 0 stores, later ranks add; atomic: every
  /// step adds to the zeroed sum), waits for its copies, and the turn is
  /// published and the slot emptied.
  __device__ static void write_dq(const BwdArgs &a, u32 s_dq, u32 dq_bars, int n_block, int b,
                                  int hk, int group_size) {
    const int lane = threadIdx.x % 32;
    int it = 0;
    for (int hi = 0; hi < group_size; ++hi) {
      const int bh = b * a.heads + hk * group_size + hi;
      const Walk w = K::walk(a, bh, n_block);
      for (int j = 0; j < w.blocks.count; ++j, ++it) {
        const int slot = it & 1;
        mbar_wait(dq_bars + 8 * slot, (it / 2) & 1);
        bool full;
        const int m = w.visit(a, j, full);
        int rank = 1;
        if constexpr (!kAtomicDq) {
          rank = Variant::kHasMask ? w.ranks[j] : Sem::unmasked_rank(a, n_block, m);
          if (lane == 0)
            while (rank > 0 &&
                   ld_acquire_gpu(a.dq_sem + (long long)bh * a.kv_m_blocks + m) != rank) {
            }
          __syncwarp();
          fence_proxy_async_global(); // the earlier ranks' sums, to the bulk copies
        }
        {
          // Rows lane and lane + 32 (few registers: this warp has 24).
          float *dst = a.dq_accum +
                       ((long long)bh * Sem::accum_rows(a) + (long long)m * kBlockM + lane) * kD;
          const u32 src = s_dq + slot * kDqSlotBytes + lane * kDqRowBytes;
#pragma unroll
          for (int r = 0; r < kBlockM; r += 32) {
            if (rank == 0)
              bulk_store_s2g(dst + r * kD, src + r * kDqRowBytes, kD * 4);
            else
              bulk_reduce_add_f32_s2g(dst + r * kD, src + r * kDqRowBytes, kD * 4);
          }
        }
        bulk_commit();
        bulk_wait_all();
        fence_proxy_async_global(); // the copies' writes before the release
        __syncwarp();
        if constexpr (!kAtomicDq)
          if (lane == 0)
            st_release_gpu(a.dq_sem + (long long)bh * a.kv_m_blocks + m, rank + 1);
        mbar_arrive(dq_bars + 16 + 8 * slot);
      }
    }
  }

};

} // namespace attnc

#endif
