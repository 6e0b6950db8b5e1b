// bwd_sm80's dK/dV kernel (and, in the fused dQ mode, dQ's products): one
// CTA per (key block, batch · kv head). K and V stay in shared memory, Q/dO
// tiles stream through a cp.async ring. Per query block: Sᵀ = K·Qᵀ,
// dPᵀ = V·dOᵀ, P and dS per element, dV += Pᵀ·dO, dK += dSᵀ·Q. With grouped
// k/v heads the CTA walks every query head of its group, so dK/dV sum over
// the group in order.
//
// Two warp layouts (kSplit, chosen by the host: BwdConfig::splitsQueries):
//  * kSplit false: each warp owns kBlockN / kWarps keys for the whole step.
//    Pᵀ and dSᵀ stay in its registers as the A operands of dV and dK, but
//    every warp reads all kBlockM rows of Q and dO twice a step.
//  * kSplit true: Sᵀ and dPᵀ split over (kWarps / 2 key groups) x (2 query
//    halves), which halves the Q and dO rows a warp reads for them; Pᵀ and
//    dSᵀ go through shared memory to the dK/dV layout, (kWarps / 2 key
//    groups) x (2 column halves of D and DV). At 64 x 128 with 8 warps:
//    608 KB of shared-memory reads and writes a step instead of 720 (with
//    the fused dQ product), the same accumulator registers.
#ifndef ATTNC_BWD_SM80_DKDV_CUH
#define ATTNC_BWD_SM80_DKDV_CUH

#include "attnc/attention_args.cuh"
#include "attnc/block_mask.cuh"
#include "attnc/bwd_sm80_fused_dq.cuh"
#include "attnc/sm80_primitives.cuh"
#include "attnc/varlen.cuh"

namespace attnc {

/// P of one element from its raw score: score_mod then forward, or, where
/// score_mod is score · c and forward exp(scores − y) (kForwardFolded),
/// forward_folded with c inside exp2's FMA (one multiply fewer).
template <class Variant>
__device__ __forceinline__ float recompute_p(const typename Variant::Inputs &in, float raw,
                                             const float *fin, int b, int h, int q, int k) {
  if constexpr (Variant::kForwardFolded)
    return Variant::forward_folded(in, raw, fin, b, h, q, k);
  else
    return Variant::forward(in, Variant::score_mod(in, raw, b, h, q, k), fin, b, h, q, k);
}

/// The gradient of one score element: sets \p p to P, adds dS·∂mod/∂input
/// to \p gacc (when kInputGrads; add_input_grads relies on dS being 0 where
/// \p valid is false) and returns dS w.r.t. the raw score.
/// \p valid is false for an element outside either sequence or masked: its
/// P and dS are 0 whatever the variant's functions give there (a row with
/// no unmasked key has finals = -inf, and padding rows have no finals).
template <class Variant, bool kInputGrads>
__device__ __forceinline__ float bwd_element(const typename Variant::Inputs &in,
                                             float raw, float dp, const float *fin,
                                             float doosum, int b, int h, int q, int k,
                                             bool valid, float &p, float *gacc) {
  // Every function is evaluated for every element and the invalid ones are
  // selected away afterwards: `valid ? f() : 0` around a function that
  // reads the row's finals from shared memory compiles to a branch per
  // element (the compiler does not speculate the load), 32 or more a step.
  // The arguments are in bounds either way (rows past the end are zero).
  const float p_any = recompute_p<Variant>(in, raw, fin, b, h, q, k);
  p = valid ? p_any : 0.f;
  const float ds_any = Variant::backward(in, dp, p, fin, doosum, b, h, q, k);
  const float ds = valid ? ds_any : 0.f;
  if constexpr (kInputGrads && Variant::kNumInputGrads > 0)
    Variant::add_input_grads(in, raw, ds, valid, b, h, q, k, gacc);
  const float grad = Variant::score_mod_grad(in, raw, b, h, q, k);
  return valid ? ds * grad : 0.f;
}

/// A thread's input-gradient sums over one tile as kLanes independent
/// chains: every element adds one dependent FADD/FFMA to its input's sum,
/// so one accumulator is a chain as long as the thread's elements (32 or
/// more a step, 4 cycles each, between the tile's GEMMs). Element lane l
/// adds into lane(l); flush adds the lanes to \p gacc in a fixed order
/// (the same bits every run).
template <int kNumGrads, int kLanes>
struct InputGradLanes {
  static_assert(kLanes >= 1 && (kLanes & (kLanes - 1)) == 0,
                "lanes are summed pairwise: a power of two");
  float acc[kLanes][kNumGrads > 0 ? kNumGrads : 1];

  __device__ __forceinline__ InputGradLanes() {
#pragma unroll
    for (int l = 0; l < kLanes; ++l)
#pragma unroll
      for (int j = 0; j < kNumGrads; ++j)
        acc[l][j] = 0.f;
  }
  __device__ __forceinline__ float *lane(int l) { return acc[l]; }
  __device__ __forceinline__ void flush(float *gacc) {
#pragma unroll
    for (int w = kLanes / 2; w > 0; w /= 2)
#pragma unroll
      for (int l = 0; l < w; ++l)
#pragma unroll
        for (int j = 0; j < kNumGrads; ++j)
          acc[l][j] += acc[l + w][j];
#pragma unroll
    for (int j = 0; j < kNumGrads; ++j)
      gacc[j] += acc[0][j];
  }
};

/// The input-gradient partials of one (key block \p n_block, batch·head
/// \p bh): every thread's \p gacc summed over its warp, then the warps'
/// sums in warp order by thread j for input j (a fixed order: the same
/// bits every run), into a.grad_partial, which attnc_bwd_input_grads
/// reduces. Zeroes gacc. \p red: kNumGrads·kWarps floats of shared memory
/// free until the second barrier; \p sync: a barrier over the kWarps warps
/// (the CTA's, or a warp-specialised kernel's compute warps); \p silent: this
/// warp's sums repeat another's (a column split) and count as 0.
template <int kNumGrads, int kWarps, class Sync>
__device__ __forceinline__ void store_input_grad_partials(const BwdArgs &a, float *gacc,
                                                          bool silent, float *red,
                                                          int n_block, long long bh,
                                                          Sync sync) {
  static_assert(kNumGrads <= kMaxInputGrads, "one summing thread an input");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < kNumGrads; ++j) {
    const float x = silent ? 0.f : warp_sum(gacc[j]);
    gacc[j] = 0.f;
    if (lane == 0)
      red[j * kWarps + warp] = x;
  }
  sync();
  if (threadIdx.x < kNumGrads) {
    float sum = 0.f;
    for (int w = 0; w < kWarps; ++w)
      sum += red[threadIdx.x * kWarps + w];
    a.grad_partial[((long long)threadIdx.x * a.kv_n_blocks + n_block) *
                       ((long long)a.batch * a.heads) +
                   bh] = sum;
  }
  sync();
}

template <class Variant, class T, int kD, int kDV, int kBlockM, int kBlockN,
          int kWarps, int kStages, bool kFusedDq, bool kSplit>
struct BwdDkDvSm80 {
  static constexpr int kThreads = kWarps * 32;
  /// Sᵀ/dPᵀ: WK key groups x WQ query groups; a warp KT m16 key tiles by
  /// QT n8 query tiles.
  static constexpr int WQ = kSplit ? 2 : 1, WK = kWarps / WQ;
  static constexpr int kKeysS = kBlockN / WK, kRowsS = kBlockM / WQ;
  static constexpr int KT = kKeysS / 16, QT = kRowsS / 8;
  /// dK/dV: WKG key groups x WC column groups; a warp KG m16 key tiles by
  /// DT (dK) and VT (dV) n8 column tiles.
  static constexpr int WC = kSplit ? 2 : 1, WKG = kWarps / WC;
  static constexpr int KG = kBlockN / WKG / 16;
  static constexpr int DT = kD / 8 / WC, VT = kDV / 8 / WC;
  static constexpr int kF = Variant::kNumFinals;
  static constexpr bool kDoosum = Variant::kBackwardUsesDoosum;
  static constexpr int kNumGrads = Variant::kNumInputGrads;
  static_assert(kKeysS % 16 == 0 && kBlockN % (16 * WKG) == 0,
                "each warp owns whole m16 key tiles");
  static_assert(kRowsS % 16 == 0, "a warp's query rows are pairs of n8 tiles");
  static_assert(DT % 2 == 0 && VT % 2 == 0, "a warp's columns are pairs of n8 tiles");
  static_assert(kD % 64 == 0 && kDV % 64 == 0,
                "head dims must be multiples of 64 (swizzle and k16 steps)");
  static_assert(kStages >= 2, "the Q/dO ring needs at least double buffering");
  static_assert(kNumGrads <= kMaxInputGrads, "too many input gradients");
  using KTile = SwizzledTile<kBlockN, kD>;
  using VTile = SwizzledTile<kBlockN, kDV>;
  using QTile = SwizzledTile<kBlockM, kD>;
  using OTile = SwizzledTile<kBlockM, kDV>;
  /// Pᵀ or dSᵀ of one step, [key][query row], 16-bit.
  using PTile = SwizzledTile<kBlockN, kBlockM>;
  /// Per query row: the final rowscales ([row][kF]), then doosum.
  static constexpr int kRowFloats = kF + (kDoosum ? 1 : 0);
  static constexpr int kRowBytes = (kBlockM * kRowFloats * 4 + 127) / 128 * 128;
  static constexpr int kStageBytes = QTile::kBytes + OTile::kBytes + kRowBytes;
  /// The fused dQ mode (bwd_sm80_fused_dq.cuh) reads dSᵀ from shared memory.
  using Fused = BwdFusedDq<T, kD, kBlockM, kBlockN, kWarps>;
  /// After the ring: Pᵀ (split layout) and dSᵀ (split layout or fused dQ).
  /// (Spelled out: naming PTile::kBytes would instantiate the tile, whose
  /// swizzle needs 32 or 64k query rows, in configs that have no such tile.)
  static constexpr int kPBytes = kSplit ? kBlockN * kBlockM * 2 : 0;
  static constexpr int kDsBytes = kSplit || kFusedDq ? kBlockN * kBlockM * 2 : 0;
  static constexpr int kSmemBytes =
      KTile::kBytes + VTile::kBytes + kStages * kStageBytes + kPBytes + kDsBytes;
  static_assert(kNumGrads * kWarps * 4 <= kStageBytes,
                "the input-gradient reduction reuses a ring slot");

  __device__ static void run(const BwdArgs &a, const typename Variant::Inputs &call_in,
                             unsigned char *smem) {
    // Fused dQ: the highest key block first, so that a CTA only waits for
    // CTAs dispatched before it (bwd_sm80_fused_dq.cuh).
    const int n_block = kFusedDq ? a.kv_n_blocks - 1 - (int)blockIdx.x : (int)blockIdx.x;
    const int b = blockIdx.y / a.heads_kv, hk = blockIdx.y % a.heads_kv;
    const int group_size = a.heads / a.heads_kv;
    const int key0 = n_block * kBlockN;
    // This CTA's sequence (varlen.cuh; the head only moves the per-row
    // arrays). In a packed call a key block past its end has no keys; its
    // input-gradient partials are zeros.
    const SeqSpan sp0 = seq_span(a.cu_seqlens_q, a.cu_seqlens_kv, a.total_q, a.batch,
                                 a.heads, a.seq_q, a.seq_kv, b, hk * group_size);
    const auto &in = sequence_inputs(call_in, sp0);
    if (key0 >= sp0.seq_kv) {
      if constexpr (kNumGrads > 0)
        for (int i = threadIdx.x; i < kNumGrads * group_size; i += kThreads)
          a.grad_partial[((long long)(i / group_size) * a.kv_n_blocks + n_block) *
                             ((long long)a.batch * a.heads) +
                         (long long)b * a.heads + hk * group_size + i % group_size] = 0.f;
      return;
    }

    const u32 s_k = smem_addr(smem);
    const u32 s_v = s_k + KTile::kBytes;
    const u32 s_ring = s_v + VTile::kBytes;
    const u32 s_p = s_ring + kStages * kStageBytes;
    const u32 s_ds = s_p + kPBytes;
    unsigned char *ring = smem + KTile::kBytes + VTile::kBytes;
    load_tile_async<KTile, kBlockN, kD, kThreads>(
        s_k,
        static_cast<const unsigned short *>(a.k) + b * a.k_sb + hk * a.k_sh +
            (long long)sp0.kv0 * a.k_ss,
        a.k_ss, key0, sp0.seq_kv);
    load_tile_async<VTile, kBlockN, kDV, kThreads>(
        s_v,
        static_cast<const unsigned short *>(a.v) + b * a.v_sb + hk * a.v_sh +
            (long long)sp0.kv0 * a.v_ss,
        a.v_ss, key0, sp0.seq_kv);
    cp_async_commit();

    float acc_dk[KG][DT][4], acc_dv[KG][VT][4];
    zero_tiles(acc_dk);
    zero_tiles(acc_dv);
    float gacc[kNumGrads > 0 ? kNumGrads : 1];
#pragma unroll
    for (int j = 0; j < (kNumGrads > 0 ? kNumGrads : 1); ++j)
      gacc[j] = 0.f;

    for (int hi = 0; hi < group_size; ++hi) {
      const int h = hk * group_size + hi;
      const int bh = b * a.heads + h;
      const SeqSpan sp = seq_span(a.cu_seqlens_q, a.cu_seqlens_kv, a.total_q, a.batch,
                                  a.heads, a.seq_q, a.seq_kv, b, h);
      // A packed call visits its sequence's query blocks (a masked
      // variant: a range of them, masked per element unless proven full;
      // varlen.cuh).
      BlockVisits<Variant::kHasMask> blocks{
          sp.packed ? (sp.seq_q + kBlockM - 1) / kBlockM : a.kv_m_blocks, nullptr};
      int first = 0;
      const int *ranks = nullptr;
      DqTurn turn{0, 0, 0, false}; // fused: published at the next barrier
      if constexpr (Variant::kHasMask) {
        if (sp.packed) {
          const int2 range = query_block_range<Variant, kBlockM, kBlockN>(in, b, h, n_block, sp);
          first = range.x;
          blocks.count = range.y - range.x;
        } else {
          const long long line =
              mask_group(a.mask_grouping, bh, a.heads) * a.kv_n_blocks + n_block;
          blocks.count = a.kv_count[line];
          blocks.list = a.kv_list + line * a.kv_m_blocks;
          if constexpr (kFusedDq)
            ranks = a.kv_rank + line * a.kv_m_blocks;
        }
      }
      auto decode = [&](int e, bool &full) {
        if (Variant::kHasMask && !blocks.list) {
          full = tile_full<Variant, kBlockM, kBlockN>(in, b, h, e * kBlockM, key0, sp);
          return e;
        }
        return blocks.decode(e, full);
      };
      const unsigned short *q = static_cast<const unsigned short *>(a.q) + b * a.q_sb +
                                h * a.q_sh + (long long)sp.q0 * a.q_ss;
      const unsigned short *dout = static_cast<const unsigned short *>(a.dout) +
                                   b * a.do_sb + h * a.do_sh + (long long)sp.q0 * a.do_ss;
      // Fused dQ without a mask may start the walk further up (first_block).
      int m_first = 0;
      if constexpr (kFusedDq && !Variant::kHasMask)
        m_first = Fused::first_block(a, n_block);
      auto visit = [&](int j) {
        int e = blocks.list ? blocks.entry(j) : first + j;
        if constexpr (kFusedDq && !Variant::kHasMask) {
          e += m_first;
          e -= e >= a.kv_m_blocks ? a.kv_m_blocks : 0;
        }
        return e;
      };
      auto load = [&](int j, int e) { // e: entry j of the list
        bool full;
        const int row0 = decode(e, full) * kBlockM;
        const u32 s = s_ring + (j % kStages) * kStageBytes;
        load_tile_async<QTile, kBlockM, kD, kThreads>(s, q, a.q_ss, row0, sp.seq_q);
        load_tile_async<OTile, kBlockM, kDV, kThreads>(s + QTile::kBytes, dout,
                                                       a.do_ss, row0, sp.seq_q);
        load_rows(a, sp, s + QTile::kBytes + OTile::kBytes, row0);
      };
#pragma unroll
      for (int s = 0; s < kStages - 1; ++s) {
        if (s < blocks.count)
          load(s, visit(s));
        cp_async_commit(); // always commit: wait_group counts groups
      }
      // The list entries (and fused ranks) of the next iteration are read a
      // step ahead: in the fused mode each step's acquire invalidates L1,
      // and a list read at its use would wait for L2 on every step.
      int e_cur = visit(0), e_load = visit(kStages - 1);
      int r_cur = 0;
      if constexpr (kFusedDq && Variant::kHasMask)
        r_cur = blocks.count > 0 ? ranks[0] : 0;
      for (int j = 0; j < blocks.count; ++j) {
        cp_async_wait<kStages - 2>();
        // Step j's tiles are in, and every warp is done with step j − 1: its
        // ring slot and the Pᵀ/dSᵀ tiles may be written (no barrier at the
        // end of a step).
        __syncthreads();
        if (j + kStages - 1 < blocks.count)
          load(j + kStages - 1, e_load);
        cp_async_commit();
        bool full;
        const int m = decode(e_cur, full);
        const int r = r_cur;
        e_cur = visit(j + 1);
        e_load = visit(j + kStages);
        if constexpr (kFusedDq && Variant::kHasMask)
          r_cur = j + 1 < blocks.count ? ranks[j + 1] : 0;
        const int slot = (j % kStages) * kStageBytes;
        const float *rows = reinterpret_cast<const float *>(
            ring + slot + QTile::kBytes + OTile::kBytes);
        // Fused dQ: this key block's place among those visiting m.
        int rank = 0;
        if constexpr (kFusedDq)
          rank = Variant::kHasMask ? r : Fused::unmasked_rank(a, n_block, m);
        if (full)
          step<true>(a, in, sp, s_k, s_v, s_ring + slot, s_p, s_ds, rows, m, b, h, bh, key0,
                     rank, turn, acc_dk, acc_dv, gacc);
        else
          step<false>(a, in, sp, s_k, s_v, s_ring + slot, s_p, s_ds, rows, m, b, h, bh, key0,
                      rank, turn, acc_dk, acc_dv, gacc);
      }
      // The last step's reads are done before the ring is refilled (the next
      // head) or reused (below), and its dQ adds precede the release.
      __syncthreads();
      if constexpr (kFusedDq)
        Fused::publish(a, turn);
      if constexpr (kNumGrads > 0) // in the idle first ring slot
        store_input_grad_partials<kNumGrads, kWarps>(
            a, gacc, false, reinterpret_cast<float *>(ring), n_block, bh,
            [] { __syncthreads(); });
    }
    cp_async_wait<0>();
    store(a, sp0, b, hk, key0, acc_dk, acc_dv);
  }

  /// dK and dV of this warp's keys and columns, rows past seq_kv not stored.
  __device__ static __forceinline__ void store(const BwdArgs &a, const SeqSpan &sp, int b,
                                               int hk, int key0,
                                               const float (&acc_dk)[KG][DT][4],
                                               const float (&acc_dv)[KG][VT][4]) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, tq = lane % 4;
    const int keyg = key0 + (warp % WKG) * KG * 16, col = warp / WKG;
    unsigned short *dk = static_cast<unsigned short *>(a.dk) + b * a.dk_sb + hk * a.dk_sh +
                         (long long)sp.kv0 * a.dk_ss;
    unsigned short *dv = static_cast<unsigned short *>(a.dv) + b * a.dv_sb + hk * a.dv_sh +
                         (long long)sp.kv0 * a.dv_ss;
#pragma unroll
    for (int i = 0; i < KG; ++i)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int key = keyg + i * 16 + g + 8 * half;
        if (key >= sp.seq_kv)
          continue;
#pragma unroll
        for (int t = 0; t < DT; ++t)
          *reinterpret_cast<u32 *>(dk + (long long)key * a.dk_ss + (col * DT + t) * 8 +
                                   2 * tq) =
              pack2<T>(acc_dk[i][t][2 * half], acc_dk[i][t][2 * half + 1]);
#pragma unroll
        for (int t = 0; t < VT; ++t)
          *reinterpret_cast<u32 *>(dv + (long long)key * a.dv_ss + (col * VT + t) * 8 +
                                   2 * tq) =
              pack2<T>(acc_dv[i][t][2 * half], acc_dv[i][t][2 * half + 1]);
      }
  }

  /// cp.async of the query rows' final rowscales and doosum; rows past the
  /// end are zero-filled (their elements are invalid anyway).
  __device__ static __forceinline__ void load_rows(const BwdArgs &a, const SeqSpan &sp,
                                                   u32 dst, int row0) {
#pragma unroll
    for (int i = threadIdx.x; i < kBlockM * kRowFloats; i += kThreads) {
      const int r = i % kBlockM, f = i / kBlockM;
      const bool ok = row0 + r < sp.seq_q;
      const long long qi = ok ? row0 + r : 0; // an address in bounds either way
      if (f < kF)
        cp_async_4(dst + (r * kF + f) * 4, a.finals + f * sp.plane + sp.rows + qi, ok);
      else
        cp_async_4(dst + (kBlockM * kF + r) * 4, a.doosum + sp.rows + qi, ok);
    }
  }

  /// Element (key, query rows qr and qr + 1) of a [key][query row] tile.
  __device__ static __forceinline__ void store_pair(u32 tile, int key, int qr, float lo,
                                                    float hi) {
    st_shared_32(tile + PTile::offset(key, qr / 8) + (qr % 8) * 2, pack2<T>(lo, hi));
  }

  /// One query block: recompute Sᵀ and dPᵀ for this warp's keys and rows, P
  /// and dS per element, then dV += Pᵀ·dO and dK += dSᵀ·Q; fused dQ: the
  /// previous step's \p turn published, and dS·K added to dQ's sum in turn
  /// \p rank, which becomes the pending \p turn.
  template <bool kFull>
  __device__ static __forceinline__ void
  step(const BwdArgs &a, const typename Variant::Inputs &in, const SeqSpan &sp, u32 s_k,
       u32 s_v,
       u32 s_stage, u32 s_p, u32 s_ds, const float *rows, int m, int b, int h, int bh,
       int key0, int rank, DqTurn &turn, float (&acc_dk)[KG][DT][4],
       float (&acc_dv)[KG][VT][4], float *gacc) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, tq = lane % 4;
    const int key_s = (warp % WK) * kKeysS, row_s = (warp / WK) * kRowsS;
    const u32 s_q = s_stage, s_do = s_stage + QTile::kBytes;
    int seen = 0;
    if constexpr (kFusedDq)
      seen = Fused::peek(a, bh, m, rank);
    float acc_s[KT][QT][4], acc_dp[KT][QT][4];
    zero_tiles(acc_s);
    zero_tiles(acc_dp);
    warp_mma_abt<T, KTile, QTile, KT, QT, kD / 16>(acc_s, s_k, key_s, s_q, row_s);
    warp_mma_abt<T, VTile, OTile, KT, QT, kDV / 16>(acc_dp, s_v, key_s, s_do, row_s);
#pragma unroll
    for (int i = 0; i < KT; ++i)
#pragma unroll
      for (int t = 0; t < QT; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + key_s + i * 16 + g + 8 * (e >> 1);
          const int qr = row_s + t * 8 + 2 * tq + (e & 1);
          const int qi = m * kBlockM + qr;
          bool valid = qi < sp.seq_q && key < sp.seq_kv;
          // The variant's q_idx: shifted by the bottom-right rule.
          const int qv = qi + sp.shift;
          if constexpr (!kFull)
            valid = valid && Variant::mask(in, b, h, qv, key);
          const float doo = kDoosum ? rows[kBlockM * kF + qr] : 0.f;
          float p;
          const float ds = bwd_element<Variant, true>(in, acc_s[i][t][e], acc_dp[i][t][e],
                                                      rows + qr * kF, doo, b, h, qv, key,
                                                      valid, p, gacc);
          acc_s[i][t][e] = p;
          acc_dp[i][t][e] = ds;
        }
    if constexpr (kSplit || kFusedDq) {
      // Pᵀ (split layout) and dSᵀ to shared memory, as this warp holds them.
#pragma unroll
      for (int i = 0; i < KT; ++i)
#pragma unroll
        for (int t = 0; t < QT; ++t)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int key = key_s + i * 16 + g + 8 * half, qr = row_s + t * 8 + 2 * tq;
            if constexpr (kSplit)
              store_pair(s_p, key, qr, acc_s[i][t][2 * half], acc_s[i][t][2 * half + 1]);
            store_pair(s_ds, key, qr, acc_dp[i][t][2 * half], acc_dp[i][t][2 * half + 1]);
          }
    }
    if constexpr (kSplit) {
      __syncthreads(); // Pᵀ and dSᵀ are complete; the previous step's adds precede
      if constexpr (kFusedDq)
        Fused::publish(a, turn);
      const int key_g = (warp % WKG) * KG * 16, col = warp / WKG;
      warp_mma_ss<T, PTile, OTile, KG, VT, kBlockM / 16>(acc_dv, s_p, key_g, s_do,
                                                         col * VT);
      warp_mma_ss<T, PTile, QTile, KG, DT, kBlockM / 16>(acc_dk, s_ds, key_g, s_q,
                                                         col * DT);
    } else {
      warp_mma_pb<T, OTile, KG, VT, kBlockM / 16>(acc_dv, acc_s, s_do, 0);
      warp_mma_pb<T, QTile, KG, DT, kBlockM / 16>(acc_dk, acc_dp, s_q, 0);
      if constexpr (kFusedDq) {
        __syncthreads(); // dSᵀ is complete; the previous step's adds precede
        Fused::publish(a, turn);
      }
    }
    if constexpr (kFusedDq) {
      // acc_s and acc_dp are dead: dQ's registers fit beside dK and dV.
      float acc_dq[Fused::MT][Fused::NT][4];
      Fused::product(acc_dq, s_ds, s_k);
      Fused::wait_turn(a, bh, m, rank, seen);
      __syncthreads(); // the turn is this CTA's
      Fused::add(a, acc_dq, bh, m, rank);
      turn = DqTurn{bh, m, rank, true};
    }
  }
};

} // namespace attnc

#endif
