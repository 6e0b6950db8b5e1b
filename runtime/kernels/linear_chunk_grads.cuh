// linear_chunk_grads: the backward's per-chunk gradients, every chunk in
// parallel. A CTA takes one chunk of one value head, or (kGrouped, where q
// or k heads are shared) of each value head of a sub-group in turn. Per
// head it reads the chunk's q, k (modded), and per value slice v, dout, the
// state before the chunk H (ws_h) and the gradient of the state after it dH
// (ws_dh, both from linear_chunk_states), and computes
//   dq += diag(exp G)·(dO·Hᵀ) + ((dO·Vᵀ) ⊙ D)·K
//   dv  = diag(w)·(K·dH) + ((K·Qᵀ) ⊙ Dᵀ)·dO       (w_j = exp(G_last − G_j))
//   dk += diag(w)·(V·dHᵀ) + ((V·dOᵀ) ⊙ Dᵀ)·Q
//   z  += exp(G_last)·<H, dH> + Σ_j k_j·dk_inter_j  (= <S_out, dH>)
// dv goes through v_mod's derivative to the raw dv. dq and dk go to shared
// memory as fp32 rows (over the state tiles as soon as each is done, where
// they fit) for the per-token step (LinearCombine), whose raw q and k
// gradients are written, or where heads share a q (k) head summed over the
// CTA's heads in head order in fp32 (ws_gq, ws_gk: a partial per sub-group
// of heads, added up by linear_partial_reduce). z goes to ws_z for the
// decay gradient. With several value slices a CTA takes one (blockIdx.z)
// and writes partial sums of dq, dk (ws_dq, ws_dk) and z instead; the
// per-token step is then LinearSliceCombine's. With state pairs (kPairs and
// a.pairs) one of H and dH is recomputed from the neighbour chunk's tiles
// (linear_chunk_pairs.cuh).
#ifndef ATTNC_LINEAR_CHUNK_GRADS_CUH
#define ATTNC_LINEAR_CHUNK_GRADS_CUH

#include "attnc/linear_chunk_bwd.cuh"
#include "attnc/linear_chunk_common.cuh"
#include "attnc/linear_chunk_pairs.cuh"

namespace attnc {

/// blockIdx: x the chunk; y batch·value head, or with kGrouped batch·(sub-
/// group of a.group_heads value heads, all sharing one q and one k head).
/// kC / 16 row tiles of the chunk; the warps split over them and then over
/// kGroups column groups. With kTwoStates, H and dH have a tile each; else
/// dH replaces H in one tile after dq (the layout that fits the smaller
/// shared memories). kBuffers = 2 (grouped only): the next head's tiles
/// load into a second buffer while this head is computed. kVarlen: x is a
/// packed batch's chunk slot (linear_chunk_seq.cuh); a CTA whose slot is
/// past its sequence's chunks has no work. kPairs: the layout has room for
/// a neighbour chunk's two tiles, and a.pairs turns the state pairs on.
template <class Variant, class T, int kD, int kDV, int kVs, int kC, int kWarps,
          bool kTwoStates, bool kGrouped, int kBuffers, bool kVarlen = false,
          bool kPairs = false>
struct LinearChunkGrads {
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kSlices = kDV / kVs;
  static_assert(kDV % kVs == 0, "whole value slices");
  static constexpr int kRowTiles = kC / 16;
  static_assert(kC % 32 == 0 && kC <= 128, "chunk sizes are 32, 64 or 128 tokens");
  static_assert(kWarps % kRowTiles == 0,
                "the warps must split the chunk's m16 row tiles evenly");
  static constexpr int kGroups = kWarps / kRowTiles;
  static constexpr int kNWv = kVs / kGroups, kNWk = kD / kGroups;
  static_assert(kVs % kGroups == 0 && kNWv % 16 == 0 && kD % kGroups == 0 &&
                    kNWk % 16 == 0,
                "each column group owns a multiple of 16 columns of dv and dq/dk");
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

  __device__ static void run(const LinearArgs &a, const typename Variant::Inputs &in,
                             unsigned char *smem) {
    if (threadIdx.x == 0 && lin::dynamic_smem_bytes() < u32(kSmemBytes))
      __trap();
    int n = blockIdx.x;
    // With several value slices each CTA takes one (blockIdx.z) and writes
    // partial sums; attnc_linear_bwd_combine does the per-token step.
    const int vcol0 = kSlices > 1 ? blockIdx.z * kVs : 0;
    const int group = kGrouped && kSlices == 1 ? a.group_heads : 1;
    int b = blockIdx.y / (a.heads / group);
    const int h0 = blockIdx.y % (a.heads / group) * group;
    if constexpr (kVarlen) {
      b = lin::seq_of_slot(a, n, kC);
      const int tok0 = a.cu_seqlens[b];
      n -= tok0 / kC + b;
      if (n * kC >= a.cu_seqlens[b + 1] - tok0)
        return; // a slot between two sequences' chunks
    }
    const u32 s0 = smem_addr(smem);
    float *g2 = reinterpret_cast<float *>(smem + kOffF);

    // Every tile arrives by cp.async (rows past the sequence as zeros); the
    // mods are applied in place afterwards, each thread on the chunks it
    // copied itself (load_tile_async and mod_tile split a tile alike), so
    // no barrier separates the two.
    auto issue = [&](const Item &it, u32 buf) {
      load_tile_async<DTile, kC, kD, kThreads>(buf, it.q(a), a.q_ss, it.t0, it.seq(a).len);
      load_tile_async<DTile, kC, kD, kThreads>(buf + kOffK, it.k(a), a.k_ss, it.t0,
                                               it.seq(a).len);
      load_slice(a, it, buf, vcol0, !kSplitDh);
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
    };
    issue(Item(a, n, b, h0), s0);
    for (int h = h0, i = 0; h < h0 + group; ++h, ++i) {
      Item it(a, n, b, h);
      it.first = h == h0;
      const int off = kBuffers == 2 ? (i & 1) * kBufBytes : 0;
      const u32 buf = s0 + off;
      if (kBuffers == 1 && h > h0) {
        __syncthreads(); // the previous head's per-token step has read the rows
        issue(it, buf);
      }
      if constexpr (kSplitDh)
        cp_async_wait<1>();
      else
        cp_async_wait<0>();
      if constexpr (!Variant::kQIdentity)
        lin::mod_tile<T, DTile, kC, kD, kThreads, true, false>(
            buf, buf, it.q(a), a.q_ss, it.t0, it.seq(a).len, [&](float x, int t) {
              return M::q_mod(in, x, it.seq(a).mb, it.h, t, it.seq(a).tok0 + t);
            });
      if constexpr (!Variant::kKIdentity)
        lin::mod_tile<T, DTile, kC, kD, kThreads, true, false>(
            buf + kOffK, buf + kOffK, it.k(a), a.k_ss, it.t0, it.seq(a).len, [&](float x, int t) {
              return M::k_mod(in, x, it.seq(a).mb, it.h, t, it.seq(a).tok0 + t);
            });
      mod_v(in, it, buf, vcol0, a);
      if constexpr (kPairs)
        lin::pair_state<Variant, T, kVarlen, kC, kD, kVs, kThreads, DTile, VTile, STile>(
            a, in, it.seq(a), it.h, it.plan(a), buf + kOffPair, buf + kOffPair + DTile::kBytes,
            buf + kOffS, buf + kOffDh, g2);
      const float *raw_decay = reinterpret_cast<const float *>(smem + off + kOffDecay);
      lin::chunk_decay<kC>(g2, g2 + kC + 4, g2 + 2 * kC + 4, it.t0, it.seq(a).len, [&](int t) {
        return M::decay_mod(in, Variant::kReadsDecay ? raw_decay[t - it.t0] : 0.f, it.seq(a).mb,
                            it.h, t, it.seq(a).tok0 + t);
      });
      __syncthreads(); // this head's tiles are visible; the other buffer's
                       // head (the previous one) is done
      if (kBuffers == 2 && h + 1 < h0 + group) {
        issue(Item(a, n, b, h + 1), s0 + ((i + 1) & 1) * kBufBytes);
      }
      compute(a, in, it, buf, reinterpret_cast<float *>(smem + off), g2, vcol0);
    }
  }

private:
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

  /// v_mod in place on the v tile of slice \p vcol (after its copy landed).
  __device__ static void mod_v(const typename Variant::Inputs &in, const Item &it, u32 s0,
                               int vcol, const LinearArgs &a) {
    if constexpr (!Variant::kVIdentity)
      lin::mod_tile<T, VTile, kC, kVs, kThreads, true, false>(
          s0 + kOffV, s0 + kOffV, it.v(a) + vcol, a.v_ss, it.t0, it.seq(a).len,
          [&](float x, int t) { return M::v_mod(in, x, it.seq(a).mb, it.h, t, it.seq(a).tok0 + t); });
  }

  /// One head's chunk, its tiles (of the slice at value column \p vcol0)
  /// in place at \p s0 (\p rows its generic address): dq, dv, dk and z,
  /// then the per-token step; with several slices partial sums of dq, dk
  /// and z instead.
  __device__ static void compute(const LinearArgs &a, const typename Variant::Inputs &in,
                                 const Item &it, u32 s0, float *rows, const float *g2,
                                 int vcol0) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, tq = lane % 4;
    const int m0 = (warp % kRowTiles) * 16, cg = warp / kRowTiles;
    const float *rs = g2 + kC + 4, *wsc = rs + kC;
    float *zpart = const_cast<float *>(g2) + 3 * kC + 4;
    const u32 sQ = s0, sK = s0 + kOffK, sV = s0 + kOffV, sDo = s0 + kOffDo,
              sS = s0 + kOffS, sDh = s0 + kOffDh;

    // The three products of a slice whose tiles are in place.
    auto dq_product = [&](float (&acc)[kNWk / 8][4]) {
      lin::chunk_out<T, kC, kVs, kNWk, false, true, VTile, VTile, DTile, STile>(
          acc, sDo, sV, sK, sS, g2, rs, m0, cg * kNWk);
    };
    auto dv_product = [&](int vcol, int s) {
      float acc[kNWv / 8][4];
      const int n0 = cg * kNWv;
      lin::chunk_out<T, kC, kD, kNWv, true, false, DTile, DTile, VTile, STile>(
          acc, sK, sQ, sDo, sDh, g2, wsc, m0, n0);
      unsigned short *dvp = static_cast<unsigned short *>(a.dv) + it.seq(a).mb * a.dv_sb +
                            it.h * a.dv_sh + (long long)it.seq(a).tok0 * a.dv_ss + vcol;
      write_dv(a, in, acc, it.v(a) + vcol, dvp, it, it.t0 + m0 + g, n0, s * kGroups + cg);
    };
    // dk, and Σ_j k_j·dk_inter_j over this warp's rows and columns.
    auto dk_product = [&](float (&acc)[kNWk / 8][4], float &z_keys) {
      const int n0 = cg * kNWk;
      auto keys = [&](const float (&inter)[kNWk / 8][4]) {
#pragma unroll
        for (int j = 0; j < kNWk / 8; ++j)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int r = m0 + g + 8 * half;
            u32 kw;
            asm volatile("ld.shared.u32 %0, [%1];\n"
                         : "=r"(kw)
                         : "r"(sK + DTile::offset(r, n0 / 8 + j) + 4 * tq));
            z_keys += lin::lo_of<T>(kw) * inter[j][2 * half] +
                      lin::hi_of<T>(kw) * inter[j][2 * half + 1];
          }
      };
      lin::chunk_out<T, kC, kVs, kNWk, false, false, VTile, VTile, DTile, STile>(
          acc, sV, sDo, sQ, sDh, g2, wsc, m0, n0, keys);
    };

    float z_state = 0.f, z_keys = 0.f; // <H, dH> and Σ k·dk_inter
    float *dqs = nullptr, *dks = nullptr; // the fp32 rows of the per-token step
    if constexpr (kRowsOverStates) {
      // dq, then dk, goes to shared memory as soon as it is done, over a
      // state tile no longer read: one product's accumulators are live at a
      // time. dk goes after dq over H where both fit, else over dH once
      // every warp has read it.
      constexpr bool kDkOverH = 2 * kC * kD * 4 <= STile::kBytes;
      dqs = rows + kOffS / 4;
      dks = kDkOverH ? dqs + kC * kD : rows + kOffDh / 4;
      {
        float acc[kNWk / 8][4];
        dq_product(acc);
        if constexpr (kSplitDh)
          cp_async_wait<0>(); // this thread's dH chunks: state_dot reads only those
        z_state = state_dot(sS, sDh);
        __syncthreads(); // every warp has read H; dH is visible to all
        store_rows(dqs, acc, m0, cg * kNWk);
      }
      dv_product(0, 0);
      {
        float acc[kNWk / 8][4];
        dk_product(acc, z_keys);
        if constexpr (!kDkOverH)
          __syncthreads(); // every warp has read dH
        store_rows(dks, acc, m0, cg * kNWk);
      }
      const float zw = lin::warp_sum_all(exp2_fast(g2[kC]) * z_state + z_keys);
      if (lane == 0)
        zpart[warp] = zw;
    } else if constexpr (kSlices > 1) {
      // This CTA's slice: dq and dk partial sums over its columns of v.
      const int slice = vcol0 / kVs;
      {
        float acc[kNWk / 8][4];
        dq_product(acc);
        store_partial(a, a.ws_dq, acc, slice, it, m0, cg * kNWk);
      }
      if constexpr (kTwoStates) {
        z_state = state_dot(sS, sDh);
      } else {
        __syncthreads(); // H is read: dH replaces it
        z_state = swap_in_grad(sS, it.state(a, true) + vcol0);
        __syncthreads();
      }
      dv_product(vcol0, slice);
      {
        float acc[kNWk / 8][4];
        dk_product(acc, z_keys);
        store_partial(a, a.ws_dk, acc, slice, it, m0, cg * kNWk);
      }
      const float zw = lin::warp_sum_all(exp2_fast(g2[kC]) * z_state + z_keys);
      if (lane == 0)
        zpart[warp] = zw;
    } else {
      float dq[kNWk / 8][4], dk[kNWk / 8][4];
      dq_product(dq);
      if constexpr (kTwoStates) {
        z_state = state_dot(sS, sDh);
      } else {
        __syncthreads(); // H is read: dH replaces it
        z_state = swap_in_grad(sS, it.state(a, true));
        __syncthreads();
      }
      dv_product(0, 0);
      dk_product(dk, z_keys);
      // z: the chunk's <S_out, dS_out>, summed in a fixed order.
      const float zw = lin::warp_sum_all(exp2_fast(g2[kC]) * z_state + z_keys);
      __syncthreads(); // every tile is read: the gradient rows go over them
      if (lane == 0)
        zpart[warp] = zw;
      dqs = rows;
      dks = rows + kC * kD;
      store_rows(dqs, dq, m0, cg * kNWk);
      store_rows(dks, dk, m0, cg * kNWk);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      // z of this chunk (and value slice: ws_z holds one partial per slice).
      float z = 0.f;
      for (int w = 0; w < kWarps; ++w)
        z += zpart[w];
      const long long slice = vcol0 / kVs;
      a.ws_z[slice * a.batch * a.heads * a.chunks + it.seq(a).crow + it.n] = z;
    }
    if constexpr (kSlices > 1)
      return; // the per-token step is attnc_linear_bwd_combine's
    // The warp's tokens r = warp + i·kWarps. The grouped kernel takes them
    // in batches whose raw q and k loads are all issued first (16 registers
    // of them a lane): on an H100 that took mamba2's backward from 3.89 to
    // 3.44 ms, where the plain kernel lost 2% at D = DV = 128 (its
    // registers are capped) and is left one token at a time.
    constexpr int kPerWarp = kC / kWarps;
    constexpr int kBatch = !kGrouped ? 1 : kPerWarp < 16 / kE ? kPerWarp : 16 / kE;
    static_assert(kC % kWarps == 0 && kPerWarp % kBatch == 0, "whole batches of tokens");
#pragma unroll 1
    for (int i0 = 0; i0 < kPerWarp; i0 += kBatch) {
      typename Combine::Raw raw[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int t = it.t0 + warp + (i0 + j) * kWarps;
        raw[j] = Combine::load_raw(a, it.seq(a).mb, it.h,
                                   it.seq(a).tok0 + (t < it.seq(a).len ? t : it.seq(a).len - 1));
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int r = warp + (i0 + j) * kWarps;
        const int t = it.t0 + r;
        if (t >= it.seq(a).len)
          break;
        auto grads = [&](bool isq, float (&d)[kE]) {
          const float *row = (isq ? dqs : dks) + row_index(r, lane * kE);
#pragma unroll
          for (int e = 0; e < kE; ++e)
            d[e] = row[e];
        };
        auto emit = [&](bool isq, const float (&dx)[kE]) {
          Combine::template emit<kGrouped>(a, it.seq(a).tok0 + t, it.seq(a).mb, it.h, it.first, isq,
                                           dx);
        };
        Combine::token(a, in, it.seq(a).mb, it.h, t, it.seq(a).tok0 + t, it.seq(a).trow + t, raw[j], grads,
                       emit);
      }
    }
  }

  /// Element (r, c) of the fp32 rows: c's 8-float block XOR r mod 4, so
  /// that a fragment's eight rows spread over the banks (two wavefronts for
  /// a warp's 256 bytes) while a lane's kE <= 8 features stay contiguous.
  __device__ static int row_index(int r, int c) { return r * kD + (c ^ ((r & 3) << 3)); }

  /// This warp's rows and columns [n0, n0 + kNWk) of dq or dk over slice
  /// \p slice's columns of v, to the fp32 partials at \p ws
  /// ([slices][B][H][T][D]).
  __device__ static void store_partial(const LinearArgs &a, float *ws,
                                       const float (&x)[kNWk / 8][4], int slice,
                                       const Item &it, int m0, int n0) {
    const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const long long BH = (long long)a.batch * a.heads;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int t = it.t0 + m0 + g + 8 * half;
      if (t >= it.seq(a).len)
        continue;
      float *row = ws + ((long long)slice * BH * a.seq + it.seq(a).trow + t) * kD + n0 + 2 * tq;
#pragma unroll
      for (int j = 0; j < kNWk / 8; ++j)
        asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" ::"l"(row + j * 8),
                     "f"(x[j][2 * half]), "f"(x[j][2 * half + 1]));
    }
  }

  /// This thread's part of <H, dH> from the tiles at \p sh and \p sdh, over
  /// the 16-byte chunks load_tile_async gave this thread to copy (so that
  /// its own wait suffices for dH).
  __device__ static float state_dot(u32 sh, u32 sdh) {
    constexpr int kChunks = kVs / 8;
    static_assert(kThreads % kChunks == 0 && kD % (kThreads / kChunks) == 0,
                  "the threads split the state's chunks as load_tile_async does");
    constexpr int kRowStep = kThreads / kChunks;
    const int r0 = threadIdx.x / kChunks, c = threadIdx.x % kChunks;
    float z = 0.f;
#pragma unroll 4
    for (int it = 0; it < kD / kRowStep; ++it) {
      const u32 off = STile::offset(r0 + it * kRowStep, c);
      const lin::U4 hv = lin::ld_shared_16(sh + off), dh = lin::ld_shared_16(sdh + off);
#pragma unroll
      for (int e = 0; e < 4; ++e)
        z += lin::lo_of<T>(hv.w[e]) * lin::lo_of<T>(dh.w[e]) +
             lin::hi_of<T>(hv.w[e]) * lin::hi_of<T>(dh.w[e]);
    }
    return z;
  }

  /// Replaces the H tile at \p s by the dH rows at \p src (16-bit, rows of
  /// kDV elements) and returns this thread's part of <H, dH>.
  __device__ static float swap_in_grad(u32 s, const unsigned short *src) {
    constexpr int kChunks = kVs / 8;
    constexpr int kTotal = kD * kChunks;
    static_assert(kTotal % kThreads == 0, "the threads split the state's chunks");
    float z = 0.f;
#pragma unroll 4
    for (int it = 0; it < kTotal / kThreads; ++it) {
      const int i = threadIdx.x + it * kThreads;
      const int r = i / kChunks, c = i % kChunks;
      const u32 off = STile::offset(r, c);
      const lin::U4 dh = lin::ld_global_16(src + (long long)r * kDV + c * 8);
      const lin::U4 hv = lin::ld_shared_16(s + off);
#pragma unroll
      for (int e = 0; e < 4; ++e)
        z += lin::lo_of<T>(hv.w[e]) * lin::lo_of<T>(dh.w[e]) +
             lin::hi_of<T>(hv.w[e]) * lin::hi_of<T>(dh.w[e]);
      lin::st_shared_16(s + off, dh);
    }
    return z;
  }

  /// This warp's dv rows (tokens t_lo and t_lo + 8) and columns [col0,
  /// col0 + kNWv) of the slice at \p vp / \p dvp: through v_mod's derivative
  /// to the raw dv, and v_mod's custom-input part to ws_vin[part].
  __device__ static void write_dv(const LinearArgs &a, const typename Variant::Inputs &in,
                                  const float (&acc)[kNWv / 8][4],
                                  const unsigned short *vp, unsigned short *dvp,
                                  const Item &it, int t_lo, int col0, int part) {
    const int b = it.seq(a).mb, h = it.h;
    const int tq = threadIdx.x % 4;
    const long long BH = (long long)a.batch * a.heads;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int t = t_lo + 8 * half;
      float cin[kNI];
#pragma unroll
      for (int i = 0; i < kNI; ++i)
        cin[i] = 0.f;
      const int ti = it.seq(a).tok0 + t;
      if (t < it.seq(a).len) {
#pragma unroll
        for (int j = 0; j < kNWv / 8; ++j) {
          const int col = col0 + j * 8 + 2 * tq;
          const u32 raw =
              *reinterpret_cast<const u32 *>(vp + (long long)t * a.v_ss + col);
          const float x0 = lin::lo_of<T>(raw), x1 = lin::hi_of<T>(raw);
          const float d0 = acc[j][2 * half], d1 = acc[j][2 * half + 1];
          *reinterpret_cast<u32 *>(dvp + (long long)t * a.dv_ss + col) =
              pack2<T>(d0 * M::v_mod_dx(in, x0, b, h, t, ti),
                       d1 * M::v_mod_dx(in, x1, b, h, t, ti));
          if constexpr (Variant::kNumInputs > 0 && Variant::kVModReadsInputs) {
            float e0[kNI], e1[kNI];
            M::v_mod_din(in, x0, b, h, t, ti, e0);
            M::v_mod_din(in, x1, b, h, t, ti, e1);
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
        if (t < it.seq(a).len && tq == 0)
#pragma unroll
          for (int i = 0; i < kNI; ++i)
            a.ws_vin[((long long)part * Variant::kNumInputs + i) * BH * a.seq + it.seq(a).trow +
                     t] = cin[i];
      }
    }
  }

  /// This warp's rows [m0, m0 + 16) and columns [n0, n0 + kNWk) of dq or dk
  /// into fp32 rows.
  __device__ static void store_rows(float *rows, const float (&x)[kNWk / 8][4], int m0,
                                    int n0) {
    const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
#pragma unroll
    for (int j = 0; j < kNWk / 8; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float *p = rows + row_index(m0 + g + 8 * half, n0 + j * 8 + 2 * tq);
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(smem_addr(p)),
                     "f"(x[j][2 * half]), "f"(x[j][2 * half + 1]));
      }
  }
};

} // namespace attnc

#endif
