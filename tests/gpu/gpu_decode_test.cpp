// decode_sm80 on a GPU against the double-precision reference: softmax,
// sigmoid, ReLU, ALiBi and softcap without their causal masks (a dense
// call's q_idx counts from 0, so a causal mask leaves a decode query a key
// or two), mha and the prefix-LM with theirs, ragged key lengths (0, 1 and
// more per batch entry) through a per-row length mask, retention (no
// merge: never split), retention_combine (split by the definition's own
// combine), q lengths 1, 4 and 16, GQA ratios 1, 4 and 8, split
// and unsplit calls, f16 and bf16. Each case runs on the named skeleton and
// through the short-query rule (the same bits), then, split, again on the
// named one, eagerly and as a CUDA graph replayed twice, each with poisoned
// outputs and the same bits wanted: the last-CTA merge's arrival counts
// must be back at 0 after every launch. Exits 77 without a GPU.
#include "GpuSupport.h"
#include "PagedSupport.h"
#include "TestDefinitions.h"

#include "attn/analysis/Merge.h"
#include "attn/codegen/Arch.h"
#include "attn/reference/Attention.h"
#include "attn/runtime/Selector.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

using namespace attn;
using namespace attn::gputest;

namespace {

/// ALiBi and retention without their causal masks (sigmoid_full, relu_full
/// and mha_full come from TestDefinitions.h), and mha with a per-row key
/// length (kv_idx < kv_len).
dsl::AttentionDef decodeDefinition(const std::string &Name) {
  auto Unmasked = [](const char *Base, const std::string &N) {
    dsl::AttentionDef D = makeDefinition(Base);
    D.name = N;
    D.mask_mod = {};
    return D;
  };
  if (Name == "alibi_full")
    return Unmasked("alibi_learnable", Name);
  if (Name == "retention_full")
    return Unmasked("retention", Name);
  if (Name == "retention_combine_full")
    return Unmasked("retention_combine", Name);
  if (Name == "mha_kvlen") {
    dsl::AttentionDef D = makeDefinition("mha_full");
    D.name = Name;
    D.inputs.declare("kv_len", ir::InputShape::PerRow, 0.0, 0.0);
    D.mask_mod = [](dsl::SymbolScalar, dsl::SymbolScalar, dsl::SymbolScalar,
                    dsl::SymbolScalar k, const dsl::CustomInputs &in) {
      return k.to_float() < in["kv_len"];
    };
    return D;
  }
  return makeDefinition(Name);
}

struct Case {
  std::string Def;
  DType Dt;
  int B, H, Hkv, Sq, Skv;
  bool WantSplit;
};

struct HostTensor {
  std::vector<uint16_t> Bits;
  reference::Tensor Ref;
};

/// [B, S, H, D] (BSHD) bits and the [B, H, S, D] reference.
HostTensor randomTensor(std::mt19937_64 &Rng, DType T, int B, int H, int S,
                        int D) {
  HostTensor Out{std::vector<uint16_t>(size_t(B) * H * S * D),
                 reference::Tensor({B, H, S, D})};
  std::normal_distribution<double> N(0.0, 1.0);
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < S; ++s)
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) {
          uint16_t Bits = toBits(T, N(Rng));
          Out.Bits[((size_t(b) * S + s) * H + h) * D + d] = Bits;
          Out.Ref.at({b, h, s, d}) = fromBits(T, Bits);
        }
  return Out;
}

/// Key length of batch entry b for mha_kvlen: 0, 1, then spread.
double kvLength(int b, int Skv) {
  if (b < 2)
    return b;
  return double(1 + (b * 7919) % Skv);
}

bool runCase(const Case &C, uint64_t Seed) {
  const int D = 128;
  dsl::AttentionDef Def = decodeDefinition(C.Def);
  runtime::Signature Sig;
  Sig.Dtype = C.Dt;
  Sig.HeadDim = Sig.HeadDimV = D;
  Sig.Backend = "generated";
  runtime::Attention Auto(Def, Sig);
  Sig.Skeleton = "decode_sm80";
  runtime::Attention Named(Def, Sig);
  const ir::Graph &G = *Named.definition().Graph;
  analysis::MergeKind Merge = analysis::analyzeMerge(G).Kind;

  std::mt19937_64 Rng(Seed);
  HostTensor Q = randomTensor(Rng, C.Dt, C.B, C.H, C.Sq, D);
  HostTensor K = randomTensor(Rng, C.Dt, C.B, C.Hkv, C.Skv, D);
  HostTensor V = randomTensor(Rng, C.Dt, C.B, C.Hkv, C.Skv, D);
  reference::AttentionInputs In;
  In.Q = Q.Ref;
  In.K = K.Ref;
  In.V = V.Ref;
  runtime::InputMap Inputs;
  std::vector<std::unique_ptr<DeviceBuffer>> Bufs;
  for (const ir::InputDecl &Decl : G.decls().Inputs) {
    if (Decl.Shape == ir::InputShape::Scalar) {
      double X = Decl.SampleLo + 0.5 * (Decl.SampleHi - Decl.SampleLo);
      if (Decl.Elem == ir::InputType::I32)
        Inputs[Decl.Name] = int32_t(std::lround(X));
      else
        Inputs[Decl.Name] = float(X);
      In.Inputs[Decl.Name] = reference::Tensor(
          {}, Decl.Elem == ir::InputType::I32 ? double(std::lround(X))
                                              : double(float(X)));
      continue;
    }
    reference::Tensor T;
    if (Decl.Shape == ir::InputShape::PerHead) {
      T = reference::Tensor({C.H});
      for (int h = 0; h < C.H; ++h)
        T.at({h}) = double(float(Decl.SampleLo + (Decl.SampleHi - Decl.SampleLo) *
                                                     (h + 0.5) / C.H));
    } else if (Decl.Name == "kv_len") {
      T = reference::Tensor({C.B, C.H, C.Sq});
      for (int b = 0; b < C.B; ++b)
        for (int h = 0; h < C.H; ++h)
          for (int s = 0; s < C.Sq; ++s)
            T.at({b, h, s}) = kvLength(b, C.Skv);
    } else {
      T = tokenInput(Decl, C.B, C.H, C.Sq, C.Skv);
    }
    std::vector<float> F(T.Data.begin(), T.Data.end());
    Bufs.push_back(std::make_unique<DeviceBuffer>(F.size() * 4));
    Bufs.back()->upload(F.data(), F.size() * 4);
    Inputs[Decl.Name] = runtime::TensorView::contiguous(
        Bufs.back()->get(), DType::F32, T.Shape);
    In.Inputs[Decl.Name] = T;
  }
  reference::AttentionOutputs Ref =
      reference::attentionOnline(Named.definition(), In, 0);
  In.RoundProbs = [&](double P) { return roundTo(C.Dt, P); };
  reference::AttentionOutputs Plain =
      reference::attentionOnline(Named.definition(), In, 0);

  DeviceBuffer DQ(Q.Bits.size() * 2), DK(K.Bits.size() * 2),
      DV(V.Bits.size() * 2);
  DQ.upload(Q.Bits.data(), DQ.size());
  DK.upload(K.Bits.data(), DK.size());
  DV.upload(V.Bits.data(), DV.size());
  size_t OElems = size_t(C.B) * C.H * C.Sq * D;
  size_t NF = G.decls().FinalRowscales.size();
  DeviceBuffer DO(OElems * 2), DF(std::max<size_t>(1, NF) * C.B * C.H * C.Sq * 4);
  DType ET = C.Dt;
  auto View = [&](DeviceBuffer &Buf, int H, int S) {
    return runtime::TensorView::contiguous(Buf.get(), ET, {C.B, S, H, D});
  };
  runtime::TensorView Finals = runtime::TensorView::contiguous(
      DF.get(), DType::F32, {int64_t(NF), C.B, C.H, C.Sq});
  auto &Drv = runtime::CudaDriver::get();

  std::vector<uint16_t> NamedBits(OElems), AutoBits(OElems);
  std::vector<float> FVals(NF * C.B * C.H * C.Sq);
  for (runtime::Attention *A : {&Auto, &Named}) {
    DO.poison();
    DF.poison();
    A->forward(View(DQ, C.H, C.Sq), View(DK, C.Hkv, C.Skv),
               View(DV, C.Hkv, C.Skv), View(DO, C.H, C.Sq), NF ? &Finals : nullptr,
               Inputs);
    Drv.check(Drv.cuCtxSynchronize(), "kernel execution");
    DO.download((A == &Auto ? AutoBits : NamedBits).data(), OElems * 2);
    if (NF)
      DF.download(FVals.data(), FVals.size() * 4);
  }
  // Repeats of the named call, eager and replayed: a launch that left an
  // arrival count above 0 would leave the next one's rows unmerged (the
  // poison). Each must give the first call's bits.
  bool Repeats = true;
  std::vector<uint16_t> Again(OElems);
  std::vector<float> FAgain(FVals.size());
  auto Same = [&](const char *What) {
    DO.download(Again.data(), OElems * 2);
    if (NF)
      DF.download(FAgain.data(), FAgain.size() * 4);
    bool Ok = Again == NamedBits &&
              std::memcmp(FAgain.data(), FVals.data(), FAgain.size() * 4) == 0;
    if (!Ok)
      std::printf("FAIL %s: %s differs from the first call\n", C.Def.c_str(), What);
    Repeats = Repeats && Ok;
  };
  auto NamedCall = [&](CUstream S) {
    Named.forward(View(DQ, C.H, C.Sq), View(DK, C.Hkv, C.Skv), View(DV, C.Hkv, C.Skv),
                  View(DO, C.H, C.Sq), NF ? &Finals : nullptr, Inputs, S);
  };
  if (C.WantSplit) {
    DO.poison();
    DF.poison();
    NamedCall(nullptr);
    Drv.check(Drv.cuCtxSynchronize(), "kernel execution");
    Same("a second call");
    CapturedGraph Graph(NamedCall);
    for (int R = 0; R < 2; ++R) {
      DO.poison();
      DF.poison();
      Graph.replay();
      Same(R == 0 ? "a graph replay" : "a second graph replay");
    }
    DO.poison();
    DF.poison();
    NamedCall(nullptr);
    Drv.check(Drv.cuCtxSynchronize(), "kernel execution");
    Same("a call after the replays");
  }
  double Err = 0, PlainErr = 0, FinalErr = 0;
  for (int b = 0; b < C.B; ++b)
    for (int h = 0; h < C.H; ++h)
      for (int s = 0; s < C.Sq; ++s) {
        for (int d = 0; d < D; ++d) {
          double Got = fromBits(C.Dt, NamedBits[((size_t(b) * C.Sq + s) * C.H + h) * D + d]);
          double Want = Ref.O.at({b, h, s, d});
          Err = std::max(Err, std::isnan(Got) ? INFINITY : std::fabs(Got - Want));
          PlainErr = std::max(PlainErr,
                              std::fabs(roundTo(C.Dt, Plain.O.at({b, h, s, d})) - Want));
        }
        for (size_t f = 0; f < NF; ++f) {
          double Got = FVals[((f * C.B + b) * C.H + h) * C.Sq + s];
          double Want = Ref.Finals.at(G.decls().FinalRowscales[f].Name).at({b, h, s});
          double E = (std::isinf(Want) && Got == Want)
                         ? 0.0
                         : std::fabs(Got - Want) / (1.0 + std::fabs(Want));
          FinalErr = std::max(FinalErr, std::isnan(Got) ? INFINITY : E);
        }
      }
  // The split the runtime makes for this call (the same function).
  int Rows = C.H / C.Hkv * C.Sq;
  runtime::DecodeSplit S = runtime::decodeSplit(
      int64_t(C.B) * C.Hkv * ((Rows + 15) / 16), C.Skv, 64,
      runtime::currentDevice().MultiProcessors, Merge);
  double Tol = 2 * PlainErr + (C.Dt == DType::F16 ? 1e-3 : 8e-3);
  bool SameBits = NamedBits == AutoBits;
  bool SplitAsWanted = (S.Splits > 1) == C.WantSplit;
  bool Pass = Err <= Tol && FinalErr <= 2e-4 && SameBits && SplitAsWanted && Repeats;
  std::printf("%-4s %-16s %-4s B%-3d H%-2d/%-2d sq%-2d kv%-5d splits %-3d err %.2e "
              "tol %.2e finals %.1e auto %s\n",
              Pass ? "ok" : "FAIL", C.Def.c_str(), std::string(dtypeName(C.Dt)).c_str(),
              C.B, C.H, C.Hkv, C.Sq, C.Skv, S.Splits, Err, Tol, FinalErr,
              SameBits ? "same" : "DIFFERS");
  return Pass;
}

} // namespace

std::vector<Case> cases() {
  const DType F = DType::F16, BF = DType::BF16;
  return {
      // softmax: q lengths, GQA ratios, split and not.
      {"mha_full", F, 1, 8, 2, 1, 4000, true},
      {"mha_full", F, 1, 8, 1, 4, 3001, true},
      {"mha_full", F, 2, 8, 8, 1, 2048, true},
      {"mha_full", F, 1, 16, 2, 16, 1500, true},
      {"mha_full", F, 2, 8, 2, 2, 200, true}, // 2 splits of 2 blocks
      {"mha_full", F, 160, 8, 2, 1, 300, false},
      {"mha_full", BF, 1, 8, 2, 4, 5000, true},
      // sum merges.
      {"sigmoid_full", F, 1, 8, 2, 1, 4096, true},
      {"sigmoid_full", BF, 3, 8, 1, 4, 999, true},
      {"relu_full", F, 1, 8, 2, 4, 2500, true},
      {"relu_full", F, 4, 4, 4, 1, 150, false},
      // score_mods with custom inputs, the learnable examples.
      {"alibi_full", F, 1, 8, 2, 2, 3000, true},
      {"softcap_learnable", F, 1, 8, 2, 1, 2000, true},
      // masks: causal (a key or two), prefix-LM (64 keys), ragged lengths.
      {"mha", F, 1, 8, 2, 4, 1000, true},
      {"mha_prefix_lm", F, 2, 8, 2, 3, 1200, true},
      // masks whose empty key blocks decode skips (the analysis' classes).
      {"mha_sliding_window", F, 1, 8, 2, 4, 1000, true},
      {"mha_chunked", F, 2, 8, 2, 3, 1200, true},
      {"mha_kvlen", F, 6, 8, 2, 1, 3000, true},
      {"mha_kvlen", BF, 5, 8, 1, 4, 700, true},
      // no merge: one pass over the keys.
      {"retention_full", F, 1, 8, 2, 2, 2000, false},
      // the definition's combine: split by it, unsplit, causal. Without
      // its mask, retention's decay gamma^(q_idx - kv_idx) grows with the
      // key (q_idx is 0): at head 0 it passes fp32's range beyond 2775 keys
      // (e^88), so these stay at 2000 keys or fewer.
      {"retention_combine_full", F, 1, 8, 2, 1, 2000, true},
      {"retention_combine_full", BF, 2, 8, 1, 4, 1800, true},
      {"retention_combine_full", F, 1, 16, 2, 16, 1500, true},
      {"retention_combine_full", F, 4, 4, 4, 1, 150, false},
      {"retention_combine", F, 1, 8, 2, 4, 1000, true},
  };
}

/// ATTNC_DECODE_COMPILE_ONLY=sm_90a (or sm_80): make every case's
/// Attention objects for that arch, which compiles their kernels into the
/// kernel cache, and exit; no GPU is needed, so the cache of a device run can
/// be filled on the build machine.
int compileOnly(const std::vector<Case> &Cases, const char *ArchName) {
  std::optional<GpuArch> Arch = archFromName(ArchName);
  if (!Arch) {
    std::fprintf(stderr, "ATTNC_DECODE_COMPILE_ONLY: unknown arch %s\n", ArchName);
    return 2;
  }
  for (const Case &C : Cases) {
    runtime::Signature Sig;
    Sig.Dtype = C.Dt;
    Sig.HeadDim = Sig.HeadDimV = 128;
    Sig.Backend = "generated";
    Sig.Arch = *Arch;
    dsl::AttentionDef Def = decodeDefinition(C.Def);
    runtime::Attention Auto(Def, Sig);
    Sig.Skeleton = "decode_sm80";
    runtime::Attention Named(Def, Sig);
  }
  std::printf("compiled the kernels of %zu cases\n", Cases.size());
  return 0;
}

int main() {
  auto &Drv = runtime::CudaDriver::get();
  if (const char *Only = std::getenv("ATTNC_DECODE_COMPILE_ONLY"))
    return compileOnly(cases(), Only);
  if (!Drv.available()) {
    std::printf("skipped: %s\n", Drv.unavailableReason().c_str());
    return 77;
  }
  std::vector<Case> Cases = cases();
  // ATTNC_DECODE_ONLY=<definition>: only its cases (a sanitizer's run).
  if (const char *Only = std::getenv("ATTNC_DECODE_ONLY")) {
    std::vector<Case> Kept;
    for (const Case &C : Cases)
      if (C.Def == Only)
        Kept.push_back(C);
    Cases = Kept;
    if (Cases.empty()) {
      std::printf("ATTNC_DECODE_ONLY=%s: no such case\n", Only);
      return 2;
    }
  }
  bool AllPass = true;
  uint64_t Seed = 1;
  for (const Case &C : Cases) {
    try {
      AllPass = runCase(C, Seed++) && AllPass;
    } catch (const std::exception &E) {
      std::printf("FAIL %s: %s\n", C.Def.c_str(), E.what());
      AllPass = false;
    }
  }
  std::printf("%s\n", AllPass ? "all decode cases pass" : "some decode cases FAIL");
  return AllPass ? 0 : 1;
}
