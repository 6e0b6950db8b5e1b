// Shared pieces of the block-mask GPU tests: host masks and lists, problem
// set-up, a forward+backward run and its fp64 reference check.
#include "BlockMaskCases.h"

#include "BackwardCheck.h"

#include "attn/Error.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <thread>

namespace attn::gputest::blockmask {

namespace {

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

} // namespace

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
                                       const runtime::InputMap *Inputs) {
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

int Passed = 0;
int Failed = 0;

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

/// Sets the scalar input \p Name of \p P to \p X (device call and reference).
void setScalar(Problem &P, const std::string &Name, int32_t X) {
  P.Inputs[Name] = X;
  P.In.Inputs[Name] = Tensor({}, double(X));
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

} // namespace attn::gputest::blockmask
