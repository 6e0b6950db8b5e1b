// attnc_bench: times the generated forward kernel with CUDA events (warm-up,
// median of many runs, inputs rotated over three random sets so caches do
// not flatter) and prints one line per shape.
//
//   attnc_bench NAME DTYPE B H S D [DV] [CONFIG]
//
// DV (the value head dim) defaults to D.
// NAME is a registered example or one of the GPU tests' definitions
// (tests/gpu/TestDefinitions.h: mha_full is softmax without a mask).
// With ATTNC_BENCH_COMPILE_ONLY=ARCH (e.g. sm_90a) it only compiles the
// kernel for ARCH into the kernel cache and exits: no GPU is needed, so a
// cache for a device run can be filled on the build machine.
#include "GpuSupport.h"
#include "TestDefinitions.h"
#include "attn/codegen/Arch.h"
#include "attn/runtime/DtypeBits.h"
#include "attn/runtime/EventTiming.h"

#include "Examples.h"
#include "attn/Error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace attn;
using namespace attn::gputest;

int main(int Argc, char **Argv) {
  BenchCommand Cmd;
  const char *CompileOnly = std::getenv("ATTNC_BENCH_COMPILE_ONLY");
  if (int Rc = parseBenchCommand(Argc, Argv, 4,
                                 "attnc_bench NAME f16|bf16 B H S D [DV] [CONFIG]",
                                 Cmd, /*NeedsGpu=*/!CompileOnly))
    return Rc;
  try {
    const std::string &Name = Cmd.Name;
    DType T = Cmd.Dtype;
    int B = Cmd.Ints[0], H = Cmd.Ints[1], S = Cmd.Ints[2], D = Cmd.Ints[3];
    int DV = Cmd.Ints.size() > 4 ? Cmd.Ints[4] : D;
    int ConfigArg = 3 + int(Cmd.Ints.size()); // the first argument after the sizes
    dsl::AttentionDef Def = makeDefinition(Name);
    runtime::Signature Sig;
    Sig.Dtype = T;
    Sig.HeadDim = D;
    Sig.HeadDimV = DV;
    if (Argc > ConfigArg)
      Sig.Config = Argv[ConfigArg];
    if (CompileOnly) {
      Sig.Arch = parseArch(CompileOnly, "ATTNC_BENCH_COMPILE_ONLY");
      runtime::Attention Att(Def, Sig);
      std::printf("compiled %s for %s: %s\n", Name.c_str(), CompileOnly,
                  Att.source().Key.c_str());
      return 0;
    }
    runtime::Attention Att(Def, Sig);
    const ir::Graph &G = *Att.definition().Graph;
    DType ET = T;

    size_t Elems = size_t(B) * S * H * D;
    size_t ElemsV = size_t(B) * S * H * DV;
    std::mt19937_64 Rng(7);
    runtime::NormalPool Normals(T, Rng, 7);
    std::vector<uint16_t> Host;
    std::vector<std::unique_ptr<DeviceBuffer>> Bufs;
    for (int I = 0; I < 9; ++I) { // three sets of q, k, v
      size_t E = I % 3 == 2 ? ElemsV : Elems;
      Normals.fill(Host, E);
      Bufs.push_back(std::make_unique<DeviceBuffer>(E * 2));
      Bufs.back()->upload(Host.data(), E * 2);
    }
    DeviceBuffer Out(ElemsV * 2);
    size_t NumFinals = G.decls().FinalRowscales.size();
    DeviceBuffer Finals(std::max<size_t>(1, NumFinals) * B * H * S * 4);
    runtime::InputMap Inputs;
    for (const ir::InputDecl &I : G.decls().Inputs)
      Inputs[I.Name] = float((I.SampleLo + I.SampleHi) / 2);
    auto View = [&](DeviceBuffer &Buf, int Dim) {
      return runtime::TensorView::contiguous(Buf.get(), ET, {B, S, H, Dim});
    };
    runtime::TensorView FV = runtime::TensorView::contiguous(
        Finals.get(), DType::F32, {int64_t(NumFinals), B, H, S});
    auto Run = [&](int Set) {
      Att.forward(View(*Bufs[3 * Set], D), View(*Bufs[3 * Set + 1], D),
                  View(*Bufs[3 * Set + 2], DV), View(Out, DV),
                  NumFinals ? &FV : nullptr, Inputs);
    };
    double Median = runtime::medianEventMs([&](int I) { Run(I % 3); }, 5, 30);
    bool Causal = G.decls().HasMask; // every masked example here is causal
    // Q·Kᵀ is 2·S²·D per head, P·V 2·S²·DV.
    double Flops =
        2.0 * B * H * double(S) * S * (D + DV) * (Causal ? 0.5 : 1.0);
    std::string Dims = DV == D ? fmt::format("D{}", D) : fmt::format("D{}/{}", D, DV);
    std::printf("attnc %-12s %s B%d H%d S%d %s %s %s: %.3f ms  %.1f TFLOPS\n",
                Name.c_str(), std::string(dtypeName(T)).c_str(), B, H, S, Dims.c_str(),
                Causal ? "causal" : "full", Att.source().Key.c_str(), Median,
                Flops / (Median * 1e-3) / 1e12);
    return 0;
  } catch (const std::exception &E) {
    std::fprintf(stderr, "attnc_bench: %s\n", E.what());
    return 1;
  }
}
