// linear_chunk_scan: the chunked linear-attention forward. One CTA per (value
// slice, batch·value head) walks the chunks in order carrying the fp32 state
// S (D x slice) in registers, each warp owning whole m16 tiles of its rows.
// Per chunk the q/k/v tiles are loaded with the generated mods applied
// (from a cp.async staging copy of the next chunk when it fits), warp 0
// scans the chunk's log-decays, and each warp computes its rows of
//   out = diag(exp G)·(Q·S) + ((Q·Kᵀ) ⊙ D)·V,   D_ij = exp(G_i − G_j), i ≥ j
// then its rows of S ← exp(G_last)·S + (diag(exp(G_last − G))·K)ᵀ·V.
// The backward is linear_chunk_states plus linear_chunk_grads.
#ifndef ATTNC_LINEAR_CHUNK_SCAN_CUH
#define ATTNC_LINEAR_CHUNK_SCAN_CUH

#include "attnc/linear_chunk_common.cuh"
#include "attnc/linear_chunk_seq.cuh"

namespace attnc {

/// Warp layout of the forward: kC / 16 row tiles of the chunk, the
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

/// With kVarlen a packed batch (a.cu_seqlens): CTA (slice, r·H + h) takes
/// row r's job (lin::seq_job): sequence b, tokens [cu[b], cu[b+1]) of batch
/// row 0, whole or one of two segments of its chunks (the second walks the
/// first's chunks for the state alone), its chunks never crossing into the
/// next sequence; the Variant's mods then take the packed token as a sixth
/// argument (custom inputs and the decay are read there) and see batch 0
/// and t counted from the sequence's start.
template <class Variant, class T, int kD, int kVs, int kC, int kWarps, bool kStaged,
          bool kVarlen = false>
struct LinearScan {
  using L = LinLayout<kD, kVs, kC, kWarps>;
  static constexpr int kThreads = L::kThreads;
  static constexpr int kNW = kVs / L::kColGroups;
  static_assert(kVs % L::kColGroups == 0 && kNW % 16 == 0,
                "each column group owns a multiple of 16 output columns");
  using DTile = typename L::DTile;
  using VTile = typename L::VTile;
  using STile = typename L::STile;
  static constexpr int kOffB = DTile::kBytes;
  static constexpr int kOffVal = kOffB + DTile::kBytes;
  static constexpr int kTileBytes = kOffVal + VTile::kBytes;
  static constexpr int kOffS = kTileBytes;
  static constexpr int kOffStage = kOffS + STile::kBytes;
  static constexpr int kOffF = kOffStage + (kStaged ? kTileBytes : 0);
  static constexpr int kSmemBytes = kOffF + 4 * (3 * kC + 4);

  __device__ static void run(const LinearArgs &a, const typename Variant::Inputs &in,
                             unsigned char *smem) {
    if (threadIdx.x == 0 && lin::dynamic_smem_bytes() < u32(kSmemBytes))
      __trap();
    const int slice = blockIdx.x, h = blockIdx.y % a.heads;
    int b = blockIdx.y / a.heads;
    // This CTA writes the outputs of chunks [n_out, n_end) after walking
    // [0, n_out) for the state alone, and the final state when it owns it.
    int part = 0;
    if constexpr (kVarlen) {
      const lin::SeqJob j = lin::seq_job(a, b, kC, reinterpret_cast<int *>(smem));
      if (j.b < 0)
        return; // a row no sequence needed
      b = j.b;
      part = j.part;
    }
    const int bh = b * a.heads + h;
    const int hq = h / (a.heads / a.heads_q), hk = h / (a.heads / a.heads_k);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, tq = lane % 4;
    const int m0 = (warp % L::kRowTiles) * 16, n0 = (warp / L::kRowTiles) * kNW;
    const int srow0 = warp * L::kStateRows;
    const int vcol = slice * kVs, DV = a.slices * kVs;
    const long long state0 = (long long)bh * kD * DV + vcol;
    // mb: the batch row of the tokens (and the mods' b); tok0: the first.
    int seq = a.seq, chunks = a.chunks, mb = b, tok0 = 0;
    if constexpr (kVarlen) {
      tok0 = a.cu_seqlens[b];
      seq = a.cu_seqlens[b + 1] - tok0;
      chunks = (seq + kC - 1) / kC;
      mb = 0;
    }
    int n_out = 0, n_end = chunks;
    if (part == 1)
      n_end = lin::split_chunk(chunks);
    else if (part == 2)
      n_out = lin::split_chunk(chunks);
    const bool owns_final = part != 1;

    const unsigned short *qp = static_cast<const unsigned short *>(a.q) +
                               mb * a.q_sb + hq * a.q_sh + (long long)tok0 * a.q_ss;
    const unsigned short *kp = static_cast<const unsigned short *>(a.k) +
                               mb * a.k_sb + hk * a.k_sh + (long long)tok0 * a.k_ss;
    const unsigned short *vp = static_cast<const unsigned short *>(a.v) +
                               mb * a.v_sb + h * a.v_sh + (long long)tok0 * a.v_ss + vcol;

    const u32 s0 = smem_addr(smem);
    const u32 sQ = s0, sK = s0 + kOffB, sV = s0 + kOffVal, sS = s0 + kOffS;
    const u32 stg = s0 + kOffStage;
    float *g2 = reinterpret_cast<float *>(smem + kOffF);
    float *rs = g2 + kC + 4, *wsc = rs + kC;

    auto qmod = [&](float x, int t) {
      if constexpr (kVarlen)
        return Variant::q_mod(in, x, mb, h, t, tok0 + t);
      else
        return Variant::q_mod(in, x, b, h, t);
    };
    auto kmod = [&](float x, int t) {
      if constexpr (kVarlen)
        return Variant::k_mod(in, x, mb, h, t, tok0 + t);
      else
        return Variant::k_mod(in, x, b, h, t);
    };
    auto vmod = [&](float x, int t) {
      if constexpr (kVarlen)
        return Variant::v_mod(in, x, mb, h, t, tok0 + t);
      else
        return Variant::v_mod(in, x, b, h, t);
    };
    auto decay_of = [&](int t) {
      if constexpr (kVarlen) {
        float d = 0.f;
        if constexpr (Variant::kReadsDecay)
          d = a.decay[h * a.decay_sh + (long long)(tok0 + t) * a.decay_ss];
        return Variant::decay_mod(in, d, mb, h, t, tok0 + t);
      } else {
        return lin::token_decay<Variant>(a, in, b, h, t);
      }
    };
    // A state-only chunk (\p with_q false) needs k and v alone.
    auto stage = [&](int t0, bool with_q) {
      if (with_q)
        load_tile_async<DTile, kC, kD, kThreads>(stg, qp, a.q_ss, t0, seq);
      load_tile_async<DTile, kC, kD, kThreads>(stg + kOffB, kp, a.k_ss, t0, seq);
      load_tile_async<VTile, kC, kVs, kThreads>(stg + kOffVal, vp, a.v_ss, t0, seq);
    };
    auto load = [&](int t0, bool with_q) {
      if (with_q)
        lin::mod_tile<T, DTile, kC, kD, kThreads, kStaged, Variant::kQIdentity>(
            sQ, stg, qp, a.q_ss, t0, seq, qmod);
      lin::mod_tile<T, DTile, kC, kD, kThreads, kStaged, Variant::kKIdentity>(
          sK, stg + kOffB, kp, a.k_ss, t0, seq, kmod);
      lin::mod_tile<T, VTile, kC, kVs, kThreads, kStaged, Variant::kVIdentity>(
          sV, stg + kOffVal, vp, a.v_ss, t0, seq, vmod);
    };

    float st[L::kMT][L::kNS][4];
    lin::for_state(st, srow0, [&](int r, int c, float &x) {
      x = a.init_state ? a.init_state[state0 + (long long)r * DV + c] : 0.f;
    });

    // The chunk's log-decays (warp 0) are loaded a chunk ahead: issued
    // before this chunk's products, so that their latency (and that of the
    // custom inputs decay_mod and v_mod read, e.g. mamba2's dt, then in L1)
    // is no longer paid at the top of every chunk of the walk.
    float dec[kC / 32];
    lin::chunk_decay_load<kC>(dec, 0, seq, decay_of);
    if constexpr (kStaged) {
      stage(0, n_out == 0);
      cp_async_commit();
    }
    // Chunk n's decays and tiles (q only when \p with_q) in place.
    auto arrive = [&](int n, bool with_q) {
      if constexpr (kStaged)
        cp_async_wait<0>();
      __syncthreads(); // staging landed; the previous chunk's reads are done
      lin::chunk_decay_scan<kC>(g2, rs, wsc, dec);
      load(n * kC, with_q);
    };
    // Chunk n + 1's copies and decay loads issued (after the barrier that
    // follows chunk n's loads from the staging tiles).
    auto ahead = [&](int n) {
      if constexpr (kStaged) {
        if (n + 1 < n_end)
          stage((n + 1) * kC, n + 1 >= n_out);
        cp_async_commit();
      }
      if (n + 1 < n_end)
        lin::chunk_decay_load<kC>(dec, (n + 1) * kC, seq, decay_of);
    };
    // A split sequence's second part: the first part's chunks for the state
    // alone, in a loop of its own so that the full walk's registers stay
    // those of the unsplit kernel.
    for (int n = 0; n < n_out; ++n) {
      arrive(n, false);
      __syncthreads();
      ahead(n);
      lin::state_update<T, kC, L::kMT, L::kNS, DTile, VTile>(st, sK, sV, wsc, srow0,
                                                             exp2_fast(g2[kC]));
    }
    for (int n = n_out; n < n_end; ++n) {
      const int t0 = n * kC;
      arrive(n, true);
      lin::store_state<T, STile, L::kMT, L::kNS>(sS, st, srow0);
      __syncthreads();
      ahead(n);

      float acc[kNW / 8][4];
      lin::chunk_out<T, kC, kD, kNW, true, true, DTile, DTile, VTile, STile>(
          acc, sQ, sK, sV, sS, g2, rs, m0, n0);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int t = t0 + m0 + g + 8 * half;
        if (t >= seq)
          continue;
#pragma unroll
        for (int j = 0; j < kNW / 8; ++j) {
          const int col = n0 + j * 8 + 2 * tq;
          unsigned short *o = static_cast<unsigned short *>(a.o) + mb * a.o_sb +
                              h * a.o_sh + (long long)(tok0 + t) * a.o_ss + vcol + col;
          *reinterpret_cast<u32 *>(o) = pack2<T>(acc[j][2 * half], acc[j][2 * half + 1]);
        }
      }

      lin::state_update<T, kC, L::kMT, L::kNS, DTile, VTile>(st, sK, sV, wsc, srow0,
                                                             exp2_fast(g2[kC]));
    }
    if constexpr (kStaged)
      cp_async_wait<0>();
    if (a.final_state && owns_final)
      lin::for_state(st, srow0, [&](int r, int c, float &x) {
        a.final_state[state0 + (long long)r * DV + c] = x;
      });
  }
};

} // namespace attnc

#endif
