// fwd_sm90's paged producers beside the thread's (FwdSm90::produce): of
// PagedLoad::Warp (FwdSm90::run_paged_warp), the producer warpgroup's first
// warp issues a key block's TMA boxes, one lane a page; of PagedLoad::Gather
// (FwdSm90::run_paged_gather), the whole producer warpgroup copies the
// block's rows with cp.async, one page lookup a row, so that any page size
// runs (pages of 1 included, which no TMA box fits). Templates over the
// skeleton (its tiles, stages and visit order), instantiated from
// FwdSm90::body.
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
    Fwd::load_q(maps, sp, m_block, h, 0, base, bar_q);
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
      tma_load_slabs<kD, Fwd::kKVSlab>(s_k, &maps.k, maps.k_pos, at.slot, hk, at.page, bar);
      tma_load_slabs<kDV, Fwd::kKVSlab>(s_k + Fwd::kKBytes, &maps.v, maps.v_pos, at.slot, hk,
                                        at.page, bar);
    }
  }
}

/// The gather's row copies (paged_produce_gather): warp w owns rows
/// [w·kBlockN/4, (w+1)·kBlockN/4) of every block; one copy of the warp
/// covers 4 rows of one 64-column slab (8 lanes a row), so consecutive
/// lanes read 128 contiguous bytes of one row. Lane l reads the page index
/// of the warp's row l one block ahead (in flight while the warp waits
/// for the stage to be free) and makes the row's K (and V) address once a
/// block; the others take it by a shuffle and add their chunk: one index
/// load and one address a row, not one per copy. \p kSame: the caches'
/// strides are equal (separate K and V tensors of one shape, or halves of
/// one), so a row's V is its K address plus the caches' distance and only
/// K's address is shuffled. Rows at or past the sequence's end are
/// zero-filled and not read (so the consumers have no tail to zero).
template <class Fwd, int kD, int kDV, int kBlockN, int kStages, bool kSame, class KV>
__device__ __forceinline__ void paged_gather_rows(const FwdArgs &a, const SeqSpan &sp,
                                                  const typename Fwd::Visits &vis, int hk,
                                                  u32 base, u32 bar_full, u32 bar_empty,
                                                  const KV &kv) {
  constexpr int kWarpRows = kBlockN / 4;
  constexpr int kPasses = kWarpRows / 4;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int count = vis.count;
  // The producer runs at 24 registers (setmaxnreg): a lane computes the
  // addresses of its own row (page, slot and KV head) once a block, and
  // each copy takes its row's by a shuffle; the caches' pointers and
  // strides are read from the kernel's parameters. (Shuffling the page and
  // computing the offsets in every pass kept 64-bit invariants live and
  // spilled.) Addresses are byte addresses, so that a copy adds only its
  // chunk.
  const int sub = lane / 8; // the lane's row of a copy's four
  const int row_w = warp * kWarpRows;
  // The lane's chunk in row row_w + sub + 4k of a stage: row_w is a
  // multiple of 8, so the row's swizzle phase is sub on even passes k and
  // sub + 4 (bit 6 of the byte offset flipped) on odd ones.
  const u32 dst = (row_w + sub) * 128 + (((lane % 8) ^ sub) << 4);
  const unsigned long long chunk = (lane % 8) * 16;
  const unsigned long long k0 =
      reinterpret_cast<unsigned long long>(a.k) + 2ull * (unsigned long long)(hk * a.k_sh);
  const unsigned long long v0 =
      reinterpret_cast<unsigned long long>(a.v) + 2ull * (unsigned long long)(hk * a.v_sh);
  // A paged call visits a range of key blocks (sp.packed: no block list).
  auto block_row = [&](int j) { return (vis.first + j) * kBlockN; };
  // The page of the warp's row lane (lanes past a warp's 16 rows repeat);
  // page 0 past the end (every index was checked, so page 0 exists; those
  // rows are not read).
  auto page_of = [&](int j) {
    const int t = block_row(j) + row_w + lane % kWarpRows;
    return t < sp.seq_kv ? __ldg(kv.pages + (t >> kv.shift)) : 0;
  };
  int next = page_of(0);
  for (int j = 0; j < count; ++j) {
    const int stage = j % kStages;
    const int slot = (block_row(j) + row_w + lane % kWarpRows) & ((1 << kv.shift) - 1);
    const unsigned long long kr =
        k0 + 2ull * (unsigned long long)(next * a.k_sb + slot * a.k_ss);
    const unsigned long long vr =
        kSame ? 0ull : v0 + 2ull * (unsigned long long)(next * a.v_sb + slot * a.v_ss);
    // The sequence's rows left from this lane's first row of the block: a
    // copy's row 4k is in the sequence when 4k < left.
    const int left = sp.seq_kv - (block_row(j) + row_w + sub);
    if (j + 1 < count)
      next = page_of(j + 1);
    if (j >= kStages)
      mbar_wait(bar_empty + 8 * stage, ((j / kStages) + 1) & 1);
    const u32 s_k = base + Fwd::kQBytes + stage * Fwd::kStageBytes;
#pragma unroll
    for (int k = 0; k < kPasses; ++k) {
      // Row 4k + sub of the warp's, whose addresses its lane holds; this
      // lane adds its chunk.
      const int src = 4 * k + sub;
      const bool ok = 4 * k < left;
      const u32 d = s_k + 512 * k + ((k & 1) ? dst ^ 64u : dst);
      const unsigned long long ks = __shfl_sync(0xffffffffu, kr, src) + chunk;
      const unsigned long long vs =
          kSame ? ks + (v0 - k0) : __shfl_sync(0xffffffffu, vr, src) + chunk;
#pragma unroll
      for (int s = 0; s < kD / 64; ++s)
        cp_async_16(d + s * Fwd::kKVSlab, reinterpret_cast<const void *>(ks + s * 128), ok);
#pragma unroll
      for (int s = 0; s < kDV / 64; ++s)
        cp_async_16(d + Fwd::kKBytes + s * Fwd::kKVSlab,
                    reinterpret_cast<const void *>(vs + s * 128), ok);
    }
    cp_async_mbar_arrive(bar_full + 8 * stage);
  }
}

/// The gather: the producer warpgroup's 128 threads copy a key block's K
/// and V rows with 16-byte cp.async straight into the stage's swizzled
/// slabs (the layout TMA's 128-byte swizzle writes: chunk c of row r at
/// chunk c ^ (r % 8) of the row's 128 bytes), each row from its own page,
/// so that the consumers run unchanged on any page size (paged_gather_rows
/// says which thread copies what). Each thread arrives on the stage's
/// barrier once its copies land (cp.async.mbarrier.arrive.noinc; the
/// barrier expects 128 arrivals, KV::kFullArrivals); the consumers fence
/// the async proxy before their wgmma read what the generic proxy wrote.
/// Thread 0 loads Q by TMA.
template <class Fwd, int kD, int kDV, int kBlockM, int kBlockN, int kStages, class KV>
__device__ void paged_produce_gather(const FwdArgs &a, const Sm90Maps &maps, const SeqSpan &sp,
                                     const typename Fwd::Visits &vis, int m_block, int bh,
                                     u32 base, u32 bar_q, u32 bar_full, u32 bar_empty,
                                     const KV &kv) {
  static_assert(KV::kPaged && KV::kGather, "the gather's calls only");
  static_assert(kBlockN == 64 || kBlockN == 128,
                "a warp's rows are at most 32: one page index a lane");
  static_assert(KV::kFullArrivals == 128, "every producer thread arrives");
  const int h = bh % a.heads;
  const int hk = h / (a.heads / a.heads_kv);
  if (threadIdx.x == 0) {
    tma_prefetch_desc(&maps.q);
    // A paged call's q is packed: one batch of all tokens.
    Fwd::load_q(maps, sp, m_block, h, 0, base, bar_q);
  }
  if (a.k_sb == a.v_sb && a.k_ss == a.v_ss && a.k_sh == a.v_sh)
    paged_gather_rows<Fwd, kD, kDV, kBlockN, kStages, true>(a, sp, vis, hk, base, bar_full,
                                                            bar_empty, kv);
  else
    paged_gather_rows<Fwd, kD, kDV, kBlockN, kStages, false>(a, sp, vis, hk, base, bar_full,
                                                             bar_empty, kv);
  // The copies land before the thread exits.
  cp_async_wait<0>();
}

} // namespace attnc

#endif
