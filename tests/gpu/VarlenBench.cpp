// gpu_varlen_test --bench [H [D ...]]: the packed forward and backward of
// a ragged batch timed beside the packed backward it ran before and dense
// attention of the same token count.
#include "VarlenCases.h"

#include "BackwardRunner.h"
#include "TestDefinitions.h"

#include "attn/runtime/EventTiming.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <random>

namespace attn::gputest::varlen {

namespace {

/// The backward configuration a packed call ran at head dim \p D before
/// the lean step had a packed form (bwd_sm80's two-kernel mode at d64, the
/// plain lockstep step at d128), timed beside the default by --bench.
const char *previousPackedBackward(int D) {
  return D == 64 ? "kv64x128w8.q128x64w8.s2" : "bwd90ws.kv64x128s2.fused.varlen";
}

} // namespace

/// --bench [H [D ...]]: a batch of 32 sequences of lengths uniform in [64,
/// 8192] (H32 D128 unless named), f16, unmasked and causal: the packed
/// forward and backward on the defaults, the packed backward on the
/// configuration it ran before (previousPackedBackward), and dense
/// attention of the same token count (32 sequences of the mean length).
/// The lengths are printed (a peer script reads them). \p CompileOnly:
/// these kernels compiled for sm_90a into the kernel cache, no GPU (as
/// --compile-only for the cases).
int bench(int H, const std::vector<int> &Dims, bool CompileOnly) {
  if (CompileOnly) {
    for (int D : Dims)
      for (const char *Def : {"mha_full", "mha"}) {
        compileCase({Def, DType::F16, D, H, H, {}, {}, "", true}, Layout::THD);
        compileCase({Def, DType::F16, D, H, H, {}, {}, "", true, previousPackedBackward(D)},
                    Layout::THD);
        compileCase({Def, DType::F16, D, H, H, {}, {}, "", true}, Layout::BSHD);
      }
    return 0;
  }
  std::mt19937_64 Rng(2026);
  std::uniform_int_distribution<int> U(64, 8192);
  std::vector<int> L(32);
  for (int &X : L)
    X = U(Rng);
  const std::vector<int> Cu = cumulative(L);
  const int64_t T = Cu.back();
  const int Mean = int((T + 16) / 32), Longest = longest(L);
  std::printf("lengths: 32 uniform in [64, 8192], %lld tokens, mean %d, max %d\n",
              (long long)T, Mean, Longest);
  std::printf("lengths:");
  for (int X : L)
    std::printf(" %d", X);
  std::printf("\n");
  std::fflush(stdout); // each row leaves at once, should a time limit stop the run
  const int MaxD = *std::max_element(Dims.begin(), Dims.end());
  // Random 16-bit inputs (no fp64 copy: nothing is checked here), room for
  // the dense rows' 32 x Mean tokens (up to 16 more than T).
  std::vector<uint16_t> Bits(size_t(T + 32) * H * MaxD);
  std::normal_distribution<double> N(0.0, 1.0);
  for (uint16_t &B : Bits)
    B = toBits(DType::F16, N(Rng));
  auto Buf = upload(Bits.data(), Bits.size() * 2);
  DeviceBuffer Out(Buf->size()), F(size_t(H) * (T + 32) * 4), DOut(Buf->size()), GQ(Buf->size()),
      GK(Buf->size()), GV(Buf->size());
  DOut.upload(Bits.data(), Bits.size() * 2);
  auto Cuq = upload(Cu.data(), Cu.size() * 4);
  for (int D : Dims)
    for (const char *Def : {"mha_full", "mha"}) {
      bool Causal = std::string(Def) == "mha";
      double Pairs = 0, DensePairs = 0;
      for (int X : L)
        Pairs += Causal ? 0.5 * X * (X + 1.0) : double(X) * X;
      DensePairs = 32 * (Causal ? 0.5 * Mean * (Mean + 1.0) : double(Mean) * Mean);
      // The packed default, the packed backward it replaced, dense.
      for (int Row = 0; Row < 3; ++Row) {
        const bool Varlen = Row < 2;
        runtime::Signature Sig;
        Sig.HeadDim = Sig.HeadDimV = D;
        Sig.TensorLayout = Varlen ? Layout::THD : Layout::BSHD;
        if (Row == 1)
          Sig.BackwardConfig = previousPackedBackward(D);
        runtime::Attention A(makeDefinition(Def), Sig);
        DType ET = DType::F16;
        int64_t Tok = Varlen ? T : int64_t(32) * Mean;
        auto V = [&](DeviceBuffer &B) {
          return Varlen ? runtime::TensorView::contiguous(B.get(), ET, {Tok, H, D})
                        : runtime::TensorView::contiguous(B.get(), ET, {32, Mean, H, D});
        };
        runtime::TensorView Fin =
            Varlen ? runtime::TensorView::contiguous(F.get(), DType::F32, {1, H, Tok})
                   : runtime::TensorView::contiguous(F.get(), DType::F32, {1, 32, H, Mean});
        runtime::VarlenBatch VB{
            runtime::TensorView::contiguous(Cuq->get(), DType::I32, {33}),
            runtime::TensorView::contiguous(Cuq->get(), DType::I32, {33}),
            Longest, Longest};
        auto Fwd = [&](int) {
          if (Varlen)
            A.forwardVarlen(V(*Buf), V(*Buf), V(*Buf), V(Out), &Fin, VB);
          else
            A.forward(V(*Buf), V(*Buf), V(*Buf), V(Out), &Fin);
        };
        double FwdMs = runtime::medianEventMs(Fwd, 3, 10);
        runtime::TensorView O = V(Out);
        auto Bwd = [&](int) {
          if (Varlen)
            A.backwardVarlen(V(*Buf), V(*Buf), V(*Buf), &O, V(DOut), &Fin, V(GQ), V(GK),
                             V(GV), VB);
          else
            A.backward(V(*Buf), V(*Buf), V(*Buf), &O, V(DOut), &Fin, V(GQ), V(GK), V(GV));
        };
        double BwdMs = runtime::medianEventMs(Bwd, 3, 10);
        const runtime::KernelChoice Choice =
            Varlen ? runtime::packedCallBackwardChoice(A.backwardChoice(), Causal, Longest)
                   : runtime::denseBackwardChoice(A.backwardChoice(), Causal, Mean);
        double Flops = 4.0 * H * D * (Varlen ? Pairs : DensePairs);
        std::printf("%-8s H%d D%d %-6s %-7s fwd %.3f ms %.0f TFLOPS  bwd %.3f ms %.0f TFLOPS "
                    " [%s]\n",
                    Def, H, D, Varlen ? "varlen" : "dense",
                    Row == 0 ? "default" : Row == 1 ? "before" : "default", FwdMs,
                    Flops / FwdMs * 1e-9, BwdMs, 2.5 * Flops / BwdMs * 1e-9,
                    Choice.str().c_str());
        std::fflush(stdout);
      }
    }
  return 0;
}

} // namespace attn::gputest::varlen
