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
// L2 cannot flatter. GB/s counts the K/V bytes read once per call; each
// row also times a device copy of K (bytes read + written, the same count)
// in this process, each copy alone between two events as the calls are.
//
// Each shape is also timed paged (Attention::runDecode of a plan, NHD
// pages of 16 and of 1 token over the same K/V memory, the pages of each
// sequence in a shuffled order), and an argument graph:B:KV times a 32-layer
// decode step of that shape: the host's time to issue it eagerly (32
// runDecode calls) and as one CUDA graph replay, and the device time of
// each. packed:B:KV:Q times packed (THD) decode against dense decode with
// Q queries for every sequence: forwardVarlen against forward, and
// runDecodeVarlen against runDecode (pages of 16); use an unmasked
// definition (mha_full), since a dense forward's q_idx counts from 0.
// splits:B:KV:S1/S2/... times paged decode (pages of 16, one query) with
// the plan's split forced to each S (0: decodeSplit's own), against the
// contiguous forward: what the split heuristic picks against its
// neighbours. issue:B:KV times the contiguous call alone, back to back and
// the host's issue of it: how much of a call's time is host work.
// ATTNC_BENCH_COMPILE_ONLY=sm_90a compiles the kernels the arguments need
// into the kernel cache without a GPU.
#include "BenchJson.h"
#include "GpuSupport.h"
#include "TestDefinitions.h"
#include "attn/runtime/EventTiming.h"

#include "attn/Error.h"
#include "attn/codegen/Arch.h"
#include "attn/runtime/Paged.h"
#include "attn/runtime/RandomProblem.h"

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

/// The input sets of one decode shape (one query a sequence), rotated so
/// that at least 256 MiB of K/V (at most \p MaxSets sets) keep the 50 MB L2
/// from flattering, with the output and the finals.
struct DecodeSets {
  size_t KvBytes; ///< one of K, V of a set
  int Sets;
  std::vector<std::unique_ptr<DeviceBuffer>> Q, K, V;
  DeviceBuffer Out, Finals;
  runtime::TensorView FV;
  bool HasFinals;
  DecodeSets(const runtime::Attention &Att, int B, int HQ, int HKV, int D, int KV,
             size_t MaxSets, const std::vector<uint16_t> &Block)
      : KvBytes(size_t(B) * KV * HKV * D * 2),
        Sets(int(std::max<size_t>(
            1, std::min<size_t>(MaxSets, ((size_t(256) << 20) + 2 * KvBytes - 1) /
                                             (2 * KvBytes))))),
        Out(size_t(B) * HQ * D * 2),
        Finals(std::max<size_t>(1, Att.finalNames().size()) * B * HQ * 4),
        HasFinals(!Att.finalNames().empty()) {
    for (int S = 0; S < Sets; ++S) {
      Q.push_back(std::make_unique<DeviceBuffer>(size_t(B) * HQ * D * 2));
      K.push_back(std::make_unique<DeviceBuffer>(KvBytes));
      V.push_back(std::make_unique<DeviceBuffer>(KvBytes));
      fillRepeated(*Q.back(), Block);
      fillRepeated(*K.back(), Block);
      fillRepeated(*V.back(), Block);
    }
    FV = runtime::TensorView::contiguous(
        Finals.get(), DType::F32, {int64_t(Att.finalNames().size()), B, HQ, 1});
  }
  const runtime::TensorView *finals() const { return HasFinals ? &FV : nullptr; }
};

/// One dense decode call (one query a sequence) of set \p S.
void forwardSet(runtime::Attention &Att, DecodeSets &Ds, DType ET, int S, int B, int HQ,
                int HKV, int D, int KV, const runtime::InputMap &Inputs) {
  using runtime::TensorView;
  Att.forward(TensorView::contiguous(Ds.Q[S]->get(), ET, {B, 1, HQ, D}),
              TensorView::contiguous(Ds.K[S]->get(), ET, {B, KV, HKV, D}),
              TensorView::contiguous(Ds.V[S]->get(), ET, {B, KV, HKV, D}),
              TensorView::contiguous(Ds.Out.get(), ET, {B, 1, HQ, D}), Ds.finals(),
              Inputs);
}

/// One shape's K/V sets seen as NHD caches of pages ([B·KV/page, page,
/// HKV, D] over the same memory), the block table a random permutation of
/// all pages: every page is read once a call, in no sequential order.
struct Paged {
  runtime::Attention &Att;
  runtime::DecodePlan Plan;
  std::vector<std::unique_ptr<DeviceBuffer>> &K, &V;
  runtime::ShuffledPages Pages;
  std::unique_ptr<DeviceBuffer> Work;
  DType ET;
  int B, HQ, HKV, D, KV;

  Paged(runtime::Attention &A, DType Dt, int B, int HQ, int HKV, int D, int KV,
        int PageSize, int, std::vector<std::unique_ptr<DeviceBuffer>> &K,
        std::vector<std::unique_ptr<DeviceBuffer>> &V)
      : Att(A), K(K), V(V), Pages(B, KV, PageSize), ET(Dt), B(B), HQ(HQ), HKV(HKV),
        D(D), KV(KV) {
    Plan = A.planDecode(runtime::DecodeBounds{B, HQ, HKV, 1, KV, PageSize});
    Work = std::make_unique<DeviceBuffer>(std::max<size_t>(16, Plan.WorkspaceBytes));
  }
  runtime::PagedKV view(int S) const {
    return Pages.view(runtime::TensorView::contiguous(K[S]->get(), ET, {B, KV, HKV, D}),
                      runtime::TensorView::contiguous(V[S]->get(), ET, {B, KV, HKV, D}));
  }
  void run(int S, const std::vector<std::unique_ptr<DeviceBuffer>> &Q,
           DeviceBuffer &Out, const runtime::TensorView *F,
           const runtime::InputMap &Inputs, CUstream Stream = nullptr) {
    Att.runDecode(Plan,
                  runtime::TensorView::contiguous(Q[S]->get(), ET, {B, 1, HQ, D}),
                  view(S),
                  runtime::TensorView::contiguous(Out.get(), ET, {B, 1, HQ, D}), F,
                  Work->get(), Work->size(), Inputs, Stream);
  }
};

/// A 32-layer decode step of one shape (pages of 16, one K/V cache per
/// layer would not change the host's work, so the layers share one):
/// host time to issue it eagerly and as a graph, device time of each.
void graphStep(runtime::Attention &Att, const BenchCommand &Cmd,
               const runtime::InputMap &Inputs, int HQ, int HKV, int D, int B,
               int KV, const std::vector<uint16_t> &Block) {
  constexpr int Layers = 32, Steps = 50;
  const size_t KvBytes = size_t(B) * KV * HKV * D * 2;
  std::vector<std::unique_ptr<DeviceBuffer>> Q, K, V;
  Q.push_back(std::make_unique<DeviceBuffer>(size_t(B) * HQ * D * 2));
  K.push_back(std::make_unique<DeviceBuffer>(KvBytes));
  V.push_back(std::make_unique<DeviceBuffer>(KvBytes));
  fillRepeated(*Q[0], Block);
  fillRepeated(*K[0], Block);
  fillRepeated(*V[0], Block);
  DeviceBuffer Out(size_t(B) * HQ * D * 2), Finals(size_t(B) * HQ * 4 * 4);
  const size_t NF = Att.finalNames().size();
  runtime::TensorView FV = runtime::TensorView::contiguous(
      Finals.get(), DType::F32, {int64_t(NF), B, HQ, 1});
  Paged P(Att, Cmd.Dtype, B, HQ, HKV, D, KV, 16, 1, K, V);
  auto &Drv = runtime::CudaDriver::get();
  CUstream S = nullptr;
  Drv.check(Drv.cuStreamCreate(&S, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  auto Step = [&] {
    for (int L = 0; L < Layers; ++L)
      P.run(0, Q, Out, NF ? &FV : nullptr, Inputs, S);
  };
  CUgraph G = nullptr;
  CUgraphExec Exec = nullptr;
  Drv.check(Drv.cuStreamBeginCapture(S, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
            "cuStreamBeginCapture");
  Step();
  Drv.check(Drv.cuStreamEndCapture(S, &G), "cuStreamEndCapture");
  Drv.check(Drv.cuGraphInstantiate(&Exec, G, 0), "cuGraphInstantiate");
  CUevent E0, E1;
  Drv.check(Drv.cuEventCreate(&E0, 0), "cuEventCreate");
  Drv.check(Drv.cuEventCreate(&E1, 0), "cuEventCreate");
  // Median host and device microseconds of a step issued by \p Issue.
  auto Time = [&](auto &&Issue, double &HostUs, double &DevUs) {
    std::vector<double> H, Dv;
    for (int I = 0; I < Steps + 5; ++I) {
      Drv.check(Drv.cuStreamSynchronize(S), "sync");
      Drv.check(Drv.cuEventRecord(E0, S), "cuEventRecord");
      runtime::WallTimer Issuing;
      Issue();
      const double IssueUs = Issuing.seconds() * 1e6;
      Drv.check(Drv.cuEventRecord(E1, S), "cuEventRecord");
      Drv.check(Drv.cuEventSynchronize(E1), "cuEventSynchronize");
      float Ms = 0;
      Drv.check(Drv.cuEventElapsedTime(&Ms, E0, E1), "cuEventElapsedTime");
      if (I < 5)
        continue;
      H.push_back(IssueUs);
      Dv.push_back(Ms * 1e3);
    }
    std::sort(H.begin(), H.end());
    std::sort(Dv.begin(), Dv.end());
    HostUs = H[H.size() / 2];
    DevUs = Dv[Dv.size() / 2];
  };
  double EagerHost, EagerDev, GraphHost, GraphDev;
  Time(Step, EagerHost, EagerDev);
  Time([&] { Drv.check(Drv.cuGraphLaunch(Exec, S), "cuGraphLaunch"); }, GraphHost,
       GraphDev);
  std::printf("attnc %s %s hq%d hkv%d d%d B%d KV%d graph of %d layers (paged16, "
              "splits %d): host per layer eager %.2f us, graph %.3f us; device "
              "per step eager %.1f us, graph %.1f us\n",
              Cmd.Name.c_str(), std::string(dtypeName(Cmd.Dtype)).c_str(), HQ, HKV, D,
              B, KV, Layers, P.Plan.Splits, EagerHost / Layers,
              GraphHost / Layers, EagerDev, GraphDev);
  std::fflush(stdout);
  Drv.cuGraphExecDestroy(Exec);
  Drv.cuGraphDestroy(G);
  Drv.cuEventDestroy(E0);
  Drv.cuEventDestroy(E1);
  Drv.cuStreamDestroy(S);
}

/// Packed (THD) decode against dense decode at equal counts: \p Q queries
/// for each of \p B sequences of \p KV keys, over the same K/V memory
/// ([B, KV, HKV, D] dense is [B·KV, HKV, D] packed): forward (the dense
/// Attention \p Att) against forwardVarlen of a THD signature, and paged
/// (pages of 16) runDecode against runDecodeVarlen. Two rounds, each call
/// in turn, medians of CUDA events.
void packedVsDense(runtime::Attention &Att, const BenchCommand &Cmd,
                   const runtime::InputMap &Inputs, int HQ, int HKV, int D, int B,
                   int KV, int Q, const std::vector<uint16_t> &Block) {
  runtime::Signature Sig;
  Sig.Dtype = Cmd.Dtype;
  Sig.HeadDim = Sig.HeadDimV = D;
  Sig.TensorLayout = Layout::THD;
  Sig.Backend = "generated";
  // Named: what the short-query rule picks for these calls anyway, and no
  // forward skeleton's kernel to compile.
  Sig.Skeleton = "decode_sm80";
  runtime::Attention Packed(makeDefinition(Cmd.Name), Sig);
  const DType ET = Cmd.Dtype;
  const size_t KvBytes = size_t(B) * KV * HKV * D * 2;
  const int64_t Tq = int64_t(B) * Q, Tkv = int64_t(B) * KV;
  const size_t NF = Att.finalNames().size();
  std::vector<std::unique_ptr<DeviceBuffer>> QB, K, V;
  QB.push_back(std::make_unique<DeviceBuffer>(size_t(Tq) * HQ * D * 2));
  K.push_back(std::make_unique<DeviceBuffer>(KvBytes));
  V.push_back(std::make_unique<DeviceBuffer>(KvBytes));
  fillRepeated(*QB[0], Block);
  fillRepeated(*K[0], Block);
  fillRepeated(*V[0], Block);
  DeviceBuffer Out(size_t(Tq) * HQ * D * 2), Finals(std::max<size_t>(1, NF) * Tq * HQ * 4),
      CuQ(size_t(B + 1) * 4), CuKv(size_t(B + 1) * 4);
  std::vector<int32_t> Cq(B + 1), Ck(B + 1);
  for (int b = 0; b <= B; ++b) {
    Cq[b] = b * Q;
    Ck[b] = b * KV;
  }
  CuQ.upload(Cq.data(), CuQ.size());
  CuKv.upload(Ck.data(), CuKv.size());
  using runtime::TensorView;
  TensorView FDense = TensorView::contiguous(Finals.get(), DType::F32,
                                             {int64_t(NF), B, HQ, Q});
  TensorView FPacked = TensorView::contiguous(Finals.get(), DType::F32,
                                              {int64_t(NF), HQ, Tq});
  TensorView QP = TensorView::contiguous(QB[0]->get(), ET, {Tq, HQ, D});
  TensorView OP = TensorView::contiguous(Out.get(), ET, {Tq, HQ, D});
  TensorView CuQV = TensorView::contiguous(CuQ.get(), DType::I32, {B + 1});
  runtime::VarlenBatch VB;
  VB.CuSeqlensQ = CuQV;
  VB.CuSeqlensKv = TensorView::contiguous(CuKv.get(), DType::I32, {B + 1});
  VB.MaxSeqlenQ = Q;
  VB.MaxSeqlenKv = KV;
  Paged P(Att, Cmd.Dtype, B, HQ, HKV, D, KV, 16, 1, K, V);
  runtime::DecodeBounds PB{B, HQ, HKV, Q, KV, 16};
  runtime::DecodePlan DensePlan = Att.planDecode(PB);
  PB.Packed = true;
  runtime::DecodePlan PackedPlan = Att.planDecode(PB);
  DeviceBuffer Work(std::max<size_t>({16, DensePlan.WorkspaceBytes, PackedPlan.WorkspaceBytes}));
  const TensorView *FD = NF ? &FDense : nullptr, *FP = NF ? &FPacked : nullptr;
  auto Dense = [&](int) {
    Att.forward(TensorView::contiguous(QB[0]->get(), ET, {B, Q, HQ, D}),
                TensorView::contiguous(K[0]->get(), ET, {B, KV, HKV, D}),
                TensorView::contiguous(V[0]->get(), ET, {B, KV, HKV, D}),
                TensorView::contiguous(Out.get(), ET, {B, Q, HQ, D}), FD, Inputs);
  };
  auto PackedFwd = [&](int) {
    Packed.forwardVarlen(QP, TensorView::contiguous(K[0]->get(), ET, {Tkv, HKV, D}),
                         TensorView::contiguous(V[0]->get(), ET, {Tkv, HKV, D}), OP, FP,
                         VB, Inputs);
  };
  auto PagedDense = [&](int) {
    Att.runDecode(DensePlan, TensorView::contiguous(QB[0]->get(), ET, {B, Q, HQ, D}),
                  P.view(0), TensorView::contiguous(Out.get(), ET, {B, Q, HQ, D}), FD,
                  Work.get(), Work.size(), Inputs);
  };
  auto PagedPacked = [&](int) {
    Att.runDecodeVarlen(PackedPlan, QP, CuQV, P.view(0), OP, FP, Work.get(), Work.size(),
                        Inputs);
  };
  auto Gbs = [&](double Ms) { return 2.0 * KvBytes / (Ms * 1e-3) / 1e9; };
  for (int Round = 0; Round < 2; ++Round) {
    double Dm = runtime::medianEventMs(Dense, 5, 30);
    double Pm = runtime::medianEventMs(PackedFwd, 5, 30);
    double PDm = runtime::medianEventMs(PagedDense, 5, 30);
    double PPm = runtime::medianEventMs(PagedPacked, 5, 30);
    std::printf("attnc %s %s hq%d hkv%d d%d B%d KV%d q%d round %d: contiguous dense "
                "%.1f us (%.0f GB/s), packed %.1f us (%.0f GB/s, %.3fx dense); paged16 "
                "dense %.1f us (%.0f GB/s), packed %.1f us (%.0f GB/s, %.3fx dense; "
                "splits %d)\n",
                Cmd.Name.c_str(), std::string(dtypeName(Cmd.Dtype)).c_str(), HQ, HKV, D, B,
                KV, Q, Round, Dm * 1e3, Gbs(Dm), Pm * 1e3, Gbs(Pm), Dm / Pm, PDm * 1e3,
                Gbs(PDm), PPm * 1e3, Gbs(PPm), PDm / PPm, PackedPlan.Splits);
    std::fflush(stdout);
  }
}

/// \p P with its split forced to \p Splits CTAs over the keys (0: as
/// planned): the key blocks shared out evenly, the workspace resized as
/// makeDecodePlan sizes it.
runtime::DecodePlan forcedSplit(runtime::DecodePlan P, int Splits, int HeadDimV) {
  if (Splits <= 0)
    return P;
  const int64_t Blocks = (P.Bounds.MaxSeqlenKv + P.BlockN - 1) / P.BlockN;
  P.BlocksPerSplit = int((Blocks + Splits - 1) / Splits);
  P.Splits = int((Blocks + P.BlocksPerSplit - 1) / P.BlocksPerSplit);
  const size_t Rows = size_t(P.Splits) * P.Bounds.Batch * P.Bounds.Heads * P.Bounds.QueriesPerSeq;
  P.WorkspaceBytes =
      P.Splits > 1 ? 4 * Rows * size_t(HeadDimV) + 4 * Rows * runtime::DecodeStateFloats : 0;
  return P;
}

/// splits:B:KV:S1/S2/...: paged decode (pages of 16, one query a
/// sequence) of the shape with the split forced to each S, and the
/// contiguous forward (decodeSplit's split), each in turn for three
/// rounds; K/V over sets of at least 256 MiB as the plain rows.
void splitSweep(runtime::Attention &Att, const BenchCommand &Cmd,
                const runtime::InputMap &Inputs, int HQ, int HKV, int D, int B, int KV,
                const std::vector<int> &Forced, const std::vector<uint16_t> &Block) {
  const DType ET = Cmd.Dtype;
  DecodeSets Ds(Att, B, HQ, HKV, D, KV, 64, Block);
  const int Sets = Ds.Sets;
  Paged P(Att, ET, B, HQ, HKV, D, KV, 16, Sets, Ds.K, Ds.V);
  std::vector<runtime::DecodePlan> Plans;
  size_t Bytes = 16;
  for (int S : Forced) {
    Plans.push_back(forcedSplit(P.Plan, S, D));
    Bytes = std::max(Bytes, Plans.back().WorkspaceBytes);
  }
  DeviceBuffer Work(Bytes);
  auto Gbs = [&](double Ms) { return 2.0 * Ds.KvBytes / (Ms * 1e-3) / 1e9; };
  using runtime::TensorView;
  for (int Round = 0; Round < 3; ++Round) {
    double Cm = runtime::medianEventMs(
        [&](int It) { forwardSet(Att, Ds, ET, It % Sets, B, HQ, HKV, D, KV, Inputs); },
        5, 30);
    std::string Line = fmt::format("attnc {} {} hq{} hkv{} d{} B{} KV{} splits round {}: "
                                   "contiguous {:.1f} us ({:.0f} GB/s, heuristic {})",
                                   Cmd.Name, dtypeName(ET), HQ, HKV, D, B, KV, Round,
                                   Cm * 1e3, Gbs(Cm), P.Plan.Splits);
    for (const runtime::DecodePlan &Plan : Plans) {
      double Ms = runtime::medianEventMs(
          [&](int It) {
            int S = It % Sets;
            Att.runDecode(Plan, TensorView::contiguous(Ds.Q[S]->get(), ET, {B, 1, HQ, D}),
                          P.view(S), TensorView::contiguous(Ds.Out.get(), ET, {B, 1, HQ, D}), Ds.finals(),
                          Work.get(), Work.size(), Inputs);
          },
          5, 30);
      Line += fmt::format("; paged16 s{}x{} {:.1f} us ({:.0f})", Plan.Splits,
                          Plan.BlocksPerSplit, Ms * 1e3, Gbs(Ms));
    }
    std::printf("%s\n", Line.c_str());
    std::fflush(stdout);
  }
}

/// Where a call's time goes: the contiguous forward timed alone between
/// two events (as the B:KV rows are), back to back (events around 20
/// calls; the host's issue overlaps the device's work), and the host's wall
/// time to issue one call. Alone minus back to back is the host time the
/// device waits for before each isolated call's kernel starts.
void issueSplit(runtime::Attention &Att, const BenchCommand &Cmd,
                const runtime::InputMap &Inputs, int HQ, int HKV, int D, int B,
                int KV, const std::vector<uint16_t> &Block) {
  constexpr int Batch = 20;
  DType ET = Cmd.Dtype;
  DecodeSets Ds(Att, B, HQ, HKV, D, KV, 256, Block);
  auto Call = [&](int It) { forwardSet(Att, Ds, ET, It % Ds.Sets, B, HQ, HKV, D, KV, Inputs); };
  auto &Drv = runtime::CudaDriver::get();
  for (int Round = 0; Round < 2; ++Round) {
    double Alone = runtime::medianEventMs(Call, 5, 30);
    double Streamed = runtime::medianEventMs(
                          [&](int It) {
                            for (int I = 0; I < Batch; ++I)
                              Call(It * Batch + I);
                          },
                          1, 7) /
                      Batch;
    std::vector<double> Host;
    for (int It = 0; It < 30; ++It) {
      Drv.check(Drv.cuCtxSynchronize(), "sync");
      runtime::WallTimer T;
      Call(It);
      Host.push_back(T.seconds() * 1e6);
    }
    Drv.check(Drv.cuCtxSynchronize(), "sync");
    std::sort(Host.begin(), Host.end());
    std::printf("attnc %s %s hq%d hkv%d d%d B%d KV%d issue round %d: alone %.1f us, "
                "back to back %.1f us, host issue %.1f us a call\n",
                Cmd.Name.c_str(), std::string(dtypeName(ET)).c_str(), HQ, HKV, D, B, KV,
                Round, Alone * 1e3, Streamed * 1e3, Host[Host.size() / 2]);
    std::fflush(stdout);
  }
}

/// ATTNC_BENCH_DECODE_CONFIG=dec.m..n..w..s..: every call of the command
/// runs that decode_sm80 configuration instead of the default (a
/// measurement of the configurations against each other).
void applyDecodeConfig(runtime::Signature &Sig) {
  if (const char *C = std::getenv("ATTNC_BENCH_DECODE_CONFIG"); C && *C) {
    Sig.Skeleton = "decode_sm80";
    Sig.Config = C;
  }
}

/// ATTNC_BENCH_COMPILE_ONLY=ARCH: the kernels of the command's shapes
/// (the definition's forward, its short-query rule's decode kernel and
/// paged decode; with a packed argument, the packed signature's decode
/// kernel) compiled into the kernel cache for ARCH without a GPU.
int compileOnly(const char *ArchName, const BenchCommand &Cmd, int D, bool Packed) {
  std::optional<GpuArch> Arch = archFromName(ArchName);
  if (!Arch) {
    std::fprintf(stderr, "ATTNC_BENCH_COMPILE_ONLY: unknown arch %s\n", ArchName);
    return 2;
  }
  runtime::Signature Sig;
  Sig.Dtype = Cmd.Dtype;
  Sig.HeadDim = Sig.HeadDimV = D;
  Sig.Backend = "generated";
  Sig.Arch = Arch;
  applyDecodeConfig(Sig);
  runtime::PrecompileSet What;
  What.Decode = true;
  runtime::Attention Att(makeDefinition(Cmd.Name), Sig);
  size_t N = Att.precompile(What).size();
  if (Packed) {
    Sig.TensorLayout = Layout::THD;
    Sig.Skeleton = "decode_sm80";
    runtime::Attention PackedAtt(makeDefinition(Cmd.Name), Sig);
    N += PackedAtt.precompile(runtime::PrecompileSet{}).size();
  }
  std::printf("attnc_bench_decode: %zu kernels for %s\n", N, ArchName);
  return 0;
}

} // namespace

int main(int Argc, char **Argv) {
  BenchCommand Cmd;
  const char *CompileArch = std::getenv("ATTNC_BENCH_COMPILE_ONLY");
  if (int Rc = parseBenchCommand(
          Argc, Argv, 3, "attnc_bench_decode NAME f16|bf16 HQ HKV D B:KV...",
          Cmd, /*NeedsGpu=*/CompileArch == nullptr))
    return Rc;
  try {
    const int HQ = Cmd.Ints[0], HKV = Cmd.Ints[1], D = Cmd.Ints[2];
    if (CompileArch) {
      bool Packed = false;
      for (int I = 6; I < Argc; ++I)
        Packed = Packed || std::string(Argv[I]).rfind("packed:", 0) == 0;
      return compileOnly(CompileArch, Cmd, D, Packed);
    }
    runtime::Signature Sig;
    Sig.Dtype = Cmd.Dtype;
    Sig.HeadDim = Sig.HeadDimV = D;
    Sig.Backend = "generated";
    applyDecodeConfig(Sig);
    runtime::Attention Att(makeDefinition(Cmd.Name), Sig);
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
    for (int I = 6; I < Argc; ++I) { // after NAME DTYPE HQ HKV D
      int B = 0, KV = 0;
      int NQ = 0;
      if (std::sscanf(Argv[I], "packed:%d:%d:%d", &B, &KV, &NQ) == 3) {
        packedVsDense(Att, Cmd, Inputs, HQ, HKV, D, B, KV, NQ, Block);
        continue;
      }
      char List[256] = {0};
      if (std::sscanf(Argv[I], "splits:%d:%d:%255s", &B, &KV, List) == 3) {
        std::vector<int> Forced;
        for (char *Tok = std::strtok(List, "/"); Tok; Tok = std::strtok(nullptr, "/"))
          Forced.push_back(std::atoi(Tok));
        splitSweep(Att, Cmd, Inputs, HQ, HKV, D, B, KV, Forced, Block);
        continue;
      }
      if (std::sscanf(Argv[I], "issue:%d:%d", &B, &KV) == 2) {
        issueSplit(Att, Cmd, Inputs, HQ, HKV, D, B, KV, Block);
        continue;
      }
      if (std::sscanf(Argv[I], "graph:%d:%d", &B, &KV) == 2) {
        graphStep(Att, Cmd, Inputs, HQ, HKV, D, B, KV, Block);
        continue;
      }
      if (std::sscanf(Argv[I], "%d:%d", &B, &KV) != 2) {
        std::fprintf(stderr, "attnc_bench_decode: '%s' is not B:KV\n", Argv[I]);
        return 2;
      }
      DecodeSets Ds(Att, B, HQ, HKV, D, KV, 256, Block);
      const size_t KvBytes = Ds.KvBytes;
      const int Sets = Ds.Sets;
      auto Run = [&](int It) {
        forwardSet(Att, Ds, Cmd.Dtype, It % Sets, B, HQ, HKV, D, KV, Inputs);
      };
      double Ms = runtime::medianEventMs(Run, 5, 30);
      double Gbs = 2.0 * KvBytes / (Ms * 1e-3) / 1e9;
      // The copy reference in this process, timed as the call is: K of a
      // set into one buffer, the sets rotated, read + write bytes counted
      // (the same bytes as the call's K/V reads).
      DeviceBuffer CopyTo(KvBytes);
      auto &Drv = runtime::CudaDriver::get();
      double CopyMs = runtime::medianEventMs(
          [&](int It) {
            Drv.check(Drv.cuMemcpyDtoDAsync(
                          reinterpret_cast<CUdeviceptr>(CopyTo.get()),
                          reinterpret_cast<CUdeviceptr>(Ds.K[It % Sets]->get()), KvBytes,
                          nullptr),
                      "cuMemcpyDtoDAsync");
          },
          5, 30);
      double CopyGbs = 2.0 * KvBytes / (CopyMs * 1e-3) / 1e9;
      std::printf("attnc %s %s hq%d hkv%d d%d B%d KV%d: %.1f us, %.0f GB/s of "
                  "K/V; device copy %.0f GB/s, %.2f of it\n",
                  Cmd.Name.c_str(), std::string(dtypeName(Cmd.Dtype)).c_str(), HQ, HKV,
                  D, B, KV, Ms * 1e3, Gbs, CopyGbs, Gbs / CopyGbs);
      std::fflush(stdout);
      // One query per sequence; S is the keys (KV), H the query heads.
      bench::BenchRow Row{"decode", "attnc", Cmd.Name,
                          std::string(dtypeName(Cmd.Dtype)), "contiguous",
                          Att.callChoiceFor({B, HQ, HKV, 1, KV}).str(), B, HQ, KV, D, D, Ms, 0};
      Row.Gbps = Gbs;
      bench::recordBenchRow(Row);
      for (int PageSize : {16, 1}) {
        if (KV % PageSize != 0)
          continue;
        Paged P(Att, Cmd.Dtype, B, HQ, HKV, D, KV, PageSize, Sets, Ds.K, Ds.V);
        double PMs = runtime::medianEventMs(
            [&](int It) { P.run(It % Sets, Ds.Q, Ds.Out, Ds.finals(), Inputs); },
            5, 30);
        std::printf("attnc %s %s hq%d hkv%d d%d B%d KV%d paged%d: %.1f us, %.0f "
                    "GB/s of K/V, %.2fx contiguous (splits %d)\n",
                    Cmd.Name.c_str(), std::string(dtypeName(Cmd.Dtype)).c_str(), HQ,
                    HKV, D, B, KV, PageSize, PMs * 1e3,
                    2.0 * KvBytes / (PMs * 1e-3) / 1e9, Ms / PMs, P.Plan.Splits);
        std::fflush(stdout);
        bench::BenchRow PRow{"decode", "attnc", Cmd.Name,
                             std::string(dtypeName(Cmd.Dtype)),
                             fmt::format("paged{}", PageSize),
                             Att.callChoiceFor({B, HQ, HKV, 1, KV}).str(), B, HQ, KV, D, D, PMs,
                             0};
        PRow.Gbps = 2.0 * KvBytes / (PMs * 1e-3) / 1e9;
        bench::recordBenchRow(PRow);
      }
    }
  } catch (const Error &E) {
    std::fprintf(stderr, "attnc_bench_decode: %s\n", E.what());
    return 1;
  }
  return 0;
}
