// bwd_sm90's dQ through shared slots with turns acquired ahead (BwdDkDvSm90
// with kSlotTurns: kBulkDq 2, 3 or 4, written .lean2.bulk2., .lean2.red2.
// and .lean2.red.; at d64 also of 128-row steps, the two warpgroups' row
// chains; bwd_sm90.cuh says what the rest does). Included by
// bwd_sm90.cuh after the struct.
//
// Why: with the bulk dQ's one turn warp (kBulkDq 1) every step's turn is
// taken, the slot added and the turn published in sequence, and the compute
// threads meet that warp before each step's dSᵀ stores; a slow acquire or a
// slow completion of the adds then stalls the step. Here a turn warp
// acquires its next turn before the compute threads have filled its slot
// (the acquire's wait overlaps their step), and the compute warpgroups meet
// each other, not a turn warp, before overwriting the dSᵀ tile. With two
// turn warps, warp w takes the steps it with it % 2 == w (slot w), so each
// has two steps' time for its sequence. The order of every sum is still the
// ranks': the bits are the same on every run.
//   kBulkDq 2 (.bulk2., two warps): the slot's rows by bulk reductions
//              (cp.reduce.async.bulk), the turn published once they have
//              completed (an async-proxy write is ordered before a release
//              only by its completion).
//   kBulkDq 3 (.red2., two warps) and 4 (.red., one): the slot's rows by
//              the turn warp's own red.global.add.v4 (generic proxy), the
//              turn published right after they are issued (the release
//              orders them, as in the default, where the compute threads
//              issue them).
#ifndef ATTNC_BWD_SM90_DQ_SLOTS_CUH
#define ATTNC_BWD_SM90_DQ_SLOTS_CUH

namespace attnc {

/// Four floats from shared memory (16-byte aligned).
__device__ __forceinline__ void ld_shared_f4(u32 addr, float (&x)[4]) {
  asm volatile("ld.shared.v4.f32 {%0,%1,%2,%3}, [%4];\n"
               : "=f"(x[0]), "=f"(x[1]), "=f"(x[2]), "=f"(x[3])
               : "r"(addr));
}

ATTNC_BWD_SM90_TEMPLATE
__device__ void ATTNC_BWD_SM90::write_dq_slots(const BwdArgs &a, u32 s_dq, u32 dq_bars,
                                               int n_block, int b, int hk, int group_size,
                                               int owner) {
  int it = 0;
  for (int hi = 0; hi < group_size; ++hi) {
    const int bh = b * a.heads + hk * group_size + hi;
    const Walk w = walk(a, bh, n_block);
    for (int j = 0; j < w.blocks.count; ++j, ++it) {
      if (it % kDqTurnWarps != owner)
        continue;
      bool full;
      const int m = w.visit(a, j, full);
      // Atomic: every slot is added to the zeroed sum, no turns.
      const int rank = kAtomicDq           ? 1
                       : Variant::kHasMask ? w.ranks[j]
                                           : Sem::unmasked_rank(a, n_block, m);
      int *sem = kAtomicDq ? nullptr : a.dq_sem + (long long)bh * a.kv_m_blocks + m;
      float *dst = a.dq_accum + ((long long)bh * Sem::accum_rows(a) + (long long)m * kBlockM) * kD;
      add_dq_slot(s_dq, dq_bars, it, sem, dst, rank);
    }
  }
}

ATTNC_BWD_SM90_TEMPLATE
__device__ __forceinline__ void ATTNC_BWD_SM90::add_dq_slot(u32 s_dq, u32 dq_bars, int it,
                                                            int *sem, float *dst, int rank) {
  static_assert(kBulkDq >= 2 && kBulkDq <= 4, "turns ahead: bulk or thread reductions");
  // A pass of the thread reductions covers 512 bytes, 16 a lane: one row at
  // d128, two at d64 (lanes 0-15 the first, 16-31 the second).
  static_assert(kD == 128 || kD == 64, "a pass of 32 lanes' 16 bytes is a whole number of rows");
  constexpr int kLanesPerRow = kD / 4, kRowsPerPass = 32 / kLanesPerRow;
  static_assert(kBlockM % kRowsPerPass == 0, "the slot's rows in whole passes");
  const int lane = threadIdx.x % 32;
  const u32 slot = s_dq + (it & 1) * kDqSlotBytes;
  // The turn first, while the compute threads still fill the slot: the
  // warp holds nothing while it waits (the other warp and the compute
  // threads go on), and the CTAs before it publish without this one.
  if constexpr (!kAtomicDq) {
    if (lane == 0 && rank > 0)
      while (ld_acquire_gpu(sem) != rank) {
      }
    __syncwarp();
    if constexpr (kBulkDq == 2)
      fence_proxy_async_global(); // the earlier ranks' sums, to the bulk reductions
  }
  mbar_wait(dq_bars + 8 * (it & 1), (it / 2) & 1);
  if constexpr (kBulkDq == 2) {
    // Rows lane and lane + 32, a reduction of a row each (the slot's
    // rows are padded, the sum's are not); rank 0 stores.
#pragma unroll
    for (int r = 0; r < kBlockM; r += 32) {
      if (rank == 0)
        bulk_store_s2g(dst + (r + lane) * kD, slot + (r + lane) * kDqRowBytes, kD * 4);
      else
        bulk_reduce_add_f32_s2g(dst + (r + lane) * kD, slot + (r + lane) * kDqRowBytes,
                                kD * 4);
    }
    bulk_commit();
    bulk_wait_read_all();
  } else {
    // kRowsPerPass rows a pass, 16 bytes a lane: each instruction
    // covers four whole 128-byte lines.
    const int row = lane / kLanesPerRow, col = lane % kLanesPerRow;
    const u32 src = slot + row * kDqRowBytes + col * 16;
    float *out = dst + row * kD + col * 4;
    // One branch for the slot: an asm statement cannot be predicated.
    if (rank == 0) {
#pragma unroll 4
      for (int r = 0; r < kBlockM; r += kRowsPerPass) {
        float x[4];
        ld_shared_f4(src + r * kDqRowBytes, x);
        st_cg_f4(out + r * kD, x);
      }
    } else {
#pragma unroll 4
      for (int r = 0; r < kBlockM; r += kRowsPerPass) {
        float x[4];
        ld_shared_f4(src + r * kDqRowBytes, x);
        red_add_f4(out + r * kD, x);
      }
    }
  }
  // The slot is read (its values are in the adds issued, or the bulk
  // reductions have read it): the compute threads may refill it.
  mbar_arrive(dq_bars + 16 + 8 * (it & 1));
  if constexpr (!kAtomicDq) {
    if constexpr (kBulkDq == 2) {
      bulk_wait_all();
      fence_proxy_async_global(); // the reductions' writes before the release
    }
    // Every lane's adds precede lane 0's release (the warp barrier
    // orders them, the release is cumulative).
    __syncwarp();
    if (lane == 0)
      st_release_gpu(sem, rank + 1);
  }
}

} // namespace attnc

#endif
