// fwd_sm90: the Hopper forward skeleton (sm_90a). One CTA per (query block,
// batch·head) of one producer warpgroup and kBlockM/64 consumer warpgroups.
// The producer's first thread loads Q once and streams K/V tiles with TMA
// into a ring of kStages shared-memory stages completed on mbarriers; each
// consumer warpgroup owns 64 query rows and computes S = Q·Kᵀ (wgmma, both
// operands in shared memory) and O += P·V (wgmma with P from registers).
// Two consumers take turns on the tensor cores (ping-pong, two named
// barriers), so one's softmax overlaps the other's GEMMs; within a
// consumer, the P·V of block j-1 runs while the softmax of block j is
// computed. The variant (score_mod, mask, online_fwd, epilogue) is the
// generated Variant, called through fragments with the sm80 interface.
#ifndef ATTNC_FWD_SM90_CUH
#define ATTNC_FWD_SM90_CUH

#include "attnc/attention_args.cuh"
#include "attnc/fwd_sm80.cuh"
#include "attnc/paged_fwd.cuh"
#include "attnc/paged_fwd_sm90.cuh"
#include "attnc/sm90_primitives.cuh"
#include "attnc/sm90_wgmma.cuh"
#include "attnc/varlen.cuh"

namespace attnc {

/// One thread's view of a consumer warpgroup's S accumulator (m64nN): rows
/// 16·warp + g and + 8 of the warpgroup's 64, two elements per n8 tile and
/// row. The four lanes of a quad share a row, as in Sm80ScoreFrag, and
/// kInfMasked means what it means there (masked scores hold −∞, every
/// element reads as active, every lane runs online_fwd for both rows).
/// A compile-time bool for a generic lambda's argument (no <type_traits>
/// under NVRTC): the step evaluates its mask loop under either value.
template <bool B> struct BoolTag {
  static constexpr bool kValue = B;
};

template <int NT, bool kFull, bool kInfMasked = false> struct Sm90ScoreFrag {
  static constexpr int kRows = 2;
  static constexpr int kCols = 2 * NT;
  using ActWord = ActBits<2 * NT>;
  float (&acc)[NT][4];
  const ActWord (&act)[2];
  int row0, col0, tq;
  __device__ __forceinline__ float &at(int r, int c) { return acc[c >> 1][r * 2 + (c & 1)]; }
  __device__ __forceinline__ int row(int r) const { return row0 + 8 * r; }
  __device__ __forceinline__ int col(int c) const {
    return col0 + (c >> 1) * 8 + 2 * tq + (c & 1);
  }
  __device__ __forceinline__ bool active(int r, int c) const {
    if constexpr (kFull || kInfMasked)
      return true;
    else
      return (act[r] >> c) & 1;
  }
  __device__ static __forceinline__ float allreduce_max(float x) {
    return quad_row_max<kFull || kInfMasked>(x);
  }
  __device__ static __forceinline__ float allreduce_sum(float x) {
    return quad_row_sum<kFull || kInfMasked>(x);
  }
};

/// The O accumulator (m64nDV) row view for the epilogue.
template <int VT> struct Sm90OutFrag {
  static constexpr int kRows = 2;
  static constexpr int kCols = 2 * VT;
  float (&acc)[VT][4];
  __device__ __forceinline__ float &at(int r, int c) { return acc[c >> 1][r * 2 + (c & 1)]; }
};

template <class Variant, class T, int kD, int kDV, int kBlockM, int kBlockN, int kStages>
struct FwdSm90 {
  static constexpr int kConsumers = kBlockM / 64;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  static constexpr int NT = kBlockN / 8;
  static constexpr int VT = kDV / 8;
  static_assert(kBlockM == 64 || kBlockM == 128, "one or two consumer warpgroups");
  static_assert(kBlockN == 64 || kBlockN == 128 || kBlockN == 192,
                "key blocks of 64, 128 or 192 (the wgmma N of S)");
  static_assert(kD % 64 == 0 && kDV % 64 == 0 && kD <= 256 && kDV <= 256,
                "head dims are 64-column slabs of the 128-byte swizzle");
  static_assert(kStages >= 2 && kStages <= 4, "a ring of 2 to 4 stages");
  // Shared memory: each tile is a set of 64-column slabs ([rows][64], 128
  // bytes a row, as TMA writes them with the 128-byte swizzle), every slab
  // 1024-byte aligned. Q, then per stage K and V, then the mbarriers.
  static constexpr int kQSlab = kBlockM * 128;
  static constexpr int kKVSlab = kBlockN * 128;
  static constexpr int kQBytes = kQSlab * (kD / 64);
  static constexpr int kKBytes = kKVSlab * (kD / 64);
  static constexpr int kVBytes = kKVSlab * (kDV / 64);
  static constexpr int kStageBytes = kKBytes + kVBytes;
  static constexpr int kBarOffset = kQBytes + kStages * kStageBytes;
  static_assert(8 + 16 * kStages <= 128, "a packed call's key range fits beside the mbarriers");
  /// 1024 bytes of slack to align the dynamic shared memory by hand, the
  /// tiles, and 256 bytes of barriers (Sm90Config::sharedBytes says the same).
  static constexpr int kSmemBytes = 1024 + kBarOffset + 256;
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;

  /// Where a CTA's K/V tiles come from: a dense or packed call's rows
  /// (one TMA box of kBlockN rows a slab), or a paged sequence's pages
  /// (paged prefill: one box of `rows` rows per page the block touches,
  /// rows = min(page size, kBlockN), at the page's slot; the block's rows
  /// past the sequence's end are zeroed by the consumers, since a page's
  /// free slots may hold anything).
  /// kLoad: codegen's PagedLoad: 0 the producer's first thread issues the
  /// boxes, 1 its first warp (paged_fwd_sm90.cuh's paged_produce_warp), 2
  /// no boxes: its 128 threads gather the rows by cp.async
  /// (paged_produce_gather; any page size), each arriving on a stage's
  /// full barrier (kFullArrivals) when its copies land.
  struct RowsKV {
    static constexpr bool kPaged = false;
    static constexpr bool kWarp = false;
    static constexpr bool kGather = false;
    static constexpr int kFullArrivals = 1;
  };
  template <int kLoad> struct PagesKV {
    static constexpr bool kPaged = true;
    static constexpr bool kWarp = kLoad == 1;
    static constexpr bool kGather = kLoad == 2;
    static constexpr int kFullArrivals = kGather ? 128 : 1;
    const int *pages;
    int shift, rows;
  };

  __device__ static void run(const FwdArgs &a, const typename Variant::Inputs &in,
                             const Sm90Maps &maps, unsigned char *smem) {
    // Query blocks in reverse: under a causal mask the last ones have the
    // most key blocks, and starting the longest CTAs first shortens the
    // tail of the grid (one CTA per SM). A dense call's grid is (query
    // blocks, batch·heads); a packed call's (packed_block_bound's query
    // blocks, heads) has a CTA per query block a sequence has
    // (packed_cta_block), not per block of the longest sequence.
    int m_block = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, index = -1;
    if (a.cu_seqlens_q) {
      const PackedBlock pb = packed_cta_block(a.cu_seqlens_q, a.batch, kBlockM);
      if (pb.seq < 0)
        return;
      bh = pb.seq * a.heads + blockIdx.y;
      index = pb.index;
    }
    // This CTA's sequence (varlen.cuh).
    const SeqSpan sp = seq_span(a.cu_seqlens_q, a.cu_seqlens_kv, a.total_q, a.batch,
                                a.heads, a.seq_q, a.seq_kv, bh / a.heads, bh % a.heads);
    if (index >= 0)
      m_block = (sp.seq_q + kBlockM - 1) / kBlockM - 1 - index;
    if (m_block * kBlockM >= sp.seq_q)
      return;
    body(a, sequence_inputs(in, sp), maps, smem, sp, m_block, bh, RowsKV{});
  }

  /// Paged prefill (paged_fwd.cuh): sequence b's queries over its pages,
  /// the maps' k and v describing the caches as [pages][slots][heads]
  /// (makeSm90PagedMaps). A malformed sequence gets NaN rows.
  __device__ static void run_paged(const PagedFwdArgs &p, const typename Variant::Inputs &in,
                                   const Sm90Maps &maps, unsigned char *smem) {
    paged<0>(p, in, maps, smem);
  }
  /// run_paged with the K/V boxes issued by the producer's first warp.
  __device__ static void run_paged_warp(const PagedFwdArgs &p,
                                        const typename Variant::Inputs &in,
                                        const Sm90Maps &maps, unsigned char *smem) {
    paged<1>(p, in, maps, smem);
  }
  /// run_paged with the K/V rows gathered by cp.async (any page size).
  __device__ static void run_paged_gather(const PagedFwdArgs &p,
                                          const typename Variant::Inputs &in,
                                          const Sm90Maps &maps, unsigned char *smem) {
    paged<2>(p, in, maps, smem);
  }
  template <int kLoad>
  __device__ static __forceinline__ void paged(const PagedFwdArgs &p,
                                               const typename Variant::Inputs &in,
                                               const Sm90Maps &maps, unsigned char *smem) {
    static_assert((kBlockN & (kBlockN - 1)) == 0,
                  "a block of a power-of-two keys lies in one page or covers whole pages");
    const FwdArgs &a = p.f;
    const int m_block = gridDim.x - 1 - blockIdx.x;
    const int bh = blockIdx.y;
    const int h = bh % a.heads;
    const PagedSeq s = paged_seq(p, bh / a.heads, h);
    if (!s.ok || (!s.bad && m_block * kBlockM >= s.sp.seq_q))
      return;
    if (s.bad || paged_pages_bad(p, s)) {
      paged_nan_rows<kBlockM, kDV>(a, s.sp, h, Variant::kNumFinals);
      return;
    }
    const int rows = min(1 << p.page_shift, kBlockN);
    body(a, in, maps, smem, s.sp, m_block, bh,
         PagesKV<kLoad>{s.pages, p.page_shift, rows});
  }

  template <class KV>
  __device__ static __forceinline__ void body(const FwdArgs &a,
                                              const typename Variant::Inputs &in,
                                              const Sm90Maps &maps, unsigned char *smem,
                                              const SeqSpan &sp, int m_block, int bh,
                                              const KV &kv) {
    const u32 base = (smem_addr(smem) + 1023u) & ~1023u;
    const u32 bar_q = base + kBarOffset;
    const u32 bar_full = bar_q + 8;                 // [kStages]
    const u32 bar_empty = bar_full + 8 * kStages;   // [kStages]
    const int wg = threadIdx.x / 128;
    if (threadIdx.x == 0) {
      mbar_init(bar_q, 1);
      for (int s = 0; s < kStages; ++s) {
        mbar_init(bar_full + 8 * s, KV::kFullArrivals);
        mbar_init(bar_empty + 8 * s, 4 * kConsumers); // one arrival per consumer warp
      }
      mbar_init_fence();
    }
    // A packed call has no block lists: a masked variant visits the range
    // of key blocks that keep an element (varlen.cuh). Where the analysis
    // bounds the mask from the box, warp 0 alone finds it by its votes,
    // before the barrier that hands it to the others through shared memory
    // (beside the mbarriers): the other warps would repeat its box classes
    // (a chunk's costs integer divisions), which compete for the SM's issue
    // slots at a CTA's start. Other masks: all threads vote, after it.
    int *s_range = reinterpret_cast<int *>(smem + (base - smem_addr(smem)) + kBarOffset + 128);
    if constexpr (Variant::kHasMask) {
      if constexpr (Variant::kMaskAnalysed && Variant::kMaskBounds == 0) {
        if (sp.packed && threadIdx.x < 32) {
          const int2 range = key_block_range<Variant, kBlockM, kBlockN>(
              in, bh / a.heads, bh % a.heads, m_block, sp);
          if (threadIdx.x == 0) {
            s_range[0] = range.x;
            s_range[1] = range.y;
          }
        }
      }
    }
    __syncthreads();

    Visits vis{(sp.seq_kv + kBlockN - 1) / kBlockN, 0, nullptr};
    if constexpr (Variant::kHasMask) {
      if (sp.packed) {
        int2 range;
        if constexpr (Variant::kMaskAnalysed && Variant::kMaskBounds == 0)
          range = make_int2(s_range[0], s_range[1]);
        else
          range = key_block_range<Variant, kBlockM, kBlockN>(in, bh / a.heads, bh % a.heads,
                                                             m_block, sp);
        vis.first = range.x;
        vis.count = range.y - range.x;
      } else {
        const long long group = mask_group(a.mask_grouping, bh, a.heads);
        const long long row = group * a.m_blocks + m_block;
        vis.count = a.block_count[row];
        vis.list = a.block_list + row * a.n_blocks;
      }
    }
    if (wg == 0) {
      if constexpr (kConsumers == 2)
        setmaxnreg_dec<kProducerRegs>();
      if constexpr (KV::kGather) {
        if (vis.count > 0)
          paged_produce_gather<FwdSm90, kD, kDV, kBlockM, kBlockN, kStages>(
              a, maps, sp, vis, m_block, bh, base, bar_q, bar_full, bar_empty, kv);
      } else if constexpr (KV::kWarp) {
        if (threadIdx.x < 32 && vis.count > 0)
          paged_produce_warp<FwdSm90, kD, kDV, kBlockM, kBlockN, kStages>(
              a, maps, sp, vis, m_block, bh, base, bar_q, bar_full, bar_empty, kv);
      } else {
        if (threadIdx.x == 0 && vis.count > 0)
          produce(a, maps, sp, vis, m_block, bh, base, bar_q, bar_full, bar_empty, kv);
      }
    } else {
      if constexpr (kConsumers == 2)
        setmaxnreg_inc<kConsumerRegs>();
      consume(a, in, sp, vis, m_block, bh, base, bar_q, bar_full, bar_empty, wg - 1, kv);
    }
  }

  /// The key blocks a CTA visits: count entries of the block list, or
  /// (no list) blocks first, first + 1, ...
  struct Visits {
    int count, first;
    const int *list;
  };

  /// The j-th visited block's entry: from the block list when the variant
  /// masks (read ahead of its use, so that the load's latency is not on
  /// the softmax's path), else j.
  __device__ static __forceinline__ int entry_of(const Visits &vis, int j) {
    if (Variant::kHasMask && vis.list)
      return vis.list[j];
    return vis.first + j;
  }
  /// The key block of entry \p e, and whether it is fully unmasked (a
  /// packed call's masked blocks: false here; the consumers ask tile_full).
  __device__ static __forceinline__ int block_of(const Visits &vis, const SeqSpan &sp, int e,
                                                 bool &full) {
    if (Variant::kHasMask && vis.list) {
      full = (e >> 30) & 1;
      return e & 0x3fffffff;
    }
    full = !Variant::kHasMask && (e + 1) * kBlockN <= sp.seq_kv;
    return e;
  }

  /// The CTA's Q block by TMA on \p bar_q (one thread); batch \p b is 0 in
  /// packed and paged calls, whose q is one batch of all tokens.
  __device__ static __forceinline__ void load_q(const Sm90Maps &maps, const SeqSpan &sp,
                                                int m_block, int h, int b, u32 base, u32 bar_q) {
    const int qrow = sp.q0 + m_block * kBlockM;
    mbar_arrive_expect_tx(bar_q, kQBytes);
    tma_load_slabs<kD, kQSlab>(base, &maps.q, maps.q_pos, qrow, h, b, bar_q);
  }

  /// The producer: one thread issues every TMA load of the CTA.
  template <class KV>
  __device__ static void produce(const FwdArgs &a, const Sm90Maps &maps, const SeqSpan &sp,
                                 const Visits &vis, int m_block, int bh, u32 base, u32 bar_q,
                                 u32 bar_full, u32 bar_empty, const KV &kv) {
    const int h = bh % a.heads;
    // A packed call's maps have one batch of all tokens: a tile starts at
    // the sequence's first token and may run into the next sequence (those
    // keys are masked, those rows never stored).
    const int b = sp.packed ? 0 : bh / a.heads;
    const int count = vis.count;
    const int hk = h / (a.heads / a.heads_kv);
    tma_prefetch_desc(&maps.q);
    tma_prefetch_desc(&maps.k);
    tma_prefetch_desc(&maps.v);
    load_q(maps, sp, m_block, h, b, base, bar_q);
    for (int j = 0; j < count; ++j) {
      const int stage = j % kStages;
      if (j >= kStages)
        mbar_wait(bar_empty + 8 * stage, ((j / kStages) + 1) & 1);
      bool full;
      const int row = sp.kv0 + block_of(vis, sp, entry_of(vis, j), full) * kBlockN;
      const u32 bar = bar_full + 8 * stage;
      const u32 s_k = base + kQBytes + stage * kStageBytes;
      mbar_arrive_expect_tx(bar, kStageBytes);
      if constexpr (KV::kPaged) {
        // One box a page: token t at slot t & (page size - 1) of page
        // pages[t >> shift] (the map's "batch" is the page). Boxes past the
        // sequence's end read page 0 (every sequence's indices were
        // checked; the consumers zero those rows).
        for (int j = 0; j < kBlockN; j += kv.rows) {
          const PagedSlot at = paged_box(kv.pages, kv.shift, sp.seq_kv, row + j);
          tma_load_slabs<kD, kKVSlab>(s_k + j * 128, &maps.k, maps.k_pos, at.slot, hk,
                                      at.page, bar);
          tma_load_slabs<kDV, kKVSlab>(s_k + kKBytes + j * 128, &maps.v, maps.v_pos, at.slot,
                                       hk, at.page, bar);
        }
      } else {
        load_kv(maps, row, hk, b, s_k, bar);
      }
    }
  }

  /// The K and V rows [row, row + kBlockN) of K/V head \p hk (TMA batch
  /// \p b) into the stage at \p s_k by TMA, completing on \p bar (which
  /// expects the stage's bytes). One thread.
  __device__ static __forceinline__ void load_kv(const Sm90Maps &maps, int row, int hk, int b,
                                                 u32 s_k, u32 bar) {
    // Written out rather than by tma_load_slabs: through the helper the
    // two-stage kernels compile to other (equivalent) SASS, not yet timed.
#pragma unroll
    for (int s = 0; s < kD / 64; ++s)
      tma_load_4d(s_k + s * kKVSlab, &maps.k, s * 64, tma_coord(1, maps.k_pos, row, hk, b),
                  tma_coord(2, maps.k_pos, row, hk, b), tma_coord(3, maps.k_pos, row, hk, b),
                  bar);
#pragma unroll
    for (int s = 0; s < kDV / 64; ++s)
      tma_load_4d(s_k + kKBytes + s * kKVSlab, &maps.v, s * 64,
                  tma_coord(1, maps.v_pos, row, hk, b), tma_coord(2, maps.v_pos, row, hk, b),
                  tma_coord(3, maps.v_pos, row, hk, b), bar);
  }

  // The consumer's GEMM steps, shared with the persistent form
  // (fwd_sm90_persist.cuh); defined in fwd_sm90_step.cuh.

  /// S = Q·Kᵀ for the keys in ring \p stage, committed as one wgmma group.
  __device__ static __forceinline__ void issue_s(float (&acc_s)[NT][4], u64 q_desc, u64 k_desc0,
                                                 int stage);
  /// O += P·V for the values in ring \p stage, committed as one wgmma group.
  __device__ static __forceinline__ void issue_pv(float (&acc_o)[VT][4], u32 (&pf)[kBlockN / 16][4],
                                                  u64 v_desc0, int stage);
  /// O *= o_scale, then P as the A operand of m64nDVk16 (two n8 tiles of S
  /// per k16 step).
  __device__ static __forceinline__ void rescale_and_pack(float (&acc_o)[VT][4],
                                                          const float (&acc_s)[NT][4],
                                                          u32 (&pf)[kBlockN / 16][4],
                                                          const float (&o_scale)[2]);
  /// Ping-pong: a consumer issues its GEMMs only on its turn (named barrier
  /// 1 + wgc), then hands the turn over; consumer 0 starts.
  __device__ static __forceinline__ void turn_begin(int wgc) {
    if constexpr (kConsumers == 2)
      named_bar_sync(1 + wgc, 256);
  }
  __device__ static __forceinline__ void turn_end(int wgc, bool hand_over) {
    if constexpr (kConsumers == 2)
      if (hand_over)
        named_bar_arrive(2 - wgc, 256);
  }

  /// One consumer warpgroup (\p wgc of kConsumers): 64 query rows.
  template <class KV>
  __device__ static void consume(const FwdArgs &a, const typename Variant::Inputs &in,
                                 const SeqSpan &sp, const Visits &vis, int m_block, int bh,
                                 u32 base, u32 bar_q, u32 bar_full, u32 bar_empty, int wgc,
                                 const KV &kv) {
    const int count = vis.count;
    const int b = bh / a.heads, h = bh % a.heads;
    const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
    const int g = lane / 4, tq = lane % 4;
    const int row0 = m_block * kBlockM + wgc * 64 + warp * 16 + g; // this thread's row 0

    float acc_o[VT][4];
    typename Variant::RowState st[2];
    bool seen[2];
    start_rows(acc_o, st, seen);

    if (count > 0) {
      // Descriptors as 64-bit values; one k16 step moves the start address
      // (the low field, in 16-byte units) within the swizzle atom.
      const u64 q_desc = wgmma_desc_sw128(base + wgc * 64 * 128, 16, 1024);
      const u64 k_desc0 = wgmma_desc_sw128(base + kQBytes, 16, 1024);
      const u64 v_desc0 = wgmma_desc_sw128(base + kQBytes + kKBytes, kKVSlab, 1024);
      float acc_s[NT][4];
      zero_tiles(acc_s); // overwritten by the first k step; defined for the compiler
      u32 pf[kBlockN / 16][4];
      float o_scale[2];

      auto issue_s = [&](int stage) { FwdSm90::issue_s(acc_s, q_desc, k_desc0, stage); };
      auto issue_pv = [&](int stage) { FwdSm90::issue_pv(acc_o, pf, v_desc0, stage); };
      auto turn_begin = [&]() { FwdSm90::turn_begin(wgc); };
      auto turn_end = [&](bool hand_over) { FwdSm90::turn_end(wgc, hand_over); };
      // The variant sees q_idx shifted by the bottom-right rule.
      auto softmax = [&](int j, int e) {
        fence_regs(acc_s);
        bool full;
        const int col0 = block_of(vis, sp, e, full) * kBlockN;
        if (Variant::kHasMask && !vis.list)
          full = tile_full<Variant, kBlockM, kBlockN>(in, b, h, m_block * kBlockM, col0, sp);
        if (full)
          step<true>(in, sp.seq_kv, acc_s, st, seen, o_scale, b, h, row0 + sp.shift, col0, tq);
        else
          step<false>(in, sp.seq_kv, acc_s, st, seen, o_scale, b, h, row0 + sp.shift, col0,
                      tq);
      };
      auto rescale_and_pack = [&]() { FwdSm90::rescale_and_pack(acc_o, acc_s, pf, o_scale); };
      // The K and V of the block in \p stage are consumed: one arrival per warp.
      auto release = [&](int stage) {
        fence_regs(acc_o);
        __syncwarp();
        if (lane == 0)
          mbar_arrive(bar_empty + 8 * stage);
      };

      mbar_wait(bar_q, 0);
      if constexpr (kConsumers == 2)
        if (wgc == 1)
          named_bar_arrive(1, 256);
      // Block 0: S only. The wgmma calls sit outside any data-dependent
      // branch so that ptxas need not serialise them.
      int e = entry_of(vis, 0);
      mbar_wait(bar_full, 0);
      landed(vis, sp, e, base, 0, wgc, kv);
      turn_begin();
      wgmma_fence();
      issue_s(0);
      turn_end(true);
      wgmma_wait<0>();
      softmax(0, e);
      rescale_and_pack();
      // Blocks 1..count-1: S(j), then P(j-1)·V(j-1) running under the
      // softmax of block j.
      for (int j = 1; j < count; ++j) {
        const int stage = j % kStages;
        const int prev = (j - 1) % kStages;
        e = entry_of(vis, j);
        mbar_wait(bar_full + 8 * stage, (j / kStages) & 1);
        landed(vis, sp, e, base, stage, wgc, kv);
        turn_begin();
        wgmma_fence();
        issue_s(stage);
        issue_pv(prev);
        turn_end(true);
        wgmma_wait<1>();
        softmax(j, e);
        wgmma_wait<0>();
        release(prev);
        rescale_and_pack();
      }
      // The last P·V. Consumer 1 keeps the turn: both barriers end even.
      turn_begin();
      wgmma_fence();
      issue_pv((count - 1) % kStages);
      turn_end(wgc == 0);
      wgmma_wait<0>();
      release((count - 1) % kStages);
    }
    epilogue(a, in, sp, acc_o, st, seen, b, h, row0, tq, base, wgc);
  }

  /// A tile's start for a consumer thread: O's accumulator at 0, its two
  /// rows' states initial, no key seen.
  __device__ static __forceinline__ void start_rows(float (&acc_o)[VT][4],
                                                    typename Variant::RowState (&st)[2],
                                                    bool (&seen)[2]) {
    zero_tiles(acc_o);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      Variant::init(st[r]);
      seen[r] = false;
    }
  }

  /// After the wait for \p stage's K and V: a gathered stage was written
  /// by cp.async (the generic proxy), which the wgmma (the async proxy)
  /// read only after a proxy fence; its rows past the end are zeros. A
  /// paged stage of TMA boxes has its tail zeroed (zero_tail).
  template <class KV>
  __device__ static __forceinline__ void landed(const Visits &vis, const SeqSpan &sp, int e,
                                                u32 base, int stage, int wgc, const KV &) {
    if constexpr (KV::kGather)
      fence_proxy_async_shared();
    else if constexpr (KV::kPaged)
      zero_tail(vis, sp, e, base, stage, wgc);
  }

  /// Paged calls: the K and V rows of \p stage at or past the sequence's
  /// end (a page's free slots, or page 0 read for boxes past the end) may
  /// hold anything, NaN included, which a masked P of 0 would not cancel
  /// in P·V. Each consumer warpgroup zeroes them (the same zeros, so the
  /// two may overlap) before its GEMMs of the block read them; only the
  /// block holding the sequence's end has such rows.
  __device__ static __forceinline__ void zero_tail(const Visits &vis, const SeqSpan &sp, int e,
                                                   u32 base, int stage, int wgc) {
    bool full;
    const int col0 = block_of(vis, sp, e, full) * kBlockN;
    const int from = sp.seq_kv - col0;
    if (from >= kBlockN)
      return;
    const u32 s_k = base + kQBytes + stage * kStageBytes;
    // Whole 128-byte rows of each 64-column slab: the swizzle permutes
    // chunks within a row only.
    for (int i = threadIdx.x % 128; i < (kBlockN - from) * 8; i += 128) {
      const u32 off = (from + i / 8) * 128 + (i % 8) * 16;
#pragma unroll
      for (int s = 0; s < kD / 64; ++s)
        st_shared_zero_128(s_k + s * kKVSlab + off);
#pragma unroll
      for (int s = 0; s < kDV / 64; ++s)
        st_shared_zero_128(s_k + kKBytes + s * kKVSlab + off);
    }
    fence_proxy_async_shared(); // the wgmma reads through the async proxy
    named_bar_sync(3 + wgc, 128);
  }

  /// score_mod, mask and online_fwd over one block of S; o_scale per row
  /// (1 for a row without an active key). As in fwd_sm80's step: a score_mod
  /// that is score · c is folded into online_fwd_folded's exp2 FMA, and a
  /// folded softmax takes masked scores as −∞ and runs branch-free.
  template <bool kFull>
  __device__ static __forceinline__ void
  step(const typename Variant::Inputs &in, int seq_kv, float (&acc_s)[NT][4],
       typename Variant::RowState (&st)[2], bool (&seen)[2], float (&o_scale)[2], int b,
       int h, int row0, int col0, int tq);

  /// The variant's epilogue per row, then O and the finals to global memory
  /// (rows past seq_q are not stored). Where DV <= D, O goes through this
  /// consumer's own 64 rows of the Q tile (no wgmma of it reads them any
  /// more, and the other consumer's rows are elsewhere), so that every lane
  /// stores 16 bytes and a warp whole rows: stored from the accumulator, a
  /// quad covers 16 bytes of a row and every 32-byte sector is written twice
  /// (ncu: 48% excess sectors at causal S = 1024, where the epilogue is a
  /// large part of a CTA's life).
  __device__ static __forceinline__ void
  epilogue(const FwdArgs &a, const typename Variant::Inputs &in, const SeqSpan &sp,
           float (&acc_o)[VT][4], typename Variant::RowState (&st)[2], bool (&seen)[2], int b,
           int h, int row0, int tq, u32 base, int wgc);
};

} // namespace attnc

// The consumer's GEMM steps, per-block step and epilogue, defined out of the
// struct.
#define ATTNC_FWD_SM90_TEMPLATE                                                              \
  template <class Variant, class T, int kD, int kDV, int kBlockM, int kBlockN, int kStages>
#define ATTNC_FWD_SM90 FwdSm90<Variant, T, kD, kDV, kBlockM, kBlockN, kStages>
#include "attnc/fwd_sm90_step.cuh"
#undef ATTNC_FWD_SM90
#undef ATTNC_FWD_SM90_TEMPLATE

#endif
