// attnc_bench_linear_varlen: times LinearAttention::forwardVarlen and
// backwardVarlen on a packed batch of the given sequence lengths, and the
// padded-batch forward and backward at the same token count (as many
// sequences, each of the mean length), with CUDA events (warm-up, median of
// 20), and prints a line for each direction with both times and the packed
// call's share of the padded one's throughput (peers_linear_varlen.py
// times flash-linear-attention's cu_seqlens calls on the same lengths):
//
//   attnc_bench_linear_varlen NAME DTYPE H D DV L1,L2,...
//
// q, k, v are filled from a 32 MiB block of random values repeated, the
// decay uniform in [-0.1, 0], custom inputs over their sample ranges, the
// initial states normal; final states are written. The packed backward
// takes the initial states and final-state gradients and writes the
// initial states' gradients (the padded one has no states).
#include "GpuSupport.h"
#include "LinearGpuCheck.h"

#include "Examples.h"
#include "attn/Error.h"
#include "attn/codegen/LinearCodegen.h"
#include "attn/reference/InputBinding.h"
#include "attn/runtime/EventTiming.h"
#include "attn/runtime/LinearAttention.h"
#include "attn/runtime/LinearProblem.h"

#include "llvm/ADT/StringExtras.h"

#include <cstdio>
#include <memory>
#include <string>

using namespace attn;
using namespace attn::gputest;
using runtime::TensorView;

int main(int Argc, char **Argv) {
  BenchCommand Cmd;
  if (int Rc = parseBenchCommand(
          Argc, Argv, 3, "attnc_bench_linear_varlen NAME f16|bf16 H D DV L1,L2,...",
          Cmd))
    return Rc;
  try {
    if (Argc < 7)
      throw UserError("expected the sequence lengths L1,L2,... last");
    const int H = Cmd.Ints[0], D = Cmd.Ints[1], DV = Cmd.Ints[2];
    std::vector<int32_t> Cu = {0};
    for (llvm::StringRef L : llvm::split(llvm::StringRef(Argv[6]), ',')) {
      int N = 0;
      if (L.getAsInteger(10, N) || N < 0)
        throw UserError("'" + L.str() + "' is not a sequence length");
      Cu.push_back(Cu.back() + N);
    }
    const int S = int(Cu.size()) - 1, T = Cu.back();
    dsl::LinearAttentionDef Def = linearExample(Cmd.Name);
    runtime::LinearSignature Sig = linearBenchSignature(Cmd, D, DV);
    runtime::LinearAttention Lin(Def, Sig);
    const ir::Graph &G = *Lin.definition().Graph;
    DType ET = elemOf(Cmd.Dtype);
    std::mt19937_64 Rng(20261127);
    std::vector<uint16_t> Block(size_t(16) << 20);
    std::normal_distribution<double> Nd(0.0, 1.0);
    for (uint16_t &X : Block)
      X = toBits(Cmd.Dtype, Nd(Rng));
    auto Q = repeatedBuffer(size_t(T) * H * D * 2, Block.data(), Block.size() * 2);
    auto K = repeatedBuffer(size_t(T) * H * D * 2, Block.data(), Block.size() * 2);
    auto V = repeatedBuffer(size_t(T) * H * DV * 2, Block.data(), Block.size() * 2);
    DeviceBuffer O(size_t(T) * H * DV * 2);
    std::vector<std::unique_ptr<DeviceBuffer>> Keep;
    reference::Tensor Decay = reference::Tensor::uniform({1, H, T}, Rng, -0.1, 0.0);
    TensorView DecayV = uploadInput(false, Decay.Data, Decay.Shape, Keep);
    reference::Tensor Init = reference::Tensor::normal({S, H, D, DV}, Rng);
    TensorView InitV = uploadInput(false, Init.Data, Init.Shape, Keep);
    DeviceBuffer Final(Init.Data.size() * 4);
    TensorView FinalV = TensorView::contiguous(Final.get(), DType::F32,
                                               Init.Shape);
    DeviceBuffer CuB(Cu.size() * 4);
    CuB.upload(Cu.data(), Cu.size() * 4);
    TensorView CuV = TensorView::contiguous(CuB.get(), DType::I32, {S + 1});
    runtime::InputMap Inputs =
        uploadInputs(G, reference::sampleInputs(G, Rng, 1, H, T, T), Keep);
    const bool Reads = codegen::linearReadsDecay(Lin.definition());
    TensorView Qv = TensorView::contiguous(Q->get(), ET, {T, H, D});
    TensorView Kv = TensorView::contiguous(K->get(), ET, {T, H, D});
    TensorView Vv = TensorView::contiguous(V->get(), ET, {T, H, DV});
    TensorView Ov = TensorView::contiguous(O.get(), ET, {T, H, DV});
    const double VarMs = runtime::medianEventMs(
        [&](int) {
          Lin.forwardVarlen({Qv, Kv, Vv, Ov, Reads ? &DecayV : nullptr, CuV, &InitV,
                             &FinalV},
                            Inputs);
        },
        3, 20);
    const int Mean = T / S;
    runtime::LinearProblem P(Lin.definition(), Sig, {S, H, H, Mean}, 1, 7);
    const double FixMs =
        runtime::medianEventMs([&](int) { P.forward(Lin, 0); }, 3, 20);
    // One line per direction: both times and the packed call's share of the
    // padded one's throughput.
    auto Row = [&](const char *Direction, double PackedMs, double PaddedMs) {
      const double PackedTps = T / (PackedMs * 1e-3),
                   PaddedTps = double(S) * Mean / (PaddedMs * 1e-3);
      std::printf("attnc %s %s H%d D%d DV%d%s: packed %d sequences, %d tokens: "
                  "%.3f ms (%.1f Mtok/s); padded B%d T%d: %.3f ms (%.1f "
                  "Mtok/s); packed at %.0f%% of padded\n",
                  Cmd.Name.c_str(), std::string(dtypeName(Cmd.Dtype)).c_str(), H, D,
                  DV, Direction, S, T, PackedMs, PackedTps / 1e6, S, Mean,
                  PaddedMs, PaddedTps / 1e6, 100.0 * PackedTps / PaddedTps);
    };
    Row("", VarMs, FixMs);

    // The backward: dout from the same block, gradients written.
    auto DOB = repeatedBuffer(size_t(T) * H * DV * 2, Block.data(), Block.size() * 2);
    DeviceBuffer DQ(size_t(T) * H * D * 2), DK(size_t(T) * H * D * 2),
        DVb(size_t(T) * H * DV * 2), DDecay(size_t(T) * H * 4),
        DInit(Init.Data.size() * 4);
    TensorView DOv = TensorView::contiguous(DOB->get(), ET, {T, H, DV});
    TensorView DQv = TensorView::contiguous(DQ.get(), ET, {T, H, D});
    TensorView DKv = TensorView::contiguous(DK.get(), ET, {T, H, D});
    TensorView DVv = TensorView::contiguous(DVb.get(), ET, {T, H, DV});
    TensorView DDecayV =
        TensorView::contiguous(DDecay.get(), DType::F32, {1, H, T});
    TensorView DInitV =
        TensorView::contiguous(DInit.get(), DType::F32, Init.Shape);
    const double VarBwdMs = runtime::medianEventMs(
        [&](int) {
          Lin.backwardVarlen({Qv, Kv, Vv, Reads ? &DecayV : nullptr, DOv, CuV, &InitV,
                              &FinalV, DQv, DKv, DVv, Reads ? &DDecayV : nullptr,
                              &DInitV},
                             Inputs);
        },
        3, 20);
    const double FixBwdMs =
        runtime::medianEventMs([&](int) { P.backward(Lin, 0); }, 3, 20);
    Row(" backward", VarBwdMs, FixBwdMs);
    return 0;
  } catch (const std::exception &E) {
    std::fprintf(stderr, "attnc_bench_linear_varlen: %s\n", E.what());
    return 1;
  }
}
