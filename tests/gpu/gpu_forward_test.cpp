// GPU forward test: every transformer example on both backends (the
// generated kernel and the reference kernel) against the double-precision
// CPU reference, with the FlashAttention tolerance rule. On sm_90a the
// generated backend runs the Hopper skeleton (fwd_sm90) by default, so each
// case with the default configuration also runs fwd_sm80, forced with the
// skeleton "fwd_sm80". Exits 77 (ctest: skipped) where there is no GPU.
//
//   ATTNC_GPU_TEST_FILTER=mha      one definition's cases (exact name)
//   ATTNC_GPU_TEST_CONFIG=s3p1     the cases whose configuration contains it
//                                  ("default": those of the default one)
#include "GpuSupport.h"
#include "TestDefinitions.h"

#include "Examples.h"
#include "attn/Error.h"
#include "attn/reference/Attention.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using namespace attn;
using namespace attn::gputest;

namespace {

struct Case {
  std::string Def;
  DType Dt;
  int D, DV;
  int B, H, Hkv, Sq, Skv;
  Layout L;
  std::string Config;
  /// Further (Sq, Skv) run after the first through the same Attention
  /// objects: what a backend keeps between calls (block lists, kernels)
  /// must follow the shape.
  std::vector<std::pair<int, int>> Again = {};
};


/// q/k/v in the kernel's layout as 16-bit words, and the same values as a
/// [B,H,S,D] reference tensor.
struct HostTensor {
  std::vector<uint16_t> Bits;
  reference::Tensor Ref;
};

HostTensor randomTensor(std::mt19937_64 &Rng, DType T, Layout L, int B, int H,
                        int S, int D) {
  HostTensor Out{std::vector<uint16_t>(size_t(B) * H * S * D),
                 reference::Tensor({B, H, S, D})};
  std::normal_distribution<double> N(0.0, 1.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int s = 0; s < S; ++s)
        for (int d = 0; d < D; ++d) {
          uint16_t Bits = toBits(T, N(Rng));
          size_t Off = L == Layout::BSHD
                           ? ((size_t(b) * S + s) * H + h) * D + d
                           : ((size_t(b) * H + h) * S + s) * D + d;
          Out.Bits[Off] = Bits;
          Out.Ref.at({b, h, s, d}) = fromBits(T, Bits);
        }
  return Out;
}

std::vector<int64_t> viewShape(Layout L, int B, int H, int S, int D) {
  return L == Layout::BSHD ? std::vector<int64_t>{B, S, H, D}
                           : std::vector<int64_t>{B, H, S, D};
}

struct Outcome {
  std::string Backend;
  double Err, PlainErr, Tol, FinalErr;
  bool Pass;
  double CompileS = 0, ReferenceS = 0, DeviceS = 0;
};

double secondsSince(std::chrono::steady_clock::time_point T0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - T0)
      .count();
}

/// "sm90" or "sm80": the forward skeleton the selector chose (fwd_sm90 or
/// fwd_sm80), shortened for the labels.
std::string skeletonOf(const runtime::Attention &A) {
  llvm::StringRef Name = A.forwardChoice().Skel->name();
  return Name.startswith("fwd_") ? Name.drop_front(4).str() : Name.str();
}

/// The Attention objects of a case: the generated backend (its default or
/// the case's configuration), fwd_sm80 where that default is fwd_sm90, and
/// the reference backend.
struct Runners {
  std::unique_ptr<runtime::Attention> Att, Att80, RefAtt;
  double CompileS = 0;
};

Runners makeRunners(const Case &C) {
  dsl::AttentionDef Def = makeDefinition(C.Def);
  runtime::Signature Sig;
  Sig.Dtype = C.Dt;
  Sig.HeadDim = C.D;
  Sig.HeadDimV = C.DV;
  Sig.TensorLayout = C.L;
  Sig.Config = C.Config;
  Sig.Backend = "generated";
  Runners R;
  auto T0 = std::chrono::steady_clock::now();
  R.Att = std::make_unique<runtime::Attention>(Def, Sig);
  R.CompileS = secondsSince(T0);
  runtime::Signature RefSig = Sig;
  RefSig.Backend = "reference";
  RefSig.Skeleton.clear();
  RefSig.Config.clear();
  R.RefAtt = std::make_unique<runtime::Attention>(Def, RefSig);
  // Where the default is the Hopper skeleton, the portable one as well.
  if (skeletonOf(*R.Att) == "sm90" && C.Config.empty()) {
    runtime::Signature Sig80 = Sig;
    Sig80.Skeleton = "fwd_sm80";
    R.Att80 = std::make_unique<runtime::Attention>(Def, Sig80);
  }
  return R;
}

/// Runs case \p C on each of \p Rs, every one on the same inputs and
/// against the same double-precision results; \p Call counts the calls
/// made before through the same Rs (it picks the scalar inputs' values).
std::vector<Outcome> runCase(const Case &C, Runners &Rs, uint64_t Seed,
                             int Call) {
  runtime::Attention &Att = *Rs.Att;
  const double CompileS = Rs.CompileS;
  const ir::Graph &G = *Att.definition().Graph;

  std::mt19937_64 Rng(Seed);
  HostTensor Q = randomTensor(Rng, C.Dt, C.L, C.B, C.H, C.Sq, C.D);
  HostTensor K = randomTensor(Rng, C.Dt, C.L, C.B, C.Hkv, C.Skv, C.D);
  HostTensor V = randomTensor(Rng, C.Dt, C.L, C.B, C.Hkv, C.Skv, C.DV);

  reference::AttentionInputs In;
  In.Q = Q.Ref;
  In.K = K.Ref;
  In.V = V.Ref;
  runtime::InputMap Inputs;
  std::vector<std::unique_ptr<DeviceBuffer>> InputBufs;
  for (const ir::InputDecl &D : G.decls().Inputs) {
    if (D.Shape == ir::InputShape::PerHead) {
      // Per-head values (ALiBi slopes); the draw follows the case's seed.
      reference::Tensor T = perHeadInput(D, C.H, Rng);
      Inputs[D.Name] = uploadInput(D.Elem == ir::InputType::I32, T.Data,
                                   T.Shape, InputBufs);
      In.Inputs[D.Name] = T;
      continue;
    }
    if (D.Shape != ir::InputShape::Scalar) {
      // Document ids (per row, per key, per token): sorted runs, see
      // documentId; other documents on each later call, so that classes
      // kept from an earlier call would show. The fourth call's ids are not
      // sorted (equal ids in runs apart): nothing in the forward may assume
      // that a mask's ids ascend.
      reference::Tensor T =
          tokenInput(D, C.B, C.H, C.Sq, C.Skv, Call, /*Sorted=*/Call != 3);
      Inputs[D.Name] = uploadInput(D.Elem == ir::InputType::I32, T.Data,
                                   T.Shape, InputBufs);
      In.Inputs[D.Name] = T;
      continue;
    }
    // The first call of a case uses the middle of the sample range; calls
    // again (same Attention objects) other values, so that a block mask
    // kept from an earlier call with another value would show.
    float X = float(D.SampleLo +
                    (D.SampleHi - D.SampleLo) * (Call == 0 ? 0.5 : (Call % 3) / 3.0));
    if (D.Elem == ir::InputType::I32) { // an int32 scalar travels as one
      int32_t I = int32_t(std::lround(X));
      Inputs[D.Name] = I;
      In.Inputs[D.Name] = reference::Tensor({}, double(I));
      continue;
    }
    Inputs[D.Name] = X;
    In.Inputs[D.Name] = reference::Tensor({}, double(X));
  }
  auto T0 = std::chrono::steady_clock::now();
  reference::AttentionOutputs Ref =
      reference::attentionOnline(Att.definition(), In, 0);
  In.RoundProbs = [&](double P) { return roundTo(C.Dt, P); };
  reference::AttentionOutputs Plain =
      reference::attentionOnline(Att.definition(), In, 0);

  double ReferenceS = secondsSince(T0);
  DeviceBuffer DQ(Q.Bits.size() * 2), DK(K.Bits.size() * 2),
      DV(V.Bits.size() * 2);
  DQ.upload(Q.Bits.data(), DQ.size());
  DK.upload(K.Bits.data(), DK.size());
  DV.upload(V.Bits.data(), DV.size());
  size_t OElems = size_t(C.B) * C.H * C.Sq * C.DV;
  size_t NumFinals = G.decls().FinalRowscales.size();
  DeviceBuffer DO(OElems * 2),
      DF(std::max<size_t>(1, NumFinals) * C.B * C.H * C.Sq * 4);
  DType ET = C.Dt;
  auto View = [&](DeviceBuffer &Buf, int H, int S, int D) {
    return runtime::TensorView::contiguous(Buf.get(), ET,
                                           viewShape(C.L, C.B, H, S, D));
  };
  runtime::TensorView Finals = runtime::TensorView::contiguous(
      DF.get(), DType::F32, {int64_t(NumFinals), C.B, C.H, C.Sq});
  std::vector<Outcome> Outcomes;
  std::vector<runtime::Attention *> Runs = {&Att, Rs.RefAtt.get()};
  if (Rs.Att80)
    Runs.insert(Runs.begin() + 1, Rs.Att80.get());
  for (runtime::Attention *A : Runs) {
    DO.poison();
    DF.poison();
    T0 = std::chrono::steady_clock::now();
    A->forward(View(DQ, C.H, C.Sq, C.D), View(DK, C.Hkv, C.Skv, C.D),
               View(DV, C.Hkv, C.Skv, C.DV), View(DO, C.H, C.Sq, C.DV),
               NumFinals ? &Finals : nullptr, Inputs);
    auto &Drv = runtime::CudaDriver::get();
    Drv.check(Drv.cuCtxSynchronize(), "kernel execution");

    std::vector<uint16_t> OBits(OElems);
    DO.download(OBits.data(), OElems * 2);
    std::vector<float> FVals(NumFinals * C.B * C.H * C.Sq);
    if (NumFinals)
      DF.download(FVals.data(), FVals.size() * 4);

    std::string Label = A->lastBackend();
    if (Label == "generated")
      Label += "/" + skeletonOf(*A);
    Outcome R{Label, 0, 0, 0, 0, true, CompileS, ReferenceS, secondsSince(T0)};
    for (int b = 0; b < C.B; ++b)
      for (int h = 0; h < C.H; ++h)
        for (int s = 0; s < C.Sq; ++s) {
          for (int d = 0; d < C.DV; ++d) {
            size_t Off = C.L == Layout::BSHD
                             ? ((size_t(b) * C.Sq + s) * C.H + h) * C.DV + d
                             : ((size_t(b) * C.H + h) * C.Sq + s) * C.DV + d;
            double Got = fromBits(C.Dt, OBits[Off]);
            double Want = Ref.O.at({b, h, s, d});
            double PlainV = roundTo(C.Dt, Plain.O.at({b, h, s, d}));
            double E = std::isnan(Got) ? std::numeric_limits<double>::infinity()
                                       : std::fabs(Got - Want);
            R.Err = std::max(R.Err, E);
            R.PlainErr = std::max(R.PlainErr, std::fabs(PlainV - Want));
          }
          for (size_t f = 0; f < NumFinals; ++f) {
            double Got = FVals[((f * C.B + b) * C.H + h) * C.Sq + s];
            double Want =
                Ref.Finals.at(G.decls().FinalRowscales[f].Name).at({b, h, s});
            double E = (std::isinf(Want) && Got == Want)
                           ? 0.0
                           : std::fabs(Got - Want) / (1.0 + std::fabs(Want));
            if (std::isnan(Got))
              E = std::numeric_limits<double>::infinity();
            R.FinalErr = std::max(R.FinalErr, E);
          }
        }
    double Atol = C.Dt == DType::F16 ? 1e-3 : 8e-3;
    R.Tol = 2 * R.PlainErr + Atol;
    R.Pass = R.Err <= R.Tol && R.FinalErr <= 2e-4;
    Outcomes.push_back(R);
  }
  return Outcomes;
}

std::vector<Case> cases(bool Quick) {
  std::vector<Case> Out;
  const char *Examples[] = {"mha",           "sigmoid_attn",
                            "relu_attn",     "retention",
                            "mha_window",    "mha_emptyrows",
                            "mha_full",      "mha_prefix_lm",
                            "mha_sliding_window", "mha_document",
                            "mha_chunked",   "mha_document_ids",
                            "mha_alibi",     "mha_softcap30"};
  if (Quick) {
    for (const char *E : Examples)
      Out.push_back({E, DType::F16, 64, 64, 1, 2, 2, 70, 70, Layout::BSHD, ""});
    return Out;
  }
  struct Shape {
    int B, H, Hkv, Sq, Skv;
  } Shapes[] = {{1, 2, 2, 1, 1}, {2, 2, 2, 17, 17}, {1, 2, 2, 130, 257}};
  struct Dims {
    int D, DV;
  } AllDims[] = {{64, 64}, {128, 128}, {64, 128}, {128, 256}};
  for (const char *E : Examples)
    for (DType T : {DType::F16, DType::BF16})
      for (Dims Dm : AllDims)
        for (Shape S : Shapes)
          Out.push_back({E, T, Dm.D, Dm.DV, S.B, S.H, S.Hkv, S.Sq, S.Skv,
                         (S.Sq + Dm.D) % 2 ? Layout::BHSD : Layout::BSHD, ""});
  // A sequence that is not a multiple of any tile, with grouped k/v heads.
  for (const char *E : Examples)
    for (DType T : {DType::F16, DType::BF16})
      Out.push_back({E, T, 128, 128, 1, 2, 1, 1000, 1000, Layout::BSHD, ""});
  // Other tile configurations, and one long sequence.
  for (const char *Cfg : {"m128n64w4s2", "m64n128w4s3", "m128n32w8s2"})
    Out.push_back(
        {"mha", DType::F16, 128, 128, 1, 2, 2, 333, 333, Layout::BSHD, Cfg});
  Out.push_back(
      {"mha", DType::BF16, 128, 128, 1, 1, 1, 4096, 4096, Layout::BSHD, ""});
  // The Hopper skeleton's other configurations (one consumer warpgroup, key
  // blocks of 64 and 192, deeper rings), and head dims above 128 (its
  // default there has key blocks of 64) with D != DV, on a causal, a
  // windowed and an unmasked definition.
  for (const char *Cfg : {"sm90.m64n128s2", "sm90.m128n64s3", "sm90.m128n192s2",
                          "sm90.m64n64s4", "sm90.m128n128s2", "sm90.m128n64s4"})
    Out.push_back(
        {"mha", DType::F16, 128, 128, 1, 2, 2, 333, 333, Layout::BSHD, Cfg});
  Out.push_back({"mha_window", DType::BF16, 128, 128, 2, 2, 1, 777, 777,
                 Layout::BHSD, "sm90.m64n128s3"});
  // The persistent forms with more tiles than a GPU has SMs, so that every
  // CTA walks several: two Q tiles (p) and one (p1, O staged in Q's tile,
  // three stages), by the grid's stride (unmasked) and taken from the
  // counter (causal, a window).
  for (const char *Cfg : {"sm90.m128n128s2p", "sm90.m128n128s3p1"})
    for (const char *E : {"mha_full", "mha", "mha_window"})
      Out.push_back({E, DType::F16, 128, 128, 6, 16, 4, 400, 400, Layout::BSHD, Cfg});
  Out.push_back({"mha_full", DType::BF16, 64, 64, 3, 16, 16, 777, 777, Layout::BHSD,
                 "sm90.m128n128s3p1"});
  for (const char *E : {"mha", "mha_window", "mha_full"})
    for (Dims Dm : {Dims{256, 256}, Dims{192, 128}, Dims{128, 192}})
      Out.push_back({E, DType::BF16, Dm.D, Dm.DV, 1, 2, 2, 300, 300,
                     Layout::BSHD, ""});
  // One Attention called again with other lengths and then the first again:
  // a causal mask's block lists are kept between calls of the same shape.
  Out.push_back({"mha", DType::F16, 128, 128, 1, 2, 2, 300, 300, Layout::BSHD,
                 "", {{300, 300}, {17, 300}, {300, 17}, {1000, 1000}, {300, 300}}});
  // Block lists of masks reading a scalar (kept while the value repeats: the
  // prefix length and the chunk change between these calls) or a tensor
  // input (never kept; the ids change between calls; the fourth call's
  // are not sorted), and documents over several batches with grouped k/v
  // heads.
  for (const char *E : {"mha_prefix_lm", "mha_document", "mha_chunked",
                        "mha_document_ids"})
    Out.push_back({E, DType::F16, 128, 128, 2, 4, 2, 700, 700, Layout::BSHD,
                   "", {{700, 700}, {700, 700}, {300, 1000}, {700, 700}}});
  return Out;
}

} // namespace

int main(int Argc, char **Argv) {
  bool Quick = Argc > 1 && std::string(Argv[1]) == "--quick";
  if (!announceDevice())
    return 77;
  int Passed = 0, Failed = 0;
  uint64_t Seed = 1;
  const char *Filter = std::getenv("ATTNC_GPU_TEST_FILTER");
  const char *ConfigFilter = std::getenv("ATTNC_GPU_TEST_CONFIG");
  for (const Case &C : cases(Quick)) {
    if (Filter && C.Def != Filter)
      continue;
    if (!configSelected(ConfigFilter, C.Config))
      continue;
    if (C.Config.rfind("sm90", 0) == 0 && runtime::resolveArch(std::nullopt) != GpuArch::Sm90a)
      continue; // the Hopper skeleton's configurations need sm_90a
    std::string Name = fmt::format("{} {} d{}/{} b{} h{}/{} s{}x{} {}{}", C.Def,
                                   std::string(dtypeName(C.Dt)), C.D, C.DV, C.B, C.H,
                                   C.Hkv, C.Sq, C.Skv, std::string(layoutName(C.L)),
                                   C.Config.empty() ? "" : " " + C.Config);
    try {
      Runners Rs = makeRunners(C);
      std::vector<std::pair<int, int>> Lengths = {{C.Sq, C.Skv}};
      Lengths.insert(Lengths.end(), C.Again.begin(), C.Again.end());
      for (size_t I = 0; I < Lengths.size(); ++I) {
        Case Now = C;
        std::tie(Now.Sq, Now.Skv) = Lengths[I];
        std::string Label =
            I == 0 ? Name
                   : fmt::format("{} again s{}x{}", Name, Now.Sq, Now.Skv);
        for (const Outcome &R : runCase(Now, Rs, Seed++, int(I))) {
          std::printf("%-58s %-14s err %.2e plain %.2e tol %.2e finals %.1e "
                      "[%.1fs %.1fs %.2fs]  %s\n",
                      Label.c_str(), R.Backend.c_str(), R.Err, R.PlainErr,
                      R.Tol, R.FinalErr, R.CompileS, R.ReferenceS, R.DeviceS,
                      R.Pass ? "pass" : "FAIL");
          (R.Pass ? Passed : Failed)++;
        }
      }
    } catch (const std::exception &E) {
      std::printf("%-58s ERROR %s\n", Name.c_str(), E.what());
      ++Failed;
    }
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed\n", Passed, Failed);
  return Failed ? 1 : 0;
}
