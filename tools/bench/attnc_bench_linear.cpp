// attnc_bench_linear: times LinearAttention's forward and backward with CUDA
// events (warm-up, median of 20 runs, inputs rotated over two random sets so
// caches do not flatter) and prints one line with each direction's achieved
// bandwidth of the minimal traffic (each input read once, each output
// written once). The inputs and the timing are runtime::LinearProblem and
// medianEventMs, which `attnc bench` uses too.
//
//   attnc_bench_linear NAME DTYPE B H T D DV [HQK [CONFIG]]
//
// NAME is mamba2, simple_gla or retention_linear; HQK is the number of q/k
// heads (default H; mamba2's ngroups).
#include "BenchJson.h"
#include "GpuSupport.h"
#include "LinearGpuCheck.h"

#include "attn/runtime/EventTiming.h"
#include "attn/runtime/LinearAttention.h"
#include "attn/runtime/LinearProblem.h"

#include <cstdio>
#include <string>

using namespace attn;
using namespace attn::gputest;

int main(int Argc, char **Argv) {
  BenchCommand Cmd;
  if (int Rc = parseBenchCommand(
          Argc, Argv, 5,
          "attnc_bench_linear NAME f16|bf16 B H T D DV [HQK [CONFIG]]", Cmd))
    return Rc;
  try {
    const std::string &Name = Cmd.Name;
    int B = Cmd.Ints[0], H = Cmd.Ints[1], T = Cmd.Ints[2], D = Cmd.Ints[3],
        DV = Cmd.Ints[4];
    int Hqk = Cmd.Ints.size() > 5 ? Cmd.Ints[5] : H;
    dsl::LinearAttentionDef Def = linearExample(Name);
    runtime::LinearSignature Sig = linearBenchSignature(Cmd, D, DV);
    if (Argc > 9)
      Sig.Config = Argv[9];
    runtime::LinearAttention Lin(Def, Sig);
    Lin.backwardSource();
    runtime::LinearProblem P(Lin.definition(), Sig, {B, H, Hqk, T},
                             /*Sets=*/2, /*Seed=*/7);
    double FwdMs = runtime::medianEventMs(
        [&](int I) { P.forward(Lin, I % P.sets()); }, 3, 20);
    double BwdMs = runtime::medianEventMs(
        [&](int I) { P.backward(Lin, I % P.sets()); }, 3, 20);
    std::printf("%s %s B%d H%d T%d D%d DV%d hqk%d %s fwd %.3f ms %.0f GB/s  "
                "bwd %.3f ms %.0f GB/s\n",
                Name.c_str(), Argv[2], B, H, T, D, DV, Hqk,
                Lin.spec().Config.str().c_str(), FwdMs,
                P.forwardBytes() / FwdMs / 1e6, BwdMs,
                P.backwardBytes() / BwdMs / 1e6);
    // Memory-bound: the rows carry GB/s (T is the sequence length S).
    for (bool Bwd : {false, true}) {
      double Ms = Bwd ? BwdMs : FwdMs;
      double Bytes = Bwd ? P.backwardBytes() : P.forwardBytes();
      bench::BenchRow Row{Bwd ? "linear_bwd" : "linear_fwd", "attnc", Name,
                          Argv[2], "none", Lin.spec().Config.str(),
                          B, H, T, D, DV, Ms, 0};
      Row.Gbps = Bytes / Ms / 1e6;
      bench::recordBenchRow(Row);
    }
    return 0;
  } catch (const std::exception &E) {
    std::fprintf(stderr, "attnc_bench_linear: %s\n", E.what());
    return 1;
  }
}
