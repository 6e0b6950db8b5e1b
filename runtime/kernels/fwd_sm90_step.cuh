// fwd_sm90's consumer GEMM steps, its step (score_mod, mask and online_fwd
// over one block of S) and its epilogue, defined out of the FwdSm90 struct so that each
// file stays readable; included by fwd_sm90.cuh only, inside its
// ATTNC_FWD_SM90_TEMPLATE / ATTNC_FWD_SM90 macros.
#ifndef ATTNC_FWD_SM90_STEP_CUH
#define ATTNC_FWD_SM90_STEP_CUH

namespace attnc {

ATTNC_FWD_SM90_TEMPLATE
__device__ __forceinline__ void ATTNC_FWD_SM90::issue_s(float (&acc_s)[NT][4], u64 q_desc,
                                                        u64 k_desc0, int stage) {
  const u64 kd = k_desc0 + ((stage * kStageBytes) >> 4);
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const u64 qoff = (kk / 4) * (kQSlab >> 4) + (kk % 4) * 2;
    const u64 koff = (kk / 4) * (kKVSlab >> 4) + (kk % 4) * 2;
    Wgmma<kBlockN>::template ss<T>(acc_s, q_desc + qoff, kd + koff, kk > 0);
  }
  wgmma_commit();
}

ATTNC_FWD_SM90_TEMPLATE
__device__ __forceinline__ void ATTNC_FWD_SM90::issue_pv(float (&acc_o)[VT][4],
                                                         u32 (&pf)[kBlockN / 16][4],
                                                         u64 v_desc0, int stage) {
  const u64 vd = v_desc0 + ((stage * kStageBytes) >> 4);
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk)
    Wgmma<kDV>::template rs<T>(acc_o, pf[kk], vd + kk * (2048 >> 4), 1);
  wgmma_commit();
}

ATTNC_FWD_SM90_TEMPLATE
__device__ __forceinline__ void
ATTNC_FWD_SM90::rescale_and_pack(float (&acc_o)[VT][4], const float (&acc_s)[NT][4],
                                 u32 (&pf)[kBlockN / 16][4], const float (&o_scale)[2]) {
  if constexpr (!Variant::kOScaleIsOne) {
#pragma unroll
    for (int t = 0; t < VT; ++t) {
      acc_o[t][0] *= o_scale[0];
      acc_o[t][1] *= o_scale[0];
      acc_o[t][2] *= o_scale[1];
      acc_o[t][3] *= o_scale[1];
    }
  }
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk) {
    pf[kk][0] = pack2<T>(acc_s[2 * kk][0], acc_s[2 * kk][1]);
    pf[kk][1] = pack2<T>(acc_s[2 * kk][2], acc_s[2 * kk][3]);
    pf[kk][2] = pack2<T>(acc_s[2 * kk + 1][0], acc_s[2 * kk + 1][1]);
    pf[kk][3] = pack2<T>(acc_s[2 * kk + 1][2], acc_s[2 * kk + 1][3]);
  }
}

ATTNC_FWD_SM90_TEMPLATE
template <bool kFull>
__device__ __forceinline__ void
ATTNC_FWD_SM90::step(const typename Variant::Inputs &in, int seq_kv, float (&acc_s)[NT][4],
    typename Variant::RowState (&st)[2], bool (&seen)[2], float (&o_scale)[2], int b,
    int h, int row0, int col0, int tq) {
  constexpr bool kInf = !kFull && Variant::kScoreScaleFolded;
  using Frag = Sm90ScoreFrag<NT, kFull, kInf>;
  typename Frag::ActWord act[2];
  Frag f{acc_s, act, row0, col0, tq};
  bool row_keeps[2] = {false, false}; // kInf: the row keeps a key of this block
  if constexpr (!kFull)
    act[0] = act[1] = 0;
  // Columns outside, rows inside: each key index is used for both rows
  // at once instead of being kept live from the first row to the second.
  // The mask is evaluated on every element, at a key clamped into the
  // sequence (any key of it may be read) and then dropped past its end,
  // not behind a test of the key: evaluated conditionally, each element's
  // mask is a branch region of its own, so that what elements share (a
  // key's floordiv by the chunk for both rows, the divisor's reciprocal)
  // is not shared and ptxas does not interleave one element's division
  // with the next's. kInside: every key of the block lies inside the
  // sequence and inside each key-side input (Inputs::keys_cover), so no
  // key is clamped or dropped and the key-side inputs are read through
  // keys_at's copy at the key's constant offset from the thread's first key
  // (mask_in_keys): one load each at an immediate offset instead of a clamp
  // and a 64-bit address per key.
  auto evaluate = [&](auto inside, const typename Variant::Inputs &kin) {
    constexpr bool kInside = decltype(inside)::kValue;
    (void)kin;
#pragma unroll
    for (int c = 0; c < 2 * NT; ++c) {
      const int ki = f.col(c);
      const int kc = kInside || ki < seq_kv ? ki : seq_kv - 1; // seq_kv >= 1
      (void)kc;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int qi = f.row(r);
        if constexpr (!Variant::kScoreScaleFolded)
          f.at(r, c) = Variant::score_mod(in, f.at(r, c), b, h, qi, ki);
        if constexpr (!kFull) {
          bool keep;
          if constexpr (kInside)
            keep = Variant::mask_in_keys(kin, b, h, qi, ki, (c >> 1) * 8 + (c & 1));
          else
            keep = (ki < seq_kv) & Variant::mask(in, b, h, qi, kc);
          if constexpr (kInf) {
            f.at(r, c) = keep ? f.at(r, c) : -__int_as_float(0x7f800000);
            row_keeps[r] |= keep;
          } else {
            act[r] |= typename Frag::ActWord(keep) << c;
          }
        }
      }
    }
  };
  if constexpr (kFull) {
    evaluate(BoolTag<false>{}, in);
  } else if (col0 + kBlockN <= seq_kv && in.keys_cover(col0 + kBlockN)) {
    // Key-side reads from this thread's first key: f.col(c) is
    // col0 + 2 tq + (c >> 1) 8 + (c & 1).
    evaluate(BoolTag<true>{}, in.keys_at(b, h, col0 + 2 * tq));
  } else {
    evaluate(BoolTag<false>{}, in);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    o_scale[r] = 1.f;
    bool any = true;
    if constexpr (kInf)
      any = quad_any(row_keeps[r]);
    else if constexpr (!kFull)
      any = quad_any(act[r] != 0);
    if constexpr (kInf) {
      // Every lane runs the reductions; a row without a key here gets its
      // state back, o_scale 1 and P 0.
      const typename Variant::RowState old = st[r];
      Variant::online_fwd_folded(in, st[r], f, r, b, h, o_scale[r]);
      if (!any) {
        st[r] = old;
        o_scale[r] = 1.f;
#pragma unroll
        for (int c = 0; c < 2 * NT; ++c)
          f.at(r, c) = 0.f;
      }
      seen[r] = seen[r] || any;
    } else if (any) {
      if constexpr (Variant::kScoreScaleFolded)
        Variant::online_fwd_folded(in, st[r], f, r, b, h, o_scale[r]);
      else
        Variant::online_fwd(in, st[r], f, r, b, h, o_scale[r]);
      seen[r] = true;
    } else {
#pragma unroll
      for (int c = 0; c < 2 * NT; ++c)
        f.at(r, c) = 0.f; // no key of this block reaches the row
    }
  }
}

ATTNC_FWD_SM90_TEMPLATE
__device__ __forceinline__ void
ATTNC_FWD_SM90::epilogue(const FwdArgs &a, const typename Variant::Inputs &in, const SeqSpan &sp,
         float (&acc_o)[VT][4], typename Variant::RowState (&st)[2], bool (&seen)[2], int b,
         int h, int row0, int tq, u32 base, int wgc) {
  // One 64-column slab of O is a [64 rows][64] swizzled tile inside the
  // matching Q slab, at this consumer's rows.
  using OSlab = SwizzledTile<64, 64>;
  constexpr bool kStageO = kDV <= kD;
  const int lrow0 = (threadIdx.x % 128) / 32 * 16 + (threadIdx.x % 32) / 4;
  auto slab_addr = [&](int col_chunk, int lrow) {
    return base + (col_chunk / 8) * kQSlab + wgc * 64 * 128 +
           OSlab::offset(lrow, col_chunk % 8);
  };
  Sm90OutFrag<VT> of{acc_o};
  unsigned short *o = static_cast<unsigned short *>(a.o) + b * a.o_sb + h * a.o_sh +
                      (long long)sp.q0 * a.o_ss;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int qrow = row0 + 8 * r;
    float finals[Variant::kNumFinals > 0 ? Variant::kNumFinals : 1];
    if (seen[r]) {
      Variant::epilogue(in, st[r], of, r, b, h, qrow + sp.shift, finals);
    } else {
#pragma unroll
      for (int c = 0; c < 2 * VT; ++c)
        of.at(r, c) = 0.f;
#pragma unroll
      for (int f = 0; f < Variant::kNumFinals; ++f)
        finals[f] = -__int_as_float(0x7f800000);
    }
#pragma unroll
    for (int t = 0; t < VT; ++t) {
      const u32 packed = pack2<T>(of.at(r, 2 * t), of.at(r, 2 * t + 1));
      if constexpr (kStageO)
        st_shared_32(slab_addr(t, lrow0 + 8 * r) + 4 * tq, packed);
      else if (qrow < sp.seq_q)
        *reinterpret_cast<u32 *>(o + (long long)qrow * a.o_ss + t * 8 + 2 * tq) = packed;
    }
    if (tq == 0 && qrow < sp.seq_q)
#pragma unroll
      for (int f = 0; f < Variant::kNumFinals; ++f)
        a.finals[f * sp.plane + sp.rows + qrow] = finals[f];
  }
  if constexpr (kStageO) {
    named_bar_sync(3 + wgc, 128); // this consumer's warpgroup only
    constexpr int kChunks = kDV / 8;
    const int row_base = row0 - lrow0; // the consumer's first row
#pragma unroll
    for (int it = 0; it < 64 * kChunks / 128; ++it) {
      const int i = threadIdx.x % 128 + it * 128;
      const int r = i / kChunks, c = i % kChunks;
      st_global_128_if(row_base + r < sp.seq_q,
                       o + (long long)(row_base + r) * a.o_ss + c * 8,
                       ld_shared_128(slab_addr(c, r)));
    }
  }
}

} // namespace attnc

#endif
