// linear_chunk_scan: the chunked linear-attention scans. One CTA per (value
// slice, batch·value head) walks the chunks in order carrying the fp32 state
// S (D x slice) in registers, each warp owning whole m16 tiles of its rows.
// Per chunk the q/k/v tiles are loaded with the generated mods applied
// (from a cp.async staging copy of the next chunk when it fits), warp 0
// scans the chunk's log-decays, and each warp computes its rows of
//   out = diag(exp G)·(A·S) + ((A·Bᵀ) ⊙ D)·Val,   D_ij = exp(G_i − G_j), i ≥ j
// then its rows of S ← exp(G_last)·S + (diag(exp(G_last − G))·K)ᵀ·V.
// The forward is (A, B, Val) = (q, k, v); the backward's dq scan is
// (dout, v, k) with Sᵀ, and LinearDkdv walks the chunks backwards carrying dS.
#ifndef ATTNC_LINEAR_CHUNK_SCAN_CUH
#define ATTNC_LINEAR_CHUNK_SCAN_CUH

#include "attnc/linear_chunk_common.cuh"

namespace attnc {

enum : int { kLinScanFwd = 0, kLinScanDq = 1 };

template <bool kFirst, class X, class Y> struct LinPick {
  using type = X;
};
template <class X, class Y> struct LinPick<false, X, Y> {
  using type = Y;
};

__device__ __forceinline__ void st_global_f2(float *p, float x, float y) {
  asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(x), "f"(y));
}

/// Warp layout shared by the scans: kC / 16 row tiles of the chunk, the
/// warps split over them and then over kColGroups groups of output columns;
/// warp w owns state rows [w·D/kWarps, (w+1)·D/kWarps).
template <int kD, int kVs, int kC, int kWarps> struct LinLayout {
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowTiles = kC / 16;
  static_assert(kC % 32 == 0 && kC <= 128, "chunk sizes are 32, 64, 96 or 128 tokens");
  static_assert(kWarps % kRowTiles == 0,
                "the warps must split the chunk's m16 row tiles evenly");
  static constexpr int kColGroups = kWarps / kRowTiles;
  static constexpr int kStateRows = kD / kWarps;
  static_assert(kD % kWarps == 0 && kStateRows % 16 == 0,
                "each warp owns whole m16 tiles of state rows");
  static constexpr int kMT = kStateRows / 16;
  static constexpr int kNS = kVs / 8;
  static_assert(kD % 64 == 0 && kVs % 64 == 0,
                "swizzled tiles need rows of a multiple of 64 elements");
  using DTile = SwizzledTile<kC, kD>;
  using VTile = SwizzledTile<kC, kVs>;
  using STile = SwizzledTile<kD, kVs>;
};

template <class Variant, class T, int kD, int kVs, int kC, int kWarps, bool kStaged,
          int kMode>
struct LinearScan {
  using L = LinLayout<kD, kVs, kC, kWarps>;
  static constexpr bool kFwd = kMode == kLinScanFwd;
  static constexpr int kThreads = L::kThreads;
  static constexpr int kN = kFwd ? kVs : kD;   // output columns
  static constexpr int kDk = kFwd ? kD : kVs;  // A's width
  static constexpr int kNW = kN / L::kColGroups;
  static_assert(kN % L::kColGroups == 0 && kNW % 16 == 0,
                "each column group owns a multiple of 16 output columns");
  using DTile = typename L::DTile;
  using VTile = typename L::VTile;
  using STile = typename L::STile;
  using ATile = typename LinPick<kFwd, DTile, VTile>::type;
  using ValTile = typename LinPick<kFwd, VTile, DTile>::type;
  static constexpr int kOffB = ATile::kBytes;
  static constexpr int kOffVal = kOffB + ATile::kBytes;
  static constexpr int kTileBytes = kOffVal + ValTile::kBytes;
  static constexpr int kOffS = kTileBytes;
  static constexpr int kOffStage = kOffS + STile::kBytes;
  static constexpr int kOffF = kOffStage + (kStaged ? kTileBytes : 0);
  static constexpr int kSmemBytes = kOffF + 4 * (3 * kC + 4);

  __device__ static void run(const LinearArgs &a, const typename Variant::Inputs &in,
                             unsigned char *smem) {
    if (threadIdx.x == 0 && lin::dynamic_smem_bytes() < u32(kSmemBytes))
      __trap();
    const int slice = blockIdx.x, bh = blockIdx.y;
    const int b = bh / a.heads, h = bh % a.heads;
    const int hq = h / (a.heads / a.heads_q), hk = h / (a.heads / a.heads_k);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, tq = lane % 4;
    const int m0 = (warp % L::kRowTiles) * 16, n0 = (warp / L::kRowTiles) * kNW;
    const int srow0 = warp * L::kStateRows;
    const int seq = a.seq, vcol = slice * kVs, DV = a.slices * kVs;
    const long long state0 = (long long)bh * kD * DV + vcol;

    const unsigned short *qp = static_cast<const unsigned short *>(a.q) +
                               b * a.q_sb + hq * a.q_sh;
    const unsigned short *kp = static_cast<const unsigned short *>(a.k) +
                               b * a.k_sb + hk * a.k_sh;
    const unsigned short *vp = static_cast<const unsigned short *>(a.v) +
                               b * a.v_sb + h * a.v_sh + vcol;
    const unsigned short *dop =
        kFwd ? nullptr
             : static_cast<const unsigned short *>(a.dout) + b * a.do_sb + h * a.do_sh + vcol;

    const u32 s0 = smem_addr(smem);
    const u32 sA = s0, sB = s0 + kOffB, sVal = s0 + kOffVal, sS = s0 + kOffS;
    const u32 stg = s0 + kOffStage;
    float *g2 = reinterpret_cast<float *>(smem + kOffF);
    float *rs = g2 + kC + 4, *wsc = rs + kC;

    auto qmod = [&](float x, int t) { return Variant::q_mod(in, x, b, h, t); };
    auto kmod = [&](float x, int t) { return Variant::k_mod(in, x, b, h, t); };
    auto vmod = [&](float x, int t) { return Variant::v_mod(in, x, b, h, t); };
    auto ident = [](float x, int) { return x; };
    auto decay_of = [&](int t) {
      float d = 0.f;
      if constexpr (Variant::kReadsDecay)
        d = a.decay[b * a.decay_sb + h * a.decay_sh + t * a.decay_ss];
      return Variant::decay_mod(in, d, b, h, t);
    };
    // Forward: A = q, B = k, Val = v. dq scan: A = dout, B = v, Val = k.
    auto stage = [&](int t0) {
      if constexpr (kFwd) {
        load_tile_async<DTile, kC, kD, kThreads>(stg, qp, a.q_ss, t0, seq);
        load_tile_async<DTile, kC, kD, kThreads>(stg + kOffB, kp, a.k_ss, t0, seq);
        load_tile_async<VTile, kC, kVs, kThreads>(stg + kOffVal, vp, a.v_ss, t0, seq);
      } else {
        load_tile_async<VTile, kC, kVs, kThreads>(stg, dop, a.do_ss, t0, seq);
        load_tile_async<VTile, kC, kVs, kThreads>(stg + kOffB, vp, a.v_ss, t0, seq);
        load_tile_async<DTile, kC, kD, kThreads>(stg + kOffVal, kp, a.k_ss, t0, seq);
      }
    };
    auto load = [&](int t0) {
      if constexpr (kFwd) {
        lin::mod_tile<T, DTile, kC, kD, kThreads, kStaged, Variant::kQIdentity>(
            sA, stg, qp, a.q_ss, t0, seq, qmod);
        lin::mod_tile<T, DTile, kC, kD, kThreads, kStaged, Variant::kKIdentity>(
            sB, stg + kOffB, kp, a.k_ss, t0, seq, kmod);
        lin::mod_tile<T, VTile, kC, kVs, kThreads, kStaged, Variant::kVIdentity>(
            sVal, stg + kOffVal, vp, a.v_ss, t0, seq, vmod);
      } else {
        lin::mod_tile<T, VTile, kC, kVs, kThreads, kStaged, true>(sA, stg, dop, a.do_ss,
                                                                 t0, seq, ident);
        lin::mod_tile<T, VTile, kC, kVs, kThreads, kStaged, Variant::kVIdentity>(
            sB, stg + kOffB, vp, a.v_ss, t0, seq, vmod);
        lin::mod_tile<T, DTile, kC, kD, kThreads, kStaged, Variant::kKIdentity>(
            sVal, stg + kOffVal, kp, a.k_ss, t0, seq, kmod);
      }
    };

    float st[L::kMT][L::kNS][4];
    lin::for_state(st, srow0, [&](int r, int c, float &x) {
      x = a.init_state ? a.init_state[state0 + (long long)r * DV + c] : 0.f;
    });

    const int chunks = a.chunks;
    if constexpr (kStaged) {
      stage(0);
      cp_async_commit();
    }
    for (int n = 0; n < chunks; ++n) {
      const int t0 = n * kC;
      if constexpr (kStaged)
        cp_async_wait<0>();
      __syncthreads(); // staging landed; the previous chunk's reads are done
      lin::chunk_decay<kC>(g2, rs, wsc, t0, seq, decay_of);
      load(t0);
      lin::store_state<T, STile, L::kMT, L::kNS>(sS, st, srow0);
      __syncthreads();
      if constexpr (kStaged) {
        if (n + 1 < chunks)
          stage(t0 + kC);
        cp_async_commit();
      }

      float acc[kNW / 8][4];
      lin::chunk_out<T, kC, kDk, kNW, kFwd, true, ATile, ATile, ValTile, STile>(
          acc, sA, sB, sVal, sS, g2, rs, m0, n0);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int t = t0 + m0 + g + 8 * half;
        if (t >= seq)
          continue;
#pragma unroll
        for (int j = 0; j < kNW / 8; ++j) {
          const int col = n0 + j * 8 + 2 * tq;
          const float x = acc[j][2 * half], y = acc[j][2 * half + 1];
          if constexpr (kFwd) {
            unsigned short *o = static_cast<unsigned short *>(a.o) + b * a.o_sb +
                                h * a.o_sh + (long long)t * a.o_ss + vcol + col;
            *reinterpret_cast<u32 *>(o) = pack2<T>(x, y);
          } else {
            float *w = a.ws_dq +
                       (((long long)slice * a.batch * a.heads + bh) * seq + t) * kD + col;
            st_global_f2(w, x, y);
          }
        }
      }

      const u32 sK = kFwd ? sB : sVal, sV = kFwd ? sVal : sB;
      lin::state_update<T, kC, L::kMT, L::kNS, DTile, VTile>(st, sK, sV, wsc, srow0,
                                                             exp2_fast(g2[kC]));
      if constexpr (!kFwd) {
        // The state after this chunk, for the backward's <S_out, dS_out>.
        unsigned short *hp = static_cast<unsigned short *>(a.ws_h) +
                             ((long long)bh * chunks + n) * kD * DV + vcol;
#pragma unroll
        for (int i = 0; i < L::kMT; ++i)
#pragma unroll
          for (int t = 0; t < L::kNS; ++t) {
            const int r = srow0 + 16 * i + g, c = t * 8 + 2 * tq;
            *reinterpret_cast<u32 *>(hp + (long long)r * DV + c) =
                pack2<T>(st[i][t][0], st[i][t][1]);
            *reinterpret_cast<u32 *>(hp + (long long)(r + 8) * DV + c) =
                pack2<T>(st[i][t][2], st[i][t][3]);
          }
      }
    }
    if constexpr (kStaged)
      cp_async_wait<0>();
    if (kFwd && a.final_state)
      lin::for_state(st, srow0, [&](int r, int c, float &x) {
        a.final_state[state0 + (long long)r * DV + c] = x;
      });
  }
};

/// The backward's reverse scan: per chunk, last to first, with dS the
/// gradient of the state after the chunk (dfinal_state at the start),
///   dv = diag(w)·(K·dS) + ((K·Qᵀ) ⊙ Dᵀ)·dO       (w_j = exp(G_last − G_j))
///   dk = diag(w)·(V·dSᵀ) + ((V·dOᵀ) ⊙ Dᵀ)·Q      (a partial over the slice)
///   z  = <S_out, dS>                              (S_out from the dq scan)
///   dS ← exp(G_last)·dS + (diag(exp G)·Q)ᵀ·dO
/// dv goes through v_mod's derivative straight to the raw dv (and the
/// custom inputs v_mod reads); dk, z and those input parts go to workspace.
template <class Variant, class T, int kD, int kVs, int kC, int kWarps, bool kStaged>
struct LinearDkdv {
  using L = LinLayout<kD, kVs, kC, kWarps>;
  static constexpr int kThreads = L::kThreads;
  static constexpr int kNWv = kVs / L::kColGroups;
  static constexpr int kNWk = kD / L::kColGroups;
  static_assert(kVs % L::kColGroups == 0 && kNWv % 16 == 0 && kNWk % 16 == 0,
                "each column group owns a multiple of 16 columns of dv and dk");
  using DTile = typename L::DTile;
  using VTile = typename L::VTile;
  using STile = typename L::STile;
  static constexpr int kOffK = DTile::kBytes;
  static constexpr int kOffV = 2 * DTile::kBytes;
  static constexpr int kOffDo = kOffV + VTile::kBytes;
  static constexpr int kTileBytes = kOffDo + VTile::kBytes;
  static constexpr int kOffS = kTileBytes;
  static constexpr int kOffStage = kOffS + STile::kBytes;
  static constexpr int kOffF = kOffStage + (kStaged ? kTileBytes : 0);
  static constexpr int kSmemBytes = kOffF + 4 * (3 * kC + 4);
  static constexpr int kNI = Variant::kNumInputs > 0 ? Variant::kNumInputs : 1;

  __device__ static void run(const LinearArgs &a, const typename Variant::Inputs &in,
                             unsigned char *smem) {
    if (threadIdx.x == 0 && lin::dynamic_smem_bytes() < u32(kSmemBytes))
      __trap();
    const int slice = blockIdx.x, bh = blockIdx.y;
    const int b = bh / a.heads, h = bh % a.heads;
    const int hq = h / (a.heads / a.heads_q), hk = h / (a.heads / a.heads_k);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, tq = lane % 4;
    const int m0 = (warp % L::kRowTiles) * 16, cg = warp / L::kRowTiles;
    const int srow0 = warp * L::kStateRows;
    const int seq = a.seq, vcol = slice * kVs, DV = a.slices * kVs;
    const long long BH = (long long)a.batch * a.heads;
    const long long state0 = (long long)bh * kD * DV + vcol;

    const unsigned short *qp = static_cast<const unsigned short *>(a.q) +
                               b * a.q_sb + hq * a.q_sh;
    const unsigned short *kp = static_cast<const unsigned short *>(a.k) +
                               b * a.k_sb + hk * a.k_sh;
    const unsigned short *vp = static_cast<const unsigned short *>(a.v) +
                               b * a.v_sb + h * a.v_sh + vcol;
    const unsigned short *dop = static_cast<const unsigned short *>(a.dout) +
                                b * a.do_sb + h * a.do_sh + vcol;
    unsigned short *dvp = static_cast<unsigned short *>(a.dv) + b * a.dv_sb +
                          h * a.dv_sh + vcol;

    const u32 s0 = smem_addr(smem);
    const u32 sQ = s0, sK = s0 + kOffK, sV = s0 + kOffV, sDo = s0 + kOffDo,
              sS = s0 + kOffS, stg = s0 + kOffStage;
    float *g2 = reinterpret_cast<float *>(smem + kOffF);
    float *rs = g2 + kC + 4, *wsc = rs + kC;

    auto qmod = [&](float x, int t) { return Variant::q_mod(in, x, b, h, t); };
    auto kmod = [&](float x, int t) { return Variant::k_mod(in, x, b, h, t); };
    auto vmod = [&](float x, int t) { return Variant::v_mod(in, x, b, h, t); };
    auto ident = [](float x, int) { return x; };
    auto decay_of = [&](int t) {
      float d = 0.f;
      if constexpr (Variant::kReadsDecay)
        d = a.decay[b * a.decay_sb + h * a.decay_sh + t * a.decay_ss];
      return Variant::decay_mod(in, d, b, h, t);
    };
    auto stage = [&](int t0) {
      load_tile_async<DTile, kC, kD, kThreads>(stg, qp, a.q_ss, t0, seq);
      load_tile_async<DTile, kC, kD, kThreads>(stg + kOffK, kp, a.k_ss, t0, seq);
      load_tile_async<VTile, kC, kVs, kThreads>(stg + kOffV, vp, a.v_ss, t0, seq);
      load_tile_async<VTile, kC, kVs, kThreads>(stg + kOffDo, dop, a.do_ss, t0, seq);
    };
    auto load = [&](int t0) {
      lin::mod_tile<T, DTile, kC, kD, kThreads, kStaged, Variant::kQIdentity>(
          sQ, stg, qp, a.q_ss, t0, seq, qmod);
      lin::mod_tile<T, DTile, kC, kD, kThreads, kStaged, Variant::kKIdentity>(
          sK, stg + kOffK, kp, a.k_ss, t0, seq, kmod);
      lin::mod_tile<T, VTile, kC, kVs, kThreads, kStaged, Variant::kVIdentity>(
          sV, stg + kOffV, vp, a.v_ss, t0, seq, vmod);
      lin::mod_tile<T, VTile, kC, kVs, kThreads, kStaged, true>(sDo, stg + kOffDo, dop,
                                                               a.do_ss, t0, seq, ident);
    };

    float st[L::kMT][L::kNS][4];
    lin::for_state(st, srow0, [&](int r, int c, float &x) {
      x = a.dfinal_state ? a.dfinal_state[state0 + (long long)r * DV + c] : 0.f;
    });

    const int chunks = a.chunks;
    if constexpr (kStaged) {
      stage((chunks - 1) * kC);
      cp_async_commit();
    }
    for (int n = chunks - 1; n >= 0; --n) {
      const int t0 = n * kC;
      if constexpr (kStaged)
        cp_async_wait<0>();
      __syncthreads();
      lin::chunk_decay<kC>(g2, rs, wsc, t0, seq, decay_of);
      load(t0);
      lin::store_state<T, STile, L::kMT, L::kNS>(sS, st, srow0);
      __syncthreads();
      if constexpr (kStaged) {
        if (n > 0)
          stage(t0 - kC);
        cp_async_commit();
      }

      {
        // z: this warp's part of <S_out, dS> for the decay gradient.
        const unsigned short *hp = static_cast<const unsigned short *>(a.ws_h) +
                                   ((long long)bh * chunks + n) * kD * DV + vcol;
        float z = 0.f;
#pragma unroll
        for (int i = 0; i < L::kMT; ++i)
#pragma unroll
          for (int t = 0; t < L::kNS; ++t) {
            const int r = srow0 + 16 * i + g, c = t * 8 + 2 * tq;
            const u32 h0 = *reinterpret_cast<const u32 *>(hp + (long long)r * DV + c);
            const u32 h1 = *reinterpret_cast<const u32 *>(hp + (long long)(r + 8) * DV + c);
            z += lin::lo_of<T>(h0) * st[i][t][0] + lin::hi_of<T>(h0) * st[i][t][1] +
                 lin::lo_of<T>(h1) * st[i][t][2] + lin::hi_of<T>(h1) * st[i][t][3];
          }
        z = lin::warp_sum_all(z);
        if (lane == 0)
          a.ws_z[((long long)(slice * kWarps + warp) * BH + bh) * chunks + n] = z;
      }

      {
        float acc[kNWv / 8][4];
        const int n0 = cg * kNWv;
        lin::chunk_out<T, kC, kD, kNWv, true, false, DTile, DTile, VTile, STile>(
            acc, sK, sQ, sDo, sS, g2, wsc, m0, n0);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int t = t0 + m0 + g + 8 * half;
          float cin[kNI];
#pragma unroll
          for (int i = 0; i < kNI; ++i)
            cin[i] = 0.f;
          if (t < seq) {
#pragma unroll
            for (int j = 0; j < kNWv / 8; ++j) {
              const int col = n0 + j * 8 + 2 * tq;
              const u32 raw =
                  *reinterpret_cast<const u32 *>(vp + (long long)t * a.v_ss + col);
              const float x0 = lin::lo_of<T>(raw), x1 = lin::hi_of<T>(raw);
              const float d0 = acc[j][2 * half], d1 = acc[j][2 * half + 1];
              *reinterpret_cast<u32 *>(dvp + (long long)t * a.dv_ss + col) =
                  pack2<T>(d0 * Variant::v_mod_dx(in, x0, b, h, t),
                           d1 * Variant::v_mod_dx(in, x1, b, h, t));
              if constexpr (Variant::kNumInputs > 0 && Variant::kVModReadsInputs) {
                float e0[kNI], e1[kNI];
                Variant::v_mod_din(in, x0, b, h, t, e0);
                Variant::v_mod_din(in, x1, b, h, t, e1);
#pragma unroll
                for (int i = 0; i < kNI; ++i)
                  cin[i] += d0 * e0[i] + d1 * e1[i];
              }
            }
          }
          if constexpr (Variant::kNumInputs > 0 && Variant::kVModReadsInputs) {
#pragma unroll
            for (int i = 0; i < kNI; ++i) {
              cin[i] += __shfl_xor_sync(0xffffffffu, cin[i], 1);
              cin[i] += __shfl_xor_sync(0xffffffffu, cin[i], 2);
            }
            if (t < seq && tq == 0) {
              const long long part = (long long)slice * L::kColGroups + cg;
#pragma unroll
              for (int i = 0; i < kNI; ++i)
                a.ws_vin[((part * Variant::kNumInputs + i) * BH + bh) * seq + t] = cin[i];
            }
          }
        }
      }

      {
        float acc[kNWk / 8][4];
        const int n0 = cg * kNWk;
        lin::chunk_out<T, kC, kVs, kNWk, false, false, VTile, VTile, DTile, STile>(
            acc, sV, sDo, sQ, sS, g2, wsc, m0, n0);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int t = t0 + m0 + g + 8 * half;
          if (t >= seq)
            continue;
#pragma unroll
          for (int j = 0; j < kNWk / 8; ++j) {
            const int col = n0 + j * 8 + 2 * tq;
            float *w = a.ws_dk + (((long long)slice * BH + bh) * seq + t) * kD + col;
            st_global_f2(w, acc[j][2 * half], acc[j][2 * half + 1]);
          }
        }
      }

      lin::state_update<T, kC, L::kMT, L::kNS, DTile, VTile>(st, sQ, sDo, rs, srow0,
                                                             exp2_fast(g2[kC]));
    }
    if constexpr (kStaged)
      cp_async_wait<0>();
    if (a.dinit_state)
      lin::for_state(st, srow0, [&](int r, int c, float &x) {
        a.dinit_state[state0 + (long long)r * DV + c] = x;
      });
  }
};

} // namespace attnc

#endif
