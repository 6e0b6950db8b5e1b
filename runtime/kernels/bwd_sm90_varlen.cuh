// bwd_sm90 on packed variable-length batches (cu_seqlens): the
// warp-specialised fused-dQ dK/dV kernel of bwd_sm90.cuh with one CTA per
// (key block of one sequence, kv head), its step reused as it is.
//
// Grid (packed_block_bound(total_kv, sequences, kBlockN, max_seqlen_kv),
// kv heads): one CTA per key block a sequence has (packed_cta_block_sorted:
// up to 32 sequences longest first, so that neighbours of similar lengths
// start their CTAs together and the dQ turns wait less), its
// highest key block first, none for the blocks of the longest sequence that
// a shorter one lacks (the bound's spare CTAs, fewer than the sequences, are
// the last of a row: they find no block and exit); the highest block's CTA
// zeroes the input-gradient partials of the blocks its sequence lacks. K
// and V of the sequence's block are loaded by cp.async (keys past its end
// zero-filled); Q and dO by TMA over the packed rows (maps of
// one batch of all tokens, as fwd_sm90's), a query block starting at its
// sequence's first token: rows of the next sequence are loaded, but their
// elements are invalid (P = dS = 0, the step's bounds), so they add
// nothing to dK, dV or dQ. The step reads the sequence's lengths from a
// per-CTA copy of the arguments and calls the Variant through
// ShiftedVariant, which adds the bottom-right shift (Skv − Sq) to q_idx.
// The lean step (kLeanLevel, the dense default at d64 and d128) is the
// same step: its bounds-free tiles are those wholly inside the sequence
// (the step's per-CTA lengths); its turn warp follows the ring's metadata
// (take_turns below). With the turns taken ahead (kBulkDq 2 to 4, the
// dense default at d128: dQ through two shared slots, bwd_sm90_dq_slots.cuh)
// turn warp w reads the stages of the ring's indices it owns (every other
// one with two warps) and adds each step's slot in its turn
// (write_dq_slots below); the slots count the query steps, which the
// metadata carries, since the end-of-head stages fill none, and one more
// stage after the last head's end tells the second warp the walk is over.
//
// The walk. The producer warp decides it and passes each step's query
// block, fullness and dQ turn to the consumers in the stage's metadata
// (written after the step's loads are issued and before the stage's
// arrival, read after its wait; with the turns taken ahead the turn warps
// find each step's turn themselves, dq_rank below), then one
// end-of-head stage per query head with no tiles (the turn warp, where
// there is one, reads the same metadata and arrives on the stage's empty
// barrier too, so that no stage is refilled before it has read it):
//  * unmasked: every query block of the sequence, from first_block
//    (a sequence of at most a.dq_rotate key blocks rotated as in
//    bwd_sm80_fused_dq.cuh),
//    the rank the order of the walks' visits (unmasked_rank);
//  * masked with a mask the analysis bounds from the block's box: the
//    blocks from the first to the last kept one (block_range.cuh's votes,
//    the last found while the first step's tiles land) that
//    box_may_keep keeps, full where tile_full proves it, and the rank the
//    number of the sequence's key blocks above this one that keep the
//    query block (a vote of box classes): the same set and order as
//    bwd_sm80's lists, so a CTA only waits for CTAs dispatched before it;
//  * masked otherwise: every query block, masked per element, ranked as
//    the unrotated unmasked walk.
//
// dQ's fp32 sums and semaphores are per (head, packed query block): query
// block m of sequence b is slot cu_seqlens_q[b] / kBlockM + b + m of
// a.kv_m_blocks slots a head (no two sequences share one; the host sizes
// them). The per-CTA copy of the arguments points dq_sem and dq_accum at
// the sequence's first slot, so that the step's (head, block) addressing
// lands there. attnc_bwd_dq_convert's packed form (a CTA a slot) writes
// the rows of each sequence only, zeros where no key block visited (the
// semaphore is 0).
#ifndef ATTNC_BWD_SM90_VARLEN_CUH
#define ATTNC_BWD_SM90_VARLEN_CUH

#include "attnc/bwd_sm90.cuh"
#include "attnc/varlen.cuh"

namespace attnc {

/// The generated Variant with the query index shifted by the sequence's
/// bottom-right offset (SeqSpan::shift), which travels in the Inputs.
template <class V> struct ShiftedVariant {
  struct Inputs {
    typename V::Inputs in;
    int shift;
    // The unclamped reads' views (bwd_sm90_elements' tile_covered and
    // mask_in_tile), queries shifted as everywhere here.
    __device__ __forceinline__ Inputs keys_at(int b, int h, int k0) const {
      return {in.keys_at(b, h, k0), shift};
    }
    __device__ __forceinline__ Inputs rows_at(int b, int h, int q0) const {
      return {in.rows_at(b, h, q0 + shift), shift};
    }
    __device__ __forceinline__ bool keys_cover(long long n) const { return in.keys_cover(n); }
    __device__ __forceinline__ bool rows_cover(long long q0, long long n) const {
      return in.rows_cover(q0 + shift, n);
    }
  };
  static constexpr int kNumFinals = V::kNumFinals;
  static constexpr bool kHasMask = V::kHasMask;
  static constexpr bool kBackwardUsesDoosum = V::kBackwardUsesDoosum;
  static constexpr int kNumInputGrads = V::kNumInputGrads;
  static constexpr bool kForwardFolded = V::kForwardFolded;
  __device__ static __forceinline__ float score_mod(const Inputs &in, float s, int b, int h,
                                                    int q, int k) {
    return V::score_mod(in.in, s, b, h, q + in.shift, k);
  }
  __device__ static __forceinline__ float score_mod_grad(const Inputs &in, float s, int b,
                                                         int h, int q, int k) {
    return V::score_mod_grad(in.in, s, b, h, q + in.shift, k);
  }
  __device__ static __forceinline__ void add_input_grads(const Inputs &in, float s, float ds,
                                                         bool valid, int b, int h, int q, int k,
                                                         float *gacc) {
    V::add_input_grads(in.in, s, ds, valid, b, h, q + in.shift, k, gacc);
  }
  __device__ static __forceinline__ bool mask(const Inputs &in, int b, int h, int q, int k) {
    return V::mask(in.in, b, h, q + in.shift, k);
  }
  __device__ static __forceinline__ bool mask_in_tile(const Inputs &in, const Inputs &qin,
                                                      int b, int h, int q, int k, int q_off,
                                                      int kv_off) {
    return V::mask_in_tile(in.in, qin.in, b, h, q + in.shift, k, q_off, kv_off);
  }
  __device__ static __forceinline__ float forward(const Inputs &in, float s,
                                                  const float *finals, int b, int h, int q,
                                                  int k) {
    return V::forward(in.in, s, finals, b, h, q + in.shift, k);
  }
  __device__ static __forceinline__ float forward_folded(const Inputs &in, float s,
                                                         const float *finals, int b, int h,
                                                         int q, int k) {
    if constexpr (V::kForwardFolded)
      return V::forward_folded(in.in, s, finals, b, h, q + in.shift, k);
    else
      return 0.f; // not called (recompute_p)
  }
  __device__ static __forceinline__ float backward(const Inputs &in, float dp, float p,
                                                   const float *finals, float doosum, int b,
                                                   int h, int q, int k) {
    return V::backward(in.in, dp, p, finals, doosum, b, h, q + in.shift, k);
  }
};

/// Whether a masked Variant's mask is bounded from the block's box alone
/// (block_range.cuh's votes and tile_full apply); false without a mask,
/// whose Variant has no classifier.
template <class V, bool = V::kHasMask> struct BoxBounded {
  static constexpr bool value = false;
};
template <class V> struct BoxBounded<V, true> {
  static constexpr bool value = V::kMaskAnalysed && V::kMaskBounds == 0;
};

/// The first dQ slot of sequence \p b (see the banner).
template <int kBlockM>
__device__ __forceinline__ long long varlen_dq_slot0(const BwdArgs &a, int b) {
  return a.cu_seqlens_q[b] / kBlockM + b;
}

template <class Variant, class T, int kD, int kDV, int kBlockM, int kBlockN, int kStages,
          bool kAtomicDq = false, bool kTwoPass = false, bool kSplit = false,
          int kLeanLevel = 0, int kBulkDq = 0>
struct BwdDkDvSm90Varlen {
  using SV = ShiftedVariant<Variant>;
  using Base = BwdDkDvSm90<SV, T, kD, kDV, kBlockM, kBlockN, kStages, /*kFusedDq=*/true,
                           kAtomicDq, /*kWs=*/true, kTwoPass, kSplit, /*kPingPong=*/false,
                           /*kDqWriter=*/false, kLeanLevel, kBulkDq>;
  static constexpr int kThreads = Base::kThreads, kWarps = Base::kWarps;
  static constexpr int kStageBytes = Base::kStageBytes, kSmemBytes = Base::kSmemBytes;
  static constexpr int kQBytes = Base::kQBytes, kOBytes = Base::kOBytes;
  static constexpr int kF = Base::kF, kRowFloats = Base::kRowFloats;
  static constexpr int kNumGrads = Base::kNumGrads;
  static constexpr bool kRanges = BoxBounded<Variant>::value;
  /// A stage's metadata (16 bytes a stage, after the mbarriers in their
  /// 256 bytes): the query block | full << 30 | end of head << 31, the dQ
  /// rank (unless kRanksByTurnWarps), the head within the group | the
  /// walk's end << 31 (the last stages, for the turn warps), and the number
  /// of the query steps before this one (the dQ slots' count, which the
  /// end-of-head stages do not advance).
  static constexpr int kMetaOffset = 128;
  static_assert(kMetaOffset + 16 * kStages <= 256 && Base::kBarBytes == 256,
                "the metadata fits beside the mbarriers");
  static_assert(Base::kDqBarOffset + 32 <= kMetaOffset, "the dQ slots' mbarriers before it");
  static_assert(!Base::kWriter && (!Base::kDqSlots || Base::kSlotTurns),
                "packed calls use the lockstep step, with its turn warp or with turn "
                "warps that take their turns ahead (dQ slots)");
  /// A stage's empty barrier: an arrival per compute thread, and one turn
  /// warp's 32 once they have read the stage's metadata (Base::release):
  /// with two turn warps, the one that owns the stage's index.
  static constexpr int kEmptyArrivals =
      32 * (Base::kWarps + (Base::kTurnWarp || Base::kSlotTurns ? 1 : 0));
  /// Turn warps that each read every other stage: the walk ends with one
  /// more stage, so that each sees an end (produce).
  static constexpr int kTurnWarps = Base::kSlotTurns ? Base::kDqTurnWarps : 1;
  /// With the turns taken ahead the compute threads never read a step's
  /// rank: the turn warps find it (dq_rank's votes) after reading the
  /// stage, while the step is computed, not the producer before the step's
  /// arrival (a bounded mask's votes were most of a short walk's producer
  /// time). Otherwise the producer passes it in the metadata.
  static constexpr bool kRanksByTurnWarps = Base::kSlotTurns;

  /// Grid (packed_block_bound of the key blocks, kv heads).
  __device__ static void run(const BwdArgs &a, const typename Variant::Inputs &call_in,
                             unsigned char *smem, const Sm90BwdMaps &maps) {
    const u32 base = (smem_addr(smem) + 1023u) & ~1023u;
    unsigned char *aligned = smem + (base - smem_addr(smem));
    const u32 s_k = base, s_v = base + Base::kKBytes, s_ring = s_v + Base::kVBytes;
    const u32 s_ds = s_ring + kStages * kStageBytes, s_dq = s_ds + Base::kDsBytes;
    const u32 bar_full = s_dq + Base::kDqBytes, bar_empty = bar_full + 8 * kStages;
    const u32 meta = bar_full + kMetaOffset;
    unsigned char *ring = aligned + Base::kKBytes + Base::kVBytes;
    // One CTA per key block a sequence has, not per block of the longest
    // sequence (the grid's last CTAs, fewer than the sequences, find none),
    // each sequence's highest key block first: a CTA waits for dQ turns of
    // CTAs of its sequence and head dispatched before it
    // (bwd_sm80_fused_dq.cuh), which have the lower x of its row; a
    // sequence's CTAs are contiguous in x, in either order of sequences.
    const PackedBlock pb =
        packed_cta_block_sorted(a.cu_seqlens_kv, a.batch, kBlockN, a.seq_kv);
    if (pb.seq < 0)
      return;
    const int b = pb.seq, hk = (int)blockIdx.y;
    const int group_size = a.heads / a.heads_kv;
    const SeqSpan sp = seq_span(a.cu_seqlens_q, a.cu_seqlens_kv, a.total_q, a.batch, a.heads,
                                a.seq_q, a.seq_kv, b, hk * group_size);
    const auto &in = sequence_inputs(call_in, sp);
    const int nb = (sp.seq_kv + kBlockN - 1) / kBlockN;
    const int n_block = nb - 1 - pb.index;
    const int key0 = n_block * kBlockN;
    // The input-gradient partials of the key blocks the sequence lacks
    // (no CTA has them): zeros, from its highest block's CTA.
    if constexpr (kNumGrads > 0)
      if (pb.index == 0)
        for (int i = threadIdx.x; i < kNumGrads * group_size * (a.kv_n_blocks - nb);
             i += blockDim.x) {
          const int g = i % kNumGrads, hi = i / kNumGrads % group_size;
          const int n = nb + i / (kNumGrads * group_size);
          a.grad_partial[((long long)g * a.kv_n_blocks + n) * ((long long)a.batch * a.heads) +
                         (long long)b * a.heads + hk * group_size + hi] = 0.f;
        }
    if (threadIdx.x == 0) {
      for (int s = 0; s < kStages; ++s) {
        mbar_init(bar_full + 8 * s, 1 + 32); // as bwd_sm90.cuh's ring
        mbar_init(bar_empty + 8 * s, kEmptyArrivals);
      }
      if constexpr (Base::kDqSlots)
        for (int s = 0; s < 2; ++s) {
          // As bwd_sm90.cuh's: full, every compute thread; empty, the
          // step's turn warp's lanes.
          mbar_init(bar_full + Base::kDqBarOffset + 8 * s, Base::kWarps * 32);
          mbar_init(bar_full + Base::kDqBarOffset + 16 + 8 * s, 32);
        }
      mbar_init_fence();
    }
    __syncthreads(); // the mbarriers
    if (threadIdx.x >= kThreads) {
      if constexpr (Base::kWarpgroups == 2)
        setmaxnreg_dec<Base::kProducerRegs>();
      const int warp = (threadIdx.x - kThreads) / 32;
      if (warp == 0)
        produce(a, in, maps, s_ring, bar_full, bar_empty, meta, n_block, b, hk, group_size);
      else if (Base::kSlotTurns && warp <= kTurnWarps)
        write_dq_slots(a, in, sp, s_dq, bar_full, bar_empty, meta, n_block, b, hk, group_size,
                       warp - 1);
      else if (!Base::kSlotTurns && Base::kTurnWarp && warp == 1)
        take_turns(a, bar_full, bar_empty, meta, b, hk, group_size);
      return;
    }
    if constexpr (Base::kWarpgroups == 2)
      setmaxnreg_inc<Base::kConsumerRegs>();
    // The compute threads load K and V from the sequence's first key and
    // wait for them alone (as the dense kernel's): the producer's first
    // steps overlap their landing.
    Base::load_kv(s_k, s_v,
                  static_cast<const unsigned short *>(a.k) + b * a.k_sb + hk * a.k_sh +
                      (long long)sp.kv0 * a.k_ss,
                  a.k_ss,
                  static_cast<const unsigned short *>(a.v) + b * a.v_sb + hk * a.v_sh +
                      (long long)sp.kv0 * a.v_ss,
                  a.v_ss, key0, sp.seq_kv);
    if (kSplit && threadIdx.x >= 128)
      consume<1>(a, in, sp, s_k, s_v, s_ring, s_ds, s_dq, bar_full, bar_empty, meta, ring,
                 n_block, b, hk, group_size, key0);
    else
      consume<0>(a, in, sp, s_k, s_v, s_ring, s_ds, s_dq, bar_full, bar_empty, meta, ring,
                 n_block, b, hk, group_size, key0);
  }

  /// The dQ rank of query block \p m at key block \p n_block of the
  /// sequence (the order of the key blocks' adds to its sum; the calling
  /// warp's lane \p lane, all lanes converged): unmasked, the order of the walks'
  /// visits (rotated as the host says); masked with a bounded mask, the
  /// number of the sequence's key blocks above this one that keep m (votes
  /// of box classes, 32 blocks a vote: every CTA of the sequence counts
  /// the same set its producer visits); masked otherwise, every block
  /// above.
  __device__ static __forceinline__ int dq_rank(const BwdArgs &a,
                                                const typename Variant::Inputs &in, int b,
                                                int h, int m, int n_block, const SeqSpan &sp,
                                                int lane) {
    const int mb = (sp.seq_q + kBlockM - 1) / kBlockM;
    const int nb = (sp.seq_kv + kBlockN - 1) / kBlockN;
    if constexpr (Variant::kHasMask && kRanges) {
      int rank = 0;
      for (int n0 = n_block + 1; n0 < nb; n0 += 32) {
        const int n = n0 + lane;
        rank += __popc(__ballot_sync(0xffffffffu, n < nb && keeps(in, b, h, m, n, sp)));
      }
      return rank;
    } else if constexpr (!Variant::kHasMask) {
      if (nb <= a.dq_rotate) {
        const int f = (int)(((long long)(m + 1) * nb - 1) / mb);
        return f >= n_block ? f - n_block : f - n_block + nb;
      }
    }
    return nb - 1 - n_block;
  }

  /// Whether the mask may keep an element of query block \p m x key block
  /// \p n of the sequence (kRanges only).
  __device__ static __forceinline__ bool keeps(const typename Variant::Inputs &in, int b,
                                               int h, int m, int n, const SeqSpan &sp) {
    return query_blocks_may_keep<Variant, kBlockM, kBlockN>(in, b, h, m, m + 1, n, sp);
  }

  /// The producer warp: per head, the walk's steps (Q's and dO's tiles by
  /// TMA from lane 0, the rows by cp.async from every lane, then the
  /// step's fullness and rank, and the metadata from lane 0 before its
  /// arrival), then the end-of-head stage.
  __device__ static void produce(const BwdArgs &a, const typename Variant::Inputs &in,
                                 const Sm90BwdMaps &maps, u32 s_ring, u32 bar_full,
                                 u32 bar_empty, u32 meta, int n_block, int b, int hk,
                                 int group_size) {
    const int lane = threadIdx.x % 32;
    if (lane == 0) {
      tma_prefetch_desc(&maps.q);
      tma_prefetch_desc(&maps.dout);
    }
    int it = 0, steps = 0;
    // With two turn warps each reads every other stage: one more stage
    // after the last head's end, so that both see the walk's end.
    for (int hi = 0; hi < group_size + (kTurnWarps - 1); ++hi) {
      if (hi == group_size) {
        const int stage = it % kStages;
        if (it >= kStages)
          mbar_wait(bar_empty + 8 * stage, ((it / kStages) + 1) & 1);
        if (lane == 0) {
          st_shared_32(meta + 16 * stage, 1u << 31);
          st_shared_32(meta + 16 * stage + 8, 1u << 31);
          mbar_arrive(bar_full + 8 * stage);
        }
        cp_async_mbar_arrive(bar_full + 8 * stage);
        break;
      }
      const int h = hk * group_size + hi;
      const SeqSpan sp = seq_span(a.cu_seqlens_q, a.cu_seqlens_kv, a.total_q, a.batch,
                                  a.heads, a.seq_q, a.seq_kv, b, h);
      const int mb = (sp.seq_q + kBlockM - 1) / kBlockM;
      const int nb = (sp.seq_kv + kBlockN - 1) / kBlockN;
      // A bounded mask's query blocks: the first kept one before the first
      // step's loads, the end of the range (last_block_kept's votes) after
      // them, so that the votes overlap the loads' latency.
      int first = 0, last = mb, rot = 0;
      [[maybe_unused]] auto may_keep = [&](auto lo, auto hi) {
        return query_blocks_may_keep<Variant, kBlockM, kBlockN>(in, b, h, lo, hi, n_block, sp);
      };
      [[maybe_unused]] const WarpVote vote{lane};
      if constexpr (Variant::kHasMask && kRanges) {
        first = first_block_kept(0, mb, may_keep, vote);
        last = -1; // not found yet
      }
      if constexpr (!Variant::kHasMask)
        rot = nb <= a.dq_rotate && mb > 0 ? (int)((long long)n_block * mb / nb) : 0;
      for (int j = 0;; ++j) {
        if constexpr (Variant::kHasMask && kRanges)
          if (j == 1 || (j == 0 && first >= mb))
            last = first >= mb ? first : last_block_kept(first, mb, may_keep, vote);
        const bool end = first + j >= last && last >= 0;
        int m = 0;
        if (!end) {
          if constexpr (Variant::kHasMask && kRanges) {
            m = first + j;
            // A hole inside the range: no key block n' ranks it here (the
            // range's first block is kept).
            if (j > 0 && !keeps(in, b, h, m, n_block, sp))
              continue;
          } else if constexpr (Variant::kHasMask) {
            m = j;
          } else {
            m = rot + j;
            m -= m >= mb ? mb : 0;
          }
        }
        const int stage = it % kStages;
        if (it >= kStages)
          mbar_wait(bar_empty + 8 * stage, ((it / kStages) + 1) & 1);
        ++it;
        const u32 s = s_ring + stage * kStageBytes, bar = bar_full + 8 * stage;
        const u32 md = meta + 16 * stage;
        if (end) {
          if (lane == 0) {
            st_shared_32(md, (u32)m | (1u << 31));
            st_shared_32(md + 4, 0u);
            const bool over = hi == group_size - 1;
            st_shared_32(md + 8, (u32)hi | (over ? 1u << 31 : 0u));
            st_shared_32(md + 12, (u32)steps);
            mbar_arrive(bar);
          }
          cp_async_mbar_arrive(bar);
          break;
        }
        // The step's loads first; its fullness and dQ rank (the votes of
        // a bounded mask) while they land, then the metadata and lane 0's
        // arrival, which completes the stage with the loads.
        const int row0 = m * kBlockM;
        if (lane == 0) {
          const int row = sp.q0 + row0; // the packed maps' one batch
          mbar_expect_tx(bar, kQBytes + kOBytes);
          tma_load_slabs<kD, Base::kQSlab>(s, &maps.q, maps.q_pos, row, h, 0, bar);
          tma_load_slabs<kDV, Base::kQSlab>(s + kQBytes, &maps.dout, maps.do_pos, row, h, 0,
                                            bar);
        }
        load_rows(a, sp, s + kQBytes + kOBytes, row0, lane);
        cp_async_mbar_arrive(bar);
        bool full = true;
        if constexpr (Variant::kHasMask && kRanges)
          full = tile_full<Variant, kBlockM, kBlockN>(in, b, h, m * kBlockM, n_block * kBlockN,
                                                      sp);
        else if constexpr (Variant::kHasMask)
          full = false;
        int rank = 0;
        if constexpr (!kRanksByTurnWarps)
          rank = dq_rank(a, in, b, h, m, n_block, sp, lane);
        if (lane == 0) {
          st_shared_32(md, (u32)m | (full ? 1u << 30 : 0u));
          st_shared_32(md + 4, (u32)rank);
          st_shared_32(md + 8, (u32)hi);
          st_shared_32(md + 12, (u32)steps);
          mbar_arrive(bar);
        }
        ++steps;
      }
    }
    cp_async_wait<0>();
  }

  /// The turn warp (Base::kTurnWarp): per stage the producer's metadata,
  /// read once the stage is full and released at once (its arrival on the
  /// empty barrier), then the step's turn taken and published as the dense
  /// kernel's (Base::take_turn) on the sequence's dQ semaphores, until each
  /// head's end-of-head stage. It holds no walk of its own: the votes of a
  /// bounded mask's ranks are made once, by the producer.
  __device__ static void take_turns(const BwdArgs &a, u32 bar_full, u32 bar_empty, u32 meta,
                                    int b, int hk, int group_size) {
    int *const sem0 = a.dq_sem + varlen_dq_slot0<kBlockM>(a, b);
    int it = 0;
    for (int hi = 0; hi < group_size; ++hi) {
      const long long head = (long long)(hk * group_size + hi) * a.kv_m_blocks;
      for (;; ++it) {
        const int stage = it % kStages;
        mbar_wait(bar_full + 8 * stage, (it / kStages) & 1);
        const u32x4 md = ld_shared_128(meta + 16 * stage);
        Base::release(bar_empty + 8 * stage);
        if (md.x >> 31) {
          ++it;
          break;
        }
        Base::take_turn(sem0 + head + (int)(md.x & 0x3fffffffu), (int)md.y);
      }
    }
  }

  /// Turn warp \p owner of Base::kDqTurnWarps (Base::kSlotTurns): the
  /// stages of the indices it owns, each stage's metadata read once it is
  /// full and released at once; for a step, its dQ slot (the step's number
  /// among the query steps, md.w) added in its turn as the dense kernel's
  /// turn warps do (Base::add_dq_slot) on the sequence's dQ slots, until
  /// the stage that ends the walk.
  __device__ static void write_dq_slots(const BwdArgs &a, const typename Variant::Inputs &in,
                                        const SeqSpan &sp, u32 s_dq, u32 bar_full,
                                        u32 bar_empty, u32 meta, int n_block, int b, int hk,
                                        int group_size, int owner) {
    if constexpr (Base::kSlotTurns) {
      const long long slot0 = varlen_dq_slot0<kBlockM>(a, b);
      int *const sem0 = a.dq_sem + slot0;
      float *const dq0 = a.dq_accum + slot0 * kBlockM * kD;
      const u32 dq_bars = bar_full + Base::kDqBarOffset;
      for (int it = owner;; it += kTurnWarps) {
        const int stage = it % kStages;
        mbar_wait(bar_full + 8 * stage, (it / kStages) & 1);
        const u32x4 md = ld_shared_128(meta + 16 * stage);
        Base::release(bar_empty + 8 * stage);
        if (md.z >> 31)
          return;
        if (md.x >> 31)
          continue;
        const int m = (int)(md.x & 0x3fffffffu), h = hk * group_size + (int)(md.z & 0x7fffffffu);
        const int rank = kAtomicDq ? 1 : dq_rank(a, in, b, h, m, n_block, sp, threadIdx.x % 32);
        // (head, block) addressing of the sequence's slots: a head is
        // a.kv_m_blocks of them.
        const long long block = (long long)h * a.kv_m_blocks + m;
        Base::add_dq_slot(s_dq, dq_bars, (int)md.w, kAtomicDq ? nullptr : sem0 + block,
                          dq0 + block * kBlockM * kD, rank);
      }
    }
    (void)a; (void)in; (void)sp; (void)s_dq; (void)bar_full; (void)bar_empty; (void)meta;
    (void)n_block; (void)b; (void)hk; (void)group_size; (void)owner;
  }

  /// cp.async of the sequence's query rows' finals and doosum ([..][heads]
  /// [total_q]); rows past its end are zero-filled.
  __device__ static __forceinline__ void load_rows(const BwdArgs &a, const SeqSpan &sp,
                                                   u32 dst, int row0, int tid) {
#pragma unroll
    for (int i = tid; i < kBlockM * kRowFloats; i += 32) {
      const int r = i % kBlockM, f = i / kBlockM;
      const bool ok = row0 + r < sp.seq_q;
      const long long qi = ok ? row0 + r : 0; // an address in bounds either way
      if (f < kF)
        cp_async_4(dst + (r * kF + f) * 4, a.finals + f * sp.plane + sp.rows + qi, ok);
      else
        cp_async_4(dst + (kBlockM * kF + r) * 4, a.doosum + sp.rows + qi, ok);
    }
  }

  /// The compute threads (warpgroup kW's columns): each head's steps until
  /// its end-of-head stage, then dK and dV stored.
  template <int kW>
  __device__ static __forceinline__ void
  consume(const BwdArgs &a, const typename Variant::Inputs &in, const SeqSpan &sp0, u32 s_k,
          u32 s_v, u32 s_ring, u32 s_ds, u32 s_dq, u32 bar_full, u32 bar_empty, u32 meta,
          unsigned char *ring, int n_block, int b, int hk, int group_size, int key0) {
    const int warp = threadIdx.x / 32;
    using C = typename Base::template Cols<kW>;
    float acc_dk[C::kKN / 8][4], acc_dv[C::kVN / 8][4];
    zero_tiles(acc_dk);
    zero_tiles(acc_dv);
    float gacc[kNumGrads > 0 ? kNumGrads : 1];
#pragma unroll
    for (int j = 0; j < (kNumGrads > 0 ? kNumGrads : 1); ++j)
      gacc[j] = 0.f;
    // The step's view of the call: this sequence's lengths, dQ's slots
    // from its first.
    BwdArgs la = a;
    la.seq_q = sp0.seq_q;
    la.seq_kv = sp0.seq_kv;
    const long long slot0 = varlen_dq_slot0<kBlockM>(a, b);
    la.dq_sem = a.dq_sem + slot0;
    la.dq_accum = a.dq_accum + slot0 * kBlockM * kD;
    const typename SV::Inputs sin{in, sp0.shift};
    const u32 dq_bars = bar_full + Base::kDqBarOffset;

    int it = 0; // the ring's step count over all heads
    for (int hi = 0; hi < group_size; ++hi) {
      const int h = hk * group_size + hi;
      DqTurn turn{0, 0, 0, false}; // published at the next barrier
      for (;;) {
        const int stage = it % kStages;
        mbar_wait(bar_full + 8 * stage, (it / kStages) & 1);
        const u32x4 md = ld_shared_128(meta + 16 * stage);
        const u32 empty = bar_empty + 8 * stage;
        if (md.x >> 31) {
          Base::release(empty);
          ++it;
          break;
        }
        const int m = (int)(md.x & 0x3fffffffu), rank = (int)md.y;
        const u32 slot = s_ring + stage * kStageBytes;
        const float *rows = reinterpret_cast<const float *>(ring + stage * kStageBytes +
                                                            kQBytes + kOBytes);
        // (head, block) addressing of dQ's slots: la's pointers start at
        // the sequence's first, a head is a.kv_m_blocks slots.
        // The dQ slots count the query steps (md.w), not the ring's stages.
        const int step_it = Base::kDqSlots ? (int)md.w : it;
        if ((md.x >> 30) & 1u)
          Base::template step<true, kW>(la, sin, s_k, s_v, slot, s_ds, s_dq, dq_bars, step_it,
                                        empty, rows, m, b, h, h, key0, rank, turn, acc_dk,
                                        acc_dv, gacc);
        else
          Base::template step<false, kW>(la, sin, s_k, s_v, slot, s_ds, s_dq, dq_bars,
                                         step_it, empty, rows, m, b, h, h, key0, rank, turn,
                                         acc_dk, acc_dv, gacc);
        ++it;
      }
      // The last step's dSᵀ reads and dQ adds are done before the release
      // and the reuse of the dSᵀ tile below.
      Base::sync_compute();
      if constexpr (!kAtomicDq)
        BwdFusedDq<T, kD, kBlockM, kBlockN, kWarps>::publish(la, turn);
      if constexpr (kNumGrads > 0)
        store_input_grad_partials<kNumGrads, kWarps>(
            a, gacc, kSplit && warp >= 4,
            reinterpret_cast<float *>(ring + kStages * kStageBytes), n_block,
            (long long)b * a.heads + h, [] { Base::sync_compute(); });
    }
    // dK and dV from the sequence's first key (made here, not held over
    // the walk).
    BwdArgs ls = a;
    ls.seq_kv = sp0.seq_kv;
    ls.dk = static_cast<unsigned short *>(a.dk) + (long long)sp0.kv0 * a.dk_ss;
    ls.dv = static_cast<unsigned short *>(a.dv) + (long long)sp0.kv0 * a.dv_ss;
    Base::template store<kW>(ls, b, hk, key0, acc_dk, acc_dv, s_ring);
  }
};

/// doosum = rowsum(dO ∘ O) of every packed token, one warp a token and
/// head, [heads][total_q]: bwd_doosum's rows without their sequences (a
/// token's row is its place in the packed tensors), so that no CTA is
/// launched for the rows a shorter sequence lacks. Grid (ceil(total_q /
/// warps), heads).
template <class T, int kDV> __device__ void bwd_doosum_packed(const BwdArgs &a) {
  static_assert(kDV % 8 == 0 && kDV / 8 <= 32, "one 16-byte chunk per lane");
  const int warps = blockDim.x / 32;
  const int lane = threadIdx.x % 32;
  const long long t = (long long)blockIdx.x * warps + threadIdx.x / 32;
  const int h = blockIdx.y;
  if (t >= a.total_q)
    return;
  float sum = 0.f;
  if (lane < kDV / 8) {
    const unsigned short *o =
        static_cast<const unsigned short *>(a.o) + h * a.o_sh + t * a.o_ss + lane * 8;
    const unsigned short *d =
        static_cast<const unsigned short *>(a.dout) + h * a.do_sh + t * a.do_ss + lane * 8;
    u32 x[4], y[4];
    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3])
                 : "l"(o));
    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(y[0]), "=r"(y[1]), "=r"(y[2]), "=r"(y[3])
                 : "l"(d));
#pragma unroll
    for (int i = 0; i < 4; ++i)
      sum += unpack_half<T>(x[i], false) * unpack_half<T>(y[i], false) +
             unpack_half<T>(x[i], true) * unpack_half<T>(y[i], true);
  }
  sum = warp_sum(sum);
  if (lane == 0)
    a.doosum[(long long)h * a.total_q + t] = sum;
}

/// Zeroes the packed call's semaphores (heads · kv_m_blocks slots) before
/// the dK/dV kernel; grid (ceil(heads · kv_m_blocks / 256)) x 256.
__device__ inline void bwd_dq_init_varlen(const BwdArgs &a) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < (long long)a.heads * a.kv_m_blocks)
    a.dq_sem[i] = 0;
}

/// After the packed dK/dV kernel: each sequence's dq rows from their slots'
/// sums, zeros where no key block added (semaphore 0; the atomic mode's
/// sums start at zero). Grid (packed_block_bound of blocks of kBlockM rows,
/// heads) x 256: a CTA per dQ slot a sequence has (packed_cta_block), its
/// rows kRows at a time, every load issued before the stores, so that the
/// search for the CTA's sequence and the slot's semaphore are paid once a
/// slot, not once every kRows rows.
template <class T, int kD, int kBlockM, bool kAtomic>
__device__ void bwd_dq_convert_varlen(const BwdArgs &a) {
  static_assert(kD % 4 == 0 && kD / 4 <= 256, "whole rows per pass");
  constexpr int kThreadsPerRow = kD / 4, kRows = 256 / kThreadsPerRow;
  constexpr int kPasses = (kBlockM + kRows - 1) / kRows;
  const PackedBlock pb = packed_cta_block(a.cu_seqlens_q, a.batch, kBlockM);
  if (pb.seq < 0 || threadIdx.x >= kRows * kThreadsPerRow)
    return;
  const int b = pb.seq, h = blockIdx.y;
  const int col = (threadIdx.x % kThreadsPerRow) * 4;
  const SeqSpan sp = seq_span(a.cu_seqlens_q, a.cu_seqlens_kv, a.total_q, a.batch, a.heads,
                              a.seq_q, a.seq_kv, b, h);
  const long long slot =
      (long long)h * a.kv_m_blocks + varlen_dq_slot0<kBlockM>(a, b) + pb.index;
  const bool visited = kAtomic || a.dq_sem[slot] != 0;
  const int first = pb.index * kBlockM;
  float x[kPasses][4];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int r = p * kRows + threadIdx.x / kThreadsPerRow; // within the slot
    x[p][0] = x[p][1] = x[p][2] = x[p][3] = 0.f;
    if (visited && r < kBlockM && first + r < sp.seq_q) {
      const float *src = a.dq_accum + (slot * kBlockM + r) * kD + col;
      asm volatile("ld.global.cg.v4.f32 {%0,%1,%2,%3}, [%4];\n"
                   : "=f"(x[p][0]), "=f"(x[p][1]), "=f"(x[p][2]), "=f"(x[p][3])
                   : "l"(src));
    }
  }
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int r = p * kRows + threadIdx.x / kThreadsPerRow;
    if (r >= kBlockM || first + r >= sp.seq_q)
      continue;
    u32 *dst = reinterpret_cast<u32 *>(static_cast<unsigned short *>(a.dq) + b * a.dq_sb +
                                       h * a.dq_sh +
                                       ((long long)sp.q0 + first + r) * a.dq_ss + col);
    dst[0] = pack2<T>(x[p][0], x[p][1]);
    dst[1] = pack2<T>(x[p][2], x[p][3]);
  }
}

} // namespace attnc

#endif
