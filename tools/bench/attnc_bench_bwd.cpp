// attnc_bench_bwd: times the generated backward (bwd_sm80) with CUDA events
// (warm-up, median of many runs, inputs rotated over three random sets) and
// prints one line per shape, as attnc_bench does for the forward.
//
//   attnc_bench_bwd NAME DTYPE B H S D [DV] [CONFIG]
//
// NAME is a registered example (alibi_learnable: learned per-head ALiBi
// slopes and bias, whose gradients are computed too) or one of the GPU
// tests' definitions (tests/gpu/TestDefinitions.h: mha_full is softmax
// without a mask); CONFIG a backward configuration (kv64x128w8.q128x64w8.s2,
// or kv64x128w8.fused.s2 for the fused dQ mode). The forward kernel
// makes out and the final rowscales once per input set; only the backward
// is timed. DV (v's and out's head dim) defaults to D. FLOPs: the five
// products' 2·B·H·S²·(3·D + 2·DV) (2.5 x the forward's 4·B·H·S²·D when
// DV = D), halved for causal. With ATTNC_BENCH_COMPILE_ONLY=ARCH (e.g.
// sm_90a) it only compiles the forward and backward kernels into the kernel
// cache, without a GPU, so that a timed run finds them there.
//
//   attnc_bench_bwd NAME DTYPE B H S D [DV] [CONFIG] fwdbwd
//
// times a training step's attention instead: the forward (writing out and
// the final rowscales) then the backward, both inside one timed call, on
// the same three input sets. FLOPs: the forward's 2·(D + DV) plus the
// backward's 2·(3·D + 2·DV) per kept (query, key) pair, the pairs counted
// exactly: every pair without a mask, q >= k under a causal one and the
// last 256 keys of it for mha_sliding_window (every masked definition
// here is one of these). tools/bench/peers_fwdbwd.py times FlexAttention
// the same way on the same shapes.
#include "BenchJson.h"
#include "GpuSupport.h"
#include "TestDefinitions.h"
#include "attn/codegen/Arch.h"
#include "attn/runtime/Bundle.h"
#include "attn/runtime/DtypeBits.h"
#include "attn/runtime/EventTiming.h"

#include "Examples.h"
#include "attn/Error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

using namespace attn;
using namespace attn::gputest;

namespace {

/// The (query, key) pairs \p Name keeps at sequence length \p S (see the
/// header: all, causal, or causal within the last 256 keys).
double keptPairs(const std::string &Name, bool Masked, int S) {
  double N = S;
  if (!Masked)
    return N * N;
  if (Name != "mha_sliding_window")
    return N * (N + 1) / 2;
  double W = std::min(256, S);
  return W * (W + 1) / 2 + (N - W) * W; // rows below W, then full windows
}

/// Prints and records one timed line of bench \p Bench ("bwd" or
/// "fwdbwd"), its name in a column of \p NameWidth.
int report(const char *Bench, int NameWidth, const std::string &Name, DType T, int B,
           int H, int S, int D, int DV, const char *Mask, const std::string &Choice,
           double Median, double Flops) {
  std::string Dims = DV == D ? fmt::format("D{}", D) : fmt::format("D{}/{}", D, DV);
  std::printf("attnc-%s %-*s %s B%d H%d S%d %s %s %s: %.3f ms  %.1f TFLOPS\n", Bench,
              NameWidth, Name.c_str(), std::string(dtypeName(T)).c_str(), B, H, S,
              Dims.c_str(), Mask, Choice.c_str(), Median, Flops / (Median * 1e-3) / 1e12);
  bench::recordBenchRow({Bench, "attnc", Name, std::string(dtypeName(T)), Mask, Choice, B,
                         H, S, D, DV, Median, Flops / (Median * 1e-3) / 1e12});
  return 0;
}

/// Times \p Step (a forward then a backward) and reports its line.
int reportFwdBwd(const std::string &Name, DType T, int B, int H, int S, int D,
                 int DV, bool Masked, const std::string &Choice,
                 const std::function<void(int)> &Step) {
  double Median = runtime::medianEventMs(Step, 5, 30);
  double Flops = 2.0 * B * H * keptPairs(Name, Masked, S) * (4.0 * D + 3.0 * DV);
  const char *Mask = !Masked ? "full"
                     : Name == "mha_sliding_window" ? "window256"
                                                    : "causal";
  return report("fwdbwd", 14, Name, T, B, H, S, D, DV, Mask, Choice, Median, Flops);
}

} // namespace

int main(int Argc, char **Argv) {
  BenchCommand Cmd;
  const char *CompileOnly = std::getenv("ATTNC_BENCH_COMPILE_ONLY");
  if (int Rc = parseBenchCommand(Argc, Argv, 4,
                                 "attnc_bench_bwd NAME f16|bf16 B H S D [DV] [CONFIG] [fwdbwd]", Cmd,
                                 /*NeedsGpu=*/!CompileOnly))
    return Rc;
  try {
    const std::string &Name = Cmd.Name;
    DType T = Cmd.Dtype;
    int B = Cmd.Ints[0], H = Cmd.Ints[1], S = Cmd.Ints[2], D = Cmd.Ints[3];
    int DV = Cmd.Ints.size() > 4 ? Cmd.Ints[4] : D;
    dsl::AttentionDef Def = makeDefinition(Name);
    runtime::Signature Sig;
    Sig.Dtype = T;
    Sig.HeadDim = D;
    Sig.HeadDimV = DV;
    bool FwdBwd = false;
    for (int I = 3 + int(Cmd.Ints.size()); I < Argc; ++I) {
      if (std::string(Argv[I]) == "fwdbwd")
        FwdBwd = true;
      else if (Sig.BackwardConfig.empty())
        Sig.BackwardConfig = Argv[I];
      else
        throw UserError(fmt::format("argument '{}': expected "
                                    "one CONFIG and 'fwdbwd' at most",
                                    Argv[I]));
    }
    if (CompileOnly) {
      runtime::PrecompileSet What;
      What.Backward = true;
      for (const runtime::PrecompiledKernel &K : runtime::precompileAttention(
               Def, Sig, What, {parseArch(CompileOnly, "ATTNC_BENCH_COMPILE_ONLY")}))
        std::printf("%s %s\n", K.From.c_str(), K.Source.Key.c_str());
      return 0;
    }
    runtime::Attention Fwd(Def, Sig);
    const CompiledDefinition &CD = Fwd.definition();
    const ir::Graph &G = *CD.Graph;
    DType ET = T;

    size_t Elems = size_t(B) * S * H * D, ElemsV = size_t(B) * S * H * DV;
    size_t NumFinals = G.decls().FinalRowscales.size();
    std::mt19937_64 Rng(7);
    runtime::NormalPool Normals(T, Rng, 7);
    std::vector<uint16_t> Host;
    auto Random = [&](size_t N) {
      Normals.fill(Host, N);
      auto Buf = std::make_unique<DeviceBuffer>(N * 2);
      Buf->upload(Host.data(), N * 2);
      return Buf;
    };
    struct Set {
      std::unique_ptr<DeviceBuffer> Q, K, V, DO, O, F;
    };
    std::vector<Set> Sets;
    // Scalars at the middle of their sample range; per-head inputs drawn
    // from it; a float32 gradient buffer for each input that requires one.
    runtime::InputMap Inputs;
    runtime::InputGradMap Grads;
    std::vector<std::unique_ptr<DeviceBuffer>> InputBufs;
    for (const ir::InputDecl &I : G.decls().Inputs) {
      if (I.Shape == ir::InputShape::Scalar) {
        double Mid = (I.SampleLo + I.SampleHi) / 2;
        if (I.Elem == ir::InputType::I32)
          Inputs[I.Name] = int32_t(std::floor(Mid));
        else
          Inputs[I.Name] = float(Mid);
      } else if (I.Shape == ir::InputShape::PerHead &&
                 I.Elem == ir::InputType::F32) {
        std::uniform_real_distribution<double> U(I.SampleLo, I.SampleHi);
        std::vector<float> Vals(H);
        for (float &X : Vals)
          X = float(U(Rng));
        InputBufs.push_back(std::make_unique<DeviceBuffer>(H * 4));
        InputBufs.back()->upload(Vals.data(), H * 4);
        Inputs[I.Name] = runtime::TensorView::contiguous(
            InputBufs.back()->get(), DType::F32, {H});
      } else {
        throw UserError("attnc_bench_bwd: input '" + I.Name +
                        "': only scalar and float32 per-head inputs are drawn "
                        "here");
      }
      if (I.RequiresGrad) {
        int64_t N = I.Shape == ir::InputShape::Scalar ? 1 : H;
        InputBufs.push_back(std::make_unique<DeviceBuffer>(N * 4));
        Grads[I.Name] = runtime::TensorView::contiguous(
            InputBufs.back()->get(), DType::F32, {N});
      }
    }
    auto View = [&](DeviceBuffer &Buf, int Dim) {
      return runtime::TensorView::contiguous(Buf.get(), ET, {B, S, H, Dim});
    };
    auto FinalsView = [&](DeviceBuffer &Buf) {
      return runtime::TensorView::contiguous(Buf.get(), DType::F32,
                                             {int64_t(NumFinals), B, H, S});
    };
    for (int I = 0; I < 3; ++I) {
      Set St{Random(Elems), Random(Elems), Random(ElemsV), Random(ElemsV),
             std::make_unique<DeviceBuffer>(ElemsV * 2),
             std::make_unique<DeviceBuffer>(std::max<size_t>(1, NumFinals) * B *
                                            H * S * 4)};
      runtime::TensorView FV = FinalsView(*St.F);
      Fwd.forward(View(*St.Q, D), View(*St.K, D), View(*St.V, DV), View(*St.O, DV),
                  NumFinals ? &FV : nullptr, Inputs);
      Sets.push_back(std::move(St));
    }
    DeviceBuffer GQ(Elems * 2), GK(Elems * 2), GV(ElemsV * 2);
    auto Run = [&](int I) {
      Set &St = Sets[I];
      runtime::TensorView Q = View(*St.Q, D), K = View(*St.K, D), V = View(*St.V, DV),
                          O = View(*St.O, DV), dO = View(*St.DO, DV), F = FinalsView(*St.F),
                          dQ = View(GQ, D), dK = View(GK, D), dV = View(GV, DV);
      Fwd.backward(Q, K, V, &O, dO, NumFinals ? &F : nullptr, dQ, dK, dV,
                   Inputs, Grads);
    };
    // What a call of this shape runs (d64's long walks: the twin).
    const std::string Choice = Fwd.backwardChoiceFor(S).str();
    if (FwdBwd)
      return reportFwdBwd(Name, T, B, H, S, D, DV, G.decls().HasMask, Choice,
                          [&](int I) {
                            Set &St = Sets[I % 3];
                            runtime::TensorView F = FinalsView(*St.F);
                            Fwd.forward(View(*St.Q, D), View(*St.K, D),
                                        View(*St.V, DV), View(*St.O, DV),
                                        NumFinals ? &F : nullptr, Inputs);
                            Run(I % 3);
                          });
    double Median = runtime::medianEventMs([&](int I) { Run(I % 3); }, 5, 30);
    bool Causal = G.decls().HasMask; // every masked example here is causal
    double Flops =
        2.0 * B * H * double(S) * S * (3.0 * D + 2.0 * DV) * (Causal ? 0.5 : 1.0);
    return report("bwd", 12, Name, T, B, H, S, D, DV, Causal ? "causal" : "full", Choice,
                  Median, Flops);
  } catch (const std::exception &E) {
    std::fprintf(stderr, "attnc_bench_bwd: %s\n", E.what());
    return 1;
  }
}
