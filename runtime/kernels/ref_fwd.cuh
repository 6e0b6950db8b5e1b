// ref_fwd: the reference forward, written to be obviously correct rather
// than fast. One CTA per (query row, batch·head) materialises the row's
// scores in shared memory and follows the direct definition: score_mod and
// mask per key, the final rowscales from one online step over the whole row,
// P = forward(score, finals), o = P·v in fp32. No tensor cores, no tiling,
// no block skipping: it shares only the generated Variant with fwd_sm80.
#ifndef ATTNC_REF_FWD_CUH
#define ATTNC_REF_FWD_CUH

#include "attnc/attention_args.cuh"
#include "attnc/sm80_primitives.cuh"

namespace attnc {

/// A 16-bit element widened to float (exactly).
template <class T> __device__ __forceinline__ float widen(unsigned short x) {
  if constexpr (T::kIsBf16)
    return __uint_as_float(u32(x) << 16);
  else {
    float f;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(x));
    return f;
  }
}

/// A float rounded to nearest into the 16-bit format.
template <class T> __device__ __forceinline__ unsigned short narrow(float x) {
  unsigned short r;
  if constexpr (T::kIsBf16)
    asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(r) : "f"(x));
  else
    asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(r) : "f"(x));
  return r;
}

/// A block-wide reduction every thread of the CTA calls; all get the result.
template <int kThreads, bool kMax>
__device__ __forceinline__ float block_allreduce(float x) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024,
                "whole warps, at most 32 of them");
  __shared__ float partial[kThreads / 32];
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const float y = __shfl_xor_sync(0xffffffffu, x, o);
    x = kMax ? fmaxf(x, y) : x + y;
  }
  __syncthreads(); // an earlier call may still read partial
  if (threadIdx.x % 32 == 0)
    partial[threadIdx.x / 32] = x;
  __syncthreads();
  x = partial[0];
  for (int w = 1; w < kThreads / 32; ++w)
    x = kMax ? fmaxf(x, partial[w]) : x + partial[w];
  return x;
}

/// The whole score row as one "fragment" for the variant's online_fwd: one
/// row; column c of thread t is key c·kThreads + t, held in shared memory.
template <int kThreads, int kColsPerThread> struct RefRowFrag {
  static constexpr int kRows = 1;
  static constexpr int kCols = kColsPerThread;
  float *scores;
  const unsigned char *keep;
  int q, seq_kv;
  __device__ __forceinline__ int key(int c) const { return c * kThreads + threadIdx.x; }
  __device__ __forceinline__ float &at(int, int c) { return scores[key(c)]; }
  __device__ __forceinline__ int row(int) const { return q; }
  __device__ __forceinline__ int col(int c) const { return key(c); }
  __device__ __forceinline__ bool active(int, int c) const {
    return key(c) < seq_kv && keep[key(c)];
  }
  __device__ static __forceinline__ float allreduce_max(float x) {
    return block_allreduce<kThreads, true>(x);
  }
  __device__ static __forceinline__ float allreduce_sum(float x) {
    return block_allreduce<kThreads, false>(x);
  }
};

/// The epilogue's view of o: none. The reference applies the direct
/// definition, so the epilogue is called only for the final rowscales.
struct RefNoOutput {
  static constexpr int kRows = 1;
  static constexpr int kCols = 0;
  float unused;
  __device__ __forceinline__ float &at(int, int) { return unused; }
};

template <class Variant, class T, int kD, int kDV, int kThreads, int kMaxKeys>
struct RefFwd {
  static constexpr int kCols = kMaxKeys / kThreads;
  static_assert(kMaxKeys % kThreads == 0, "whole columns per thread");
  static_assert(kDV <= kThreads, "one thread per output column");
  /// scores (float) then keep flags (byte) then the q row (float)
  static constexpr int kSmemBytes = kMaxKeys * 4 + kMaxKeys + kD * 4;

  __device__ static float score_at(const FwdArgs &a, const typename Variant::Inputs &in,
                                   const float *qrow, const unsigned short *k,
                                   int b, int h, int q, int j) {
    const unsigned short *kr = k + (long long)j * a.k_ss;
    float s = 0.f;
    for (int d = 0; d < kD; ++d)
      s += qrow[d] * widen<T>(kr[d]);
    return Variant::score_mod(in, s, b, h, q, j);
  }

  __device__ static void run(const FwdArgs &a, const typename Variant::Inputs &in,
                             unsigned char *smem) {
    const int q = blockIdx.x, bh = blockIdx.y;
    const int b = bh / a.heads, h = bh % a.heads;
    const int hk = h / (a.heads / a.heads_kv);
    float *scores = reinterpret_cast<float *>(smem);
    unsigned char *keep = smem + kMaxKeys * 4;
    float *qrow = reinterpret_cast<float *>(smem + kMaxKeys * 5);
    const unsigned short *qp = static_cast<const unsigned short *>(a.q) +
                               b * a.q_sb + h * a.q_sh + (long long)q * a.q_ss;
    const unsigned short *k = static_cast<const unsigned short *>(a.k) +
                              b * a.k_sb + hk * a.k_sh;
    const unsigned short *v = static_cast<const unsigned short *>(a.v) +
                              b * a.v_sb + hk * a.v_sh;
    for (int d = threadIdx.x; d < kD; d += kThreads)
      qrow[d] = widen<T>(qp[d]);
    __syncthreads();

    bool mine = false;
    for (int j = threadIdx.x; j < kMaxKeys; j += kThreads) {
      const bool in_range = j < a.seq_kv;
      scores[j] = in_range ? score_at(a, in, qrow, k, b, h, q, j) : 0.f;
      keep[j] = in_range && Variant::mask(in, b, h, q, j);
      mine = mine || keep[j];
    }
    const bool any = __syncthreads_or(mine);

    // Final rowscales: one online step over the whole row, then the epilogue.
    float finals[Variant::kNumFinals > 0 ? Variant::kNumFinals : 1];
    if (any) {
      typename Variant::RowState st;
      Variant::init(st);
      RefRowFrag<kThreads, kCols> f{scores, keep, q, a.seq_kv};
      float o_scale = 1.f;
      Variant::online_fwd(in, st, f, 0, b, h, o_scale);
      RefNoOutput none;
      Variant::epilogue(in, st, none, 0, b, h, q, finals);
    } else {
      for (int i = 0; i < Variant::kNumFinals; ++i)
        finals[i] = -__int_as_float(0x7f800000);
    }
    __syncthreads(); // online_fwd rewrote scores in place

    // P = forward(score, finals) on the unmodified scores, recomputed.
    for (int j = threadIdx.x; j < a.seq_kv; j += kThreads)
      scores[j] = keep[j] ? Variant::forward(in, score_at(a, in, qrow, k, b, h, q, j),
                                             finals, b, h, q, j)
                          : 0.f;
    __syncthreads();

    unsigned short *o = static_cast<unsigned short *>(a.o) + b * a.o_sb +
                        h * a.o_sh + (long long)q * a.o_ss;
    for (int x = threadIdx.x; x < kDV; x += kThreads) {
      float acc = 0.f;
      for (int j = 0; j < a.seq_kv; ++j)
        if (keep[j])
          acc += scores[j] * widen<T>(v[(long long)j * a.v_ss + x]);
      o[x] = narrow<T>(any ? acc : 0.f);
    }
    if (threadIdx.x == 0)
      for (int i = 0; i < Variant::kNumFinals; ++i)
        a.finals[((long long)i * a.batch * a.heads + bh) * a.seq_q + q] = finals[i];
  }
};

} // namespace attnc

#endif
