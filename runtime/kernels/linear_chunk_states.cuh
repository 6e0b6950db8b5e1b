// linear_chunk_states: the backward's two state passes, in one launch. A
// forward CTA carries the state S and writes, per chunk, the state before
// the chunk (ws_h); a reverse CTA carries dS, the gradient of the state,
// and writes, per chunk, the gradient of the state after it (ws_dh), then
// dinit_state. With state pairs (a.pairs) only H before even chunks and dH
// after odd ones and the last are written (linear_chunk_grads.cuh). Each CTA owns kRows of the D state rows and one value slice,
// so the passes spread over D / kRows × slices × batch·heads × 2 CTAs; the
// per-chunk gradients (linear_chunk_grads) then run in parallel over chunks.
#ifndef ATTNC_LINEAR_CHUNK_STATES_CUH
#define ATTNC_LINEAR_CHUNK_STATES_CUH

#include "attnc/linear_chunk_common.cuh"
#include "attnc/linear_chunk_seq.cuh"

namespace attnc {

/// blockIdx: x the value slice, y batch·value head, z in [0, P) the forward
/// pass over state rows [z·kRows, (z+1)·kRows), z in [P, 2P) the reverse
/// pass over rows of part z − P (P = D / kRows). kVarlen: y is sequence·value
/// head of a packed batch (linear_chunk_seq.cuh), its chunks never crossing
/// the sequence's end; with at most kLongestFirstMaxSeqs sequences the
/// (y, z) CTAs take the (sequence, head, part) jobs longest sequence first
/// instead (lin::state_job).
template <class Variant, class T, int kRows, int kVs, int kC, int kWarps,
          bool kVarlen = false>
struct LinearStates {
  static constexpr int kD = Variant::kHeadDim;
  static constexpr int kParts = kD / kRows;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kStateRows = kRows / kWarps;
  static_assert(kD % kRows == 0, "the row parts tile head_dim");
  static_assert(kRows % kWarps == 0 && kStateRows % 16 == 0,
                "each warp owns whole m16 tiles of state rows");
  static constexpr int kMT = kStateRows / 16;
  static constexpr int kNS = kVs / 8;
  using ATile = SwizzledTile<kC, kRows>; // k (forward) or q (reverse) columns
  using VTile = SwizzledTile<kC, kVs>;   // v (forward) or dout (reverse)
  using STile = SwizzledTile<kRows, kVs>;
  static constexpr int kOffVal = ATile::kBytes;
  static constexpr int kTileBytes = kOffVal + VTile::kBytes;
  static constexpr int kOffStage = kTileBytes;
  static constexpr int kOffS = 2 * kTileBytes;
  static constexpr int kOffF = kOffS + STile::kBytes;
  static constexpr int kSmemBytes = kOffF + 4 * (3 * kC + 4);
  static_assert(kSmemBytes >= 2 * 4 * lin::kLongestFirstMaxSeqs,
                "the longest-first ranking fits the shared memory");

  __device__ static void run(const LinearArgs &a, const typename Variant::Inputs &in,
                             unsigned char *smem) {
    if (threadIdx.x == 0 && lin::dynamic_smem_bytes() < u32(kSmemBytes))
      __trap();
    int bh = blockIdx.y, z = blockIdx.z;
    if (kVarlen && a.seqs <= lin::kLongestFirstMaxSeqs) {
      // The longest sequences' CTAs first (lin::state_job): in the given
      // order the longest ones could start in the last wave and set the
      // call's time. Only which CTA walks what changes, not the bits.
      const lin::StateJob j =
          lin::state_job(blockIdx.y + (long long)gridDim.y * blockIdx.z, a.heads, 2 * kParts);
      bh = lin::seq_of_rank(a, j.rank, reinterpret_cast<int *>(smem)) * a.heads + j.h;
      z = j.z;
    }
    if (z < kParts)
      walk<false>(a, in, smem, bh, z);
    else
      walk<true>(a, in, smem, bh, z - kParts);
  }

private:
  template <bool kReverse>
  __device__ static void walk(const LinearArgs &a, const typename Variant::Inputs &in,
                              unsigned char *smem, int bh, int part) {
    const int slice = blockIdx.x;
    const int b = bh / a.heads, h = bh % a.heads;
    const int hq = h / (a.heads / a.heads_q), hk = h / (a.heads / a.heads_k);
    const int warp = threadIdx.x / 32;
    const int srow0 = warp * kStateRows, d0 = part * kRows;
    const lin::Seq sq = lin::seq_of<kVarlen>(a, b, h, kC);
    const int seq = sq.len, vcol = slice * kVs, DV = a.slices * kVs;
    const int chunks = sq.chunks;
    using M = lin::Mods<Variant, kVarlen>;
    const long long state0 = (long long)bh * kD * DV + (long long)d0 * DV + vcol;

    // Forward: S ← exp(G_last)·S + (diag(w)·K)ᵀ·V. Reverse: dS ←
    // exp(G_last)·dS + (diag(exp G)·Q)ᵀ·dO.
    const unsigned short *ap =
        kReverse ? static_cast<const unsigned short *>(a.q) + sq.mb * a.q_sb + hq * a.q_sh
                 : static_cast<const unsigned short *>(a.k) + sq.mb * a.k_sb + hk * a.k_sh;
    const long long a_ss = kReverse ? a.q_ss : a.k_ss;
    ap += d0 + (long long)sq.tok0 * a_ss;
    const unsigned short *valp =
        kReverse ? static_cast<const unsigned short *>(a.dout) + sq.mb * a.do_sb + h * a.do_sh
                 : static_cast<const unsigned short *>(a.v) + sq.mb * a.v_sb + h * a.v_sh;
    const long long val_ss = kReverse ? a.do_ss : a.v_ss;
    valp += vcol + (long long)sq.tok0 * val_ss;
    unsigned short *outp = static_cast<unsigned short *>(kReverse ? a.ws_dh : a.ws_h) +
                           sq.crow * kD * DV + (long long)d0 * DV + vcol;

    const u32 s0 = smem_addr(smem);
    const u32 sA = s0, sVal = s0 + kOffVal, stg = s0 + kOffStage, sS = s0 + kOffS;
    float *g2 = reinterpret_cast<float *>(smem + kOffF);
    float *rs = g2 + kC + 4, *wsc = rs + kC;

    auto amod = [&](float x, int t) {
      return kReverse ? M::q_mod(in, x, sq.mb, h, t, sq.tok0 + t)
                      : M::k_mod(in, x, sq.mb, h, t, sq.tok0 + t);
    };
    auto valmod = [&](float x, int t) {
      return kReverse ? x : M::v_mod(in, x, sq.mb, h, t, sq.tok0 + t);
    };
    auto decay_of = [&](int t) { return lin::seq_decay<Variant, kVarlen>(a, in, sq, h, t); };
    auto stage = [&](int t0) {
      load_tile_async<ATile, kC, kRows, kThreads>(stg, ap, a_ss, t0, seq);
      load_tile_async<VTile, kC, kVs, kThreads>(stg + kOffVal, valp, val_ss, t0, seq);
    };
    constexpr bool kAIdentity = kReverse ? Variant::kQIdentity : Variant::kKIdentity;
    constexpr bool kValIdentity = kReverse ? true : Variant::kVIdentity;

    float st[kMT][kNS][4];
    const float *start = kReverse ? a.dfinal_state : a.init_state;
    lin::for_state(st, srow0, [&](int r, int c, float &x) {
      x = start ? start[state0 + (long long)r * DV + c] : 0.f;
    });
    if (kVarlen && chunks == 0) {
      // An empty sequence: its initial state's gradient is the final one's.
      if (kReverse && a.dinit_state)
        lin::for_state(st, srow0, [&](int r, int c, float &x) {
          a.dinit_state[state0 + (long long)r * DV + c] = x;
        });
      return;
    }

    // The forward never needs the state after the last chunk; the reverse
    // needs the gradient before the first only for dinit_state.
    const int updates = kReverse && a.dinit_state ? chunks : chunks - 1;
    // The log-decays are loaded a chunk ahead (warp 0), as in the forward
    // scan: their latency is then not paid at the top of every chunk.
    float dec[kC / 32];
    lin::chunk_decay_load<kC>(dec, (kReverse ? chunks - 1 : 0) * kC, seq, decay_of);
    stage((kReverse ? chunks - 1 : 0) * kC);
    cp_async_commit();
    for (int i = 0; i < chunks; ++i) {
      const int n = kReverse ? chunks - 1 - i : i;
      const int t0 = n * kC;
      cp_async_wait<0>();
      __syncthreads(); // staging landed; the previous chunk's reads are done
      lin::chunk_decay_scan<kC>(g2, rs, wsc, dec);
      lin::mod_tile<T, ATile, kC, kRows, kThreads, true, kAIdentity>(sA, stg, ap, a_ss, t0,
                                                                    seq, amod);
      lin::mod_tile<T, VTile, kC, kVs, kThreads, true, kValIdentity>(sVal, stg + kOffVal,
                                                                    valp, val_ss, t0, seq,
                                                                    valmod);
      // State pairs (a.pairs): H before even chunks only, dH after odd
      // chunks and the last; the chunk gradients recompute the others.
      const bool keep = !a.pairs || (kReverse ? (n & 1) || n == chunks - 1 : !(n & 1));
      if (keep)
        write_rows(outp + (long long)n * kD * DV, DV, sS, st, srow0);
      __syncthreads();
      if (i + 1 < chunks)
        stage((kReverse ? n - 1 : n + 1) * kC);
      cp_async_commit();
      if (i + 1 < chunks)
        lin::chunk_decay_load<kC>(dec, (kReverse ? n - 1 : n + 1) * kC, seq, decay_of);
      if (i < updates)
        lin::state_update<T, kC, kMT, kNS, ATile, VTile>(st, sA, sVal, kReverse ? rs : wsc,
                                                         srow0, exp2_fast(g2[kC]));
    }
    cp_async_wait<0>();
    if (kReverse && a.dinit_state)
      lin::for_state(st, srow0, [&](int r, int c, float &x) {
        a.dinit_state[state0 + (long long)r * DV + c] = x;
      });
  }

  /// This warp's rows of the state, rounded to T, to global rows of
  /// \p stride elements: through the warp's rows of the swizzled tile at
  /// \p s, so that each row goes out in whole 16-byte chunks.
  __device__ static void write_rows(unsigned short *dst, int stride, u32 s,
                                    const float (&st)[kMT][kNS][4], int srow0) {
    lin::store_state<T, STile, kMT, kNS>(s, st, srow0);
    __syncwarp();
    constexpr int kChunks = kVs / 8;
    constexpr int kPerLane = kStateRows * kChunks / 32;
    static_assert(kStateRows * kChunks % 32 == 0, "the lanes split the rows' chunks");
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int it = 0; it < kPerLane; ++it) {
      const int i = lane + 32 * it;
      const int r = srow0 + i / kChunks, c = i % kChunks;
      const lin::U4 v = lin::ld_shared_16(s + STile::offset(r, c));
      lin::st_global_16(dst + (long long)r * stride + c * 8, v);
    }
  }
};

} // namespace attnc

#endif
