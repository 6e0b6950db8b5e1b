// bwd_sm90's roles form of the column split (BwdDkDvSm90 with kRoles,
// bwd_sm90.cuh says what it does): warpgroup 0 computes a step's scores,
// P and dS and dQ's product and adds, warpgroup 1 dV and dK from the Pᵀ and
// dSᵀ tiles warpgroup 0 leaves in one of two shared slots. Included by
// bwd_sm90.cuh after the struct.
#ifndef ATTNC_BWD_SM90_ROLES_CUH
#define ATTNC_BWD_SM90_ROLES_CUH

namespace attnc {

ATTNC_BWD_SM90_TEMPLATE
template <bool kFull, int kW>
__device__ __forceinline__ void
ATTNC_BWD_SM90::step_roles(const BwdArgs &a, const typename Variant::Inputs &in, u32 s_k,
                           u32 s_v, u32 s_stage, u32 s_ds, u32 ps_bars, int it, u32 empty,
                           const float *rows, int m, int b, int h, int bh, int key0, int rank,
                           float (&acc_dk)[Cols<kW>::kKN / 8][4],
                           float (&acc_dv)[Cols<kW>::kVN / 8][4], float *gacc) {
  // Warpgroup 0's own barrier: its four warps' Pᵀ and dSᵀ stores are in
  // before its dQ product reads the dSᵀ tile (ping-pong's ids, unused here).
  constexpr int kBarSlot = 4;
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, tq = lane % 4;
  const u32 s_q = s_stage, s_do = s_stage + kQBytes;
  // Slot it % 2: Pᵀ, then dSᵀ, each [64 keys][64 queries].
  const int slot = it & 1;
  const u32 s_p = s_ds + slot * 2 * kDsSlab, s_dst = s_p + kDsSlab;
  const u32 ps_full = ps_bars + 8 * slot, ps_empty = ps_bars + 16 + 8 * slot;
  if constexpr (kW == 1) {
    // dV += Pᵀ·dO and dK += dSᵀ·Q, all their columns: A K-major from the
    // slot (keys are its M, queries its k: a k16 step is 32 bytes along a
    // row), B MN-major from the stage as in the lockstep step.
    (void)rank;
    mbar_wait(ps_full, (it / 2) & 1);
    const u64 p_desc = wgmma_desc_sw128(s_p, 16, 1024);
    const u64 ds_desc = wgmma_desc_sw128(s_dst, 16, 1024);
    const u64 o_desc_t = wgmma_desc_sw128(s_do, kQSlab, 1024);
    const u64 q_desc_t = wgmma_desc_sw128(s_q, kQSlab, 1024);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
      Wgmma<kDV>::template ss_bt<T>(acc_dv, p_desc + kk * 2, o_desc_t + kk * (2048 >> 4), 1);
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
      Wgmma<kD>::template ss_bt<T>(acc_dk, ds_desc + kk * 2, q_desc_t + kk * (2048 >> 4), 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(acc_dv);
    fence_regs(acc_dk);
    release(empty); // Q and dO are read
    __syncwarp();
    if (lane == 0)
      mbar_arrive(ps_empty); // and the slot's tiles
    return;
  } else {
    (void)acc_dk;
    (void)acc_dv;
    float acc_s[QT][4], acc_dp[QT][4];
    zero_tiles(acc_s); // overwritten by the first k step; defined for the compiler
    zero_tiles(acc_dp);
    {
      const u64 k_desc = wgmma_desc_sw128(s_k, 16, 1024);
      const u64 v_desc = wgmma_desc_sw128(s_v, 16, 1024);
      const u64 q_desc = wgmma_desc_sw128(s_q, 16, 1024);
      const u64 o_desc = wgmma_desc_sw128(s_do, 16, 1024);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk)
        Wgmma<kBlockM>::template ss<T>(acc_s, k_desc + (kk / 4) * (kKSlab >> 4) + (kk % 4) * 2,
                                       q_desc + (kk / 4) * (kQSlab >> 4) + (kk % 4) * 2,
                                       kk > 0);
#pragma unroll
      for (int kk = 0; kk < kDV / 16; ++kk)
        Wgmma<kBlockM>::template ss<T>(acc_dp,
                                       v_desc + (kk / 4) * (kKSlab >> 4) + (kk % 4) * 2,
                                       o_desc + (kk / 4) * (kQSlab >> 4) + (kk % 4) * 2,
                                       kk > 0);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(acc_s);
      fence_regs(acc_dp);
    }
    // As the lockstep step: tiles inside the sequences without per-element
    // bounds (the mask's inputs read unclamped where tile_covered).
    if ((m + 1) * kBlockM <= a.seq_q && key0 + kBlockN <= a.seq_kv &&
        (kFull || Elems::tile_covered(in, m, key0, kBlockN)))
      Elems::template elements<kFull, true>(a, in, rows, m, b, h, key0, acc_s, acc_dp, gacc);
    else
      Elems::template elements<kFull>(a, in, rows, m, b, h, key0, acc_s, acc_dp, gacc);
    // Q, dO and the stage's rows read: this warpgroup's arrivals. (Before
    // the element work, only warpgroup 1's later arrival, behind ps_full,
    // kept the producer off the rows still being read: racecheck reported
    // those reads as WAR hazards.)
    release(empty);
    u32 pf[kBlockM / 16][4], df[kBlockM / 16][4];
    Elems::pack(acc_s, pf);
    Elems::pack(acc_dp, df);
    // The slot is free once warpgroup 1 is done with step it − 2.
    if (it >= 2)
      mbar_wait(ps_empty, ((it / 2) + 1) & 1);
    // Fragment word (kk, r): key row 16·warp + g (+8 for odd r), queries
    // 16kk + 2tq (+8 for r ≥ 2) and the next one, as the lockstep step
    // stores dSᵀ.
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int key = warp * 16 + g + 8 * (r & 1);
        const int qr = kk * 16 + 8 * (r >> 1) + 2 * tq;
        const u32 off = SwizzledTile<kBlockN, 64>::offset(key, qr / 8) + (qr % 8) * 2;
        st_shared_32(s_p + off, pf[kk][r]);
        st_shared_32(s_dst + off, df[kk][r]);
      }
    // Written through the generic proxy, read by wgmma (the async one).
    fence_proxy_async_shared();
    __syncwarp();
    if (lane == 0)
      mbar_arrive(ps_full);
    named_bar_sync(kBarSlot, 128);
    // dQ's product dS·K over all kD columns, a 64-column slab of K at a
    // time (A = dSᵀ MN-major, B = K MN-major, as the lockstep step's).
    float acc_dq[kDqChains][kD / 8][4];
    zero_tiles(acc_dq[0]); // overwritten by the first k step; defined for the compiler
    const u64 ds_desc = wgmma_desc_sw128(s_dst, kDsSlab, 1024);
    wgmma_fence();
#pragma unroll
    for (int c = 0; c < kD / 64; ++c) {
      const u64 k_desc_t = wgmma_desc_sw128(s_k + c * kKSlab, kKSlab, 1024);
      float(&part)[8][4] = *reinterpret_cast<float(*)[8][4]>(&acc_dq[0][8 * c]);
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk)
        Wgmma<64>::template ss_mn<T>(part, ds_desc + kk * (2048 >> 4),
                                     k_desc_t + kk * (2048 >> 4), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(acc_dq[0]);
    // The turn warp has taken the turn; it publishes the next rank once
    // this warpgroup's adds are issued.
    named_bar_sync(kBarTurn, kTurnThreads);
    add_dq<kW>(a, acc_dq, bh, m, rank);
    named_bar_arrive(kBarAdded, kTurnThreads);
  }
}

} // namespace attnc

#endif
