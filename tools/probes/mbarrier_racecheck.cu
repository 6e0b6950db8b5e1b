// A minimal kernel with the backward's mbarrier hand-offs, for racecheck.
//
// bwd_sm90's producer warp copies the rows' finals with cp.async and arrives
// on the stage's full barrier with cp.async.mbarrier.arrive.noinc; the packed
// form's producer lane also writes stage metadata with st.shared before a
// plain mbarrier.arrive. Consumers wait on the barrier's parity (an acquire)
// and read; they arrive on the empty barrier before the producer reuses the
// stage. compute-sanitizer's racecheck reports hazards on both hand-offs in
// gpu_varlen_test. This kernel does nothing but those hand-offs, through the
// same primitives (runtime/kernels/sm80_primitives.cuh, sm90_primitives.cuh), and checks its
// sums: if racecheck flags it while the sums hold over many stages, the
// reports on the backward are racecheck not following mbarrier ordering.
//
// Build and run on an sm_90 GPU (not part of the build; the result is in docs/runtime.md):
//   mkdir -p /tmp/inc && ln -sfn $PWD/runtime/kernels /tmp/inc/attnc
//   nvcc -O2 -arch=sm_90a -I/tmp/inc tools/probes/mbarrier_racecheck.cu -o probe
//   ./probe && compute-sanitizer --tool racecheck ./probe
// The probe prints "sums ok" or the first wrong sum and exits 1; a third
// mode, a stage read with NO wait, is racecheck's positive control.
#include "attnc/sm90_primitives.cuh"

#include <cstdio>
#include <cstdlib>
#include <vector>

using namespace attnc;

namespace {

constexpr int kStages = 2;
constexpr int kConsumers = 128; // one int of a stage each
constexpr int kThreads = 32 + kConsumers;

enum Mode : int {
  /// cp.async into the stage, cp.async.mbarrier.arrive.noinc (the finals).
  CpAsyncNoinc = 0,
  /// st.shared into the stage, mbarrier.arrive (the packed stage metadata).
  StoreArrive = 1,
  /// Positive control: consumers read a stage without waiting for it.
  NoWait = 2,
};

struct Shared {
  int stage[kStages][kConsumers];
  unsigned long long full[kStages], empty[kStages];
};

__global__ void probe(const int *in, long long *out, int iters, int mode) {
  __shared__ Shared s;
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int st = 0; st < kStages; ++st) {
      mbar_init(smem_addr(&s.full[st]), 32); // one arrival a producer lane
      mbar_init(smem_addr(&s.empty[st]), kConsumers);
    }
    mbar_init_fence();
  }
  __syncthreads();
  if (tid < 32) { // producer warp: 4 ints a lane a stage
    for (int it = 0; it < iters; ++it) {
      const int st = it % kStages;
      if (it >= kStages)
        mbar_wait(smem_addr(&s.empty[st]), ((it / kStages) + 1) & 1);
      const int *src = in + (long long)it * kConsumers + tid * 4;
      for (int k = 0; k < 4; ++k) {
        int *dst = &s.stage[st][tid * 4 + k];
        if (mode == StoreArrive)
          *reinterpret_cast<volatile int *>(dst) = src[k];
        else
          cp_async_4(smem_addr(dst), src + k, true);
      }
      if (mode == StoreArrive)
        mbar_arrive(smem_addr(&s.full[st]));
      else
        cp_async_mbar_arrive(smem_addr(&s.full[st]));
    }
    cp_async_wait<0>();
    return;
  }
  const int c = tid - 32;
  long long sum = 0;
  for (int it = 0; it < iters; ++it) {
    const int st = it % kStages;
    if (mode != NoWait)
      mbar_wait(smem_addr(&s.full[st]), (it / kStages) & 1);
    sum += *reinterpret_cast<volatile int *>(&s.stage[st][c]);
    if (mode == NoWait) // keep the producer's phases turning
      mbar_wait(smem_addr(&s.full[st]), (it / kStages) & 1);
    mbar_arrive(smem_addr(&s.empty[st]));
  }
  out[c] = sum;
}

bool check(cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return false;
}

} // namespace

int main(int argc, char **argv) {
  const int iters = 4096;
  const int mode = argc > 1 ? std::atoi(argv[1]) : -1; // -1: both checked modes
  std::vector<int> host(static_cast<size_t>(iters) * kConsumers);
  unsigned x = 12345u;
  for (int &v : host) { // random, never zeros
    x = x * 1664525u + 1013904223u;
    v = static_cast<int>(x >> 8) - (1 << 23);
  }
  std::vector<long long> want(kConsumers, 0);
  for (int it = 0; it < iters; ++it)
    for (int c = 0; c < kConsumers; ++c)
      want[c] += host[static_cast<size_t>(it) * kConsumers + c];
  int *in = nullptr;
  long long *out = nullptr;
  if (!check(cudaMalloc(&in, host.size() * sizeof(int)), "cudaMalloc") ||
      !check(cudaMalloc(&out, kConsumers * sizeof(long long)), "cudaMalloc") ||
      !check(cudaMemcpy(in, host.data(), host.size() * sizeof(int), cudaMemcpyHostToDevice),
             "cudaMemcpy"))
    return 2;
  int bad = 0;
  for (int m = 0; m <= NoWait; ++m) {
    if (mode >= 0 ? m != mode : m == NoWait)
      continue;
    cudaMemset(out, 0x5a, kConsumers * sizeof(long long)); // poison
    probe<<<1, kThreads>>>(in, out, iters, m);
    if (!check(cudaDeviceSynchronize(), "probe"))
      return 2;
    std::vector<long long> got(kConsumers);
    cudaMemcpy(got.data(), out, got.size() * sizeof(long long), cudaMemcpyDeviceToHost);
    for (int c = 0; c < kConsumers; ++c)
      if (got[c] != want[c]) {
        std::printf("mode %d: consumer %d sum %lld, expected %lld\n", m, c, got[c], want[c]);
        ++bad;
        break;
      }
    if (got == want)
      std::printf("mode %d: sums ok (%d stages)\n", m, iters);
  }
  return bad && mode != NoWait ? 1 : 0;
}
