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
// (linear_chunk_pairs.cuh). The shared-memory layout and the copies that
// fill it are linear_chunk_grads_tiles.cuh's.
#ifndef ATTNC_LINEAR_CHUNK_GRADS_CUH
#define ATTNC_LINEAR_CHUNK_GRADS_CUH

#include "attnc/linear_chunk_grads_tiles.cuh"

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
struct LinearChunkGrads : LinearGradsTiles<Variant, T, kD, kDV, kVs, kC, kWarps, kTwoStates,
                                           kGrouped, kBuffers, kVarlen, kPairs> {
  using L = LinearGradsTiles<Variant, T, kD, kDV, kVs, kC, kWarps, kTwoStates, kGrouped,
                             kBuffers, kVarlen, kPairs>;
  using L::kThreads, L::kSlices, L::kE, L::kNI, L::kOffK, L::kOffV, L::kOffDo, L::kOffS,
      L::kOffDh, L::kOffDecay, L::kOffPair, L::kRowsOverStates, L::kSplitDh,
      L::kBufBytes, L::kOffF, L::kSmemBytes;
  using DTile = typename L::DTile;
  using VTile = typename L::VTile;
  using STile = typename L::STile;
  using Combine = typename L::Combine;
  using M = typename L::M;
  using Item = typename L::Item;
  static constexpr int kRowTiles = kC / 16;
  static_assert(kC % 32 == 0 && kC <= 128, "chunk sizes are 32, 64 or 128 tokens");
  static_assert(kWarps % kRowTiles == 0,
                "the warps must split the chunk's m16 row tiles evenly");
  static constexpr int kGroups = kWarps / kRowTiles;
  static constexpr int kNWv = kVs / kGroups, kNWk = kD / kGroups;
  static_assert(kVs % kGroups == 0 && kNWv % 16 == 0 && kD % kGroups == 0 &&
                    kNWk % 16 == 0,
                "each column group owns a multiple of 16 columns of dv and dq/dk");

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
    // mods are applied in place afterwards (linear_chunk_grads_tiles.cuh).
    L::issue(a, Item(a, n, b, h0), s0, vcol0);
    for (int h = h0, i = 0; h < h0 + group; ++h, ++i) {
      Item it(a, n, b, h);
      it.first = h == h0;
      const int off = kBuffers == 2 ? (i & 1) * kBufBytes : 0;
      const u32 buf = s0 + off;
      if (kBuffers == 1 && h > h0) {
        __syncthreads(); // the previous head's per-token step has read the rows
        L::issue(a, it, buf, vcol0);
      }
      if constexpr (kSplitDh)
        cp_async_wait<1>();
      else
        cp_async_wait<0>();
      L::mod_tiles(a, in, it, buf, vcol0);
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
        L::issue(a, Item(a, n, b, h + 1), s0 + ((i + 1) & 1) * kBufBytes, vcol0);
      }
      compute(a, in, it, buf, reinterpret_cast<float *>(smem + off), g2, vcol0);
    }
  }

private:
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
