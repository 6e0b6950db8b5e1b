// bwd_sm90's lockstep step (BwdDkDvSm90, bwd_sm90.cuh says what it does):
// one query block's Sᵀ and dPᵀ, element work, dV, dK and fused dQ's
// products, dQ's adds in the turns, and the dK/dV stores after the walk.
// Included by bwd_sm90.cuh after the struct.
#ifndef ATTNC_BWD_SM90_STEP_CUH
#define ATTNC_BWD_SM90_STEP_CUH

namespace attnc {

ATTNC_BWD_SM90_TEMPLATE
template <bool kFull, int kW>
__device__ __forceinline__ void
ATTNC_BWD_SM90::step(const BwdArgs &a, const typename Variant::Inputs &in, u32 s_k, u32 s_v,
                     u32 s_stage, u32 s_ds, u32 s_dq, u32 dq_bars, int it, u32 empty,
                     const float *rows, int m, int b, int h, int bh, int key0, int rank,
                     DqTurn &turn, float (&acc_dk)[Cols<kW>::kKN / 8][4],
                     float (&acc_dv)[Cols<kW>::kVN / 8][4], float *gacc) {
  using C = Cols<kW>;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4;
  const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  const u32 s_q = s_stage, s_do = s_stage + kQBytes;
  int seen = 0;
  if constexpr (kFusedDq && !kAtomicDq && !kWriter && !kTurnWarp)
    seen = Sem::peek(a, bh, m, rank);
  float acc_s[QT][4], acc_dp[QT][4];
  zero_tiles(acc_s); // overwritten by the first k step; defined for the compiler
  zero_tiles(acc_dp);
  {
    // K-major operands: a k16 step moves the start address (16-byte
    // units) within the swizzle atom, every 4 steps to the next slab.
    const u64 k_desc = wgmma_desc_sw128(s_k + key_offset(wg) * 128, 16, 1024);
    const u64 v_desc = wgmma_desc_sw128(s_v + key_offset(wg) * 128, 16, 1024);
    const u64 q_desc = wgmma_desc_sw128(s_q, 16, 1024);
    const u64 o_desc = wgmma_desc_sw128(s_do, 16, 1024);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk)
      Wgmma<kBlockM>::template ss<T>(acc_s, k_desc + (kk / 4) * (kKSlab >> 4) + (kk % 4) * 2,
                                     q_desc + (kk / 4) * (kQSlab >> 4) + (kk % 4) * 2, kk > 0);
    if constexpr (kTwoPass)
      wgmma_commit(); // Sᵀ alone: P is computed while dPᵀ runs
#pragma unroll
    for (int kk = 0; kk < kDV / 16; ++kk)
      Wgmma<kBlockM>::template ss<T>(acc_dp, v_desc + (kk / 4) * (kKSlab >> 4) + (kk % 4) * 2,
                                     o_desc + (kk / 4) * (kQSlab >> 4) + (kk % 4) * 2, kk > 0);
    wgmma_commit();
    if constexpr (kTwoPass) {
      wgmma_wait<1>();
      fence_regs(acc_s);
    } else {
      wgmma_wait<0>();
      fence_regs(acc_s);
      fence_regs(acc_dp);
    }
  }
  u32 pf[kBlockM / 16][4], df[kBlockM / 16][4];
  if constexpr (kTwoPass) {
    Elems::template elements_pipelined<kFull>(a, in, rows, m, b, h, key0, acc_s, acc_dp, pf, df,
                                              s_stage + kQBytes, acc_dv, gacc);
  } else {
    // Lean, and the column split (whose warpgroups both do the element
    // work of the same 64 keys): a tile wholly inside seq_q x seq_kv
    // (every tile of a long sequence) needs no bounds per element, and
    // without a mask no selects: only the element loop is duplicated, no
    // wgmma. A partial one also reads the mask's inputs unclamped
    // (Elems::tile_covered, asked only of partial tiles).
    constexpr bool kInsideTiles = kLean || kSplit;
    if (kInsideTiles && (m + 1) * kBlockM <= a.seq_q && key0 + kBlockN <= a.seq_kv &&
        (kFull || Elems::tile_covered(in, m, key0, kBlockN)))
      Elems::template elements<kFull, kInsideTiles>(a, in, rows, m, b, h, key0, acc_s, acc_dp,
                                                    gacc);
    else
      Elems::template elements<kFull>(a, in, rows, m, b, h, key0, acc_s, acc_dp, gacc);
    Elems::pack(acc_s, pf);
    Elems::pack(acc_dp, df);
  }
  // dO and Q as MN-major B operands ([query][column], the query being
  // the k of these products): 64-column slabs kQSlab bytes apart, a k16
  // step 16 rows (2048 bytes) further; from this warpgroup's first
  // column's slab.
  const u64 o_desc_t = wgmma_desc_sw128(s_do + (C::kV0 / 64) * kQSlab, kQSlab, 1024);
  const u64 q_desc_t = wgmma_desc_sw128(s_q + (C::kK0 / 64) * kQSlab, kQSlab, 1024);
  if constexpr (!kFusedDq) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
      Wgmma<C::kVN>::template rs<T>(acc_dv, pf[kk], o_desc_t + kk * (2048 >> 4), 1);
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
      Wgmma<C::kKN>::template rs<T>(acc_dk, df[kk], q_desc_t + kk * (2048 >> 4), 1);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(acc_dv);
    fence_regs(acc_dk);
  } else {
    if constexpr (kSplit || kLean) {
      // Lean: dV's and dK's products run while the dSᵀ tile is stored
      // and the warpgroups meet; dQ's is queued behind them with no wait
      // between (one wait for all three, as before).
      // Column-split: dV and dK issued before the dSᵀ tile is written
      // and waited for before dQ's product is, so that Pᵀ and dSᵀ are
      // no longer held when dQ's accumulators are (at 256/256 all three
      // products together would need 224 floats a thread beside the
      // addresses: ptxas serialised the wgmma).
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBlockM / 16; ++kk)
        Wgmma<C::kVN>::template rs<T>(acc_dv, pf[kk], o_desc_t + kk * (2048 >> 4), 1);
#pragma unroll
      for (int kk = 0; kk < kBlockM / 16; ++kk)
        Wgmma<C::kKN>::template rs<T>(acc_dk, df[kk], q_desc_t + kk * (2048 >> 4), 1);
      wgmma_commit();
    }
    // Bulk dQ: every warpgroup is done with the previous step's dSᵀ tile
    // (its slot is full).
    // (kSlotTurns: the compute warpgroups meet each other, so that no
    // turn warp's wait for a turn reaches them.)
    if (kBulkDq && it > 0) {
      if constexpr (kSlotTurns)
        sync_compute();
      else
        named_bar_sync(kBarTurn, kThreads + 32);
    }
    // dSᵀ to shared memory as this thread holds it: fragment word
    // (kk, r) is keys row 16·warp + g (+8 for odd r), queries 16kk + 2tq
    // (+8 for r ≥ 2) and the next one, of this warpgroup's 64 keys.
    // (Column-split: warpgroup 0's, which are the same as 1's.)
    if (!kSplit || wg == 0)
#pragma unroll
      for (int kk = 0; kk < kBlockM / 16; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int key = key_offset(wg) + warp * 16 + g + 8 * (r & 1);
          const int qr = kk * 16 + 8 * (r >> 1) + 2 * tq;
          st_shared_32(s_ds + (qr / 64) * kDsSlab +
                           SwizzledTile<kBlockN, 64>::offset(key, (qr % 64) / 8) + (qr % 8) * 2,
                       df[kk][r]);
        }
    // Written through the generic proxy, read by wgmma (the async one);
    // after the barrier every warpgroup's keys are in, and the previous
    // step's adds (made before this step's first barrier) precede the
    // release of its turn.
    fence_proxy_async_shared();
    sync_compute();
    if constexpr (!kAtomicDq && !kTurnWarp)
      Sem::publish(a, turn);
    if constexpr (kSplit) {
      wgmma_wait<0>();
      fence_regs(acc_dv);
      fence_regs(acc_dk);
    }
    float acc_dq[kDqChains][C::kQN / 8][4];
#pragma unroll
    for (int c = 0; c < kDqChains; ++c)
      zero_tiles(acc_dq[c]); // overwritten by the first k step; defined for the compiler
    // dS·K: A = dS, [key][query] (MN-major, M = this chain's 64 queries),
    // B = K, [key][column] (MN-major, N = this warpgroup's columns); a
    // k16 step is 16 key rows (2048 bytes) further in both.
    const u64 k_desc_t = wgmma_desc_sw128(s_k + (C::q0(wg) / 64) * kKSlab, kKSlab, 1024);
    wgmma_fence();
    // (Else issued after P, elements_pipelined, or before the dSᵀ tile.)
    if constexpr (!kTwoPass && !kSplit && !kLean)
#pragma unroll
      for (int kk = 0; kk < kBlockM / 16; ++kk)
        Wgmma<C::kVN>::template rs<T>(acc_dv, pf[kk], o_desc_t + kk * (2048 >> 4), 1);
    if constexpr (!kSplit && !kLean)
#pragma unroll
      for (int kk = 0; kk < kBlockM / 16; ++kk)
        Wgmma<C::kKN>::template rs<T>(acc_dk, df[kk], q_desc_t + kk * (2048 >> 4), 1);
#pragma unroll
    for (int c = 0; c < kDqChains; ++c) {
      const u64 ds_desc = wgmma_desc_sw128(s_ds + dq_chain(c, wg) * kDsSlab, kDsSlab, 1024);
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk)
        Wgmma<C::kQN>::template ss_mn<T>(acc_dq[c], ds_desc + kk * (2048 >> 4),
                                         k_desc_t + kk * (2048 >> 4), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    if constexpr (!kSplit) {
      fence_regs(acc_dv);
      fence_regs(acc_dk);
    }
#pragma unroll
    for (int c = 0; c < kDqChains; ++c)
      fence_regs(acc_dq[c]);
    release(empty); // Q, dO and the rows are read
    if constexpr (kDqWriter || kBulkDq) {
      // This warpgroup's columns (kDqRows: its chain's rows) of the step's
      // dQ into slot it % 2 (once
      // the writer has emptied it), for the writer's bulk adds in turn;
      // then every warpgroup is done reading the dSᵀ tile (bulk dQ: the
      // turn warp says so at the next step's dSᵀ stores).
      const int slot = it & 1;
      if (it >= 2)
        mbar_wait(dq_bars + 16 + 8 * slot, ((it / 2) + 1) & 1);
      const u32 row_addr =
          s_dq + slot * kDqSlotBytes + (dq_chain(0, wg) * 64 + warp * 16 + g) * kDqRowBytes +
          (C::q0(wg) + 2 * tq) * 4;
#pragma unroll
      for (int t = 0; t < C::kQN / 8; ++t)
#pragma unroll
        for (int half = 0; half < 2; ++half)
          st_shared_f2(row_addr + 8 * half * kDqRowBytes + t * 32, acc_dq[0][t][2 * half],
                       acc_dq[0][t][2 * half + 1]);
      fence_proxy_async_shared();
      mbar_arrive(dq_bars + 8 * slot); // every thread: see the slot barriers' init
      if constexpr (kDqWriter)
        sync_compute();
    } else if constexpr (kTurnWarp) {
      // The turn warp has taken the turn (and every warpgroup is done
      // reading the dSᵀ tile); it publishes the next rank once every
      // compute warp's adds are issued (the arrival orders them before
      // its release).
      // (Column-split: the warpgroups reach these from different code.)
      if constexpr (kSplit)
        named_bar_sync_unaligned(kBarTurn, kThreads + 32);
      else
        named_bar_sync(kBarTurn, kThreads + 32);
      add_dq<kW>(a, acc_dq, bh, m, rank);
      if constexpr (kSplit)
        asm volatile("barrier.arrive %0, %1;\n" ::"r"(kBarAdded), "r"(kThreads + 32)
                     : "memory");
      else
        named_bar_arrive(kBarAdded, kThreads + 32);
    } else {
      if constexpr (!kAtomicDq)
        Sem::wait_turn(a, bh, m, rank, seen);
      // The turn is this CTA's; atomic: every warpgroup is done reading
      // the dSᵀ tile, which the next step overwrites.
      sync_compute();
      add_dq<kW>(a, acc_dq, bh, m, kAtomicDq ? 1 : rank);
      if constexpr (!kAtomicDq)
        turn = DqTurn{bh, m, rank, true};
    }
  }
}

ATTNC_BWD_SM90_TEMPLATE
template <int kW>
__device__ __forceinline__ void
ATTNC_BWD_SM90::add_dq(const BwdArgs &a, const float (&acc)[kDqChains][Cols<kW>::kQN / 8][4],
                       int bh, int m, int rank) {
  constexpr int kQN = Cols<kW>::kQN;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4;
  const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  if constexpr (kVecAdds) {
    // Lanes tq and tq ^ 1 trade a pair: the even one then holds row g's
    // four columns 8t + 2·(tq & 2) .. + 3, the odd one row g + 8's, so
    // that each adds 16 bytes (half the instructions, which the LSU's
    // queue counts). Every element is still added once per rank, in rank
    // order: the same sums.
    const bool odd = tq & 1;
    float *wv = a.dq_accum + ((long long)bh * Sem::accum_rows(a) + (long long)m * kBlockM) * kD +
                (dq_chain(0, wg) * 64 + warp * 16 + g + (odd ? 8 : 0)) * kD + Cols<kW>::q0(wg) +
                2 * (tq & 2);
    float v[kDqChains][kQN / 8][4];
#pragma unroll
    for (int c = 0; c < kDqChains; ++c)
#pragma unroll
      for (int t = 0; t < kQN / 8; ++t) {
        const float *x = acc[c][t];
        const float r0 = __shfl_xor_sync(0xffffffffu, odd ? x[0] : x[2], 1);
        const float r1 = __shfl_xor_sync(0xffffffffu, odd ? x[1] : x[3], 1);
        v[c][t][0] = odd ? r0 : x[0];
        v[c][t][1] = odd ? r1 : x[1];
        v[c][t][2] = odd ? x[2] : r0;
        v[c][t][3] = odd ? x[3] : r1;
      }
    if (rank == 0) {
#pragma unroll
      for (int c = 0; c < kDqChains; ++c)
#pragma unroll
        for (int t = 0; t < kQN / 8; ++t)
          st_cg_f4(wv + c * 64 * kD + t * 8, v[c][t]);
    } else {
#pragma unroll
      for (int c = 0; c < kDqChains; ++c)
#pragma unroll
        for (int t = 0; t < kQN / 8; ++t)
          red_add_f4(wv + c * 64 * kD + t * 8, v[c][t]);
    }
    return;
  }
  float *ws = a.dq_accum + ((long long)bh * Sem::accum_rows(a) + (long long)m * kBlockM) * kD +
              (dq_chain(0, wg) * 64 + warp * 16 + g) * kD + Cols<kW>::q0(wg) + 2 * tq;
  // One branch for the whole tile: an asm statement cannot be predicated.
  if (rank == 0) {
#pragma unroll
    for (int c = 0; c < kDqChains; ++c)
#pragma unroll
      for (int t = 0; t < kQN / 8; ++t)
#pragma unroll
        for (int half = 0; half < 2; ++half)
          st_cg_f2(ws + (c * 64 + 8 * half) * kD + t * 8, acc[c][t][2 * half],
                   acc[c][t][2 * half + 1]);
  } else {
#pragma unroll
    for (int c = 0; c < kDqChains; ++c)
#pragma unroll
      for (int t = 0; t < kQN / 8; ++t)
#pragma unroll
        for (int half = 0; half < 2; ++half)
          red_add_f2(ws + (c * 64 + 8 * half) * kD + t * 8, acc[c][t][2 * half],
                     acc[c][t][2 * half + 1]);
  }
}

ATTNC_BWD_SM90_TEMPLATE
template <int kW>
__device__ __forceinline__ void ATTNC_BWD_SM90::store(const BwdArgs &a, int b, int hk, int key0,
                                                      const float (&acc_dk)[Cols<kW>::kKN / 8][4],
                                                      const float (&acc_dv)[Cols<kW>::kVN / 8][4],
                                                      u32 s_stage) {
  using C = Cols<kW>;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4;
  const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  unsigned short *dk = static_cast<unsigned short *>(a.dk) + b * a.dk_sb + hk * a.dk_sh;
  unsigned short *dv = static_cast<unsigned short *>(a.dv) + b * a.dv_sb + hk * a.dv_sh;
  if constexpr (kStagedStore) {
    const u32 s_dv = s_stage + kBlockN * kStagedKRow;
    // The ring's last reads (wgmma of the last step, the input-gradient
    // sums' scratch) are done.
    sync_compute();
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = key_offset(wg) + warp * 16 + g + 8 * half;
#pragma unroll
      for (int t = 0; t < C::kKN / 8; ++t)
        st_shared_32(s_stage + row * kStagedKRow + (C::kK0 + t * 8 + 2 * tq) * 2,
                     pack2<T>(acc_dk[t][2 * half], acc_dk[t][2 * half + 1]));
#pragma unroll
      for (int t = 0; t < C::kVN / 8; ++t)
        st_shared_32(s_dv + row * kStagedVRow + (C::kV0 + t * 8 + 2 * tq) * 2,
                     pack2<T>(acc_dv[t][2 * half], acc_dv[t][2 * half + 1]));
    }
    // The rows are written through the generic proxy and read by the bulk
    // copies through the async one.
    fence_proxy_async_shared();
    sync_compute();
    for (int i = threadIdx.x; i < 2 * kBlockN; i += kThreads) {
      const bool is_v = i >= kBlockN;
      const int row = is_v ? i - kBlockN : i;
      if (key0 + row >= a.seq_kv)
        continue;
      if (is_v)
        bulk_store_s2g(dv + (long long)(key0 + row) * a.dv_ss, s_dv + row * kStagedVRow,
                       kDV * 2);
      else
        bulk_store_s2g(dk + (long long)(key0 + row) * a.dk_ss, s_stage + row * kStagedKRow,
                       kD * 2);
    }
    bulk_commit();
    // The shared rows are read before the CTA's shared memory is released.
    bulk_wait_read_all();
  } else {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int key = key0 + key_offset(wg) + warp * 16 + g + 8 * half;
      if (key >= a.seq_kv)
        continue;
#pragma unroll
      for (int t = 0; t < C::kKN / 8; ++t)
        *reinterpret_cast<u32 *>(dk + (long long)key * a.dk_ss + C::kK0 + t * 8 + 2 * tq) =
            pack2<T>(acc_dk[t][2 * half], acc_dk[t][2 * half + 1]);
#pragma unroll
      for (int t = 0; t < C::kVN / 8; ++t)
        *reinterpret_cast<u32 *>(dv + (long long)key * a.dv_ss + C::kV0 + t * 8 + 2 * tq) =
            pack2<T>(acc_dv[t][2 * half], acc_dv[t][2 * half + 1]);
    }
  }
}
} // namespace attnc

#endif
