// Paged prefill on a GPU against the double-precision reference: a cached
// prefix in pages (junk elsewhere), the new tokens appended by appendPaged,
// then prefillPaged of the packed new queries over each sequence's pages
// (q_idx aligned to the end of its keys). Ragged prefixes with 0, 17 to
// 1000+ queries a sequence, GQA 1, 2, 4 and 8, pages of 1, 2, 4, 16, 64 and
// 256, NHD and HND, block tables and CSR, causal, sliding-window and chunked
// masks and unmasked sigmoid/ReLU/ALiBi/softcap, fwd_sm90's paged kernel on
// sm_90a with each of its loads (the gather for pages under 8) and
// fwd_sm80's (named; every page size off sm_90a); a plan captured
// in a CUDA graph and replayed with new lengths, tables, caches and q; the
// device checks (a bad page index or length: that sequence's rows NaN).
// Exits 77 without a GPU.
#include "PagedPrefillBatch.h"
#include "PagedSupport.h"

#include "attn/Error.h"
#include "attn/codegen/Arch.h"
#include "attn/reference/Attention.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/Paged.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <string>

using namespace attn;
using namespace attn::gputest;
using runtime::PageLayout;
using runtime::TensorView;

namespace {

struct Case {
  std::string Def;
  DType Dt;
  int H, Hkv, PageSize;
  PageLayout Layout;
  bool Csr;
  std::vector<int> Prefix, NewQ;
  /// The signature names fwd_sm80: its paged kernel on sm_90a too.
  bool Sm80 = false;
  /// fwd_sm90's PagedLoad named for the case (ATTNC_PAGED_LOAD), where it
  /// is not the one its page size takes by default; empty: the default.
  const char *Load = "";
  /// The V cache's pages this many pages apart (every other page of a
  /// buffer twice the size at 2): its strides differ from K's.
  int VPageGap = 1;
};

/// ATTNC_PAGED_LOAD set to \p Load (unless empty) while it lives, for the
/// Attention to read when it makes its paged prefill runner; then as it
/// was.
class LoadEnv {
public:
  explicit LoadEnv(const char *Load) : Set(*Load != 0) {
    if (!Set)
      return;
    if (const char *E = std::getenv(kName))
      Old = E;
    setenv(kName, Load, 1);
  }
  ~LoadEnv() {
    if (!Set)
      return;
    if (Old)
      setenv(kName, Old->c_str(), 1);
    else
      unsetenv(kName);
  }
  LoadEnv(const LoadEnv &) = delete;
  LoadEnv &operator=(const LoadEnv &) = delete;

private:
  static constexpr const char *kName = "ATTNC_PAGED_LOAD";
  bool Set;
  std::optional<std::string> Old;
};

/// One prefillPaged call of a case.
bool runCase(const Case &C, uint64_t Seed) {
  LoadEnv Load(C.Load);
  runtime::Attention A(pagedDefinition(C.Def), signature(C.Dt, C.Sm80));
  std::mt19937_64 Rng(Seed);
  Batch X = makePrefillBatch(Rng, C.Dt, C.H, C.Hkv, C.PageSize, C.Layout, C.Prefix, C.NewQ);
  const PagedHost &P = X.P;
  const int D = P.D, B = P.B;
  DeviceBuffer KC(size_t(P.NumPages) * C.PageSize * C.Hkv * D * 2),
      VC(KC.size() * C.VPageGap);
  DeviceIndex Idx(P);
  const int64_t MaxLen = *std::max_element(P.Lens.begin(), P.Lens.end());
  runtime::PagedKV KV = Idx.view(P, C.Csr, KC.get(), VC.get(), C.Dt, MaxLen);
  KV.VCache.Strides[0] *= C.VPageGap;
  fillCaches(A, X, C.Dt, KV, KC, VC, Rng);

  const ir::Graph &G = *A.definition().Graph;
  const size_t NF = G.decls().FinalRowscales.size();
  DeviceBuffer DQ(X.QBits.size() * 2), DO(X.QBits.size() * 2),
      DF(std::max<size_t>(1, NF) * C.H * X.Tq * 4), DCu(X.Cu.size() * 4);
  DQ.upload(X.QBits.data(), DQ.size());
  DCu.upload(X.Cu.data(), DCu.size());
  TensorView Finals = TensorView::contiguous(DF.get(), DType::F32, {int64_t(NF), C.H, X.Tq});
  runtime::InputMap Inputs;
  reference::InputValues RefInputs;
  std::vector<std::unique_ptr<DeviceBuffer>> Bufs;
  makeInputs(G, C.H, Inputs, RefInputs, Bufs);
  DO.poison();
  DF.poison();
  A.prefillPaged(TensorView::contiguous(DQ.get(), C.Dt, {X.Tq, C.H, D}),
                 TensorView::contiguous(DCu.get(), DType::I32, {B + 1}), X.MaxQ, KV,
                 TensorView::contiguous(DO.get(), C.Dt, {X.Tq, C.H, D}),
                 NF ? &Finals : nullptr, Inputs);
  auto &Drv = runtime::CudaDriver::get();
  Drv.check(Drv.cuCtxSynchronize(), "kernel execution");
  std::vector<uint16_t> OBits(X.QBits.size());
  std::vector<float> FVals(NF * C.H * X.Tq);
  DO.download(OBits.data(), DO.size());
  if (NF)
    DF.download(FVals.data(), FVals.size() * 4);
  std::string What =
      fmt::format("{}{}{}{}{} {} H{}/{} page{} {} {} prefix {} new {}", C.Def,
                  C.Sm80 ? " (fwd_sm80)" : "", *C.Load ? " load " : "", C.Load,
                  C.VPageGap > 1 ? " (v pages apart)" : "",
                  std::string(dtypeName(C.Dt)), C.H, C.Hkv, C.PageSize,
                  runtime::pageLayoutName(C.Layout), C.Csr ? "csr" : "table",
                  fmt::join(C.Prefix, ","), fmt::join(C.NewQ, ","));
  return check(What.c_str(), A, C.Dt, X, C.H, referenceOf(A, C.Dt, X, C.H, RefInputs), OBits,
               FVals);
}

/// The graph replays' rounds: each sequence's prefix and new queries.
std::vector<std::pair<std::vector<int>, std::vector<int>>> replayRounds() {
  return {{{0, 1748, 500}, {300, 300, 17}},
          {{1000, 0, 31}, {0, 129, 300}},
          {{2047, 0, 7}, {1, 1, 64}}};
}

/// A plan captured once in a CUDA graph and replayed three times with new
/// prefixes, query counts, tables, caches and q at the same addresses.
bool graphReplay(const std::string &Def, bool Csr, int PageSize, uint64_t Seed) {
  const DType Dt = DType::F16;
  const int H = 8, Hkv = 2, B = 3, MaxQ = 300, MaxLen = 2048, D = 128;
  const int MaxTq = B * MaxQ;
  runtime::Attention A(pagedDefinition(Def), signature(Dt));
  runtime::PrefillPlan Plan =
      A.planPrefill(runtime::PrefillBounds{B, H, Hkv, MaxQ, MaxLen, PageSize});
  std::mt19937_64 Rng(Seed);
  GraphPages Pages(Dt, B, Hkv, PageSize, D, MaxLen, Csr);
  const int64_t NumPages = Pages.NumPages, MaxPages = Pages.MaxPages;
  DeviceBuffer DQ(size_t(MaxTq) * H * D * 2), DO(size_t(MaxTq) * H * D * 2),
      DF(size_t(MaxTq) * H * 4), DCu((B + 1) * 4);
  TensorView Q = TensorView::contiguous(DQ.get(), Dt, {MaxTq, H, D});
  TensorView O = TensorView::contiguous(DO.get(), Dt, {MaxTq, H, D});
  TensorView Cu = TensorView::contiguous(DCu.get(), DType::I32, {B + 1});
  const ir::Graph &G = *A.definition().Graph;
  const size_t NF = G.decls().FinalRowscales.size();
  TensorView F = TensorView::contiguous(DF.get(), DType::F32, {int64_t(NF), H, MaxTq});
  runtime::InputMap Inputs;
  reference::InputValues RefInputs;
  std::vector<std::unique_ptr<DeviceBuffer>> Bufs;
  makeInputs(G, H, Inputs, RefInputs, Bufs);

  CapturedGraph Graph(
      [&](CUstream S) { A.runPrefill(Plan, Q, Cu, Pages.KV, O, NF ? &F : nullptr, Inputs, S); });

  bool Pass = true;
  const auto Rounds = replayRounds();
  for (size_t R = 0; R < Rounds.size(); ++R) {
    Batch X = makePrefillBatch(Rng, Dt, H, Hkv, PageSize, PageLayout::NHD,
                               Rounds[R].first, Rounds[R].second);
    // The bound's pages and table width, whatever this round uses.
    X.P.NumPages = NumPages;
    std::vector<int32_t> Tab(size_t(B) * MaxPages, 1 << 30);
    for (int b = 0; b < B; ++b)
      for (int64_t p = 0; p < X.P.pages(b); ++p)
        Tab[size_t(b) * MaxPages + p] = X.P.pageOf(b, p);
    X.P.Table = Tab;
    X.P.MaxPages = MaxPages;
    fillCaches(A, X, Dt, Pages.KV, Pages.K, Pages.V, Rng);
    Pages.Table.upload(X.P.Table.data(), X.P.Table.size() * 4);
    Pages.Lens.upload(X.P.SeqLens.data(), B * 4);
    Pages.Indptr.upload(X.P.Indptr.data(), (B + 1) * 4);
    if (!X.P.Indices.empty())
      Pages.Indices.upload(X.P.Indices.data(), X.P.Indices.size() * 4);
    Pages.Last.upload(X.P.LastPageLen.data(), B * 4);
    DCu.upload(X.Cu.data(), X.Cu.size() * 4);
    DQ.upload(X.QBits.data(), X.QBits.size() * 2);
    DO.poison();
    DF.poison();
    Graph.replay();
    // The replay's outputs as X's packed rows (q and o are MaxTq rows; X
    // uses the first Tq).
    std::vector<uint16_t> OBits(size_t(X.Tq) * H * D);
    std::vector<float> FAll(NF * H * MaxTq), FVals(NF * H * X.Tq);
    DO.download(OBits.data(), OBits.size() * 2);
    if (NF)
      DF.download(FAll.data(), FAll.size() * 4);
    for (size_t f = 0; f < NF; ++f)
      for (int h = 0; h < H; ++h)
        for (int r = 0; r < X.Tq; ++r)
          FVals[(f * H + h) * X.Tq + r] = FAll[(f * H + h) * MaxTq + r];
    std::string What = fmt::format("graph replay {} page{} {} round {} prefix {} new {}", Def,
                                   PageSize, Csr ? "csr" : "table", R,
                                   fmt::join(Rounds[R].first, ","),
                                   fmt::join(Rounds[R].second, ","));
    Pass = check(What.c_str(), A, Dt, X, H, referenceOf(A, Dt, X, H, RefInputs), OBits, FVals) &&
           Pass;
  }
  return Pass;
}

/// The device checks: a page index out of range (sequence 1); in CSR, a
/// last page length of 0 (sequence 2); a length above the bound (sequence
/// 0): those sequences' rows NaN, the others exact.
bool deviceChecks(uint64_t Seed, bool Sm80, const char *LoadName = "") {
  LoadEnv Load(LoadName);
  const DType Dt = DType::F16;
  const int H = 8, Hkv = 2, PageSize = 16, D = 128;
  runtime::Attention A(makeDefinition("mha"), signature(Dt, Sm80));
  std::mt19937_64 Rng(Seed);
  Batch X = makePrefillBatch(Rng, Dt, H, Hkv, PageSize, PageLayout::NHD,
                             {900, 1500, 40, 0}, {100, 200, 30, 50});
  const int B = X.P.B;
  DeviceBuffer KC(size_t(X.P.NumPages) * PageSize * Hkv * D * 2), VC(KC.size());
  {
    DeviceIndex Idx(X.P);
    fillCaches(A, X, Dt, Idx.view(X.P, false, KC.get(), VC.get(), Dt, 1700), KC, VC, Rng);
  }
  DeviceBuffer DQ(X.QBits.size() * 2), DO(X.QBits.size() * 2), DF(size_t(H) * X.Tq * 4),
      DCu(X.Cu.size() * 4);
  DQ.upload(X.QBits.data(), DQ.size());
  DCu.upload(X.Cu.data(), DCu.size());
  TensorView F = TensorView::contiguous(DF.get(), DType::F32, {1, H, X.Tq});
  // One reference for the three calls (the same batch each time).
  const BatchReference Ref = referenceOf(A, Dt, X, H, {});
  auto Run = [&](const PagedHost &Bad, bool Csr, int64_t MaxLen, const char *Check,
                 std::vector<int> NanSeqs) {
    std::string What = fmt::format("{}{}{}{}", Check, Sm80 ? " (fwd_sm80)" : "",
                                   *LoadName ? " load " : "", LoadName);
    DeviceIndex Idx(Bad);
    runtime::PagedKV KV = Idx.view(Bad, Csr, KC.get(), VC.get(), Dt, MaxLen);
    DO.poison(0);
    DF.poison(0);
    A.prefillPaged(TensorView::contiguous(DQ.get(), Dt, {X.Tq, H, D}),
                   TensorView::contiguous(DCu.get(), DType::I32, {B + 1}), X.MaxQ, KV,
                   TensorView::contiguous(DO.get(), Dt, {X.Tq, H, D}), &F);
    auto &Drv = runtime::CudaDriver::get();
    Drv.check(Drv.cuCtxSynchronize(), "kernel execution");
    std::vector<uint16_t> OBits(X.QBits.size());
    std::vector<float> FVals(size_t(H) * X.Tq);
    DO.download(OBits.data(), DO.size());
    DF.download(FVals.data(), FVals.size() * 4);
    return check(What.c_str(), A, Dt, X, H, Ref, OBits, FVals, NanSeqs);
  };
  bool Pass = true;
  PagedHost Bad = X.P;
  Bad.Table[size_t(1) * Bad.MaxPages + 90] = Bad.NumPages + 5;
  Pass = Run(Bad, false, 1700, "device check: page index out of range", {1}) && Pass;
  Bad = X.P;
  Bad.LastPageLen[2] = 0;
  Pass = Run(Bad, true, 1700, "device check: csr last page length 0", {2}) && Pass;
  // The bound (max_seqlen_kv 1600) below sequence 1's 1700 keys.
  Pass = Run(X.P, false, 1600, "device check: a length above the bound", {1}) && Pass;
  return Pass;
}

std::vector<Case> cases() {
  const DType F = DType::F16, BF = DType::BF16;
  const PageLayout NHD = PageLayout::NHD, HND = PageLayout::HND;
  return {
      // Causal softmax: ragged prefixes with 0, 17 to 1000+ new tokens.
      {"mha", F, 8, 2, 16, NHD, false, {0, 1000, 37, 300}, {17, 64, 1100, 130}},
      {"mha", F, 8, 8, 1, NHD, true, {513, 0, 64}, {200, 17, 33}},
      {"mha", BF, 8, 1, 256, HND, false, {1, 700, 0}, {300, 255, 257}},
      {"mha", F, 16, 2, 16, HND, true, {0, 0, 2000}, {1030, 40, 100}},
      // Unmasked variants (sum and log-sum-exp finals, per-head inputs).
      {"sigmoid_full", F, 8, 2, 16, NHD, true, {1000, 3}, {64, 200}},
      {"relu_full", BF, 8, 2, 1, HND, false, {600, 0}, {33, 129}},
      {"alibi_full", F, 8, 2, 16, NHD, false, {300, 77}, {120, 18}},
      {"softcap_learnable", BF, 8, 2, 256, NHD, true, {1200, 0}, {90, 300}},
      // Masks with q_idx aligned to the end of the keys.
      {"mha_sliding_window", F, 8, 2, 16, NHD, false, {2000, 0, 300}, {400, 600, 17}},
      {"mha_sliding_window", F, 8, 1, 1, HND, true, {700, 255}, {100, 300}},
      {"mha_chunked", F, 8, 2, 16, NHD, false, {1500, 33, 0}, {200, 700, 64}},
      {"mha_chunked", F, 8, 4, 1, HND, true, {900, 0}, {130, 257}},
      // Pages of 64 (the thread's boxes, two a block of 128 keys) and
      // pages under 8 tokens (fwd_sm90's gather, as for pages of 1 above).
      {"mha", F, 8, 2, 64, NHD, false, {0, 1000, 37, 300}, {17, 64, 1100, 130}},
      {"sigmoid_full", BF, 8, 4, 64, HND, true, {700, 64}, {100, 65}},
      {"mha", BF, 8, 2, 2, HND, true, {511, 0, 90}, {130, 257, 7}},
      {"mha_sliding_window", F, 8, 4, 4, NHD, false, {1300, 3}, {200, 61}},
      // fwd_sm80's paged kernel where sm_90a takes fwd_sm90's.
      {"mha", F, 8, 2, 16, NHD, false, {0, 1000, 37, 300}, {17, 64, 1100, 130}, true},
      {"mha", F, 8, 8, 1, NHD, true, {513, 0, 64}, {200, 17, 33}, true},
      // fwd_sm90's page loads where their page sizes do not take them: the
      // thread's and the warp's boxes at pages of 16, the warp's at 256 (one
      // box a block) under a window (key blocks from one past 0), the
      // gather at 64 and 256.
      {"mha", F, 8, 2, 16, NHD, false, {0, 1000, 37, 300}, {17, 64, 1100, 130}, false,
       "thread"},
      {"mha_sliding_window", BF, 8, 2, 256, HND, true, {1500, 0}, {300, 200}, false, "warp"},
      {"mha", F, 8, 2, 16, NHD, false, {0, 1000, 37, 300}, {17, 64, 1100, 130}, false,
       "warp"},
      {"alibi_full", BF, 8, 1, 64, HND, true, {300, 77}, {120, 18}, false, "gather"},
      {"mha_chunked", F, 16, 2, 256, NHD, false, {1500, 33, 0}, {200, 700, 64}, false,
       "gather"},
      // A V cache whose strides are not K's (the gather's second path):
      // pages of 1 and 16 (the gather), 64 (the thread's boxes).
      {"mha", F, 8, 2, 1, NHD, false, {513, 0, 64}, {200, 17, 33}, false, "", 2},
      {"sigmoid_full", BF, 8, 2, 16, HND, true, {1000, 3}, {64, 200}, false, "", 2},
      {"mha", F, 8, 4, 64, NHD, true, {700, 64}, {100, 65}, false, "", 2},
  };
}

/// ATTNC_PREFILL_COMPILE_ONLY=sm_90a (or sm_80): compile every kernel the
/// cases use (and the append) into the kernel cache and exit; no GPU is
/// needed (the calls stop at the missing driver, after compiling).
int compileOnly(const char *ArchName) {
  std::optional<GpuArch> Arch = archFromName(ArchName);
  if (!Arch) {
    std::fprintf(stderr, "ATTNC_PREFILL_COMPILE_ONLY: unknown arch %s\n", ArchName);
    return 2;
  }
  // ATTNC_PREFILL_SHARD=i/n: every n-th case from the i-th (parallel
  // compiles).
  int Shard = 0, Shards = 1;
  if (const char *S = std::getenv("ATTNC_PREFILL_SHARD"))
    std::sscanf(S, "%d/%d", &Shard, &Shards);
  int N = 0, I = -1;
  for (const Case &C : cases()) {
    if (++I % Shards != Shard)
      continue;
    LoadEnv Load(C.Load);
    runtime::Signature Sig = signature(C.Dt, C.Sm80);
    Sig.Arch = *Arch;
    runtime::Attention A(pagedDefinition(C.Def), Sig);
    ++N;
    void *P = reinterpret_cast<void *>(uintptr_t(1) << 20);
    runtime::PagedKV KV;
    KV.KCache = TensorView::contiguous(P, C.Dt, {4, C.PageSize, C.Hkv, 128});
    KV.VCache = KV.KCache;
    KV.BlockTable = TensorView::contiguous(P, DType::I32, {1, 1});
    KV.SeqLens = TensorView::contiguous(P, DType::I32, {1});
    KV.MaxSeqlenKv = 1;
    size_t NF = A.definition().Graph->decls().FinalRowscales.size();
    TensorView Q = TensorView::contiguous(P, C.Dt, {4, C.H, 128});
    TensorView F = TensorView::contiguous(P, DType::F32, {int64_t(NF), C.H, 4});
    runtime::InputMap Inputs;
    for (const ir::InputDecl &D : A.definition().Graph->decls().Inputs)
      if (D.Shape == ir::InputShape::Scalar)
        Inputs[D.Name] = D.Elem == ir::InputType::I32 ? runtime::InputValue(int32_t(0))
                                                      : runtime::InputValue(0.f);
      else
        Inputs[D.Name] = TensorView::contiguous(P, DType::F32, {C.H});
    try {
      A.prefillPaged(Q, TensorView::contiguous(P, DType::I32, {2}), 4, KV, Q,
                     NF ? &F : nullptr, Inputs);
    } catch (const DriverError &) {
    }
    try {
      TensorView T = TensorView::contiguous(P, C.Dt, {1, C.Hkv, 128});
      A.appendPaged(T, T, KV, TensorView::contiguous(P, DType::I32, {1}));
    } catch (const DriverError &) {
    }
  }
  // The append (appendPaged stops at the missing driver before it
  // compiles; precompile's decode set has it).
  runtime::Signature Sig = signature(DType::F16);
  Sig.Arch = *Arch;
  runtime::PrecompileSet Set;
  Set.Decode = true;
  runtime::Attention(makeDefinition("mha"), Sig).precompile(Set);
  std::printf("compiled the kernels of %d paged prefill cases\n", N);
  return 0;
}

/// ATTNC_PREFILL_TIME_REFERENCE=1: the host reference of every batch the
/// test checks (the cases, the graph replays' rounds, the device checks'
/// batch), timed, without a GPU; and the check tested on each: the
/// reference's own rows in the kernel's layout pass, a changed element of
/// the last row (or a changed final) fails.
int timeReference() {
  using Clock = std::chrono::steady_clock;
  auto Since = [](Clock::time_point T) {
    return std::chrono::duration<double>(Clock::now() - T).count();
  };
  const auto Start = Clock::now();
  bool SelfCheck = true;
  auto Time = [&](const std::string &What, const std::string &Def, DType Dt, int H, int Hkv,
                  const std::vector<int> &Prefix, const std::vector<int> &NewQ, uint64_t Seed) {
    runtime::Signature Sig = signature(Dt);
    Sig.Arch = GpuArch::Sm90a;
    runtime::Attention A(pagedDefinition(Def), Sig);
    std::mt19937_64 Rng(Seed);
    Batch X = makePrefillBatch(Rng, Dt, H, Hkv, 16, PageLayout::NHD, Prefix, NewQ);
    const auto T0 = Clock::now();
    BatchReference Ref = referenceOf(A, Dt, X, H, referenceInputs(*A.definition().Graph, H));
    std::printf("reference %-40s %6.2f s\n", What.c_str(), Since(T0));
    // The check itself: the reference's rows in the kernel's layout pass;
    // one element of the last row changed, or a final, fails.
    const int D = X.P.D, B = X.P.B;
    const size_t NF = A.definition().Graph->decls().FinalRowscales.size();
    std::vector<uint16_t> OBits(X.QBits.size());
    std::vector<float> FVals(NF * H * X.Tq);
    for (int b = 0; b < B; ++b)
      for (int s = 0; s < X.NewQ[b]; ++s)
        for (int h = 0; h < H; ++h) {
          for (int d = 0; d < D; ++d)
            OBits[(size_t(X.Cu[b] + s) * H + h) * D + d] =
                toBits(Dt, Ref.O[b][(size_t(s) * H + h) * D + d]);
          for (size_t f = 0; f < NF; ++f)
            FVals[(f * H + h) * X.Tq + X.Cu[b] + s] =
                float(Ref.Finals[b][(f * H + h) * X.NewQ[b] + s]);
        }
    SelfCheck = check("  its own rows", A, Dt, X, H, Ref, OBits, FVals) && SelfCheck;
    std::vector<uint16_t> Bad = OBits;
    const size_t Last = size_t(X.Cu[B]) * H * D - 1;
    Bad[Last] = toBits(Dt, -2 * fromBits(Dt, Bad[Last]) - 1); // off by 3|o| + 1
    SelfCheck = !check("  a changed element (must FAIL)", A, Dt, X, H, Ref, Bad, FVals) &&
                SelfCheck;
    if (NF) {
      std::vector<float> BadF = FVals;
      BadF[size_t(X.Cu[B]) - 1] += 0.01f;
      SelfCheck = !check("  a changed final (must FAIL)", A, Dt, X, H, Ref, OBits, BadF) &&
                  SelfCheck;
    }
  };
  for (const Case &C : cases())
    Time(fmt::format("{} H{}/{} new {}", C.Def, C.H, C.Hkv, fmt::join(C.NewQ, ",")), C.Def,
         C.Dt, C.H, C.Hkv, C.Prefix, C.NewQ, 1);
  for (const auto &[Prefix, NewQ] : replayRounds())
    for (const char *Def : {"mha", "sigmoid_full", "mha"})
      Time(fmt::format("graph replay {} new {}", Def, fmt::join(NewQ, ",")), Def, DType::F16, 8,
           2, Prefix, NewQ, 2);
  for (int I = 0; I < 2; ++I)
    Time("device checks", "mha", DType::F16, 8, 2, {900, 1500, 40, 0}, {100, 200, 30, 50}, 3);
  std::printf("reference total %.2f s on %u threads\n", Since(Start),
              llvm::hardware_concurrency().compute_thread_count());
  std::printf("%s\n", SelfCheck ? "the check passes the reference's rows and fails changed ones"
                                 : "the check FAILS its self-test");
  return SelfCheck ? 0 : 1;
}

} // namespace

int main() {
  auto &Drv = runtime::CudaDriver::get();
  if (const char *Only = std::getenv("ATTNC_PREFILL_COMPILE_ONLY"))
    return compileOnly(Only);
  if (std::getenv("ATTNC_PREFILL_TIME_REFERENCE"))
    return timeReference();
  if (!Drv.available()) {
    std::printf("skipped: %s\n", Drv.unavailableReason().c_str());
    return 77;
  }
  uint64_t Seed = 1;
  // ATTNC_PREFILL_ONLY=TEXT: only the cases and checks whose name holds
  // TEXT (a short run under compute-sanitizer).
  CaseGuard Guard(std::getenv("ATTNC_PREFILL_ONLY"));
  for (const Case &C : cases()) {
    const uint64_t CaseSeed = Seed++;
    Guard.run(fmt::format("{} page{}{}{}{}{}", C.Def, C.PageSize, C.Sm80 ? " fwd_sm80" : "",
                          *C.Load ? " load " : "", C.Load, C.VPageGap > 1 ? " v apart" : ""),
              [&] { return runCase(C, CaseSeed); });
  }
  Guard.run("graph replay", [&] { return graphReplay("mha", false, 16, 101); });
  Guard.run("graph replay csr", [&] { return graphReplay("sigmoid_full", true, 16, 102); });
  // Pages of 1: fwd_sm90's gather (fwd_sm80's kernel off sm_90a)
  // captured and replayed (and on sm_90a at pages of 16 above).
  Guard.run("graph replay pages of 1", [&] { return graphReplay("mha", true, 1, 105); });
  Guard.run("device checks", [&] { return deviceChecks(103, false); });
  Guard.run("device checks fwd_sm80", [&] { return deviceChecks(104, true); });
  Guard.run("device checks warp", [&] { return deviceChecks(106, false, "warp"); });
  std::printf("%s\n",
              Guard.pass() ? "all paged prefill cases pass" : "some paged prefill cases FAIL");
  return Guard.pass() ? 0 : 1;
}
