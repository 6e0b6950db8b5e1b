// fwd_sm90's paged producer of PagedLoad::Warp (FwdSm90::run_paged_warp):
// the producer warpgroup's first warp issues a key block's TMA boxes, one
// lane a page. A template over the skeleton (its tiles, stages and visit
// order), instantiated from FwdSm90::body.
#ifndef ATTNC_PAGED_FWD_SM90_CUH
#define ATTNC_PAGED_FWD_SM90_CUH

#include "attnc/attention_args.cuh"
#include "attnc/paged_index.cuh"
#include "attnc/sm90_primitives.cuh"
#include "attnc/varlen.cuh"

namespace attnc {

/// Lane i < kBlockN / rows of the calling warp owns box i of every block
/// (the page of keys row + i·rows; paged_box). Its page index is read one
/// block ahead, so that the load is in flight while the warp waits for the
/// stage to be free, not after it (the thread producer's loads, one per
/// page, follow the wait). Lane 0 loads Q and arms each stage's barrier
/// before the lanes issue their boxes (__syncwarp). \p Fwd: FwdSm90 with
/// its head dims, blocks and stages; \p kv: its PagesKV (pages of 8
/// tokens and more, so at most 16 boxes a block of at most 128 keys).
template <class Fwd, int kD, int kDV, int kBlockM, int kBlockN, int kStages, class KV>
__device__ void paged_produce_warp(const FwdArgs &a, const Sm90Maps &maps, const SeqSpan &sp,
                                   const typename Fwd::Visits &vis, int m_block, int bh,
                                   u32 base, u32 bar_q, u32 bar_full, u32 bar_empty,
                                   const KV &kv) {
  static_assert(KV::kPaged, "paged calls only");
  const int lane = threadIdx.x % 32;
  const int h = bh % a.heads;
  const int count = vis.count;
  const int hk = h / (a.heads / a.heads_kv);
  if (lane == 0) {
    tma_prefetch_desc(&maps.q);
    tma_prefetch_desc(&maps.k);
    tma_prefetch_desc(&maps.v);
    // A paged call's q is packed: one batch of all tokens.
    const int qrow = sp.q0 + m_block * kBlockM;
    mbar_arrive_expect_tx(bar_q, Fwd::kQBytes);
#pragma unroll
    for (int s = 0; s < kD / 64; ++s)
      tma_load_4d(base + s * Fwd::kQSlab, &maps.q, s * 64,
                  tma_coord(1, maps.q_pos, qrow, h, 0), tma_coord(2, maps.q_pos, qrow, h, 0),
                  tma_coord(3, maps.q_pos, qrow, h, 0), bar_q);
  }
  const bool mine = lane * kv.rows < kBlockN;
  auto box = [&](int j) {
    bool full;
    const int row = sp.kv0 + Fwd::block_of(vis, sp, Fwd::entry_of(vis, j), full) * kBlockN;
    return paged_box(kv.pages, kv.shift, sp.seq_kv, row + lane * kv.rows);
  };
  PagedSlot next = mine ? box(0) : PagedSlot{0, 0};
  for (int j = 0; j < count; ++j) {
    const int stage = j % kStages;
    const PagedSlot at = next;
    if (mine && j + 1 < count)
      next = box(j + 1);
    if (j >= kStages)
      mbar_wait(bar_empty + 8 * stage, ((j / kStages) + 1) & 1);
    const u32 bar = bar_full + 8 * stage;
    const u32 s_k = base + Fwd::kQBytes + stage * Fwd::kStageBytes + lane * kv.rows * 128;
    if (lane == 0)
      mbar_arrive_expect_tx(bar, Fwd::kStageBytes);
    __syncwarp();
    if (mine) {
#pragma unroll
      for (int s = 0; s < kD / 64; ++s)
        tma_load_4d(s_k + s * Fwd::kKVSlab, &maps.k, s * 64,
                    tma_coord(1, maps.k_pos, at.slot, hk, at.page),
                    tma_coord(2, maps.k_pos, at.slot, hk, at.page),
                    tma_coord(3, maps.k_pos, at.slot, hk, at.page), bar);
#pragma unroll
      for (int s = 0; s < kDV / 64; ++s)
        tma_load_4d(s_k + Fwd::kKBytes + s * Fwd::kKVSlab, &maps.v, s * 64,
                    tma_coord(1, maps.v_pos, at.slot, hk, at.page),
                    tma_coord(2, maps.v_pos, at.slot, hk, at.page),
                    tma_coord(3, maps.v_pos, at.slot, hk, at.page), bar);
    }
  }
}

} // namespace attnc

#endif
