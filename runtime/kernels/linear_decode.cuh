// linear_decode: the recurrent decode step of linear attention. For a batch
// of sequences, each with an fp32 state S (D x DV) in a pool, and 1..16 new
// tokens per sequence, one CTA per (32-column slice of S, sequence·value
// head) reads its slice of S into registers, applies the tokens in order
//   S ← exp(g_t)·S + k_tᵀ v_t,   o_t = q_t · S
// with the generated mods applied in fp32, and writes S back (in place or
// to a second pool). The kernel is memory-bound on the state: everything
// else (q, k, v, o) is a few KiB per sequence.
#ifndef ATTNC_LINEAR_DECODE_CUH
#define ATTNC_LINEAR_DECODE_CUH

#include "attnc/linear_chunk_common.cuh"
#include "attnc/linear_decode_args.cuh"

namespace attnc {

template <class Variant, class T, int kD> struct LinearDecode {
  static_assert(kD % dec::kRowsPerStep == 0,
                "the CTA's row lanes must split head_dim evenly");
  static constexpr int kSteps = kD / dec::kRowsPerStep;

  __device__ static void run(const LinearDecodeArgs &a,
                             const typename Variant::Inputs &in,
                             unsigned char *smem) {
    const int n = a.tokens;
    if (threadIdx.x == 0 && lin::dynamic_smem_bytes() < u32(dec::smem_bytes(kD, n)))
      __trap();
    const int bh = blockIdx.y, b = bh / a.heads, h = bh % a.heads;
    const int slot = a.state_index ? a.state_index[b] : b;
    if (slot < 0 || slot >= a.pool) // a padding row: nothing read or written
      return;
    const int hq = h / (a.heads / a.heads_q), hk = h / (a.heads / a.heads_k);
    const int DV = gridDim.x * dec::kCols, vcol = blockIdx.x * dec::kCols;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int c4 = lane % 8, rl = lane / 8;
    const long long base = ((long long)slot * a.heads + h) * kD * DV + vcol + 4 * c4;
    const int row0 = warp * 4 + rl;

    // The state first: its loads are the kernel's traffic, in flight while
    // the tokens are modded.
    float4 st[kSteps];
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
      st[s] = *reinterpret_cast<const float4 *>(
          a.state_in + base + (long long)(row0 + s * dec::kRowsPerStep) * DV);

    float *sq = reinterpret_cast<float *>(smem);
    float *sk = sq + n * kD;
    float *sv = sk + n * kD;
    float *red = sv + n * dec::kCols; // 16-byte aligned: float4 stores
    float *sa = red + dec::kWarps * n * dec::kCols;
    const int t0 = a.positions ? a.positions[b] : 0;
    const unsigned short *qp =
        static_cast<const unsigned short *>(a.q) + b * a.q_sb + hq * a.q_sh;
    const unsigned short *kp =
        static_cast<const unsigned short *>(a.k) + b * a.k_sb + hk * a.k_sh;
    const unsigned short *vp =
        static_cast<const unsigned short *>(a.v) + b * a.v_sb + h * a.v_sh + vcol;
    for (int i = threadIdx.x; i < n * kD; i += dec::kThreads) {
      const int ti = i / kD, x = i % kD;
      sq[i] = Variant::q_mod(in, lin::to_float<T>(qp[ti * a.q_ss + x]), b, h, t0 + ti, ti);
      sk[i] = Variant::k_mod(in, lin::to_float<T>(kp[ti * a.k_ss + x]), b, h, t0 + ti, ti);
    }
    for (int i = threadIdx.x; i < n * dec::kCols; i += dec::kThreads) {
      const int ti = i / dec::kCols, x = i % dec::kCols;
      sv[i] = Variant::v_mod(in, lin::to_float<T>(vp[ti * a.v_ss + x]), b, h, t0 + ti, ti);
    }
    if (threadIdx.x < n) {
      const int ti = threadIdx.x;
      float d = 0.f;
      if constexpr (Variant::kReadsDecay)
        d = a.decay[b * a.decay_sb + h * a.decay_sh + ti * a.decay_ss];
      sa[ti] = expf(Variant::decay_mod(in, d, b, h, t0 + ti, ti));
    }
    __syncthreads();

    for (int ti = 0; ti < n; ++ti) {
      const float e = sa[ti];
      const float4 v = *reinterpret_cast<const float4 *>(sv + ti * dec::kCols + 4 * c4);
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const int r = row0 + s * dec::kRowsPerStep;
        const float kx = sk[ti * kD + r], qx = sq[ti * kD + r];
        st[s].x = fmaf(e, st[s].x, kx * v.x);
        st[s].y = fmaf(e, st[s].y, kx * v.y);
        st[s].z = fmaf(e, st[s].z, kx * v.z);
        st[s].w = fmaf(e, st[s].w, kx * v.w);
        acc.x = fmaf(qx, st[s].x, acc.x);
        acc.y = fmaf(qx, st[s].y, acc.y);
        acc.z = fmaf(qx, st[s].z, acc.z);
        acc.w = fmaf(qx, st[s].w, acc.w);
      }
      // Over the warp's four row lanes, always in the same order.
#pragma unroll
      for (int o = 8; o < 32; o <<= 1) {
        acc.x += __shfl_xor_sync(0xffffffffu, acc.x, o);
        acc.y += __shfl_xor_sync(0xffffffffu, acc.y, o);
        acc.z += __shfl_xor_sync(0xffffffffu, acc.z, o);
        acc.w += __shfl_xor_sync(0xffffffffu, acc.w, o);
      }
      if (rl == 0)
        *reinterpret_cast<float4 *>(red + (warp * n + ti) * dec::kCols + 4 * c4) = acc;
    }

#pragma unroll
    for (int s = 0; s < kSteps; ++s)
      *reinterpret_cast<float4 *>(a.state_out + base +
                                  (long long)(row0 + s * dec::kRowsPerStep) * DV) = st[s];
    __syncthreads();

    // Each thread sums two columns of one token over the warps, in order.
    for (int i = threadIdx.x; i < n * dec::kCols / 2; i += dec::kThreads) {
      const int ti = i / (dec::kCols / 2), c = 2 * (i % (dec::kCols / 2));
      float o0 = 0.f, o1 = 0.f;
#pragma unroll
      for (int w = 0; w < dec::kWarps; ++w) {
        o0 += red[(w * n + ti) * dec::kCols + c];
        o1 += red[(w * n + ti) * dec::kCols + c + 1];
      }
      unsigned short *op = static_cast<unsigned short *>(a.o) + b * a.o_sb + h * a.o_sh +
                           ti * a.o_ss + vcol + c;
      *reinterpret_cast<u32 *>(op) = pack2<T>(o0, o1);
    }
  }
};

} // namespace attnc

#endif
