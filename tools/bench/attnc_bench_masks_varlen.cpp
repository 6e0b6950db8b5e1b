// attnc_bench_masks' varlen rows: packed batches of 32 sequences against
// dense attention of the same total tokens, with no mask and under causal,
// window256 and chunked256 masks within each sequence (see the usage at the
// top of attnc_bench_masks.cpp).
#include "BackwardRunner.h"
#include "ListVisits.h"
#include "GpuSupport.h"
#include "MasksBench.h"
#include "attn/runtime/DtypeBits.h"
#include "attn/runtime/EventTiming.h"
#include "attn/runtime/Selector.h"

#include "Examples.h"
#include "attn/Error.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

using namespace attn;
using namespace attn::gputest;

namespace attn::masksbench {
namespace {

/// Kept (q, k) pairs of a sequence of \p L tokens under \p Mask ("none",
/// "causal", "window256", "chunked256"): for query q, every key, q + 1
/// keys, at most Window, or the keys of its chunk up to itself.
double varlenPairs(const std::string &Mask, int64_t L) {
  if (Mask == "none")
    return double(L) * double(L);
  double N = 0;
  for (int64_t Q = 0; Q < L; ++Q)
    N += Mask == "window256"    ? double(std::min<int64_t>(Q + 1, Window))
         : Mask == "chunked256" ? double(Q % Chunk + 1)
                                : double(Q + 1);
  return N;
}

/// The varlen masks: none (softmax within each sequence), causal (a
/// document mask as a packed batch: each document one sequence), window256
/// and chunked256 within each sequence.
dsl::AttentionDef varlenMha(const std::string &Mask) {
  if (Mask == "none") {
    dsl::AttentionDef D = examples::mha();
    D.name = "bench_none";
    D.mask_mod = {};
    return D;
  }
  return Mask == "causal" ? examples::mha() : maskedMha(Mask);
}

/// Environment variable \p Var: "" where unset or empty, else one of \p A
/// and \p B (a UserError names it otherwise; varlenSettingsError checks
/// every such setting before any row runs).
std::string envOneOf(const char *Var, const char *A, const char *B) {
  const char *C = std::getenv(Var);
  const std::string V = C ? C : "";
  if (!V.empty() && V != A && V != B)
    throw UserError(std::string(Var) + "='" + V + "': expected " + A + " or " + B);
  return V;
}

/// ATTNC_BENCH_VARLEN_ORDER=longest or shortest: the varlen rows' lengths
/// sorted (how the order of a packed batch's sequences moves its time).
std::string varlenOrder() {
  return envOneOf("ATTNC_BENCH_VARLEN_ORDER", "longest", "shortest");
}

/// ATTNC_BENCH_VARLEN_ONLY=packed or dense: time that side alone (its
/// kernels then run alone in the process, e.g. under a profiler's launch
/// counts); the other side's numbers print as nan.
std::string varlenOnly() { return envOneOf("ATTNC_BENCH_VARLEN_ONLY", "packed", "dense"); }

/// The lengths of the varlen rows: 32 sequences uniform in [64, \p MaxLen]
/// (the batch with MaxLen 8192), in varlenOrder's order.
std::vector<int> varlenLengths(int MaxLen) {
  std::mt19937_64 Rng(2026);
  std::uniform_int_distribution<int> U(64, std::max(64, MaxLen));
  std::vector<int> L(32);
  for (int &X : L)
    X = U(Rng);
  if (const std::string Order = varlenOrder(); !Order.empty()) {
    std::sort(L.begin(), L.end());
    if (Order == "longest")
      std::reverse(L.begin(), L.end());
  }
  return L;
}

/// ATTNC_BENCH_FWD_CONFIG: a forward configuration for every call of the
/// varlen rows (e.g. sm90.m128n64s4p), else the defaults.
std::string benchForwardConfig() {
  const char *C = std::getenv("ATTNC_BENCH_FWD_CONFIG");
  return C ? C : "";
}

/// ATTNC_BENCH_BWD_CONFIG: a backward configuration for every call of the
/// varlen rows (bwd_sm90's form, e.g. bwd90ws.kv64x128s2.atomic; a packed
/// call runs its .varlen form), else the defaults.
std::string benchBackwardConfig() {
  const char *C = std::getenv("ATTNC_BENCH_BWD_CONFIG");
  return C ? C : "";
}

/// Whether varlenOnly leaves the packed (\p Varlen) or dense side out.
bool benchSideSkipped(bool Varlen) {
  const std::string Only = varlenOnly();
  return !Only.empty() && Only != (Varlen ? "packed" : "dense");
}

} // namespace

/// What is wrong with the varlen rows' settings (ATTNC_BENCH_VARLEN_ORDER,
/// ATTNC_BENCH_VARLEN_ONLY), or "".
std::string varlenSettingsError() {
  try {
    varlenOrder();
    varlenOnly();
  } catch (const UserError &E) {
    return E.what();
  }
  return "";
}

/// The lengths, for peers_masks.py --varlen (the same batch on Flex).
void printVarlenLengths(int MaxLen) {
  std::string Line;
  for (int X : varlenLengths(MaxLen))
    Line += (Line.empty() ? "" : ",") + std::to_string(X);
  std::printf("varlen lengths [64, %d]: %s\n", MaxLen, Line.c_str());
  std::fflush(stdout);
}

/// Varlen rows: a packed batch (varlenLengths) against dense attention of
/// the same total tokens (32 sequences of the mean length), the same mask,
/// forward and backward TFLOPS of the kept pairs (the backward's FLOPs 2.5
/// times the forward's) and their ratios (the target: varlen >=
/// 0.95x dense).
void benchVarlen(const std::string &Mask, DType T, int H, int D, int MaxLen) {
  // The buffers come before any Attention: make the device's context
  // current first (an Attention would, when made).
  runtime::currentDevice();
  const std::vector<int> L = varlenLengths(MaxLen);
  std::vector<int32_t> Cu(L.size() + 1, 0);
  for (size_t I = 0; I < L.size(); ++I)
    Cu[I + 1] = Cu[I] + L[I];
  const int64_t Tok = Cu.back(), B = int64_t(L.size());
  const int64_t Mean = (Tok + B / 2) / B;
  DType ET = T;
  const size_t Elems = size_t(std::max(Tok, B * Mean)) * H * D;
  std::mt19937_64 Rng(13);
  runtime::NormalPool Normals(T, Rng, 13);
  std::vector<uint16_t> Host;
  std::vector<std::unique_ptr<DeviceBuffer>> Bufs; // q, k, v, dO
  for (int I = 0; I < 4; ++I) {
    Normals.fill(Host, Elems);
    Bufs.push_back(std::make_unique<DeviceBuffer>(Elems * 2));
    Bufs.back()->upload(Host.data(), Elems * 2);
  }
  DeviceBuffer Out(Elems * 2), Finals(size_t(std::max(Tok, B * Mean)) * H * 4);
  DeviceBuffer GQ(Elems * 2), GK(Elems * 2), GV(Elems * 2);
  DeviceBuffer CuBuf(Cu.size() * 4);
  CuBuf.upload(Cu.data(), Cu.size() * 4);
  runtime::InputMap Inputs;
  if (Mask == "chunked256")
    Inputs["chunk"] = int32_t(Chunk);
  double Pairs = 0;
  for (int X : L)
    Pairs += varlenPairs(Mask, X);
  const double DensePairs = double(B) * varlenPairs(Mask, Mean);
  double Tf[2] = {NAN, NAN}, TfB[2] = {NAN, NAN};
  std::string Choice[2], BwdChoice[2];
  for (bool Varlen : {true, false}) {
    if (benchSideSkipped(Varlen))
      continue;
    runtime::Signature Sig;
    Sig.Dtype = T;
    Sig.HeadDim = Sig.HeadDimV = D;
    Sig.TensorLayout = Varlen ? Layout::THD : Layout::BSHD;
    Sig.Config = benchForwardConfig();
    Sig.BackwardConfig = benchBackwardConfig();
    runtime::Attention Att(varlenMha(Mask), Sig);
    auto V = [&](void *P) {
      return Varlen ? runtime::TensorView::contiguous(P, ET, {Tok, H, D})
                    : runtime::TensorView::contiguous(P, ET, {B, Mean, H, D});
    };
    runtime::TensorView FV =
        Varlen ? runtime::TensorView::contiguous(
                     Finals.get(), DType::F32, {1, H, Tok})
               : runtime::TensorView::contiguous(
                     Finals.get(), DType::F32, {1, B, H, Mean});
    runtime::TensorView CuV = runtime::TensorView::contiguous(
        CuBuf.get(), DType::I32, {B + 1});
    const int Longest = *std::max_element(L.begin(), L.end());
    runtime::VarlenBatch VB{CuV, CuV, Longest, Longest};
    auto Fwd = [&](int) {
      if (Varlen)
        Att.forwardVarlen(V(Bufs[0]->get()), V(Bufs[1]->get()),
                          V(Bufs[2]->get()), V(Out.get()), &FV, VB, Inputs);
      else
        Att.forward(V(Bufs[0]->get()), V(Bufs[1]->get()), V(Bufs[2]->get()),
                    V(Out.get()), &FV, Inputs);
    };
    const uint64_t Walked = runtime::persistentForwardLaunches();
    const double Ms = runtime::medianEventMs(Fwd, 3, 15);
    // The persistent walk is chosen per call (its tiles and visits).
    const bool Persistent = runtime::persistentForwardLaunches() > Walked;
    // The backward of the last forward's output and finals (the forward's
    // own, as in training).
    runtime::TensorView O = V(Out.get());
    auto Bwd = [&](int) {
      if (Varlen)
        Att.backwardVarlen(V(Bufs[0]->get()), V(Bufs[1]->get()),
                           V(Bufs[2]->get()), &O, V(Bufs[3]->get()), &FV,
                           V(GQ.get()), V(GK.get()), V(GV.get()), VB, Inputs);
      else
        Att.backward(V(Bufs[0]->get()), V(Bufs[1]->get()), V(Bufs[2]->get()),
                     &O, V(Bufs[3]->get()), &FV, V(GQ.get()), V(GK.get()),
                     V(GV.get()), Inputs);
    };
    const double MsB = runtime::medianEventMs(Bwd, 3, 15);
    const double Flops = 4.0 * H * D * (Varlen ? Pairs : DensePairs);
    Tf[Varlen ? 0 : 1] = Flops / (Ms * 1e-3) / 1e12;
    TfB[Varlen ? 0 : 1] = 2.5 * Flops / (MsB * 1e-3) / 1e12;
    Choice[Varlen ? 0 : 1] = Att.forwardChoice().str() + (Persistent ? ", persistent" : "");
    // What the call ran: a packed call by its longest sequence.
    const bool Masked = Att.definition().Graph->decls().HasMask;
    const runtime::KernelChoice Ran =
        Varlen ? runtime::packedCallBackwardChoice(Att.backwardChoice(), Masked, Longest)
               : runtime::denseBackwardChoice(Att.backwardChoice(), Masked, Mean);
    BwdChoice[Varlen ? 0 : 1] = Ran.str();
  }
  std::printf("attnc varlen %-10s %s H%d D%d: 32 seqs in [64, %d], %lld tokens: "
              "varlen fwd %.1f TFLOPS [%s]  dense B32 S%lld fwd %.1f TFLOPS "
              "[%s]  varlen/dense %.3f  |  bwd: varlen %.1f TFLOPS [%s]  dense "
              "%.1f TFLOPS [%s]  varlen/dense %.3f\n",
              Mask.c_str(), std::string(dtypeName(T)).c_str(), H, D, MaxLen,
              (long long)Tok, Tf[0], Choice[0].c_str(), (long long)Mean, Tf[1],
              Choice[1].c_str(), Tf[0] / Tf[1], TfB[0], BwdChoice[0].c_str(), TfB[1],
              BwdChoice[1].c_str(), TfB[0] / TfB[1]);
  std::fflush(stdout);
}

/// The forward and backward kernels benchVarlen's calls use on sm_90a, in
/// the cache (a packed backward runs packedBackwardChoice's configuration).
void compileVarlen(const std::string &Mask, DType T, int D) {
  for (Layout Lay : {Layout::THD, Layout::BSHD}) {
    runtime::Signature Sig;
    Sig.Dtype = T;
    Sig.HeadDim = Sig.HeadDimV = D;
    Sig.Arch = GpuArch::Sm90a;
    Sig.TensorLayout = Lay;
    Sig.Config = benchForwardConfig();
    Sig.BackwardConfig = benchBackwardConfig();
    runtime::Attention Att(varlenMha(Mask), Sig);
    runtime::KernelChoice Bwd = Att.backwardChoice();
    if (Lay == Layout::THD)
      if (std::optional<runtime::KernelChoice> Two =
              runtime::packedBackwardChoice(Bwd))
        Bwd = *Two;
    runtime::BackwardRunner Runner(
        Att.definition(),
        runtime::kernelTarget(Att.definition(), Sig, GpuArch::Sm90a,
                              runtime::Direction::Backward),
        Bwd);
    // The persistent form of the forward, which a call takes where its
    // tiles visit few key blocks.
    if (const auto *C = std::get_if<codegen::Sm90Config>(&Att.forwardChoice().Config))
      if (std::optional<codegen::Sm90Config> P = C->persistentFor(D, D)) {
        runtime::Signature SigP = Sig;
        SigP.Config = P->str();
        runtime::Attention AttP(varlenMha(Mask), SigP);
      }
    std::printf("compiled varlen %s %s: %s | %s\n", Mask.c_str(),
                Lay == Layout::THD ? "packed" : "dense",
                Att.forwardChoice().str().c_str(), Bwd.str().c_str());
  }
}

} // namespace attn::masksbench
