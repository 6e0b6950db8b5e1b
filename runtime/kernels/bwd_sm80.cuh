// bwd_sm80: the portable backward skeleton (FlashAttention-2 style, with
// recompute). Scores and P are recomputed from q, k and the saved final
// rowscales; nothing of size Sq x Skv is stored. Two kernels, each owning
// one gradient so that every sum runs in a fixed order without atomics:
//
//  * BwdDkDvSm80 (bwd_sm80_dkdv.cuh), one CTA per (key block, batch · kv
//    head): K and V stay in shared memory, Q/dO tiles stream through a
//    cp.async ring. Per query block: Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, then P and dS
//    per element, dV += Pᵀ·dO, dK += dSᵀ·Q.
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
// score_mod_grad (the chain rule back to the raw score q·k) and
// add_input_grads (dS·∂score_mod/∂input for custom inputs that need
// gradients).
#ifndef ATTNC_BWD_SM80_CUH
#define ATTNC_BWD_SM80_CUH

#include "attnc/attention_args.cuh"
#include "attnc/block_mask.cuh"
#include "attnc/bwd_sm80_dkdv.cuh"
#include "attnc/sm80_primitives.cuh"
#include "attnc/varlen.cuh"

namespace attnc {

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

  __device__ static void run(const BwdArgs &a, const typename Variant::Inputs &call_in,
                             unsigned char *smem) {
    const int m_block = blockIdx.x;
    const int bh = blockIdx.y;
    const int b = bh / a.heads, h = bh % a.heads;
    const int hk = h / (a.heads / a.heads_kv);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, tq = lane % 4;
    const int row_base = m_block * kBlockM;
    const int warp_row0 = warp * kRowsPerWarp;
    // This CTA's sequence (varlen.cuh): in a packed call, query blocks past
    // its end have nothing to do, and a masked variant visits a range of key
    // blocks (no lists), masked per element unless proven full.
    const SeqSpan sp = seq_span(a.cu_seqlens_q, a.cu_seqlens_kv, a.total_q, a.batch,
                                a.heads, a.seq_q, a.seq_kv, b, h);
    const auto &in = sequence_inputs(call_in, sp);
    if (row_base >= sp.seq_q)
      return;

    BlockVisits<Variant::kHasMask> blocks{(sp.seq_kv + kBlockN - 1) / kBlockN, nullptr};
    int first = 0;
    if constexpr (Variant::kHasMask) {
      if (sp.packed) {
        const int2 range = key_block_range<Variant, kBlockM, kBlockN>(in, b, h, m_block, sp);
        first = range.x;
        blocks.count = range.y - range.x;
      } else {
        const long long line =
            mask_group(a.mask_grouping, bh, a.heads) * a.q_m_blocks + m_block;
        blocks.count = a.q_count[line];
        blocks.list = a.q_list + line * a.q_n_blocks;
      }
    }
    auto block_at = [&](int j, bool &full) {
      if (Variant::kHasMask && !blocks.list) {
        full = tile_full<Variant, kBlockM, kBlockN>(in, b, h, row_base,
                                                    (first + j) * kBlockN, sp);
        return first + j;
      }
      return blocks.at(j, full);
    };

    const u32 s_q = smem_addr(smem);
    const u32 s_do = s_q + QTile::kBytes;
    const u32 s_ring = s_do + OTile::kBytes;
    load_tile_async<QTile, kBlockM, kD, kThreads>(
        s_q,
        static_cast<const unsigned short *>(a.q) + b * a.q_sb + h * a.q_sh +
            (long long)sp.q0 * a.q_ss,
        a.q_ss, row_base, sp.seq_q);
    load_tile_async<OTile, kBlockM, kDV, kThreads>(
        s_do,
        static_cast<const unsigned short *>(a.dout) + b * a.do_sb + h * a.do_sh +
            (long long)sp.q0 * a.do_ss,
        a.do_ss, row_base, sp.seq_q);
    const unsigned short *k = static_cast<const unsigned short *>(a.k) + b * a.k_sb +
                              hk * a.k_sh + (long long)sp.kv0 * a.k_ss;
    const unsigned short *v = static_cast<const unsigned short *>(a.v) + b * a.v_sb +
                              hk * a.v_sh + (long long)sp.kv0 * a.v_ss;
    auto load = [&](int j) {
      bool full;
      const int key0 = block_at(j, full) * kBlockN;
      const u32 s = s_ring + (j % kStages) * kStageBytes;
      load_tile_async<KTile, kBlockN, kD, kThreads>(s, k, a.k_ss, key0, sp.seq_kv);
      load_tile_async<VTile, kBlockN, kDV, kThreads>(s + KTile::kBytes, v, a.v_ss, key0,
                                                     sp.seq_kv);
    };
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < blocks.count)
        load(s);
      cp_async_commit();
    }

    // This thread's rows: final rowscales and doosum in registers.
    float fin[2 * MT][kF > 0 ? kF : 1], doo[2 * MT];
#pragma unroll
    for (int r = 0; r < 2 * MT; ++r) {
      const int qi = row_base + warp_row0 + (r >> 1) * 16 + g + (r & 1) * 8;
      const bool ok = qi < sp.seq_q;
#pragma unroll
      for (int f = 0; f < kF; ++f)
        fin[r][f] = ok ? a.finals[f * sp.plane + sp.rows + qi] : 0.f;
      doo[r] = kDoosum && ok ? a.doosum[sp.rows + qi] : 0.f;
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
      const int n = block_at(j, full);
      const u32 s_k = s_ring + (j % kStages) * kStageBytes;
      if (full)
        step<true>(in, sp, s_q, s_do, s_k, n, b, h, row_base + warp_row0, warp_row0, g,
                   tq, fin, doo, acc_dq);
      else
        step<false>(in, sp, s_q, s_do, s_k, n, b, h, row_base + warp_row0, warp_row0, g,
                    tq, fin, doo, acc_dq);
      __syncthreads();
    }
    cp_async_wait<0>();

    unsigned short *dq = static_cast<unsigned short *>(a.dq) + b * a.dq_sb + h * a.dq_sh +
                         (long long)sp.q0 * a.dq_ss;
#pragma unroll
    for (int r = 0; r < 2 * MT; ++r) {
      const int qi = row_base + warp_row0 + (r >> 1) * 16 + g + (r & 1) * 8;
      if (qi >= sp.seq_q)
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
  step(const typename Variant::Inputs &in, const SeqSpan &sp, u32 s_q, u32 s_do, u32 s_k,
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
          bool valid = qi < sp.seq_q && key < sp.seq_kv;
          // The variant's q_idx: shifted by the bottom-right rule.
          const int qv = qi + sp.shift;
          if constexpr (!kFull)
            valid = valid && Variant::mask(in, b, h, qv, key);
          float p;
          acc_dp[i][t][e] = bwd_element<Variant, false>(in, acc_s[i][t][e], acc_dp[i][t][e],
                                                        fin[r], doo[r], b, h, qv, key, valid,
                                                        p, nullptr);
        }
    warp_mma_pb<T, KTile, MT, DT, kBlockN / 16>(acc_dq, acc_dp, s_k, 0);
  }
};

/// doosum = rowsum(dO ∘ O) in fp32, one warp per query row; grid
/// (ceil(seq_q / warps), batch·heads); [heads][total_q] in a packed call. Only launched when the variant's
/// backward reads doosum.
template <class T, int kDV> __device__ void bwd_doosum(const BwdArgs &a) {
  static_assert(kDV % 8 == 0 && kDV / 8 <= 32, "one 16-byte chunk per lane");
  const int warps = blockDim.x / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * warps + warp;
  const int bh = blockIdx.y, b = bh / a.heads, h = bh % a.heads;
  const SeqSpan sp = seq_span(a.cu_seqlens_q, a.cu_seqlens_kv, a.total_q, a.batch, a.heads,
                              a.seq_q, a.seq_kv, b, h);
  if (row >= sp.seq_q)
    return;
  float sum = 0.f;
  if (lane < kDV / 8) {
    const long long t = (long long)sp.q0 + row; // the row's token
    const unsigned short *o = static_cast<const unsigned short *>(a.o) + b * a.o_sb +
                              h * a.o_sh + t * a.o_ss + lane * 8;
    const unsigned short *d = static_cast<const unsigned short *>(a.dout) + b * a.do_sb +
                              h * a.do_sh + t * a.do_ss + lane * 8;
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
    a.doosum[sp.rows + row] = sum;
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
