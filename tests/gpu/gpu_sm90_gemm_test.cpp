// GPU test of the Hopper skeleton's building blocks, below the attention
// loop: TMA loads with the 128-byte swizzle (the shared-memory bytes are
// compared with the swizzle formula), S = Q·Kᵀ with both operands from
// shared-memory descriptors (K-major, two 64-column slabs), and O = P·V
// with P from registers and V MN-major through the transpose bit. The V
// descriptor is tried with the skeleton's leading/stride byte offsets and
// with the two swapped, so a failure says which encoding the hardware
// wants. Exits 77 (ctest: skipped) without an sm_90a device.
#include "GpuSupport.h"

#include "TmaMaps.h"

#include "attn/codegen/Arch.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/CudaDriver.h"

#include <fmt/format.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

using namespace attn;
using namespace attn::gputest;

namespace {

constexpr int M = 64, N = 128, K = 128; // S: M x N over K; O: M x K over N

const char *KernelText = R"(
#include "attnc/sm90_primitives.cuh"
#include "attnc/sm90_wgmma.cuh"
using namespace attnc;
extern "C" __global__ void __launch_bounds__(128, 1)
sm90_gemm_test(const __grid_constant__ Sm90Maps maps, const unsigned short *p,
               float *s_out, float *o_out, unsigned *raw_q, unsigned v_lbo,
               unsigned v_sbo) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const u32 base = (smem_addr(smem) + 1023u) & ~1023u;
  const u32 sq = base, sk = sq + 2 * 8192, sv = sk + 2 * 16384, bar = sv + 2 * 16384;
  if (threadIdx.x == 0) {
    mbar_init(bar, 1);
    mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbar_arrive_expect_tx(bar, 2 * 8192 + 4 * 16384);
    for (int s = 0; s < 2; ++s) {
      tma_load_4d(sq + s * 8192, &maps.q, 64 * s, 0, 0, 0, bar);
      tma_load_4d(sk + s * 16384, &maps.k, 64 * s, 0, 0, 0, bar);
      tma_load_4d(sv + s * 16384, &maps.v, 64 * s, 0, 0, 0, bar);
    }
  }
  mbar_wait(bar, 0);
  const unsigned char *gen = smem + (sq - smem_addr(smem));
  for (int i = threadIdx.x; i < 4096; i += 128)
    raw_q[i] = reinterpret_cast<const unsigned *>(gen)[i];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
  float acc[16][4];
  for (int j = 0; j < 16; ++j)
    for (int e = 0; e < 4; ++e)
      acc[j][e] = 0.f;
  const u64 qd = wgmma_desc_sw128(sq, 16, 1024), kd = wgmma_desc_sw128(sk, 16, 1024);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk)
    Wgmma<128>::ss<f16>(acc, qd + (kk / 4) * 512 + (kk % 4) * 2,
                        kd + (kk / 4) * 1024 + (kk % 4) * 2, kk > 0);
  wgmma_commit();
  wgmma_wait<0>();
  fence_regs(acc);
  for (int j = 0; j < 16; ++j)
    for (int e = 0; e < 4; ++e)
      s_out[(16 * warp + g + 8 * (e / 2)) * 128 + 8 * j + 2 * tq + (e % 2)] = acc[j][e];
  u32 pf[8][4];
  for (int kk = 0; kk < 8; ++kk)
    for (int i = 0; i < 4; ++i) {
      const int r = 16 * warp + g + 8 * (i % 2), c = 16 * kk + 2 * tq + 8 * (i / 2);
      pf[kk][i] = u32(p[r * 128 + c]) | (u32(p[r * 128 + c + 1]) << 16);
    }
  float o[16][4];
  for (int j = 0; j < 16; ++j)
    for (int e = 0; e < 4; ++e)
      o[j][e] = 0.f;
  const u64 vd = wgmma_desc_sw128(sv, v_lbo, v_sbo);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk)
    Wgmma<128>::rs<f16>(o, pf[kk], vd + kk * 128, 1);
  wgmma_commit();
  wgmma_wait<0>();
  fence_regs(o);
  for (int j = 0; j < 16; ++j)
    for (int e = 0; e < 4; ++e)
      o_out[(16 * warp + g + 8 * (e / 2)) * 128 + 8 * j + 2 * tq + (e % 2)] = o[j][e];
}
)";

std::vector<uint16_t> randomHalf(std::mt19937_64 &Rng, size_t N) {
  std::uniform_real_distribution<double> U(-1.0, 1.0);
  std::vector<uint16_t> Out(N);
  for (uint16_t &X : Out)
    X = toHalfBits(U(Rng));
  return Out;
}

double maxRelErr(const std::vector<float> &Got,
                 const std::vector<double> &Want) {
  double E = 0;
  for (size_t I = 0; I < Got.size(); ++I) {
    double D = std::isnan(Got[I]) ? 1e30 : std::fabs(Got[I] - Want[I]);
    E = std::max(E, D / (1.0 + std::fabs(Want[I])));
  }
  return E;
}

} // namespace

int main() {
  auto &Drv = runtime::CudaDriver::get();
  if (!Drv.available()) {
    std::printf("skipped: %s\n", Drv.unavailableReason().c_str());
    return 77;
  }
  const runtime::DeviceInfo &Dev = runtime::currentDevice();
  if (runtime::resolveArch(std::nullopt) != GpuArch::Sm90a) {
    std::printf("skipped: %s is %s, not sm_90a\n", Dev.Name.c_str(),
                archName(runtime::resolveArch(std::nullopt)).data());
    return 77;
  }
  codegen::KernelSource Src{
      "sm90_gemm_test", {"sm90_gemm_test"}, KernelText, GpuArch::Sm90a};
  runtime::CompiledCubin Bin = runtime::compileToCubin(Src);
  CUmodule Mod;
  CUfunction Fn;
  Drv.check(Drv.cuModuleLoadData(&Mod, Bin.Cubin.data()), "cuModuleLoadData");
  Drv.check(Drv.cuModuleGetFunction(&Fn, Mod, "sm90_gemm_test"),
            "get function");
  const int Smem = 1024 + 2 * 8192 + 4 * 16384 + 64;
  Drv.check(Drv.cuFuncSetAttribute(
                Fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, Smem),
            "shared memory");

  std::mt19937_64 Rng(7);
  std::vector<uint16_t> Q = randomHalf(Rng, M * K), Kt = randomHalf(Rng, N * K),
                        V = randomHalf(Rng, N * K), P = randomHalf(Rng, M * N);
  std::vector<double> WantS(M * N, 0.0), WantO(M * K, 0.0);
  for (int R = 0; R < M; ++R)
    for (int C = 0; C < N; ++C)
      for (int X = 0; X < K; ++X) {
        WantS[R * N + C] +=
            fromHalfBits(Q[R * K + X]) * fromHalfBits(Kt[C * K + X]);
        WantO[R * K + X] +=
            fromHalfBits(P[R * N + C]) * fromHalfBits(V[C * K + X]);
      }
  DeviceBuffer DQ(Q.size() * 2), DK(Kt.size() * 2), DV(V.size() * 2),
      DP(P.size() * 2), DS(M * N * 4), DO(M * K * 4), DRaw(16384);
  DQ.upload(Q.data(), DQ.size());
  DK.upload(Kt.data(), DK.size());
  DV.upload(V.data(), DV.size());
  DP.upload(P.data(), DP.size());

  using runtime::TensorView;
  TensorView TQ = TensorView::contiguous(DQ.get(), DType::F16, {1, M, 1, K});
  TensorView TK = TensorView::contiguous(DK.get(), DType::F16, {1, N, 1, K});
  TensorView TV = TensorView::contiguous(DV.get(), DType::F16, {1, N, 1, K});
  runtime::CallShape Shape;
  Shape.B = Shape.H = Shape.Hkv = 1;
  Shape.Sq = M;
  Shape.Skv = N;
  for (int64_t(*S)[3] : {&Shape.Q, &Shape.K, &Shape.V, &Shape.O}) {
    (*S)[0] = (S == &Shape.Q ? M : N) * K;
    (*S)[1] = K;
    (*S)[2] = K;
  }
  runtime::ForwardTensors T{TQ, TK, TV, TQ, nullptr};
  attnc::Sm90Maps Maps;
  if (std::string Why = runtime::makeSm90Maps(Shape, T, M, N, Maps);
      !Why.empty()) {
    std::printf("FAIL tensor maps: %s\n", Why.c_str());
    return 1;
  }

  int Failed = 0;
  struct Candidate {
    const char *What;
    unsigned Lbo, Sbo;
  } Cands[] = {{"V: LBO = slab stride, SBO = 8 rows (fwd_sm90's)", 16384, 1024},
               {"V: LBO = 8 rows, SBO = slab stride (swapped)", 1024, 16384}};
  for (size_t I = 0; I < 2; ++I) {
    DS.poison();
    DO.poison();
    void *PP = DP.get(), *PS = DS.get(), *PO = DO.get(), *PR = DRaw.get();
    unsigned Lbo = Cands[I].Lbo, Sbo = Cands[I].Sbo;
    void *Params[] = {&Maps, &PP, &PS, &PO, &PR, &Lbo, &Sbo};
    Drv.check(Drv.cuLaunchKernel(Fn, 1, 1, 1, 128, 1, 1, Smem, nullptr, Params,
                                 nullptr),
              "launch");
    Drv.check(Drv.cuCtxSynchronize(), "kernel");
    std::vector<float> S(M * N), O(M * K);
    DS.download(S.data(), S.size() * 4);
    DO.download(O.data(), O.size() * 4);
    if (I == 0) {
      // The Q tile as TMA wrote it: element (r, c) of slab c / 64 at
      // r·128 + ((c % 64 / 8) ^ (r % 8))·16 + (c % 8)·2.
      std::vector<uint16_t> Raw(8192);
      DRaw.download(Raw.data(), 16384);
      int Bad = 0;
      for (int R = 0; R < M; ++R)
        for (int C = 0; C < K; ++C) {
          int Off = (C / 64) * 8192 + R * 128 +
                    (((C % 64) / 8) ^ (R % 8)) * 16 + (C % 8) * 2;
          Bad += Raw[Off / 2] != Q[R * K + C];
        }
      std::printf(
          "TMA Q tile, 128-byte swizzle: %d of %d elements misplaced  %s\n",
          Bad, M * K, Bad ? "FAIL" : "pass");
      Failed += Bad != 0;
      double ES = maxRelErr(S, WantS);
      std::printf("S = Q.K^T (ss, K-major): max rel err %.2e  %s\n", ES,
                  ES < 1e-4 ? "pass" : "FAIL");
      Failed += ES >= 1e-4;
    }
    double EO = maxRelErr(O, WantO);
    bool Ok = EO < 1e-4;
    std::printf("O = P.V (rs, %s): max rel err %.2e  %s\n", Cands[I].What, EO,
                Ok       ? "pass"
                : I == 0 ? "FAIL"
                         : "(differs)");
    Failed += I == 0 && !Ok;
  }
  Drv.cuModuleUnload(Mod);
  std::printf("%s\n", Failed ? "FAILED" : "all passed");
  return Failed ? 1 : 0;
}
