// The backward's element-wise steps around the chunk gradients
// (linear_chunk_grads): per token, dq and dk taken through the mods'
// derivatives; the decay gradient from q·dq − k·dk by a chunk-local reverse
// sum plus the chunk's <S_out, dS_out>; custom-input gradients summed to
// their shape; the partial sums of shared q/k heads' gradients. Every sum
// has a fixed order: the results are the same bits on every run.
#ifndef ATTNC_LINEAR_CHUNK_BWD_CUH
#define ATTNC_LINEAR_CHUNK_BWD_CUH

#include "attnc/linear_chunk_common.cuh"
#include "attnc/linear_chunk_seq.cuh"

namespace attnc {

/// The per-token step after a chunk's gradients (linear_chunk_grads): one
/// warp per token, lane l holding features [l·kD/32, (l+1)·kD/32) of dq and
/// dk of the modded q and k. kVarlen: a packed batch's (linear_chunk_seq.cuh).
template <class Variant, class T, int kD, bool kVarlen = false> struct LinearCombine {
  using M = lin::Mods<Variant, kVarlen>;
  static constexpr int kE = kD / 32;
  static_assert(kD % 64 == 0, "two or more features per lane");
  static constexpr int kNI = Variant::kNumInputs > 0 ? Variant::kNumInputs : 1;

  /// The lane's raw q and k features of one token (16-bit pairs).
  struct Raw {
    u32 q[kE / 2], k[kE / 2];
  };

  /// Loads the Raw of token \p t of batch row \p b (the packed token in a
  /// packed batch) for value head \p h: a warp issues these for several
  /// tokens before it works on any, so that their latencies overlap.
  __device__ static Raw load_raw(const LinearArgs &a, int b, int h, int t) {
    const int lane = threadIdx.x % 32;
    const int hq = h / (a.heads / a.heads_q), hk = h / (a.heads / a.heads_k);
    const unsigned short *q = static_cast<const unsigned short *>(a.q) + b * a.q_sb +
                              hq * a.q_sh + (long long)t * a.q_ss + lane * kE;
    const unsigned short *k = static_cast<const unsigned short *>(a.k) + b * a.k_sb +
                              hk * a.k_sh + (long long)t * a.k_ss + lane * kE;
    Raw r;
#pragma unroll
    for (int e = 0; e < kE / 2; ++e) {
      r.q[e] = *reinterpret_cast<const u32 *>(q + 2 * e);
      r.k[e] = *reinterpret_cast<const u32 *>(k + 2 * e);
    }
    return r;
  }

  /// The lane's features \p dx of token \p t's raw q (\p isq) or k
  /// gradient for value head \p h: written, or (kShared, where value heads
  /// share q or k heads) summed in fp32 over the a.group_heads heads of the
  /// caller's sub-group, in head order (\p first: the sub-group's first
  /// head), into the sub-group's partial (ws_gq, ws_gk) that
  /// linear_partial_reduce adds up.
  template <bool kShared>
  __device__ static void emit(const LinearArgs &a, int t, int b, int h, bool first,
                              bool isq, const float (&dx)[kE]) {
    const int lane = threadIdx.x % 32;
    if constexpr (!kShared) {
      unsigned short *out =
          isq ? static_cast<unsigned short *>(a.dq) + b * a.dq_sb + h * a.dq_sh +
                    (long long)t * a.dq_ss
              : static_cast<unsigned short *>(a.dk) + b * a.dk_sb + h * a.dk_sh +
                    (long long)t * a.dk_ss;
#pragma unroll
      for (int e = 0; e < kE; e += 2)
        *reinterpret_cast<u32 *>(out + lane * kE + e) = pack2<T>(dx[e], dx[e + 1]);
      return;
    }
    const int heads_x = isq ? a.heads_q : a.heads_k;
    const int per = a.heads / heads_x, hx = h / per;
    const int parts = per / a.group_heads, part = h % per / a.group_heads;
    float *sum = (isq ? a.ws_gq : a.ws_gk) +
                 ((((long long)b * heads_x + hx) * parts + part) * a.seq + t) * kD +
                 lane * kE;
#pragma unroll
    for (int e = 0; e < kE; ++e)
      sum[e] = first ? dx[e] : sum[e] + dx[e];
  }

  /// Token \p t (of its sequence; \p ti in the tensors) of batch row \p b
  /// and value head \p h, at \p tok in the per-token workspaces, with its
  /// \p raw q and k; grads(isq, d) fills d with the lane's features of dq
  /// (isq) or dk of the modded q or k, emit(isq, dx) takes the lane's
  /// features of the raw q's (or k's) gradient.
  template <class GradFn, class EmitFn>
  __device__ static void token(const LinearArgs &a, const typename Variant::Inputs &in,
                               int b, int h, int t, int ti, long long tok, const Raw &raw,
                               GradFn &&grads, EmitFn &&emit) {
    const int lane = threadIdx.x % 32;
    const long long BH = (long long)a.batch * a.heads;

    float dlam = 0.f;
    float cin[kNI];
#pragma unroll
    for (int i = 0; i < kNI; ++i)
      cin[i] = 0.f;
#pragma unroll
    for (int which = 0; which < 2; ++which) {
      const bool isq = which == 0;
      float d[kE];
      grads(isq, d);
      float dx[kE];
      float dot = 0.f;
#pragma unroll
      for (int e = 0; e < kE; e += 2) {
        const u32 w = isq ? raw.q[e / 2] : raw.k[e / 2];
        const float xs[2] = {lin::lo_of<T>(w), lin::hi_of<T>(w)};
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const float x = xs[u], de = d[e + u];
          float m, mdx;
          float din[kNI];
          if (isq) {
            m = M::q_mod(in, x, b, h, t, ti);
            mdx = M::q_mod_dx(in, x, b, h, t, ti);
            if constexpr (Variant::kNumInputs > 0)
              M::q_mod_din(in, x, b, h, t, ti, din);
          } else {
            m = M::k_mod(in, x, b, h, t, ti);
            mdx = M::k_mod_dx(in, x, b, h, t, ti);
            if constexpr (Variant::kNumInputs > 0)
              M::k_mod_din(in, x, b, h, t, ti, din);
          }
          dot += m * de;
          dx[e + u] = de * mdx;
          if constexpr (Variant::kNumInputs > 0) {
#pragma unroll
            for (int i = 0; i < kNI; ++i)
              cin[i] += de * din[i];
          }
        }
      }
      dot = lin::warp_sum_all(dot);
      dlam += isq ? dot : -dot;
      emit(isq, dx);
    }
#pragma unroll
    for (int i = 0; i < kNI; ++i)
      cin[i] = lin::warp_sum_all(cin[i]);
    if (lane == 0) {
      a.ws_dlam[tok] = dlam;
      if constexpr (Variant::kNumInputs > 0)
#pragma unroll
        for (int i = 0; i < kNI; ++i)
          a.ws_cin[i * BH * a.seq + tok] = cin[i];
    }
  }
};

/// The per-token step where the chunk gradients wrote partial sums over
/// several value slices (ws_dq, ws_dk): one warp per token (8 per CTA,
/// grid (ceil(T/8), B·H / a.group_heads)), over the heads of the CTA's
/// sub-group in order, the slices summed in order. kVarlen: t is a packed
/// token, its sequence found in a.cu_seqlens.
template <class Variant, class T, int kD, bool kVarlen = false> struct LinearSliceCombine {
  using Combine = LinearCombine<Variant, T, kD, kVarlen>;
  static constexpr int kE = Combine::kE;

  __device__ static void run(const LinearArgs &a, const typename Variant::Inputs &in) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int t = blockIdx.x * 8 + warp;
    if (t >= a.seq)
      return;
    const int group = a.group_heads;
    const int b = blockIdx.y / (a.heads / group);
    const int h0 = blockIdx.y % (a.heads / group) * group;
    const bool shared = a.heads_q < a.heads || a.heads_k < a.heads;
    const long long slice_stride = (long long)a.batch * a.heads * a.seq * kD;
    // The token's sequence and its place there (t itself when padded).
    int sb = b, tl = t;
    if constexpr (kVarlen) {
      sb = lin::seq_of_token(a, t);
      tl = t - a.cu_seqlens[sb];
    }
    for (int h = h0; h < h0 + group; ++h) {
      const lin::Seq s = lin::seq_of<kVarlen>(a, sb, h, 1);
      const long long row = (s.trow + tl) * kD + lane * kE;
      auto grads = [&](bool isq, float (&d)[kE]) {
        const float *ws = (isq ? a.ws_dq : a.ws_dk) + row;
#pragma unroll
        for (int e = 0; e < kE; ++e)
          d[e] = 0.f;
        for (int s = 0; s < a.slices; ++s)
#pragma unroll
          for (int e = 0; e < kE; ++e)
            d[e] += ws[s * slice_stride + e];
      };
      auto emit = [&](bool isq, const float (&dx)[kE]) {
        if (shared)
          Combine::template emit<true>(a, s.tok0 + tl, s.mb, h, h == h0, isq, dx);
        else
          Combine::template emit<false>(a, s.tok0 + tl, s.mb, h, true, isq, dx);
      };
      Combine::token(a, in, s.mb, h, tl, s.tok0 + tl, s.trow + tl,
                     Combine::load_raw(a, s.mb, h, s.tok0 + tl), grads, emit);
    }
  }
};

/// The decay gradient: dg_s = Σ_{t ≥ s in s's chunk} (q·dq − k·dk)_t +
/// <S_out, dS_out> of the chunk, the chunk-local form that never sums long
/// runs of cancelling terms. One warp per chunk (4 per CTA, grid
/// (ceil(NC/4), B·H)); then ddecay and the per-token custom-input gradient
/// (q/k parts from LinearCombine, v parts from the chunk gradients, decay part
/// here) into ws_cin. kVarlen: x is a packed batch's chunk slot
/// (linear_chunk_seq.cuh); a slot past its sequence's chunks has no work.
template <class Variant, int kC, bool kVarlen = false> struct LinearDecayGrad {
  using M = lin::Mods<Variant, kVarlen>;
  static constexpr int kWarps = 4;
  static constexpr int E = kC / 32;
  static_assert(kC % 32 == 0, "each lane owns kC / 32 consecutive tokens");
  static constexpr int kNI = Variant::kNumInputs > 0 ? Variant::kNumInputs : 1;

  __device__ static void run(const LinearArgs &a, const typename Variant::Inputs &in) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int slot = blockIdx.x * kWarps + warp, bh = blockIdx.y;
    if (slot >= a.chunks)
      return;
    int b = bh / a.heads, n = slot;
    const int h = bh % a.heads;
    if constexpr (kVarlen) {
      b = lin::seq_of_slot(a, slot, kC);
      n = slot - (a.cu_seqlens[b] / kC + b);
    }
    const lin::Seq s = lin::seq_of<kVarlen>(a, b, h, kC);
    if (n >= s.chunks)
      return;
    const long long BH = (long long)a.batch * a.heads, BHT = BH * a.seq;
    const int T = s.len;
    float z = 0.f;
    for (int p = 0; p < a.z_parts; ++p)
      z += a.ws_z[(long long)p * BH * a.chunks + s.crow + n];
    float x[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int t = n * kC + lane * E + e;
      x[e] = t < T ? a.ws_dlam[s.trow + t] : 0.f;
    }
    float suf[E];
    float run = 0.f;
#pragma unroll
    for (int e = E - 1; e >= 0; --e) {
      run += x[e];
      suf[e] = run;
    }
    float incl = run; // Σ over lanes ≥ this one
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float y = __shfl_down_sync(0xffffffffu, incl, o);
      if (lane + o < 32)
        incl += y;
    }
    float after = __shfl_down_sync(0xffffffffu, incl, 1);
    if (lane == 31)
      after = 0.f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int t = n * kC + lane * E + e;
      if (t >= T)
        continue;
      const long long tok = s.trow + t;
      const int ti = s.tok0 + t;
      const float dg = suf[e] + after + z;
      float d = 0.f;
      if constexpr (Variant::kReadsDecay)
        d = a.decay[s.mb * a.decay_sb + h * a.decay_sh + (long long)ti * a.decay_ss];
      if (a.ddecay)
        a.ddecay[tok] =
            Variant::kReadsDecay ? dg * M::decay_mod_dx(in, d, s.mb, h, t, ti) : 0.f;
      if constexpr (Variant::kNumInputs > 0) {
        float din[kNI];
        M::decay_mod_din(in, d, s.mb, h, t, ti, din);
#pragma unroll
        for (int i = 0; i < kNI; ++i) {
          float c = a.ws_cin[i * BHT + tok];
          if constexpr (Variant::kVModReadsInputs)
            for (int p = 0; p < a.vin_parts; ++p)
              c += a.ws_vin[((long long)p * Variant::kNumInputs + i) * BHT + tok];
          a.ws_cin[i * BHT + tok] = c + dg * din[i];
        }
      }
    }
  }
};

/// A custom input's per-token gradient summed to its shape (256 threads;
/// kind 0: grid-stride copy; 1: one CTA per head; 2: one CTA).
__device__ __forceinline__ void linear_input_reduce(const LinearInputReduceArgs &a) {
  __shared__ float part[256];
  const long long BHT = (long long)a.batch * a.heads * a.seq;
  if (a.kind == 0) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < BHT;
         i += (long long)gridDim.x * blockDim.x)
      a.out[i] = a.cin[i];
    return;
  }
  float s = 0.f;
  if (a.kind == 1) {
    const int h = blockIdx.x;
    const long long BT = (long long)a.batch * a.seq;
    for (long long i = threadIdx.x; i < BT; i += blockDim.x) {
      const long long b = i / a.seq, t = i % a.seq;
      s += a.cin[(b * a.heads + h) * a.seq + t];
    }
  } else {
    for (long long i = threadIdx.x; i < BHT; i += blockDim.x)
      s += a.cin[i];
  }
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = 128; w > 0; w >>= 1) {
    if (threadIdx.x < w)
      part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    a.out[a.kind == 1 ? blockIdx.x : 0] = part[0];
}

/// LinearPartialReduceArgs: grid (ceil(T·dim / 512), B·heads_out), 256
/// threads, two features each.
template <class T>
__device__ __forceinline__ void linear_partial_reduce(const LinearPartialReduceArgs &a) {
  const int bo = blockIdx.y;
  const long long i = 2 * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
  const long long n = (long long)a.seq * a.dim;
  if (i >= n)
    return;
  const float *w = a.ws + (long long)bo * a.parts * n + i;
  float s0 = 0.f, s1 = 0.f;
  for (int p = 0; p < a.parts; ++p, w += n) {
    s0 += w[0];
    s1 += w[1];
  }
  const int b = bo / a.heads_out, x = bo % a.heads_out;
  const long long t = i / a.dim, c = i % a.dim;
  unsigned short *o =
      static_cast<unsigned short *>(a.out) + b * a.sb + x * a.sh + t * a.ss + c;
  *reinterpret_cast<u32 *>(o) = pack2<T>(s0, s1);
}

} // namespace attnc

#endif
