// decode_sm80's parts after the key blocks (DecodeSm80, decode_sm80.cuh says
// what it does): the warps' states merged into warp 0's, a CTA's rows
// poisoned, the rows stored (final, or a split's part) and the merge in the
// last split CTA. Included by decode_sm80.cuh after the struct.
#ifndef ATTNC_DECODE_SM80_PARTS_CUH
#define ATTNC_DECODE_SM80_PARTS_CUH

#define ATTNC_DECODE_SM80_TEMPLATE                                                         \
  template <class Variant, class Merge, class T, int kD, int kDV, int kBlockM, int kBlockN, \
            int kWarps, int kStages>
#define ATTNC_DECODE_SM80                                                                  \
  DecodeSm80<Variant, Merge, T, kD, kDV, kBlockM, kBlockN, kWarps, kStages>

namespace attnc {

ATTNC_DECODE_SM80_TEMPLATE
__device__ void ATTNC_DECODE_SM80::merge_if_last(const DecodeArgs &a,
                                                 const typename Variant::Inputs &in,
                                                 const DecodeQSpan qs, int qshift, int b,
                                                 int rb, int hk) {
  unsigned *count = a.counters + (long long)b * gridDim.y + blockIdx.y;
  // Release: each thread's part stores before its fence, every fence
  // before the arrival.
  __threadfence();
  __syncthreads();
  bool last = false;
  if (threadIdx.x == 0) {
    last = atomicAdd(count, 1u) == unsigned(a.splits - 1);
    if (last)
      *count = 0; // every split has arrived: no other access this launch
  }
  if (!__syncthreads_or(last))
    return;
  __threadfence(); // acquire: the other splits' parts after their arrivals
  const int rows = a.group * qs.n;
  const int row0 = rb * kBlockM;
  const int n = min(rows - row0, kBlockM);
  constexpr int kPairs = kDV / 2;
  for (int i = threadIdx.x; i < n * kPairs; i += kThreads) {
    const int gr = row0 + i / kPairs;
    decode_merge_row<Variant, Merge, T, kDV>(a, in, b, hk * a.group + gr / qs.n,
                                             gr % qs.n, qs, qshift, i % kPairs);
  }
}

ATTNC_DECODE_SM80_TEMPLATE
__device__ void ATTNC_DECODE_SM80::poison(float (&acc_o)[MT][VT][4], State (&st)[2 * MT],
                                          u32 &seen) {
  const float nan = __int_as_float(0x7fc00000);
  float nans[kDecodeStateFloats];
#pragma unroll
  for (int i = 0; i < kDecodeStateFloats; ++i)
    nans[i] = nan;
#pragma unroll
  for (int r = 0; r < 2 * MT; ++r)
    Merge::load(st[r], nans);
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int t = 0; t < VT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc_o[i][t][e] = nan;
  seen = ~0u;
}

ATTNC_DECODE_SM80_TEMPLATE
__device__ void ATTNC_DECODE_SM80::merge_warps(unsigned char *smem, float (&acc_o)[MT][VT][4],
                                               State (&st)[2 * MT], u32 &seen, int warp,
                                               int g, int tq) {
  float *so = reinterpret_cast<float *>(smem);
  float *ss = so + (kWarps - 1) * kBlockM * kDV;
  if (warp > 0) {
    float *wo = so + (warp - 1) * kBlockM * kDV;
    float *ws = ss + (warp - 1) * kBlockM * kDecodeStateFloats;
#pragma unroll
    for (int r = 0; r < 2 * MT; ++r) {
      const int tr = tile_row(r, g);
#pragma unroll
      for (int t = 0; t < VT; ++t) {
        wo[tr * kDV + t * 8 + 2 * tq] = acc_o[r >> 1][t][(r & 1) * 2];
        wo[tr * kDV + t * 8 + 2 * tq + 1] = acc_o[r >> 1][t][(r & 1) * 2 + 1];
      }
      if (tq == 0) {
        Merge::store(st[r], ws + tr * kDecodeStateFloats);
        ws[tr * kDecodeStateFloats + kDecodeStateFloats - 1] = float((seen >> r) & 1);
      }
    }
  }
  __syncthreads();
  if (warp != 0)
    return;
  for (int w = 1; w < kWarps; ++w) {
    const float *wo = so + (w - 1) * kBlockM * kDV;
    const float *ws = ss + (w - 1) * kBlockM * kDecodeStateFloats;
#pragma unroll
    for (int r = 0; r < 2 * MT; ++r) {
      const int tr = tile_row(r, g);
      if (ws[tr * kDecodeStateFloats + kDecodeStateFloats - 1] == 0.f)
        continue;
      State other;
      Merge::load(other, ws + tr * kDecodeStateFloats);
      float fa = 0.f, fb = 1.f;
      if ((seen >> r) & 1)
        Merge::merge(st[r], other, fa, fb);
      else
        st[r] = other;
      seen |= 1u << r;
#pragma unroll
      for (int t = 0; t < VT; ++t) {
        float &x0 = acc_o[r >> 1][t][(r & 1) * 2];
        float &x1 = acc_o[r >> 1][t][(r & 1) * 2 + 1];
        x0 = fa * x0 + fb * wo[tr * kDV + t * 8 + 2 * tq];
        x1 = fa * x1 + fb * wo[tr * kDV + t * 8 + 2 * tq + 1];
      }
    }
  }
}

ATTNC_DECODE_SM80_TEMPLATE
__device__ void ATTNC_DECODE_SM80::store_final(const DecodeArgs &a,
                                               const typename Variant::Inputs &in,
                                               const DecodeQSpan qs, int qshift,
                                               float (&acc_o)[MT][VT][4], State (&st)[2 * MT],
                                               u32 seen, int b, int rb, int hk, int g, int tq) {
  Sm80OutFrag<MT, VT> of{acc_o};
#pragma unroll
  for (int r = 0; r < 2 * MT; ++r) {
    int h, qi;
    if (!head_query(a, qs, rb, hk, r, g, h, qi))
      continue;
    float finals[Variant::kNumFinals > 0 ? Variant::kNumFinals : 1];
    if ((seen >> r) & 1) {
      Variant::epilogue(in, st[r], of, r, b, h, qi + qshift, finals);
    } else {
#pragma unroll
      for (int c = 0; c < 2 * VT; ++c)
        of.at(r, c) = 0.f;
#pragma unroll
      for (int f = 0; f < Variant::kNumFinals; ++f)
        finals[f] = -__int_as_float(0x7f800000);
    }
    unsigned short *o = static_cast<unsigned short *>(a.o) + b * a.o_sb +
                        h * a.o_sh + (qs.q0 + qi) * a.o_ss;
#pragma unroll
    for (int t = 0; t < VT; ++t)
      *reinterpret_cast<u32 *>(o + t * 8 + 2 * tq) =
          pack2<T>(of.at(r, 2 * t), of.at(r, 2 * t + 1));
    if (tq == 0) {
#pragma unroll
      for (int f = 0; f < Variant::kNumFinals; ++f)
        a.finals[decode_final_index(a, f, b, h, qs.q0, qi)] = finals[f];
    }
  }
}

ATTNC_DECODE_SM80_TEMPLATE
__device__ void ATTNC_DECODE_SM80::store_part(const DecodeArgs &a, const DecodeQSpan qs,
                                              float (&acc_o)[MT][VT][4],
                                              State (&st)[2 * MT], u32 seen, int split, int b,
                                              int rb, int hk, int g, int tq) {
#pragma unroll
  for (int r = 0; r < 2 * MT; ++r) {
    int h, qi;
    if (!head_query(a, qs, rb, hk, r, g, h, qi))
      continue;
    const long long row =
        (((long long)split * a.batch + b) * a.heads + h) * a.seq_q + qi;
    float *po = a.part_o + row * kDV;
#pragma unroll
    for (int t = 0; t < VT; ++t)
      *reinterpret_cast<float2 *>(po + t * 8 + 2 * tq) =
          make_float2(acc_o[r >> 1][t][(r & 1) * 2], acc_o[r >> 1][t][(r & 1) * 2 + 1]);
    if (tq == 0) {
      float *ps = a.part_st + row * kDecodeStateFloats;
      Merge::store(st[r], ps);
      ps[kDecodeStateFloats - 1] = float((seen >> r) & 1);
    }
  }
}

} // namespace attnc

#undef ATTNC_DECODE_SM80
#undef ATTNC_DECODE_SM80_TEMPLATE

#endif
