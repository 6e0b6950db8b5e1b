// wgmma.mma_async m64nNk16 with fp32 accumulators for one warpgroup, for the
// N the fwd_sm90 skeleton uses (64, 128, 192, 256), f16 or bf16 inputs:
//   ss: A and B from shared memory (descriptors), both K-major;
//   ss_mn (N 64 and 128): both from shared memory, both MN-major;
//   ss_bt (N 128 and 192): both from shared memory, A K-major, B MN-major;
//   rs: A from registers (the m16n8k16 A-fragment layout per warp), B from
//       shared memory, MN-major (the transpose bit set).
// The accumulator d[N/8][4] holds, per warp w of the warpgroup, rows 16w+g
// and 16w+g+8 (g = lane/4): d[j][0..1] row 16w+g, cols 8j+2(lane%4)+{0,1};
// d[j][2..3] the same cols of row 16w+g+8 - the mma.sync m16n8 C layout
// repeated over N. Spelled out per N (an asm operand list cannot be built
// by a loop). \p accumulate 0 overwrites d (scale-d false).
#ifndef ATTNC_SM90_WGMMA_CUH
#define ATTNC_SM90_WGMMA_CUH

#include "attnc/sm80_primitives.cuh"

namespace attnc {

template <int N> struct Wgmma;

// The 32 accumulator operands of m64n64.
#define ATTNC_WGMMA_D64 \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), \
  "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
  "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
  "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), \
  "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), \
  "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
  "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
  "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
#define ATTNC_WGMMA_SS64(TY, TR) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {%0, %1, %2, " \
    "%3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
    "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, " \
    "%32, %33, p, 1, 1, " TR ";\n" \
    "}\n" \
    : ATTNC_WGMMA_D64 \
    : "l"(a), "l"(b), "r"(accumulate))
#define ATTNC_WGMMA_RS64(TY) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {%0, %1, %2, " \
    "%3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
    "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, " \
    "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n" \
    "}\n" \
    : ATTNC_WGMMA_D64 \
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate))

template <> struct Wgmma<64> {
  template <class T>
  __device__ static __forceinline__ void ss(float (&d)[8][4], u64 a, u64 b, int accumulate) {
    if constexpr (T::kIsBf16)
      ATTNC_WGMMA_SS64("bf16", "0, 0");
    else
      ATTNC_WGMMA_SS64("f16", "0, 0");
  }
  /// ss with both operands MN-major (the transpose bits set): A
  /// [k][m] and B [k][n] in shared memory, as bwd_sm90's fused dQ reads dSᵀ
  /// and K.
  template <class T>
  __device__ static __forceinline__ void ss_mn(float (&d)[8][4], u64 a, u64 b,
                                               int accumulate) {
    if constexpr (T::kIsBf16)
      ATTNC_WGMMA_SS64("bf16", "1, 1");
    else
      ATTNC_WGMMA_SS64("f16", "1, 1");
  }
  template <class T>
  __device__ static __forceinline__ void rs(float (&d)[8][4], const u32 (&a)[4], u64 b,
                                            int accumulate) {
    if constexpr (T::kIsBf16)
      ATTNC_WGMMA_RS64("bf16");
    else
      ATTNC_WGMMA_RS64("f16");
  }
};
#undef ATTNC_WGMMA_SS64
#undef ATTNC_WGMMA_RS64
#undef ATTNC_WGMMA_D64

// The 64 accumulator operands of m64n128.
#define ATTNC_WGMMA_D128 \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), \
  "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
  "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
  "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), \
  "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), \
  "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
  "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
  "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), \
  "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), \
  "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), \
  "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), \
  "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), \
  "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), \
  "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), \
  "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), \
  "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
#define ATTNC_WGMMA_SS128(TY, TR) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {%0, %1, %2, " \
    "%3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
    "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, " \
    "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, " \
    "%60, %61, %62, %63}, %64, %65, p, 1, 1, " TR ";\n" \
    "}\n" \
    : ATTNC_WGMMA_D128 \
    : "l"(a), "l"(b), "r"(accumulate))
#define ATTNC_WGMMA_RS128(TY) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {%0, %1, %2, " \
    "%3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
    "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, " \
    "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, " \
    "%60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n" \
    "}\n" \
    : ATTNC_WGMMA_D128 \
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate))

template <> struct Wgmma<128> {
  template <class T>
  __device__ static __forceinline__ void ss(float (&d)[16][4], u64 a, u64 b, int accumulate) {
    if constexpr (T::kIsBf16)
      ATTNC_WGMMA_SS128("bf16", "0, 0");
    else
      ATTNC_WGMMA_SS128("f16", "0, 0");
  }
  /// ss with both operands MN-major (the transpose bits set): A
  /// [k][m] and B [k][n] in shared memory, as bwd_sm90's fused dQ reads dSᵀ
  /// and K.
  template <class T>
  __device__ static __forceinline__ void ss_mn(float (&d)[16][4], u64 a, u64 b,
                                               int accumulate) {
    if constexpr (T::kIsBf16)
      ATTNC_WGMMA_SS128("bf16", "1, 1");
    else
      ATTNC_WGMMA_SS128("f16", "1, 1");
  }
  /// ss with B MN-major (its transpose bit set): A [m][k] and B [k][n], as
  /// bwd_sm90's roles form reads Pᵀ or dSᵀ and dO or Q.
  template <class T>
  __device__ static __forceinline__ void ss_bt(float (&d)[16][4], u64 a, u64 b,
                                               int accumulate) {
    if constexpr (T::kIsBf16)
      ATTNC_WGMMA_SS128("bf16", "0, 1");
    else
      ATTNC_WGMMA_SS128("f16", "0, 1");
  }
  template <class T>
  __device__ static __forceinline__ void rs(float (&d)[16][4], const u32 (&a)[4], u64 b,
                                            int accumulate) {
    if constexpr (T::kIsBf16)
      ATTNC_WGMMA_RS128("bf16");
    else
      ATTNC_WGMMA_RS128("f16");
  }
};
#undef ATTNC_WGMMA_SS128
#undef ATTNC_WGMMA_RS128
#undef ATTNC_WGMMA_D128

// The 96 accumulator operands of m64n192.
#define ATTNC_WGMMA_D192 \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), \
  "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
  "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
  "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), \
  "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), \
  "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
  "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
  "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), \
  "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), \
  "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), \
  "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), \
  "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), \
  "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), \
  "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), \
  "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), \
  "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]), \
  "+f"(d[16][0]), "+f"(d[16][1]), "+f"(d[16][2]), "+f"(d[16][3]), \
  "+f"(d[17][0]), "+f"(d[17][1]), "+f"(d[17][2]), "+f"(d[17][3]), \
  "+f"(d[18][0]), "+f"(d[18][1]), "+f"(d[18][2]), "+f"(d[18][3]), \
  "+f"(d[19][0]), "+f"(d[19][1]), "+f"(d[19][2]), "+f"(d[19][3]), \
  "+f"(d[20][0]), "+f"(d[20][1]), "+f"(d[20][2]), "+f"(d[20][3]), \
  "+f"(d[21][0]), "+f"(d[21][1]), "+f"(d[21][2]), "+f"(d[21][3]), \
  "+f"(d[22][0]), "+f"(d[22][1]), "+f"(d[22][2]), "+f"(d[22][3]), \
  "+f"(d[23][0]), "+f"(d[23][1]), "+f"(d[23][2]), "+f"(d[23][3])
#define ATTNC_WGMMA_SS192(TY, TR) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n192k16.f32." TY "." TY " {%0, %1, %2, " \
    "%3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
    "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, " \
    "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, " \
    "%60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, " \
    "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, " \
    "%88, %89, %90, %91, %92, %93, %94, %95}, %96, %97, p, 1, 1, " TR ";\n" \
    "}\n" \
    : ATTNC_WGMMA_D192 \
    : "l"(a), "l"(b), "r"(accumulate))
#define ATTNC_WGMMA_RS192(TY) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %101, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n192k16.f32." TY "." TY " {%0, %1, %2, " \
    "%3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
    "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, " \
    "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, " \
    "%60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, " \
    "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, " \
    "%88, %89, %90, %91, %92, %93, %94, %95}, {%96, %97, %98, %99}, %100, p, " \
    "1, 1, 1;\n" \
    "}\n" \
    : ATTNC_WGMMA_D192 \
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate))

template <> struct Wgmma<192> {
  template <class T>
  __device__ static __forceinline__ void ss(float (&d)[24][4], u64 a, u64 b, int accumulate) {
    if constexpr (T::kIsBf16)
      ATTNC_WGMMA_SS192("bf16", "0, 0");
    else
      ATTNC_WGMMA_SS192("f16", "0, 0");
  }
  /// As Wgmma<128>::ss_bt.
  template <class T>
  __device__ static __forceinline__ void ss_bt(float (&d)[24][4], u64 a, u64 b,
                                               int accumulate) {
    if constexpr (T::kIsBf16)
      ATTNC_WGMMA_SS192("bf16", "0, 1");
    else
      ATTNC_WGMMA_SS192("f16", "0, 1");
  }
  template <class T>
  __device__ static __forceinline__ void rs(float (&d)[24][4], const u32 (&a)[4], u64 b,
                                            int accumulate) {
    if constexpr (T::kIsBf16)
      ATTNC_WGMMA_RS192("bf16");
    else
      ATTNC_WGMMA_RS192("f16");
  }
};
#undef ATTNC_WGMMA_SS192
#undef ATTNC_WGMMA_RS192
#undef ATTNC_WGMMA_D192

// The 128 accumulator operands of m64n256.
#define ATTNC_WGMMA_D256 \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), \
  "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
  "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
  "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), \
  "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), \
  "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
  "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
  "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), \
  "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), \
  "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), \
  "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), \
  "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), \
  "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), \
  "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), \
  "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), \
  "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3]), \
  "+f"(d[16][0]), "+f"(d[16][1]), "+f"(d[16][2]), "+f"(d[16][3]), \
  "+f"(d[17][0]), "+f"(d[17][1]), "+f"(d[17][2]), "+f"(d[17][3]), \
  "+f"(d[18][0]), "+f"(d[18][1]), "+f"(d[18][2]), "+f"(d[18][3]), \
  "+f"(d[19][0]), "+f"(d[19][1]), "+f"(d[19][2]), "+f"(d[19][3]), \
  "+f"(d[20][0]), "+f"(d[20][1]), "+f"(d[20][2]), "+f"(d[20][3]), \
  "+f"(d[21][0]), "+f"(d[21][1]), "+f"(d[21][2]), "+f"(d[21][3]), \
  "+f"(d[22][0]), "+f"(d[22][1]), "+f"(d[22][2]), "+f"(d[22][3]), \
  "+f"(d[23][0]), "+f"(d[23][1]), "+f"(d[23][2]), "+f"(d[23][3]), \
  "+f"(d[24][0]), "+f"(d[24][1]), "+f"(d[24][2]), "+f"(d[24][3]), \
  "+f"(d[25][0]), "+f"(d[25][1]), "+f"(d[25][2]), "+f"(d[25][3]), \
  "+f"(d[26][0]), "+f"(d[26][1]), "+f"(d[26][2]), "+f"(d[26][3]), \
  "+f"(d[27][0]), "+f"(d[27][1]), "+f"(d[27][2]), "+f"(d[27][3]), \
  "+f"(d[28][0]), "+f"(d[28][1]), "+f"(d[28][2]), "+f"(d[28][3]), \
  "+f"(d[29][0]), "+f"(d[29][1]), "+f"(d[29][2]), "+f"(d[29][3]), \
  "+f"(d[30][0]), "+f"(d[30][1]), "+f"(d[30][2]), "+f"(d[30][3]), \
  "+f"(d[31][0]), "+f"(d[31][1]), "+f"(d[31][2]), "+f"(d[31][3])
#define ATTNC_WGMMA_SS256(TY) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " {%0, %1, %2, " \
    "%3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
    "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, " \
    "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, " \
    "%60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, " \
    "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, " \
    "%88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, " \
    "%102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, " \
    "%114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, " \
    "%126, %127}, %128, %129, p, 1, 1, 0, 0;\n" \
    "}\n" \
    : ATTNC_WGMMA_D256 \
    : "l"(a), "l"(b), "r"(accumulate))
#define ATTNC_WGMMA_RS256(TY) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " {%0, %1, %2, " \
    "%3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, " \
    "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, " \
    "%46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, " \
    "%60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, " \
    "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, " \
    "%88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, " \
    "%102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, " \
    "%114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, " \
    "%126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n" \
    "}\n" \
    : ATTNC_WGMMA_D256 \
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate))

template <> struct Wgmma<256> {
  template <class T>
  __device__ static __forceinline__ void ss(float (&d)[32][4], u64 a, u64 b, int accumulate) {
    if constexpr (T::kIsBf16)
      ATTNC_WGMMA_SS256("bf16");
    else
      ATTNC_WGMMA_SS256("f16");
  }
  template <class T>
  __device__ static __forceinline__ void rs(float (&d)[32][4], const u32 (&a)[4], u64 b,
                                            int accumulate) {
    if constexpr (T::kIsBf16)
      ATTNC_WGMMA_RS256("bf16");
    else
      ATTNC_WGMMA_RS256("f16");
  }
};
#undef ATTNC_WGMMA_SS256
#undef ATTNC_WGMMA_RS256
#undef ATTNC_WGMMA_D256

} // namespace attnc

#endif
