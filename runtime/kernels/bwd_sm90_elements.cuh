// bwd_sm90's element work: P and dS of the Sᵀ/dPᵀ tiles a thread holds
// (the generated Variant's functions, as bwd_element calls them), packed
// into the A fragments of the dV/dK wgmma; in one pass, or in two around
// the GEMMs still running (the warp-specialised kernel's kTwoPass).
#ifndef ATTNC_BWD_SM90_ELEMENTS_CUH
#define ATTNC_BWD_SM90_ELEMENTS_CUH

#include "attnc/attention_args.cuh"
#include "attnc/bwd_sm80_dkdv.cuh"
#include "attnc/sm90_primitives.cuh"
#include "attnc/sm90_wgmma.cuh"

namespace attnc {

/// A warpgroup of 64 keys against kBlockM query rows (QT n8 tiles): the
/// CTA's keys 64·wg on, or its first 64 for every warpgroup when
/// kSameKeys (bwd_sm90's column split).
template <class Variant, class T, int kDV, int kBlockM, bool kSameKeys = false>
struct BwdSm90Elements {
  static constexpr int QT = kBlockM / 8, VT = kDV / 8;
  static constexpr int kF = Variant::kNumFinals;
  static constexpr bool kDoosum = Variant::kBackwardUsesDoosum;
  static constexpr int kNumGrads = Variant::kNumInputGrads;

  /// The element (t, e) of Sᵀ/dPᵀ a thread holds: key row 16·warp + g
  /// (+8 for e ≥ 2) of its warpgroup's 64, query column 8t + 2tq (+1 for
  /// odd e); whether it is in bounds and kept by the mask. \p kInside:
  /// the whole tile is known to be in bounds (no comparison).
  template <bool kFull, bool kInside = false>
  __device__ static __forceinline__ bool element_at(const BwdArgs &a,
                                                    const typename Variant::Inputs &in,
                                                    int m, int b, int h, int key0, int t,
                                                    int e, int &key, int &qr, int &qi) {
    const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4;
    const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    key = key0 + (kSameKeys ? 0 : wg * 64) + warp * 16 + g + 8 * (e >> 1);
    qr = t * 8 + 2 * tq + (e & 1);
    qi = m * kBlockM + qr;
    bool valid = kInside || (qi < a.seq_q && key < a.seq_kv);
    if constexpr (!kFull)
      valid = valid && Variant::mask(in, b, h, qi, key);
    return valid;
  }

  /// Whether the mask's inputs hold every query of block \p m and every
  /// key from \p key0 on that the CTA's tile reads (\p keys of them), so
  /// that elements<false, true> may read them unclamped (mask_in_tile).
  /// The host's shape checks make it true for any tile inside the
  /// sequence; asked per tile, it keeps the reads in bounds for any layout
  /// the Inputs are given.
  __device__ static __forceinline__ bool tile_covered(const typename Variant::Inputs &in,
                                                      int m, int key0, int keys) {
    return in.keys_cover((long long)key0 + keys) &&
           in.rows_cover((long long)m * kBlockM, kBlockM);
  }

  /// P and dS of every element (bwd_element), in place of Sᵀ and dPᵀ;
  /// \p kInside as element_at's (with kFull, every element is valid and
  /// bwd_element's selects fold away). A partial tile with kInside must be
  /// tile_covered: its mask reads the key-side inputs at the thread's two
  /// keys' constant offsets from its first key (keys_at) and the query-side
  /// ones at its 2·QT queries' offsets from its first query (rows_at), one
  /// load each at an immediate offset instead of a clamp and a 64-bit
  /// address per query (mask_in_tile).
  template <bool kFull, bool kInside = false>
  __device__ static __forceinline__ void elements(const BwdArgs &a,
                                                  const typename Variant::Inputs &in,
                                                  const float *rows, int m, int b, int h,
                                                  int key0, float (&acc_s)[QT][4],
                                                  float (&acc_dp)[QT][4], float *gacc) {
    constexpr bool kTileReads = !kFull && kInside;
    const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4;
    const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    // The thread's first key and first query (element_at's with t = e = 0).
    const typename Variant::Inputs kin =
        kTileReads ? in.keys_at(b, h, key0 + (kSameKeys ? 0 : wg * 64) + warp * 16 + g) : in;
    const typename Variant::Inputs qin = kTileReads ? in.rows_at(b, h, m * kBlockM + 2 * tq) : in;
    (void)kin;
    (void)qin;
    InputGradLanes<kNumGrads, 4> lanes; // one a register slot e of the fragment
#pragma unroll
    for (int t = 0; t < QT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int key, qr, qi;
        bool valid = element_at<kFull || kTileReads, kInside>(a, in, m, b, h, key0, t, e,
                                                              key, qr, qi);
        if constexpr (kTileReads)
          valid = Variant::mask_in_tile(kin, qin, b, h, qi, key, 8 * t + (e & 1),
                                        8 * (e >> 1));
        const float doo = kDoosum ? rows[kBlockM * kF + qr] : 0.f;
        float p;
        const float ds = bwd_element<Variant, true>(in, acc_s[t][e], acc_dp[t][e],
                                                    rows + qr * kF, doo, b, h, qi, key,
                                                    valid, p, lanes.lane(e));
        acc_s[t][e] = p;
        acc_dp[t][e] = ds;
      }
    if constexpr (kNumGrads > 0)
      lanes.flush(gacc);
  }

  /// Pᵀ or dSᵀ as the A operands of m64nDk16: two n8 query tiles a k16
  /// step, in the m16n8k16 A-fragment layout each warp's rows need.
  __device__ static __forceinline__ void pack(const float (&x)[QT][4],
                                              u32 (&f)[kBlockM / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk) {
      f[kk][0] = pack2<T>(x[2 * kk][0], x[2 * kk][1]);
      f[kk][1] = pack2<T>(x[2 * kk][2], x[2 * kk][3]);
      f[kk][2] = pack2<T>(x[2 * kk + 1][0], x[2 * kk + 1][1]);
      f[kk][3] = pack2<T>(x[2 * kk + 1][2], x[2 * kk + 1][3]);
    }
  }

  /// Warp-specialised (kTwoPass): the element work in two passes around
  /// the GEMMs still running. With Sᵀ in (dPᵀ's wgmma group may be pending), P of
  /// every element; then dV += Pᵀ·dO is issued, and with dPᵀ in, dS is
  /// computed while it runs. The same operations as bwd_element, in the
  /// same order per element: the same bits.
  template <bool kFull>
  __device__ static __forceinline__ void
  elements_pipelined(const BwdArgs &a, const typename Variant::Inputs &in, const float *rows,
                     int m, int b, int h, int key0, float (&acc_s)[QT][4],
                     float (&acc_dp)[QT][4], u32 (&pf)[kBlockM / 16][4],
                     u32 (&df)[kBlockM / 16][4], u32 s_do, float (&acc_dv)[VT][4],
                     float *gacc) {
    float raw[QT][4]; // the scores, for score_mod_grad and add_input_grads
    u32 valid_bits = 0;
    static_assert(QT * 4 <= 32, "one validity bit an element");
#pragma unroll
    for (int t = 0; t < QT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int key, qr, qi;
        const bool valid = element_at<kFull>(a, in, m, b, h, key0, t, e, key, qr, qi);
        valid_bits |= valid ? 1u << (t * 4 + e) : 0u;
        raw[t][e] = acc_s[t][e];
        const float p_any = recompute_p<Variant>(in, raw[t][e], rows + qr * kF, b, h, qi, key);
        acc_s[t][e] = valid ? p_any : 0.f;
      }
    pack(acc_s, pf);
    const u64 o_desc_t = wgmma_desc_sw128(s_do, kBlockM * 128, 1024);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockM / 16; ++kk)
      Wgmma<kDV>::template rs<T>(acc_dv, pf[kk], o_desc_t + kk * (2048 >> 4), 1);
    wgmma_commit();
    wgmma_wait<1>(); // dPᵀ's group is in; dV's may run on
    fence_regs(acc_dp);
    InputGradLanes<kNumGrads, 4> lanes; // one a register slot e of the fragment
#pragma unroll
    for (int t = 0; t < QT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int key, qr, qi;
        element_at<true>(a, in, m, b, h, key0, t, e, key, qr, qi);
        const bool valid = (valid_bits >> (t * 4 + e)) & 1u;
        const float doo = kDoosum ? rows[kBlockM * kF + qr] : 0.f;
        const float p = acc_s[t][e];
        const float ds_any =
            Variant::backward(in, acc_dp[t][e], p, rows + qr * kF, doo, b, h, qi, key);
        const float ds = valid ? ds_any : 0.f;
        if constexpr (kNumGrads > 0)
          Variant::add_input_grads(in, raw[t][e], ds, valid, b, h, qi, key, lanes.lane(e));
        const float grad = Variant::score_mod_grad(in, raw[t][e], b, h, qi, key);
        acc_dp[t][e] = valid ? ds * grad : 0.f;
      }
    if constexpr (kNumGrads > 0)
      lanes.flush(gacc);
    pack(acc_dp, df);
  }
};

} // namespace attnc

#endif
