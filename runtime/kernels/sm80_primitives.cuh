// sm_80 building blocks: cp.async, ldmatrix, mma.sync m16n8k16, packing.
// Plain CUDA with inline PTX and no toolkit headers, so NVRTC needs no
// include path for it.
#ifndef ATTNC_SM80_PRIMITIVES_CUH
#define ATTNC_SM80_PRIMITIVES_CUH

namespace attnc {

typedef unsigned int u32;
typedef unsigned long long u64;

/// Element-type tags. Data is moved as raw 16-bit words; only the tensor-core
/// instructions and the final conversion know the format.
struct f16 {
  static constexpr bool kIsBf16 = false;
};
struct bf16 {
  static constexpr bool kIsBf16 = true;
};

static_assert(sizeof(u32) == 4, "u32 must be 32 bits: mma fragments are 32-bit registers");

__device__ __forceinline__ u32 smem_addr(const void *p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

/// 16-byte global→shared copy; when \p pred is false the destination is
/// zero-filled and nothing is read (src-size 0).
__device__ __forceinline__ void cp_async_16(u32 dst, const void *src, bool pred) {
  const int bytes = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
/// Waits until at most \p N committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/// Plain shared and global accesses by address (the epilogue's O staging).
struct u32x4 {
  u32 x, y, z, w;
};
__device__ __forceinline__ void st_shared_32(u32 addr, u32 v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ u32x4 ld_shared_128(u32 addr) {
  u32x4 v;
  asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}
/// A 16-byte global store made only where \p keep holds: predicated in
/// the asm, since the compiler cannot predicate an asm statement and wraps
/// `if (keep)` around one in a branch of its own.
__device__ __forceinline__ void st_global_128_if(bool keep, void *p, u32x4 v) {
  asm volatile("{\n .reg .pred k;\n setp.ne.b32 k, %5, 0;\n"
               " @k st.global.v4.b32 [%0], {%1,%2,%3,%4};\n}\n" ::"l"(p),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"((u32)keep)
               : "memory");
}

/// Four 8x8 b16 matrices; lane l supplies the row address of matrix l/8.
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
/// The same, each matrix transposed (for a row-major operand used col-major).
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(addr));
}

/// D = A·B + D for one m16n8k16 tile, fp32 accumulation.
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const u32 (&a)[4],
                                          u32 b0, u32 b1) {
  if constexpr (T::kIsBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

/// Two floats rounded to nearest into one register of two 16-bit values
/// (\p lo in the low half, as the mma fragments expect).
template <class T> __device__ __forceinline__ u32 pack2(float lo, float hi) {
  u32 r;
  if constexpr (T::kIsBf16)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

/// The shuffle mask of this lane's quad. Quad reductions name only the
/// quad: a variant's online_fwd runs for a row only where the row has an
/// unmasked key, which all four lanes of a quad agree on but other quads of
/// the warp need not.
__device__ __forceinline__ unsigned quad_mask() {
  return 0xfu << (threadIdx.x & 28u);
}

/// Max and sum over the four lanes of a quad (the lanes holding one row of
/// an mma accumulator).
__device__ __forceinline__ float quad_max(float x) {
  const unsigned m = quad_mask();
  x = fmaxf(x, __shfl_xor_sync(m, x, 1));
  return fmaxf(x, __shfl_xor_sync(m, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  const unsigned m = quad_mask();
  x += __shfl_xor_sync(m, x, 1);
  return x + __shfl_xor_sync(m, x, 2);
}
/// The same, where every lane of the warp calls it (converged warp).
__device__ __forceinline__ float quad_max_warp(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum_warp(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
__device__ __forceinline__ bool quad_any(bool x) {
  unsigned v = x;
  v |= __shfl_xor_sync(0xffffffffu, v, 1);
  v |= __shfl_xor_sync(0xffffffffu, v, 2);
  return v != 0;
}

/// 2^x on the special-function unit (ex2.approx: 2 ulp, flushes denormal
/// results to zero), the instruction FlashAttention-class kernels use.
__device__ __forceinline__ float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/// exp(x) through the exp2 unit: the generated code calls this for the IR's
/// exp, folding the log2(e) factor into the argument.
__device__ __forceinline__ float exp_via_exp2(float x) {
  return exp2_fast(x * 1.4426950408889634f);
}

/// A [kRows x kCols] tile of 16-bit elements in shared memory, 16-byte
/// chunks XOR-swizzled by row so that ldmatrix of 8 consecutive rows hits 8
/// different bank groups. Rows of 32 columns (4 chunks, two rows a 128-byte
/// line) swizzle by row pair instead: rows r and r + 2 then differ too.
template <int kRows, int kCols> struct SwizzledTile {
  static constexpr int kChunks = kCols / 8; // 16-byte chunks per row
  static_assert(kCols % 64 == 0 || kCols == 32,
                "rows must hold a multiple of 8 chunks (or 4) for the XOR swizzle");
  static constexpr int kBytes = kRows * kCols * 2;
  __device__ static __forceinline__ u32 offset(int row, int chunk) {
    const int swizzle = kChunks == 4 ? (row >> 1) & 3 : row & 7;
    return static_cast<u32>(row * kCols * 2 + ((chunk ^ swizzle) * 16));
  }
};

/// 4-byte global→shared copy (cp.async.ca; zero-fills when \p pred is false).
/// For per-row fp32 values (final rowscales, doosum) that travel with a tile.
__device__ __forceinline__ void cp_async_4(u32 dst, const void *src, bool pred) {
  const int bytes = pred ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst),
               "l"(src), "r"(bytes));
}

/// The 16-bit element in the low (\p hi false) or high half of \p x as float.
template <class T> __device__ __forceinline__ float unpack_half(u32 x, bool hi) {
  const unsigned short h = static_cast<unsigned short>(hi ? x >> 16 : x & 0xffffu);
  if constexpr (T::kIsBf16) {
    return __uint_as_float(static_cast<u32>(h) << 16);
  } else {
    float f;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(h));
    return f;
  }
}

/// Sum over the 32 lanes of a warp, the same tree on every call (so the
/// result's bits do not depend on timing).
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

/// load_tile_async where the threads do not cover whole rows of 16-byte
/// chunks (rows of 24 chunks, head dim 192, over 128 or 256 threads): copy
/// i of the tile goes to thread i % kThreads, row i / kChunks and chunk
/// i % kChunks computed per copy, with the same constant trip count.
template <class Tile, int kRows, int kCols, int kThreads>
__device__ __forceinline__ void load_tile_async_ragged(u32 smem, const unsigned short *base,
                                                       long long stride, int row0,
                                                       int limit) {
  constexpr int kChunks = kCols / 8;
  constexpr int kTotal = kRows * kChunks;
#pragma unroll
  for (int it = 0; it < (kTotal + kThreads - 1) / kThreads; ++it) {
    const int i = threadIdx.x + it * kThreads;
    if (kTotal % kThreads != 0 && i >= kTotal)
      break;
    const int r = i / kChunks, c = i % kChunks;
    const bool ok = row0 + r < limit;
    cp_async_16(smem + Tile::offset(r, c),
                ok ? base + (long long)(row0 + r) * stride + c * 8 : base, ok);
  }
}

/// cp.async of a [kRows x kCols] tile of 16-bit elements into a swizzled
/// shared tile by kThreads threads: rows [row0, row0 + kRows) of a tensor
/// whose rows are \p stride elements apart; rows at or past \p limit are
/// zero-filled and not read.
template <class Tile, int kRows, int kCols, int kThreads>
__device__ __forceinline__ void load_tile_async(u32 smem, const unsigned short *base,
                                                long long stride, int row0, int limit) {
  // The trip count is a constant (a loop from threadIdx.x is not unrolled:
  // it compiles to a loop with branches and an address kept per copy), and
  // where the threads cover whole rows, each thread keeps one chunk column:
  // one source pointer and one swizzled offset, stepped by constants (the
  // swizzle depends on row & 7 only, unchanged by a step of 8 rows).
  constexpr int kChunks = kCols / 8;
  if constexpr (kThreads % kChunks != 0) {
    load_tile_async_ragged<Tile, kRows, kCols, kThreads>(smem, base, stride, row0, limit);
  } else {
    constexpr int kTotal = kRows * kChunks;
    constexpr int kIters = (kTotal + kThreads - 1) / kThreads;
    constexpr int kRowStep = kThreads / kChunks;
    const int r0 = threadIdx.x / kChunks, c = threadIdx.x % kChunks;
    // The pointer is stepped by one 64-bit add a copy: an index times the
    // stride per copy, under the copy's predicate, compiled to a wide
    // multiply and a constant-bank load for every copy.
    const long long step = (long long)kRowStep * stride;
    const unsigned short *src = base + (long long)(row0 + r0) * stride + c * 8;
    const int left = limit - row0 - r0; // this thread's rows below the limit
    const u32 dst0 = smem + Tile::offset(r0, c);
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int r = r0 + it * kRowStep;
      if (kTotal % kThreads != 0 && r >= kRows)
        break;
      const bool ok = it * kRowStep < left;
      const u32 dst = kRowStep % 8 == 0 ? dst0 + it * kRowStep * kCols * 2
                                        : smem + Tile::offset(r, c);
      // A copy of no bytes reads nothing: its pointer may be past the rows.
      cp_async_16(dst, src, ok);
      src += step;
    }
  }
}

/// Zero-fills an [A][B] array of mma accumulator tiles.
template <int A, int B> __device__ __forceinline__ void zero_tiles(float (&x)[A][B][4]) {
#pragma unroll
  for (int i = 0; i < A; ++i)
#pragma unroll
    for (int j = 0; j < B; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        x[i][j][e] = 0.f;
}
/// Zero-fills an [A] array of accumulator tiles (mma's or wgmma's, four
/// floats a thread each).
template <int A> __device__ __forceinline__ void zero_tiles(float (&x)[A][4]) {
#pragma unroll
  for (int i = 0; i < A; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      x[i][e] = 0.f;
}

/// The loop every warp-level GEMM below shares: acc[MT][NT] += A·B over kK16
/// steps of 16 along K. \p load_a(frag, i, kk) fills the m16k16 A fragment
/// of row tile i at step kk; \p load_b(frag, t, kk) the k16n8 B fragments of
/// the n8 tiles t and t + 1 (frag[0..1] and frag[2..3]). The operand
/// sources differ between the GEMMs; the order of loads and mma does not.
template <class T, int MT, int NT, int kK16, class LoadA, class LoadB>
__device__ __forceinline__ void warp_mma(float (&acc)[MT][NT][4], LoadA load_a,
                                         LoadB load_b) {
  static_assert(NT % 2 == 0, "B fragments are loaded two n8 tiles at a time");
#pragma unroll
  for (int kk = 0; kk < kK16; ++kk) {
    u32 af[MT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
      load_a(af[i], i, kk);
#pragma unroll
    for (int t = 0; t < NT; t += 2) {
      u32 bf[4];
      load_b(bf, t, kk);
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        mma_16816<T>(acc[i][t], af[i], bf[0], bf[1]);
        mma_16816<T>(acc[i][t + 1], af[i], bf[2], bf[3]);
      }
    }
  }
}

/// One warp's acc[MT][NT] += A·Bᵀ over kK16 steps of 16 along K, both
/// operands row-major (K contiguous) in swizzled shared tiles: A's rows
/// [a_row0, a_row0 + 16·MT), B's rows [b_row0, b_row0 + 8·NT). This is
/// S = Q·Kᵀ, and in the backward also Sᵀ = K·Qᵀ, dP = dO·Vᵀ, dPᵀ = V·dOᵀ.
template <class T, class ATile, class BTile, int MT, int NT, int kK16>
__device__ __forceinline__ void warp_mma_abt(float (&acc)[MT][NT][4], u32 sa,
                                             int a_row0, u32 sb, int b_row0) {
  const int lane = threadIdx.x % 32;
  const int mi = lane / 8;
  warp_mma<T, MT, NT, kK16>(
      acc,
      [&](u32 (&f)[4], int i, int kk) {
        const int r = a_row0 + i * 16 + (lane % 8) + 8 * (mi % 2);
        ldmatrix_x4(f, sa + ATile::offset(r, kk * 2 + mi / 2));
      },
      [&](u32 (&f)[4], int t, int kk) {
        const int r = b_row0 + t * 8 + (lane % 8) + 8 * (mi / 2);
        ldmatrix_x4(f, sb + BTile::offset(r, kk * 2 + (mi % 2)));
      });
}

/// One warp's acc[MT][NT] += P·B with P a warp accumulator ([MT][2·kK16]
/// n8 tiles, rounded to T here: the m16n8 accumulator of two n8 tiles is one
/// m16k16 A fragment) and B rows [b_row0, b_row0 + 16·kK16) of a swizzled
/// tile whose rows run along K (N contiguous, read transposed). This is
/// O += P·V, and in the backward dV += Pᵀ·dO, dK += dSᵀ·Q and the
/// two-kernel mode's dQ += dS·K.
template <class T, class BTile, int MT, int NT, int kK16>
__device__ __forceinline__ void warp_mma_pb(float (&acc)[MT][NT][4],
                                            const float (&p)[MT][2 * kK16][4],
                                            u32 sb, int b_row0) {
  warp_mma<T, MT, NT, kK16>(
      acc,
      [&](u32 (&f)[4], int i, int kk) {
        f[0] = pack2<T>(p[i][2 * kk][0], p[i][2 * kk][1]);
        f[1] = pack2<T>(p[i][2 * kk][2], p[i][2 * kk][3]);
        f[2] = pack2<T>(p[i][2 * kk + 1][0], p[i][2 * kk + 1][1]);
        f[3] = pack2<T>(p[i][2 * kk + 1][2], p[i][2 * kk + 1][3]);
      },
      [&](u32 (&f)[4], int t, int kk) {
        // lane and mi are taken here, not once above, which keeps the
        // backward kernels' SASS as it was before warp_mma (compared).
        const int lane = threadIdx.x % 32, mi = lane / 8;
        const int r = b_row0 + kk * 16 + (lane % 8) + 8 * (mi % 2);
        ldmatrix_x4_trans(f, sb + BTile::offset(r, t + mi / 2));
      });
}

/// The k16n8 B fragments of the n8 tiles b_tile0 + t and b_tile0 + t + 1
/// at step \p kk along K, from a swizzled tile whose rows run along K (N
/// contiguous, read transposed); \p lane and its matrix \p mi = lane / 8
/// come from the caller, computed once per GEMM.
template <class BTile>
__device__ __forceinline__ void load_b_k_rows(u32 (&f)[4], u32 sb, int b_tile0, int t,
                                              int kk, int lane, int mi) {
  const int r = kk * 16 + (lane % 8) + 8 * (mi % 2);
  ldmatrix_x4_trans(f, sb + BTile::offset(r, b_tile0 + t + mi / 2));
}

/// One warp's acc[MT][NT] += A·B over kK16 steps of 16 along K, B the n8
/// tiles [b_tile0, b_tile0 + NT) of a swizzled tile whose rows run along K
/// (read transposed). A is rows [a0, a0 + 16·MT) of a swizzled row-major
/// tile (K contiguous; the backward's dV += Pᵀ·dO and dK += dSᵀ·Q when Pᵀ
/// and dSᵀ pass through shared memory) or, with \p kATransposed, Aᵀ: rows
/// of a swizzled tile running along K (M contiguous), its columns [a0, a0 +
/// 16·MT) read transposed (the fused-dQ mode's dQ += dS·K, with dSᵀ in
/// shared memory as the dK/dV warps hold it).
template <class T, class ATile, class BTile, int MT, int NT, int kK16,
          bool kATransposed = false>
__device__ __forceinline__ void warp_mma_ss(float (&acc)[MT][NT][4], u32 sa, int a0,
                                            u32 sb, int b_tile0) {
  const int lane = threadIdx.x % 32;
  const int mi = lane / 8;
  warp_mma<T, MT, NT, kK16>(
      acc,
      [&](u32 (&f)[4], int i, int kk) {
        if constexpr (kATransposed) {
          // Matrix mi of the m16k16 fragment is rows 8·(mi % 2) and k
          // columns 8·(mi / 2); stored transposed, that is tile rows
          // kk·16 + 8·(mi / 2) and the 16-byte chunk of columns
          // a0 + 16·i + 8·(mi % 2).
          const int r = kk * 16 + (lane % 8) + 8 * (mi / 2);
          ldmatrix_x4_trans(f, sa + ATile::offset(r, a0 / 8 + 2 * i + mi % 2));
        } else {
          const int r = a0 + i * 16 + (lane % 8) + 8 * (mi % 2);
          ldmatrix_x4(f, sa + ATile::offset(r, kk * 2 + mi / 2));
        }
      },
      [&](u32 (&f)[4], int t, int kk) {
        load_b_k_rows<BTile>(f, sb, b_tile0, t, kk, lane, mi);
      });
}

} // namespace attnc

#endif
