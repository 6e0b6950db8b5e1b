// sm_90a building blocks: mbarriers, TMA tile loads (cp.async.bulk.tensor),
// wgmma shared-memory descriptors and fences, named barriers, setmaxnreg.
// Inline PTX only and no toolkit headers, like sm80_primitives.cuh, so NVRTC
// needs no include path for it.
#ifndef ATTNC_SM90_PRIMITIVES_CUH
#define ATTNC_SM90_PRIMITIVES_CUH

#include "attnc/sm80_primitives.cuh"
#include "attnc/sm90_args.cuh"

namespace attnc {

// ---- mbarrier -------------------------------------------------------------

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
/// Makes the initialised barriers visible to the async proxy (TMA) and to
/// the other threads once followed by a CTA barrier.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/// One arrival that also announces \p bytes of TMA traffic to wait for.
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}
/// Adds \p bytes to the transactions the phase waits for, without an
/// arrival (the caller arrives later, once what it writes beside the loads
/// is in place).
__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/// Blocks until the phase of parity \p parity has completed.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

/// One arrival on \p bar once this thread's earlier cp.async copies have
/// landed; counted among the barrier's expected arrivals (.noinc).
__device__ __forceinline__ void cp_async_mbar_arrive(u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar)
               : "memory");
}

// ---- TMA ------------------------------------------------------------------

/// Loads one box of the 4-D tensor \p map at coordinates (c0..c3, innermost
/// first) into shared memory at \p dst, completing \p bar's transaction
/// count. Out-of-bounds elements are written as zeros.
__device__ __forceinline__ void tma_load_4d(u32 dst, const TmaDesc *map, int c0, int c1,
                                            int c2, int c3, u32 bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2),
      "r"(c3), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void tma_prefetch_desc(const TmaDesc *map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(map))
               : "memory");
}
/// The coordinate of slot \p slot (1..3) given the sequence, head and batch
/// indices and their packed slots (Sm90Maps::*_pos).
__device__ __forceinline__ int tma_coord(int slot, int pos, int s, int h, int b) {
  return ((pos & 3) == slot ? s : 0) + (((pos >> 2) & 3) == slot ? h : 0) +
         (((pos >> 4) & 3) == slot ? b : 0);
}
/// The rows from sequence index \p s of head \p h, batch \p b of the 4-D
/// map \p map (its dimensions' slots in \p pos, see tma_coord): kCols
/// columns as boxes of 64 (one 128-byte swizzle atom), kSlabBytes apart from
/// \p dst, completing \p bar's transaction count. One thread.
template <int kCols, int kSlabBytes>
__device__ __forceinline__ void tma_load_slabs(u32 dst, const TmaDesc *map, int pos, int s,
                                               int h, int b, u32 bar) {
  static_assert(kCols % 64 == 0, "a box is 64 columns of 16-bit elements");
#pragma unroll
  for (int c = 0; c < kCols / 64; ++c)
    tma_load_4d(dst + c * kSlabBytes, map, c * 64, tma_coord(1, pos, s, h, b),
                tma_coord(2, pos, s, h, b), tma_coord(3, pos, s, h, b), bar);
}

// ---- wgmma ----------------------------------------------------------------

/// A shared-memory matrix descriptor for the 128-byte swizzle (the layout
/// TMA writes with CU_TENSOR_MAP_SWIZZLE_128B): start address, leading and
/// stride byte offsets (each field the byte value >> 4), base offset 0 (every
/// tile starts on a 1024-byte boundary), layout type 1 in bits 62-63.
__device__ __forceinline__ u64 wgmma_desc_sw128(u32 addr, u32 lbo, u32 sbo) {
  return static_cast<u64>((addr & 0x3ffffu) >> 4) |
         (static_cast<u64>((lbo & 0x3ffffu) >> 4) << 16) |
         (static_cast<u64>((sbo & 0x3ffffu) >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
/// Waits until at most \p N of this warpgroup's committed groups are pending.
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/// Orders this thread's completed generic-proxy writes to shared memory
/// (ordinary stores, cp.async) before later async-proxy reads (wgmma, TMA
/// stores) by any thread that synchronises with it afterwards.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/// The same between global-memory writes of the two proxies (a bulk copy's
/// completed writes and a later release, an acquire and a later bulk copy).
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
/// Bulk copies of \p bytes (a multiple of 16, both addresses 16-byte
/// aligned) from shared to global memory, in this thread's bulk group:
/// a store, or an fp32 add into what is there (in L2, nothing read back).
__device__ __forceinline__ void bulk_store_s2g(void *dst, u32 src, u32 bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst),
               "r"(src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_reduce_add_f32_s2g(void *dst, u32 src, u32 bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::
                   "l"(dst),
               "r"(src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
/// Waits until this thread's bulk groups are complete (their writes done).
__device__ __forceinline__ void bulk_wait_all() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
/// Waits until this thread's bulk groups have read their sources (the
/// shared memory may be overwritten; the writes may still be under way).
__device__ __forceinline__ void bulk_wait_read_all() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
/// Two adjacent floats to or from shared memory (8-byte aligned).
__device__ __forceinline__ void st_shared_f2(u32 addr, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1,%2};\n" ::"r"(addr), "f"(x), "f"(y) : "memory");
}
__device__ __forceinline__ void ld_shared_f2(u32 addr, float &x, float &y) {
  asm volatile("ld.shared.v2.f32 {%0,%1}, [%2];\n" : "=f"(x), "=f"(y) : "r"(addr) : "memory");
}
/// Pins the accumulator registers in place across an async wgmma boundary:
/// the compiler may not move reads or writes of \p acc across this point.
template <int A, int B>
__device__ __forceinline__ void fence_regs(float (&acc)[A][B]) {
#pragma unroll
  for (int i = 0; i < A; ++i)
#pragma unroll
    for (int j = 0; j < B; ++j)
      asm volatile("" : "+f"(acc[i][j])::"memory");
}
template <int A, int B> __device__ __forceinline__ void fence_regs(u32 (&r)[A][B]) {
#pragma unroll
  for (int i = 0; i < A; ++i)
#pragma unroll
    for (int j = 0; j < B; ++j)
      asm volatile("" : "+r"(r[i][j])::"memory");
}

// ---- warpgroup control ----------------------------------------------------

/// Named barriers (id 0 is __syncthreads): sync waits for \p count threads,
/// arrive counts this warp in without waiting.
__device__ __forceinline__ void named_bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
/// The same barrier for warps that reach it from different code (bar.sync
/// is barrier.sync.aligned, which requires every thread of a warp, and
/// every warp, to execute the same instruction; synccheck reports
/// "Divergent thread(s) in block" otherwise).
__device__ __forceinline__ void named_bar_sync_unaligned(int id, int count) {
  asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
/// Gives registers back to (dec) or takes them from (inc) the CTA's pool;
/// executed by every thread of a warpgroup.
template <int N> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

/// cp.async of rows [row0, row0 + kRows) of a tensor with kCols 16-bit
/// columns into kCols / 64 swizzled [kRows][64] slabs, slab s at
/// smem + s · kRows · 128. Rows at or past \p limit are zero-filled.
template <int kRows, int kCols, int kThreads>
__device__ __forceinline__ void load_slabs_async(u32 smem, const unsigned short *base,
                                                 long long stride, int row0, int limit) {
#pragma unroll
  for (int s = 0; s < kCols / 64; ++s)
    load_tile_async<SwizzledTile<kRows, 64>, kRows, 64, kThreads>(
        smem + s * kRows * 128, base + s * 64, stride, row0, limit);
}

/// dQ's workspace as 16-byte stores at L2 and reductions (sm_90's
/// red.global.add.v4.f32): \p p 16-byte aligned.
__device__ __forceinline__ void st_cg_f4(float *p, const float (&x)[4]) {
  asm volatile("st.global.cg.v4.f32 [%0], {%1,%2,%3,%4};\n" ::"l"(p), "f"(x[0]), "f"(x[1]),
               "f"(x[2]), "f"(x[3])
               : "memory");
}
__device__ __forceinline__ void red_add_f4(float *p, const float (&x)[4]) {
  asm volatile("red.relaxed.gpu.global.add.v4.f32 [%0], {%1,%2,%3,%4};\n" ::"l"(p),
               "f"(x[0]), "f"(x[1]), "f"(x[2]), "f"(x[3])
               : "memory");
}

} // namespace attnc

#endif
