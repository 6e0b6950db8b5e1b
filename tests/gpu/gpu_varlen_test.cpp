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
// bench's) for sm_90a into the kernel cache, with no GPU.
#include "BackwardCheck.h"
#include "BackwardRunner.h"
#include "GpuSupport.h"
#include "TestDefinitions.h"

#include "attn/Error.h"
#include "attn/reference/Varlen.h"
#include "attn/runtime/EventTiming.h"

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
using reference::Tensor;

namespace {

struct Case {
  std::string Def;
  DType Dt;
  int D;
  int H, Hkv;
  std::vector<int> Lq, Lkv;
  std::string Skeleton;
  bool Backward;
  /// A named backward configuration (Signature::BackwardConfig), else "".
  std::string BwdConfig = "";
  /// At most 16 queries a sequence: the forward runs on decode_sm80 (the
  /// short-query rule's choice, or named), split over the keys (--decode
  /// selects these cases).
  bool Decode = false;
};

std::vector<int> cumulative(const std::vector<int> &L) {
  std::vector<int> Cu(L.size() + 1, 0);
  std::partial_sum(L.begin(), L.end(), Cu.begin() + 1);
  return Cu;
}

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

/// A device copy of \p Bits.
std::unique_ptr<DeviceBuffer> upload(const void *Data, size_t Bytes) {
  auto B = std::make_unique<DeviceBuffer>(Bytes);
  B->upload(Data, Bytes);
  return B;
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
  VB.MaxSeqlenQ = std::max(1, *std::max_element(C.Lq.begin(), C.Lq.end()));
  VB.MaxSeqlenKv = std::max(1, *std::max_element(C.Lkv.begin(), C.Lkv.end()));

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
  // Deterministic: two more runs give the same bits (dq's fixed-order
  // sums, dK/dV's and the input gradients' fixed order), outputs poisoned
  // before each.
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
  bool Same = true;
  for (int Run = 0; Run < 2; ++Run) {
    for (DeviceBuffer *B : Bufs)
      B->poison();
    for (auto &[N, B] : GradBufs)
      B->poison();
    Att.backwardVarlen(View(*DQ, Tq, C.H), View(*DK, Tkv, C.Hkv), View(*DV, Tkv, C.Hkv),
                       &OutView, View(*DDO, Tq, C.H), NumFinals ? &Finals : nullptr,
                       View(GQ, Tq, C.H), View(GK, Tkv, C.Hkv), View(GV, Tkv, C.Hkv), VB,
                       Inputs, Grads);
    Drv.check(Drv.cuCtxSynchronize(), "backward");
    Same = Same && Bits() == First;
  }
  Pass = Pass && Same;
  runtime::KernelChoice Bwd = Att.backwardChoice();
  if (std::optional<runtime::KernelChoice> P = runtime::packedBackwardChoice(Bwd))
    Bwd = *P;
  std::printf("%-62s bwd%s  3 runs %s  [%s]  %s\n", Name.c_str(), Line.c_str(),
              Same ? "bitwise equal" : "DIFFER", Bwd.str().c_str(), Pass ? "pass" : "FAIL");
  return Pass;
}

std::vector<Case> cases(bool Quick) {
  // Empty query and key sequences, one token, keys past the queries
  // (bottom-right), more queries than keys, lengths off every tile.
  const std::vector<int> Lq = {0, 1, 130, 257, 64, 5, 3, 200};
  const std::vector<int> Lkv = {3, 1, 300, 257, 0, 70, 1, 129};
  const std::vector<int> Self = {1, 0, 200, 513, 77};
  std::vector<Case> Out;
  for (DType T : {DType::F16, DType::BF16})
    for (const char *Def : {"mha", "mha_full", "alibi_learnable"})
      for (int D : {64, 128}) {
        if (Quick && T != DType::F16)
          continue;
        for (const char *Skel : {"", "fwd_sm80"}) {
          bool Gqa = D == 128;
          Out.push_back({Def, T, D, 4, Gqa ? 2 : 4, Lq, Lkv, Skel, *Skel == 0});
          Out.push_back({Def, T, D, 2, Gqa ? 1 : 2, Self, Self, Skel, *Skel == 0});
        }
      }
  // Masks the analysis bounds from the block's box (varlen.cuh's
  // tile_may_keep and tile_full): a window that leaves whole key blocks
  // empty before it (its first blocks are skipped without a mask
  // evaluation), a prefix length that is a runtime int32, a 256-key window
  // (blocks inside it run the full path, no mask evaluation) and chunks of
  // a runtime int32 length.
  for (const char *Def :
       {"mha_window", "mha_prefix_lm", "mha_sliding_window", "mha_chunked"})
    for (const char *Skel : {"", "fwd_sm80"}) {
      Out.push_back({Def, DType::F16, 64, 4, 4, Lq, Lkv, Skel, *Skel == 0});
      Out.push_back({Def, DType::F16, 128, 2, 1, Self, Self, Skel, *Skel == 0});
    }
  // Per-row, per-key and per-token inputs (document ids as float [H,
  // tokens] and int32 [tokens] masks, a per-row score scale and a per-key
  // token bias): each sequence reads its tokens' values, a query its own
  // token's whatever its bottom-right q_idx (ragged lengths with shifts of
  // both signs, empty sequences and single tokens), forward on fwd_sm90 and
  // fwd_sm80, backward on bwd_sm90's packed lean step (d64's row split,
  // and d128 with grouped heads).
  for (const char *Def : {"mha_document", "mha_document_ids", "mha_row_scale"}) {
    for (const char *Skel : {"", "fwd_sm80"}) {
      Out.push_back({Def, DType::F16, 64, 4, 4, Lq, Lkv, Skel, *Skel == 0});
      Out.push_back({Def, DType::F16, 128, 4, 2, Lq, Lkv, Skel, *Skel == 0});
    }
    Out.push_back({Def, DType::F16, 128, 2, 1, Self, Self, "", true});
  }
  // Packed decode (at most 16 queries a sequence: decode_sm80, by the
  // short-query rule and named) with per-row, per-key and per-token inputs
  // and ALiBi's per-head slopes over q_idx: each sequence reads its own
  // tokens' values (a query row its token's, a key its packed key token's)
  // while its keys are split over CTAs (3000 keys: 47 blocks of 64) and
  // merged; counts 0, 1 and 16, more queries than keys, empty sequences.
  const std::vector<int> DecQ = {1, 0, 16, 3, 7, 2};
  const std::vector<int> DecKv = {2000, 5, 1100, 1, 3000, 0};
  for (const char *Def :
       {"mha_document", "mha_document_ids", "mha_row_scale", "alibi_learnable", "mha"})
    for (const char *Skel : {"", "decode_sm80"}) {
      Out.push_back({Def, DType::F16, 128, 4, 2, DecQ, DecKv, Skel, false, "", true});
      if (!Quick)
        Out.push_back({Def, DType::BF16, 64, 4, 4, DecQ, DecKv, Skel, false, "", true});
    }
  // bwd_sm90's packed column split (two warpgroups split dK's, dV's and
  // dQ's columns over 64 keys; the dense default at head dims 192 and 256),
  // named: causal bottom-right over the ragged lengths with grouped heads,
  // and the 256-key window (d256: the split takes value dims of 128 or 256,
  // and the cases have one head dim).
  Out.push_back({"mha", DType::F16, 256, 4, 2, Lq, Lkv, "", true,
                 "bwd90ws.kv64x64s2.split.fused.varlen"});
  Out.push_back({"mha_sliding_window", DType::F16, 256, 2, 1, Self, Self, "", true,
                 "bwd90ws.kv64x64s2.split.fused.varlen"});
  // The packed lean step at d64 (dQ's rows split over the two warpgroups,
  // 128 x 128 tiles) with grouped heads, and over lengths with many whole
  // tiles inside and ragged ends (its bounds-free tiles); the forms the
  // packed calls ran before, named: bwd_sm80's two-kernel mode at d64 and
  // the plain lockstep step at d128.
  const std::vector<int> Tiles = {1, 640, 383, 129, 1000};
  Out.push_back({"mha", DType::F16, 64, 4, 2, Lq, Lkv, "", true});
  Out.push_back({"mha", DType::F16, 64, 2, 1, Tiles, Tiles, "", true});
  Out.push_back({"mha_full", DType::F16, 64, 2, 2, Tiles, Tiles, "", true});
  Out.push_back({"mha_full", DType::F16, 128, 2, 1, Tiles, Tiles, "", true});
  Out.push_back({"mha", DType::F16, 64, 2, 2, Self, Self, "", true, "kv64x128w8.q128x64w8.s2"});
  Out.push_back({"mha", DType::F16, 128, 4, 2, Lq, Lkv, "", true,
                 "bwd90ws.kv64x128s2.fused.varlen"});
  // More than 32 sequences (empty ones and single tokens among them): the
  // packed grids' sequence search (block_range.cuh's packed_block_of) votes
  // over two groups of 32 in the forward, the dK/dV kernel and the dQ
  // convert.
  std::vector<int> Many(40);
  for (int I = 0; I < 40; ++I)
    Many[I] = I % 9 == 4 ? 0 : I % 7 == 3 ? 1 : (I * 37) % 190;
  for (const char *Def : {"mha", "mha_chunked"})
    Out.push_back({Def, DType::F16, 128, 2, 1, Many, Many, "", true});
  // A sequence of more than 32 blocks: the packed range search's votes over
  // boxes of 32 blocks (block_range.cuh) find both ends of each range
  // (4200 tokens: 33 query and key blocks of 128 in the forward and the
  // dK/dV kernel, 66 key blocks of 64 in the dQ kernel). The fp64 yardstick
  // of so long a sequence takes a minute or more: the forward of each mask,
  // and the backward of the window only.
  const std::vector<int> Long = {4200, 1, 300};
  for (const char *Def : {"mha", "mha_sliding_window", "mha_prefix_lm", "mha_chunked"})
    Out.push_back({Def, DType::F16, 64, 1, 1, Long, Long, "",
                   std::string(Def) == "mha_sliding_window"});
  // The same window's backward at d128 (bwd_sm90's packed form): its dQ
  // ranks count the key blocks above a CTA's that keep a query block by
  // votes of 32 blocks (bwd_sm90_varlen.cuh), two votes here.
  if (!Quick)
    Out.push_back({"mha_sliding_window", DType::F16, 128, 1, 1, Long, Long, "", true});
  return Out;
}

/// Compiles case \p C's kernels for sm_90a into the kernel cache, its
/// tensors packed (THD: the packed backward, packedBackwardChoice) or dense
/// (BSHD: the dense backward).
void compileCase(const Case &C, Layout L) {
  runtime::Signature Sig;
  Sig.Dtype = C.Dt;
  Sig.HeadDim = Sig.HeadDimV = C.D;
  Sig.TensorLayout = L;
  Sig.Skeleton = C.Skeleton;
  Sig.BackwardConfig = C.BwdConfig;
  Sig.Backend = "generated";
  Sig.Arch = GpuArch::Sm90a;
  runtime::Attention Att(makeDefinition(C.Def), Sig);
  if (C.Decode)
    Att.precompile(runtime::PrecompileSet{}); // the short-query rule's kernel
  std::string Bwd = "-";
  if (C.Backward) {
    runtime::KernelChoice Choice = Att.backwardChoice();
    if (L == Layout::THD)
      if (std::optional<runtime::KernelChoice> Two = runtime::packedBackwardChoice(Choice))
        Choice = *Two;
    runtime::BackwardRunner Runner(
        Att.definition(),
        runtime::kernelTarget(Att.definition(), Sig, GpuArch::Sm90a,
                              runtime::Direction::Backward),
        Choice);
    Bwd = Choice.str();
  }
  std::printf("compiled %s %s d%d: %s | %s\n", C.Def.c_str(), dtypeName(C.Dt).data(), C.D,
              Att.forwardChoice().str().c_str(), Bwd.c_str());
  std::fflush(stdout);
}

/// --compile-only: the kernels of the cases compiled for sm_90a into the
/// kernel cache ($ATTNC_CACHE_DIR), without a GPU, so that a device run
/// reads them instead of compiling: the forward, and for a backward case
/// the packed backward (packedBackwardChoice: bwd_sm90's packed lean step at
/// head dims 64 and 128, unless a case names another).
int compileOnly(bool Quick, bool DecodeOnly, const char *Filter) {
  for (const Case &C : cases(Quick))
    if ((!Filter || C.Def == Filter) && (!DecodeOnly || C.Decode))
      compileCase(C, Layout::THD);
  return 0;
}

/// The backward configuration a packed call ran at head dim \p D before
/// the lean step had a packed form (bwd_sm80's two-kernel mode at d64, the
/// plain lockstep step at d128), timed beside the default by --bench.
const char *previousPackedBackward(int D) {
  return D == 64 ? "kv64x128w8.q128x64w8.s2" : "bwd90ws.kv64x128s2.fused.varlen";
}

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
  const int Mean = int((T + 16) / 32);
  std::printf("lengths: 32 uniform in [64, 8192], %lld tokens, mean %d, max %d\n",
              (long long)T, Mean, *std::max_element(L.begin(), L.end()));
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
            *std::max_element(L.begin(), L.end()), *std::max_element(L.begin(), L.end())};
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
        runtime::KernelChoice Choice = A.backwardChoice();
        if (Varlen)
          if (std::optional<runtime::KernelChoice> P = runtime::packedBackwardChoice(Choice))
            Choice = *P;
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

} // namespace

int main(int Argc, char **Argv) {
  auto Flag = [&](const char *F) {
    for (int I = 1; I < Argc; ++I)
      if (std::string(Argv[I]) == F)
        return true;
    return false;
  };
  const bool Quick = Flag("--quick"), DecodeOnly = Flag("--decode");
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
  if (CompileOnly)
    return Bench ? bench(H, Dims, true) : compileOnly(Quick, DecodeOnly, Filter);
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
  for (const Case &C : cases(Quick)) {
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
  std::printf("%d passed, %d failed\n", Passed, Failed);
  return Failed ? 1 : 0;
}
