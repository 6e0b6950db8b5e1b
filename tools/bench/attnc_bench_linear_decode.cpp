// attnc_bench_linear_decode: times LinearAttention::decodeStep (the recurrent
// decode step, states updated in place) and a device-to-device copy of the
// same state bytes, with CUDA events (warm-up, median of 30), and prints one
// line per batch size with the state's read+write bandwidth for both
// (peers_linear_decode.py times flash-linear-attention's fused recurrent
// step at the same shapes):
//
//   attnc_bench_linear_decode NAME DTYPE H D DV N B [B ...]
//
// N new tokens per sequence (1 to 16). Every batch rotates over enough
// state pools to make at least 256 MiB, so that the 50 MB L2 cannot
// flatter; the copy rotates over the same pools into as many others.
// States are filled from a 16 MiB block of random values repeated, q, k,
// v normal, the decay uniform in [-0.1, 0], custom inputs over their
// sample ranges.
#include "DriverExtras.h"
#include "GpuSupport.h"
#include "LinearGpuCheck.h"

#include "Examples.h"
#include "attn/Error.h"
#include "attn/codegen/LinearCodegen.h"
#include "attn/reference/InputBinding.h"
#include "attn/runtime/EventTiming.h"
#include "attn/runtime/LinearAttention.h"

#include <cstdio>
#include <memory>
#include <string>

using namespace attn;
using namespace attn::gputest;
using runtime::TensorView;

namespace {

std::unique_ptr<DeviceBuffer> upload16(DType Dt, size_t N, std::mt19937_64 &Rng) {
  std::normal_distribution<double> Nd(0.0, 1.0);
  std::vector<uint16_t> Bits(N);
  for (uint16_t &B : Bits)
    B = toBits(Dt, Nd(Rng));
  auto Buf = std::make_unique<DeviceBuffer>(N * 2);
  Buf->upload(Bits.data(), N * 2);
  return Buf;
}

} // namespace

int main(int Argc, char **Argv) {
  BenchCommand Cmd;
  if (int Rc = parseBenchCommand(
          Argc, Argv, 5, "attnc_bench_linear_decode NAME f16|bf16 H D DV N B...",
          Cmd))
    return Rc;
  try {
    const int H = Cmd.Ints[0], D = Cmd.Ints[1], DV = Cmd.Ints[2], N = Cmd.Ints[3];
    runtime::currentDevice(); // a current context for DriverExtras
    dsl::LinearAttentionDef Def = linearExample(Cmd.Name);
    runtime::LinearSignature Sig = linearBenchSignature(Cmd, D, DV);
    runtime::LinearAttention Lin(Def, Sig);
    Lin.decodeSource();
    const ir::Graph &G = *Lin.definition().Graph;
    const bool Reads = codegen::linearReadsDecay(Lin.definition());
    DType ET = elemOf(Cmd.Dtype);
    std::mt19937_64 Rng(20261127);
    std::vector<float> Block(size_t(4) << 20);
    std::normal_distribution<float> Nf(0.f, 1.f);
    for (float &X : Block)
      X = Nf(Rng);
    const DriverExtras &X = DriverExtras::get();
    auto &Drv = runtime::CudaDriver::get();
    for (size_t I = 4; I < Cmd.Ints.size(); ++I) { // after H D DV N
      const int B = Cmd.Ints[I];
      const size_t StateBytes = size_t(B) * H * D * DV * 4;
      const int Sets = int(std::max<size_t>(
          1, std::min<size_t>(64, ((size_t(256) << 20) + StateBytes - 1) / StateBytes)));
      std::vector<std::unique_ptr<DeviceBuffer>> Pools, Copies;
      for (int S = 0; S < Sets; ++S) {
        Pools.push_back(
            repeatedBuffer(StateBytes, Block.data(), Block.size() * 4));
        Copies.push_back(std::make_unique<DeviceBuffer>(StateBytes));
      }
      auto Q = upload16(Cmd.Dtype, size_t(B) * N * H * D, Rng);
      auto K = upload16(Cmd.Dtype, size_t(B) * N * H * D, Rng);
      auto V = upload16(Cmd.Dtype, size_t(B) * N * H * DV, Rng);
      auto O = std::make_unique<DeviceBuffer>(size_t(B) * N * H * DV * 2);
      reference::Tensor Decay = reference::Tensor::uniform({B, H, N}, Rng, -0.1, 0.0);
      std::vector<std::unique_ptr<DeviceBuffer>> Keep;
      TensorView DecayV = uploadInput(false, Decay.Data, Decay.Shape, Keep);
      runtime::InputMap Inputs =
          uploadInputs(G, reference::sampleInputs(G, Rng, B, H, N, N), Keep);
      TensorView Qv = TensorView::contiguous(Q->get(), ET, {B, N, H, D});
      TensorView Kv = TensorView::contiguous(K->get(), ET, {B, N, H, D});
      TensorView Vv = TensorView::contiguous(V->get(), ET, {B, N, H, DV});
      TensorView Ov = TensorView::contiguous(O->get(), ET, {B, N, H, DV});
      auto Step = [&](int It) {
        TensorView S = TensorView::contiguous(Pools[It % Sets]->get(),
                                              DType::F32, {B, H, D, DV});
        Lin.decodeStep({Qv, Kv, Vv, Ov, Reads ? &DecayV : nullptr, S, S}, Inputs);
      };
      auto Copy = [&](int It) {
        Drv.check(X.cuMemcpyDtoDAsync(
                      reinterpret_cast<CUdeviceptr>(Copies[It % Sets]->get()),
                      reinterpret_cast<CUdeviceptr>(Pools[It % Sets]->get()),
                      StateBytes, nullptr),
                  "cuMemcpyDtoDAsync");
      };
      const double StepMs = runtime::medianEventMs(Step, 5, 30);
      const double CopyMs = runtime::medianEventMs(Copy, 5, 30);
      const double StepGbs = 2.0 * StateBytes / (StepMs * 1e-3) / 1e9;
      const double CopyGbs = 2.0 * StateBytes / (CopyMs * 1e-3) / 1e9;
      std::printf("attnc decode %s %s B%d H%d D%d DV%d N%d: %.1f us, %.0f GB/s "
                  "state r+w; copy %.1f us, %.0f GB/s; %.0f%% of the copy\n",
                  Cmd.Name.c_str(), std::string(dtypeName(Cmd.Dtype)).c_str(), B, H, D,
                  DV, N, StepMs * 1e3, StepGbs, CopyMs * 1e3, CopyGbs,
                  100.0 * StepGbs / CopyGbs);
      std::fflush(stdout);
    }
  } catch (const std::exception &E) {
    std::fprintf(stderr, "attnc_bench_linear_decode: %s\n", E.what());
    return 1;
  }
  return 0;
}
