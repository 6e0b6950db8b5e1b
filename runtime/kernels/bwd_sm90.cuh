// bwd_sm90: the Hopper backward's dK/dV kernel (sm_90a), K/V-block
// stationary, with wgmma. One CTA per (key block, batch · kv head) of
// kBlockN / 64 warpgroups, each owning 64 keys: the M of every wgmma.
// K and V stay in shared memory; Q, dO and the rows' finals and doosum
// stream through a cp.async ring of kStages stages. Per query block of
// kBlockM rows:
//   Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ   wgmma, both operands in shared memory
//   P and dS per element         the generated Variant (bwd_element)
//   dV += Pᵀ·dO, dK += dSᵀ·Q     wgmma, Pᵀ and dSᵀ from registers
// With grouped k/v heads the CTA walks every query head of its group, so
// dK/dV sum over the group in a fixed order; custom-input gradients use
// bwd_sm80's per-(key block, batch·head) partials. dQ is either bwd_sm80's
// dQ kernel (BwdDqSm80), or, in the fused mode (kFusedDq), computed here:
//   dSᵀ to shared memory        [key][query] 16-bit slabs
//   dQ_partial = dS·K           wgmma, both operands MN-major in shared
//                               memory, the warpgroups splitting dQ's columns
//                               (at d64 its rows: kDqRows)
// and added to an fp32 sum in the semaphore-ordered turns of bwd_sm80's
// fused mode (bwd_sm80_fused_dq.cuh: ranks, rotated walks, the convert
// kernel). Either way every sum has a fixed order: the bits are the same
// on every run. The opt-in atomic mode (kAtomicDq) adds every product with
// red.global.add into a zeroed sum instead, no turns: its bits may vary.
//
// Warp-specialised (kWs, fused dQ only): a producer warpgroup after the
// key warpgroups (setmaxnreg: 24 registers for it, 240 for them) whose
// first warp streams Q and dO by TMA and the rows by cp.async into an
// mbarrier ring (full: expect_tx plus the 32 lanes' cp.async arrivals;
// empty: one arrival per compute warp once its GEMMs have read the stage);
// the compute warpgroups sync on named barrier 1 only. With kTwoPass the
// element work is split around the GEMMs: P while dPᵀ's wgmma runs, then
// dV's wgmma issued, and dS while it runs.
//
// Column-split (kSplit, warp-specialised with fused dQ, 64 keys a CTA):
// for head dims whose dK and dV rows do not fit one thread's registers
// (256/256, 192/128), both consumer warpgroups compute Sᵀ and dPᵀ of the
// same 64 keys and the same P and dS, and each owns part of dK's, dV's and
// dQ's columns (SplitCols): the score GEMMs are done twice, the three
// accumulating ones once. Warpgroup 0 alone writes dSᵀ and counts the
// input gradients. With kLeanLevel 2 (.split.tw.) the turn warp of the
// lean step waits for and publishes the dQ turns, so that a turn is
// published as soon as the step's adds are issued, not at the next step's
// barrier: with 64 x 64 tiles and a causal mask key block n + 1 reaches a
// query block only one step before key block n, and the late publish puts
// each CTA of a head behind the one before it.
//
// Roles (kRoles, a form of the column split with the turn warp, 192/128 or
// 128/128; bwd_sm90_roles.cuh): the score GEMMs and the element work are
// no longer done twice. Warpgroup 0 computes Sᵀ and dPᵀ, P and dS, stores
// Pᵀ and dSᵀ into one of two shared slots (the ps mbarriers hand them to
// warpgroup 1 and back) and computes dQ's product over all its columns and
// adds it in the turns; warpgroup 1 holds all of dK and dV and multiplies
// the slot's tiles by dO and Q (A from shared memory), up to two steps
// behind, while warpgroup 0 runs the next step's GEMMs and element work.
//
// Ping-pong (kPingPong, warp-specialised with fused dQ, two warpgroups of
// 64 keys): the warpgroups no longer meet at a CTA barrier every step.
// Each computes dQ's partial over its own keys only (dS_w·K_w, all kD
// columns, its dSᵀ rows in the shared tile), and they take turns at the
// tensor cores through a token passed on two named barriers (warpgroup 0
// issues its Sᵀ/dPᵀ group, then 1, then 0 its dV/dK group, then 1, ...),
// so that one warpgroup's element work runs beside the other's GEMMs.
// Warpgroup 0 stores its dQ partial into a shared slot (two slots), 1 adds
// its own to it (two terms: the same bits in either order), and the
// producer warpgroup's second warp, the dQ writer (the step and the writer
// are in bwd_sm90_pingpong.cuh), takes the semaphore turn and adds the
// slot to dQ's fp32 sum with bulk copies (a store for rank 0,
// cp.reduce.async.bulk .add for the others), off the consumers' path.
// kDqWriter keeps the lockstep step (both warpgroups' dSᵀ, dQ's columns
// split) and only moves the turn and the adds to that writer: each
// warpgroup stores its columns of dQ into the slot. Both are opt-in: they
// measured slower than the lockstep step with the consumers' own adds.
//
// Every tile is a set of [rows][64] slabs of 16-bit elements, 128 bytes a
// row with the 128-byte swizzle (SwizzledTile<rows, 64>, which is the
// layout TMA's CU_TENSOR_MAP_SWIZZLE_128B writes), each slab 1024-byte
// aligned: the layout wgmma's sw128 descriptors read, K-major for Sᵀ's
// operands and MN-major (transposed B) for dV's and dK's.
//
// The struct is split over files: this one holds its layout and the
// kernel's entry (run); the compute threads' walk (consume) is defined in
// bwd_sm90_consume.cuh, the producer and turn warps in
// bwd_sm90_producer.cuh, the lockstep step, the dQ adds and the dK/dV
// stores in bwd_sm90_step.cuh, the roles form in bwd_sm90_roles.cuh, the
// dQ slots' turn warps in bwd_sm90_dq_slots.cuh (all included at the end),
// ping-pong's step and the dQ writer in bwd_sm90_pingpong.cuh.
#ifndef ATTNC_BWD_SM90_CUH
#define ATTNC_BWD_SM90_CUH

#include "attnc/attention_args.cuh"
#include "attnc/block_mask.cuh"
#include "attnc/bwd_sm80_dkdv.cuh"
#include "attnc/bwd_sm80_fused_dq.cuh"
#include "attnc/bwd_sm90_elements.cuh"
#include "attnc/bwd_sm90_pingpong.cuh"
#include "attnc/sm90_primitives.cuh"
#include "attnc/sm90_wgmma.cuh"

namespace attnc {

/// The columns of dK, dV and dQ that warpgroup kW owns in bwd_sm90's
/// column-split mode (each its first column and count, 64 or 128 so that
/// every operand starts at a 64-column slab and is a wgmma N): halves, but
/// at head dim 192 warpgroup 0 takes dK's first 128 columns and dQ's last
/// 64, warpgroup 1 the rest, so that both hold and multiply as much.
template <int kD, int kDV, int kW> struct SplitCols {
  static constexpr int kKFirst0 = kD == 192 ? 128 : kD / 2;
  static constexpr int kQFirst0 = kD == 192 ? 64 : kD / 2;
  static constexpr int kK0 = kW == 0 ? 0 : kKFirst0;
  static constexpr int kKN = kW == 0 ? kKFirst0 : kD - kKFirst0;
  static constexpr int kV0 = kW == 0 ? 0 : kDV / 2, kVN = kDV / 2;
  static constexpr int kQ0 = kD == 192 ? (kW == 0 ? 128 : 0) : kW * (kD / 2);
  static constexpr int kQN = kW == 0 ? kQFirst0 : kD - kQFirst0;
  static_assert((kKN == 64 || kKN == 128) && (kVN == 64 || kVN == 128) &&
                    (kQN == 64 || kQN == 128),
                "column-split: head dims 128 or 256 each, or 192/128 (bwdSm90Unsupported)");
};

template <class Variant, class T, int kD, int kDV, int kBlockM, int kBlockN, int kStages,
          bool kFusedDq = false, bool kAtomicDq = false, bool kWs = false,
          bool kTwoPass = false, bool kSplit = false, bool kPingPong = false,
          bool kDqWriter = false, int kLeanLevel = 0, int kBulkDq = 0,
          bool kRoles = false>
struct BwdDkDvSm90 {
  /// The lean step (kLeanLevel 1 to 3): dV's and dK's products issued
  /// before the dSᵀ tile is stored, tiles inside the sequences without
  /// per-element bounds. Level 2 adds the turn warp (kTurnWarp): a warp of
  /// the producer warpgroup waits for the dQ turns and publishes them, so
  /// that no compute thread spins on a semaphore or fences at gpu scope.
  /// With the column split, level 2 means the turn warp alone (the split
  /// already issues dV's and dK's products before the dSᵀ tile).
  static constexpr bool kLean = kLeanLevel >= 1 && !kSplit;
  static constexpr bool kTurnWarp = kLeanLevel >= 2 && !kAtomicDq;
  /// Level 3: the dQ adds 16 bytes a lane (add_dq).
  static constexpr bool kVecAdds = kLeanLevel >= 3;
  /// A dQ writer warp adds the steps' dQ to the sum from shared slots:
  /// ping-pong, or the lockstep step with the writer alone (kDqWriter).
  static constexpr bool kWriter = kPingPong || kDqWriter;
  /// The turn warp's bulk dQ (kBulkDq, with kTurnWarp): the compute
  /// threads store the step's dQ into a slot (as for the dQ writer) and the
  /// turn warp, once the turn is the CTA's, adds it to the sum with bulk
  /// reductions (write_dq_bulk); the compute threads no longer meet it
  /// before adding. With kAtomicDq the same warp adds every slot at once,
  /// no turns.
  static constexpr bool kDqSlots = kWriter || kBulkDq;
  /// kBulkDq 2 to 4 (kSlotTurns, bwd_sm90_dq_slots.cuh): turn warps that
  /// acquire a step's turn before its slot is full, the compute warpgroups
  /// meeting each other (not a turn warp) before the dSᵀ stores; 2 and 3:
  /// two turn warps, warp w taking the steps it with it % 2 == w (slot w),
  /// 4: one; 2 adds a slot with bulk reductions, 3 and 4 with the turn
  /// warp's own red.global.add.v4.
  static constexpr bool kSlotTurns = kBulkDq >= 2;
  static constexpr int kDqTurnWarps = kBulkDq == 2 || kBulkDq == 3 ? 2 : 1;
  /// The consumer warpgroups: one per 64 keys, or two over the same 64
  /// keys in the column-split mode.
  static constexpr int kWarpgroups = kSplit ? 2 : kBlockN / 64;
  /// (Warp-specialised: one more warpgroup, the producer's, after them, so
  /// that thread 0, which the dQ turns use, is a consumer.)
  static constexpr int kThreads = 128 * kWarpgroups;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int QT = kBlockM / 8; // n8 query tiles of Sᵀ
  static constexpr int kF = Variant::kNumFinals;
  static constexpr bool kDoosum = Variant::kBackwardUsesDoosum;
  static constexpr int kNumGrads = Variant::kNumInputGrads;
  static_assert(kBlockN == 64 || kBlockN == 128, "one or two warpgroups of 64 keys");
  static_assert(kBlockM == 64 || kBlockM == 128, "the N of Sᵀ's wgmma: 64 or 128");
  static_assert(kSplit || ((kD == 64 || kD == 128) && (kDV == 64 || kDV == 128)),
                "head dims are 64-column slabs and wgmma N of 64 or 128");
  static_assert(!kSplit || (kBlockN == 64 && kWs && kFusedDq && !kTwoPass &&
                             (kLeanLevel == 0 || (kLeanLevel == 2 && !kAtomicDq))),
                "the column split is a warp-specialised fused-dQ mode of 64 keys, "
                "element work in one pass, with or without the turn warp");
  static_assert(!kWriter || (kBlockN == 128 && kBlockM == 64 && kWs && kFusedDq &&
                             !kTwoPass && !kSplit && kD == kDV && !(kPingPong && kDqWriter)),
                "ping-pong and the dQ writer: warp-specialised fused-dQ modes of two "
                "warpgroups of keys, 64-row steps, element work in one pass "
                "(bwdSm90Unsupported)");
  static_assert(!kRoles || (kSplit && kLeanLevel == 2 && !kAtomicDq && kBlockM == 64 &&
                             (kD == 128 || kD == 192) && kDV == 128),
                "the roles form is a column split with the turn warp, 64-row steps, "
                "192/128 or 128/128 (bwdSm90Unsupported)");
  static_assert(!kLean || (kWs && kFusedDq && !kTwoPass && !kSplit && !kWriter),
                "the lean step is a warp-specialised fused-dQ mode of the lockstep "
                "step (bwdSm90Unsupported)");
  static_assert(!kBulkDq || (kLeanLevel == 2 &&
                             (kBlockM == 64 || (kBlockM == 128 && kD == 64 && kSlotTurns))),
                "the bulk dQ reduction is a form of the turn warp's step with 64-row "
                "steps, or at head dim 64 of 128-row steps with turns taken ahead "
                "(bwdSm90Unsupported)");
  static_assert(kStages >= 2 && kStages <= 4, "a ring of 2 to 4 stages");
  static_assert(kNumGrads <= kMaxInputGrads, "too many input gradients");
  static_assert(kFusedDq || !(kAtomicDq || kWs),
                "atomic dQ and warp specialisation are fused dQ modes");
  static_assert(kWs || !kTwoPass, "the two-pass element work is warp-specialised");
  static constexpr int kKSlab = kBlockN * 128, kQSlab = kBlockM * 128;
  static constexpr int kKBytes = kKSlab * (kD / 64), kVBytes = kKSlab * (kDV / 64);
  static constexpr int kQBytes = kQSlab * (kD / 64), kOBytes = kQSlab * (kDV / 64);
  /// Per query row: the final rowscales ([row][kF]), then doosum; rounded
  /// to 1024 bytes so that the next stage's slabs stay aligned.
  static constexpr int kRowFloats = kF + (kDoosum ? 1 : 0);
  static constexpr int kRowBytes = (kBlockM * kRowFloats * 4 + 1023) / 1024 * 1024;
  static constexpr int kStageBytes = kQBytes + kOBytes + kRowBytes;
  /// Fused dQ: dSᵀ of a step, kBlockM / 64 slabs of [kBlockN keys][64
  /// queries] (MN-major for dS·K's A operand: the queries are its M).
  static constexpr int kDsSlab = kBlockN * 128;
  /// Roles: two slots of a Pᵀ and a dSᵀ tile each (slot s: Pᵀ at
  /// 2s·kDsSlab, dSᵀ after it).
  static constexpr int kDsBytes = kFusedDq ? kDsSlab * (kBlockM / 64) * (kRoles ? 4 : 1) : 0;
  /// The dQ writer's two slots of the step's fp32 [kBlockM][kD] dQ, rows padded
  /// by 32 bytes so that a warp's 8-byte stores of its fragment rows hit
  /// distinct banks; the dQ writer copies them row by row.
  static constexpr int kDqRowBytes = kD * 4 + 32;
  static constexpr int kDqSlotBytes = kDqSlots ? kBlockM * kDqRowBytes : 0;
  static constexpr int kDqBytes = 2 * kDqSlotBytes;
  /// Warp-specialised: the ring's full and empty mbarriers (8 bytes each,
  /// at most 4 stages), then the dQ slots' full and empty ones.
  static constexpr int kBarBytes = kWs ? 256 : 0;
  static constexpr int kDqBarOffset = 64;
  /// Ping-pong's named barriers: the tensor-core token of warpgroup w
  /// (2 + w), warpgroup 0's dQ partial stored (4), a warpgroup's dSᵀ rows
  /// stored (5 + w).
  static constexpr int kBarToken = 2, kBarPartial = 4, kBarDs = 5;
  /// The turn warp's named barriers with the compute threads: the step's
  /// turn taken (2), the step's dQ adds issued (3); kThreads + 32 threads.
  /// With kBulkDq only 2: the step's slot is full, so that every
  /// warpgroup is done reading the step's dSᵀ tile.
  static constexpr int kBarTurn = 2, kBarAdded = 3;
  /// The threads of those two barriers: the turn warp and the compute
  /// threads that add (roles: warpgroup 0 alone).
  static constexpr int kTurnThreads = (kRoles ? 128 : kThreads) + 32;
  /// Roles: the ps mbarriers after the dQ slots' (full: warpgroup 0's
  /// warps stored the slot's tiles; empty: warpgroup 1's warps are done
  /// with them).
  static constexpr int kPsBarOffset = 128;
  /// Fused dQ's [kBlockM][kD] product: each warpgroup kDqN of its columns
  /// (the N of its wgmma) over kBlockM / 64 chains of 64 rows. At head dim
  /// 64 two warpgroups would get 32 columns each, so there (kDqRows, which
  /// needs 128-row steps) they split dQ's rows instead: warpgroup w takes
  /// chain w, all 64 columns, over the CTA's 128 keys.
  static constexpr bool kDqRows =
      kFusedDq && !kSplit && !kPingPong && kWarpgroups == 2 && kD == 64;
  static constexpr int kDqN = kDqRows ? kD : kD / kWarpgroups;
  static constexpr int kDqChains = kDqRows ? 1 : kBlockM / 64;
  static_assert(kSplit || kPingPong || !kFusedDq || kDqN == 64 || kDqN == 128,
                "fused dQ: a warpgroup's columns must be one or two 64-column slabs "
                "(bwdSm90Unsupported; ping-pong's warpgroups take all kD columns)");
  static_assert(!kDqRows || (kBlockM == 128 && !kWriter && (!kBulkDq || kSlotTurns)),
                "fused dQ at head dim 64 with two warpgroups: a 64-row chain each, "
                "128-row steps; slots only with turns taken ahead (bwdSm90Unsupported)");
  /// The first of chain c's rows within the step: 64·c, or with kDqRows
  /// this warpgroup's chain.
  __device__ static __forceinline__ int dq_chain(int c, int wg) { return kDqRows ? wg : c; }
  /// 1024 bytes of slack to align the dynamic shared memory by hand
  /// (BwdSm90Config::dkdvSharedBytes says the same).
  static constexpr int kSmemBytes =
      1024 + kKBytes + kVBytes + kStages * kStageBytes + kDsBytes + kDqBytes + kBarBytes;
  /// setmaxnreg with two consumer warpgroups (384 threads start at 168;
  /// a split must fit 168 · 384 registers). At 128/128 the compute
  /// warpgroups fit in 232 without spilling (ptxas), and 32 for the
  /// producer and turn warps halve their spills in the packed form (a
  /// chunked mask's: 602 → 290 bytes a thread); at d64 the compute
  /// warpgroups' 128-row steps need 240, and so does the two-pass element
  /// work (softcap_learnable's wgmma serialised at 232).
  static constexpr bool kWideProducer = kD == 128 && kDV == 128 && !kTwoPass;
  static constexpr int kProducerRegs = kWideProducer ? 32 : 24;
  static constexpr int kConsumerRegs = kWideProducer ? 232 : 240;
  static_assert(kConsumerRegs * 256 + kProducerRegs * 128 <= 168 * 384,
                "the setmaxnreg split fits the CTA's registers at launch");
  using Sem = BwdFusedDq<T, kD, kBlockM, kBlockN, kWarps>;
  using Elems = BwdSm90Elements<Variant, T, kDV, kBlockM, kSplit>;
  /// Ping-pong's step and the dQ writer (bwd_sm90_pingpong.cuh), which
  /// read this instantiation's parameters under these names.
  using VariantType = Variant;
  using ElemType = T;
  static constexpr int kHeadDim = kD, kHeadDimV = kDV, kStepRows = kBlockM,
                       kKeyRows = kBlockN;
  static constexpr bool kAtomic = kAtomicDq;
  using PingPong = BwdSm90PingPong<BwdDkDvSm90>;
  /// Warpgroup kW's columns: SplitCols in the column-split mode, else all
  /// of dK's and dV's and (fused dQ) kDqN of dQ's from wg · kDqN.
  /// Roles: warpgroup 0 all of dQ's columns, warpgroup 1 all of dK's and
  /// dV's (warpgroup 0's dK/dV and 1's dQ sizes are placeholders, unused).
  template <int kW> struct Cols {
    // (Any valid pair when not split, so that S's static_assert holds.)
    using S = SplitCols<kSplit ? (kRoles ? 128 : kD) : 128, kSplit ? kDV : 128, kW>;
    static constexpr bool kMine = kW == 1; // roles: dK and dV
    static constexpr int kK0 = kSplit && !kRoles ? S::kK0 : 0;
    static constexpr int kKN = kRoles ? (kMine ? kD : 64) : kSplit ? S::kKN : kD;
    static constexpr int kV0 = kSplit && !kRoles ? S::kV0 : 0;
    static constexpr int kVN = kRoles ? (kMine ? kDV : 64) : kSplit ? S::kVN : kDV;
    static constexpr int kQN = kRoles ? (kMine ? 64 : kD) : kSplit ? S::kQN : kDqN;
    __device__ static __forceinline__ int q0(int wg) {
      return kRoles ? 0 : kSplit ? S::kQ0 : kDqRows ? 0 : wg * kDqN;
    }
  };
  /// The first of a warpgroup's 64 keys within the CTA's.
  __device__ static __forceinline__ int key_offset(int wg) { return kSplit ? 0 : wg * 64; }
  static_assert(kNumGrads * kWarps * 4 <= (kWs ? kDsBytes : kStageBytes),
                "the input-gradient reduction reuses a ring slot (the dSᵀ tile when "
                "warp-specialised)");

  /// One head's walk over the query blocks that visit this key block.
  struct Walk {
    BlockVisits<Variant::kHasMask> blocks;
    const int *ranks; // fused dQ with a mask: this key block's turns
    int m_first;      // fused dQ without a mask: the rotated walk's start
    __device__ __forceinline__ int visit(const BwdArgs &a, int j, bool &full) const {
      int e = blocks.entry(j);
      if constexpr (kFusedDq && !Variant::kHasMask) {
        e += m_first;
        e -= e >= a.kv_m_blocks ? a.kv_m_blocks : 0;
      }
      return blocks.decode(e, full);
    }
  };
  __device__ static __forceinline__ Walk walk(const BwdArgs &a, int bh, int n_block) {
    Walk w{{a.kv_m_blocks, nullptr}, nullptr, 0};
    if constexpr (Variant::kHasMask) {
      const long long line = mask_group(a.mask_grouping, bh, a.heads) * a.kv_n_blocks + n_block;
      w.blocks.count = a.kv_count[line];
      w.blocks.list = a.kv_list + line * a.kv_m_blocks;
      if constexpr (kFusedDq)
        w.ranks = a.kv_rank + line * a.kv_m_blocks;
    }
    // Fused dQ without a mask may start the walk further up (first_block).
    if constexpr (kFusedDq && !Variant::kHasMask)
      w.m_first = Sem::first_block(a, n_block);
    return w;
  }

  /// K's and V's tiles of keys [key0, key0 + kBlockN) (rows at or past
  /// \p limit zero-filled) by cp.async from the compute threads, and
  /// waited for: each thread waits for its own copies and fences them for
  /// wgmma, which reads through the async proxy, then all meet.
  /// Warp-specialised, they call it after the warpgroups part (at their
  /// setmaxnreg count: issued before it, the copies' addresses were live
  /// across the split and spilled in the compute warps at d64), so the
  /// producer's first loads overlap theirs.
  __device__ static __forceinline__ void load_kv(u32 s_k, u32 s_v, const unsigned short *k,
                                                 long long k_ss, const unsigned short *v,
                                                 long long v_ss, int key0, int limit) {
    load_slabs_async<kBlockN, kD, kThreads>(s_k, k, k_ss, key0, limit);
    load_slabs_async<kBlockN, kDV, kThreads>(s_v, v, v_ss, key0, limit);
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async_shared();
    sync_compute();
  }

  /// A barrier of the warpgroups that compute (all threads but the
  /// producer's when warp-specialised: named barrier 1). The column split's
  /// warpgroups reach it from consume<0> and consume<1>, different code,
  /// so theirs is the unaligned form.
  __device__ static __forceinline__ void sync_compute() {
    if constexpr (kSplit)
      named_bar_sync_unaligned(1, kThreads);
    else if constexpr (kWs)
      named_bar_sync(1, kThreads);
    else
      __syncthreads();
  }

  __device__ static void run(const BwdArgs &a, const typename Variant::Inputs &in,
                             unsigned char *smem, const Sm90BwdMaps *maps = nullptr) {
    const u32 base = (smem_addr(smem) + 1023u) & ~1023u;
    unsigned char *aligned = smem + (base - smem_addr(smem));
    const u32 s_k = base, s_v = base + kKBytes, s_ring = s_v + kVBytes;
    const u32 s_ds = s_ring + kStages * kStageBytes, s_dq = s_ds + kDsBytes;
    const u32 bar_full = s_dq + kDqBytes, bar_empty = bar_full + 8 * kStages;
    unsigned char *ring = aligned + kKBytes + kVBytes;
    // Fused dQ: the highest key block first, so that a CTA only waits for
    // CTAs dispatched before it (bwd_sm80_fused_dq.cuh).
    const int n_block = kFusedDq ? a.kv_n_blocks - 1 - (int)blockIdx.x : (int)blockIdx.x;
    const int b = blockIdx.y / a.heads_kv, hk = blockIdx.y % a.heads_kv;
    const int group_size = a.heads / a.heads_kv;
    const int key0 = n_block * kBlockN;

    const unsigned short *k = static_cast<const unsigned short *>(a.k) + b * a.k_sb + hk * a.k_sh;
    const unsigned short *v = static_cast<const unsigned short *>(a.v) + b * a.v_sb + hk * a.v_sh;
    if constexpr (!kWs) {
      // The ring's first group (consume waits for it with the first step's).
      load_slabs_async<kBlockN, kD, kThreads>(s_k, k, a.k_ss, key0, a.seq_kv);
      load_slabs_async<kBlockN, kDV, kThreads>(s_v, v, a.v_ss, key0, a.seq_kv);
      cp_async_commit();
    }
    if constexpr (kWs) {
      if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) {
          // Full: the producer warp's expect_tx and its 32 lanes' cp.async
          // arrivals (the rows); empty: every compute thread's (release).
          mbar_init(bar_full + 8 * s, 1 + 32);
          mbar_init(bar_empty + 8 * s, kWarps * 32);
        }
        if constexpr (kRoles)
          for (int s = 0; s < 2; ++s) {
            mbar_init(bar_full + kPsBarOffset + 8 * s, 4);
            mbar_init(bar_full + kPsBarOffset + 16 + 8 * s, 4);
          }
        if constexpr (kDqSlots)
          for (int s = 0; s < 2; ++s) {
            // Full: every thread of ping-pong's warpgroup 1, after adding
            // its partial, or of every compute warp; empty: every lane of the dQ
            // writer (or of the slot's turn warp), once its copies have
            // read the slot (each lane's own arrival, so racecheck sees
            // its reads released, as on the ring).
            mbar_init(bar_full + kDqBarOffset + 8 * s, (kPingPong ? 4 : kWarps) * 32);
            mbar_init(bar_full + kDqBarOffset + 16 + 8 * s, 32);
          }
        mbar_init_fence();
      }
      // The mbarriers are initialised before the warpgroups part.
      __syncthreads();
      if (threadIdx.x >= kThreads) {
        if constexpr (kWarpgroups == 2)
          setmaxnreg_dec<kProducerRegs>();
        if (threadIdx.x < kThreads + 32)
          produce(a, *maps, s_ring, bar_full, bar_empty, n_block, b, hk, group_size);
        else if (kWriter && threadIdx.x < kThreads + 64)
          PingPong::write_dq(a, s_dq, bar_full + kDqBarOffset, n_block, b, hk, group_size);
        else if (kSlotTurns && threadIdx.x < kThreads + 32 + 32 * kDqTurnWarps) {
          if constexpr (kSlotTurns)
            write_dq_slots(a, s_dq, bar_full + kDqBarOffset, n_block, b, hk, group_size,
                           (threadIdx.x - kThreads - 32) / 32);
        }
        else if (kBulkDq && threadIdx.x < kThreads + 64)
          write_dq_bulk(a, s_dq, bar_full + kDqBarOffset, n_block, b, hk, group_size);
        else if (kTurnWarp && threadIdx.x < kThreads + 64)
          take_turns(a, n_block, b, hk, group_size);
        return;
      }
      if constexpr (kWarpgroups == 2)
        setmaxnreg_inc<kConsumerRegs>();
      // The compute threads load K and V and wait for them alone: the
      // producer starts the walk (its first Q and dO tiles) meanwhile.
      load_kv(s_k, s_v, k, a.k_ss, v, a.v_ss, key0, a.seq_kv);
    }
    // Column-split: each warpgroup's accumulators have its own sizes.
    if (kSplit && threadIdx.x >= 128)
      consume<1>(a, in, s_k, s_v, s_ring, s_ds, s_dq, bar_full, bar_empty, ring, n_block, b,
                 hk, group_size, key0);
    else
      consume<0>(a, in, s_k, s_v, s_ring, s_ds, s_dq, bar_full, bar_empty, ring, n_block, b,
                 hk, group_size, key0);
  }

  /// The compute threads' walk (warpgroup kW's columns): every query block
  /// of every head of the group, then dK and dV stored.
  template <int kW>
  __device__ static __forceinline__ void
  consume(const BwdArgs &a, const typename Variant::Inputs &in, u32 s_k, u32 s_v,
          u32 s_ring, u32 s_ds, u32 s_dq, u32 bar_full, u32 bar_empty, unsigned char *ring,
          int n_block, int b, int hk, int group_size, int key0);

  /// The producer warp: per step, Q's and dO's tiles by TMA (one lane) and
  /// the rows by cp.async (every lane), completing the stage's full
  /// barrier, after the compute warps have released the stage.
  __device__ static void produce(const BwdArgs &a, const Sm90BwdMaps &maps, u32 s_ring,
                                 u32 bar_full, u32 bar_empty, int n_block, int b, int hk,
                                 int group_size);

  /// The turn warp (kTurnWarp): walks the consumers' steps; per step lane
  /// 0 waits until query block m's semaphore reaches this key block's rank
  /// (an acquire), the warp lets the compute threads add (kBarTurn), waits
  /// until they have issued their adds (kBarAdded: the compute threads'
  /// arrivals release them at CTA scope) and lane 0 publishes rank + 1
  /// (a gpu-scope release, cumulative over those adds). Its waits and its
  /// fence stall only this warp.
  __device__ static void take_turns(const BwdArgs &a, int n_block, int b, int hk,
                                    int group_size);

  /// One step of the turn warp: waits for the turn \p rank on \p sem, lets
  /// the compute threads add, and publishes rank + 1 once they have issued
  /// their adds (the packed walk's turn warp takes the same steps,
  /// bwd_sm90_varlen.cuh).
  __device__ static __forceinline__ void take_turn(int *sem, int rank);

  /// The turn warp with kBulkDq: per step, once the compute warps have
  /// filled the slot (it % 2) it lets them overwrite the dSᵀ tile
  /// (kBarTurn), lane 0 waits for the turn (an acquire), every lane adds
  /// two of the slot's rows to query block m's rows of the sum with bulk
  /// reductions (rank 0: bulk stores), the slot is emptied once they have
  /// read it, and rank + 1 is published once they have completed.
  __device__ static void write_dq_bulk(const BwdArgs &a, u32 s_dq, u32 dq_bars, int n_block,
                                       int b, int hk, int group_size);

  /// Turn warp \p owner of kDqTurnWarps (kSlotTurns;
  /// bwd_sm90_dq_slots.cuh): the steps it with it % kDqTurnWarps == owner,
  /// from slot it % 2.
  __device__ static void write_dq_slots(const BwdArgs &a, u32 s_dq, u32 dq_bars, int n_block,
                                        int b, int hk, int group_size, int owner);

  /// One step of a turn warp with kSlotTurns: the turn \p rank of \p sem
  /// (null with kAtomicDq) acquired before step \p it's slot is full, the
  /// slot added to (rank 0: stored at) the rows at \p dst, the slot
  /// emptied and rank + 1 published (the packed walk's turn warps take the
  /// same steps, bwd_sm90_varlen.cuh).
  __device__ static __forceinline__ void add_dq_slot(u32 s_dq, u32 dq_bars, int it, int *sem,
                                                     float *dst, int rank);

  /// cp.async of the query rows' final rowscales and doosum; rows past the
  /// end are zero-filled (their elements are invalid anyway).
  template <int kN>
  __device__ static __forceinline__ void load_rows(const BwdArgs &a, u32 dst, int bh,
                                                   int row0, int tid);

  /// Warp-specialised: this thread is done with a ring stage (an arrival
  /// per thread on its empty barrier). One arrival per warp after
  /// __syncwarp would order the warp's reads as well under the PTX model,
  /// but racecheck follows only the arriving thread's own accesses and
  /// reports the other lanes' reads as WAR hazards; an arrival each keeps
  /// racecheck usable on this kernel (docs/runtime.md, "racecheck on
  /// bwd_sm90's ring").
  __device__ static __forceinline__ void release(u32 empty) {
    if constexpr (kWs)
      mbar_arrive(empty);
  }

  /// One query block m: Sᵀ and dPᵀ for this warpgroup's 64 keys, P and dS
  /// per element, then dV += Pᵀ·dO and dK += dSᵀ·Q; fused dQ: dSᵀ through
  /// shared memory, the previous step's \p turn published, dS·K and its add
  /// to dQ's sum in turn \p rank, which becomes the pending \p turn (with
  /// the dQ writer: the product into dQ slot \p it % 2 instead). The
  /// wgmma calls sit outside any data-dependent branch (kFull only changes
  /// the element loop), so that ptxas need not serialise them.
  template <bool kFull, int kW>
  __device__ static __forceinline__ void
  step(const BwdArgs &a, const typename Variant::Inputs &in, u32 s_k, u32 s_v, u32 s_stage,
       u32 s_ds, u32 s_dq, u32 dq_bars, int it, u32 empty, const float *rows, int m, int b,
       int h, int bh, int key0, int rank, DqTurn &turn, float (&acc_dk)[Cols<kW>::kKN / 8][4],
       float (&acc_dv)[Cols<kW>::kVN / 8][4], float *gacc);

  /// The roles form's step (bwd_sm90_roles.cuh): warpgroup 0 Sᵀ, dPᵀ, P,
  /// dS, the slot's Pᵀ and dSᵀ tiles, dQ's product and adds; warpgroup 1
  /// dV and dK from the slot \p it % 2 (\p ps_bars: its full and empty
  /// mbarriers).
  template <bool kFull, int kW>
  __device__ static __forceinline__ void
  step_roles(const BwdArgs &a, const typename Variant::Inputs &in, u32 s_k, u32 s_v,
             u32 s_stage, u32 s_ds, u32 ps_bars, int it, u32 empty, const float *rows, int m,
             int b, int h, int bh, int key0, int rank, float (&acc_dk)[Cols<kW>::kKN / 8][4],
             float (&acc_dv)[Cols<kW>::kVN / 8][4], float *gacc);

  /// Adds this thread's part of the step's dS·K to query block \p m's rows
  /// of the fp32 sum (rank 0 stores it, so that it needs no zeroing): chain
  /// c's rows 64c + 16·warp + g (+8), this warpgroup's columns.
  template <int kW>
  __device__ static __forceinline__ void
  add_dq(const BwdArgs &a, const float (&acc)[kDqChains][Cols<kW>::kQN / 8][4], int bh, int m,
         int rank);

  /// The staged store's rows in shared memory: a key's dK (then dV) row,
  /// padded by 16 bytes so that the 8 rows of a warp's fragment stores
  /// start in distinct 16-byte bank groups; the bulk copies read whole
  /// rows (16-byte multiples, 16-byte aligned).
  static constexpr int kStagedKRow = kD * 2 + 16, kStagedVRow = kDV * 2 + 16;
  /// dK and dV staged in the ring and the dSᵀ tile (both free once the
  /// walk is over) and written by bulk copies, a row a thread: the CTA
  /// waits for its copies to read shared memory, not for its global
  /// writes (with the fragments' 4-byte stores from registers it waited
  /// for every store to drain, and a short walk's CTA spent a sixth of its
  /// time there). The lockstep step's warp-specialised forms, where dK and
  /// dV fit.
  static constexpr bool kStagedStore =
      kWs && !kRoles && !kPingPong &&
      kBlockN * (kStagedKRow + kStagedVRow) <= kStages * kStageBytes + kDsBytes;

  /// dK and dV of this thread's keys and columns, rows past seq_kv not
  /// stored; staged in shared memory from \p s_stage (the ring) where
  /// kStagedStore, every compute thread calling it.
  template <int kW>
  __device__ static __forceinline__ void store(const BwdArgs &a, int b, int hk, int key0,
                                               const float (&acc_dk)[Cols<kW>::kKN / 8][4],
                                               const float (&acc_dv)[Cols<kW>::kVN / 8][4],
                                               u32 s_stage);
};

} // namespace attnc

// The members defined out of the struct: the compute threads' walk, the
// producer and turn warps, the lockstep step, the roles form and the dQ
// slots' turn warps.
#define ATTNC_BWD_SM90_TEMPLATE                                                              \
  template <class Variant, class T, int kD, int kDV, int kBlockM, int kBlockN, int kStages,  \
            bool kFusedDq, bool kAtomicDq, bool kWs, bool kTwoPass, bool kSplit,             \
            bool kPingPong, bool kDqWriter, int kLeanLevel, int kBulkDq, bool kRoles>
#define ATTNC_BWD_SM90                                                                       \
  BwdDkDvSm90<Variant, T, kD, kDV, kBlockM, kBlockN, kStages, kFusedDq, kAtomicDq, kWs,      \
              kTwoPass, kSplit, kPingPong, kDqWriter, kLeanLevel, kBulkDq, kRoles>
#include "attnc/bwd_sm90_consume.cuh"
#include "attnc/bwd_sm90_producer.cuh"
#include "attnc/bwd_sm90_step.cuh"
#include "attnc/bwd_sm90_roles.cuh"
#include "attnc/bwd_sm90_dq_slots.cuh"
#undef ATTNC_BWD_SM90
#undef ATTNC_BWD_SM90_TEMPLATE

#endif
