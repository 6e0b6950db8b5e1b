// A minimal kernel with the backward's mbarrier hand-offs, for racecheck.
//
// bwd_sm90's producer warp copies the rows' finals with cp.async and arrives
// on the stage's full barrier with cp.async.mbarrier.arrive.noinc; the packed
// form's producer lane also writes stage metadata with st.shared before its
// own arrival, and lane 0 announces the TMA tiles' bytes (expect_tx). The
// consumers wait on the barrier's parity (an acquire) and read; each
// consumer WARP then releases the stage with one arrival on the empty
// barrier, made by lane 0 after __syncwarp (bwd_sm90.cuh's release), before
// the producer refills it. compute-sanitizer's racecheck reports hazards on
// these stages in gpu_varlen_test. This kernel does nothing but the
// hand-offs, through the same primitives (runtime/kernels/sm80_primitives.cuh,
// sm90_primitives.cuh), one ingredient at a time, and checks its sums: a
// mode that racecheck flags while its sums hold over many stages and CTAs
// shows which ordering racecheck does not follow.
//
// Modes (the full barrier's arrivals; the empty barrier's):
//   0  cp.async + noinc arrive a producer lane; an arrival a consumer thread
//   1  st.shared + arrive a producer lane;      an arrival a consumer thread
//   2  positive control (RAW): mode 0, consumers read without the wait
//   3  mode 0's fill; an arrival a consumer WARP (__syncwarp, lane 0), as
//      bwd_sm90 releases a stage
//   4  mode 3 plus the packed form's metadata: producer lane 0 stores it
//      and arrives (expect 33 arrivals), consumers read it with ld.shared.v4
//   5  positive control (WAR): mode 0, consumers arrive BEFORE they read
//   6  bwd_sm90's whole stage: mode 4 plus a bulk copy (as TMA) completing
//      lane 0's expect_tx, its tile read by the consumers too
//
// Build and run on an sm_90 GPU (not part of the build; the results are in
// docs/runtime.md, "racecheck on bwd_sm90's ring" under "The GPU backward test"):
//   mkdir -p /tmp/inc && ln -sfn $PWD/runtime/kernels /tmp/inc/attnc
//   nvcc -O2 -lineinfo -arch=sm_90a -I/tmp/inc tools/probes/mbarrier_racecheck.cu -o probe
//   ./probe [mode [ctas [iters]]] && compute-sanitizer --tool racecheck ./probe MODE
// The probe prints "sums ok" or the first wrong sum per mode and exits 1 on
// a wrong sum of a mode that is not a positive control.
#include "attnc/sm90_primitives.cuh"

#include <cstdio>
#include <cstdlib>
#include <vector>

using namespace attnc;

namespace {

constexpr int kStages = 2;
constexpr int kConsumers = 128; // one int of a stage each, four warps
constexpr int kConsumerWarps = kConsumers / 32;
constexpr int kThreads = 32 + kConsumers;
constexpr int kTileBytes = kConsumers * 4; // mode 6's bulk copy

enum Mode : int {
  CpAsyncNoinc = 0,
  StoreArrive = 1,
  NoWait = 2,
  WarpRelease = 3,
  WarpReleaseMeta = 4,
  EarlyRelease = 5,
  WholeStage = 6,
  kModes = 7,
};

__host__ __device__ constexpr bool warpRelease(int m) {
  return m == WarpRelease || m == WarpReleaseMeta || m == WholeStage;
}
__host__ __device__ constexpr bool hasMeta(int m) {
  return m == WarpReleaseMeta || m == WholeStage;
}
constexpr bool positiveControl(int m) { return m == NoWait || m == EarlyRelease; }

struct Shared {
  alignas(128) int stage[kStages][kConsumers];
  alignas(128) int tile[kStages][kConsumers];
  alignas(16) unsigned meta[kStages][4];
  unsigned long long full[kStages], empty[kStages];
};

/// A bulk copy global -> shared completing \p bytes of \p bar's
/// transaction count (TMA's completion, without a tensor map).
__device__ __forceinline__ void bulk_load(u32 dst, const void *src, u32 bytes, u32 bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

__global__ void probe(const int *in, long long *out, int iters, int mode) {
  __shared__ Shared s;
  const int tid = threadIdx.x, lane = tid % 32;
  const int *cta_in = in + (long long)blockIdx.x * iters * kConsumers;
  if (tid == 0) {
    for (int st = 0; st < kStages; ++st) {
      // Full: one arrival a producer lane, and lane 0's own (metadata,
      // expect_tx) where the mode has them; empty: a consumer thread or warp.
      mbar_init(smem_addr(&s.full[st]), 32 + (hasMeta(mode) ? 1 : 0));
      mbar_init(smem_addr(&s.empty[st]), warpRelease(mode) ? kConsumerWarps : kConsumers);
    }
    mbar_init_fence();
  }
  __syncthreads();
  if (tid < 32) { // producer warp: 4 ints a lane a stage
    for (int it = 0; it < iters; ++it) {
      const int st = it % kStages;
      if (it >= kStages)
        mbar_wait(smem_addr(&s.empty[st]), ((it / kStages) + 1) & 1);
      const int *src = cta_in + (long long)it * kConsumers;
      const u32 bar = smem_addr(&s.full[st]);
      if (hasMeta(mode) && lane == 0) {
        st_shared_32(smem_addr(&s.meta[st][0]), (u32)it);
        st_shared_32(smem_addr(&s.meta[st][1]), (u32)(it & 7));
        if (mode == WholeStage) {
          mbar_arrive_expect_tx(bar, kTileBytes);
          bulk_load(smem_addr(&s.tile[st][0]), src, kTileBytes, bar);
        } else {
          mbar_arrive(bar);
        }
      }
      for (int k = 0; k < 4; ++k) {
        int *dst = &s.stage[st][lane * 4 + k];
        if (mode == StoreArrive)
          *reinterpret_cast<volatile int *>(dst) = src[lane * 4 + k];
        else
          cp_async_4(smem_addr(dst), src + lane * 4 + k, true);
      }
      if (mode == StoreArrive)
        mbar_arrive(bar);
      else
        cp_async_mbar_arrive(bar);
    }
    cp_async_wait<0>();
    return;
  }
  const int c = tid - 32;
  long long sum = 0;
  for (int it = 0; it < iters; ++it) {
    const int st = it % kStages;
    const u32 full = smem_addr(&s.full[st]), empty = smem_addr(&s.empty[st]);
    if (mode != NoWait)
      mbar_wait(full, (it / kStages) & 1);
    if (mode == EarlyRelease) { // the stage released before it is read
      mbar_arrive(empty);
      __nanosleep(256);
    }
    sum += *reinterpret_cast<volatile int *>(&s.stage[st][c]);
    if (hasMeta(mode)) {
      const u32x4 md = ld_shared_128(smem_addr(&s.meta[st][0]));
      sum += (long long)md.x * 3 + md.y;
    }
    if (mode == WholeStage)
      sum += *reinterpret_cast<volatile int *>(&s.tile[st][c]);
    if (mode == NoWait) // keep the producer's phases turning
      mbar_wait(full, (it / kStages) & 1);
    if (warpRelease(mode)) { // bwd_sm90's release
      __syncwarp();
      if (lane == 0)
        mbar_arrive(empty);
    } else if (mode != EarlyRelease) {
      mbar_arrive(empty);
    }
  }
  out[(long long)blockIdx.x * kConsumers + c] = sum;
}

bool check(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return false;
}

} // namespace

int main(int argc, char **argv) {
  const int mode = argc > 1 ? std::atoi(argv[1]) : -1; // -1: every checked mode
  const int ctas = argc > 2 ? std::atoi(argv[2]) : 1;
  const int iters = argc > 3 ? std::atoi(argv[3]) : 4096;
  if (mode >= kModes || ctas < 1 || iters < kStages) {
    std::fprintf(stderr, "usage: probe [mode 0..%d [ctas [iters >= %d]]]\n", kModes - 1,
                 kStages);
    return 2;
  }
  const size_t per_cta = static_cast<size_t>(iters) * kConsumers;
  std::vector<int> host(per_cta * ctas);
  unsigned x = 12345u;
  for (int &v : host) { // random, never zeros
    x = x * 1664525u + 1013904223u;
    v = static_cast<int>(x >> 8) - (1 << 23);
  }
  std::vector<long long> stage_sum(static_cast<size_t>(ctas) * kConsumers, 0);
  for (int b = 0; b < ctas; ++b)
    for (int it = 0; it < iters; ++it)
      for (int c = 0; c < kConsumers; ++c)
        stage_sum[b * kConsumers + c] += host[b * per_cta + static_cast<size_t>(it) * kConsumers + c];
  long long meta_sum = 0;
  for (int it = 0; it < iters; ++it)
    meta_sum += 3LL * it + (it & 7);
  int *in = nullptr;
  long long *out = nullptr;
  if (!check(cudaMalloc(&in, host.size() * sizeof(int)), "cudaMalloc") ||
      !check(cudaMalloc(&out, stage_sum.size() * sizeof(long long)), "cudaMalloc") ||
      !check(cudaMemcpy(in, host.data(), host.size() * sizeof(int), cudaMemcpyHostToDevice),
             "cudaMemcpy"))
    return 2;
  int bad = 0;
  for (int m = 0; m < kModes; ++m) {
    if (mode >= 0 ? m != mode : positiveControl(m))
      continue;
    cudaMemset(out, 0x5a, stage_sum.size() * sizeof(long long)); // poison
    probe<<<ctas, kThreads>>>(in, out, iters, m);
    if (!check(cudaDeviceSynchronize(), "probe"))
      return 2;
    std::vector<long long> got(stage_sum.size());
    cudaMemcpy(got.data(), out, got.size() * sizeof(long long), cudaMemcpyDeviceToHost);
    int wrong = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const long long want =
          stage_sum[i] * (m == WholeStage ? 2 : 1) + (hasMeta(m) ? meta_sum : 0);
      if (got[i] != want && wrong++ == 0)
        std::printf("mode %d: cta %zu consumer %zu sum %lld, expected %lld\n", m,
                    i / kConsumers, i % kConsumers, got[i], want);
    }
    if (wrong) {
      std::printf("mode %d: %d of %zu sums wrong (%d CTAs x %d stages)%s\n", m, wrong,
                  got.size(), ctas, iters, positiveControl(m) ? " (positive control)" : "");
      bad += positiveControl(m) ? 0 : 1;
    } else {
      std::printf("mode %d: sums ok (%d CTAs x %d stages)\n", m, ctas, iters);
    }
  }
  return bad ? 1 : 0;
}
