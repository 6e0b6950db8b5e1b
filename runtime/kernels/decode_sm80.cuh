// decode_sm80: attention for a few queries per sequence over many keys.
// One CTA per (row block, KV head, batch entry, split): its rows are the
// query heads of one KV head times the queries (GQA packing: K/V are read
// once for all of them), its keys one split of the sequence. The warps take
// disjoint slices of each K/V block and keep their own online states, merged
// at the end by the definition's derived merge (Merge, generated); a
// definition without a merge runs every key on warp 0. Splits write partial
// states that attnc_decode_merge combines by the same rule before the
// epilogue. Variant hooks are called as the forward skeletons call them,
// with the head and q_idx of each row.
#ifndef ATTNC_DECODE_SM80_CUH
#define ATTNC_DECODE_SM80_CUH

#include "attnc/decode_args.cuh"
#include "attnc/decode_blocks.cuh"
#include "attnc/decode_kv.cuh"
#include "attnc/decode_merge.cuh"
#include "attnc/decode_paged_kv.cuh"
#include "attnc/fwd_sm80.cuh"
#include "attnc/sm80_primitives.cuh"

namespace attnc {

/// One warp's S accumulator over its key slice, rows with their own q_idx.
template <int MT, int NT, bool kFull, bool kInfMasked> struct DecodeScoreFrag {
  static constexpr int kRows = 2 * MT;
  static constexpr int kCols = 2 * NT;
  using ActWord = ActBits<2 * NT>;
  float (&acc)[MT][NT][4];
  const ActWord (&act)[2 * MT];
  const int (&qidx)[2 * MT];
  int col0, tq;
  __device__ __forceinline__ float &at(int r, int c) {
    return acc[r >> 1][c >> 1][(r & 1) * 2 + (c & 1)];
  }
  __device__ __forceinline__ int row(int r) const { return qidx[r]; }
  __device__ __forceinline__ int col(int c) const {
    return col0 + (c >> 1) * 8 + 2 * tq + (c & 1);
  }
  __device__ __forceinline__ bool active(int r, int c) const {
    if constexpr (kFull || kInfMasked)
      return true;
    else
      return (act[r] >> c) & 1;
  }
  __device__ static __forceinline__ float allreduce_max(float x) {
    return quad_row_max<kFull || kInfMasked>(x);
  }
  __device__ static __forceinline__ float allreduce_sum(float x) {
    return quad_row_sum<kFull || kInfMasked>(x);
  }
};

template <class Variant, class Merge, class T, int kD, int kDV, int kBlockM,
          int kBlockN, int kWarps, int kStages>
struct DecodeSm80 {
  static constexpr bool kSplitWarps = Merge::kKind != 0 && kWarps > 1;
  static constexpr int kComputeWarps = kSplitWarps ? kWarps : 1;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int MT = kBlockM / 16;
  static constexpr int kWarpN = kBlockN / kComputeWarps;
  static constexpr int NT = kWarpN / 8;
  static constexpr int VT = kDV / 8;
  static_assert(kBlockM % 16 == 0, "rows come in m16 tiles");
  static_assert(kWarpN % 16 == 0, "each warp's keys feed P·V 16 at a time");
  static_assert(kD % 64 == 0 && kDV % 64 == 0,
                "head dims must be multiples of 64 (swizzle and k16 steps)");
  static_assert(kStages >= 2, "the K/V ring needs at least double buffering");
  static_assert(Merge::kNumRowscales + 1 <= kDecodeStateFloats,
                "a workspace state row holds the rowscales and the seen flag");
  using QTile = SwizzledTile<kBlockM, kD>;
  using KTile = SwizzledTile<kBlockN, kD>;
  using VTile = SwizzledTile<kBlockN, kDV>;
  static constexpr int kStageBytes = KTile::kBytes + VTile::kBytes;
  static constexpr int kTileBytes = QTile::kBytes + kStages * kStageBytes;
  static constexpr int kStateBytes =
      (kWarps - 1) * kBlockM * (kDV + kDecodeStateFloats) * 4;
  static constexpr int kSmemBytes =
      kTileBytes > kStateBytes ? kTileBytes : kStateBytes;
  using State = typename Variant::RowState;
  /// Q's fragments stay in registers across the key blocks where they are
  /// few (one m16 tile, d <= 128: 32 registers), instead of an ldmatrix per
  /// k step of every block.
  static constexpr int KT = kD / 16;
  static constexpr bool kQInRegs = MT * KT * 4 <= 32;
  /// One m16 tile of rows: where a call has at most 8 rows a CTA (a GQA
  /// group of up to 8 heads, one query), its upper 8 rows are padding.
  static constexpr bool kHalfRowsOk = MT == 1;
  using QRegs = u32[kQInRegs ? MT : 1][kQInRegs ? KT : 1][4];

  /// Contiguous K/V: [batch][heads_kv][seq_kv] rows by their strides, or
  /// a packed call's tokens (cu_kv; q_idx aligned to the end of the keys).
  __device__ static void run(const DecodeArgs &a,
                             const typename Variant::Inputs &in,
                             unsigned char *smem) {
    const int hk = blockIdx.y / a.row_blocks;
    const int b = blockIdx.z;
    const DecodeQSpan qs = decode_q_span(a, b);
    const DecodeKvSpan ks = decode_kv_span(a, b);
    ContiguousKV src{static_cast<const unsigned short *>(a.k) + b * a.k_sb +
                         ks.kv0 * a.k_ss + hk * a.k_sh,
                     static_cast<const unsigned short *>(a.v) + b * a.v_sb +
                         ks.kv0 * a.v_ss + hk * a.v_sh,
                     a.k_ss, a.v_ss, ks.len};
    const SeqSpan sp = decode_seq_span(a, qs, ks);
    src.qshift = sp.shift;
    src.bad = ks.bad;
    run_on(a, qs, src, sequence_inputs(in, sp), smem);
  }

  /// Paged K/V (PagedDecodeArgs): each sequence's pages and length read on
  /// the device; q_idx aligned to the end of the keys. Per-row and
  /// per-query-token inputs follow the query rows (a packed call's from
  /// the sequence's first token), per-key ones are the sequence's row of a
  /// [batch, (heads,) keys] tensor read at kv_idx, the key's position in
  /// its sequence (paged_sequence_span). kPageMode: the row-step mode the
  /// kernel holds (decode_paged_kernel_mode), -1 for the gather alone.
  template <int kPageMode>
  __device__ static void run_paged(const PagedDecodeArgs &p,
                                   const typename Variant::Inputs &in,
                                   unsigned char *smem) {
    const DecodeArgs &a = p.d;
    const int hk = blockIdx.y / a.row_blocks;
    const int b = blockIdx.z;
    const DecodeQSpan qs = decode_q_span(a, b);
    const DecodePagedSeq seq = paged_decode_seq(p, b);
    PagedKV<kBlockN, kD, kDV, kThreads, kPageMode> src;
    src.k = static_cast<const unsigned short *>(a.k) + hk * a.k_sh;
    src.v = static_cast<const unsigned short *>(a.v) + hk * a.v_sh;
    src.k_ps = a.k_sb;
    src.k_ss = a.k_ss;
    src.v_ps = a.v_sb;
    src.v_ss = a.v_ss;
    src.shift = p.page_shift;
    src.num_pages = p.num_pages;
    src.pages = seq.pages;
    src.len = seq.len;
    src.fetch_len = p.indptr ? seq.len : a.seq_kv;
    src.qshift = seq.len - qs.n;
    src.bad = seq.bad;
    src.init(p.strides32 != 0);
    run_on(a, qs, src, sequence_inputs(in, paged_sequence_span(qs, seq.len)), smem);
  }

  /// The CTA's rows of sequence b (its span qs; rows j·n + i of the group
  /// for n queries) over the keys src gives.
  template <class Src>
  __device__ static void run_on(const DecodeArgs &a, const DecodeQSpan qs, Src &src,
                                const typename Variant::Inputs &in,
                                unsigned char *smem) {
    decode_allow_merge_launch();
    const int split = blockIdx.x;
    const int rb = blockIdx.y % a.row_blocks;
    const int hk = blockIdx.y / a.row_blocks;
    const int b = blockIdx.z;
    const int n_q = qs.n;
    const int rows = a.group * n_q;
    // Row blocks past a short sequence's rows have nothing to do (the grid
    // is the bound's); their parts are never merged.
    if (rb * kBlockM >= rows)
      return;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, tq = lane % 4;
    const u32 s_q = smem_addr(smem);
    const u32 s_kv = s_q + QTile::kBytes;

    // The Q rows: row r of the tile is query head hk·group + j, query i
    // (row rb·kBlockM + r = j·n + i of the group); rows past the group
    // are zero.
    constexpr int kQChunks = kD / 8;
#pragma unroll
    for (int it = 0; it < (kBlockM * kQChunks + kThreads - 1) / kThreads; ++it) {
      const int i = threadIdx.x + it * kThreads;
      if ((kBlockM * kQChunks) % kThreads != 0 && i >= kBlockM * kQChunks)
        break;
      const int r = i / kQChunks, c = i % kQChunks;
      const int gr = rb * kBlockM + r;
      const bool ok = gr < rows;
      const int j = ok ? gr / n_q : 0, qi = ok ? gr % n_q : 0;
      const unsigned short *src = static_cast<const unsigned short *>(a.q) +
                                  b * a.q_sb + (hk * a.group + j) * a.q_sh +
                                  (qs.q0 + qi) * a.q_ss + c * 8;
      cp_async_16(s_q + QTile::offset(r, c), ok ? src : a.q, ok);
    }

    const int seq_kv = src.len;
    const int n_blocks = (seq_kv + kBlockN - 1) / kBlockN;
    int first = split * a.blocks_per_split;
    int last = min(n_blocks, first + a.blocks_per_split);
    // The box of the CTA's rows for the mask's block classes: their query
    // heads and q_idx (every query of the sequence where the rows span two
    // heads or more). Key blocks the mask leaves empty for all of them at
    // either end of the part are neither loaded nor visited: a sliding
    // window over a long cache visits its window, not the cache.
    const DecodeRowBox box =
        decode_row_box<kBlockM>(rows, n_q, a.group, src.qshift, rb, hk);
    auto block_class = [&](int n) {
      return decode_key_block_class<Variant, kBlockN>(in, b, box, n, seq_kv);
    };
    while (first < last && block_class(first) == 0)
      ++first;
    while (last > first && block_class(last - 1) == 0)
      --last;
    const int count = last > first ? last - first : 0;

    auto load_kv = [&](int j) {
      const int n = first + j;
      const u32 s = s_kv + (j % kStages) * kStageBytes;
      src.template load<KTile, VTile, kBlockN, kD, kDV, kThreads>(s, s + KTile::kBytes,
                                                                n * kBlockN);
    };
    // The first kStages - 1 blocks, a commit group each (the Q rows ride in
    // the first).
    src.template prologue<KTile, VTile, kBlockN, kD, kDV, kThreads, kStages - 1>(
        s_kv, kStageBytes, first * kBlockN, count);

    // This lane's rows: head and q_idx (dense calls: no shift).
    int qidx[2 * MT], hrow[2 * MT];
#pragma unroll
    for (int r = 0; r < 2 * MT; ++r) {
      const int gr = rb * kBlockM + (r >> 1) * 16 + g + (r & 1) * 8;
      const int gc = gr < rows ? gr : rows - 1;
      qidx[r] = gc % n_q + src.qshift;
      hrow[r] = hk * a.group + gc / n_q;
    }

    float acc_o[MT][VT][4];
    zero_tiles(acc_o);
    State st[2 * MT];
    u32 seen = 0;
#pragma unroll
    for (int r = 0; r < 2 * MT; ++r)
      Variant::init(st[r]);

    // At most 8 rows (GQA groups of up to 8 query heads, one query): the m16
    // tiles' upper rows are all padding, and the score step skips them. The
    // bound is the grid's, the same for every CTA (a uniform branch: each
    // CTA runs one form of the loop's code).
    const bool half = kHalfRowsOk && a.group * a.seq_q <= 8;
    QRegs qreg;
    for (int j = 0; j < count; ++j) {
      if (j + kStages - 1 < count)
        load_kv(j + kStages - 1);
      cp_async_commit();
      cp_async_wait<kStages - 1>();
      __syncthreads();
      if constexpr (kQInRegs)
        if (j == 0) // Q came with the first group
#pragma unroll
          for (int kk = 0; kk < KT; ++kk)
#pragma unroll
            for (int i = 0; i < MT; ++i)
              ldmatrix_x4(qreg[i][kk],
                          s_q + QTile::offset(i * 16 + (lane % 8) + 8 * ((lane / 8) % 2),
                                              kk * 2 + lane / 16));
      const int n = first + j;
      const u32 s_k = s_kv + (j % kStages) * kStageBytes;
      // A block the mask keeps whole runs with no per-element mask; one it
      // keeps nothing of (inside the part) changes no row's state.
      const int cls = block_class(n);
      const bool full = cls == 2;
      if (warp < kComputeWarps && cls != 0) {
        if (half)
          visit<true>(in, seq_kv, acc_o, st, seen, qreg, s_q, s_k, s_k + KTile::kBytes,
                      warp, lane, b, qidx, hrow, n * kBlockN + warp * kWarpN, g, tq, full);
        else
          visit<false>(in, seq_kv, acc_o, st, seen, qreg, s_q, s_k, s_k + KTile::kBytes,
                       warp, lane, b, qidx, hrow, n * kBlockN + warp * kWarpN, g, tq,
                       full);
      }
      __syncthreads(); // the ring slot is refilled next iteration
    }
    cp_async_wait<0>();
    // A bad length, query range or page index anywhere in the CTA poisons
    // its rows.
    const bool poisoned = __syncthreads_or(src.bad || qs.bad);

    if constexpr (kComputeWarps > 1)
      merge_warps(smem, acc_o, st, seen, warp, g, tq);
    if (warp == 0) {
      if (poisoned)
        poison(acc_o, st, seen);
      if (a.splits == 1)
        store_final(a, in, qs, src.qshift, acc_o, st, seen, b, rb, hk, g, tq);
      else
        store_part(a, qs, acc_o, st, seen, split, b, rb, hk, g, tq);
    }
    // (A definition without a merge never splits.)
    if constexpr (Merge::kKind != 0)
      if (a.splits > 1 && a.counters)
        merge_if_last(a, in, qs, src.qshift, b, rb, hk);
  }

  /// The merge in the split kernel (DecodeArgs::counters): each CTA counts
  /// its arrival once its part is visible to the whole device, and the
  /// last of the row block's splits merges the rows by decode_merge_row,
  /// the merge kernel's function, with all its threads, and leaves the
  /// count at 0. Every split CTA of a row block arrives (those past a short
  /// sequence's rows returned before, all splits alike).
  __device__ static void merge_if_last(const DecodeArgs &a,
                                       const typename Variant::Inputs &in,
                                       const DecodeQSpan qs, int qshift, int b,
                                       int rb, int hk);

  /// Every row NaN: its o, its rowscales, seen (so that a merge reads it).
  __device__ static void poison(float (&acc_o)[MT][VT][4], State (&st)[2 * MT],
                                u32 &seen);

  /// The tile row of this lane's row r.
  __device__ static __forceinline__ int tile_row(int r, int g) {
    return (r >> 1) * 16 + g + (r & 1) * 8;
  }
  /// This lane's row r of row block \p rb as head \p h and query \p qi
  /// of the CTA's group of K/V head \p hk; false past the CTA's rows.
  __device__ static __forceinline__ bool head_query(const DecodeArgs &a, const DecodeQSpan qs,
                                                    int rb, int hk, int r, int g, int &h,
                                                    int &qi) {
    const int gr = rb * kBlockM + tile_row(r, g);
    if (gr >= a.group * qs.n)
      return false;
    h = hk * a.group + gr / qs.n;
    qi = gr % qs.n;
    return true;
  }

  /// Warps 1.. hand their o rows and states to warp 0 through shared memory
  /// (the ring is free), which merges them into its own by Merge's rule.
  __device__ static void merge_warps(unsigned char *smem, float (&acc_o)[MT][VT][4],
                                     State (&st)[2 * MT], u32 &seen, int warp,
                                     int g, int tq);

  /// No split: the epilogue (q_idx aligned as online_fwd saw it), o and
  /// the finals.
  __device__ static void store_final(const DecodeArgs &a,
                                     const typename Variant::Inputs &in,
                                     const DecodeQSpan qs, int qshift,
                                     float (&acc_o)[MT][VT][4], State (&st)[2 * MT],
                                     u32 seen, int b, int rb, int hk, int g, int tq);

  /// A split: this part's o (fp32, before the epilogue) and state, in the
  /// row of query qi of the bound's seq_q rows of (b, h).
  __device__ static void store_part(const DecodeArgs &a, const DecodeQSpan qs,
                                    float (&acc_o)[MT][VT][4],
                                    State (&st)[2 * MT], u32 seen, int split, int b,
                                    int rb, int hk, int g, int tq);

  /// One key block's slice of this warp: S = Q·Kᵀ, the variant's step,
  /// O += P·V. \p kHalf: the upper 8 rows of the m16 tile are padding (its
  /// zero Q rows give zero scores, so P and O stay 0 there), and the step
  /// skips them.
  template <bool kHalf>
  __device__ static __forceinline__ void
  visit(const typename Variant::Inputs &in, int seq_kv, float (&acc_o)[MT][VT][4],
        State (&st)[2 * MT], u32 &seen, const QRegs &qreg, u32 s_q, u32 s_k,
        u32 s_v, int warp, int lane, int b, const int (&qidx)[2 * MT],
        const int (&hrow)[2 * MT], int col0, int g, int tq, bool full) {
    const int key0 = warp * kWarpN; // this warp's first key in the block
    float acc_s[MT][NT][4];
    zero_tiles(acc_s);
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      u32 qf[MT][4];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        if constexpr (kQInRegs) {
#pragma unroll
          for (int x = 0; x < 4; ++x)
            qf[i][x] = qreg[i][kk][x];
        } else {
          const int r = i * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
          ldmatrix_x4(qf[i], s_q + QTile::offset(r, kk * 2 + lane / 16));
        }
      }
#pragma unroll
      for (int t = 0; t < NT; t += 2) {
        u32 kf[4];
        const int mi = lane / 8;
        const int r = key0 + t * 8 + (lane % 8) + 8 * (mi / 2);
        ldmatrix_x4(kf, s_k + KTile::offset(r, kk * 2 + (mi % 2)));
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          mma_16816<T>(acc_s[i][t], qf[i], kf[0], kf[1]);
          mma_16816<T>(acc_s[i][t + 1], qf[i], kf[2], kf[3]);
        }
      }
    }

    typename DecodeScoreFrag<MT, NT, true, false>::ActWord act[2 * MT];
    if (full)
      step<true, kHalf>(in, seq_kv, acc_s, act, acc_o, st, seen, b, qidx, hrow, col0, tq);
    else
      step<false, kHalf>(in, seq_kv, acc_s, act, acc_o, st, seen, b, qidx, hrow, col0, tq);

#pragma unroll
    for (int kk = 0; kk < kWarpN / 16; ++kk) {
      u32 pf[MT][4];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        pf[i][0] = pack2<T>(acc_s[i][2 * kk][0], acc_s[i][2 * kk][1]);
        pf[i][1] = pack2<T>(acc_s[i][2 * kk][2], acc_s[i][2 * kk][3]);
        pf[i][2] = pack2<T>(acc_s[i][2 * kk + 1][0], acc_s[i][2 * kk + 1][1]);
        pf[i][3] = pack2<T>(acc_s[i][2 * kk + 1][2], acc_s[i][2 * kk + 1][3]);
      }
#pragma unroll
      for (int t = 0; t < VT; t += 2) {
        u32 vf[4];
        const int mi = lane / 8;
        const int r = key0 + kk * 16 + (lane % 8) + 8 * (mi % 2);
        ldmatrix_x4_trans(vf, s_v + VTile::offset(r, t + mi / 2));
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          mma_16816<T>(acc_o[i][t], pf[i], vf[0], vf[1]);
          mma_16816<T>(acc_o[i][t + 1], pf[i], vf[2], vf[3]);
        }
      }
    }
  }

  /// score_mod, mask and online_fwd for this warp's keys of one block, then
  /// the o rescale; as FwdSm80::step, with each row's own head and q_idx.
  /// \p kHalf: rows 8..15 of the tile (the odd r) are padding and skipped.
  template <bool kFull, bool kHalf>
  __device__ static __forceinline__ void
  step(const typename Variant::Inputs &in, int seq_kv, float (&acc_s)[MT][NT][4],
       typename DecodeScoreFrag<MT, NT, kFull, false>::ActWord (&act)[2 * MT],
       float (&acc_o)[MT][VT][4], State (&st)[2 * MT], u32 &seen, int b,
       const int (&qidx)[2 * MT], const int (&hrow)[2 * MT], int col0, int tq) {
    constexpr bool kInf = !kFull && Variant::kScoreScaleFolded;
    DecodeScoreFrag<MT, NT, kFull, kInf> f{acc_s, act, qidx, col0, tq};
    u32 row_any = 0;
#pragma unroll
    for (int r = 0; r < 2 * MT; ++r) {
      if (kHalf && (r & 1))
        continue;
      const int qi = f.row(r), h = hrow[r];
#pragma unroll
      for (int c = 0; c < 2 * NT; ++c) {
        const int ki = f.col(c);
        if constexpr (!Variant::kScoreScaleFolded)
          f.at(r, c) = Variant::score_mod(in, f.at(r, c), b, h, qi, ki);
        if constexpr (kInf) {
          const bool keep = ki < seq_kv && Variant::mask(in, b, h, qi, ki);
          f.at(r, c) = keep ? f.at(r, c) : -__int_as_float(0x7f800000);
          row_any |= u32(keep) << r;
        } else if constexpr (!kFull) {
          act[r] = (c == 0 ? 0 : act[r]) |
                   (typename DecodeScoreFrag<MT, NT, kFull, kInf>::ActWord(
                        ki < seq_kv && Variant::mask(in, b, h, qi, ki))
                    << c);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < 2 * MT; ++r) {
      if (kHalf && (r & 1))
        continue;
      const int h = hrow[r];
      float o_scale = 1.f;
      bool any = true;
      if constexpr (kInf)
        any = quad_any((row_any >> r) & 1);
      else if constexpr (!kFull)
        any = quad_any(act[r] != 0);
      if constexpr (kInf) {
        const State old = st[r];
        Variant::online_fwd_folded(in, st[r], f, r, b, h, o_scale);
        if (!any) {
          st[r] = old;
          o_scale = 1.f;
#pragma unroll
          for (int c = 0; c < 2 * NT; ++c)
            f.at(r, c) = 0.f;
        }
        seen |= u32(any) << r;
      } else if (any) {
        if constexpr (Variant::kScoreScaleFolded)
          Variant::online_fwd_folded(in, st[r], f, r, b, h, o_scale);
        else
          Variant::online_fwd(in, st[r], f, r, b, h, o_scale);
        seen |= 1u << r;
      } else {
#pragma unroll
        for (int c = 0; c < 2 * NT; ++c)
          f.at(r, c) = 0.f;
      }
      if constexpr (!Variant::kOScaleIsOne) {
#pragma unroll
        for (int t = 0; t < VT; ++t) {
          acc_o[r >> 1][t][(r & 1) * 2] *= o_scale;
          acc_o[r >> 1][t][(r & 1) * 2 + 1] *= o_scale;
        }
      }
    }
  }
};

} // namespace attnc

#include "attnc/decode_sm80_parts.cuh"

#endif
