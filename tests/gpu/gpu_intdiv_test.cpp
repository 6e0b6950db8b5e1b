// GPU test of the device library's integer floordiv and floormod
// (variant_support.cuh): the float-quotient path (dividends below 2^21,
// positive divisors) and the integer one against exact floor division on
// the host, over every edge of the fast path. Exits 77 where there is no
// GPU.
#include "GpuSupport.h"

#include "attn/runtime/Compiler.h"

#include <cstdio>
#include <random>
#include <vector>

using namespace attn;
using namespace attn::gputest;

namespace {

const char *KernelText = R"(
#include "attnc/variant_support.cuh"
extern "C" __global__ void intdiv_test(const int *a, const int *b, int *q,
                                       int *r, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    q[i] = attnc::floordiv(a[i], b[i]);
    r[i] = attnc::floormod(a[i], b[i]);
  }
}
)";

/// The IR's floordiv and mod (ir-semantics.md) in 64-bit integers.
void exact(int64_t A, int64_t B, int64_t &Q, int64_t &R) {
  if (B == 0) {
    Q = 0;
    R = A;
    return;
  }
  Q = A / B;
  if (Q * B != A && ((A < 0) != (B < 0)))
    --Q;
  R = A - Q * B;
}

} // namespace

int main() {
  auto &Drv = runtime::CudaDriver::get();
  if (!Drv.available()) {
    std::printf("skipped: %s\n", Drv.unavailableReason().c_str());
    return 77;
  }
  GpuArch Arch = runtime::resolveArch(std::nullopt);
  codegen::KernelSource Src{"intdiv_test", {"intdiv_test"}, KernelText, Arch};
  runtime::CompiledCubin Bin = runtime::compileToCubin(Src);
  CUmodule Mod;
  CUfunction Fn;
  Drv.check(Drv.cuModuleLoadData(&Mod, Bin.Cubin.data()), "cuModuleLoadData");
  Drv.check(Drv.cuModuleGetFunction(&Fn, Mod, "intdiv_test"), "get function");

  // Dividends around 0, the chunk multiples and the fast path's bound
  // (2^21), divisors small, large and at the float-exact limit (2^24).
  std::vector<int> As, Bs;
  const int Edge = 1 << 21;
  std::vector<int> ADiv = {0,        1,         -1,        255,       256,
                           257,      16383,     16384,     Edge - 1,  Edge,
                           -Edge + 1, -Edge,    Edge + 1,  (1 << 24) + 1,
                           2147483647, -2147483647 - 1};
  std::vector<int> BDiv = {1,   2,         3,         7,        64,
                           255, 256,       1000,      4097,     Edge - 1,
                           Edge, (1 << 24) + 1, 2147483647, 0,  -1,
                           -256};
  for (int A : ADiv)
    for (int B : BDiv)
      As.push_back(A), Bs.push_back(B);
  std::mt19937 Rng(3);
  for (int I = 0; I < 1 << 20; ++I) {
    // Mostly the fast path: dividends below 2^21, divisors up to 2^21.
    As.push_back(int(Rng() % (2 * Edge)) - Edge);
    Bs.push_back(1 + int(Rng() % (I % 2 ? 512 : Edge)));
  }
  for (int I = 0; I < 1 << 16; ++I) {
    As.push_back(int(Rng()));
    Bs.push_back(int(Rng()) >> (Rng() % 31));
  }
  const int N = int(As.size());
  DeviceBuffer DA(N * 4), DB(N * 4), DQ(N * 4), DR(N * 4);
  DA.upload(As.data(), N * 4);
  DB.upload(Bs.data(), N * 4);
  CUdeviceptr PA = CUdeviceptr(DA.get()), PB = CUdeviceptr(DB.get()),
              PQ = CUdeviceptr(DQ.get()), PR = CUdeviceptr(DR.get());
  int Count = N;
  void *Params[] = {&PA, &PB, &PQ, &PR, &Count};
  Drv.check(Drv.cuLaunchKernel(Fn, unsigned((N + 255) / 256), 1, 1, 256, 1, 1,
                               0, nullptr, Params, nullptr),
            "launch intdiv_test");
  Drv.check(Drv.cuCtxSynchronize(), "intdiv_test");
  std::vector<int> Q(N), R(N);
  DQ.download(Q.data(), N * 4);
  DR.download(R.data(), N * 4);
  int Bad = 0;
  for (int I = 0; I < N; ++I) {
    int64_t WantQ, WantR;
    exact(As[I], Bs[I], WantQ, WantR);
    // The quotient of INT_MIN / -1 does not fit an int: not a case.
    if (As[I] == -2147483647 - 1 && Bs[I] == -1)
      continue;
    if (Q[I] != WantQ || R[I] != WantR) {
      if (Bad++ < 10)
        std::printf("floordiv(%d, %d) = %d, floormod = %d; expected %lld, "
                    "%lld\n",
                    As[I], Bs[I], Q[I], R[I], (long long)WantQ,
                    (long long)WantR);
    }
  }
  std::printf("%d operand pairs, %d wrong: %s\n", N, Bad, Bad ? "FAIL" : "pass");
  return Bad ? 1 : 0;
}
