// fwd_sm80: the portable forward skeleton (FlashAttention-2 style). One CTA
// per (query block, batch·head); warps split the query rows; K/V tiles stream
// through a cp.async ring of kStages buffers; S = Q·Kᵀ and O += P·V on
// mma.sync m16n8k16 with ldmatrix from XOR-swizzled shared memory. Everything
// the variant decides (score_mod, mask, online_fwd, epilogue) is a call into
// the generated Variant, over fragments that name each element's (row, col).
#ifndef ATTNC_FWD_SM80_CUH
#define ATTNC_FWD_SM80_CUH

#include "attnc/attention_args.cuh"
#include "attnc/block_mask.cuh"
#include "attnc/paged_fwd.cuh"
#include "attnc/sm80_primitives.cuh"
#include "attnc/varlen.cuh"

namespace attnc {

/// The narrowest unsigned word holding \p kBits flags.
template <int kBits> struct ActBitsOf {
  static_assert(kBits <= 64, "at most 64 keys per thread row");
  using type = typename ActBitsOf<(kBits <= 32 ? 32 : 64)>::type;
};
template <> struct ActBitsOf<32> { using type = u32; };
template <> struct ActBitsOf<64> { using type = u64; };
template <int kBits> using ActBits = typename ActBitsOf<kBits>::type;

/// A row's max and sum over its quad, for the score fragments of both
/// forward skeletons. Where every lane runs online_fwd for every row (full
/// blocks, and a partial block whose masked scores are −∞) the shuffles name
/// the whole warp (no convergence check per shuffle); otherwise only the
/// quads of rows with an unmasked key do.
template <bool kWholeWarp> __device__ __forceinline__ float quad_row_max(float x) {
  if constexpr (kWholeWarp)
    return quad_max_warp(x);
  else
    return quad_max(x);
}
template <bool kWholeWarp> __device__ __forceinline__ float quad_row_sum(float x) {
  if constexpr (kWholeWarp)
    return quad_sum_warp(x);
  else
    return quad_sum(x);
}

/// One warp's S accumulator seen by the variant: kRows rows per thread (two
/// per m16 tile), kCols elements per row (two per n8 tile). The four lanes of
/// a quad share each row; allreduce_* combine over them. kInfMasked: a
/// partial block whose masked scores hold −∞ (only for a folded softmax,
/// where that is what an inactive element contributes): every element
/// reads as active, and every lane runs online_fwd for every row.
template <int MT, int NT, bool kFull, bool kInfMasked = false> struct Sm80ScoreFrag {
  static constexpr int kRows = 2 * MT;
  static constexpr int kCols = 2 * NT;
  /// One bit per element of a row: which keys the mask keeps. Bits, not an
  /// array of bools, so that the flags of a 32-row warp tile cost two or
  /// four registers instead of 64 (the kernel runs at the register limit).
  using ActWord = ActBits<2 * NT>;
  float (&acc)[MT][NT][4];
  const ActWord (&act)[2 * MT];
  int row0, col0, g, tq;
  __device__ __forceinline__ float &at(int r, int c) {
    return acc[r >> 1][c >> 1][(r & 1) * 2 + (c & 1)];
  }
  __device__ __forceinline__ int row(int r) const {
    return row0 + (r >> 1) * 16 + g + (r & 1) * 8;
  }
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

/// One warp's O accumulator row-view for the epilogue.
template <int MT, int VT> struct Sm80OutFrag {
  static constexpr int kRows = 2 * MT;
  static constexpr int kCols = 2 * VT;
  float (&acc)[MT][VT][4];
  __device__ __forceinline__ float &at(int r, int c) {
    return acc[r >> 1][c >> 1][(r & 1) * 2 + (c & 1)];
  }
};

template <class Variant, class T, int kD, int kDV, int kBlockM, int kBlockN,
          int kWarps, int kStages>
struct FwdSm80 {
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowsPerWarp = kBlockM / kWarps;
  static constexpr int MT = kRowsPerWarp / 16; // m16 tiles per warp
  static constexpr int NT = kBlockN / 8;       // n8 tiles of S per warp
  static constexpr int VT = kDV / 8;           // n8 tiles of O per warp
  static_assert(kRowsPerWarp % 16 == 0, "each warp owns whole m16 row tiles");
  static_assert(kBlockN % 16 == 0, "P·V consumes keys 16 at a time");
  static_assert(kD % 64 == 0 && kDV % 64 == 0,
                "head dims must be multiples of 64 (swizzle and k16 steps)");
  static_assert(kStages >= 2, "the K/V ring needs at least double buffering");
  using QTile = SwizzledTile<kBlockM, kD>;
  using KTile = SwizzledTile<kBlockN, kD>;
  using VTile = SwizzledTile<kBlockN, kDV>;
  static constexpr int kStageBytes = KTile::kBytes + VTile::kBytes;
  static constexpr int kSmemBytes = QTile::kBytes + kStages * kStageBytes;

  __device__ static void run(const FwdArgs &a, const typename Variant::Inputs &in,
                             unsigned char *smem) {
    // This CTA's query block and sequence: a dense call's grid is (query
    // blocks, batch·heads); a packed call's (packed_block_bound's query
    // blocks, heads) has a CTA per query block a sequence has
    // (packed_cta_block), whose lengths and first tokens seq_span gives.
    int b = blockIdx.y / a.heads, h = blockIdx.y % a.heads, m_block = blockIdx.x;
    if (a.cu_seqlens_q) {
      const PackedBlock pb = packed_cta_block(a.cu_seqlens_q, a.batch, kBlockM);
      if (pb.seq < 0)
        return;
      b = pb.seq;
      h = blockIdx.y;
      m_block = pb.index;
    }
    const int hk = h / (a.heads / a.heads_kv);
    const SeqSpan sp = seq_span(a.cu_seqlens_q, a.cu_seqlens_kv, a.total_q, a.batch,
                                a.heads, a.seq_q, a.seq_kv, b, h);
    if (m_block * kBlockM >= sp.seq_q)
      return;
    body(a, sequence_inputs(in, sp), smem, sp, m_block, b, h, [&] {
      return ContiguousFwdKV<kThreads>{
          a,
          static_cast<const unsigned short *>(a.k) + b * a.k_sb + hk * a.k_sh +
              (long long)sp.kv0 * a.k_ss,
          static_cast<const unsigned short *>(a.v) + b * a.v_sb + hk * a.v_sh +
              (long long)sp.kv0 * a.v_ss};
    });
  }

  /// Paged prefill (paged_fwd.cuh): sequence b's queries over its pages.
  /// A malformed sequence (a length outside the plan's bounds, a bad CSR
  /// range or last page length, a page index outside the caches) gets NaN
  /// rows and loads nothing.
  __device__ static void run_paged(const PagedFwdArgs &p, const typename Variant::Inputs &in,
                                   unsigned char *smem) {
    const FwdArgs &a = p.f;
    const int bh = blockIdx.y;
    const int b = bh / a.heads, h = bh % a.heads;
    const int hk = h / (a.heads / a.heads_kv);
    const PagedSeq s = paged_seq(p, b, h);
    if (!s.ok || (!s.bad && int(blockIdx.x) * kBlockM >= s.sp.seq_q))
      return;
    if (s.bad || paged_pages_bad(p, s)) {
      paged_nan_rows<kBlockM, kDV>(a, s.sp, h, Variant::kNumFinals);
      return;
    }
    body(a, in, smem, s.sp, int(blockIdx.x), b, h,
         [&] { return PagedFwdKV<kThreads>{p, s.pages, hk}; });
  }

  /// The forward of query block \p m_block of sequence \p sp (batch entry
  /// or sequence b, head h), its keys and values read through the source
  /// \p make_kv() makes (made after q's pointer, the order the contiguous
  /// kernel had before paged sources existed: its code is unchanged).
  template <class MakeKV>
  __device__ static __forceinline__ void body(const FwdArgs &a,
                                              const typename Variant::Inputs &in,
                                              unsigned char *smem, const SeqSpan &sp,
                                              int m_block, int b, int h,
                                              const MakeKV &make_kv) {
    const int bh = b * a.heads + h;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, tq = lane % 4;
    const unsigned short *q = static_cast<const unsigned short *>(a.q) +
                              b * a.q_sb + h * a.q_sh + (long long)sp.q0 * a.q_ss;
    const auto kv = make_kv();

    // Which key blocks to visit: from the block classification when the
    // variant masks, else all of them (the last one partial if ragged).
    // List entries are read a step before their use, so that no iteration
    // starts with a dependent global load. A packed call has no lists: a
    // masked variant visits a range of blocks, masked per element unless
    // the analysis proves them full (varlen.cuh).
    BlockVisits<Variant::kHasMask> blocks{(sp.seq_kv + kBlockN - 1) / kBlockN, nullptr};
    int first = 0;
    if constexpr (Variant::kHasMask) {
      if (sp.packed) {
        const int2 range = key_block_range<Variant, kBlockM, kBlockN>(in, b, h, m_block, sp);
        first = range.x;
        blocks.count = range.y - range.x;
      } else {
        const long long group = mask_group(a.mask_grouping, bh, a.heads);
        const long long row = group * a.m_blocks + m_block;
        blocks.count = a.block_count[row];
        blocks.list = a.block_list + row * a.n_blocks;
      }
    }
    const int count = blocks.count;
    auto entry = [&](int j) { return blocks.list ? blocks.entry(j) : first + j; };
    auto decode = [&](int e, bool &full) {
      if (Variant::kHasMask && !blocks.list) {
        full = tile_full<Variant, kBlockM, kBlockN>(in, b, h, m_block * kBlockM,
                                                    e * kBlockN, sp);
        return e;
      }
      const int n = blocks.decode(e, full);
      if constexpr (!Variant::kHasMask)
        full = (n + 1) * kBlockN <= sp.seq_kv;
      return n;
    };

    const u32 s_base = smem_addr(smem);
    const u32 s_q = s_base;
    const u32 s_kv = s_base + QTile::kBytes;
    const int row_base = m_block * kBlockM;

    load_tile_async<QTile, kBlockM, kD, kThreads>(s_q, q, a.q_ss, row_base, sp.seq_q);
    auto load_kv = [&](int j, int e) {
      bool full;
      const int n = decode(e, full);
      const u32 s = s_kv + (j % kStages) * kStageBytes;
      kv.template load<KTile, VTile, kBlockN, kD, kDV>(s, s + KTile::kBytes, n * kBlockN,
                                                       sp.seq_kv);
    };
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < count)
        load_kv(s, entry(s));
      cp_async_commit(); // always commit: wait_group counts groups
    }

    float acc_o[MT][VT][4];
    zero_tiles(acc_o);
    typename Variant::RowState st[2 * MT];
    u32 seen = 0; // bit r: row r has met an unmasked key
#pragma unroll
    for (int r = 0; r < 2 * MT; ++r) {
      Variant::init(st[r]);
    }
    const int warp_row0 = row_base + warp * kRowsPerWarp;

    int e_cur = entry(0), e_load = entry(kStages - 1);
    for (int j = 0; j < count; ++j) {
      if (j + kStages - 1 < count)
        load_kv(j + kStages - 1, e_load);
      cp_async_commit();
      cp_async_wait<kStages - 1>();
      __syncthreads();

      bool full;
      const int n = decode(e_cur, full);
      e_cur = entry(j + 1);
      e_load = entry(j + kStages);
      const u32 s_k = s_kv + (j % kStages) * kStageBytes;
      const u32 s_v = s_k + KTile::kBytes;

      // One S·P·V body for full and partial blocks, the softmax branching
      // inside: duplicating the whole body per kind spilled more (ptxas)
      // and measured slower.
      // The variant sees q_idx shifted by the bottom-right rule.
      visit(in, sp.seq_kv, acc_o, st, seen, s_q, s_k, s_v, warp, lane, b, h,
            warp_row0 + sp.shift, n * kBlockN, g, tq, full);
      __syncthreads(); // the ring slot is refilled next iteration
    }
    cp_async_wait<0>();

    // Epilogue: the variant maps o and the rowscales to o and the finals;
    // rows that never saw an unmasked key give o = 0 and finals = -inf.
    // O goes through shared memory (the Q tile and the ring are free once
    // every warp is past the barrier) so that global stores are 16 bytes
    // per lane and whole rows per warp, instead of 4 bytes from each lane.
    using OTile = SwizzledTile<kBlockM, kDV>;
    constexpr bool kStageO = OTile::kBytes <= kSmemBytes;
    if constexpr (kStageO)
      __syncthreads();
    Sm80OutFrag<MT, VT> of{acc_o};
    unsigned short *o = static_cast<unsigned short *>(a.o) + b * a.o_sb + h * a.o_sh +
                        (long long)sp.q0 * a.o_ss;
#pragma unroll
    for (int r = 0; r < 2 * MT; ++r) {
      const int wrow = warp * kRowsPerWarp + (r >> 1) * 16 + g + (r & 1) * 8;
      const int qrow = row_base + wrow;
      float finals[Variant::kNumFinals > 0 ? Variant::kNumFinals : 1];
      if ((seen >> r) & 1) {
        Variant::epilogue(in, st[r], of, r, b, h, qrow + sp.shift, finals);
      } else {
#pragma unroll
        for (int c = 0; c < 2 * VT; ++c)
          of.at(r, c) = 0.f;
#pragma unroll
        for (int f = 0; f < Variant::kNumFinals; ++f)
          finals[f] = -__int_as_float(0x7f800000);
      }
#pragma unroll
      for (int t = 0; t < VT; ++t) {
        const u32 packed = pack2<T>(of.at(r, 2 * t), of.at(r, 2 * t + 1));
        if constexpr (kStageO)
          st_shared_32(s_base + OTile::offset(wrow, t) + 4 * tq, packed);
        else if (qrow < sp.seq_q)
          *reinterpret_cast<u32 *>(o + (long long)qrow * a.o_ss + t * 8 + 2 * tq) = packed;
      }
      if (tq == 0 && qrow < sp.seq_q)
#pragma unroll
        for (int f = 0; f < Variant::kNumFinals; ++f)
          a.finals[f * sp.plane + sp.rows + qrow] = finals[f];
    }
    if constexpr (kStageO) {
      __syncthreads();
      constexpr int kChunks = kDV / 8;
      constexpr int kTotal = kBlockM * kChunks;
#pragma unroll
      for (int it = 0; it < (kTotal + kThreads - 1) / kThreads; ++it) {
        const int i = threadIdx.x + it * kThreads;
        if (kTotal % kThreads != 0 && i >= kTotal)
          break;
        const int r = i / kChunks, c = i % kChunks;
        st_global_128_if(row_base + r < sp.seq_q,
                         o + (long long)(row_base + r) * a.o_ss + c * 8,
                         ld_shared_128(s_base + OTile::offset(r, c)));
      }
    }
  }

  /// One key block: S = Q·Kᵀ, the variant's step, O += P·V.
  __device__ static __forceinline__ void
  visit(const typename Variant::Inputs &in, int seq_kv,
        float (&acc_o)[MT][VT][4], typename Variant::RowState (&st)[2 * MT],
        u32 &seen, u32 s_q, u32 s_k, u32 s_v, int warp, int lane, int b, int h,
        int warp_row0, int col0, int g, int tq, bool full) {
    // S = Q·Kᵀ for this warp's rows.
    float acc_s[MT][NT][4];
    zero_tiles(acc_s);
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      u32 qf[MT][4];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const int r = warp * kRowsPerWarp + i * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
        ldmatrix_x4(qf[i], s_q + QTile::offset(r, kk * 2 + lane / 16));
      }
#pragma unroll
      for (int t = 0; t < NT; t += 2) {
        u32 kf[4];
        const int mi = lane / 8;
        const int r = t * 8 + (lane % 8) + 8 * (mi / 2);
        ldmatrix_x4(kf, s_k + KTile::offset(r, kk * 2 + (mi % 2)));
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          mma_16816<T>(acc_s[i][t], qf[i], kf[0], kf[1]);
          mma_16816<T>(acc_s[i][t + 1], qf[i], kf[2], kf[3]);
        }
      }
    }

    typename Sm80ScoreFrag<MT, NT, true>::ActWord act[2 * MT];
    if (full)
      step<true>(in, seq_kv, acc_s, act, acc_o, st, seen, b, h, warp_row0, col0, g, tq);
    else
      step<false>(in, seq_kv, acc_s, act, acc_o, st, seen, b, h, warp_row0, col0, g, tq);

    // O += P·V: the S accumulator of two n8 tiles is one k16 A fragment.
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
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
        const int r = kk * 16 + (lane % 8) + 8 * (mi % 2);
        ldmatrix_x4_trans(vf, s_v + VTile::offset(r, t + mi / 2));
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          mma_16816<T>(acc_o[i][t], pf[i], vf[0], vf[1]);
          mma_16816<T>(acc_o[i][t + 1], pf[i], vf[2], vf[3]);
        }
      }
    }
  }

  /// score_mod, mask and online_fwd for one key block, then the o rescale.
  template <bool kFull>
  __device__ static __forceinline__ void
  step(const typename Variant::Inputs &in, int seq_kv, float (&acc_s)[MT][NT][4],
       typename Sm80ScoreFrag<MT, NT, kFull>::ActWord (&act)[2 * MT],
       float (&acc_o)[MT][VT][4],
       typename Variant::RowState (&st)[2 * MT], u32 &seen, int b, int h,
       int warp_row0, int col0, int g, int tq) {
    // A folded softmax (max/exp form, proven by codegen) takes a masked
    // score as −∞: it adds nothing to the max, and exp2(−∞) = 0 to the sum
    // and to P, as an inactive element does, whenever the row's max is
    // finite, i.e. the row has an unmasked key here (rows without one are
    // skipped below). That spares the per-element flag tests of online_fwd.
    constexpr bool kInf = !kFull && Variant::kScoreScaleFolded;
    Sm80ScoreFrag<MT, NT, kFull, kInf> f{acc_s, act, warp_row0, col0, g, tq};
    u32 row_any = 0; // kInf: bit r, row r keeps a key of this block
#pragma unroll
    for (int r = 0; r < 2 * MT; ++r) {
      const int qi = f.row(r);
#pragma unroll
      for (int c = 0; c < 2 * NT; ++c) {
        const int ki = f.col(c);
        // A score_mod that is score · c is folded into online_fwd_folded's
        // exp2 FMA (codegen proves it): the fragment keeps raw scores.
        if constexpr (!Variant::kScoreScaleFolded)
          f.at(r, c) = Variant::score_mod(in, f.at(r, c), b, h, qi, ki);
        if constexpr (kInf) {
          const bool keep = ki < seq_kv && Variant::mask(in, b, h, qi, ki);
          f.at(r, c) = keep ? f.at(r, c) : -__int_as_float(0x7f800000);
          row_any |= u32(keep) << r;
        } else if constexpr (!kFull) {
          act[r] = (c == 0 ? 0 : act[r]) |
                   (typename Sm80ScoreFrag<MT, NT, kFull>::ActWord(
                        ki < seq_kv && Variant::mask(in, b, h, qi, ki))
                    << c);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < 2 * MT; ++r) {
      float o_scale = 1.f;
      bool any = true;
      if constexpr (kInf)
        any = quad_any((row_any >> r) & 1);
      else if constexpr (!kFull)
        any = quad_any(act[r] != 0);
      if constexpr (kInf) {
        // Branch-free, so that the whole warp runs the reductions (warp-wide
        // shuffles, no divergence per row): a row without a key here gets
        // its state back, o_scale 1 and P 0, as in the branch below.
        const typename Variant::RowState old = st[r];
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
          f.at(r, c) = 0.f; // no key of this block reaches the row
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

#endif
