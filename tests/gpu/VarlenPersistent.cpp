// gpu_varlen_test --persistent: fwd_sm90's persistent walk over a packed
// call's tiles (fwd_sm90_persist.cuh, attnc_fwd_packed) against the plain
// packed kernel of the same blocks and stages, bit for bit, over a batch of
// more tiles than the device has SMs (each CTA walks many, across sequences
// of every length, empty ones and single tokens among them), for every mask
// whose key-block ranges come from box classes; and a mask that reads a
// tensor (per-token document ids), whose packed calls keep the plain kernel
// under a persistent configuration. The fp64 reference checks of the walk
// are the case matrix's, run with ATTNC_FWD_PERSISTENT=1.
#include "VarlenCases.h"

#include "ListVisits.h"
#include "TestDefinitions.h"

#include <fmt/format.h>

#include <cstdio>
#include <random>

namespace attn::gputest::varlen {

namespace {

/// 48 sequences of 0 to 1500 tokens, 0 and 1 among them.
std::vector<int> persistentLengths() {
  std::mt19937_64 Rng(77);
  std::uniform_int_distribution<int> U(0, 1500);
  std::vector<int> L(48);
  for (size_t I = 0; I < L.size(); ++I)
    L[I] = I % 11 == 3 ? 0 : I % 13 == 5 ? 1 : U(Rng);
  return L;
}

runtime::Signature persistentSignature(int D, const std::string &Config) {
  runtime::Signature Sig;
  Sig.Dtype = DType::F16;
  Sig.HeadDim = Sig.HeadDimV = D;
  Sig.TensorLayout = Layout::THD;
  Sig.Backend = "generated";
  Sig.Config = Config;
  return Sig;
}

/// The plain and persistent configurations of head dim \p D's default
/// blocks (the persistent form's stages where they fit beside O).
std::pair<std::string, std::string> persistentConfigs(int D) {
  codegen::Sm90Config P = *codegen::Sm90Config::defaultFor(D, D).persistentFor(D, D);
  codegen::Sm90Config Plain = P;
  Plain.Persistent = false;
  return {Plain.str(), P.str()};
}

/// One definition's packed forward on both configurations; true when the
/// outputs and finals are the same bits and the persistent kernel ran
/// (\p Walks) or did not.
bool runPersistentCase(const std::string &DefName, int D, bool Walks, uint64_t Seed) {
  const int H = 16, Hkv = 4;
  const std::vector<int> L = persistentLengths();
  const std::vector<int> Cu = cumulative(L);
  const int64_t T = Cu.back();
  const auto [PlainCfg, PersistCfg] = persistentConfigs(D);
  dsl::AttentionDef Def = makeDefinition(DefName);
  runtime::Attention Plain(Def, persistentSignature(D, PlainCfg)),
      Persist(Def, persistentSignature(D, PersistCfg));
  const ir::Graph &G = *Plain.definition().Graph;

  std::mt19937_64 Rng(Seed);
  std::normal_distribution<double> N(0.0, 1.0);
  auto Random = [&](int64_t Elems) {
    std::vector<uint16_t> B(static_cast<size_t>(Elems));
    for (uint16_t &X : B)
      X = toBits(DType::F16, N(Rng));
    return upload(B.data(), B.size() * 2);
  };
  auto DQ = Random(T * H * D), DK = Random(T * Hkv * D), DV = Random(T * Hkv * D);
  auto DCu = upload(Cu.data(), Cu.size() * 4);
  runtime::InputMap Inputs;
  std::vector<std::unique_ptr<DeviceBuffer>> Bufs;
  for (const ir::InputDecl &In : G.decls().Inputs) {
    if (In.Shape == ir::InputShape::Scalar) {
      std::uniform_real_distribution<double> U(In.SampleLo, In.SampleHi);
      if (In.Elem == ir::InputType::I32)
        Inputs[In.Name] = int32_t(std::lround(U(Rng)));
      else
        Inputs[In.Name] = float(U(Rng));
      continue;
    }
    // Per-token int32 document ids, one buffer for the query and key
    // sides (the same tokens): documents of 1 to 300 tokens.
    const bool Token = In.Shape == ir::InputShape::PerQueryToken ||
                       In.Shape == ir::InputShape::PerKeyToken;
    if (!Token || In.Elem != ir::InputType::I32)
      throw std::runtime_error("persistent cases: input '" + In.Name + "' not drawn");
    if (Bufs.empty()) {
      std::vector<int32_t> Ids(size_t(std::max<int64_t>(T, 1)));
      std::uniform_int_distribution<int> Len(1, 300);
      for (size_t I = 0, Doc = 0; I < Ids.size(); ++Doc)
        for (int K = Len(Rng); K > 0 && I < Ids.size(); --K)
          Ids[I++] = int32_t(Doc);
      Bufs.push_back(upload(Ids.data(), Ids.size() * 4));
    }
    Inputs[In.Name] = runtime::TensorView::contiguous(Bufs.back()->get(), DType::I32, {T});
  }
  const size_t NumFinals = G.decls().FinalRowscales.size();
  runtime::VarlenBatch VB;
  VB.CuSeqlensQ = VB.CuSeqlensKv =
      runtime::TensorView::contiguous(DCu->get(), DType::I32, {int64_t(L.size()) + 1});
  VB.MaxSeqlenQ = VB.MaxSeqlenKv = longest(L);

  auto Run = [&](runtime::Attention &A) {
    DeviceBuffer O(size_t(T) * H * D * 2), F(std::max<size_t>(1, NumFinals) * H * T * 4);
    O.poison();
    F.poison();
    runtime::TensorView Finals =
        runtime::TensorView::contiguous(F.get(), DType::F32, {int64_t(NumFinals), H, T});
    auto View = [&](const DeviceBuffer &B, int Heads) {
      return runtime::TensorView::contiguous(B.get(), DType::F16, {T, Heads, D});
    };
    A.forwardVarlen(View(*DQ, H), View(*DK, Hkv), View(*DV, Hkv), View(O, H),
                    NumFinals ? &Finals : nullptr, VB, Inputs);
    auto &Drv = runtime::CudaDriver::get();
    Drv.check(Drv.cuCtxSynchronize(), "forward");
    std::vector<uint16_t> OBits(size_t(T) * H * D);
    std::vector<uint32_t> FBits(NumFinals * H * T);
    O.download(OBits.data(), OBits.size() * 2);
    if (NumFinals)
      F.download(FBits.data(), FBits.size() * 4);
    return std::make_pair(OBits, FBits);
  };
  const auto Want = Run(Plain);
  const uint64_t Before = runtime::persistentForwardLaunches();
  const auto Got = Run(Persist);
  // A second call: the tile counters the first left must be back at 0.
  const auto Again = Run(Persist);
  const uint64_t Launched = runtime::persistentForwardLaunches() - Before;
  const bool Pass = Got == Want && Again == Want && Launched == (Walks ? 2u : 0u);
  std::printf("%-62s same bits %d, again %d, persistent launches %llu (want %d)  %s\n",
              fmt::format("persistent packed {} f16 d{} h{}/{} b{} tokens {} ({} vs {})",
                          DefName, D, H, Hkv, L.size(), T, PersistCfg, PlainCfg)
                  .c_str(),
              Got == Want, Again == Want, (unsigned long long)Launched, Walks ? 2 : 0,
              Pass ? "pass" : "FAIL");
  return Pass;
}

/// The definitions of the persistent cases, and whether their packed
/// calls walk.
const std::vector<std::pair<const char *, bool>> &persistentDefinitions() {
  static const std::vector<std::pair<const char *, bool>> Defs = {
      {"mha_full", true},          {"mha", true},           {"mha_sliding_window", true},
      {"mha_chunked", true},       {"mha_prefix_lm", true}, {"mha_window", true},
      {"mha_document_ids", false}};
  return Defs;
}

} // namespace

int persistentCases(bool CompileOnly) {
  if (CompileOnly) {
    for (int D : {64, 128})
      for (const auto &[Def, Walks] : persistentDefinitions()) {
        (void)Walks;
        const auto [PlainCfg, PersistCfg] = persistentConfigs(D);
        for (const std::string &Cfg : {PlainCfg, PersistCfg}) {
          runtime::Signature Sig = persistentSignature(D, Cfg);
          Sig.Arch = GpuArch::Sm90a;
          runtime::Attention Att(makeDefinition(Def), Sig);
          std::printf("compiled %s d%d: %s\n", Def, D, Att.forwardChoice().str().c_str());
        }
      }
    return 0;
  }
  if (runtime::currentDevice().Major != 9) {
    std::printf("persistent packed cases: skipped (not sm_90)\n");
    return 0;
  }
  int Passed = 0, Failed = 0;
  uint64_t Seed = 900;
  for (int D : {64, 128})
    for (const auto &[Def, Walks] : persistentDefinitions()) {
      try {
        (runPersistentCase(Def, D, Walks, Seed++) ? Passed : Failed)++;
      } catch (const std::exception &E) {
        std::printf("persistent packed %s d%d: ERROR %s\n", Def, D, E.what());
        ++Failed;
      }
      std::fflush(stdout);
    }
  std::printf("persistent packed cases: %d passed, %d failed\n", Passed, Failed);
  return Failed;
}

} // namespace attn::gputest::varlen
