// attnc_bench_sweep: the forward table of docs/performance.md in one
// process: softmax with and without the causal mask, S = 1k, 4k, 16k at
// B·S = 16k, for each dtype given, timed as attnc_bench does (CUDA events,
// a warm-up of at least 1 s, median, three rotated random input sets),
// the inputs drawn once; each length unmasked then causal, the order of
// peers_sweep.py.
//
//   attnc_bench_sweep CONFIG DTYPE... [--compile-only]
//
// CONFIG is a forward configuration ("sm80", "m128n64w4s2", "sm90", or
// "default" for the runtime's choice). --compile-only builds the kernels into
// the kernel cache and times nothing (to compile several binaries' kernels
// at once before timing them one after another). A progress line on stderr
// says which step runs (live on a terminal, a line per step otherwise).
#include "BenchJson.h"
#include "GpuSupport.h"
#include "Progress.h"
#include "attn/runtime/EventTiming.h"

#include "Examples.h"
#include "attn/Error.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

using namespace attn;
using namespace attn::gputest;

namespace {

constexpr int kH = 32, kD = 128, kTokens = 16384;

dsl::AttentionDef softmax(bool Causal) {
  dsl::AttentionDef Def = examples::mha();
  if (!Causal) {
    Def.name = "mha_full";
    Def.mask_mod = {};
  }
  return Def;
}

/// N standard-normal-ish values as 16-bit floats: a sum of four uniforms
/// from a 64-bit LCG, rescaled to unit variance. Not exactly normal; it is
/// random, nonzero almost everywhere and cheap for 600M values.
void fill(std::vector<uint16_t> &Out, DType T, uint64_t Seed) {
  uint64_t X = Seed * 0x9e3779b97f4a7c15ull + 1;
  for (uint16_t &V : Out) {
    double Sum = 0;
    for (int I = 0; I < 4; ++I) {
      X = X * 6364136223846793005ull + 1442695040888963407ull;
      Sum += double(X >> 11) * 0x1.0p-53;
    }
    V = toBits(T, (Sum - 2.0) * 1.7320508075688772);
  }
}

} // namespace

int main(int Argc, char **Argv) {
  if (Argc < 3) {
    std::fprintf(stderr,
                 "usage: attnc_bench_sweep CONFIG DTYPE... [--compile-only]\n");
    return 2;
  }
  std::string Config = Argv[1];
  std::vector<DType> Types;
  bool CompileOnly = false;
  for (int I = 2; I < Argc; ++I) {
    if (std::string(Argv[I]) == "--compile-only") {
      CompileOnly = true;
      continue;
    }
    std::optional<DType> T = dtypeFromName(Argv[I]);
    if (!T || !isAttentionDtype(*T)) {
      std::fprintf(stderr, "attnc_bench_sweep: dtype must be f16 or bf16\n");
      return 2;
    }
    Types.push_back(*T);
  }
  auto &Drv = runtime::CudaDriver::get();
  if (!Drv.available()) {
    std::printf("skipped: %s\n", Drv.unavailableReason().c_str());
    return 77;
  }
  try {
    runtime::currentDevice(); // the context the buffers below live in
    size_t Elems = size_t(kTokens) * kH * kD;
    std::vector<std::unique_ptr<DeviceBuffer>> Bufs;
    for (int I = 0; I < 9; ++I) // three sets of q, k, v
      Bufs.push_back(std::make_unique<DeviceBuffer>(Elems * 2));
    DeviceBuffer Out(Elems * 2);
    DeviceBuffer Finals(size_t(kTokens) * kH * 4);
    std::vector<uint16_t> Host(Elems);
    const std::vector<int> Lengths = {1024, 4096, 16384};
    // A step per kernel made, and per sequence length timed.
    ProgressLine Progress(llvm::errs(), "sweep",
                          Types.size() * 2 * (CompileOnly ? 1 : 1 + Lengths.size()));
    for (DType T : Types) {
      if (!CompileOnly)
        for (int I = 0; I < 9; ++I) {
          fill(Host, T, 7 + I);
          Bufs[I]->upload(Host.data(), Elems * 2);
        }
      DType ET = T;
      runtime::Signature Sig;
      Sig.Dtype = T;
      Sig.HeadDim = kD;
      Sig.HeadDimV = kD;
      if (Config != "default")
        Sig.Config = Config;
      std::vector<std::unique_ptr<runtime::Attention>> Atts; // [causal]
      for (bool Causal : {false, true}) {
        Progress.step(fmt::format("{} {} compile", Causal ? "mha" : "mha_full",
                                  dtypeName(T)));
        Atts.push_back(std::make_unique<runtime::Attention>(softmax(Causal), Sig));
      }
      if (CompileOnly)
        continue;
      // Each length without and with the mask, in peers_sweep.py's order, so
      // that both sides time a shape after the same shapes.
      for (int S : Lengths)
        for (bool Causal : {false, true}) {
          runtime::Attention &Att = *Atts[Causal];
          Progress.step(fmt::format("{} {} S{}", Causal ? "mha" : "mha_full",
                                    dtypeName(T), S));
          int B = kTokens / S;
          auto View = [&](DeviceBuffer &Buf) {
            return runtime::TensorView::contiguous(Buf.get(), ET, {B, S, kH, kD});
          };
          runtime::TensorView FV = runtime::TensorView::contiguous(
              Finals.get(), DType::F32, {1, B, kH, S});
          auto Run = [&](int Set) {
            Att.forward(View(*Bufs[3 * Set]), View(*Bufs[3 * Set + 1]),
                        View(*Bufs[3 * Set + 2]), View(Out), &FV, {});
          };
          double Ms = runtime::medianEventMs([&](int I) { Run(I % 3); }, 5, 30);
          double Flops = 4.0 * B * kH * double(S) * S * kD * (Causal ? 0.5 : 1.0);
          std::printf("attnc %-8s %s B%d H%d S%d D%d %s %s: %.3f ms  %.1f TFLOPS\n",
                      Causal ? "mha" : "mha_full", std::string(dtypeName(T)).c_str(), B,
                      kH, S, kD, Causal ? "causal" : "full",
                      Att.source().Key.c_str(), Ms, Flops / (Ms * 1e-3) / 1e12);
          std::fflush(stdout);
          bench::recordBenchRow({"fwd", "attnc", Causal ? "mha" : "mha_full",
                                 std::string(dtypeName(T)), Causal ? "causal" : "full",
                                 Att.source().Key, B, kH, S, kD, kD, Ms,
                                 Flops / (Ms * 1e-3) / 1e12});
        }
    }
    Progress.done(CompileOnly ? "kernels compiled" : "timed");
    return 0;
  } catch (const std::exception &E) {
    std::fprintf(stderr, "attnc_bench_sweep: %s\n", E.what());
    return 1;
  }
}
