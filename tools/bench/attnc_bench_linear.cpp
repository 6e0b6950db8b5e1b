// attnc_bench_linear: times LinearAttention's forward and backward with CUDA
// events (warm-up, median of 20 runs, inputs rotated over two random sets so
// caches do not flatter) and prints one line per direction with the
// achieved bandwidth of the minimal traffic (each input read once, each
// output written once).
//
//   attnc_bench_linear NAME DTYPE B H T D DV [HQK [CONFIG]]
//
// NAME is mamba2, simple_gla or retention_linear; HQK is the number of q/k
// heads (default H; mamba2's ngroups).
#include "GpuSupport.h"

#include "Examples.h"
#include "attn/Error.h"
#include "attn/codegen/LinearCodegen.h"
#include "attn/reference/InputBinding.h"
#include "attn/runtime/LinearAttention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

using namespace attn;
using namespace attn::gputest;

namespace {

/// N random 16-bit values, roughly normal (the sum of four uniforms, scaled
/// to unit variance) from a xorshift generator: the large shapes need
/// hundreds of millions, which std::normal_distribution takes tens of
/// seconds to draw.
std::unique_ptr<DeviceBuffer> random16(std::mt19937_64 &Rng, DType T,
                                       size_t N) {
  uint64_t X = Rng() | 1;
  auto Uniform = [&] {
    X ^= X << 13;
    X ^= X >> 7;
    X ^= X << 17;
    return double(X >> 11) * 0x1.0p-53 - 0.5;
  };
  std::vector<uint16_t> Bits(N);
  for (uint16_t &B : Bits)
    B = toBits(T, (Uniform() + Uniform() + Uniform() + Uniform()) * 1.7320508);
  auto Buf = std::make_unique<DeviceBuffer>(N * 2);
  Buf->upload(Bits.data(), N * 2);
  return Buf;
}

std::unique_ptr<DeviceBuffer> upload32(const reference::Tensor &T) {
  std::vector<float> F(T.Data.begin(), T.Data.end());
  auto Buf = std::make_unique<DeviceBuffer>(std::max<size_t>(4, F.size() * 4));
  Buf->upload(F.data(), F.size() * 4);
  return Buf;
}


} // namespace

int main(int Argc, char **Argv) {
  BenchCommand Cmd;
  if (int Rc = parseBenchCommand(
          Argc, Argv, 5,
          "attnc_bench_linear NAME f16|bf16 B H T D DV [HQK [CONFIG]]", Cmd))
    return Rc;
  try {
    const std::string &Name = Cmd.Name;
    DType Dt = Cmd.Dtype;
    int B = Cmd.Ints[0], H = Cmd.Ints[1], T = Cmd.Ints[2], D = Cmd.Ints[3],
        DV = Cmd.Ints[4];
    int Hqk = Cmd.Ints.size() > 5 ? Cmd.Ints[5] : H;
    dsl::LinearAttentionDef Def = Name == "mamba2"       ? examples::mamba2()
                                  : Name == "simple_gla" ? examples::simpleGla()
                                  : Name == "retention_linear"
                                      ? examples::retentionLinear()
                                      : throw UserError("unknown linear "
                                                        "definition " + Name);
    runtime::LinearSignature Sig;
    Sig.Dtype = Dt;
    Sig.HeadDim = D;
    Sig.HeadDimV = DV;
    if (Argc > 9)
      Sig.Config = Argv[9];
    runtime::LinearAttention Lin(Def, Sig);
    Lin.backwardSource();
    const ir::Graph &G = *Lin.definition().Graph;
    bool ReadsDecay = codegen::linearReadsDecay(Lin.definition());

    std::mt19937_64 Rng(7);
    runtime::ElemType ET =
        Dt == DType::F16 ? runtime::ElemType::F16 : runtime::ElemType::BF16;
    size_t NQK = size_t(B) * T * Hqk * D, NV = size_t(B) * T * H * DV;
    struct Set {
      std::unique_ptr<DeviceBuffer> Q, K, V, DO;
    } Sets[2];
    for (Set &S : Sets) {
      S.Q = random16(Rng, Dt, NQK);
      S.K = random16(Rng, Dt, NQK);
      S.V = random16(Rng, Dt, NV);
      S.DO = random16(Rng, Dt, NV);
    }
    DeviceBuffer Out(NV * 2), DQ(NQK * 2), DK(NQK * 2), DVb(NV * 2);
    reference::Tensor DecayT =
        reference::Tensor::uniform({B, H, T}, Rng, -0.1, 0.0);
    auto Decay = upload32(DecayT);
    runtime::TensorView DecayView = runtime::TensorView::contiguous(
        Decay->get(), runtime::ElemType::F32, {B, H, T});
    std::vector<std::unique_ptr<DeviceBuffer>> Keep;
    runtime::InputMap Inputs;
    for (const auto &[N, V] : reference::sampleInputs(G, Rng, B, H, T, T)) {
      if (V.Shape.empty()) {
        Inputs[N] = float(V.Data[0]);
        continue;
      }
      Keep.push_back(upload32(V));
      Inputs[N] = runtime::TensorView::contiguous(
          Keep.back()->get(), runtime::ElemType::F32, V.Shape);
    }
    auto View = [&](DeviceBuffer &Buf, int Heads, int Dim) {
      return runtime::TensorView::contiguous(Buf.get(), ET, {B, T, Heads, Dim});
    };
    double FwdMs = medianMs([&](int I) {
      Set &S = Sets[I % 2];
      Lin.forward(View(*S.Q, Hqk, D), View(*S.K, Hqk, D), View(*S.V, H, DV),
                  View(Out, H, DV), ReadsDecay ? &DecayView : nullptr, Inputs);
    }, 3, 20);
    double BwdMs = medianMs([&](int I) {
      Set &S = Sets[I % 2];
      runtime::TensorView Q = View(*S.Q, Hqk, D), K = View(*S.K, Hqk, D),
                          V = View(*S.V, H, DV), DO = View(*S.DO, H, DV),
                          DQv = View(DQ, Hqk, D), DKv = View(DK, Hqk, D),
                          DVv = View(DVb, H, DV);
      runtime::LinearBackwardTensors BT{Q,   K,   V,   ReadsDecay ? &DecayView : nullptr,
                                        DO,  nullptr, nullptr, DQv, DKv, DVv,
                                        nullptr, nullptr};
      Lin.backward(BT, Inputs);
    }, 3, 20);
    double FwdBytes = 2.0 * (2 * NQK + 2 * NV);
    double BwdBytes = 2.0 * (4 * NQK + 4 * NV);
    std::printf("%s %s B%d H%d T%d D%d DV%d hqk%d %s fwd %.3f ms %.0f GB/s  "
                "bwd %.3f ms %.0f GB/s\n",
                Name.c_str(), Argv[2], B, H, T, D, DV, Hqk,
                Lin.spec().Config.str().c_str(), FwdMs, FwdBytes / FwdMs / 1e6,
                BwdMs, BwdBytes / BwdMs / 1e6);
    return 0;
  } catch (const std::exception &E) {
    std::fprintf(stderr, "attnc_bench_linear: %s\n", E.what());
    return 1;
  }
}
