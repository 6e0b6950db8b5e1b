// bwd_sm90's compute threads' walk (BwdDkDvSm90::consume; bwd_sm90.cuh
// says what the kernel does): every query block of every head of the
// group, each step handed to the lockstep, roles or ping-pong step, then
// dK and dV stored. Included by bwd_sm90.cuh after the struct.
#ifndef ATTNC_BWD_SM90_CONSUME_CUH
#define ATTNC_BWD_SM90_CONSUME_CUH

namespace attnc {

ATTNC_BWD_SM90_TEMPLATE
template <int kW>
__device__ __forceinline__ void
ATTNC_BWD_SM90::consume(const BwdArgs &a, const typename Variant::Inputs &in, u32 s_k,
                        u32 s_v, u32 s_ring, u32 s_ds, u32 s_dq, u32 bar_full,
                        u32 bar_empty, unsigned char *ring, int n_block, int b, int hk,
                        int group_size, int key0) {
  const int warp = threadIdx.x / 32;
  // Ping-pong: warpgroup 0 takes the tensor cores first.
  if (kPingPong && threadIdx.x >= 128)
    named_bar_arrive(kBarToken + 0, kThreads);
  float acc_dk[Cols<kW>::kKN / 8][4], acc_dv[Cols<kW>::kVN / 8][4];
  zero_tiles(acc_dk);
  zero_tiles(acc_dv);
  float gacc[kNumGrads > 0 ? kNumGrads : 1];
#pragma unroll
  for (int j = 0; j < (kNumGrads > 0 ? kNumGrads : 1); ++j)
    gacc[j] = 0.f;

  int it = 0; // warp-specialised: the ring's step count over all heads
  for (int hi = 0; hi < group_size; ++hi) {
    const int h = hk * group_size + hi;
    const int bh = b * a.heads + h;
    const Walk w = walk(a, bh, n_block);
    const int count = w.blocks.count;
    DqTurn turn{0, 0, 0, false}; // fused: published at the next barrier
    const unsigned short *q =
        static_cast<const unsigned short *>(a.q) + b * a.q_sb + h * a.q_sh;
    const unsigned short *dout =
        static_cast<const unsigned short *>(a.dout) + b * a.do_sb + h * a.do_sh;
    auto load = [&](int j) {
      bool full;
      const int row0 = w.visit(a, j, full) * kBlockM;
      const u32 s = s_ring + (j % kStages) * kStageBytes;
      load_slabs_async<kBlockM, kD, kThreads>(s, q, a.q_ss, row0, a.seq_q);
      load_slabs_async<kBlockM, kDV, kThreads>(s + kQBytes, dout, a.do_ss, row0,
                                               a.seq_q);
      load_rows<kThreads>(a, s + kQBytes + kOBytes, bh, row0, threadIdx.x);
    };
    if constexpr (kWs) {
      (void)load; // the producer loads
    } else {
#pragma unroll
      for (int s = 0; s < kStages - 1; ++s) {
        if (s < count)
          load(s);
        cp_async_commit(); // always commit: wait_group counts groups
      }
    }
    for (int j = 0; j < count; ++j, ++it) {
      int stage;
      if constexpr (kWs) {
        stage = it % kStages;
        mbar_wait(bar_full + 8 * stage, (it / kStages) & 1);
      } else {
        stage = j % kStages;
        cp_async_wait<kStages - 2>();
        // The tiles were written through the generic proxy and wgmma reads
        // them through the async one.
        fence_proxy_async_shared();
        // Step j's tiles are in, and every warpgroup is done with step
        // j − 1 (its wgmma waited for): that ring slot may be refilled.
        __syncthreads();
        if (j + kStages - 1 < count)
          load(j + kStages - 1);
        cp_async_commit();
      }
      bool full;
      const int m = w.visit(a, j, full);
      const int slot = stage * kStageBytes;
      const float *rows =
          reinterpret_cast<const float *>(ring + slot + kQBytes + kOBytes);
      // Fused dQ: this key block's place among those visiting m.
      int rank = 0;
      if constexpr (kFusedDq && !kAtomicDq && !kWriter && !kBulkDq)
        rank = Variant::kHasMask ? w.ranks[j] : Sem::unmasked_rank(a, n_block, m);
      const u32 empty = bar_empty + 8 * stage;
      const u32 dq_bars = bar_full + kDqBarOffset;
      if constexpr (kPingPong) {
        if (full)
          PingPong::template step<true>(a, in, s_k, s_v, s_ring + slot, s_ds, s_dq, dq_bars, it, empty,
                        rows, m, b, h, key0, acc_dk, acc_dv, gacc);
        else
          PingPong::template step<false>(a, in, s_k, s_v, s_ring + slot, s_ds, s_dq, dq_bars, it, empty,
                         rows, m, b, h, key0, acc_dk, acc_dv, gacc);
      } else if constexpr (kRoles) {
        if (full)
          step_roles<true, kW>(a, in, s_k, s_v, s_ring + slot, s_ds, bar_full + kPsBarOffset,
                               it, empty, rows, m, b, h, bh, key0, rank, acc_dk, acc_dv,
                               gacc);
        else
          step_roles<false, kW>(a, in, s_k, s_v, s_ring + slot, s_ds, bar_full + kPsBarOffset,
                                it, empty, rows, m, b, h, bh, key0, rank, acc_dk, acc_dv,
                                gacc);
      } else if (full)
        step<true, kW>(a, in, s_k, s_v, s_ring + slot, s_ds, s_dq, dq_bars, it, empty, rows,
                       m, b, h, bh, key0, rank, turn, acc_dk, acc_dv, gacc);
      else
        step<false, kW>(a, in, s_k, s_v, s_ring + slot, s_ds, s_dq, dq_bars, it, empty, rows,
                        m, b, h, bh, key0, rank, turn, acc_dk, acc_dv, gacc);
    }
    // The last step's reads are done before the ring is refilled (the
    // next head) or reused (below), and its dQ adds precede the release.
    sync_compute();
    if constexpr (kFusedDq && !kAtomicDq)
      Sem::publish(a, turn);
    // (Warp-specialised, the ring belongs to the producer: the dSᵀ tile,
    // free here. Column-split: warpgroup 1's sums repeat warpgroup 0's.)
    if constexpr (kNumGrads > 0)
      store_input_grad_partials<kNumGrads, kWarps>(
          a, gacc, kSplit && warp >= 4,
          reinterpret_cast<float *>(kWs ? ring + kStages * kStageBytes : ring), n_block, bh,
          [] { sync_compute(); });
  }
  if constexpr (!kWs)
    cp_async_wait<0>();
  // Bulk dQ: the turn warp's release of the last step's dSᵀ tile (the
  // steps' others are taken before the next step's dSᵀ stores).
  if (kBulkDq == 1 && it > 0)
    named_bar_sync(kBarTurn, kThreads + 32);
  // Ping-pong: warpgroup 1's last token (every step passes it on).
  if (kPingPong && threadIdx.x < 128)
    named_bar_sync(kBarToken + 0, kThreads);
  // Roles: warpgroup 1 holds all of dK and dV.
  if (!kRoles || kW == 1)
    store<kW>(a, b, hk, key0, acc_dk, acc_dv, s_ring);
}

} // namespace attnc

#endif
