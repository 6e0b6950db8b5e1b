// GPU test of reusable block masks (Attention::makeBlockMask,
// blockMaskFromLists): one mask passed to the forward and backward calls of
// two Attention objects (two layers) launches no classification, and their
// results match the fp64 reference and, bit for bit, the calls that
// classify; a mask made again for new document ids follows them; a mask
// given as lists in FlexAttention's layout (other block sizes than the
// kernels') gives the same results; mismatched masks are refused. On
// sm_90, fwd_sm90's persistent kernel gives the plain one's bits over many
// tiles a CTA, taking them from its counters call after call (tiles
// without a key block among them), and is chosen for a document mask from
// a block mask's own visit counts. Without a block mask, the forward and
// the backward build their block lists once per kept key for a mask that
// reads no tensor (alternating keys build once each; a key beyond the
// bound evicts the least recently used).
#include "BackwardCheck.h"
#include "GpuSupport.h"
#include "TestDefinitions.h"

#include "BackwardRunner.h"
#include "BlockMaskData.h"
#include "ListVisits.h"
#include "MaskClassify.h"

#include "Examples.h"
#include "attn/Error.h"
#include "attn/codegen/Arch.h"
#include "attn/reference/Attention.h"

#include <fmt/format.h>

#include <cstdio>
#include <functional>
#include <limits>
#include <thread>

using namespace attn;
using namespace attn::gputest;
using reference::Tensor;

namespace {

struct Case {
  std::string Def;
  int B, H, Hkv, S;
};

/// Whether \p C's mask keeps (q, k) of batch \p b (ids shifted by \p Shift,
/// as tokenInput).
bool kept(const Case &C, int b, int q, int k, int Shift) {
  if (C.Def == "mha_document_ids")
    return q >= k && documentId(b + Shift, q) == documentId(b + Shift, k);
  if (C.Def == "mha_prefix_lm")
    return q >= k || k < 64;
  if (C.Def == "mha_window")
    return q >= k && q - k < 100;
  throw InternalError("gpu_blockmask_test: no host mask for " + C.Def);
}

/// The lists of \p C's mask per batch, in blocks of BQ x BK.
runtime::BlockLists listsOf(const Case &C, int BQ, int BK, int Shift) {
  runtime::BlockLists L;
  L.Batch = C.B;
  L.BlockQ = BQ;
  L.BlockKv = BK;
  const int QB = (C.S + BQ - 1) / BQ, KB = (C.S + BK - 1) / BK;
  for (int b = 0; b < C.B; ++b)
    for (int m = 0; m < QB; ++m) {
      std::vector<int32_t> P(KB, 0), F(KB, 0);
      int NP = 0, NF = 0;
      for (int n = 0; n < KB; ++n) {
        bool Any = false, All = true;
        for (int q = m * BQ; q < std::min((m + 1) * BQ, C.S); ++q)
          for (int k = n * BK; k < std::min((n + 1) * BK, C.S); ++k) {
            bool K = kept(C, b, q, k, Shift);
            Any = Any || K;
            All = All && K;
          }
        if (Any && All)
          F[NF++] = n;
        else if (Any)
          P[NP++] = n;
      }
      L.KvNumBlocks.push_back(NP);
      L.FullKvNumBlocks.push_back(NF);
      L.KvIndices.insert(L.KvIndices.end(), P.begin(), P.end());
      L.FullKvIndices.insert(L.FullKvIndices.end(), F.begin(), F.end());
    }
  return L;
}

struct Errors {
  double Err = 0, Plain = 0;
  void add(DType T, double Got, double Exact, double PlainV) {
    Err = std::max(Err, std::isnan(Got) ? std::numeric_limits<double>::infinity()
                                        : std::fabs(Got - Exact));
    Plain = std::max(Plain, std::fabs(roundTo(T, PlainV) - Exact));
  }
  double tol(DType T) const { return 2 * Plain + (T == DType::F16 ? 1e-3 : 8e-3); }
  bool pass(DType T) const { return Err <= tol(T); }
};

/// One problem's tensors on the host and the device, [B,S,H,D] (BSHD).
struct Problem {
  Case C;
  DType Dt = DType::F16;
  int D = 64;
  std::vector<uint16_t> Q, K, V, DO;
  reference::AttentionInputs In;
  Tensor DORef;
  std::unique_ptr<DeviceBuffer> DQ, DK, DV, DDO, O, F, GQ, GK, GV;
  std::vector<std::unique_ptr<DeviceBuffer>> Keep;
  runtime::InputMap Inputs;
};

std::vector<uint16_t> randomBits(std::mt19937_64 &Rng, DType T, int B, int H,
                                 int S, int D, Tensor &Ref) {
  std::normal_distribution<double> N(0.0, 1.0);
  std::vector<uint16_t> Bits(size_t(B) * S * H * D);
  Ref = Tensor({B, H, S, D});
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < S; ++s)
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) {
          uint16_t X = toBits(T, N(Rng));
          Bits[((size_t(b) * S + s) * H + h) * D + d] = X;
          Ref.at({b, h, s, d}) = fromBits(T, X);
        }
  return Bits;
}

void setInputs(Problem &P, const ir::Graph &G, int Shift) {
  P.Inputs.clear();
  for (const ir::InputDecl &D : G.decls().Inputs) {
    if (D.Shape == ir::InputShape::Scalar) {
      int32_t X = int32_t(std::lround((D.SampleLo + D.SampleHi) / 2));
      P.Inputs[D.Name] = X;
      P.In.Inputs[D.Name] = Tensor({}, double(X));
      continue;
    }
    Tensor T = tokenInput(D, P.C.B, P.C.H, P.C.S, P.C.S, Shift);
    P.Inputs[D.Name] = uploadInput(D.Elem == ir::InputType::I32, T.Data,
                                   T.Shape, P.Keep);
    P.In.Inputs[D.Name] = T;
  }
}

Problem makeProblem(const Case &C, const ir::Graph &G, uint64_t Seed) {
  Problem P;
  P.C = C;
  std::mt19937_64 Rng(Seed);
  P.Q = randomBits(Rng, P.Dt, C.B, C.H, C.S, P.D, P.In.Q);
  P.K = randomBits(Rng, P.Dt, C.B, C.Hkv, C.S, P.D, P.In.K);
  P.V = randomBits(Rng, P.Dt, C.B, C.Hkv, C.S, P.D, P.In.V);
  P.DO = randomBits(Rng, P.Dt, C.B, C.H, C.S, P.D, P.DORef);
  P.DQ = upload(P.Q);
  P.DK = upload(P.K);
  P.DV = upload(P.V);
  P.DDO = upload(P.DO);
  P.O = std::make_unique<DeviceBuffer>(P.Q.size() * 2);
  P.F = std::make_unique<DeviceBuffer>(size_t(C.B) * C.H * C.S * 4);
  P.GQ = std::make_unique<DeviceBuffer>(P.Q.size() * 2);
  P.GK = std::make_unique<DeviceBuffer>(P.K.size() * 2);
  P.GV = std::make_unique<DeviceBuffer>(P.V.size() * 2);
  setInputs(P, G, 0);
  return P;
}

/// o, dq, dk, dv of one forward and backward of \p A (with \p BM if given).
std::vector<std::vector<uint16_t>> run(runtime::Attention &A, Problem &P,
                                       const runtime::BlockMask *BM,
                                       const runtime::InputMap *Inputs = nullptr) {
  const runtime::InputMap &In = Inputs ? *Inputs : P.Inputs;
  const Case &C = P.C;
  auto View = [&](DeviceBuffer &B, int H) {
    return runtime::TensorView::contiguous(B.get(), DType::F16,
                                           {C.B, C.S, H, P.D});
  };
  runtime::TensorView Fin = runtime::TensorView::contiguous(
      P.F->get(), DType::F32, {1, C.B, C.H, C.S});
  for (DeviceBuffer *B : {P.O.get(), P.GQ.get(), P.GK.get(), P.GV.get()})
    B->poison();
  runtime::TensorView O = View(*P.O, C.H);
  A.forward(View(*P.DQ, C.H), View(*P.DK, C.Hkv), View(*P.DV, C.Hkv), O, &Fin,
            In, nullptr, BM);
  A.backward(View(*P.DQ, C.H), View(*P.DK, C.Hkv), View(*P.DV, C.Hkv), &O,
             View(*P.DDO, C.H), &Fin, View(*P.GQ, C.H), View(*P.GK, C.Hkv),
             View(*P.GV, C.Hkv), In, {}, nullptr, BM);
  auto &Drv = runtime::CudaDriver::get();
  Drv.check(Drv.cuCtxSynchronize(), "forward and backward");
  std::vector<std::vector<uint16_t>> Out;
  for (DeviceBuffer *B : {P.O.get(), P.GQ.get(), P.GK.get(), P.GV.get()}) {
    Out.emplace_back(B->size() / 2);
    B->download(Out.back().data(), B->size());
  }
  return Out;
}

/// \p Got (o, dq, dk, dv) against the fp64 reference of \p P's inputs.
bool checkReference(const runtime::Attention &A, const Problem &P,
                    const std::vector<std::vector<uint16_t>> &Got,
                    std::string &Line) {
  const Case &C = P.C;
  const CompiledDefinition &CD = A.definition();
  reference::AttentionInputs In = P.In;
  reference::AttentionOutputs Ref = reference::attentionOnline(CD, In, 0);
  In.RoundProbs = [&](double X) { return roundTo(P.Dt, X); };
  reference::AttentionOutputs Plain = reference::attentionOnline(CD, In, 0);
  BackwardCheck Chk = checkBackward(
      CD, P.In, Ref, P.DORef, [&](double X) { return roundTo(P.Dt, X); },
      std::max(1u, std::thread::hardware_concurrency()));
  const Tensor *Exact[4] = {&Ref.O, &Chk.Exact.DQ, &Chk.Exact.DK,
                            &Chk.Exact.DV};
  const Tensor *Pl[4] = {&Plain.O, &Chk.Plain.DQ, &Chk.Plain.DK,
                         &Chk.Plain.DV};
  const char *What[4] = {"o", "dq", "dk", "dv"};
  bool Pass = true;
  for (int I = 0; I < 4; ++I) {
    const int H = I == 0 || I == 1 ? C.H : C.Hkv;
    Errors E;
    for (int b = 0; b < C.B; ++b)
      for (int s = 0; s < C.S; ++s)
        for (int h = 0; h < H; ++h)
          for (int d = 0; d < P.D; ++d)
            E.add(P.Dt,
                  fromBits(P.Dt, Got[I][((size_t(b) * C.S + s) * H + h) * P.D + d]),
                  Exact[I]->at({b, h, s, d}), Pl[I]->at({b, h, s, d}));
    Pass = Pass && E.pass(P.Dt);
    Line += fmt::format(" {} {:.1e}/{:.1e}", What[I], E.Err, E.tol(P.Dt));
  }
  return Pass;
}

int Passed = 0, Failed = 0;

void report(const std::string &Name, bool Pass, const std::string &Line) {
  std::printf("%-52s %s  %s\n", Name.c_str(), Line.c_str(),
              Pass ? "pass" : "FAIL");
  std::fflush(stdout);
  (Pass ? Passed : Failed)++;
}

/// Runs \p F, which must throw a UserError whose message holds \p Want.
void refused(const std::string &Name, const std::string &Want,
             const std::function<void()> &F) {
  try {
    F();
    report(Name, false, "no error");
  } catch (const UserError &E) {
    std::string Msg = E.what();
    report(Name, Msg.find(Want) != std::string::npos, "\"" + Msg + "\"");
  }
}

void runCase(const Case &C, uint64_t Seed) {
  dsl::AttentionDef Def = makeDefinition(C.Def);
  runtime::Signature Sig;
  Sig.Dtype = DType::F16;
  Sig.HeadDim = Sig.HeadDimV = 64;
  Sig.NeedsBackward = true;
  Sig.Backend = "generated";
  // Two layers: two Attention objects of the same definition.
  runtime::Attention A1(Def, Sig), A2(Def, Sig);
  Problem P = makeProblem(C, *A1.definition().Graph, Seed);
  std::string Name = fmt::format("{} b{} h{}/{} s{}", C.Def, C.B, C.H, C.Hkv, C.S);

  auto Classified = run(A1, P, nullptr);
  runtime::MaskShape S;
  S.Batch = C.B;
  S.Heads = C.H;
  S.HeadsKv = C.Hkv;
  S.SeqQ = S.SeqKv = C.S;
  runtime::BlockMask BM = A1.makeBlockMask(S, P.Inputs, nullptr, true);
  const uint64_t Before = runtime::classifyLaunches();
  auto Got1 = run(A1, P, &BM);
  auto Got2 = run(A2, P, &BM);
  const uint64_t Launched = runtime::classifyLaunches() - Before;
  std::string Line;
  bool Pass = checkReference(A1, P, Got2, Line);
  const bool Same = Got1 == Classified && Got2 == Classified;
  report(Name + " reused", Pass && Same && Launched == 0,
         Line + fmt::format(" same bits {} classifications {} [{}]", Same,
                            Launched, BM.describe()));

  // New document ids: a mask made again for them (the old one would be
  // stale: a BlockMask is what it was made from).
  setInputs(P, *A1.definition().Graph, 3);
  runtime::BlockMask BM3 = A2.makeBlockMask(S, P.Inputs, nullptr, true);
  Line.clear();
  Pass = checkReference(A2, P, run(A2, P, &BM3), Line);
  report(Name + " new inputs, new mask", Pass, Line);

  // Given lists, in blocks the kernels do not use (one list per batch).
  const runtime::BlockLists L = listsOf(C, 96, 80, 3);
  runtime::BlockMask Given = A2.blockMaskFromLists(S, L, true);
  const uint64_t Before2 = runtime::classifyLaunches();
  auto GotL = run(A1, P, &Given);
  Line.clear();
  Pass = checkReference(A1, P, GotL, Line);
  report(Name + " given lists 96x80",
         Pass && runtime::classifyLaunches() == Before2,
         Line + " [" + Given.describe() + "]");

  // Refusals.
  runtime::MaskShape Other = S; // the inputs fit: token inputs have no heads
  Other.Heads = 2 * C.H;
  runtime::BlockMask Wrong = A1.makeBlockMask(Other, P.Inputs, nullptr, false);
  refused(Name + " other shape", "block mask: made for [batch",
          [&] { run(A1, P, &Wrong); });
  runtime::BlockMask FwdOnly = A1.makeBlockMask(S, P.Inputs, nullptr, false);
  refused(Name + " forward-only mask in backward",
          "made without the backward's lists", [&] { run(A1, P, &FwdOnly); });
  runtime::Attention Causal(makeDefinition("mha"), Sig);
  const runtime::InputMap None;
  refused(Name + " mask of another definition", "block mask: made for the mask",
          [&] { run(Causal, P, &BM, &None); });
}

/// Sets the scalar input \p Name of \p P to \p X (device call and reference).
void setScalar(Problem &P, const std::string &Name, int32_t X) {
  P.Inputs[Name] = X;
  P.In.Inputs[Name] = Tensor({}, double(X));
}

/// The block lists without a block mask (ListReuse, kept per stream for up
/// to MaxKeys keys by the forward and the backward): a mask that reads no
/// tensor builds them on the first call and not again while the shapes and
/// scalar inputs repeat; a new prefix length or batch builds them again (a
/// stale list would fail the reference for the prefix, and the count for
/// the batch, whose lists are the same); going back to the first key and
/// alternating between the two builds nothing more (no classification
/// launched, forward or backward) and gives the first calls' bits. A
/// prefix length per kept slot and one more evicts the first key, which
/// then builds again. A mask that reads tensors (document ids) builds them
/// on every call.
void runBackwardReuse(const Case &C, uint64_t Seed) {
  dsl::AttentionDef Def = makeDefinition(C.Def);
  runtime::Signature Sig;
  Sig.Dtype = DType::F16;
  Sig.HeadDim = Sig.HeadDimV = 64;
  Sig.NeedsBackward = true;
  Sig.Backend = "generated";
  runtime::Attention A(Def, Sig);
  const ir::Graph &G = *A.definition().Graph;
  const bool Reusable = !analysis::analyzeMask(G).ReadsTensorInput;
  const bool Prefix = C.Def == "mha_prefix_lm";
  Problem P = makeProblem(C, G, Seed);
  std::string Name = fmt::format("backward lists {} b{} h{}/{} s{}", C.Def, C.B, C.H,
                                 C.Hkv, C.S);
  // Backward list builds and classification launches (forward and
  // backward) of F.
  struct Count {
    uint64_t Builds, Launches;
  };
  auto Builds = [&](const std::function<void()> &F) {
    const uint64_t Before = runtime::backwardListBuilds();
    const uint64_t Launched = runtime::classifyLaunches();
    F();
    return Count{runtime::backwardListBuilds() - Before,
                 runtime::classifyLaunches() - Launched};
  };
  std::vector<std::vector<uint16_t>> First, Again, Other, Back, OtherAgain;
  const Count B1 = Builds([&] { First = run(A, P, nullptr); });
  const Count B2 = Builds([&] { Again = run(A, P, nullptr); });
  std::string Line;
  bool Pass = checkReference(A, P, Again, Line);
  report(Name + " repeated call",
         Pass && Again == First && B1.Builds == 1 &&
             B2.Builds == (Reusable ? 0u : 1u) && (B2.Launches == 0) == Reusable,
         Line + fmt::format(" same bits {} builds {} then {}, classifications "
                            "{} then {}",
                            Again == First, B1.Builds, B2.Builds, B1.Launches,
                            B2.Launches));
  // Another key: a new prefix length, or one more batch.
  Case C2 = C;
  C2.B = C.B + 1;
  Problem P2 = Prefix ? Problem() : makeProblem(C2, G, Seed + 100);
  if (Prefix)
    setScalar(P, "prefix_len", 200);
  Problem &Q = Prefix ? P : P2;
  const Count B3 = Builds([&] { Other = run(A, Q, nullptr); });
  Line.clear();
  Pass = checkReference(A, Q, Other, Line);
  report(Name + (Prefix ? " prefix 64 -> 200" : " batch + 1"),
         Pass && B3.Builds == 1 && B3.Launches > 0,
         Line + fmt::format(" builds {}", B3.Builds));
  // Back and forth: A, B, A, B builds twice in all, not four times.
  if (Prefix)
    setScalar(P, "prefix_len", 64);
  const Count B4 = Builds([&] { Back = run(A, P, nullptr); });
  if (Prefix)
    setScalar(P, "prefix_len", 200);
  const Count B5 = Builds([&] { OtherAgain = run(A, Q, nullptr); });
  Line.clear();
  Pass = checkReference(A, Q, OtherAgain, Line);
  const uint64_t Want = Reusable ? 0 : 1;
  report(Name + " alternating keys",
         Pass && Back == First && OtherAgain == Other && B4.Builds == Want &&
             B5.Builds == Want && (B4.Launches + B5.Launches == 0) == Reusable,
         Line + fmt::format(" same bits {} {} builds {} {} classifications {} {}",
                            Back == First, OtherAgain == Other, B4.Builds,
                            B5.Builds, B4.Launches, B5.Launches));
  if (!Prefix)
    return;
  // A prefix length for every other kept slot, then one more: the first
  // key (64, least recently used) is evicted and builds again, right.
  uint64_t Filled = 0;
  for (unsigned I = 0; I + 1 < runtime::ListReuse::MaxKeys; ++I) {
    setScalar(P, "prefix_len", 300 + 50 * int(I));
    Filled += Builds([&] { run(A, P, nullptr); }).Builds;
  }
  setScalar(P, "prefix_len", 64);
  const Count B6 = Builds([&] { Back = run(A, P, nullptr); });
  Line.clear();
  Pass = checkReference(A, P, Back, Line);
  report(Name + " evicted key builds again",
         Pass && Back == First && Filled == runtime::ListReuse::MaxKeys - 1 &&
             B6.Builds == 1 && B6.Launches > 0,
         Line + fmt::format(" fills {} builds {} classifications {}", Filled,
                            B6.Builds, B6.Launches));
}

/// o and the finals of one forward of \p A over \p P (with \p BM if given).
std::vector<std::vector<uint16_t>> forwardOnly(runtime::Attention &A, Problem &P,
                                               const runtime::BlockMask *BM) {
  const Case &C = P.C;
  auto View = [&](DeviceBuffer &B, int H) {
    return runtime::TensorView::contiguous(B.get(), DType::F16, {C.B, C.S, H, P.D});
  };
  runtime::TensorView Fin =
      runtime::TensorView::contiguous(P.F->get(), DType::F32, {1, C.B, C.H, C.S});
  P.O->poison();
  P.F->poison();
  A.forward(View(*P.DQ, C.H), View(*P.DK, C.Hkv), View(*P.DV, C.Hkv), View(*P.O, C.H),
            &Fin, P.Inputs, nullptr, BM);
  auto &Drv = runtime::CudaDriver::get();
  Drv.check(Drv.cuCtxSynchronize(), "forward");
  std::vector<std::vector<uint16_t>> Out;
  for (DeviceBuffer *B : {P.O.get(), P.F.get()}) {
    Out.emplace_back(B->size() / 2);
    B->download(Out.back().data(), B->size());
  }
  return Out;
}

/// fwd_sm90's persistent kernel (sm90.m128n128s3p at d64) against the plain
/// one of the same blocks, bit for bit (a tile's arithmetic is the same),
/// over more tiles than the device has SMs, so that each CTA walks several
/// tiles (the ring's and Q's mbarrier phases carried across them), with the
/// call's own classification and with a block mask (the fp64 reference
/// checks of the persistent kernel are gpu_forward_test's, run with
/// ATTNC_FWD_PERSISTENT=1). Skipped where fwd_sm90 does not run.
/// A definition of the persistent cases: a test definition, or
/// mha_empty256, whose rows 0-255 see no key (two whole query blocks of
/// 128 with no key block to visit: tiles the persistent kernel hands over
/// without a Q).
dsl::AttentionDef persistentDefinition(const std::string &Name) {
  if (Name != "mha_empty256")
    return makeDefinition(Name);
  dsl::AttentionDef D = examples::mha();
  D.name = Name;
  D.mask_mod = [](dsl::SymbolScalar, dsl::SymbolScalar, dsl::SymbolScalar q,
                  dsl::SymbolScalar k) { return k + 256 <= q; };
  return D;
}

void runPersistent(const Case &C, uint64_t Seed) {
  if (runtime::currentDevice().Major != 9) {
    std::printf("persistent %s: skipped (not sm_90)\n", C.Def.c_str());
    return;
  }
  dsl::AttentionDef Def = persistentDefinition(C.Def);
  runtime::Signature Sig;
  Sig.Dtype = DType::F16;
  Sig.HeadDim = Sig.HeadDimV = 64;
  Sig.Backend = "generated";
  Sig.Config = "sm90.m128n128s3";
  runtime::Signature SigP = Sig;
  SigP.Config = "sm90.m128n128s3p";
  runtime::Attention Plain(Def, Sig), Persist(Def, SigP);
  Problem P = makeProblem(C, *Plain.definition().Graph, Seed);
  const int64_t Tiles = int64_t((C.S + 127) / 128) * C.B * C.H;
  std::string Name = fmt::format("persistent {} b{} h{}/{} s{} ({} tiles, {} SMs)", C.Def,
                                 C.B, C.H, C.Hkv, C.S, Tiles,
                                 runtime::currentDevice().MultiProcessors);
  auto Want = forwardOnly(Plain, P, nullptr);
  auto Got = forwardOnly(Persist, P, nullptr);
  runtime::MaskShape S;
  S.Batch = C.B;
  S.Heads = C.H;
  S.HeadsKv = C.Hkv;
  S.SeqQ = S.SeqKv = C.S;
  runtime::BlockMask BM = Persist.makeBlockMask(S, P.Inputs, nullptr, false);
  auto GotBM = forwardOnly(Persist, P, &BM);
  // A third call: the counters the calls before left must be back at 0.
  auto Again = forwardOnly(Persist, P, &BM);
  report(Name,
         Got == Want && GotBM == Want && Again == Want &&
             Tiles > runtime::currentDevice().MultiProcessors,
         fmt::format("same bits: classified {}, block mask {}, again {}", Got == Want,
                     GotBM == Want, Again == Want));
}

/// The persistent choice from a block mask's own counts: a document mask
/// reads tensors, so the host's analysis cannot count its visits, and a
/// call without a block mask (16 key blocks a row) takes the plain kernel;
/// once a block mask's counts are back (after a synchronise), the default
/// forward given it takes the persistent one where their mean allows, with
/// the plain kernel's bits. A mask made again forgets the mean until its
/// new counts are back, and then has theirs.
void runPersistentChoice(const Case &C, uint64_t Seed) {
  if (runtime::currentDevice().Major != 9) {
    std::printf("persistent choice %s: skipped (not sm_90)\n", C.Def.c_str());
    return;
  }
  dsl::AttentionDef Def = makeDefinition(C.Def);
  runtime::Signature Sig;
  Sig.Dtype = DType::F16;
  Sig.HeadDim = Sig.HeadDimV = 64;
  Sig.Backend = "generated";
  runtime::Signature SigPlain = Sig;
  SigPlain.Config = "sm90.m128n128s3";
  runtime::Attention A(Def, Sig), Plain(Def, SigPlain);
  Problem P = makeProblem(C, *A.definition().Graph, Seed);
  runtime::MaskShape S;
  S.Batch = C.B;
  S.Heads = C.H;
  S.HeadsKv = C.Hkv;
  S.SeqQ = S.SeqKv = C.S;
  auto &Drv = runtime::CudaDriver::get();
  // The mean of the lists on the device, read back here.
  auto DeviceMean = [&](const runtime::BlockMask &BM) {
    const runtime::BlockMaskData &D = BM.data();
    std::vector<int32_t> Count(size_t(D.Groups) * ((C.S + D.FwdBlockM - 1) / D.FwdBlockM));
    Drv.check(Drv.cuMemcpyDtoH(Count.data(), CUdeviceptr(D.FwdCount), Count.size() * 4),
              "block counts");
    double Sum = 0;
    for (int32_t N : Count)
      Sum += N;
    return Sum / double(Count.size());
  };
  runtime::BlockMask BM = A.makeBlockMask(S, P.Inputs, nullptr, false);
  Drv.check(Drv.cuCtxSynchronize(), "block mask");
  const std::optional<double> Mean = BM.data().FwdVisits.mean();
  const double Want = DeviceMean(BM);
  const int64_t Tiles = int64_t((C.S + 127) / 128) * C.B * C.H;
  const bool Expect = runtime::persistentHeuristic(
      Tiles, Want, (C.S + 127) / 128, runtime::currentDevice().MultiProcessors,
      runtime::PersistentMaxListMeanVisits);
  const auto Ref = forwardOnly(Plain, P, nullptr);
  uint64_t Before = runtime::persistentForwardLaunches();
  const auto GotBM = forwardOnly(A, P, &BM);
  const uint64_t WithMask = runtime::persistentForwardLaunches() - Before;
  Before = runtime::persistentForwardLaunches();
  const auto Got = forwardOnly(A, P, nullptr);
  const uint64_t Without = runtime::persistentForwardLaunches() - Before;
  // Made again for other ids: unknown until its counts are back.
  setInputs(P, *A.definition().Graph, 1);
  A.refreshBlockMask(BM, P.Inputs);
  Drv.check(Drv.cuCtxSynchronize(), "block mask again");
  const std::optional<double> Again = BM.data().FwdVisits.mean();
  const double WantAgain = DeviceMean(BM);
  report(fmt::format("persistent choice {} b{} h{} s{}", C.Def, C.B, C.H, C.S),
         Mean && *Mean == Want && Expect && WithMask == 1 && Without == 0 &&
             GotBM == Ref && Got == Ref && Again && *Again == WantAgain,
         fmt::format("mean {:.3f} (lists {:.3f}, again {:.3f}/{:.3f}), persistent launches "
                     "{} with the mask, {} without, same bits {} {}",
                     Mean.value_or(-1), Want, Again.value_or(-1), WantAgain, WithMask,
                     Without, GotBM == Ref, Got == Ref));
}

} // namespace

/// --precompile ARCH: the kernels the cases use, compiled for \p Arch into
/// the kernel cache without a GPU (the forwards and backwards of the
/// definitions, the persistent forwards and their plain twins), so that a
/// device run reads them instead of compiling one after another.
int precompile(GpuArch Arch) {
  runtime::Signature Sig;
  Sig.Dtype = DType::F16;
  Sig.HeadDim = Sig.HeadDimV = 64;
  Sig.NeedsBackward = true;
  Sig.Backend = "generated";
  Sig.Arch = Arch;
  for (const char *Name : {"mha_document_ids", "mha_prefix_lm", "mha_window", "mha"}) {
    runtime::Attention A(makeDefinition(Name), Sig);
    runtime::BackwardRunner B(
        A.definition(),
        runtime::kernelTarget(A.definition(), Sig, Arch, runtime::Direction::Backward),
        A.backwardChoice());
    std::printf("compiled %s: %s | %s\n", Name, A.forwardChoice().str().c_str(),
                A.backwardChoice().str().c_str());
  }
  if (Arch != GpuArch::Sm90a)
    return 0;
  runtime::Signature Fwd = Sig;
  Fwd.NeedsBackward = false;
  for (const char *Name : {"mha_document_ids", "mha_prefix_lm", "mha_window", "mha_empty256"})
    for (const char *Cfg : {"sm90.m128n128s3", "sm90.m128n128s3p"}) {
      Fwd.Config = Cfg;
      runtime::Attention A(persistentDefinition(Name), Fwd);
      std::printf("compiled %s: %s\n", Name, A.forwardChoice().str().c_str());
    }
  return 0;
}

int main(int Argc, char **Argv) {
  if (Argc == 3 && std::string(Argv[1]) == "--precompile")
    return precompile(parseArch(Argv[2]));
  if (Argc != 1) {
    std::fprintf(stderr, "usage: gpu_blockmask_test [--precompile ARCH]\n");
    return 2;
  }
  auto &Drv = runtime::CudaDriver::get();
  if (!Drv.available()) {
    std::printf("skipped: %s\n", Drv.unavailableReason().c_str());
    return 77;
  }
  std::printf("device: %s\n", runtime::currentDevice().Name.c_str());
  const Case Cases[] = {{"mha_document_ids", 2, 4, 2, 700},
                        {"mha_prefix_lm", 1, 2, 2, 333},
                        {"mha_window", 2, 2, 1, 777}};
  uint64_t Seed = 5;
  // Each case with the next seed; a throw is a failure, printed with the
  // group's label, and the next case runs.
  auto RunAll = [&](const char *Label, const auto &Group,
                    void (*Run)(const Case &, uint64_t)) {
    for (const Case &C : Group) {
      try {
        Run(C, Seed++);
      } catch (const std::exception &E) {
        std::printf("%s%s ERROR %s\n", Label, C.Def.c_str(), E.what());
        ++Failed;
      }
    }
  };
  RunAll("", Cases, runCase);
  const Case Lists[] = {{"mha_prefix_lm", 1, 4, 2, 1000},
                        {"mha_window", 1, 2, 1, 1500},
                        {"mha_document_ids", 2, 2, 2, 600}};
  RunAll("backward lists ", Lists, runBackwardReuse);
  const Case Many[] = {{"mha_document_ids", 4, 32, 8, 600},
                       {"mha_prefix_lm", 2, 64, 64, 1000},
                       {"mha_window", 8, 16, 4, 512},
                       {"mha_empty256", 4, 32, 32, 700}};
  RunAll("persistent ", Many, runPersistent);
  const Case Choice[] = {{"mha_document_ids", 2, 32, 32, 2048}};
  RunAll("persistent choice ", Choice, runPersistentChoice);
  std::printf("%d passed, %d failed\n", Passed, Failed);
  return Failed ? 1 : 0;
}
