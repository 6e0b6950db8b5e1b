// Packed (THD) decode on a GPU against the double-precision reference: each
// sequence with its own count of queries (0 to 16, cu_seqlens_q), q_idx
// aligned to the end of its keys. Contiguous packed K/V through
// forwardVarlen's short-query rule (decode_sm80), paged K/V through
// decodePagedVarlen (pages of 1 and 16, block tables and CSR, NHD and HND);
// softmax, sigmoid, ReLU and retention with its combine; GQA ratios 1, 4
// and 8; with and without a split over the keys. A plan captured once in a
// CUDA graph and replayed with new counts, lengths and tables. The device
// checks: a count above the bound, a range past q's tokens, a key range
// above the bound give that sequence's rows NaN, and no row outside the
// sequences' ranges is written. ATTNC_PACKED_ONLY=small runs a few small
// cases (a sanitizer's run), paged prefill's gather (pages of 1 and 16)
// among them. Exits 77 without a GPU.
#include "PackedDecodeSupport.h"
#include "PagedPrefillBatch.h"

#include "attn/Error.h"
#include "attn/codegen/Arch.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/Paged.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>

using namespace attn;
using namespace attn::gputest;
using runtime::PageLayout;
using runtime::TensorView;

namespace {

constexpr int D = PackedHeadDim;

struct ForwardCase {
  std::string Def;
  DType Dt;
  int H, Hkv;
  std::vector<int> Counts, Lens;
  bool Named = false; // Signature::Skeleton = "decode_sm80", else the rule
  std::vector<int> NanSeqs = {};
  int MaxKv = 0;      // max_seqlen_kv below a sequence's keys (NanSeqs)
};

/// forwardVarlen of a THD signature over contiguous packed K/V (one junk
/// token after the last sequence's keys, two padding rows after the last
/// query): the short-query rule's decode_sm80.
runtime::Signature forwardSignature(const ForwardCase &C,
                                    std::optional<GpuArch> Arch = std::nullopt) {
  runtime::Signature Sig;
  Sig.Dtype = C.Dt;
  Sig.HeadDim = Sig.HeadDimV = D;
  Sig.TensorLayout = Layout::THD;
  Sig.Backend = "generated";
  if (C.Named)
    Sig.Skeleton = "decode_sm80";
  Sig.Arch = Arch;
  return Sig;
}

bool forwardCase(const ForwardCase &C, uint64_t Seed) {
  runtime::Attention A(makeDefinition(C.Def), forwardSignature(C));
  std::mt19937_64 Rng(Seed);
  PagedHost P = makeBatch(Rng, C.Dt, C.Hkv, 16, PageLayout::NHD, C.Lens);
  Queries X = makeQueries(Rng, C.Dt, C.H, C.Counts, 2);
  std::vector<uint16_t> KB, VB;
  std::vector<int32_t> CuKv{0};
  for (int b = 0; b < P.B; ++b) {
    KB.insert(KB.end(), P.K[b].begin(), P.K[b].end());
    VB.insert(VB.end(), P.V[b].begin(), P.V[b].end());
    CuKv.push_back(int32_t(KB.size() / (size_t(C.Hkv) * D)));
  }
  KB.insert(KB.end(), size_t(C.Hkv) * D, toBits(C.Dt, 99.0));
  VB.insert(VB.end(), size_t(C.Hkv) * D, toBits(C.Dt, 99.0));
  const int64_t Tkv = CuKv.back() + 1;
  auto DK = upload(KB), DV = upload(VB), DQ = upload(X.Bits);
  DeviceBuffer DCq(X.Cu.size() * 4), DCk(CuKv.size() * 4);
  DCq.upload(X.Cu.data(), DCq.size());
  DCk.upload(CuKv.data(), DCk.size());
  runtime::VarlenBatch VB2;
  VB2.CuSeqlensQ = TensorView::contiguous(DCq.get(), DType::I32, {P.B + 1});
  VB2.CuSeqlensKv = TensorView::contiguous(DCk.get(), DType::I32, {P.B + 1});
  VB2.MaxSeqlenQ = X.MaxQ;
  VB2.MaxSeqlenKv = C.MaxKv ? C.MaxKv : maxOf(C.Lens);
  const ir::Graph &G = *A.definition().Graph;
  runtime::InputMap Inputs;
  reference::InputValues RefInputs;
  std::vector<std::unique_ptr<DeviceBuffer>> Bufs;
  makeInputs(G, C.H, Inputs, RefInputs, Bufs);
  Outputs Out(A, C.Dt, X.Tq, C.H);
  A.forwardVarlen(TensorView::contiguous(DQ->get(), C.Dt, {X.Tq, C.H, D}),
                  TensorView::contiguous(DK->get(), C.Dt, {Tkv, C.Hkv, D}),
                  TensorView::contiguous(DV->get(), C.Dt, {Tkv, C.Hkv, D}), Out.OV,
                  Out.finals(), VB2, Inputs);
  std::vector<uint16_t> OBits;
  std::vector<float> FVals;
  Out.download(OBits, FVals);
  std::string What = fmt::format("forwardVarlen {} {} H{}/{} counts {} keys {}{}", C.Def,
                                 std::string(dtypeName(C.Dt)), C.H, C.Hkv,
                                 fmt::join(C.Counts, ","), fmt::join(C.Lens, ","),
                                 C.Named ? " (named)" : "");
  return checkPacked(What.c_str(), A, C.Dt, P, C.H, X, rowsOf(X), RefInputs, OBits, FVals,
                     C.NanSeqs, {{X.Cu.back(), X.Tq}});
}

struct PagedCase {
  std::string Def;
  DType Dt;
  int H, Hkv, PageSize;
  PageLayout Layout;
  bool Csr;
  std::vector<int> Counts, Lens;
};

/// decodePagedVarlen, with host copies of the index tensors and of
/// cu_seqlens_q (checked before the launch).
bool pagedCase(const PagedCase &C, uint64_t Seed) {
  runtime::Attention A(pagedDefinition(C.Def), pagedSignature(C.Dt));
  std::mt19937_64 Rng(Seed);
  PagedPackedCall Call(A, Rng, C.Dt, C.H, C.Hkv, C.PageSize, C.Layout, C.Csr, C.Counts, C.Lens);
  const PagedHost &P = Call.P;
  const Queries &X = Call.X;
  runtime::PagedKVHost Host{P.Table.data(),   P.SeqLens.data(), P.Indptr.data(),
                            P.Indices.data(), P.LastPageLen.data(), X.Cu.data()};
  Call.KV.Host = &Host;
  A.decodePagedVarlen(Call.QV, Call.CuV, X.MaxQ, Call.KV, Call.Out.OV, Call.Out.finals(),
                      Call.Inputs);
  runtime::DecodeBounds Bd{P.B, C.H, C.Hkv, X.MaxQ, maxOf(C.Lens), C.PageSize};
  Bd.Packed = true;
  runtime::DecodePlan Plan = A.planDecode(Bd);
  std::string What = fmt::format(
      "decodePagedVarlen {} {} H{}/{} page{} {} {} counts {} keys {} splits {}", C.Def,
      std::string(dtypeName(C.Dt)), C.H, C.Hkv, C.PageSize, runtime::pageLayoutName(C.Layout),
      C.Csr ? "csr" : "table", fmt::join(C.Counts, ","), fmt::join(C.Lens, ","),
      Plan.Splits);
  return Call.check(What.c_str(), A, C.Dt, C.H);
}

/// One packed plan captured in a CUDA graph, replayed with new counts (0
/// and the bound among them), lengths, tables, caches and q at the same
/// addresses; the rows past the last sequence stay unwritten.
bool graphReplay(const std::string &Def, bool Csr, uint64_t Seed) {
  const DType Dt = DType::F16;
  const int H = 8, Hkv = 2, MaxQ = 8, PS = 16, B = 4, MaxLen = 2048, Tq = B * MaxQ;
  runtime::Attention A(pagedDefinition(Def), pagedSignature(Dt));
  runtime::DecodeBounds Bd{B, H, Hkv, MaxQ, MaxLen, PS};
  Bd.Packed = true;
  runtime::DecodePlan Plan = A.planDecode(Bd);
  std::mt19937_64 Rng(Seed);
  GraphPages Pages(Dt, B, Hkv, PS, D, MaxLen, Csr);
  DeviceBuffer DQ(size_t(Tq) * H * D * 2), Cu((B + 1) * 4),
      Work(std::max<size_t>(16, Plan.WorkspaceBytes));
  TensorView QV = TensorView::contiguous(DQ.get(), Dt, {Tq, H, D});
  TensorView CuV = TensorView::contiguous(Cu.get(), DType::I32, {B + 1});
  Outputs Out(A, Dt, Tq, H);
  const ir::Graph &G = *A.definition().Graph;
  runtime::InputMap Inputs;
  reference::InputValues RefInputs;
  std::vector<std::unique_ptr<DeviceBuffer>> Bufs;
  makeInputs(G, H, Inputs, RefInputs, Bufs);
  CapturedGraph Graph([&](CUstream S) {
    A.runDecodeVarlen(Plan, QV, CuV, Pages.KV, Out.OV, Out.finals(), Work.get(), Work.size(),
                      Inputs, S);
  });
  bool Pass = true;
  const std::vector<std::pair<std::vector<int>, std::vector<int>>> Rounds = {
      {{1, 8, 0, 3}, {2048, 9, 0, 100}},
      {{8, 8, 8, 8}, {700, 2000, 8, 1500}},
      {{0, 0, 1, 0}, {0, 30, 5, 2048}}};
  for (size_t R = 0; R < Rounds.size(); ++R) {
    const auto &[Counts, L] = Rounds[R];
    PagedHost P = refillGraphBatch(Rng, Dt, Hkv, PS, D, Pages.NumPages, Pages.MaxPages, L,
                                   Pages.buffers());
    Queries X = makeQueries(Rng, Dt, H, Counts, 0);
    X.Tq = Tq;
    X.Bits.resize(size_t(Tq) * H * D, toBits(Dt, 0.5));
    DQ.upload(X.Bits.data(), DQ.size());
    Cu.upload(X.Cu.data(), Cu.size());
    Out.O.poison();
    Out.F.poison();
    Graph.replay();
    std::vector<uint16_t> OBits;
    std::vector<float> FVals;
    Out.download(OBits, FVals);
    std::string What = fmt::format("graph replay {} {} counts {} keys {} (splits {})", Def,
                                   Csr ? "csr" : "table", fmt::join(Counts, ","),
                                   fmt::join(L, ","), Plan.Splits);
    Pass = checkPacked(What.c_str(), A, Dt, P, H, X, rowsOf(X), RefInputs, OBits, FVals, {},
                       {{X.Cu.back(), Tq}}) &&
           Pass;
  }
  return Pass;
}

/// The device checks of a paged packed call (no host copies): sequence 0
/// has 5 queries over the plan's bound of 4 and sequence 3 ends past q's
/// 12 tokens: their rows (clamped to the bound and to q) are NaN, token 4
/// (between sequence 0's rows and sequence 1's) is never written, the
/// others are exact.
bool deviceChecks(uint64_t Seed) {
  const DType Dt = DType::F16;
  const int H = 8, Hkv = 2, PS = 16, MaxQ = 4;
  runtime::Attention A(makeDefinition("mha"), pagedSignature(Dt));
  std::mt19937_64 Rng(Seed);
  PagedHost P = makeBatch(Rng, Dt, Hkv, PS, PageLayout::NHD, {900, 3000, 50, 1});
  DeviceCaches Caches = uploadCaches(P, Dt, P.B, Hkv, PS, D);
  DeviceIndex Idx(P);
  runtime::PagedKV KV = Idx.view(P, false, Caches.K->get(), Caches.V->get(), Dt, 3000);
  Queries X = makeQueries(Rng, Dt, H, {4, 1, 2, 4}, 0);
  X.Cu = {0, 5, 6, 8, 14};
  X.Tq = 12;
  X.Bits.resize(size_t(X.Tq) * H * D);
  auto DQ = upload(X.Bits);
  DeviceBuffer DCq(X.Cu.size() * 4);
  DCq.upload(X.Cu.data(), DCq.size());
  Outputs Out(A, Dt, X.Tq, H);
  A.decodePagedVarlen(TensorView::contiguous(DQ->get(), Dt, {X.Tq, H, D}),
                      TensorView::contiguous(DCq.get(), DType::I32, {P.B + 1}), MaxQ, KV,
                      Out.OV, Out.finals());
  std::vector<uint16_t> OBits;
  std::vector<float> FVals;
  Out.download(OBits, FVals);
  BatchRows R;
  R.Sq = {4, 1, 2, 4};
  R.Row0 = {0, 5, 6, 8};
  bool Pass = checkPacked("device check: a count above the bound, a range past q", A, Dt, P,
                          H, X, R, {}, OBits, FVals, {0, 3}, {{4, 5}});
  // Contiguous packed keys: sequence 1's 3000 keys above max_seqlen_kv.
  ForwardCase F{"mha", Dt, 8, 2, {2, 3, 1}, {900, 3000, 50}, true, {1}, 2048};
  return forwardCase(F, Seed + 1) && Pass;
}

/// Paged prefill through fwd_sm90's gather (pages under 64 tokens on
/// sm_90a; fwd_sm80's elsewhere), small: a sanitizer's case.
bool prefillCase(int PageSize, uint64_t Seed) {
  const DType Dt = DType::F16;
  const int H = 8, Hkv = 2;
  runtime::Attention A(makeDefinition("mha"), signature(Dt));
  std::mt19937_64 Rng(Seed);
  Batch X = makePrefillBatch(Rng, Dt, H, Hkv, PageSize, PageLayout::NHD, {100, 0, 37},
                             {20, 5, 64});
  const PagedHost &P = X.P;
  size_t Elems = size_t(P.NumPages) * PageSize * Hkv * D;
  DeviceBuffer KC(Elems * 2), VC(Elems * 2);
  DeviceIndex Idx(P);
  runtime::PagedKV KV = Idx.view(P, false, KC.get(), VC.get(), Dt, maxOf(P.Lens));
  fillCaches(A, X, Dt, KV, KC, VC, Rng);
  auto DQ = upload(X.QBits);
  DeviceBuffer DCq(X.Cu.size() * 4);
  DCq.upload(X.Cu.data(), DCq.size());
  Outputs Out(A, Dt, X.Tq, H);
  A.prefillPaged(TensorView::contiguous(DQ->get(), Dt, {X.Tq, H, D}),
                 TensorView::contiguous(DCq.get(), DType::I32, {P.B + 1}), X.MaxQ, KV,
                 Out.OV, Out.finals());
  std::vector<uint16_t> OBits;
  std::vector<float> FVals;
  Out.download(OBits, FVals);
  std::string What = fmt::format("paged prefill (gather) page{}", PageSize);
  return check(What.c_str(), A, Dt, X, H, referenceOf(A, Dt, X, H, {}), OBits, FVals);
}

const DType F = DType::F16, BF = DType::BF16;
const PageLayout NHD = PageLayout::NHD, HND = PageLayout::HND;

std::vector<ForwardCase> forwardCases() {
  return {
      // GQA 1, 4, 8; counts 0, 1 and 16; a causal mask aligned to each end;
      // the short-query rule's choice (the first) and decode_sm80 named.
      {"mha", F, 8, 8, {3, 0, 1, 16, 5}, {700, 50, 1, 3000, 16}},
      {"mha_full", BF, 32, 8, {1, 7, 0, 12}, {4000, 1, 0, 300}, true},
      {"sigmoid_full", F, 16, 2, {2, 16, 0, 1}, {2000, 300, 10, 1}, true},
      {"relu_full", BF, 8, 1, {5, 1, 9}, {1000, 64, 2500}, true},
      {"retention_combine", F, 8, 2, {4, 1, 0, 2}, {1500, 20, 5, 900}, true},
      // No split (the bound's keys fit four blocks).
      {"mha", F, 8, 2, {16, 1, 4}, {200, 1, 100}, true},
  };
}

std::vector<PagedCase> pagedCases() {
  return {
      {"mha", F, 8, 2, 16, NHD, false, {1, 4, 0, 16}, {3000, 4, 0, 900}},
      {"sigmoid_full", F, 8, 8, 1, NHD, true, {0, 1, 3}, {5, 2000, 100}},
      {"relu_full", BF, 16, 2, 16, HND, true, {7, 2, 1}, {1200, 2, 4000}},
      {"retention_combine", F, 8, 1, 1, HND, false, {3, 0, 5}, {800, 7, 40}},
      {"mha_full", BF, 32, 4, 16, NHD, true, {2, 16, 1, 1, 0}, {64, 1000, 0, 5000, 3}},
  };
}

/// ATTNC_PACKED_COMPILE_ONLY=sm_90a (or sm_80): every kernel the cases use
/// compiled into the kernel cache without a GPU (the calls stop at the
/// missing driver after compiling).
int compileOnly(const char *ArchName) {
  std::optional<GpuArch> Arch = archFromName(ArchName);
  if (!Arch) {
    std::fprintf(stderr, "ATTNC_PACKED_COMPILE_ONLY: unknown arch %s\n", ArchName);
    return 2;
  }
  runtime::PrecompileSet Fwd;
  runtime::PrecompileSet Dec;
  Dec.Forward = false;
  Dec.Decode = true;
  int N = 0;
  std::vector<ForwardCase> FC = forwardCases();
  FC.push_back({"mha", F, 8, 2, {3, 0, 1}, {600, 5, 1}, true});
  for (const ForwardCase &C : FC) {
    runtime::Attention A(makeDefinition(C.Def), forwardSignature(C, Arch));
    A.precompile(Fwd); // the short-query rule's kernel too
    ++N;
  }
  std::vector<std::pair<std::string, DType>> Paged;
  for (const PagedCase &C : pagedCases())
    Paged.push_back({C.Def, C.Dt});
  for (const char *Def : {"mha", "sigmoid_full"})
    Paged.push_back({Def, F});
  for (const auto &[Def, Dt] : Paged) {
    runtime::Attention A(pagedDefinition(Def), pagedSignature(Dt, Arch));
    A.precompile(Dec);
    ++N;
  }
  // The paged prefill cases' kernel (compiled before the device is needed).
  runtime::Signature PS = signature(F);
  PS.Arch = Arch;
  runtime::Attention A(makeDefinition("mha"), PS);
  void *P = reinterpret_cast<void *>(uintptr_t(1) << 20);
  for (int64_t Page : {1, 16}) {
    runtime::PagedKV KV;
    KV.KCache = TensorView::contiguous(P, F, {4, Page, 2, D});
    KV.VCache = KV.KCache;
    KV.BlockTable = TensorView::contiguous(P, DType::I32, {1, 64});
    KV.SeqLens = TensorView::contiguous(P, DType::I32, {1});
    KV.MaxSeqlenKv = 64;
    TensorView Q = TensorView::contiguous(P, F, {4, 8, D});
    TensorView Fin = TensorView::contiguous(P, DType::F32, {1, 8, 4});
    try {
      A.prefillPaged(Q, TensorView::contiguous(P, DType::I32, {2}), 4, KV, Q, &Fin);
    } catch (const DriverError &) {
    }
    ++N;
  }
  std::printf("compiled the kernels of %d packed decode cases\n", N);
  return 0;
}

} // namespace

int main() {
  if (const char *Only = std::getenv("ATTNC_PACKED_COMPILE_ONLY"))
    return compileOnly(Only);
  if (!announceDevice())
    return 77;
  CaseGuard Guard;
  const char *Only = std::getenv("ATTNC_PACKED_ONLY");
  if (Only && std::string(Only) != "small") {
    std::printf("ATTNC_PACKED_ONLY=%s: expected small\n", Only);
    return 2;
  }
  if (Only) {
    // Small cases, each with a split over the keys: a sanitizer's run.
    Guard.run("small forward", [&] {
      return forwardCase({"mha", F, 8, 2, {3, 0, 1}, {600, 5, 1}, true}, 1);
    });
    Guard.run("small paged 1", [&] {
      return pagedCase({"sigmoid_full", F, 8, 2, 1, NHD, true, {2, 1}, {600, 3}}, 2);
    });
    Guard.run("small paged 16", [&] {
      return pagedCase({"mha", F, 8, 2, 16, HND, false, {4, 0, 1}, {600, 0, 17}}, 3);
    });
    Guard.run("small prefill 1", [&] { return prefillCase(1, 4); });
    Guard.run("small prefill 16", [&] { return prefillCase(16, 5); });
  } else {
    uint64_t Seed = 10;
    for (const ForwardCase &C : forwardCases())
      Guard.run(C.Def, [&] { return forwardCase(C, Seed++); });
    for (const PagedCase &C : pagedCases())
      Guard.run(C.Def, [&] { return pagedCase(C, Seed++); });
    Guard.run("graph replay", [&] { return graphReplay("mha", false, 101); });
    Guard.run("graph replay csr", [&] { return graphReplay("sigmoid_full", true, 102); });
    Guard.run("device checks", [&] { return deviceChecks(103); });
  }
  std::printf("%s\n",
              Guard.pass() ? "all packed decode cases pass" : "some packed decode cases FAIL");
  return Guard.pass() ? 0 : 1;
}
