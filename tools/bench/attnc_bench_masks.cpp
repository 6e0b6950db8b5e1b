// attnc_bench_masks: the everyday masks of tools/bench/peers_masks.py
// (FlexAttention) on attnc, forward and forward+backward, CUDA events,
// warm-up, median of 30, inputs rotated over three random sets. Each mask
// is timed twice: by plain calls (a mask that reads tensors is classified on
// every one, so their time includes the classification; the others reuse
// the last call's lists) and by calls given a block mask made once outside
// the timing (Attention::makeBlockMask, as FlexAttention's create_block_mask
// in peers_masks.py). The classification alone (refreshBlockMask of a
// forward-only mask, ten back to back a sample) is printed as a fraction of
// the forward with the block mask, and the classifications the timed calls
// with one launched (0). The plain and the block-mask forwards are timed
// in turn, sample by sample (interleaved), so that the GPU's clocks and
// temperature are the same for both. The classification's GPU time is
// taken behind a long memset, which the host's ten calls queue behind, so
// that it holds the kernels and the gaps between them, not the host's time
// per call (printed apart). The forward lists' visited key blocks per tile
// are summarised (mean, the heaviest tile, the share of partial blocks).
//
//   attnc_bench_masks MASK|all f16|bf16 H D S [S ...] [--compile-only] [--fwd-only]
//
// --fwd-only times the forward alone (no backward kernels compiled or run).
//   attnc_bench_masks varlen f16|bf16 H D MAXLEN [--compile-only]
//
// varlen: packed batches of 32 sequences of lengths uniform in [64, MAXLEN]
// with no mask and under causal, window256 and chunked256 masks (within each sequence)
// against dense attention of the same total tokens, forward and backward
// TFLOPS of the kept pairs (benchVarlen); first the lengths, which
// peers_masks.py --varlen takes for FlexAttention. ATTNC_BENCH_FWD_CONFIG
// names the forward configuration of every varlen row, packed and dense
// (e.g. sm90.m128n64s4p), in place of the defaults, and
// ATTNC_BENCH_BWD_CONFIG the backward's (e.g. bwd90ws.kv64x128s2.atomic: a
// packed call runs its .varlen form). ATTNC_BENCH_VARLEN_MASKS
// (a comma-separated subset of none,causal,window256,chunked256) runs, or
// with --compile-only compiles, only those rows, so that a profiler's
// launch counts start at the row's; ATTNC_BENCH_VARLEN_ONLY=packed or
// dense times one side of each row alone; ATTNC_BENCH_VARLEN_ORDER=longest
// or shortest packs the same lengths sorted.
//
// --compile-only needs no GPU: it compiles the forward and backward kernels
// the timed run uses on sm_90a into the kernel cache ($ATTNC_CACHE_DIR),
// which a device run then reads instead of compiling.
//
// MASK is document, prefix_lm, window256 or chunked256 (causal within
// chunks of 256 tokens, the chunk a runtime int32 scalar, as mha_chunked),
// or causal (named only, not in "all": plain causal at the same shapes, for
// the persistent choice at short sequences).
// B = 16384 / S. The document ids, the prefix and the chunk follow
// peers_masks.py: eight documents at the fixed fractions DocFractions, the
// prefix S / 4, chunks of 256.
#include "BackwardRunner.h"
#include "BenchJson.h"
#include "BlockMaskData.h"
#include "GpuSupport.h"
#include "ListVisits.h"
#include "MaskClassify.h"
#include "MasksBench.h"
#include "attn/codegen/Codegen.h"
#include "attn/runtime/DtypeBits.h"
#include "attn/runtime/EventTiming.h"
#include "attn/runtime/Selector.h"

#include "Examples.h"
#include "attn/Error.h"

#include <fmt/format.h>
#include <llvm/ADT/STLExtras.h>
#include <llvm/ADT/SmallVector.h>
#include <llvm/ADT/StringRef.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <variant>
#include <vector>

using namespace attn;
using namespace attn::gputest;
using dsl::SymbolScalar;
using namespace attn::masksbench;

namespace {

constexpr double DocFractions[] = {0.0,  0.07, 0.21, 0.30, 0.46,
                                   0.58, 0.71, 0.89, 1.0};

} // namespace

dsl::AttentionDef masksbench::maskedMha(const std::string &Name) {
  dsl::AttentionDef D = examples::mha();
  D.name = "bench_" + Name;
  if (Name == "document") {
    D.inputs.declare("doc_q", ir::InputShape::PerQueryToken, ir::InputType::I32)
        .declare("doc_k", ir::InputShape::PerKeyToken, ir::InputType::I32);
    D.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar Q, SymbolScalar K,
                    const dsl::CustomInputs &In) {
      return (Q >= K) & (In["doc_q"] == In["doc_k"]);
    };
  } else if (Name == "prefix_lm") {
    D.inputs.declare("prefix", ir::InputShape::Scalar, ir::InputType::I32);
    D.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar Q, SymbolScalar K,
                    const dsl::CustomInputs &In) {
      return (Q >= K) | (K < In["prefix"]);
    };
  } else if (Name == "causal") {
    D.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar Q,
                    SymbolScalar K) { return Q >= K; };
  } else if (Name == "window256") {
    D.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar Q,
                    SymbolScalar K) { return (Q >= K) & (Q - K < Window); };
  } else if (Name == "chunked256") {
    D.inputs.declare("chunk", ir::InputShape::Scalar, ir::InputType::I32);
    D.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar Q, SymbolScalar K,
                    const dsl::CustomInputs &In) {
      return (Q >= K) & (floordiv(Q, In["chunk"]) == floordiv(K, In["chunk"]));
    };
  } else {
    throw UserError("attnc_bench_masks: unknown mask '" + Name + "'");
  }
  return D;
}

namespace {

/// The pairs (q, k) the mask \p Name keeps at sequence length \p S, row by
/// row: document, keys from the document's first token (the ids are sorted)
/// up to q; prefix-LM, keys up to q or below S / 4; window, the last 256
/// keys up to q; chunked, the keys of q's chunk up to q.
double keptPairs(const std::string &Name, const std::vector<int> &Ids, int S) {
  double N = 0;
  int Start = 0; // the first token of the document of the row
  for (int Q = 0; Q < S; ++Q) {
    if (Q > 0 && Ids[Q] != Ids[Q - 1])
      Start = Q;
    if (Name == "document")
      N += Q - Start + 1;
    else if (Name == "prefix_lm")
      N += std::max(Q + 1, S / 4);
    else if (Name == "causal")
      N += Q + 1;
    else if (Name == "window256")
      N += std::min(Q + 1, Window);
    else if (Name == "chunked256")
      N += Q % Chunk + 1;
  }
  return N;
}

std::vector<int> docIds(int S) {
  std::vector<int> Ids(S);
  for (int D = 0; D + 1 < int(std::size(DocFractions)); ++D)
    for (int I = int(std::lround(DocFractions[D] * S));
         I < int(std::lround(DocFractions[D + 1] * S)); ++I)
      Ids[I] = D;
  return Ids;
}

/// Medians of \p A's and \p B's times, one call each between two events,
/// the two taken in turn (A, B, A, B, ...) after \p Warmup rounds.
std::pair<double, double> interleavedMedians(const std::function<void(int)> &A,
                                             const std::function<void(int)> &B,
                                             int Warmup, int Repeats) {
  runtime::CudaDriver &Drv = runtime::CudaDriver::get();
  for (int I = 0; I < Warmup; ++I) {
    A(I);
    B(I);
  }
  Drv.check(Drv.cuCtxSynchronize(), "warm-up");
  CUevent E[2];
  for (CUevent &X : E)
    Drv.check(Drv.cuEventCreate(&X, 0), "cuEventCreate");
  std::vector<float> Ms[2];
  for (int I = 0; I < Repeats; ++I)
    for (int W = 0; W < 2; ++W) {
      Drv.check(Drv.cuEventRecord(E[0], nullptr), "cuEventRecord");
      (W == 0 ? A : B)(I);
      Drv.check(Drv.cuEventRecord(E[1], nullptr), "cuEventRecord");
      Drv.check(Drv.cuEventSynchronize(E[1]), "cuEventSynchronize");
      float X = 0;
      Drv.check(Drv.cuEventElapsedTime(&X, E[0], E[1]), "cuEventElapsedTime");
      Ms[W].push_back(X);
    }
  for (CUevent X : E)
    Drv.cuEventDestroy(X);
  for (std::vector<float> &V : Ms)
    std::sort(V.begin(), V.end());
  return {Ms[0][Ms[0].size() / 2], Ms[1][Ms[1].size() / 2]};
}

/// The GPU time of \p Calls calls of \p Run (the median of \p Repeats
/// samples): each sample's calls are queued behind a memset of \p Filler
/// (about a millisecond of GPU work at 3 GiB), so that the events
/// around them see the kernels back to back rather than the host's
/// pace. \p HostMs gets the median host time of the calls.
double queuedGpuMs(const std::function<void()> &Run, int Calls, int Repeats,
                   DeviceBuffer &Filler, double &HostMs) {
  runtime::CudaDriver &Drv = runtime::CudaDriver::get();
  CUevent E[2];
  for (CUevent &X : E)
    Drv.check(Drv.cuEventCreate(&X, 0), "cuEventCreate");
  std::vector<double> Gpu, Host;
  for (int I = 0; I < Repeats + 2; ++I) {
    Drv.check(Drv.cuMemsetD32Async(CUdeviceptr(Filler.get()), unsigned(I),
                                   Filler.size() / 4, nullptr),
              "cuMemsetD32Async");
    Drv.check(Drv.cuEventRecord(E[0], nullptr), "cuEventRecord");
    auto T0 = std::chrono::steady_clock::now();
    for (int C = 0; C < Calls; ++C)
      Run();
    auto T1 = std::chrono::steady_clock::now();
    Drv.check(Drv.cuEventRecord(E[1], nullptr), "cuEventRecord");
    Drv.check(Drv.cuEventSynchronize(E[1]), "cuEventSynchronize");
    float X = 0;
    Drv.check(Drv.cuEventElapsedTime(&X, E[0], E[1]), "cuEventElapsedTime");
    if (I < 2)
      continue; // warm-up
    Gpu.push_back(X);
    Host.push_back(std::chrono::duration<double, std::milli>(T1 - T0).count());
  }
  for (CUevent X : E)
    Drv.cuEventDestroy(X);
  std::sort(Gpu.begin(), Gpu.end());
  std::sort(Host.begin(), Host.end());
  HostMs = Host[Host.size() / 2] / Calls;
  return Gpu[Gpu.size() / 2] / Calls;
}

/// The forward lists of \p M: visited key blocks per tile (one query
/// block of one group), as "mean M max X partial P%".
std::string visitSummary(const runtime::BlockMask &M) {
  const runtime::BlockMaskData &D = M.data();
  const int64_t NBlocks = (D.Shape.SeqKv + D.FwdBlockN - 1) / D.FwdBlockN;
  const int64_t Rows = D.Groups * ((D.Shape.SeqQ + D.FwdBlockM - 1) / D.FwdBlockM);
  std::vector<int32_t> Count(static_cast<size_t>(Rows)),
      List(static_cast<size_t>(Rows * NBlocks));
  runtime::CudaDriver &Drv = runtime::CudaDriver::get();
  Drv.check(Drv.cuCtxSynchronize(), "block mask");
  Drv.check(Drv.cuMemcpyDtoH(Count.data(), CUdeviceptr(D.FwdCount), Count.size() * 4),
            "cuMemcpyDtoH(counts)");
  Drv.check(Drv.cuMemcpyDtoH(List.data(), CUdeviceptr(D.FwdList), List.size() * 4),
            "cuMemcpyDtoH(lists)");
  int64_t Sum = 0, Partial = 0;
  int Max = 0;
  for (int64_t R = 0; R < Rows; ++R) {
    Sum += Count[R];
    Max = std::max(Max, Count[R]);
    for (int J = 0; J < Count[R]; ++J)
      Partial += !((List[R * NBlocks + J] >> 30) & 1);
  }
  return fmt::format("visits mean {:.2f} max {} partial {:.0f}%", double(Sum) / Rows, Max,
                     100.0 * Partial / std::max<int64_t>(1, Sum));
}

void benchOne(const std::string &Mask, DType T, int H, int D, int S, bool FwdOnly) {
  int B = std::max(1, 16384 / S);
  runtime::Signature Sig;
  Sig.Dtype = T;
  Sig.HeadDim = D;
  Sig.HeadDimV = D;
  runtime::Attention Att(maskedMha(Mask), Sig);
  DType ET = T;
  size_t Elems = size_t(B) * S * H * D;
  std::mt19937_64 Rng(11);
  runtime::NormalPool Normals(T, Rng, 11);
  std::vector<uint16_t> Host;
  std::vector<std::unique_ptr<DeviceBuffer>> Bufs; // 3 sets of q, k, v, dO
  for (int I = 0; I < 12; ++I) {
    Normals.fill(Host, Elems);
    Bufs.push_back(std::make_unique<DeviceBuffer>(Elems * 2));
    Bufs.back()->upload(Host.data(), Elems * 2);
  }
  DeviceBuffer Out(Elems * 2), DQ(Elems * 2), DK(Elems * 2), DV(Elems * 2);
  DeviceBuffer Finals(size_t(B) * H * S * 4);
  std::vector<int> Ids = docIds(S);
  std::vector<int32_t> IdsBS;
  for (int Bi = 0; Bi < B; ++Bi)
    IdsBS.insert(IdsBS.end(), Ids.begin(), Ids.end());
  DeviceBuffer IdBuf(IdsBS.size() * 4);
  IdBuf.upload(IdsBS.data(), IdsBS.size() * 4);
  runtime::InputMap Inputs;
  if (Mask == "document") {
    runtime::TensorView V = runtime::TensorView::contiguous(
        IdBuf.get(), DType::I32, {B, S});
    Inputs["doc_q"] = V;
    Inputs["doc_k"] = V;
  } else if (Mask == "prefix_lm") {
    Inputs["prefix"] = int32_t(S / 4);
  } else if (Mask == "chunked256") {
    Inputs["chunk"] = int32_t(Chunk);
  }
  auto View = [&](void *P) {
    return runtime::TensorView::contiguous(P, ET, {B, S, H, D});
  };
  runtime::TensorView FV = runtime::TensorView::contiguous(
      Finals.get(), DType::F32, {1, B, H, S});
  runtime::MaskShape Shape;
  Shape.Batch = B;
  Shape.Heads = Shape.HeadsKv = H;
  Shape.SeqQ = Shape.SeqKv = S;
  runtime::BlockMask Reused = Att.makeBlockMask(Shape, Inputs, nullptr, !FwdOnly);
  runtime::BlockMask FwdMask = Att.makeBlockMask(Shape, Inputs, nullptr, false);
  const runtime::BlockMask *Given = nullptr;
  auto Fwd = [&](int Set) {
    Att.forward(View(Bufs[4 * Set]->get()), View(Bufs[4 * Set + 1]->get()),
                View(Bufs[4 * Set + 2]->get()), View(Out.get()), &FV, Inputs,
                nullptr, Given);
  };
  auto FwdBwd = [&](int Set) {
    Fwd(Set);
    runtime::TensorView O = View(Out.get());
    Att.backward(View(Bufs[4 * Set]->get()), View(Bufs[4 * Set + 1]->get()),
                 View(Bufs[4 * Set + 2]->get()), &O,
                 View(Bufs[4 * Set + 3]->get()), &FV, View(DQ.get()),
                 View(DK.get()), View(DV.get()), Inputs, {}, nullptr, Given);
  };
  const double KeptCount = keptPairs(Mask, Ids, S);
  double FlopsFwd = 4.0 * B * H * KeptCount * D;
  // The plain and the block-mask forwards in turn; the block-mask one's
  // classifications counted (none expected).
  // And each one's calls that ran fwd_sm90's persistent kernel.
  uint64_t Launched = 0, PersistPlain = 0, PersistReused = 0, Calls = 0;
  auto [TF, TR] = interleavedMedians(
      [&](int I) {
        Given = nullptr;
        const uint64_t P = runtime::persistentForwardLaunches();
        Fwd(I % 3);
        PersistPlain += runtime::persistentForwardLaunches() - P;
        ++Calls;
      },
      [&](int I) {
        Given = &Reused;
        const uint64_t Before = runtime::classifyLaunches();
        const uint64_t P = runtime::persistentForwardLaunches();
        Fwd(I % 3);
        Launched += runtime::classifyLaunches() - Before;
        PersistReused += runtime::persistentForwardLaunches() - P;
      },
      5, 30);
  double TFB = 0, TRB = 0;
  if (!FwdOnly)
    std::tie(TFB, TRB) = interleavedMedians(
        [&](int I) {
          Given = nullptr;
          FwdBwd(I % 3);
        },
        [&](int I) {
          Given = &Reused;
          FwdBwd(I % 3);
        },
        5, 30);
  // Ten classifications a sample, queued behind a memset: their GPU time.
  double HostC = 0;
  DeviceBuffer Filler(size_t(3) << 30);
  double TC = queuedGpuMs([&] { Att.refreshBlockMask(FwdMask, Inputs); }, 10, 15,
                          Filler, HostC);
  auto Tflops = [&](double Flops, double Ms) { return Flops / (Ms * 1e-3) / 1e12; };
  std::printf("attnc %-11s %s B%d H%d S%d D%d: fwd %.3f ms %.1f TFLOPS  "
              "fwd+bwd %.3f ms %.1f TFLOPS  reused mask: fwd %.3f ms %.1f "
              "TFLOPS  fwd+bwd %.3f ms %.1f TFLOPS  classify %.4f ms GPU = %.1f%% "
              "of fwd (host %.4f ms a call)  launched %llu  persistent %llu/%llu of %llu  "
              "density %.4f  %s  [%s | %s]\n",
              Mask.c_str(), std::string(dtypeName(T)).c_str(), B, H, S, D, TF,
              Tflops(FlopsFwd, TF), TFB, Tflops(3.5 * FlopsFwd, TFB), TR,
              Tflops(FlopsFwd, TR), TRB, Tflops(3.5 * FlopsFwd, TRB), TC,
              100.0 * TC / TR, HostC, (unsigned long long)Launched,
              (unsigned long long)PersistPlain, (unsigned long long)PersistReused,
              (unsigned long long)Calls, KeptCount / (double(S) * S), visitSummary(Reused).c_str(),
              Att.forwardChoice().str().c_str(),
              FwdOnly ? "-" : Att.backwardChoice().str().c_str());
  std::fflush(stdout);
  // FLOPs of the kept elements (the mask's own), as the line above counts.
  bench::recordBenchRow({"masks_fwd", "attnc", Mask, std::string(dtypeName(T)),
                         Mask, Att.forwardChoice().str(), B, H, S, D, D, TF,
                         Tflops(FlopsFwd, TF)});
  if (FwdOnly)
    return;
  bench::recordBenchRow({"masks_fwdbwd", "attnc", Mask,
                         std::string(dtypeName(T)), Mask,
                         Att.backwardChoice().str(), B, H, S, D, D, TFB,
                         Tflops(3.5 * FlopsFwd, TFB)});
}

} // namespace

/// The kernels benchOne's calls use on sm_90a, compiled into the cache
/// (\p FwdOnly: the forward's alone).
void masksbench::compileOne(const std::string &Mask, DType T, int D,
                             bool FwdOnly) {
  runtime::Signature Sig;
  Sig.Dtype = T;
  Sig.HeadDim = Sig.HeadDimV = D;
  Sig.Arch = GpuArch::Sm90a;
  Sig.NeedsBackward = !FwdOnly;
  runtime::Attention Att(maskedMha(Mask), Sig);
  if (FwdOnly) {
    std::printf("compiled %s: %s\n", Mask.c_str(), Att.forwardChoice().str().c_str());
  } else {
    runtime::BackwardRunner Bwd(
        Att.definition(),
        runtime::kernelTarget(Att.definition(), Sig, GpuArch::Sm90a,
                              runtime::Direction::Backward),
        Att.backwardChoice());
    std::printf("compiled %s: %s | %s\n", Mask.c_str(),
                Att.forwardChoice().str().c_str(),
                Att.backwardChoice().str().c_str());
  }
  // The persistent form the generated backend may take for the same blocks
  // (persistentWanted, decided at launch from the shape and the device).
  const auto *Fwd90 = std::get_if<codegen::Sm90Config>(&Att.forwardChoice().Config);
  if (!Fwd90)
    return;
  std::optional<codegen::Sm90Config> P = Fwd90->persistentFor(D, D);
  if (!P)
    return;
  runtime::Signature SigP = Sig;
  SigP.NeedsBackward = false;
  SigP.Config = P->str();
  runtime::Attention AttP(maskedMha(Mask), SigP);
  std::printf("compiled %s: %s\n", Mask.c_str(), AttP.forwardChoice().str().c_str());
}

int main(int Argc, char **Argv) {
  // The flags last, in any order.
  bool CompileOnly = false, FwdOnly = false;
  while (Argc > 1) {
    const std::string Last = Argv[Argc - 1];
    if (Last == "--compile-only")
      CompileOnly = true;
    else if (Last == "--fwd-only")
      FwdOnly = true;
    else
      break;
    --Argc;
  }
  BenchCommand Cmd;
  if (int Rc = parseBenchCommand(
          Argc, Argv, 3,
          "attnc_bench_masks MASK|all|varlen f16|bf16 H D S [S ...] "
          "[--compile-only] [--fwd-only]",
          Cmd, /*NeedsGpu=*/!CompileOnly))
    return Rc;
  const char *VarlenMasks[] = {"none", "causal", "window256", "chunked256"};
  const char *Named[] = {"all",       "varlen",     "document", "prefix_lm",
                         "window256", "chunked256", "causal"};
  if (std::find(std::begin(Named), std::end(Named), Cmd.Name) == std::end(Named)) {
    std::fprintf(stderr,
                 "attnc_bench_masks: unknown mask '%s'; expected all, varlen, "
                 "document, prefix_lm, window256, chunked256 or causal\n",
                 Cmd.Name.c_str());
    return 2;
  }
  // The varlen rows to run (or compile), all without ATTNC_BENCH_VARLEN_MASKS.
  llvm::SmallVector<llvm::StringRef, 4> Only;
  if (const char *Env = std::getenv("ATTNC_BENCH_VARLEN_MASKS")) {
    llvm::StringRef(Env).split(Only, ',', -1, /*KeepEmpty=*/false);
    for (llvm::StringRef Name : Only)
      if (!llvm::is_contained(VarlenMasks, Name)) {
        std::fprintf(stderr,
                     "attnc_bench_masks: ATTNC_BENCH_VARLEN_MASKS names '%s'; expected "
                     "none, causal, window256 or chunked256, comma-separated\n",
                     Name.str().c_str());
        return 2;
      }
  }
  if (std::string Why = varlenSettingsError(); !Why.empty()) {
    std::fprintf(stderr, "attnc_bench_masks: %s\n", Why.c_str());
    return 2;
  }
  auto VarlenRow = [&](const char *Mask) {
    return Only.empty() || llvm::is_contained(Only, llvm::StringRef(Mask));
  };
  if (CompileOnly) {
    for (const char *Mask : {"document", "prefix_lm", "window256", "chunked256", "causal"})
      if ((Cmd.Name == "all" && std::string(Mask) != "causal") || Cmd.Name == Mask)
        compileOne(Mask, Cmd.Dtype, Cmd.Ints[1], FwdOnly);
    if (Cmd.Name == "varlen") {
      for (size_t I = 2; I < Cmd.Ints.size(); ++I)
        printVarlenLengths(Cmd.Ints[I]);
      for (const char *Mask : VarlenMasks)
        if (VarlenRow(Mask))
          compileVarlen(Mask, Cmd.Dtype, Cmd.Ints[1]);
    }
    return 0;
  }
  int H = Cmd.Ints[0], D = Cmd.Ints[1];
  int Rc = 0;
  if (Cmd.Name == "varlen") {
    for (size_t I = 2; I < Cmd.Ints.size(); ++I)
      printVarlenLengths(Cmd.Ints[I]);
    for (const char *Mask : VarlenMasks)
      for (size_t I = 2; I < Cmd.Ints.size(); ++I) {
        if (!VarlenRow(Mask))
          continue;
        try {
          benchVarlen(Mask, Cmd.Dtype, H, D, Cmd.Ints[I]);
        } catch (const std::exception &E) {
          std::printf("attnc varlen %-10s: failed: %s\n", Mask, E.what());
          Rc = 1;
        }
      }
    return Rc;
  }
  for (size_t I = 2; I < Cmd.Ints.size(); ++I)
    for (const char *Mask :
         {"document", "prefix_lm", "window256", "chunked256", "causal"}) {
      if (Cmd.Name != Mask && (Cmd.Name != "all" || std::string(Mask) == "causal"))
        continue;
      try {
        benchOne(Mask, Cmd.Dtype, H, D, Cmd.Ints[I], FwdOnly);
      } catch (const std::exception &E) {
        std::printf("attnc %-11s S%d: failed: %s\n", Mask, Cmd.Ints[I], E.what());
        Rc = 1;
      }
    }
  return Rc;
}
