// Paged decode on a GPU against the double-precision reference: caches
// filled by appendPaged (int32 and int64 slot mappings, a padding slot),
// page sizes 1, 4, 8, 16, 32, 64 and 256 (run it again with
// ATTNC_PAGED_DECODE_GATHER=1 for the per-copy addressing), NHD and HND,
// block tables and CSR, ragged lengths with 0 and 1, GQA ratios 1, 4 and
// 8, 1 and 4 queries (q_idx aligned to each sequence's end), sum,
// log-sum-exp and no merge; a plan captured once in a CUDA graph and
// replayed with new lengths, page tables and q; the device checks (a bad
// page index or length gives NaN rows to that sequence only); and the
// public merge of random splits of the keys (log-sum-exp, sum and a
// definition's combine). Exits 77 without a GPU.
#include "PagedSupport.h"

#include "attn/Error.h"
#include "attn/codegen/Arch.h"
#include "attn/reference/Attention.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/Paged.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <numeric>

using namespace attn;
using namespace attn::gputest;
using runtime::PageLayout;

namespace {

struct Case {
  std::string Def;
  DType Dt;
  int H, Hkv, Sq, PageSize;
  PageLayout Layout;
  bool Csr, Slots64;
  std::vector<int> Lens;
};

/// Every token appended by a slot mapping (and a padding slot), then one
/// decodePaged call.
bool runCase(const Case &C, uint64_t Seed) {
  runtime::Signature Sig;
  Sig.Dtype = C.Dt;
  Sig.HeadDim = Sig.HeadDimV = 128;
  Sig.Backend = "generated";
  runtime::Attention A(pagedDefinition(C.Def), Sig);
  std::mt19937_64 Rng(Seed);
  PagedHost P = makeBatch(Rng, C.Dt, C.Hkv, C.PageSize, C.Layout, C.Lens);
  const int D = P.D, B = P.B;
  DType ET = elemOf(C.Dt);
  // Caches start as junk, not zeros.
  size_t CacheElems = size_t(P.NumPages) * C.PageSize * C.Hkv * D;
  std::vector<uint16_t> Junk(CacheElems);
  std::normal_distribution<double> N(0.0, 1.0);
  for (uint16_t &X : Junk)
    X = toBits(C.Dt, 4 * N(Rng));
  DeviceBuffer KC(CacheElems * 2), VC(CacheElems * 2);
  KC.upload(Junk.data(), KC.size());
  VC.upload(Junk.data(), VC.size());
  // New tokens [T, Hkv, D]: every sequence's, then a padding token.
  std::vector<uint16_t> NK, NV;
  std::vector<int64_t> Slots;
  for (int b = 0; b < B; ++b) {
    NK.insert(NK.end(), P.K[b].begin(), P.K[b].end());
    NV.insert(NV.end(), P.V[b].begin(), P.V[b].end());
    for (int t = 0; t < P.Lens[b]; ++t)
      Slots.push_back(int64_t(P.pageOf(b, t / C.PageSize)) * C.PageSize +
                      t % C.PageSize);
  }
  NK.insert(NK.end(), size_t(C.Hkv) * D, toBits(C.Dt, 99.0));
  NV.insert(NV.end(), size_t(C.Hkv) * D, toBits(C.Dt, 99.0));
  Slots.push_back(-1);
  int64_t T = int64_t(Slots.size());
  DeviceBuffer DNK(NK.size() * 2), DNV(NV.size() * 2), DS(Slots.size() * 8);
  DNK.upload(NK.data(), DNK.size());
  DNV.upload(NV.data(), DNV.size());
  runtime::TensorView SlotView;
  if (C.Slots64) {
    DS.upload(Slots.data(), Slots.size() * 8);
    SlotView = runtime::TensorView::contiguous(DS.get(), DType::I64, {T});
  } else {
    std::vector<int32_t> S32(Slots.begin(), Slots.end());
    DS.upload(S32.data(), S32.size() * 4);
    SlotView = runtime::TensorView::contiguous(DS.get(), DType::I32, {T});
  }
  DeviceIndex Idx(P);
  int64_t MaxLen = *std::max_element(C.Lens.begin(), C.Lens.end());
  runtime::PagedKV KV = Idx.view(P, C.Csr, KC.get(), VC.get(), ET, MaxLen);
  A.appendPaged(runtime::TensorView::contiguous(DNK.get(), ET, {T, C.Hkv, D}),
                runtime::TensorView::contiguous(DNV.get(), ET, {T, C.Hkv, D}),
                KV, SlotView);

  std::vector<uint16_t> QBits(size_t(B) * C.Sq * C.H * D);
  for (uint16_t &X : QBits)
    X = toBits(C.Dt, N(Rng));
  DeviceBuffer DQ(QBits.size() * 2), DO(QBits.size() * 2);
  DQ.upload(QBits.data(), DQ.size());
  const ir::Graph &G = *A.definition().Graph;
  size_t NF = G.decls().FinalRowscales.size();
  DeviceBuffer DF(std::max<size_t>(1, NF) * B * C.H * C.Sq * 4);
  runtime::TensorView Finals = runtime::TensorView::contiguous(
      DF.get(), DType::F32, {int64_t(NF), B, C.H, C.Sq});
  runtime::InputMap Inputs;
  reference::InputValues RefInputs;
  std::vector<std::unique_ptr<DeviceBuffer>> Bufs;
  makeInputs(G, C.H, Inputs, RefInputs, Bufs);
  DO.poison();
  DF.poison();
  A.decodePaged(runtime::TensorView::contiguous(DQ.get(), ET, {B, C.Sq, C.H, D}), KV,
                runtime::TensorView::contiguous(DO.get(), ET, {B, C.Sq, C.H, D}),
                NF ? &Finals : nullptr, Inputs);
  auto &Drv = runtime::CudaDriver::get();
  Drv.check(Drv.cuCtxSynchronize(), "kernel execution");
  std::vector<uint16_t> OBits(QBits.size());
  std::vector<float> FVals(NF * B * C.H * C.Sq);
  DO.download(OBits.data(), DO.size());
  if (NF)
    DF.download(FVals.data(), FVals.size() * 4);
  runtime::DecodeBounds Bd{B, C.H, C.Hkv, C.Sq, MaxLen, C.PageSize};
  runtime::DecodePlan Plan = A.planDecode(Bd);
  std::string What = fmt::format(
      "{} {} H{}/{} sq{} page{} {} {} slots{} B{} maxkv{} splits {}", C.Def,
      std::string(dtypeName(C.Dt)), C.H, C.Hkv, C.Sq, C.PageSize,
      runtime::pageLayoutName(C.Layout), C.Csr ? "csr" : "table",
      C.Slots64 ? 64 : 32, B, MaxLen, Plan.Splits);
  return check(What.c_str(), A, C.Dt, P, C.H, C.Sq, QBits, RefInputs, OBits, FVals);
}

/// A plan captured once in a CUDA graph, replayed three times with new
/// lengths, page tables, caches and q at the same addresses.
bool graphReplay(const std::string &Def, bool Csr, uint64_t Seed) {
  const DType Dt = DType::F16;
  const int H = 8, Hkv = 2, Sq = 1, PageSize = 16, B = 4, MaxLen = 4096, D = 128;
  runtime::Signature Sig;
  Sig.Dtype = Dt;
  Sig.HeadDim = Sig.HeadDimV = D;
  runtime::Attention A(pagedDefinition(Def), Sig);
  runtime::DecodePlan Plan =
      A.planDecode(runtime::DecodeBounds{B, H, Hkv, Sq, MaxLen, PageSize});
  std::mt19937_64 Rng(Seed);
  const int NumPages = B * MaxLen / PageSize + 3;
  const int MaxPages = MaxLen / PageSize;
  size_t CacheElems = size_t(NumPages) * PageSize * Hkv * D;
  DeviceBuffer KC(CacheElems * 2), VC(CacheElems * 2), DQ(size_t(B) * H * D * 2),
      DO(size_t(B) * H * D * 2), DF(size_t(B) * H * 4),
      Work(std::max<size_t>(16, Plan.WorkspaceBytes));
  // Index buffers of the bound's size; each replay uploads new contents.
  DeviceBuffer Table(size_t(B) * MaxPages * 4), Lens(B * 4), Indptr((B + 1) * 4),
      Indices(size_t(B) * MaxPages * 4), Last(B * 4);
  using runtime::TensorView;
  DType ET = elemOf(Dt), I32 = DType::I32;
  runtime::PagedKV KV;
  std::vector<int64_t> CacheShape{NumPages, PageSize, Hkv, D};
  KV.KCache = TensorView::contiguous(KC.get(), ET, CacheShape);
  KV.VCache = TensorView::contiguous(VC.get(), ET, CacheShape);
  KV.MaxSeqlenKv = MaxLen;
  if (Csr) {
    KV.Indptr = TensorView::contiguous(Indptr.get(), I32, {B + 1});
    KV.Indices = TensorView::contiguous(Indices.get(), I32, {int64_t(B) * MaxPages});
    KV.LastPageLen = TensorView::contiguous(Last.get(), I32, {B});
  } else {
    KV.BlockTable = TensorView::contiguous(Table.get(), I32, {B, MaxPages});
    KV.SeqLens = TensorView::contiguous(Lens.get(), I32, {B});
  }
  TensorView Q = TensorView::contiguous(DQ.get(), ET, {B, Sq, H, D});
  TensorView O = TensorView::contiguous(DO.get(), ET, {B, Sq, H, D});
  const ir::Graph &G = *A.definition().Graph;
  size_t NF = G.decls().FinalRowscales.size();
  TensorView F = TensorView::contiguous(DF.get(), DType::F32,
                                        {int64_t(NF), B, H, Sq});
  runtime::InputMap Inputs;
  reference::InputValues RefInputs;
  std::vector<std::unique_ptr<DeviceBuffer>> Bufs;
  makeInputs(G, H, Inputs, RefInputs, Bufs);

  auto &Drv = runtime::CudaDriver::get();
  CUstream S = nullptr;
  Drv.check(Drv.cuStreamCreate(&S, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  CUgraph Graph = nullptr;
  CUgraphExec Exec = nullptr;
  Drv.check(Drv.cuStreamBeginCapture(S, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
            "cuStreamBeginCapture");
  A.runDecode(Plan, Q, KV, O, NF ? &F : nullptr, Work.get(), Work.size(), Inputs, S);
  Drv.check(Drv.cuStreamEndCapture(S, &Graph), "cuStreamEndCapture");
  Drv.check(Drv.cuGraphInstantiate(&Exec, Graph, 0), "cuGraphInstantiate");

  bool Pass = true;
  const std::vector<std::vector<int>> Rounds = {
      {4096, 1, 0, 777}, {33, 4000, 2048, 16}, {0, 0, 4095, 1}};
  for (size_t R = 0; R < Rounds.size(); ++R) {
    PagedHost P = refillGraphBatch(Rng, Dt, Hkv, PageSize, D, NumPages, MaxPages,
                                   Rounds[R], {KC, VC, Table, Lens, Indptr, Indices, Last});
    std::normal_distribution<double> N(0.0, 1.0);
    std::vector<uint16_t> QBits(size_t(B) * H * D);
    for (uint16_t &X : QBits)
      X = toBits(Dt, N(Rng));
    DQ.upload(QBits.data(), DQ.size());
    DO.poison();
    DF.poison();
    Drv.check(Drv.cuGraphLaunch(Exec, S), "cuGraphLaunch");
    Drv.check(Drv.cuStreamSynchronize(S), "graph replay");
    std::vector<uint16_t> OBits(QBits.size());
    std::vector<float> FVals(NF * B * H);
    DO.download(OBits.data(), DO.size());
    if (NF)
      DF.download(FVals.data(), FVals.size() * 4);
    std::string What = fmt::format("graph replay {} {} {} (splits {}) round {}",
                                   Def, Csr ? "csr" : "table",
                                   fmt::join(Rounds[R], ","), Plan.Splits, R);
    Pass = check(What.c_str(), A, Dt, P, H, Sq, QBits, RefInputs, OBits, FVals) && Pass;
  }
  Drv.cuGraphExecDestroy(Exec);
  Drv.cuGraphDestroy(Graph);
  Drv.cuStreamDestroy(S);
  return Pass;
}

/// The device checks: a page index out of range (sequence 1); in CSR, a
/// page index, a last page length of 0 and an indptr range past the
/// indices (sequences 1, 2, 3); a length above the bound (sequence 1): those
/// sequences' rows NaN, the others exact.
bool deviceChecks(uint64_t Seed) {
  const DType Dt = DType::F16;
  const int H = 8, Hkv = 2, Sq = 1, PageSize = 16, D = 128;
  runtime::Signature Sig;
  Sig.Dtype = Dt;
  Sig.HeadDim = Sig.HeadDimV = D;
  runtime::Attention A(makeDefinition("mha_full"), Sig);
  std::mt19937_64 Rng(Seed);
  PagedHost P = makeBatch(Rng, Dt, Hkv, PageSize, PageLayout::NHD, {900, 3000, 50, 1});
  const int B = P.B;
  DeviceCaches Caches = uploadCaches(P, Dt, B, Hkv, PageSize, D);
  DeviceBuffer &KC = *Caches.K, &VC = *Caches.V;
  std::normal_distribution<double> N(0.0, 1.0);
  std::vector<uint16_t> QBits(size_t(B) * H * D);
  for (uint16_t &X : QBits)
    X = toBits(Dt, N(Rng));
  DeviceBuffer DQ(QBits.size() * 2), DO(QBits.size() * 2), DF(size_t(B) * H * 4);
  DQ.upload(QBits.data(), DQ.size());
  DType ET = elemOf(Dt);
  using runtime::TensorView;
  TensorView F = TensorView::contiguous(DF.get(), DType::F32, {1, B, H, Sq});
  auto Run = [&](PagedHost &Bad, bool Csr, int64_t MaxLen, const char *What,
                 std::vector<int> NanSeqs) {
    DeviceIndex Idx(Bad);
    runtime::PagedKV KV = Idx.view(Bad, Csr, KC.get(), VC.get(), ET, MaxLen);
    DO.poison(0);
    A.decodePaged(TensorView::contiguous(DQ.get(), ET, {B, Sq, H, D}), KV,
                  TensorView::contiguous(DO.get(), ET, {B, Sq, H, D}), &F);
    auto &Drv = runtime::CudaDriver::get();
    Drv.check(Drv.cuCtxSynchronize(), "kernel execution");
    std::vector<uint16_t> OBits(QBits.size());
    std::vector<float> FVals(size_t(B) * H);
    DO.download(OBits.data(), DO.size());
    DF.download(FVals.data(), FVals.size() * 4);
    return check(What, A, Dt, P, H, Sq, QBits, {}, OBits, FVals, NanSeqs);
  };
  bool Pass = true;
  PagedHost Bad = P;
  Bad.Table[size_t(1) * Bad.MaxPages + 100] = Bad.NumPages + 5;
  Pass = Run(Bad, false, 3000, "device check: page index out of range", {1}) && Pass;
  Bad = P;
  Bad.Indices[Bad.Indptr[1] + 7] = -2;
  Bad.LastPageLen[2] = 0;
  Bad.Indptr[4] = Bad.Indptr[4] + 5; // past the indices
  Pass = Run(Bad, true, 3000, "device check: csr index, last page length, indptr",
             {1, 2, 3}) && Pass;
  // The bound (max_seqlen_kv 2048) below sequence 1's 3000 keys.
  Bad = P;
  Pass = Run(Bad, false, 2048, "device check: a length above the bound", {1}) && Pass;
  return Pass;
}

/// The public merge: each sequence's pages split at random page
/// boundaries into \p Parts parts (a cached prefix and new tokens, shards;
/// a sequence's part may be empty, which merges as nothing),
/// decodePaged over each part, mergeResults of the parts against the fp64
/// result over all keys. Definitions whose score_mod and mask read no
/// index: each part's call sees its own kv_idx and q_idx.
bool mergeCase(const std::string &Def, DType Dt, int Parts, uint64_t Seed) {
  const int H = 8, Hkv = 2, Sq = 1, PageSize = 16, D = 128;
  runtime::Signature Sig;
  Sig.Dtype = Dt;
  Sig.HeadDim = Sig.HeadDimV = D;
  runtime::Attention A(pagedDefinition(Def), Sig);
  std::mt19937_64 Rng(Seed);
  PagedHost P = makeBatch(Rng, Dt, Hkv, PageSize, PageLayout::NHD, {1000, 37, 0, 2000, 16});
  const int B = P.B;
  DeviceCaches Caches = uploadCaches(P, Dt, B, Hkv, PageSize, D);
  DeviceBuffer &KC = *Caches.K, &VC = *Caches.V;
  // Part i: pages [Cut[b][i], Cut[b][i + 1]) of sequence b, cuts drawn at
  // random and sorted.
  std::vector<PagedHost> Part(Parts, P);
  std::vector<int64_t> PartMax(Parts, 1);
  std::vector<std::string> CutText;
  for (int b = 0; b < B; ++b) {
    std::vector<int64_t> Cut{0};
    std::uniform_int_distribution<int64_t> At(0, P.pages(b));
    for (int i = 1; i < Parts; ++i)
      Cut.push_back(At(Rng));
    Cut.push_back(P.pages(b));
    std::sort(Cut.begin(), Cut.end());
    CutText.push_back(fmt::format("{}", fmt::join(Cut, ":")));
    for (int i = 0; i < Parts; ++i) {
      int Len = int(std::min<int64_t>(P.Lens[b], Cut[i + 1] * PageSize) -
                    std::min<int64_t>(P.Lens[b], Cut[i] * PageSize));
      Part[i].SeqLens[b] = Part[i].Lens[b] = Len;
      PartMax[i] = std::max<int64_t>(PartMax[i], Len);
      for (int64_t p = 0; p < P.MaxPages; ++p)
        Part[i].Table[size_t(b) * P.MaxPages + p] =
            p + Cut[i] < P.MaxPages ? P.Table[size_t(b) * P.MaxPages + p + Cut[i]]
                                    : (1 << 30);
    }
  }
  std::normal_distribution<double> N(0.0, 1.0);
  std::vector<uint16_t> QBits(size_t(B) * H * D);
  for (uint16_t &X : QBits)
    X = toBits(Dt, N(Rng));
  const ir::Graph &G = *A.definition().Graph;
  size_t NF = G.decls().FinalRowscales.size();
  const size_t FBytes = std::max<size_t>(1, NF) * B * H * 4;
  DeviceBuffer DQ(QBits.size() * 2), DO(QBits.size() * 2), DF(FBytes);
  std::vector<std::unique_ptr<DeviceBuffer>> PO, PF;
  DQ.upload(QBits.data(), DQ.size());
  DType ET = elemOf(Dt);
  using runtime::TensorView;
  auto FView = [&](DeviceBuffer &Buf) {
    return TensorView::contiguous(Buf.get(), DType::F32,
                                  {int64_t(NF), B, H, Sq});
  };
  auto OView = [&](DeviceBuffer &Buf) {
    return TensorView::contiguous(Buf.get(), ET, {B, Sq, H, D});
  };
  TensorView F = FView(DF);
  runtime::InputMap Inputs;
  reference::InputValues RefInputs;
  std::vector<std::unique_ptr<DeviceBuffer>> Bufs;
  makeInputs(G, H, Inputs, RefInputs, Bufs);
  std::vector<TensorView> PFViews;
  PFViews.reserve(Parts);
  std::vector<runtime::PartialResult> Results;
  for (int i = 0; i < Parts; ++i) {
    PO.push_back(std::make_unique<DeviceBuffer>(QBits.size() * 2));
    PF.push_back(std::make_unique<DeviceBuffer>(FBytes));
    PFViews.push_back(FView(*PF.back()));
    DeviceIndex Idx(Part[i]);
    A.decodePaged(OView(DQ), Idx.view(Part[i], false, KC.get(), VC.get(), ET, PartMax[i]),
                  OView(*PO.back()), NF ? &PFViews.back() : nullptr, Inputs);
    Results.push_back({OView(*PO.back()), NF ? &PFViews.back() : nullptr});
    // The index tensors are freed when Idx goes: the part runs first.
    auto &Drv = runtime::CudaDriver::get();
    Drv.check(Drv.cuCtxSynchronize(), "decodePaged of a part");
  }
  DO.poison();
  DF.poison();
  A.mergeResults(Results, OView(DO), NF ? &F : nullptr);
  auto &Drv = runtime::CudaDriver::get();
  Drv.check(Drv.cuCtxSynchronize(), "kernel execution");
  std::vector<uint16_t> OBits(QBits.size());
  std::vector<float> FVals(NF * B * H);
  DO.download(OBits.data(), DO.size());
  if (NF)
    DF.download(FVals.data(), FVals.size() * 4);
  std::string What = fmt::format("mergeResults {} {} ({} parts, page cuts {})", Def,
                                 std::string(dtypeName(Dt)), Parts,
                                 fmt::join(CutText, " "));
  return check(What.c_str(), A, Dt, P, H, Sq, QBits, RefInputs, OBits, FVals);
}

std::vector<Case> cases() {
  const DType F = DType::F16, BF = DType::BF16;
  const PageLayout NHD = PageLayout::NHD, HND = PageLayout::HND;
  return {
      {"mha_full", F, 8, 2, 1, 16, NHD, false, false, {0, 1, 4000, 517, 2048}},
      {"mha_full", F, 8, 8, 1, 1, NHD, true, true, {3001, 0, 64, 1}},
      {"mha_full", F, 8, 1, 4, 256, HND, false, true, {1, 5000, 256, 257}},
      // The row steps' page groups (decode_paged_kv.cuh): pages of fewer
      // rows than a thread's step (4), of one step (8), of 2 and 4 steps
      // (32 is 4 rows of each thread in 64-key blocks), of one block (64).
      {"mha_full", BF, 8, 2, 2, 4, HND, true, false, {2500, 3, 0, 77}},
      {"mha_full", F, 8, 2, 1, 8, NHD, false, false, {1000, 9, 1}},
      {"mha_full", F, 8, 2, 1, 32, NHD, false, true, {3000, 1, 100, 64}},
      {"mha_full", F, 8, 1, 1, 64, HND, true, false, {1, 4100, 65, 128}},
      {"mha_full", BF, 16, 2, 4, 16, HND, true, false, {1500, 2, 0}},
      {"sigmoid_full", F, 8, 2, 1, 16, NHD, true, false, {4096, 0, 1, 999}},
      {"relu_full", F, 8, 2, 4, 1, HND, false, true, {2500, 31}},
      {"alibi_full", F, 8, 2, 2, 16, NHD, false, false, {3000, 5, 1}},
      {"softcap_learnable", BF, 8, 2, 1, 256, NHD, true, true, {2000, 0, 300}},
      {"mha", F, 8, 2, 4, 16, NHD, false, false, {1000, 1, 3, 0}},
      {"mha_prefix_lm", F, 8, 2, 3, 16, HND, true, false, {1200, 40, 70}},
      // A window at the end of long caches: the blocks before it skipped
      // (the mask's classes), the window's edge masked per element.
      {"mha_sliding_window", F, 8, 2, 1, 16, NHD, false, false, {3000, 1, 300, 0, 257}},
      {"mha_sliding_window", BF, 8, 1, 4, 1, HND, true, false, {2000, 255, 600}},
      {"mha_chunked", F, 8, 2, 2, 16, NHD, false, false, {1500, 33, 700}},
      {"retention_full", F, 8, 2, 2, 16, NHD, false, false, {2000, 0, 10}},
  };
}

/// ATTNC_PAGED_COMPILE_ONLY=sm_90a (or sm_80): compile every kernel the
/// cases, attnc_bench_decode's mha_full and the append use into the kernel
/// cache, and exit; no GPU is needed (the calls stop at the missing driver,
/// after compiling).
int compileOnly(const char *ArchName) {
  std::optional<GpuArch> Arch = archFromName(ArchName);
  if (!Arch) {
    std::fprintf(stderr, "ATTNC_PAGED_COMPILE_ONLY: unknown arch %s\n", ArchName);
    return 2;
  }
  std::vector<Case> All = cases();
  All.push_back({"sigmoid_full", DType::F16, 8, 2, 1, 16, PageLayout::NHD, false,
                 false, {1}});
  All.push_back({"sigmoid_full", DType::BF16, 8, 2, 1, 16, PageLayout::NHD, false,
                 false, {1}});
  All.push_back({"softcap_learnable", DType::F16, 8, 2, 1, 16, PageLayout::NHD,
                 false, false, {1}});
  // The merge cases' own (precompile's decode set has the combine's merge).
  All.push_back({"mha_full", DType::BF16, 8, 2, 1, 16, PageLayout::NHD, false,
                 false, {1}});
  for (DType Dt : {DType::F16, DType::BF16})
    All.push_back({"retention_combine_plain", Dt, 8, 2, 1, 16, PageLayout::NHD,
                   false, false, {1}});
  int N = 0;
  for (const Case &C : All) {
    runtime::Signature Sig;
    Sig.Dtype = C.Dt;
    Sig.HeadDim = Sig.HeadDimV = 128;
    Sig.Backend = "generated";
    Sig.Arch = *Arch;
    runtime::Attention A(pagedDefinition(C.Def), Sig);
    ++N;
    // The paged decode kernel, the append and the merge (the calls below
    // stop at the missing driver before they compile).
    runtime::PrecompileSet Set;
    Set.Decode = true;
    A.precompile(Set);
    using runtime::TensorView;
    auto ET = elemOf(C.Dt);
    void *P = reinterpret_cast<void *>(uintptr_t(1) << 20);
    runtime::PagedKV KV;
    KV.KCache = TensorView::contiguous(P, ET, {4, 16, C.Hkv, 128});
    KV.VCache = KV.KCache;
    KV.BlockTable = TensorView::contiguous(P, DType::I32, {1, 1});
    KV.SeqLens = TensorView::contiguous(P, DType::I32, {1});
    KV.MaxSeqlenKv = 16;
    size_t NF = A.definition().Graph->decls().FinalRowscales.size();
    TensorView Q = TensorView::contiguous(P, ET, {1, C.Sq, C.H, 128});
    TensorView F = TensorView::contiguous(P, DType::F32,
                                          {int64_t(NF), 1, C.H, C.Sq});
    runtime::InputMap Inputs;
    for (const ir::InputDecl &D : A.definition().Graph->decls().Inputs)
      if (D.Shape == ir::InputShape::Scalar)
        Inputs[D.Name] = D.Elem == ir::InputType::I32 ? runtime::InputValue(int32_t(0))
                                                      : runtime::InputValue(0.f);
      else
        Inputs[D.Name] = TensorView::contiguous(P, DType::F32, {C.H});
    try {
      A.decodePaged(Q, KV, Q, NF ? &F : nullptr, Inputs);
    } catch (const DriverError &) {
    }
    try {
      TensorView O = TensorView::contiguous(P, ET, {1, C.Sq, C.H, 128});
      A.mergeResults({{O, NF ? &F : nullptr}, {O, NF ? &F : nullptr}}, O,
                     NF ? &F : nullptr);
    } catch (const DriverError &) {
    } catch (const UserError &) { // retention: its results do not merge
    }
    try {
      TensorView T = TensorView::contiguous(P, ET, {1, C.Hkv, 128});
      A.appendPaged(T, T, KV, TensorView::contiguous(P, DType::I32, {1}));
    } catch (const DriverError &) {
    }
  }
  std::printf("compiled the kernels of %d paged cases\n", N);
  return 0;
}

} // namespace

int main() {
  auto &Drv = runtime::CudaDriver::get();
  if (const char *Only = std::getenv("ATTNC_PAGED_COMPILE_ONLY"))
    return compileOnly(Only);
  if (!Drv.available()) {
    std::printf("skipped: %s\n", Drv.unavailableReason().c_str());
    return 77;
  }
  bool AllPass = true;
  uint64_t Seed = 1;
  auto Guard = [&](const char *What, auto &&Fn) {
    try {
      AllPass = Fn() && AllPass;
    } catch (const std::exception &E) {
      std::printf("FAIL %s: %s\n", What, E.what());
      AllPass = false;
    }
  };
  // ATTNC_PAGED_ONLY=merge: the public merge's cases alone (a sanitizer's
  // run).
  const char *Only = std::getenv("ATTNC_PAGED_ONLY");
  if (Only && std::string(Only) != "merge") {
    std::printf("ATTNC_PAGED_ONLY=%s: expected merge\n", Only);
    return 2;
  }
  if (!Only) {
    for (const Case &C : cases())
      Guard(C.Def.c_str(), [&] { return runCase(C, Seed++); });
    Guard("graph replay", [&] { return graphReplay("mha_full", false, 101); });
    Guard("graph replay csr",
          [&] { return graphReplay("sigmoid_full", true, 102); });
    Guard("device checks", [&] { return deviceChecks(103); });
  }
  // The derived merges (log-sum-exp, sum) and a definition's combine, in
  // 2 to 8 parts.
  Guard("merge mha", [&] { return mergeCase("mha_full", DType::F16, 2, 104); });
  Guard("merge mha", [&] { return mergeCase("mha_full", DType::BF16, 5, 107); });
  Guard("merge sigmoid", [&] { return mergeCase("sigmoid_full", DType::BF16, 3, 105); });
  Guard("merge softcap", [&] { return mergeCase("softcap_learnable", DType::F16, 2, 106); });
  Guard("merge retention combine",
        [&] { return mergeCase("retention_combine_plain", DType::F16, 2, 108); });
  Guard("merge retention combine",
        [&] { return mergeCase("retention_combine_plain", DType::BF16, 4, 109); });
  Guard("merge retention combine",
        [&] { return mergeCase("retention_combine_plain", DType::F16, 8, 110); });
  std::printf("%s\n", AllPass ? "all paged cases pass" : "some paged cases FAIL");
  return AllPass ? 0 : 1;
}
