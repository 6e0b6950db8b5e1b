// attnc_bench_decode: times decode (one query per sequence, the selector's
// short-query rule: decode_sm80) with CUDA events and prints one line per
// shape (peers_decode.py times the peers and a device copy of the same
// bytes in the same command):
//
//   attnc_bench_decode NAME DTYPE HQ HKV D B:KV [B:KV ...]
//
// K and V are filled from a 64 MiB block of random values repeated (a
// random fill of tens of GiB on the host would take minutes); every shape
// is at least 256 MiB of K/V or rotates over sets until it is, so the 50 MB
// L2 cannot flatter. GB/s counts the K/V bytes read once per call.
#include "GpuSupport.h"
#include "TestDefinitions.h"
#include "attn/runtime/EventTiming.h"

#include "attn/Error.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

using namespace attn;
using namespace attn::gputest;

namespace {

/// Fills \p Buf with the random block \p Block, repeated.
void fillRepeated(DeviceBuffer &Buf, const std::vector<uint16_t> &Block) {
  auto &D = runtime::CudaDriver::get();
  size_t BlockBytes = Block.size() * 2;
  for (size_t Off = 0; Off < Buf.size(); Off += BlockBytes) {
    size_t N = std::min(BlockBytes, Buf.size() - Off);
    D.check(D.cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(Buf.get()) + Off,
                           Block.data(), N),
            "cuMemcpyHtoD");
  }
}

} // namespace

int main(int Argc, char **Argv) {
  BenchCommand Cmd;
  if (int Rc = parseBenchCommand(
          Argc, Argv, 3, "attnc_bench_decode NAME f16|bf16 HQ HKV D B:KV...",
          Cmd))
    return Rc;
  try {
    const int HQ = Cmd.Ints[0], HKV = Cmd.Ints[1], D = Cmd.Ints[2];
    runtime::Signature Sig;
    Sig.Dtype = Cmd.Dtype;
    Sig.HeadDim = Sig.HeadDimV = D;
    Sig.Backend = "generated";
    runtime::Attention Att(makeDefinition(Cmd.Name), Sig);
    const size_t NumFinals = Att.finalNames().size();
    // Scalar inputs at the middle of their sample range (sigmoid's bias);
    // tensor inputs are not supported here.
    runtime::InputMap Inputs;
    for (const ir::InputDecl &D : Att.definition().Graph->decls().Inputs) {
      if (D.Shape != ir::InputShape::Scalar)
        throw UserError("attnc_bench_decode: input '" + D.Name +
                        "' is not a scalar");
      double X = 0.5 * (D.SampleLo + D.SampleHi);
      if (D.Elem == ir::InputType::I32)
        Inputs[D.Name] = int32_t(std::lround(X));
      else
        Inputs[D.Name] = float(X);
    }
    std::mt19937_64 Rng(20261126);
    std::normal_distribution<double> N(0.0, 1.0);
    std::vector<uint16_t> Block(size_t(32) << 20);
    for (uint16_t &X : Block)
      X = toBits(Cmd.Dtype, N(Rng));
    runtime::ElemType ET = Cmd.Dtype == DType::F16 ? runtime::ElemType::F16
                                                   : runtime::ElemType::BF16;
    for (int I = 6; I < Argc; ++I) { // after NAME DTYPE HQ HKV D
      int B = 0, KV = 0;
      if (std::sscanf(Argv[I], "%d:%d", &B, &KV) != 2) {
        std::fprintf(stderr, "attnc_bench_decode: '%s' is not B:KV\n", Argv[I]);
        return 2;
      }
      const size_t KvBytes = size_t(B) * KV * HKV * D * 2; // one of K, V
      const int Sets = int(std::max<size_t>(
          1, std::min<size_t>(256, ((size_t(256) << 20) + 2 * KvBytes - 1) /
                                     (2 * KvBytes))));
      std::vector<std::unique_ptr<DeviceBuffer>> Q, K, V;
      for (int S = 0; S < Sets; ++S) {
        Q.push_back(std::make_unique<DeviceBuffer>(size_t(B) * HQ * D * 2));
        K.push_back(std::make_unique<DeviceBuffer>(KvBytes));
        V.push_back(std::make_unique<DeviceBuffer>(KvBytes));
        fillRepeated(*Q.back(), Block);
        fillRepeated(*K.back(), Block);
        fillRepeated(*V.back(), Block);
      }
      DeviceBuffer Out(size_t(B) * HQ * D * 2);
      DeviceBuffer Finals(std::max<size_t>(1, NumFinals) * B * HQ * 4);
      runtime::TensorView FV = runtime::TensorView::contiguous(
          Finals.get(), runtime::ElemType::F32, {int64_t(NumFinals), B, HQ, 1});
      auto Run = [&](int It) {
        int S = It % Sets;
        Att.forward(runtime::TensorView::contiguous(Q[S]->get(), ET, {B, 1, HQ, D}),
                    runtime::TensorView::contiguous(K[S]->get(), ET, {B, KV, HKV, D}),
                    runtime::TensorView::contiguous(V[S]->get(), ET, {B, KV, HKV, D}),
                    runtime::TensorView::contiguous(Out.get(), ET, {B, 1, HQ, D}),
                    NumFinals ? &FV : nullptr, Inputs);
      };
      double Ms = runtime::medianEventMs(Run, 5, 30);
      double Gbs = 2.0 * KvBytes / (Ms * 1e-3) / 1e9;
      std::printf("attnc %s %s hq%d hkv%d d%d B%d KV%d: %.1f us, %.0f GB/s of "
                  "K/V\n",
                  Cmd.Name.c_str(), dtypeName(Cmd.Dtype).str().c_str(), HQ, HKV,
                  D, B, KV, Ms * 1e3, Gbs);
      std::fflush(stdout);
    }
  } catch (const Error &E) {
    std::fprintf(stderr, "attnc_bench_decode: %s\n", E.what());
    return 1;
  }
  return 0;
}
