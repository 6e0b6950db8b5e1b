// linear_chunk_grads_tiles: the shared-memory layout of the chunk-gradient
// kernel (linear_chunk_grads.cuh) and the copies that fill it: one head's
// coordinates (Item), the cp.async of its tiles (dH in a group of its own
// where it lands while dq is computed), and the mods applied in place.
#ifndef ATTNC_LINEAR_CHUNK_GRADS_TILES_CUH
#define ATTNC_LINEAR_CHUNK_GRADS_TILES_CUH

#include "attnc/linear_chunk_bwd.cuh"
#include "attnc/linear_chunk_common.cuh"
#include "attnc/linear_chunk_pairs.cuh"

namespace attnc {

/// The layout and copies of LinearChunkGrads (same parameters; see there).
template <class Variant, class T, int kD, int kDV, int kVs, int kC, int kWarps,
          bool kTwoStates, bool kGrouped, int kBuffers, bool kVarlen, bool kPairs>
struct LinearGradsTiles {
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kSlices = kDV / kVs;
  static_assert(kDV % kVs == 0, "whole value slices");
  using DTile = SwizzledTile<kC, kD>;
  using VTile = SwizzledTile<kC, kVs>;
  using STile = SwizzledTile<kD, kVs>;
  using Combine = LinearCombine<Variant, T, kD, kVarlen>;
  using M = lin::Mods<Variant, kVarlen>;
  static constexpr int kE = Combine::kE;
  // q, k, v, dout, H (and dH), the raw decay.
  static constexpr int kOffK = DTile::kBytes;
  static constexpr int kOffV = 2 * DTile::kBytes;
  static constexpr int kOffDo = kOffV + VTile::kBytes;
  static constexpr int kOffS = kOffDo + VTile::kBytes;
  static constexpr int kOffDh = kTwoStates ? kOffS + STile::kBytes : kOffS;
  static constexpr int kOffDecay = kOffDh + STile::kBytes;
  static constexpr int kOffPair = kOffDecay + 4 * kC;
  /// With kPairs, the neighbour chunk's k and v (or q and dout) tiles.
  static constexpr int kTileBytes =
      kOffPair + (kPairs ? DTile::kBytes + VTile::kBytes : 0);
  /// dq and dk as fp32 rows for the per-token step, over the tiles once
  /// they are read (row_index). With one slice, two state tiles and rows
  /// that fit a state tile, dq goes over H and dk over H or dH as soon as
  /// each is done.
  static constexpr int kGradBytes = 2 * kC * kD * 4;
  static constexpr bool kRowsOverStates =
      kTwoStates && kSlices == 1 && kC * kD * 4 <= STile::kBytes;
  static_assert(!kPairs || (!kGrouped && kBuffers == 1 && kSlices == 1 && kTwoStates &&
                             kD == 16 * kWarps),
                "state pairs: the plain kernel, one slice, H and dH in a tile each, a "
                "warp's m16 tile of state rows");
  static_assert(kBuffers == 1 || (kBuffers == 2 && kGrouped && kRowsOverStates),
                "the next head's tiles are prefetched only in the grouped kernel "
                "with one slice and the rows over the state tiles");
  /// dH comes in a cp.async group of its own, waited for after dq (with a
  /// prefetch in flight a group cannot be waited for alone).
  static constexpr bool kSplitDh = kRowsOverStates && kBuffers == 1;
  static constexpr int kUsed = kTileBytes > kGradBytes ? kTileBytes : kGradBytes;
  /// One head's buffer; with two, each starts on 128 bytes.
  static constexpr int kBufBytes = kBuffers == 1 ? kUsed : (kUsed + 127) / 128 * 128;
  static constexpr int kOffF = kBuffers * kBufBytes;
  static constexpr int kSmemBytes = kOffF + 4 * (3 * kC + 4 + kWarps);
  static constexpr int kNI = Variant::kNumInputs > 0 ? Variant::kNumInputs : 1;

  /// One head's coordinates; its base pointers, and its sequence's place
  /// (seq()), are recomputed where used (kept in registers across the
  /// products, they cost spills). The base pointers start at the sequence's
  /// first token; t0 and the tokens t the mods see count from there.
  struct Item {
    int n, b, h, t0;
    /// The CTA's first head (its gradient sums start here).
    bool first = true;

    __device__ Item(const LinearArgs &, int n_, int b_, int h_)
        : n(n_), b(b_), h(h_), t0(n_ * kC) {}
    __device__ lin::Seq seq(const LinearArgs &a) const {
      return lin::seq_of<kVarlen>(a, b, h, kC);
    }
    __device__ const unsigned short *q(const LinearArgs &a) const {
      const lin::Seq s = seq(a);
      return static_cast<const unsigned short *>(a.q) + s.mb * a.q_sb +
             h / (a.heads / a.heads_q) * a.q_sh + (long long)s.tok0 * a.q_ss;
    }
    __device__ const unsigned short *k(const LinearArgs &a) const {
      const lin::Seq s = seq(a);
      return static_cast<const unsigned short *>(a.k) + s.mb * a.k_sb +
             h / (a.heads / a.heads_k) * a.k_sh + (long long)s.tok0 * a.k_ss;
    }
    __device__ const unsigned short *v(const LinearArgs &a) const {
      const lin::Seq s = seq(a);
      return static_cast<const unsigned short *>(a.v) + s.mb * a.v_sb + h * a.v_sh +
             (long long)s.tok0 * a.v_ss;
    }
    __device__ const unsigned short *dout(const LinearArgs &a) const {
      const lin::Seq s = seq(a);
      return static_cast<const unsigned short *>(a.dout) + s.mb * a.do_sb + h * a.do_sh +
             (long long)s.tok0 * a.do_ss;
    }
    /// The stored H (\p grad false) or dH of this chunk's pair
    /// (lin::pair_plan): [kD][kDV].
    __device__ const unsigned short *state(const LinearArgs &a, bool grad) const {
      const lin::PairPlan p = plan(a);
      return static_cast<const unsigned short *>(grad ? a.ws_dh : a.ws_h) +
             (seq(a).crow + (grad ? p.dh_chunk : p.h_chunk)) * kD * kDV;
    }
    __device__ lin::PairPlan plan(const LinearArgs &a) const {
      return lin::pair_plan(kPairs && a.pairs, n, seq(a).chunks);
    }
    __device__ const float *decay(const LinearArgs &a) const {
      const lin::Seq s = seq(a);
      return a.decay + s.mb * a.decay_sb + h * a.decay_sh + (long long)s.tok0 * a.decay_ss;
    }
  };

  /// cp.async of one head's tiles (value slice \p vcol) into the buffer at
  /// \p buf: one group, and with kSplitDh dH in a second.
  __device__ static void issue(const LinearArgs &a, const Item &it, u32 buf, int vcol) {
    load_tile_async<DTile, kC, kD, kThreads>(buf, it.q(a), a.q_ss, it.t0, it.seq(a).len);
    load_tile_async<DTile, kC, kD, kThreads>(buf + kOffK, it.k(a), a.k_ss, it.t0,
                                             it.seq(a).len);
    load_slice(a, it, buf, vcol, !kSplitDh);
    load_decay(a, it, buf);
    if constexpr (kPairs)
      load_neighbour(a, it, buf);
    cp_async_commit();
    if constexpr (kSplitDh) {
      // dH, in a group of its own, lands while dq is computed.
      load_tile_async<STile, kD, kVs, kThreads>(buf + kOffDh, it.state(a, true), kDV, 0,
                                                kD);
      cp_async_commit();
    }
  }

  /// cp.async of value slice \p vcol's tiles (v, dout, H and with
  /// kTwoStates and \p with_grad dH) into the layout at \p s0.
  __device__ static void load_slice(const LinearArgs &a, const Item &it, u32 s0, int vcol,
                                    bool with_grad) {
    load_tile_async<VTile, kC, kVs, kThreads>(s0 + kOffV, it.v(a) + vcol, a.v_ss, it.t0,
                                              it.seq(a).len);
    load_tile_async<VTile, kC, kVs, kThreads>(s0 + kOffDo, it.dout(a) + vcol, a.do_ss,
                                              it.t0, it.seq(a).len);
    load_tile_async<STile, kD, kVs, kThreads>(s0 + kOffS, it.state(a, false) + vcol, kDV,
                                              0, kD);
    if (kTwoStates && with_grad)
      load_tile_async<STile, kD, kVs, kThreads>(s0 + kOffDh, it.state(a, true) + vcol, kDV,
                                                0, kD);
  }

  /// cp.async of the neighbour chunk's tiles of a state pair: k and v
  /// before an odd chunk, q and dout after an even one (none without a
  /// neighbour).
  __device__ static void load_neighbour(const LinearArgs &a, const Item &it, u32 s0) {
    const lin::PairPlan p = it.plan(a);
    if (p.neighbour < 0)
      return;
    const bool fwd = p.neighbour < it.n;
    const int t0 = p.neighbour * kC, len = it.seq(a).len;
    load_tile_async<DTile, kC, kD, kThreads>(s0 + kOffPair, fwd ? it.k(a) : it.q(a),
                                             fwd ? a.k_ss : a.q_ss, t0, len);
    load_tile_async<VTile, kC, kVs, kThreads>(s0 + kOffPair + DTile::kBytes,
                                              fwd ? it.v(a) : it.dout(a),
                                              fwd ? a.v_ss : a.do_ss, t0, len);
  }

  /// cp.async of the chunk's raw decay by warp 0, each lane the tokens
  /// chunk_decay has it read: its own copies are visible to it after the
  /// wait, with no barrier.
  __device__ static void load_decay(const LinearArgs &a, const Item &it, u32 s0) {
    if constexpr (Variant::kReadsDecay) {
      constexpr int E = kC / 32;
      if (threadIdx.x < 32)
#pragma unroll
        for (int e = 0; e < E; ++e) {
          const int r = threadIdx.x * E + e, t = it.t0 + r;
          cp_async_4(s0 + kOffDecay + 4 * r,
                     t < it.seq(a).len ? it.decay(a) + (long long)t * a.decay_ss : it.decay(a),
                     t < it.seq(a).len);
        }
    }
  }

  /// The mods of q, k and v (slice \p vcol) in place on the tiles at \p
  /// s0, after their copies landed: each thread on the chunks it copied
  /// itself (load_tile_async and mod_tile split a tile alike), so no
  /// barrier separates the copy and the mod.
  __device__ static void mod_tiles(const LinearArgs &a, const typename Variant::Inputs &in,
                                   const Item &it, u32 s0, int vcol) {
    if constexpr (!Variant::kQIdentity)
      lin::mod_tile<T, DTile, kC, kD, kThreads, true, false>(
          s0, s0, it.q(a), a.q_ss, it.t0, it.seq(a).len, [&](float x, int t) {
            return M::q_mod(in, x, it.seq(a).mb, it.h, t, it.seq(a).tok0 + t);
          });
    if constexpr (!Variant::kKIdentity)
      lin::mod_tile<T, DTile, kC, kD, kThreads, true, false>(
          s0 + kOffK, s0 + kOffK, it.k(a), a.k_ss, it.t0, it.seq(a).len, [&](float x, int t) {
            return M::k_mod(in, x, it.seq(a).mb, it.h, t, it.seq(a).tok0 + t);
          });
    if constexpr (!Variant::kVIdentity)
      lin::mod_tile<T, VTile, kC, kVs, kThreads, true, false>(
          s0 + kOffV, s0 + kOffV, it.v(a) + vcol, a.v_ss, it.t0, it.seq(a).len,
          [&](float x, int t) { return M::v_mod(in, x, it.seq(a).mb, it.h, t, it.seq(a).tok0 + t); });
  }
};

} // namespace attnc

#endif
