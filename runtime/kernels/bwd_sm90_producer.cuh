// bwd_sm90's warps beside the compute warpgroups (BwdDkDvSm90, bwd_sm90.cuh
// says what they do): the producer warp that streams Q, dO and the rows
// into the mbarrier ring, the turn warp that takes and publishes the dQ
// turns (with the bulk dQ also adding the step's dQ to the sum), and the
// rows' cp.async. Included by bwd_sm90.cuh after the struct.
#ifndef ATTNC_BWD_SM90_PRODUCER_CUH
#define ATTNC_BWD_SM90_PRODUCER_CUH

namespace attnc {

ATTNC_BWD_SM90_TEMPLATE
__device__ void ATTNC_BWD_SM90::produce(const BwdArgs &a, const Sm90BwdMaps &maps, u32 s_ring,
                                        u32 bar_full, u32 bar_empty, int n_block, int b, int hk,
                                        int group_size) {
  const int lane = threadIdx.x % 32;
  if (lane == 0) {
    tma_prefetch_desc(&maps.q);
    tma_prefetch_desc(&maps.dout);
  }
  int it = 0;
  for (int hi = 0; hi < group_size; ++hi) {
    const int h = hk * group_size + hi;
    const int bh = b * a.heads + h;
    const Walk w = walk(a, bh, n_block);
    for (int j = 0; j < w.blocks.count; ++j, ++it) {
      const int stage = it % kStages;
      if (it >= kStages)
        mbar_wait(bar_empty + 8 * stage, ((it / kStages) + 1) & 1);
      bool full;
      const int row0 = w.visit(a, j, full) * kBlockM;
      const u32 s = s_ring + stage * kStageBytes, bar = bar_full + 8 * stage;
      if (lane == 0) {
        mbar_arrive_expect_tx(bar, kQBytes + kOBytes);
        tma_load_slabs<kD, kQSlab>(s, &maps.q, maps.q_pos, row0, h, b, bar);
        tma_load_slabs<kDV, kQSlab>(s + kQBytes, &maps.dout, maps.do_pos, row0, h, b, bar);
      }
      load_rows<32>(a, s + kQBytes + kOBytes, bh, row0, lane);
      cp_async_mbar_arrive(bar);
    }
  }
  cp_async_wait<0>();
}

ATTNC_BWD_SM90_TEMPLATE
__device__ void ATTNC_BWD_SM90::take_turns(const BwdArgs &a, int n_block, int b, int hk,
                                           int group_size) {
  for (int hi = 0; hi < group_size; ++hi) {
    const int bh = b * a.heads + hk * group_size + hi;
    const Walk w = walk(a, bh, n_block);
    for (int j = 0; j < w.blocks.count; ++j) {
      bool full;
      const int m = w.visit(a, j, full);
      const int rank = Variant::kHasMask ? w.ranks[j] : Sem::unmasked_rank(a, n_block, m);
      take_turn(a.dq_sem + (long long)bh * a.kv_m_blocks + m, rank);
    }
  }
}

ATTNC_BWD_SM90_TEMPLATE
__device__ __forceinline__ void ATTNC_BWD_SM90::take_turn(int *sem, int rank) {
  const int lane = threadIdx.x % 32;
  if (lane == 0 && rank > 0)
    while (ld_acquire_gpu(sem) != rank) {
    }
  __syncwarp();
  named_bar_arrive(kBarTurn, kTurnThreads);
  named_bar_sync(kBarAdded, kTurnThreads);
  if (lane == 0)
    st_release_gpu(sem, rank + 1);
}

ATTNC_BWD_SM90_TEMPLATE
__device__ void ATTNC_BWD_SM90::write_dq_bulk(const BwdArgs &a, u32 s_dq, u32 dq_bars,
                                              int n_block, int b, int hk, int group_size) {
  const int lane = threadIdx.x % 32;
  int it = 0;
  for (int hi = 0; hi < group_size; ++hi) {
    const int bh = b * a.heads + hk * group_size + hi;
    const Walk w = walk(a, bh, n_block);
    for (int j = 0; j < w.blocks.count; ++j, ++it) {
      bool full;
      const int m = w.visit(a, j, full);
      // Atomic: every slot is added to the zeroed sum, no turns.
      const int rank = kAtomicDq           ? 1
                       : Variant::kHasMask ? w.ranks[j]
                                           : Sem::unmasked_rank(a, n_block, m);
      int *sem = kAtomicDq ? nullptr : a.dq_sem + (long long)bh * a.kv_m_blocks + m;
      const int slot = it & 1;
      mbar_wait(dq_bars + 8 * slot, (it / 2) & 1);
      // Every compute warp has waited for its dQ product: the next step's
      // dSᵀ may be stored.
      named_bar_arrive(kBarTurn, kThreads + 32);
      if constexpr (!kAtomicDq) {
        if (lane == 0 && rank > 0)
          while (ld_acquire_gpu(sem) != rank) {
          }
        __syncwarp();
        fence_proxy_async_global(); // the earlier ranks' sums, to the bulk reductions
      }
      // Rows lane and lane + 32 (a reduction of a row each: the slot's rows
      // are padded, the sum's are not).
      float *dst =
          a.dq_accum + ((long long)bh * Sem::accum_rows(a) + (long long)m * kBlockM + lane) * kD;
      const u32 src = s_dq + slot * kDqSlotBytes + lane * kDqRowBytes;
#pragma unroll
      for (int r = 0; r < kBlockM; r += 32) {
        if (rank == 0)
          bulk_store_s2g(dst + r * kD, src + r * kDqRowBytes, kD * 4);
        else
          bulk_reduce_add_f32_s2g(dst + r * kD, src + r * kDqRowBytes, kD * 4);
      }
      bulk_commit();
      // The slot is free once read; the turn passes once the sums are written.
      bulk_wait_read_all();
      mbar_arrive(dq_bars + 16 + 8 * slot);
      if constexpr (!kAtomicDq) {
        bulk_wait_all();
        fence_proxy_async_global(); // the reductions' writes before the release
        __syncwarp();
        if (lane == 0)
          st_release_gpu(sem, rank + 1);
      }
    }
  }
}

ATTNC_BWD_SM90_TEMPLATE
template <int kN>
__device__ __forceinline__ void ATTNC_BWD_SM90::load_rows(const BwdArgs &a, u32 dst, int bh,
                                                          int row0, int tid) {
  const long long plane = (long long)a.batch * a.heads * a.seq_q;
#pragma unroll
  for (int i = tid; i < kBlockM * kRowFloats; i += kN) {
    const int r = i % kBlockM, f = i / kBlockM;
    const bool ok = row0 + r < a.seq_q;
    const long long qi = ok ? row0 + r : 0; // an address in bounds either way
    if (f < kF)
      cp_async_4(dst + (r * kF + f) * 4, a.finals + f * plane + (long long)bh * a.seq_q + qi, ok);
    else
      cp_async_4(dst + (kBlockM * kF + r) * 4, a.doosum + (long long)bh * a.seq_q + qi, ok);
  }
}
} // namespace attnc

#endif
