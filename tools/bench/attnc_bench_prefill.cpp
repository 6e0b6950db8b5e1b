// attnc_bench_prefill: times paged prefill with a cached prefix against the
// contiguous packed prefill of the same problem, with CUDA events, and
// prints one line per kernel (peers_prefill.py times the peers on the same
// shape in the same command):
//
//   attnc_bench_prefill NAME DTYPE HQ HKV D B PREFIX NEW [PAGE ...]
//
// B sequences of PREFIX cached keys and NEW new tokens; the NEW queries of
// each attend to its PREFIX + NEW keys, q_idx aligned to the end of the
// keys (so a causal mask lets query i see keys 0 .. PREFIX + i). The
// contiguous call is forwardVarlen of a THD signature (fwd_sm90 on sm_90a,
// and fwd_sm80 named); the paged one is runPrefill of a plan over NHD
// caches of PAGE-token pages (default 16 and 256) on the same K/V memory,
// each sequence's pages in a shuffled order, for the default signature
// (against the default contiguous kernel; on sm_90a fwd_sm90's kernel
// with each PagedLoad, ATTNC_PAGED_LOAD thread, warp then gather; pages
// under 8 tokens take the gather whatever is named, so they run once) and
// fwd_sm80 named (against contiguous fwd_sm80). TFLOPS counts 4·D·HQ over the
// (query, key) pairs a causal mask keeps (B · (NEW·PREFIX + NEW·(NEW+1)/2));
// for an unmasked definition, over all pairs. With
// ATTNC_BENCH_COMPILE_ONLY=ARCH it only compiles the kernels for ARCH (the
// two contiguous ones, the paged ones for pages of 16, every load, and 1)
// into the kernel cache (no GPU needed) and exits.
#include "GpuSupport.h"
#include "TestDefinitions.h"
#include "attn/runtime/EventTiming.h"

#include "attn/Error.h"
#include "attn/codegen/Arch.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/Paged.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>

using namespace attn;
using namespace attn::gputest;
using runtime::TensorView;

namespace {

/// Fills \p Buf with the random block \p Block, repeated.
void fillRepeated(DeviceBuffer &Buf, const std::vector<uint16_t> &Block) {
  auto &D = runtime::CudaDriver::get();
  size_t BlockBytes = Block.size() * 2;
  for (size_t Off = 0; Off < Buf.size(); Off += BlockBytes) {
    size_t N = std::min(BlockBytes, Buf.size() - Off);
    D.check(D.cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(Buf.get()) + Off, Block.data(), N),
            "cuMemcpyHtoD");
  }
}

runtime::InputMap scalarInputs(const runtime::Attention &A) {
  runtime::InputMap Inputs;
  for (const ir::InputDecl &D : A.definition().Graph->decls().Inputs) {
    if (D.Shape != ir::InputShape::Scalar)
      throw UserError("attnc_bench_prefill: input '" + D.Name + "' is not a scalar");
    double X = 0.5 * (D.SampleLo + D.SampleHi);
    if (D.Elem == ir::InputType::I32)
      Inputs[D.Name] = int32_t(std::lround(X));
    else
      Inputs[D.Name] = float(X);
  }
  return Inputs;
}

} // namespace

int main(int Argc, char **Argv) {
  if (Argc < 9) {
    std::fprintf(stderr, "usage: attnc_bench_prefill NAME f16|bf16 HQ HKV D B PREFIX NEW "
                         "[PAGE ...]\n");
    return 2;
  }
  auto &Drv = runtime::CudaDriver::get();
  const char *CompileOnly = std::getenv("ATTNC_BENCH_COMPILE_ONLY");
  if (!CompileOnly && !Drv.available()) {
    std::printf("skipped: %s\n", Drv.unavailableReason().c_str());
    return 77;
  }
  try {
    const std::string Name = Argv[1];
    const DType Dt = std::string(Argv[2]) == "bf16" ? DType::BF16 : DType::F16;
    const int HQ = std::atoi(Argv[3]), HKV = std::atoi(Argv[4]), D = std::atoi(Argv[5]),
              B = std::atoi(Argv[6]), Prefix = std::atoi(Argv[7]), New = std::atoi(Argv[8]);
    std::vector<int> PageSizes;
    for (int I = 9; I < Argc; ++I)
      PageSizes.push_back(std::atoi(Argv[I]));
    if (PageSizes.empty())
      PageSizes = {16, 256};
    const int KV = Prefix + New;
    const int64_t Tq = int64_t(B) * New, Tkv = int64_t(B) * KV;

    dsl::AttentionDef Def = makeDefinition(Name);
    // The paged runs: the default signature with fwd_sm90's three
    // PagedLoads (ATTNC_PAGED_LOAD; fwd_sm80's kernel where fwd_sm90 does
    // not serve the call), fwd_sm80 named.
    const std::pair<const char *, const char *> PagedRuns[] = {
        {"", "thread"}, {"", "warp"}, {"", "gather"}, {"fwd_sm80", ""}};
    auto setLoad = [](const char *Load) {
      if (*Load)
        setenv("ATTNC_PAGED_LOAD", Load, 1);
      else
        unsetenv("ATTNC_PAGED_LOAD");
    };
    std::optional<GpuArch> Arch;
    if (CompileOnly) {
      Arch = archFromName(CompileOnly);
      if (!Arch)
        throw UserError(std::string("ATTNC_BENCH_COMPILE_ONLY: unknown arch ") + CompileOnly);
      int N = 0;
      for (const char *Skel : {"", "fwd_sm80"}) {
        runtime::Signature Sig;
        Sig.Dtype = Dt;
        Sig.HeadDim = Sig.HeadDimV = D;
        Sig.TensorLayout = Layout::THD;
        Sig.Backend = "generated";
        Sig.Skeleton = Skel;
        Sig.Arch = Arch;
        runtime::Attention A(Def, Sig);
        N += int(A.precompile(runtime::PrecompileSet{}).size());
      }
      // The paged kernels: fwd_sm90's (pages of 16, each load; pages of 1,
      // the gather) for the default signature, fwd_sm80's for the named
      // one.
      for (auto [Skel, Load] : PagedRuns) {
        setLoad(Load);
        runtime::Signature Sig;
        Sig.Dtype = Dt;
        Sig.HeadDim = Sig.HeadDimV = D;
        Sig.Backend = "generated";
        Sig.Skeleton = Skel;
        Sig.Arch = Arch;
        runtime::Attention A(Def, Sig);
        for (int PS : {16, 1}) {
          void *P = reinterpret_cast<void *>(uintptr_t(1) << 20);
          runtime::PagedKV KV;
          KV.KCache = TensorView::contiguous(P, Dt, {4, PS, HKV, D});
          KV.VCache = KV.KCache;
          KV.BlockTable = TensorView::contiguous(P, DType::I32, {1, 1});
          KV.SeqLens = TensorView::contiguous(P, DType::I32, {1});
          KV.MaxSeqlenKv = PS;
          const int64_t NF = int64_t(A.finalNames().size());
          TensorView Q = TensorView::contiguous(P, Dt, {4, HQ, D});
          TensorView F = TensorView::contiguous(P, DType::F32, {NF, HQ, 4});
          try {
            A.prefillPaged(Q, TensorView::contiguous(P, DType::I32, {2}), 4, KV, Q,
                           NF ? &F : nullptr, scalarInputs(A));
          } catch (const DriverError &) {
          }
        }
      }
      setLoad("");
      std::printf("compiled %d contiguous kernels and the paged ones for %s\n", N,
                  CompileOnly);
      return 0;
    }
    // The device's context current before the first allocation (the
    // Attention objects that would make it current come later).
    std::printf("device: %s\n", runtime::currentDevice().Name.c_str());
    const bool Masked = bool(Def.mask_mod);
    const double Pairs = Masked ? double(New) * Prefix + double(New) * (New + 1) / 2
                                : double(New) * KV;
    const double Flops = 4.0 * D * HQ * B * Pairs;

    std::mt19937_64 Rng(20261127);
    std::normal_distribution<double> N(0.0, 1.0);
    std::vector<uint16_t> Block(size_t(16) << 20);
    for (uint16_t &X : Block)
      X = toBits(Dt, N(Rng));
    DeviceBuffer Q(size_t(Tq) * HQ * D * 2), O(size_t(Tq) * HQ * D * 2),
        K(size_t(Tkv) * HKV * D * 2), V(size_t(Tkv) * HKV * D * 2), F(size_t(Tq) * HQ * 4 * 4);
    fillRepeated(Q, Block);
    fillRepeated(K, Block);
    fillRepeated(V, Block);
    std::vector<int32_t> CuQ(B + 1), CuKv(B + 1);
    for (int b = 0; b <= B; ++b) {
      CuQ[b] = b * New;
      CuKv[b] = b * KV;
    }
    DeviceBuffer DCuQ(CuQ.size() * 4), DCuKv(CuKv.size() * 4);
    DCuQ.upload(CuQ.data(), DCuQ.size());
    DCuKv.upload(CuKv.data(), DCuKv.size());
    TensorView QV = TensorView::contiguous(Q.get(), Dt, {Tq, HQ, D});
    TensorView OV = TensorView::contiguous(O.get(), Dt, {Tq, HQ, D});
    TensorView CuQV = TensorView::contiguous(DCuQ.get(), DType::I32, {B + 1});

    // Each kernel's o against the first contiguous kernel's on the same
    // inputs (the paged ones with pages in order, so that they see the
    // same keys): a check that the kernels timed compute the same thing.
    std::vector<uint16_t> Ref;
    auto maxDiff = [&] {
      std::vector<uint16_t> Got(Ref.size());
      O.download(Got.data(), O.size());
      double M = 0;
      for (size_t I = 0; I < Got.size(); ++I) {
        double X = fromBits(Dt, Got[I]), Y = fromBits(Dt, Ref[I]);
        M = std::max(M, std::isnan(X) != std::isnan(Y) ? INFINITY : std::fabs(X - Y));
      }
      return M;
    };
    auto Line = [&](const std::string &What, double Ms, double BaseMs) {
      std::printf("attnc %s %s hq%d hkv%d d%d B%d prefix%d new%d %s: %.3f ms, %.0f "
                  "TFLOPS%s\n",
                  Name.c_str(), Argv[2], HQ, HKV, D, B, Prefix, New, What.c_str(), Ms,
                  Flops / (Ms * 1e-3) / 1e12,
                  BaseMs > 0 ? fmt::format(", {:.2f}x contiguous", BaseMs / Ms).c_str() : "");
      std::fflush(stdout);
    };

    // The contiguous packed prefill: the signature's default skeleton, then
    // fwd_sm80 named (the paged kernel's own skeleton, contiguous).
    double BaseMs[2] = {0, 0};
    const char *Skels[2] = {"", "fwd_sm80"};
    for (int Si = 0; Si < 2; ++Si) {
      const char *Skel = Skels[Si];
      runtime::Signature Sig;
      Sig.Dtype = Dt;
      Sig.HeadDim = Sig.HeadDimV = D;
      Sig.TensorLayout = Layout::THD;
      Sig.Backend = "generated";
      Sig.Skeleton = Skel;
      runtime::Attention A(Def, Sig);
      runtime::InputMap Inputs = scalarInputs(A);
      const int64_t NF = int64_t(A.finalNames().size());
      TensorView FV = TensorView::contiguous(F.get(), DType::F32, {NF, HQ, Tq});
      runtime::VarlenBatch VB;
      VB.CuSeqlensQ = CuQV;
      VB.CuSeqlensKv = TensorView::contiguous(DCuKv.get(), DType::I32, {B + 1});
      VB.MaxSeqlenQ = New;
      VB.MaxSeqlenKv = KV;
      auto Run = [&](int) {
        A.forwardVarlen(QV, TensorView::contiguous(K.get(), Dt, {Tkv, HKV, D}),
                        TensorView::contiguous(V.get(), Dt, {Tkv, HKV, D}), OV,
                        NF ? &FV : nullptr, VB, Inputs);
      };
      double Ms = runtime::medianEventMs(Run, 3, 20);
      Line(fmt::format("contiguous {}", A.forwardChoice().str()), Ms, 0);
      BaseMs[Si] = Ms;
      if (Si == 0) {
        Ref.resize(size_t(Tq) * HQ * D);
        O.download(Ref.data(), O.size());
      } else {
        std::printf("  max |o - first contiguous o| %.3g\n", maxDiff());
      }
    }

    // Paged: the same K/V memory as NHD caches, each sequence's logical
    // page p at a shuffled physical page; the default signature's kernel
    // against the default contiguous one, fwd_sm80's (named) against
    // contiguous fwd_sm80.
    for (auto [Skel, Load] : PagedRuns) {
      const int Si = *Skel ? 1 : 0;
      setLoad(Load);
      runtime::Signature Sig;
      Sig.Dtype = Dt;
      Sig.HeadDim = Sig.HeadDimV = D;
      Sig.Backend = "generated";
      Sig.Skeleton = Skel;
      runtime::Attention A(Def, Sig);
      runtime::InputMap Inputs = scalarInputs(A);
      const int64_t NF = int64_t(A.finalNames().size());
      TensorView FV = TensorView::contiguous(F.get(), DType::F32, {NF, HQ, Tq});
      for (int PS : PageSizes) {
        if (*Load && std::string(Load) != "gather" && PS < 8)
          continue; // the gather's kernel, timed in its own run
        if (KV % PS != 0) {
          std::printf("paged%d: skipped (PREFIX + NEW is not a multiple)\n", PS);
          continue;
        }
        const int Pages = KV / PS;
        std::vector<int32_t> Perm(size_t(B) * Pages);
        std::iota(Perm.begin(), Perm.end(), 0);
        std::shuffle(Perm.begin(), Perm.end(), std::mt19937_64(PS));
        std::vector<int32_t> Lens(B, KV);
        DeviceBuffer Table(Perm.size() * 4), DLens(Lens.size() * 4);
        Table.upload(Perm.data(), Table.size());
        DLens.upload(Lens.data(), DLens.size());
        runtime::PagedKV KVs;
        std::vector<int64_t> Shape{int64_t(B) * Pages, PS, HKV, D};
        KVs.KCache = TensorView::contiguous(K.get(), Dt, Shape);
        KVs.VCache = TensorView::contiguous(V.get(), Dt, Shape);
        KVs.BlockTable = TensorView::contiguous(Table.get(), DType::I32, {B, Pages});
        KVs.SeqLens = TensorView::contiguous(DLens.get(), DType::I32, {B});
        KVs.MaxSeqlenKv = KV;
        runtime::PrefillPlan Plan =
            A.planPrefill(runtime::PrefillBounds{B, HQ, HKV, New, KV, PS});
        double Ms = runtime::medianEventMs(
            [&](int) { A.runPrefill(Plan, QV, CuQV, KVs, OV, NF ? &FV : nullptr, Inputs); },
            3, 20);
        Line(fmt::format("paged{} {}{}", PS,
                         Plan.KernelKey.substr(Plan.KernelKey.find('.') + 1),
                         Si ? " (fwd_sm80 named)" : ""),
             Ms, BaseMs[Si]);
        std::vector<int32_t> InOrder(Perm.size());
        std::iota(InOrder.begin(), InOrder.end(), 0);
        Table.upload(InOrder.data(), Table.size());
        A.runPrefill(Plan, QV, CuQV, KVs, OV, NF ? &FV : nullptr, Inputs);
        Drv.check(Drv.cuCtxSynchronize(), "paged prefill");
        std::printf("  max |o - first contiguous o| %.3g (pages in order)\n", maxDiff());
      }
    }
  } catch (const Error &E) {
    std::fprintf(stderr, "attnc_bench_prefill: %s\n", E.what());
    return 1;
  }
  return 0;
}
