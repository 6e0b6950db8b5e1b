// Where paged decode reads its keys and values: a sequence's pages, token t
// in page pages[t >> shift], slot t & (page size - 1). Two ways to address
// a key block's copies:
// - row steps: each thread copies one 16-byte chunk column of rows r0,
//   r0 + kStep, ...; a page holds whole groups of those rows (or each row
//   has its own page), so a thread loads one page index per group and
//   forms each copy's address from its group's page pointer plus a
//   multiple of the slot stride: one table load per distinct page a block
//   touches instead of one per copy, 32-bit products (the host checks that
//   the byte strides fit and are not negative, PagedDecodeArgs::strides32).
// - gather: each copy computes its own page and 64-bit offset; for head
//   dims whose chunks do not tile the threads, or strides too wide.
#ifndef ATTNC_DECODE_PAGED_KV_CUH
#define ATTNC_DECODE_PAGED_KV_CUH

#include "attnc/decode_args.cuh"
#include "attnc/sm80_primitives.cuh"

namespace attnc {

/// K/V rows of one (sequence, KV head) in pages. A page index outside
/// [0, num_pages) is not read; it sets bad, which poisons the CTA's rows.
/// Each thread keeps the page indices of its rows of the next block in
/// registers (pk), loaded a block ahead so that a block's copies never wait
/// on the table; the ring's first blocks take theirs in one round of table
/// loads (prologue), so that a short split does not wait for the table
/// once per stage before its first copies. kRows rows of kD and kDV
/// columns a block, kThreads threads, 16-byte copies. kMode: the one row-step
/// mode compiled in (decode_paged_kernel_mode of the plan's page size), or
/// -1 for the gather alone. One mode a kernel: a split that visits a few
/// key blocks runs its copies from a short, warm stretch of code, not from
/// every mode's unrolled copies behind a branch (cold instruction cache).
template <int kRows, int kD, int kDV, int kThreads, int kMode> struct PagedKV {
  static constexpr int kKIters = (kRows * (kD / 8) + kThreads - 1) / kThreads;
  static constexpr int kVIters = (kRows * (kDV / 8) + kThreads - 1) / kThreads;
  /// Row steps: a thread's rows are kStep apart, kIters of them a block;
  /// K and V share the rows (kD == kDV). Above 16 rows a thread, the page
  /// pointers would take too many registers: the gather serves.
  static constexpr int kChunks = kD / 8;
  static constexpr int kStep = decode_step_rows(kRows, kD, kDV, kThreads);
  static constexpr int kIters = kStep > 0 ? kRows / kStep : 0;
  static constexpr bool kHasSteps = kStep > 0 && kMode >= 0;
  static constexpr int kLogStep = decode_log2(kStep);
  /// mode m: a page group is 2^m of a thread's rows (pages of kStep · 2^m
  /// rows; the last mode also for larger pages, the whole block in one).
  static constexpr int kMaxMode = decode_log2(kIters);
  static_assert(kMode < 0 || (kStep > 0 && kMode <= kMaxMode),
                "a row-step mode of a tile without it");

  const unsigned short *k, *v;
  long long k_ps, k_ss, v_ps, v_ss; // page and slot strides
  const int *pages;
  int shift, num_pages, len, qshift;
  /// Table entries of rows below fetch_len may be read: the plan's bound
  /// for a block table (the host checks that its rows hold the bound's
  /// pages), the length for CSR (past it lie other sequences' entries).
  /// With the bound, a CTA's first page-table loads do not wait for its
  /// length's load (one device round trip less before its first copies);
  /// an entry past the length is loaded but never copied from.
  int fetch_len;
  bool bad;
  int pk[kKIters], pv[kVIters];
  /// Row steps (mode >= 0): this thread's chunk column of K and V in bytes,
  /// its first row and chunk, byte strides.
  int mode = -1;
  const char *kc, *vc;
  int r0, c, kps, kss, vps, vss;

  /// Picks the addressing: the kernel's row-step mode where \p strides32
  /// (the host's check of the byte strides) and the page size is the
  /// mode's, else the gather (a plan's kernel always matches its page
  /// size; the check keeps a mismatch correct).
  __device__ __forceinline__ void init(bool strides32) {
    mode = -1;
    if constexpr (kHasSteps) {
      if (!strides32 || decode_step_mode(shift, kLogStep, kMaxMode) != kMode)
        return;
      mode = kMode;
      r0 = threadIdx.x / kChunks;
      c = threadIdx.x % kChunks;
      kc = reinterpret_cast<const char *>(k + c * 8);
      vc = reinterpret_cast<const char *>(v + c * 8);
      kps = int(k_ps * 2);
      kss = int(k_ss * 2);
      vps = int(v_ps * 2);
      vss = int(v_ss * 2);
    }
  }

  // ---- Row steps --------------------------------------------------------

  /// The page index of each of this thread's page groups in block row0
  /// (groups of kSpp rows kStep apart; 0 where the group's first row is
  /// at or past fetch_len; rows past the sequence are then not read).
  template <int kSpp>
  __device__ __forceinline__ void fetch_steps(int (&pg)[kKIters], int row0) const {
    const int t0 = row0 + r0;
    const int lim = fetch_len - t0;
    const int *p0 = pages + decode_step_entry(t0, shift);
    const int gs = decode_step_group_pages(shift, kSpp, kStep);
#pragma unroll
    for (int g = 0; g < kIters / kSpp; ++g)
      pg[g] = g * kSpp * kStep < lim ? __ldg(p0 + g * gs) : 0;
  }

  /// The copies of one tile of block row0 from its groups' pages pg.
  /// \p check: set bad for a page outside the pool (K's pass; V reads the
  /// same pages).
  template <class Tile, int kSpp>
  __device__ __forceinline__ void issue_steps(u32 smem, const char *base, int ps, int ss,
                                              int row0, const int (&pg)[kKIters],
                                              bool check) {
    const int t0 = row0 + r0;
    const int lim = len - t0;
    // The slot of the thread's first row; its later rows in the group are
    // kStep slots further each (decode_step_slot).
    // Unsigned products (the host passes no negative stride): one wide
    // multiply-add a page pointer, a zero-extended add a row.
    const char *tb = base + unsigned(decode_step_slot(t0, shift, 0, kStep)) * unsigned(ss);
    const unsigned step = kStep * unsigned(ss);
    const u32 dst0 = smem + Tile::offset(r0, c);
#pragma unroll
    for (int g = 0; g < kIters / kSpp; ++g) {
      const int page = pg[g];
      const bool in = unsigned(page) < unsigned(num_pages);
      if (check)
        bad = bad || (g * kSpp * kStep < lim && !in);
      const char *pp = tb + (unsigned long long)(in ? unsigned(page) : 0u) * unsigned(ps);
#pragma unroll
      for (int j = 0; j < kSpp; ++j) {
        const int it = g * kSpp + j;
        // The swizzle depends on row & 7: a step of 8 rows keeps it.
        const u32 dst = kStep % 8 == 0 ? dst0 + it * kStep * kD * 2
                                       : smem + Tile::offset(r0 + it * kStep, c);
        cp_async_16(dst, pp + j * step, in && it * kStep < lim);
      }
    }
  }

  template <class KTile, class VTile, int kSpp>
  __device__ __forceinline__ void load_steps(u32 sk, u32 sv, int row0) {
    issue_steps<KTile, kSpp>(sk, kc, kps, kss, row0, pk, true);
    issue_steps<VTile, kSpp>(sv, vc, vps, vss, row0, pk, false);
    fetch_steps<kSpp>(pk, row0 + kRows);
  }

  template <class KTile, class VTile, int kN, int kSpp>
  __device__ __forceinline__ void prologue_steps(u32 s_kv, int stage_bytes, int row0,
                                                 int count) {
    int g[kN + 1][kKIters];
#pragma unroll
    for (int s = 0; s <= kN; ++s)
      fetch_steps<kSpp>(g[s], row0 + s * kRows);
#pragma unroll
    for (int s = 0; s < kN; ++s) {
      if (s < count) {
        const u32 sk = s_kv + s * stage_bytes;
        issue_steps<KTile, kSpp>(sk, kc, kps, kss, row0 + s * kRows, g[s], true);
        issue_steps<VTile, kSpp>(sk + KTile::kBytes, vc, vps, vss, row0 + s * kRows,
                                 g[s], false);
      }
      cp_async_commit();
    }
#pragma unroll
    for (int it = 0; it < kKIters; ++it)
      pk[it] = g[kN][it];
  }

  // ---- Gather -----------------------------------------------------------

  template <int kCols, int kIters_>
  __device__ __forceinline__ void fetch(int (&pg)[kIters_], int row0) const {
    constexpr int kChunks_ = kCols / 8;
    constexpr int kTotal = kRows * kChunks_;
#pragma unroll
    for (int it = 0; it < kIters_; ++it) {
      const int i = threadIdx.x + it * kThreads;
      const int t = row0 + i / kChunks_;
      pg[it] = (kTotal % kThreads == 0 || i < kTotal) && t < fetch_len
                   ? __ldg(pages + (t >> shift))
                   : 0;
    }
  }
  /// The page indices of block row0's rows, for the load that follows.
  __device__ __forceinline__ void prefetch(int row0) {
    fetch<kD>(pk, row0);
    if constexpr (kDV == kD)
      return; // the same rows: pk serves V too
    else
      fetch<kDV>(pv, row0);
  }
  template <class Tile, int kCols, int kIters_>
  __device__ __forceinline__ void load_one(u32 smem, const unsigned short *base,
                                           long long ps, long long ss, int row0,
                                           const int (&pg)[kIters_]) {
    constexpr int kChunks_ = kCols / 8;
    constexpr int kTotal = kRows * kChunks_;
    const int mask = (1 << shift) - 1;
#pragma unroll
    for (int it = 0; it < kIters_; ++it) {
      const int i = threadIdx.x + it * kThreads;
      if (kTotal % kThreads != 0 && i >= kTotal)
        break;
      const int r = i / kChunks_, cc = i % kChunks_;
      const int t = row0 + r;
      const int page = pg[it];
      const bool in_range = unsigned(page) < unsigned(num_pages);
      bad = bad || (t < len && !in_range);
      const bool ok = t < len && in_range;
      cp_async_16(smem + Tile::offset(r, cc),
                  ok ? base + page * ps + (t & mask) * ss + cc * 8 : base, ok);
    }
  }

  // ---- The source interface (decode_sm80's run_on) ----------------------

  /// The ring's first kN blocks from row0 (count of them exist), one
  /// commit group each: the page indices of blocks 0..kN are all loaded
  /// before the first copy waits on one (block kN's are load's next).
  template <class KTile, class VTile, int, int, int, int, int kN>
  __device__ __forceinline__ void prologue(u32 s_kv, int stage_bytes, int row0,
                                           int count) {
    if constexpr (kHasSteps)
      if (mode >= 0)
        return prologue_steps<KTile, VTile, kN, (1 << (kHasSteps ? kMode : 0))>(s_kv, stage_bytes, row0,
                                                              count);
    int gk[kN + 1][kKIters];
    int gv[kDV == kD ? 1 : kN + 1][kDV == kD ? 1 : kVIters];
#pragma unroll
    for (int s = 0; s <= kN; ++s) {
      fetch<kD>(gk[s], row0 + s * kRows);
      if constexpr (kDV != kD)
        fetch<kDV>(gv[s], row0 + s * kRows);
    }
#pragma unroll
    for (int s = 0; s < kN; ++s) {
      if (s < count) {
        const u32 sk = s_kv + s * stage_bytes;
        load_one<KTile, kD>(sk, k, k_ps, k_ss, row0 + s * kRows, gk[s]);
        if constexpr (kDV == kD)
          load_one<VTile, kDV>(sk + KTile::kBytes, v, v_ps, v_ss, row0 + s * kRows,
                               gk[s]);
        else
          load_one<VTile, kDV>(sk + KTile::kBytes, v, v_ps, v_ss, row0 + s * kRows,
                               gv[s]);
      }
      cp_async_commit();
    }
#pragma unroll
    for (int it = 0; it < kKIters; ++it)
      pk[it] = gk[kN][it];
    if constexpr (kDV != kD)
#pragma unroll
      for (int it = 0; it < kVIters; ++it)
        pv[it] = gv[kN][it];
  }
  /// Block row0 (whose pages the previous load or the prologue fetched),
  /// then the pages of the block after it.
  template <class KTile, class VTile, int, int, int, int>
  __device__ __forceinline__ void load(u32 sk, u32 sv, int row0) {
    if constexpr (kHasSteps)
      if (mode >= 0)
        return load_steps<KTile, VTile, (1 << (kHasSteps ? kMode : 0))>(sk, sv, row0);
    load_one<KTile, kD>(sk, k, k_ps, k_ss, row0, pk);
    if constexpr (kDV == kD)
      load_one<VTile, kDV>(sv, v, v_ps, v_ss, row0, pk);
    else
      load_one<VTile, kDV>(sv, v, v_ps, v_ss, row0, pv);
    prefetch(row0 + kRows);
  }
};

} // namespace attnc

#endif
