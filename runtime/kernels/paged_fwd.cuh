// Paged prefill: the forward skeletons over a paged KV cache. The queries of
// sequence b are a packed range of q (cu_seqlens_q); its keys are its pages
// of the caches (a block table or CSR, as paged decode's), read on the
// device (arguments: attention_args.cuh's PagedFwdArgs). This header has
// what the skeletons share: the sequence's span and the check of its page
// description, the NaN rows of a malformed sequence, and fwd_sm80's K/V
// tile gather.
#ifndef ATTNC_PAGED_FWD_CUH
#define ATTNC_PAGED_FWD_CUH

#include "attnc/attention_args.cuh"
#include "attnc/paged_index.cuh"
#include "attnc/sm80_primitives.cuh"
#include "attnc/varlen.cuh"

namespace attnc {

/// A paged sequence: its span (queries packed, keys from 0 in its pages,
/// q_idx aligned to the end of its keys), where its page indices start, and
/// whether it can run: ok false where cu_seqlens_q gives a range outside
/// q (nothing of it is written), bad where its description is malformed
/// (its rows are written NaN).
struct PagedSeq {
  SeqSpan sp;
  const int *pages;
  bool ok, bad;
};

__device__ __forceinline__ PagedSeq paged_seq(const PagedFwdArgs &p, int b, int h) {
  const FwdArgs &a = p.f;
  PagedSeq s;
  SeqSpan &sp = s.sp;
  sp.packed = true;
  sp.q0 = a.cu_seqlens_q[b];
  sp.seq_q = a.cu_seqlens_q[b + 1] - sp.q0;
  s.ok = sp.q0 >= 0 && sp.seq_q >= 0 && sp.q0 + sp.seq_q <= a.total_q;
  const PagedLen l = paged_len(p, b);
  s.pages = l.pages;
  s.bad = l.bad || sp.seq_q > a.seq_q;
  sp.kv0 = 0;
  sp.seq_kv = l.len;
  sp.shift = sp.seq_kv - sp.seq_q;
  sp.rows = (long long)h * a.total_q + sp.q0;
  sp.plane = (long long)a.heads * a.total_q;
  return s;
}

/// Whether any page index of the sequence's keys is outside [0, num_pages):
/// every thread of the CTA calls it (a CTA-wide vote). Checked once, before
/// any load, so that the loads need no check of their own.
__device__ __forceinline__ bool paged_pages_bad(const PagedFwdArgs &p, const PagedSeq &s) {
  const int n = (s.sp.seq_kv + (1 << p.page_shift) - 1) >> p.page_shift;
  bool bad = false;
  // Four loads in flight a thread, each predicated rather than behind a
  // branch (a loop of `bad = bad || load` waited for each load before the
  // next: 14 round trips a thread at the CTA's start for pages of 1 and
  // 5120 keys, one at pages of 16).
  for (int i0 = threadIdx.x; i0 < n; i0 += 4 * blockDim.x) {
    int v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int i = i0 + u * blockDim.x;
      v[u] = i < n ? __ldg(s.pages + i) : 0;
    }
#pragma unroll
    for (int u = 0; u < 4; ++u)
      bad |= unsigned(v[u]) >= unsigned(p.num_pages);
  }
  return __syncthreads_or(bad);
}

/// The rows of a malformed sequence: every output element and final NaN.
/// The CTAs of query blocks m, m + grid, ... write them, so that rows past
/// the plan's grid are written too.
template <int kBlockM, int kDV>
__device__ __forceinline__ void paged_nan_rows(const FwdArgs &a, const SeqSpan &sp, int h,
                                               int kNumFinals) {
  unsigned short *o = static_cast<unsigned short *>(a.o) + h * a.o_sh +
                      (long long)sp.q0 * a.o_ss;
  const float nan = __int_as_float(0x7fc00000);
  const unsigned short nan16 = 0x7fc0; // a NaN in f16 and in bf16
  for (int r0 = blockIdx.x * kBlockM; r0 < sp.seq_q; r0 += gridDim.x * kBlockM)
    for (int i = threadIdx.x; i < kBlockM * kDV; i += blockDim.x) {
      const int r = r0 + i / kDV;
      if (r < sp.seq_q) {
        o[(long long)r * a.o_ss + i % kDV] = nan16;
        if (i % kDV < kNumFinals)
          a.finals[(i % kDV) * sp.plane + sp.rows + r] = nan;
      }
    }
}

/// Sixteen zero bytes to shared memory (fwd_sm90's paged tail).
__device__ __forceinline__ void st_shared_zero_128(u32 addr) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr), "r"(0u) : "memory");
}

/// fwd_sm80's K/V source over pages: row t of a block is token t of the
/// sequence, in page pages[t >> shift], slot t & (page size − 1). Each
/// 16-byte copy looks its page up (paged_token_offset; an L1 hit after the
/// first: every CTA of the sequence reads the same indices); they were
/// checked before the first load. Rows at or past the sequence's end are
/// zero-filled and not read. The skeleton runs at the register limit, so
/// the caches' pointers and strides are read from the kernel's parameters
/// at each load rather than kept in registers, and the copies of a block
/// are unrolled by two only: kept and fully unrolled (16 page lookups in
/// flight), ptxas spilled about 250 bytes at d128 (sm_80 and sm_90a);
/// this way about 50, most of it the paged sequence's setup (the
/// contiguous kernel spills none).
template <int kThreads> struct PagedFwdKV {
  const PagedFwdArgs &p;
  const int *pages; // the sequence's page indices
  int hk;           // the CTA's KV head

  template <class Tile, int kRows, int kCols>
  __device__ __forceinline__ void load_one(u32 smem, const void *cache, long long hs,
                                           long long ps, long long ss, int row0,
                                           int limit) const {
    constexpr int kChunks = kCols / 8;
    constexpr int kTotal = kRows * kChunks;
    const unsigned short *base = static_cast<const unsigned short *>(cache) + hk * hs;
#pragma unroll
    for (int it = 0; it < (kTotal + kThreads - 1) / kThreads; ++it) {
      const int i = threadIdx.x + it * kThreads;
      if (kTotal % kThreads != 0 && i >= kTotal)
        break;
      const int r = i / kChunks, c = i % kChunks;
      const int t = row0 + r;
      const bool ok = t < limit;
      cp_async_16(smem + Tile::offset(r, c),
                  ok ? base + paged_token_offset(pages, p.page_shift, t, ps, ss) + c * 8
                     : base,
                  ok);
    }
  }
  template <class KTile, class VTile, int kRows, int kD, int kDV>
  __device__ __forceinline__ void load(u32 sk, u32 sv, int row0, int limit) const {
    const FwdArgs &f = p.f;
    if constexpr (kD == kDV) {
      // The same rows and chunks for K and V: one page lookup for both.
      // Unrolled by two (see above).
      constexpr int kChunks = kD / 8;
      constexpr int kTotal = kRows * kChunks;
      const unsigned short *kb = static_cast<const unsigned short *>(f.k) + hk * f.k_sh;
      const unsigned short *vb = static_cast<const unsigned short *>(f.v) + hk * f.v_sh;
#pragma unroll 2
      for (int it = 0; it < (kTotal + kThreads - 1) / kThreads; ++it) {
        const int i = threadIdx.x + it * kThreads;
        if (kTotal % kThreads != 0 && i >= kTotal)
          break;
        const int r = i / kChunks, c = i % kChunks;
        const int t = row0 + r;
        const bool ok = t < limit;
        const PagedSlot at = ok ? paged_slot(pages, p.page_shift, t) : PagedSlot{0, 0};
        cp_async_16(sk + KTile::offset(r, c),
                    ok ? kb + at.page * f.k_sb + (long long)at.slot * f.k_ss + c * 8 : kb, ok);
        cp_async_16(sv + VTile::offset(r, c),
                    ok ? vb + at.page * f.v_sb + (long long)at.slot * f.v_ss + c * 8 : vb, ok);
      }
    } else {
      load_one<KTile, kRows, kD>(sk, f.k, f.k_sh, f.k_sb, f.k_ss, row0, limit);
      load_one<VTile, kRows, kDV>(sv, f.v, f.v_sh, f.v_sb, f.v_ss, row0, limit);
    }
  }
};

/// fwd_sm80's K/V source of a dense or packed call: rows at fixed strides,
/// read from the kernel's parameters at each load (as the kernel did
/// before paged sources existed: its code is unchanged).
template <int kThreads> struct ContiguousFwdKV {
  const FwdArgs &a;
  const unsigned short *k, *v;
  template <class KTile, class VTile, int kRows, int kD, int kDV>
  __device__ __forceinline__ void load(u32 sk, u32 sv, int row0, int limit) const {
    load_tile_async<KTile, kRows, kD, kThreads>(sk, k, a.k_ss, row0, limit);
    load_tile_async<VTile, kRows, kDV, kThreads>(sv, v, a.v_ss, row0, limit);
  }
};

} // namespace attnc

#endif
