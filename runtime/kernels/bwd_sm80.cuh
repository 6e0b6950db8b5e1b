// bwd_sm80: the portable backward skeleton (FlashAttention-2 style, with
// recompute). Scores and P are recomputed from q, k and the saved final
// rowscales; nothing of size Sq x Skv is stored. Two kernels, each owning
// one gradient so that every sum runs in a fixed order without atomics:
//
//  * BwdDkDvSm80, one CTA per (key block, batch · kv head): K and V stay in
//    shared memory, Q/dO tiles stream through a cp.async ring, warps split
//    the keys. Per query block: Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, then P and dS per
//    element, dV += Pᵀ·dO, dK += dSᵀ·Q. With grouped k/v heads the CTA walks
//    every query head of its group, so dK/dV sum over the group in order.
//  * BwdDqSm80, one CTA per (query block, batch · head): Q and dO stay,
//    K/V tiles stream, warps split the rows: S, dP, dS again, dQ += dS·K.
//
// Why a separate dQ kernel rather than adding dS·K from the dK/dV kernel:
// the sum over key blocks must have a fixed order. Float atomics do not;
// per-key-block fp32 partials reduced afterwards need Skv/BlockN copies of
// dQ (17 GB for B·S = 16k, H = 32, S = 4096, D = 128 at 64-key blocks).
// Recomputing S and dP in a dQ kernel costs two of the seven matmuls and
// keeps both kernels free of waits and of workspaces. The fused dQ mode
// (kFusedDq, bwd_sm80_fused_dq.cuh) is the other way: the dK/dV kernel adds
// dS·K into one fp32 workspace per query block in turn, ordered by
// semaphores (five matmuls, but waits, fences and the workspace's L2
// traffic); docs/performance.md has both timed.
//
// What the variant decides is a call into the generated Variant: score_mod,
// mask, forward (P from the modded score and the final rowscales),
// backward (dS w.r.t. the modded score from dP, P, finals and doosum),
// score_mod_grad (the chain rule back to the raw score q·k) and input_grads
// (∂score_mod/∂input for custom inputs that need gradients).
#ifndef ATTNC_BWD_SM80_CUH
#define ATTNC_BWD_SM80_CUH

#include "attnc/attention_args.cuh"
#include "attnc/block_mask.cuh"
#include "attnc/bwd_sm80_fused_dq.cuh"
#include "attnc/sm80_primitives.cuh"

namespace attnc {

/// The gradient of one score element: sets \p p to P, adds dS·∂mod/∂input
/// to \p gacc (when kInputGrads) and returns dS w.r.t. the raw score.
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
  const float s = Variant::score_mod(in, raw, b, h, q, k);
  const float p_any = Variant::forward(in, s, fin, b, h, q, k);
  p = valid ? p_any : 0.f;
  const float ds_any = Variant::backward(in, dp, p, fin, doosum, b, h, q, k);
  const float ds = valid ? ds_any : 0.f;
  if constexpr (kInputGrads && Variant::kNumInputGrads > 0) {
    float d[Variant::kNumInputGrads];
    Variant::input_grads(in, raw, b, h, q, k, d);
#pragma unroll
    for (int j = 0; j < Variant::kNumInputGrads; ++j)
      gacc[j] += valid ? ds * d[j] : 0.f;
  }
  const float grad = Variant::score_mod_grad(in, raw, b, h, q, k);
  return valid ? ds * grad : 0.f;
}

template <class Variant, class T, int kD, int kDV, int kBlockM, int kBlockN,
          int kWarps, int kStages, bool kFusedDq = false>
struct BwdDkDvSm80 {
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kKeysPerWarp = kBlockN / kWarps;
  static constexpr int KT = kKeysPerWarp / 16; // m16 key tiles per warp
  static constexpr int QT = kBlockM / 8;       // n8 query tiles of Sᵀ
  static constexpr int DT = kD / 8, VT = kDV / 8;
  static constexpr int kF = Variant::kNumFinals;
  static constexpr bool kDoosum = Variant::kBackwardUsesDoosum;
  static constexpr int kNumGrads = Variant::kNumInputGrads;
  static_assert(kKeysPerWarp % 16 == 0, "each warp owns whole m16 key tiles");
  static_assert(kBlockM % 16 == 0, "Pᵀ·dO consumes queries 16 at a time");
  static_assert(kD % 64 == 0 && kDV % 64 == 0,
                "head dims must be multiples of 64 (swizzle and k16 steps)");
  static_assert(kStages >= 2, "the Q/dO ring needs at least double buffering");
  static_assert(kNumGrads <= kMaxInputGrads, "too many input gradients");
  using KTile = SwizzledTile<kBlockN, kD>;
  using VTile = SwizzledTile<kBlockN, kDV>;
  using QTile = SwizzledTile<kBlockM, kD>;
  using OTile = SwizzledTile<kBlockM, kDV>;
  /// Per query row: the final rowscales ([row][kF]), then doosum.
  static constexpr int kRowFloats = kF + (kDoosum ? 1 : 0);
  static constexpr int kRowBytes = (kBlockM * kRowFloats * 4 + 127) / 128 * 128;
  static constexpr int kStageBytes = QTile::kBytes + OTile::kBytes + kRowBytes;
  /// The fused dQ mode (bwd_sm80_fused_dq.cuh) adds the dS tile.
  using Fused = BwdFusedDq<T, kD, kBlockM, kBlockN, kWarps>;
  static constexpr int kSmemBytes = KTile::kBytes + VTile::kBytes +
                                    kStages * kStageBytes +
                                    (kFusedDq ? Fused::kBytes : 0);
  static_assert(kNumGrads * kWarps * 4 <= kStageBytes,
                "the input-gradient reduction reuses a ring slot");

  __device__ static void run(const BwdArgs &a, const typename Variant::Inputs &in,
                             unsigned char *smem) {
    // Fused dQ: the highest key block first, so that a CTA only waits for
    // CTAs dispatched before it (bwd_sm80_fused_dq.cuh).
    const int n_block = kFusedDq ? a.kv_n_blocks - 1 - (int)blockIdx.x : (int)blockIdx.x;
    const int b = blockIdx.y / a.heads_kv, hk = blockIdx.y % a.heads_kv;
    const int group_size = a.heads / a.heads_kv;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, tq = lane % 4;
    const int key0 = n_block * kBlockN;
    const int warp_key0 = warp * kKeysPerWarp;

    const u32 s_k = smem_addr(smem);
    const u32 s_v = s_k + KTile::kBytes;
    const u32 s_ring = s_v + VTile::kBytes;
    const u32 s_ds = s_ring + kStages * kStageBytes;
    unsigned char *ring = smem + KTile::kBytes + VTile::kBytes;
    load_tile_async<KTile, kBlockN, kD, kThreads>(
        s_k, static_cast<const unsigned short *>(a.k) + b * a.k_sb + hk * a.k_sh,
        a.k_ss, key0, a.seq_kv);
    load_tile_async<VTile, kBlockN, kDV, kThreads>(
        s_v, static_cast<const unsigned short *>(a.v) + b * a.v_sb + hk * a.v_sh,
        a.v_ss, key0, a.seq_kv);
    cp_async_commit();

    float acc_dk[KT][DT][4], acc_dv[KT][VT][4];
    zero_tiles(acc_dk);
    zero_tiles(acc_dv);
    float gacc[kNumGrads > 0 ? kNumGrads : 1];
#pragma unroll
    for (int j = 0; j < (kNumGrads > 0 ? kNumGrads : 1); ++j)
      gacc[j] = 0.f;

    for (int hi = 0; hi < group_size; ++hi) {
      const int h = hk * group_size + hi;
      const int bh = b * a.heads + h;
      BlockVisits<Variant::kHasMask> blocks{a.kv_m_blocks, nullptr};
      const int *ranks = nullptr;
      if constexpr (Variant::kHasMask) {
        const long long line =
            (a.mask_per_head ? (long long)bh : 0LL) * a.kv_n_blocks + n_block;
        blocks.count = a.kv_count[line];
        blocks.list = a.kv_list + line * a.kv_m_blocks;
        if constexpr (kFusedDq)
          ranks = a.kv_rank + line * a.kv_m_blocks;
      }
      const unsigned short *q =
          static_cast<const unsigned short *>(a.q) + b * a.q_sb + h * a.q_sh;
      const unsigned short *dout =
          static_cast<const unsigned short *>(a.dout) + b * a.do_sb + h * a.do_sh;
      auto load = [&](int j, int e) { // e: entry j of the list
        bool full;
        const int row0 = blocks.decode(e, full) * kBlockM;
        const u32 s = s_ring + (j % kStages) * kStageBytes;
        load_tile_async<QTile, kBlockM, kD, kThreads>(s, q, a.q_ss, row0, a.seq_q);
        load_tile_async<OTile, kBlockM, kDV, kThreads>(s + QTile::kBytes, dout,
                                                       a.do_ss, row0, a.seq_q);
        load_rows(a, s + QTile::kBytes + OTile::kBytes, bh, row0);
      };
#pragma unroll
      for (int s = 0; s < kStages - 1; ++s) {
        if (s < blocks.count)
          load(s, blocks.entry(s));
        cp_async_commit(); // always commit: wait_group counts groups
      }
      // The list entries (and fused ranks) of the next iteration are read a
      // step ahead: in the fused mode each step's acquire invalidates L1,
      // and a list read at its use would wait for L2 on every step.
      int e_cur = blocks.entry(0), e_load = blocks.entry(kStages - 1);
      int r_cur = 0;
      if constexpr (kFusedDq && Variant::kHasMask)
        r_cur = blocks.count > 0 ? ranks[0] : 0;
      for (int j = 0; j < blocks.count; ++j) {
        if (j + kStages - 1 < blocks.count)
          load(j + kStages - 1, e_load);
        cp_async_commit();
        cp_async_wait<kStages - 1>();
        __syncthreads();
        bool full;
        const int m = blocks.decode(e_cur, full);
        const int r = r_cur;
        e_cur = blocks.entry(j + 1);
        e_load = blocks.entry(j + kStages);
        if constexpr (kFusedDq && Variant::kHasMask)
          r_cur = j + 1 < blocks.count ? ranks[j + 1] : 0;
        const int slot = (j % kStages) * kStageBytes;
        const float *rows = reinterpret_cast<const float *>(
            ring + slot + QTile::kBytes + OTile::kBytes);
        // Fused dQ: this key block's place among those visiting m.
        int rank = 0;
        bool last = true;
        if constexpr (kFusedDq) {
          if constexpr (Variant::kHasMask) {
            rank = r & 0x3fffffff;
            last = (r >> 30) & 1;
          } else {
            rank = a.kv_n_blocks - 1 - n_block;
            last = n_block == 0;
          }
        }
        if (full)
          step<true>(a, in, s_k, s_v, s_ring + slot, s_ds, rows, m, b, h, bh,
                     key0 + warp_key0, warp_key0, g, tq, rank, last, acc_dk, acc_dv,
                     gacc);
        else
          step<false>(a, in, s_k, s_v, s_ring + slot, s_ds, rows, m, b, h, bh,
                      key0 + warp_key0, warp_key0, g, tq, rank, last, acc_dk, acc_dv,
                      gacc);
        __syncthreads(); // the ring slot (and the dS tile) are refilled next
        if constexpr (kFusedDq)
          Fused::publish(a, bh, m, rank, last);
      }
      if constexpr (kNumGrads > 0) {
        // One partial per (input, key block, batch·head): warp sums, then
        // the warps' sums in warp order, in the idle first ring slot.
        float *red = reinterpret_cast<float *>(ring);
#pragma unroll
        for (int j = 0; j < kNumGrads; ++j) {
          const float x = warp_sum(gacc[j]);
          gacc[j] = 0.f;
          if (lane == 0)
            red[j * kWarps + warp] = x;
        }
        __syncthreads();
        if (threadIdx.x < kNumGrads) {
          float sum = 0.f;
          for (int w = 0; w < kWarps; ++w)
            sum += red[threadIdx.x * kWarps + w];
          a.grad_partial[((long long)threadIdx.x * a.kv_n_blocks + n_block) *
                             ((long long)a.batch * a.heads) +
                         bh] = sum;
        }
        __syncthreads();
      }
    }
    cp_async_wait<0>();
    if constexpr (kFusedDq && Variant::kHasMask)
      if (blockIdx.x == 0) // never waits: the first of its row
        Fused::zero_unvisited(a, b, hk);

    unsigned short *dk = static_cast<unsigned short *>(a.dk) + b * a.dk_sb + hk * a.dk_sh;
    unsigned short *dv = static_cast<unsigned short *>(a.dv) + b * a.dv_sb + hk * a.dv_sh;
#pragma unroll
    for (int i = 0; i < KT; ++i)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int key = key0 + warp_key0 + i * 16 + g + 8 * half;
        if (key >= a.seq_kv)
          continue;
#pragma unroll
        for (int t = 0; t < DT; ++t)
          *reinterpret_cast<u32 *>(dk + (long long)key * a.dk_ss + t * 8 + 2 * tq) =
              pack2<T>(acc_dk[i][t][2 * half], acc_dk[i][t][2 * half + 1]);
#pragma unroll
        for (int t = 0; t < VT; ++t)
          *reinterpret_cast<u32 *>(dv + (long long)key * a.dv_ss + t * 8 + 2 * tq) =
              pack2<T>(acc_dv[i][t][2 * half], acc_dv[i][t][2 * half + 1]);
      }
  }

  /// cp.async of the query rows' final rowscales and doosum; rows past the
  /// end are zero-filled (their elements are invalid anyway).
  __device__ static __forceinline__ void load_rows(const BwdArgs &a, u32 dst, int bh,
                                                   int row0) {
    const long long plane = (long long)a.batch * a.heads * a.seq_q;
#pragma unroll
    for (int i = threadIdx.x; i < kBlockM * kRowFloats; i += kThreads) {
      const int r = i % kBlockM, f = i / kBlockM;
      const bool ok = row0 + r < a.seq_q;
      const long long qi = ok ? row0 + r : 0; // an address in bounds either way
      if (f < kF)
        cp_async_4(dst + (r * kF + f) * 4,
                   a.finals + f * plane + (long long)bh * a.seq_q + qi, ok);
      else
        cp_async_4(dst + (kBlockM * kF + r) * 4,
                   a.doosum + (long long)bh * a.seq_q + qi, ok);
    }
  }

  /// One query block: recompute Sᵀ and dPᵀ for this warp's keys, P and dS
  /// per element, then dV += Pᵀ·dO and dK += dSᵀ·Q; fused dQ: dS to shared
  /// memory and dS·K added to dQ's sum in turn \p rank.
  template <bool kFull>
  __device__ static __forceinline__ void
  step(const BwdArgs &a, const typename Variant::Inputs &in, u32 s_k, u32 s_v,
       u32 s_stage, u32 s_ds, const float *rows, int m, int b, int h, int bh,
       int warp_key, int warp_key0, int g, int tq, int rank, bool last,
       float (&acc_dk)[KT][DT][4], float (&acc_dv)[KT][VT][4], float *gacc) {
    const u32 s_q = s_stage, s_do = s_stage + QTile::kBytes;
    int seen = 0;
    if constexpr (kFusedDq)
      seen = Fused::peek(a, bh, m, rank);
    float acc_s[KT][QT][4], acc_dp[KT][QT][4];
    zero_tiles(acc_s);
    zero_tiles(acc_dp);
    warp_mma_abt<T, KTile, QTile, KT, QT, kD / 16>(acc_s, s_k, warp_key0, s_q, 0);
    warp_mma_abt<T, VTile, OTile, KT, QT, kDV / 16>(acc_dp, s_v, warp_key0, s_do, 0);
#pragma unroll
    for (int i = 0; i < KT; ++i)
#pragma unroll
      for (int t = 0; t < QT; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = warp_key + i * 16 + g + 8 * (e >> 1);
          const int qr = t * 8 + 2 * tq + (e & 1);
          const int qi = m * kBlockM + qr;
          bool valid = qi < a.seq_q && key < a.seq_kv;
          if constexpr (!kFull)
            valid = valid && Variant::mask(in, b, h, qi, key);
          const float doo = kDoosum ? rows[kBlockM * kF + qr] : 0.f;
          float p;
          const float ds = bwd_element<Variant, true>(in, acc_s[i][t][e], acc_dp[i][t][e],
                                                      rows + qr * kF, doo, b, h, qi, key,
                                                      valid, p, gacc);
          acc_s[i][t][e] = p;
          acc_dp[i][t][e] = ds;
        }
    if constexpr (kFusedDq) {
#pragma unroll
      for (int i = 0; i < KT; ++i)
#pragma unroll
        for (int t = 0; t < QT; ++t)
#pragma unroll
          for (int half = 0; half < 2; ++half)
            Fused::store_ds(s_ds, t * 8 + 2 * tq, warp_key0 + i * 16 + g + 8 * half,
                            acc_dp[i][t][2 * half], acc_dp[i][t][2 * half + 1]);
    }
    warp_mma_pb<T, OTile, KT, VT, kBlockM / 16>(acc_dv, acc_s, s_do, 0);
    warp_mma_pb<T, QTile, KT, DT, kBlockM / 16>(acc_dk, acc_dp, s_q, 0);
    // acc_s and acc_dp are dead: dQ's registers fit beside dK and dV.
    if constexpr (kFusedDq)
      Fused::accumulate(a, s_ds, s_k, b, h, bh, m, rank, last, seen);
  }
};

template <class Variant, class T, int kD, int kDV, int kBlockM, int kBlockN,
          int kWarps, int kStages>
struct BwdDqSm80 {
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowsPerWarp = kBlockM / kWarps;
  static constexpr int MT = kRowsPerWarp / 16; // m16 row tiles per warp
  static constexpr int NT = kBlockN / 8;       // n8 key tiles of S
  static constexpr int DT = kD / 8;
  static constexpr int kF = Variant::kNumFinals;
  static constexpr bool kDoosum = Variant::kBackwardUsesDoosum;
  static_assert(kRowsPerWarp % 16 == 0, "each warp owns whole m16 row tiles");
  static_assert(kBlockN % 16 == 0, "dS·K consumes keys 16 at a time");
  static_assert(kD % 64 == 0 && kDV % 64 == 0,
                "head dims must be multiples of 64 (swizzle and k16 steps)");
  static_assert(kStages >= 2, "the K/V ring needs at least double buffering");
  using QTile = SwizzledTile<kBlockM, kD>;
  using OTile = SwizzledTile<kBlockM, kDV>;
  using KTile = SwizzledTile<kBlockN, kD>;
  using VTile = SwizzledTile<kBlockN, kDV>;
  static constexpr int kStageBytes = KTile::kBytes + VTile::kBytes;
  static constexpr int kSmemBytes = QTile::kBytes + OTile::kBytes + kStages * kStageBytes;

  __device__ static void run(const BwdArgs &a, const typename Variant::Inputs &in,
                             unsigned char *smem) {
    const int m_block = blockIdx.x;
    const int bh = blockIdx.y;
    const int b = bh / a.heads, h = bh % a.heads;
    const int hk = h / (a.heads / a.heads_kv);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, tq = lane % 4;
    const int row_base = m_block * kBlockM;
    const int warp_row0 = warp * kRowsPerWarp;

    BlockVisits<Variant::kHasMask> blocks{(a.seq_kv + kBlockN - 1) / kBlockN, nullptr};
    if constexpr (Variant::kHasMask) {
      const long long line =
          (a.mask_per_head ? (long long)bh : 0LL) * a.q_m_blocks + m_block;
      blocks.count = a.q_count[line];
      blocks.list = a.q_list + line * a.q_n_blocks;
    }

    const u32 s_q = smem_addr(smem);
    const u32 s_do = s_q + QTile::kBytes;
    const u32 s_ring = s_do + OTile::kBytes;
    load_tile_async<QTile, kBlockM, kD, kThreads>(
        s_q, static_cast<const unsigned short *>(a.q) + b * a.q_sb + h * a.q_sh, a.q_ss,
        row_base, a.seq_q);
    load_tile_async<OTile, kBlockM, kDV, kThreads>(
        s_do, static_cast<const unsigned short *>(a.dout) + b * a.do_sb + h * a.do_sh,
        a.do_ss, row_base, a.seq_q);
    const unsigned short *k =
        static_cast<const unsigned short *>(a.k) + b * a.k_sb + hk * a.k_sh;
    const unsigned short *v =
        static_cast<const unsigned short *>(a.v) + b * a.v_sb + hk * a.v_sh;
    auto load = [&](int j) {
      bool full;
      const int key0 = blocks.at(j, full) * kBlockN;
      const u32 s = s_ring + (j % kStages) * kStageBytes;
      load_tile_async<KTile, kBlockN, kD, kThreads>(s, k, a.k_ss, key0, a.seq_kv);
      load_tile_async<VTile, kBlockN, kDV, kThreads>(s + KTile::kBytes, v, a.v_ss, key0,
                                                     a.seq_kv);
    };
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < blocks.count)
        load(s);
      cp_async_commit();
    }

    // This thread's rows: final rowscales and doosum in registers.
    float fin[2 * MT][kF > 0 ? kF : 1], doo[2 * MT];
    const long long plane = (long long)a.batch * a.heads * a.seq_q;
#pragma unroll
    for (int r = 0; r < 2 * MT; ++r) {
      const int qi = row_base + warp_row0 + (r >> 1) * 16 + g + (r & 1) * 8;
      const bool ok = qi < a.seq_q;
#pragma unroll
      for (int f = 0; f < kF; ++f)
        fin[r][f] = ok ? a.finals[f * plane + (long long)bh * a.seq_q + qi] : 0.f;
      doo[r] = kDoosum && ok ? a.doosum[(long long)bh * a.seq_q + qi] : 0.f;
    }

    float acc_dq[MT][DT][4];
    zero_tiles(acc_dq);
    for (int j = 0; j < blocks.count; ++j) {
      if (j + kStages - 1 < blocks.count)
        load(j + kStages - 1);
      cp_async_commit();
      cp_async_wait<kStages - 1>();
      __syncthreads();
      bool full;
      const int n = blocks.at(j, full);
      const u32 s_k = s_ring + (j % kStages) * kStageBytes;
      if (full)
        step<true>(a, in, s_q, s_do, s_k, n, b, h, row_base + warp_row0, warp_row0, g,
                   tq, fin, doo, acc_dq);
      else
        step<false>(a, in, s_q, s_do, s_k, n, b, h, row_base + warp_row0, warp_row0, g,
                    tq, fin, doo, acc_dq);
      __syncthreads();
    }
    cp_async_wait<0>();

    unsigned short *dq = static_cast<unsigned short *>(a.dq) + b * a.dq_sb + h * a.dq_sh;
#pragma unroll
    for (int r = 0; r < 2 * MT; ++r) {
      const int qi = row_base + warp_row0 + (r >> 1) * 16 + g + (r & 1) * 8;
      if (qi >= a.seq_q)
        continue;
#pragma unroll
      for (int t = 0; t < DT; ++t)
        *reinterpret_cast<u32 *>(dq + (long long)qi * a.dq_ss + t * 8 + 2 * tq) =
            pack2<T>(acc_dq[r >> 1][t][(r & 1) * 2], acc_dq[r >> 1][t][(r & 1) * 2 + 1]);
    }
  }

  /// One key block: recompute S and dP for this warp's rows, dS per
  /// element, then dQ += dS·K.
  template <bool kFull>
  __device__ static __forceinline__ void
  step(const BwdArgs &a, const typename Variant::Inputs &in, u32 s_q, u32 s_do, u32 s_k,
       int n, int b, int h, int warp_row, int warp_row0, int g, int tq,
       const float (&fin)[2 * MT][kF > 0 ? kF : 1], const float (&doo)[2 * MT],
       float (&acc_dq)[MT][DT][4]) {
    const u32 s_v = s_k + KTile::kBytes;
    float acc_s[MT][NT][4], acc_dp[MT][NT][4];
    zero_tiles(acc_s);
    zero_tiles(acc_dp);
    warp_mma_abt<T, QTile, KTile, MT, NT, kD / 16>(acc_s, s_q, warp_row0, s_k, 0);
    warp_mma_abt<T, OTile, VTile, MT, NT, kDV / 16>(acc_dp, s_do, warp_row0, s_v, 0);
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int t = 0; t < NT; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = i * 2 + (e >> 1);
          const int qi = warp_row + i * 16 + g + 8 * (e >> 1);
          const int key = n * kBlockN + t * 8 + 2 * tq + (e & 1);
          bool valid = qi < a.seq_q && key < a.seq_kv;
          if constexpr (!kFull)
            valid = valid && Variant::mask(in, b, h, qi, key);
          float p;
          acc_dp[i][t][e] = bwd_element<Variant, false>(in, acc_s[i][t][e], acc_dp[i][t][e],
                                                        fin[r], doo[r], b, h, qi, key, valid,
                                                        p, nullptr);
        }
    warp_mma_pb<T, KTile, MT, DT, kBlockN / 16>(acc_dq, acc_dp, s_k, 0);
  }
};

/// doosum = rowsum(dO ∘ O) in fp32, one warp per query row; grid
/// (ceil(seq_q / warps), batch·heads). Only launched when the variant's
/// backward reads doosum.
template <class T, int kDV> __device__ void bwd_doosum(const BwdArgs &a) {
  static_assert(kDV % 8 == 0 && kDV / 8 <= 32, "one 16-byte chunk per lane");
  const int warps = blockDim.x / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * warps + warp;
  const int bh = blockIdx.y, b = bh / a.heads, h = bh % a.heads;
  if (row >= a.seq_q)
    return;
  float sum = 0.f;
  if (lane < kDV / 8) {
    const unsigned short *o = static_cast<const unsigned short *>(a.o) + b * a.o_sb +
                              h * a.o_sh + (long long)row * a.o_ss + lane * 8;
    const unsigned short *d = static_cast<const unsigned short *>(a.dout) + b * a.do_sb +
                              h * a.do_sh + (long long)row * a.do_ss + lane * 8;
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
    a.doosum[(long long)bh * a.seq_q + row] = sum;
}

/// The custom-input gradients from the dK/dV kernel's partials, each output
/// element a sum in a fixed order (batch, head, key block); grid
/// (kNumInputGrads).
__device__ inline void bwd_reduce_input_grads(const BwdArgs &a) {
  const int j = blockIdx.x;
  const bool per_head = a.grad_shape[j] == 1;
  const int outs = per_head ? a.heads : 1;
  const long long bhs = (long long)a.batch * a.heads;
  const float *part = a.grad_partial + (long long)j * a.kv_n_blocks * bhs;
  for (int o = threadIdx.x; o < outs; o += blockDim.x) {
    float sum = 0.f;
    for (int b = 0; b < a.batch; ++b)
      for (int h = per_head ? o : 0; h < (per_head ? o + 1 : a.heads); ++h)
        for (int n = 0; n < a.kv_n_blocks; ++n)
          sum += part[(long long)n * bhs + (long long)b * a.heads + h];
    a.grad_out[j][o] = sum;
  }
}

} // namespace attnc

#endif
