// GPU test of packed variable-length batches (Layout::THD, VarlenBatch):
// ragged cu_seqlens with empty sequences and sequences of one token, causal
// and unmasked softmax, sliding windows, a prefix-LM and chunks (masks whose
// empty and full key blocks are found from the block's box), ALiBi (a score_mod of q_idx
// with per-head inputs and their gradients), per-row, per-key and per-token
// inputs read by token (mha_document, mha_document_ids, mha_row_scale),
// grouped k/v heads, f16 and bf16, forward on the
// default skeleton and on fwd_sm80, and the backward (bitwise the same over
// three runs), against the fp64 reference with the FlashAttention tolerance
// rule of the dense tests.
// Outputs are poisoned (NaN) before every run. With --bench [H [D ...]]:
// TFLOPS of a batch of 32 sequences of lengths uniform in [64, 8192] (H32
// D128 f16 unless named), of the packed backward it ran before the lean
// step had a packed form, and of dense attention of the same average
// length. Exits 77 (ctest:
// skipped) where there is no GPU. --quick: the f16 cases only (d64 and
// d128: bwd_sm90's packed lean step, dQ's rows split at d64; bwd_sm80's
// packed two-kernel mode and the plain lockstep step named);
// ATTNC_GPU_TEST_FILTER=NAME: one definition's cases, ATTNC_GPU_TEST_CASE=N
// the N-th of them only; the column split of bwd_sm90's packed form is
// named in two d256 cases; --decode: the packed decode cases only (at most
// 16 queries a sequence, decode_sm80, per-row, per-key, per-token and
// per-head inputs through a split over the keys). A last argument
// --compile-only compiles the cases' kernels (after --bench ...: the
// bench's) for sm_90a into the kernel cache, with no GPU. --persistent:
// the persistent packed walk against the plain packed kernel, bit for bit
// (also run before the matrix unless a filter or --decode is given). The
// case matrix and --compile-only are in VarlenCases.cpp, --bench in
// VarlenBench.cpp, --persistent in VarlenPersistent.cpp.
#include "BackwardCheck.h"
#include "BackwardRunner.h"
#include "GpuSupport.h"
#include "TestDefinitions.h"
#include "VarlenCases.h"

#include "attn/Error.h"
#include "attn/reference/Varlen.h"

#include <fmt/format.h>

#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace attn;
using namespace attn::gputest;
using namespace attn::gputest::varlen;
using reference::Tensor;

namespace {

/// Packed [T,H,D] 16-bit words and the same values as a reference tensor.
struct Packed {
  std::vector<uint16_t> Bits;
  Tensor Ref;
};

Packed randomPacked(std::mt19937_64 &Rng, DType T, int64_t Tokens, int H, int D) {
  Packed P{std::vector<uint16_t>(size_t(Tokens) * H * D), Tensor({Tokens, H, D})};
  std::normal_distribution<double> N(0.0, 1.0);
  for (size_t I = 0; I < P.Bits.size(); ++I) {
    P.Bits[I] = toBits(T, N(Rng));
    P.Ref.Data[I] = fromBits(T, P.Bits[I]);
  }
  return P;
}

/// Max over elements of |got - exact| and of |round(plain) - exact|.
struct Errors {
  double Err = 0, Plain = 0;
  void add(DType T, double Got, double Exact, double Plain) {
    Err = std::max(Err, std::isnan(Got) ? std::numeric_limits<double>::infinity()
                                        : std::fabs(Got - Exact));
    this->Plain = std::max(this->Plain, std::fabs(roundTo(T, Plain) - Exact));
  }
  double tol(DType T) const { return 2 * Plain + (T == DType::F16 ? 1e-3 : 8e-3); }
  bool pass(DType T) const { return Err <= tol(T); }
};

/// Tokens [T0, T0+S) of packed \p P as a dense [1,H,S,X] tensor, and back.
Tensor unpack(const Tensor &P, int64_t T0, int64_t S) {
  Tensor D({1, P.dim(1), S, P.dim(2)});
  for (int64_t I = 0; I < S; ++I)
    for (int64_t H = 0; H < P.dim(1); ++H)
      for (int64_t X = 0; X < P.dim(2); ++X)
        D.at({0, H, I, X}) = P.at({T0 + I, H, X});
  return D;
}
void pack(Tensor &P, int64_t T0, const Tensor &D) {
  for (int64_t I = 0; I < D.dim(2); ++I)
    for (int64_t H = 0; H < D.dim(1); ++H)
      for (int64_t X = 0; X < D.dim(3); ++X)
        P.at({T0 + I, H, X}) = D.at({0, H, I, X});
}

/// Whether input \p D is indexed by a query token (per_row,
/// per_query_token) or a key token (per_key, per_key_token) of the sequence.
bool querySide(const ir::InputDecl &D) {
  return D.Shape == ir::InputShape::PerRow || D.Shape == ir::InputShape::PerQueryToken;
}
bool tokenIndexed(const ir::InputDecl &D) {
  return querySide(D) || D.Shape == ir::InputShape::PerKey ||
         D.Shape == ir::InputShape::PerKeyToken;
}

/// The packed value of token-indexed input \p D: [H, tokens] (per_row,
/// per_key) or [tokens]. Document ids (int32, or an empty sample range as
/// mha_document's) are documentId over each sequence's key positions,
/// another order per head, a query holding the id of the key position the
/// bottom-right rule aligns it with (row + Lkv − Lq; -1 before the first):
/// ids that differ along the sequence, so that a query reading the token
/// at its shifted q_idx would break the mask. Other inputs: values of their
/// sample range that vary by token and head.
Tensor packedInput(const ir::InputDecl &D, const std::vector<int> &Lq,
                   const std::vector<int> &Lkv, int H) {
  const bool Q = querySide(D);
  const std::vector<int> &L = Q ? Lq : Lkv;
  const bool PerHead = D.Shape == ir::InputShape::PerRow || D.Shape == ir::InputShape::PerKey;
  const bool Ids = D.Elem == ir::InputType::I32 || D.SampleLo == D.SampleHi;
  const int64_t Tokens = std::accumulate(L.begin(), L.end(), int64_t(0));
  Tensor T(PerHead ? std::vector<int64_t>{H, Tokens} : std::vector<int64_t>{Tokens});
  int64_t T0 = 0;
  for (size_t B = 0; B < L.size(); ++B) {
    const int Shift = Q ? Lkv[B] - Lq[B] : 0;
    for (int Hi = 0; Hi < (PerHead ? H : 1); ++Hi)
      for (int I = 0; I < L[B]; ++I) {
        const int64_t Pos = I + Shift, Tok = T0 + I;
        double X = Ids ? (Pos < 0 ? -1.0 : documentId(int64_t(B) + Hi, Pos))
                       : D.SampleLo + (D.SampleHi - D.SampleLo) *
                                          double((Tok * 7 + Hi * 3) % 11) / 10.0;
        X = double(float(X)); // as the device holds it
        (PerHead ? T.at({Hi, Tok}) : T.at({Tok})) = X;
      }
    T0 += L[B];
  }
  return T;
}

/// The custom inputs of sequence \p B as a dense call of one batch:
/// token-indexed inputs sliced to its tokens ([1, H, S] or [1, S]), others
/// as they are.
reference::InputValues sequenceInputs(const ir::Graph &G, const reference::InputValues &All,
                                      int64_t Q0, int64_t Sq, int64_t K0, int64_t Skv) {
  reference::InputValues Out = All;
  for (const ir::InputDecl &D : G.decls().Inputs) {
    if (!tokenIndexed(D))
      continue;
    const Tensor &P = All.at(D.Name);
    const int64_t T0 = querySide(D) ? Q0 : K0, S = querySide(D) ? Sq : Skv;
    Tensor T = P.Shape.size() == 2 ? Tensor({1, P.dim(0), S}) : Tensor({1, S});
    for (int64_t I = 0; I < S; ++I) {
      if (P.Shape.size() == 1) {
        T.at({0, I}) = P.at({T0 + I});
        continue;
      }
      for (int64_t Hi = 0; Hi < P.dim(0); ++Hi)
        T.at({0, Hi, I}) = P.at({Hi, T0 + I});
    }
    Out[D.Name] = T;
  }
  return Out;
}

bool runCase(const Case &C, uint64_t Seed) {
  dsl::AttentionDef Def = makeDefinition(C.Def);
  runtime::Signature Sig;
  Sig.Dtype = C.Dt;
  Sig.HeadDim = Sig.HeadDimV = C.D;
  Sig.TensorLayout = Layout::THD;
  Sig.Skeleton = C.Skeleton;
  Sig.BackwardConfig = C.BwdConfig;
  Sig.Backend = "generated";
  runtime::Attention Att(Def, Sig);
  const CompiledDefinition &CD = Att.definition();
  const ir::Graph &G = *CD.Graph;
  const std::vector<int> CuQ = cumulative(C.Lq), CuKv = cumulative(C.Lkv);
  const int64_t Tq = CuQ.back(), Tkv = CuKv.back();
  const int Bn = int(C.Lq.size());

  std::mt19937_64 Rng(Seed);
  Packed Q = randomPacked(Rng, C.Dt, Tq, C.H, C.D);
  Packed K = randomPacked(Rng, C.Dt, Tkv, C.Hkv, C.D);
  Packed V = randomPacked(Rng, C.Dt, Tkv, C.Hkv, C.D);
  Packed DO = randomPacked(Rng, C.Dt, Tq, C.H, C.D);
  reference::VarlenInputs In;
  In.Q = Q.Ref;
  In.K = K.Ref;
  In.V = V.Ref;
  In.CuSeqlensQ.assign(CuQ.begin(), CuQ.end());
  In.CuSeqlensKv.assign(CuKv.begin(), CuKv.end());
  runtime::InputMap Inputs;
  std::vector<std::unique_ptr<DeviceBuffer>> InputBufs;
  for (const ir::InputDecl &D : G.decls().Inputs) {
    std::uniform_real_distribution<double> U(D.SampleLo, D.SampleHi);
    if (D.Shape == ir::InputShape::Scalar) {
      float X = float(U(Rng));
      if (D.Elem == ir::InputType::I32) { // a prefix length: an int32
        int32_t I = int32_t(std::lround(X));
        Inputs[D.Name] = I;
        In.Inputs[D.Name] = Tensor({}, double(I));
        continue;
      }
      Inputs[D.Name] = X;
      In.Inputs[D.Name] = Tensor({}, double(X));
      continue;
    }
    if (tokenIndexed(D)) {
      Tensor T = packedInput(D, C.Lq, C.Lkv, C.H);
      const bool Int = D.Elem == ir::InputType::I32;
      std::vector<float> F(T.Data.begin(), T.Data.end());
      std::vector<int32_t> I(T.Data.begin(), T.Data.end());
      InputBufs.push_back(Int ? upload(I.data(), I.size() * 4) : upload(F.data(), F.size() * 4));
      Inputs[D.Name] = runtime::TensorView::contiguous(
          InputBufs.back()->get(), Int ? DType::I32 : DType::F32, T.Shape);
      In.Inputs[D.Name] = T;
      continue;
    }
    std::vector<float> X(C.H);
    Tensor T({C.H});
    for (int H = 0; H < C.H; ++H)
      T.Data[H] = X[H] = float(U(Rng));
    InputBufs.push_back(upload(X.data(), X.size() * 4));
    Inputs[D.Name] = runtime::TensorView::contiguous(
        InputBufs.back()->get(), DType::F32, {C.H});
    In.Inputs[D.Name] = T;
  }

  DType ET = C.Dt;
  auto DQ = upload(Q.Bits.data(), Q.Bits.size() * 2);
  auto DK = upload(K.Bits.data(), K.Bits.size() * 2);
  auto DV = upload(V.Bits.data(), V.Bits.size() * 2);
  auto DDO = upload(DO.Bits.data(), DO.Bits.size() * 2);
  auto DCuQ = upload(CuQ.data(), CuQ.size() * 4);
  auto DCuKv = upload(CuKv.data(), CuKv.size() * 4);
  const size_t NumFinals = G.decls().FinalRowscales.size();
  DeviceBuffer DOut(size_t(Tq) * C.H * C.D * 2),
      DF(std::max<size_t>(1, NumFinals) * C.H * Tq * 4);
  auto View = [&](DeviceBuffer &B, int64_t T, int H) {
    return runtime::TensorView::contiguous(B.get(), ET, {T, H, C.D});
  };
  runtime::TensorView Finals = runtime::TensorView::contiguous(
      DF.get(), DType::F32, {int64_t(NumFinals), C.H, Tq});
  runtime::VarlenBatch VB;
  VB.CuSeqlensQ = runtime::TensorView::contiguous(DCuQ->get(), DType::I32,
                                                  {Bn + 1});
  VB.CuSeqlensKv = runtime::TensorView::contiguous(DCuKv->get(),
                                                   DType::I32, {Bn + 1});
  VB.MaxSeqlenQ = longest(C.Lq);
  VB.MaxSeqlenKv = longest(C.Lkv);

  DOut.poison();
  DF.poison();
  Att.forwardVarlen(View(*DQ, Tq, C.H), View(*DK, Tkv, C.Hkv), View(*DV, Tkv, C.Hkv),
              View(DOut, Tq, C.H), NumFinals ? &Finals : nullptr, VB, Inputs);
  auto &Drv = runtime::CudaDriver::get();
  Drv.check(Drv.cuCtxSynchronize(), "forward");
  std::vector<uint16_t> OBits(size_t(Tq) * C.H * C.D);
  DOut.download(OBits.data(), OBits.size() * 2);
  std::vector<float> FVals(NumFinals * C.H * Tq);
  if (NumFinals)
    DF.download(FVals.data(), FVals.size() * 4);

  reference::AttentionOutputs Ref = reference::attentionVarlen(CD, In, 0);
  reference::VarlenInputs PlainIn = In;
  PlainIn.RoundProbs = [&](double P) { return roundTo(C.Dt, P); };
  reference::AttentionOutputs Plain = reference::attentionVarlen(CD, PlainIn, 0);
  Errors O;
  double FinalErr = 0;
  for (int64_t T = 0; T < Tq; ++T)
    for (int H = 0; H < C.H; ++H) {
      for (int X = 0; X < C.D; ++X)
        O.add(C.Dt, fromBits(C.Dt, OBits[(size_t(T) * C.H + H) * C.D + X]),
              Ref.O.at({T, H, X}), Plain.O.at({T, H, X}));
      for (size_t F = 0; F < NumFinals; ++F) {
        double Got = FVals[(F * C.H + H) * Tq + T];
        double Want = Ref.Finals.at(G.decls().FinalRowscales[F].Name).at({H, T});
        double E = (std::isinf(Want) && Got == Want)
                       ? 0.0
                       : std::fabs(Got - Want) / (1.0 + std::fabs(Want));
        FinalErr = std::max(FinalErr, std::isnan(Got) ? INFINITY : E);
      }
    }
  bool Pass = O.pass(C.Dt) && FinalErr <= 2e-4;
  std::string Name = fmt::format(
      "{} {} d{} h{}/{} b{} tokens {}x{} {}", C.Def, std::string(dtypeName(C.Dt)), C.D, C.H,
      C.Hkv, Bn, Tq, Tkv,
      C.Decode ? (C.Skeleton.empty() ? "decode (rule)" : "decode (named)")
               : Att.forwardChoice().Skel->name().str());
  std::printf("%-62s fwd err %.2e tol %.2e finals %.1e  %s\n", Name.c_str(), O.Err,
              O.tol(C.Dt), FinalErr, Pass ? "pass" : "FAIL");
  if (!C.Backward)
    return Pass;

  // The backward reads the reference's out (rounded to the dtype) and
  // finals, as gpu_backward_test does: the yardstick (BackwardCheck) takes
  // doosum from that output, and a per-head input gradient of softmax is a
  // sum of cancelling terms (dS sums to 0 over each row's keys) that the
  // forward kernel's own output error would dominate.
  std::vector<uint16_t> RefOBits(OBits.size());
  for (size_t I = 0; I < RefOBits.size(); ++I)
    RefOBits[I] = toBits(C.Dt, Ref.O.Data[I]);
  DOut.upload(RefOBits.data(), RefOBits.size() * 2);
  std::vector<float> RefF(NumFinals * C.H * Tq);
  for (size_t F = 0; F < NumFinals; ++F)
    for (int H = 0; H < C.H; ++H)
      for (int64_t T = 0; T < Tq; ++T)
        RefF[(F * C.H + H) * Tq + T] =
            float(Ref.Finals.at(G.decls().FinalRowscales[F].Name).at({H, T}));
  if (NumFinals)
    DF.upload(RefF.data(), RefF.size() * 4);
  DeviceBuffer GQ(DQ->size()), GK(DK->size()), GV(DV->size());
  runtime::InputGradMap Grads;
  std::map<std::string, std::unique_ptr<DeviceBuffer>> GradBufs;
  for (const ir::InputDecl &D : G.decls().Inputs)
    if (D.RequiresGrad) {
      auto &Buf = GradBufs[D.Name] = std::make_unique<DeviceBuffer>(size_t(C.H) * 4);
      Buf->poison();
      Grads[D.Name] = runtime::TensorView::contiguous(
          Buf->get(), DType::F32,
          D.Shape == ir::InputShape::Scalar ? std::vector<int64_t>{}
                                            : std::vector<int64_t>{C.H});
    }
  GQ.poison();
  GK.poison();
  GV.poison();
  runtime::TensorView OutView = View(DOut, Tq, C.H);
  Att.backwardVarlen(View(*DQ, Tq, C.H), View(*DK, Tkv, C.Hkv), View(*DV, Tkv, C.Hkv),
               &OutView, View(*DDO, Tq, C.H), NumFinals ? &Finals : nullptr,
               View(GQ, Tq, C.H), View(GK, Tkv, C.Hkv), View(GV, Tkv, C.Hkv), VB,
               Inputs, Grads);
  Drv.check(Drv.cuCtxSynchronize(), "backward");

  // Exact and plain gradients, sequence by sequence (BackwardCheck.h).
  Tensor Ex[3] = {Tensor(Q.Ref.Shape), Tensor(K.Ref.Shape), Tensor(V.Ref.Shape)};
  Tensor Pl[3] = {Tensor(Q.Ref.Shape), Tensor(K.Ref.Shape), Tensor(V.Ref.Shape)};
  std::map<std::string, Tensor> ExIn, PlIn, PdIn;
  for (const auto &[N, T] : Grads)
    ExIn[N] = PlIn[N] = PdIn[N] = Tensor(T.Shape);
  unsigned Threads = std::max(1u, std::thread::hardware_concurrency());
  for (int B = 0; B < Bn; ++B) {
    if (C.Lq[B] == 0 || C.Lkv[B] == 0)
      continue; // zero gradients
    reference::AttentionInputs S;
    S.Q = unpack(In.Q, CuQ[B], C.Lq[B]);
    S.K = unpack(In.K, CuKv[B], C.Lkv[B]);
    S.V = unpack(In.V, CuKv[B], C.Lkv[B]);
    S.Inputs = sequenceInputs(G, In.Inputs, CuQ[B], C.Lq[B], CuKv[B], C.Lkv[B]);
    S.QIndexOffset = C.Lkv[B] - C.Lq[B];
    S.BatchIndexOffset = B;
    reference::AttentionOutputs F = reference::attentionOnline(CD, S, 0);
    BackwardCheck Chk = checkBackward(CD, S, F, unpack(DO.Ref, CuQ[B], C.Lq[B]),
                                      [&](double X) { return roundTo(C.Dt, X); },
                                      Threads);
    pack(Ex[0], CuQ[B], Chk.Exact.DQ);
    pack(Ex[1], CuKv[B], Chk.Exact.DK);
    pack(Ex[2], CuKv[B], Chk.Exact.DV);
    pack(Pl[0], CuQ[B], Chk.Plain.DQ);
    pack(Pl[1], CuKv[B], Chk.Plain.DK);
    pack(Pl[2], CuKv[B], Chk.Plain.DV);
    for (auto &[N, T] : ExIn)
      for (int64_t I = 0; I < T.numel(); ++I) {
        T.Data[I] += Chk.Exact.Inputs.at(N).Data[I];
        PlIn[N].Data[I] += Chk.Plain.Inputs.at(N).Data[I];
        PdIn[N].Data[I] += Chk.PlainDoosum.Inputs.at(N).Data[I];
      }
  }
  DeviceBuffer *Bufs[3] = {&GQ, &GK, &GV};
  const char *What[3] = {"dq", "dk", "dv"};
  std::string Line;
  for (int I = 0; I < 3; ++I) {
    std::vector<uint16_t> Bits(Ex[I].numel());
    Bufs[I]->download(Bits.data(), Bits.size() * 2);
    Errors E;
    for (int64_t J = 0; J < Ex[I].numel(); ++J)
      E.add(C.Dt, fromBits(C.Dt, Bits[J]), Ex[I].Data[J], Pl[I].Data[J]);
    Pass = Pass && E.pass(C.Dt);
    Line += fmt::format(" {} {:.1e}/{:.1e}", What[I], E.Err, E.tol(C.Dt));
  }
  const double Atol = C.Dt == DType::F16 ? 1e-3 : 8e-3;
  for (const auto &[N, T] : Grads) {
    std::vector<float> Got(ExIn[N].numel());
    GradBufs.at(N)->download(Got.data(), Got.size() * 4);
    for (size_t I = 0; I < Got.size(); ++I) {
      double X = ExIn[N].Data[I];
      double PlainE = std::max(std::fabs(PlIn[N].Data[I] - X),
                               std::fabs(PdIn[N].Data[I] - X));
      double Tol = 2 * PlainE + Atol * (1 + std::fabs(X));
      double E = std::isnan(Got[I]) ? INFINITY : std::fabs(Got[I] - X);
      Pass = Pass && E <= Tol;
      Line += fmt::format(" d{}[{}] {:.1e}/{:.1e}", N, I, E, Tol);
    }
  }
  // Deterministic: two more runs (bitwiseRuns) give the same bits (dq's
  // fixed-order sums, dK/dV's and the input gradients' fixed order),
  // outputs poisoned before each.
  auto Bits = [&]() {
    std::vector<uint16_t> Out;
    for (DeviceBuffer *B : Bufs) {
      std::vector<uint16_t> X(B->size() / 2);
      B->download(X.data(), X.size() * 2);
      Out.insert(Out.end(), X.begin(), X.end());
    }
    for (const auto &[N, T] : Grads) {
      std::vector<uint16_t> X(GradBufs.at(N)->size() / 2);
      GradBufs.at(N)->download(X.data(), X.size() * 2);
      Out.insert(Out.end(), X.begin(), X.end());
    }
    return Out;
  };
  const std::vector<uint16_t> First = Bits();
  const int Runs = bitwiseRuns();
  int Differ = 0;
  for (int Run = 1; Run < Runs; ++Run) {
    for (DeviceBuffer *B : Bufs)
      B->poison();
    for (auto &[N, B] : GradBufs)
      B->poison();
    Att.backwardVarlen(View(*DQ, Tq, C.H), View(*DK, Tkv, C.Hkv), View(*DV, Tkv, C.Hkv),
                       &OutView, View(*DDO, Tq, C.H), NumFinals ? &Finals : nullptr,
                       View(GQ, Tq, C.H), View(GK, Tkv, C.Hkv), View(GV, Tkv, C.Hkv), VB,
                       Inputs, Grads);
    Drv.check(Drv.cuCtxSynchronize(), "backward");
    Differ += Bits() == First ? 0 : 1;
  }
  const bool Same = Differ == 0;
  Pass = Pass && Same;
  const runtime::KernelChoice Bwd = runtime::packedCallBackwardChoice(
      Att.backwardChoice(), Att.definition().Graph->decls().HasMask, VB.MaxSeqlenQ);
  const std::string Bitwise =
      Same ? "bitwise equal" : fmt::format("{} of them DIFFER", Differ);
  std::printf("%-62s bwd%s  %d runs %s  [%s]  %s\n", Name.c_str(), Line.c_str(), Runs,
              Bitwise.c_str(), Bwd.str().c_str(), Pass ? "pass" : "FAIL");
  return Pass;
}

} // namespace

int main(int Argc, char **Argv) {
  auto Flag = [&](const char *F) {
    for (int I = 1; I < Argc; ++I)
      if (std::string(Argv[I]) == F)
        return true;
    return false;
  };
  const bool Quick = Flag("--quick"), DecodeOnly = Flag("--decode"),
             PersistentOnly = Flag("--persistent");
  const char *Filter = std::getenv("ATTNC_GPU_TEST_FILTER");
  const bool CompileOnly = Argc > 1 && std::string(Argv[Argc - 1]) == "--compile-only";
  // --bench [H [D ...]]: the batch's defaults, before and dense.
  const bool Bench = Argc > 1 && std::string(Argv[1]) == "--bench";
  const int H = Bench && Argc > 2 + CompileOnly ? std::atoi(Argv[2]) : 32;
  std::vector<int> Dims;
  for (int I = 3; Bench && I < Argc - CompileOnly; ++I)
    Dims.push_back(std::atoi(Argv[I]));
  if (Dims.empty())
    Dims = {128};
  // The persistent packed cases run with the matrix (not under a filter,
  // one case or --decode), or alone with --persistent.
  const bool Persistent = PersistentOnly || (!Filter && !DecodeOnly);
  if (CompileOnly) {
    if (Bench)
      return bench(H, Dims, true);
    if (Persistent)
      persistentCases(true);
    return PersistentOnly ? 0 : compileOnly(Quick, DecodeOnly, Filter);
  }
  auto &Drv = runtime::CudaDriver::get();
  if (!Drv.available()) {
    std::printf("skipped: %s\n", Drv.unavailableReason().c_str());
    return 77;
  }
  const runtime::DeviceInfo &Dev = runtime::currentDevice();
  std::printf("device: %s\n", Dev.Name.c_str());
  if (Bench)
    return bench(H, Dims, false);
  // ATTNC_GPU_TEST_CASE=N: the N-th (from 0) of the filtered cases only
  // (one small case under compute-sanitizer).
  const char *Only = std::getenv("ATTNC_GPU_TEST_CASE");
  int Passed = 0, Failed = 0, Index = -1;
  uint64_t Seed = 1;
  if (Persistent && !Only)
    Failed += persistentCases(false);
  for (const Case &C : cases(Quick)) {
    if (PersistentOnly)
      break;
    if ((Filter && C.Def != Filter) || (DecodeOnly && !C.Decode))
      continue;
    ++Index;
    if (Only && Index != std::atoi(Only)) {
      ++Seed;
      continue;
    }
    try {
      (runCase(C, Seed++) ? Passed : Failed)++;
    } catch (const std::exception &E) {
      std::printf("%s %s %s: ERROR %s\n", C.Def.c_str(), dtypeName(C.Dt).data(),
                  C.Skeleton.c_str(), E.what());
      ++Failed;
    }
    std::fflush(stdout);
  }
  if (!PersistentOnly)
    std::printf("%d passed, %d failed\n", Passed, Failed);
  return Failed ? 1 : 0;
}
