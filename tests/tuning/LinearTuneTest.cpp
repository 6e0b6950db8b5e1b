// The linear_chunk autotuner without a GPU: its search space, shared-memory
// pruning through the generic search with a stand-in compiler and runner,
// the tune key, and selectLinearConfig with matching, stale and bad
// tune-file entries. The resource model's linear rules are tested in
// ResourceModelTest.cpp.
#include "Examples.h"
#include "TempDir.h"
#include "attn/Pipeline.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/LinearTuner.h"
#include "attn/runtime/TuneFile.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <mutex>
#include <set>

using namespace attn;
using namespace attn::runtime;
using Catch::Matchers::Contains;

namespace {

const std::string Device = "Test GPU 80GB";

/// Records what reaches the device side; times favour larger chunks, so
/// the winner is known.
class FakeRunner final : public CandidateRunner {
public:
  std::vector<std::string> Checked, Timed;
  std::string check(const std::string &C) override {
    Checked.push_back(C);
    return "";
  }
  double time(const std::string &C) override {
    Timed.push_back(C);
    codegen::LinearConfig L = codegen::LinearConfig::parse(C);
    return 100.0 / L.Chunk + 0.01 * L.SliceV + 0.001 * (L.Warps + L.BwdWarps);
  }
};

/// tune.json in a fresh temporary directory, removed with it.
struct TempFile {
  attn::testing::TempDir Dir{"attnc-linear"};
  std::string Path = Dir.Path + "/tune.json";
};

codegen::LinearKernelSpec spec(int D, int DV, GpuArch Arch) {
  codegen::LinearKernelSpec S;
  S.HeadDim = D;
  S.HeadDimV = DV;
  S.Arch = Arch;
  S.Config = codegen::LinearConfig::defaultFor(D, DV, Arch);
  return S;
}

} // namespace

TEST_CASE("the linear search space is what the skeletons accept",
          "[tuning][linear]") {
  std::vector<codegen::LinearConfig> All = linearCandidates(128, 64);
  REQUIRE(!All.empty());
  for (const codegen::LinearConfig &C : All)
    CHECK(C.structuralError(128, 64).empty());
  // 128 value columns do not split into slices of 128 for DV = 64, and
  // chunks of 128 need a multiple of 8 warps.
  CHECK(std::none_of(All.begin(), All.end(), [](const codegen::LinearConfig &C) {
    return C.SliceV == 128 || (C.Chunk == 128 && C.Warps == 4);
  }));
  auto Has = [&](const std::string &S) {
    return std::any_of(All.begin(), All.end(),
                       [&](const codegen::LinearConfig &C) { return C.str() == S; });
  };
  CHECK(All.size() == 12);
  CHECK(linearCandidates(128, 128).size() == 26);
  CHECK(linearCandidates(256, 512).size() == 39);
  // The backward's warps need not split the state rows (the state passes
  // have their own): 16 of them over chunks of 64 at D = 128 are fine.
  CHECK(Has("c64v64w4b16"));
  CHECK(Has(codegen::LinearConfig::defaultFor(128, 64, GpuArch::Sm90a).str()));
  CHECK(Has("c32v64w4b4"));
  CHECK(Has("c128v64w8b8"));
  // D = 64 cannot give each of 8 warps whole m16 tiles of state rows.
  for (const codegen::LinearConfig &C : linearCandidates(64, 128))
    CHECK(C.Warps == 4);
}

TEST_CASE("linear configurations over the shared memory of the arch never "
          "compile",
          "[tuning][linear]") {
  CompiledDefinition Def = compile(examples::retentionLinear());
  // D = 128, DV = 512 on sm_86 (99 KiB a block): chunks of 128 and the
  // larger slices do not fit.
  codegen::LinearKernelSpec Base = spec(128, 512, GpuArch::Sm86);
  ResourceLimits L = ResourceLimits::forArch(GpuArch::Sm86);

  SearchPlan Plan;
  Plan.Skel = &skeletonNamed("linear_chunk");
  Plan.Target = KernelTarget::of(Def, Direction::Forward, Base.Dtype,
                                 Base.HeadDim, Base.HeadDimV, Base.Arch);
  Plan.Limits = L;
  SearchSpace Space = skeletonSearchSpace(Def, Plan);
  CHECK(Space.Skeleton == "linear_chunk");
  CHECK(Space.Default == Base.Config.str());
  std::set<std::string> OverLimit;
  for (const std::string &C : Space.Candidates) {
    std::string Why = Space.PruneBeforeCompile(C);
    if (Why.find("shared memory") != std::string::npos)
      OverLimit.insert(C);
  }
  REQUIRE(OverLimit.count("c128v128w8b8"));
  REQUIRE(OverLimit.size() < Space.Candidates.size());

  // A stand-in compiler: records each source's key (which ends with the
  // configuration) and reports no spills.
  std::mutex Mutex;
  std::vector<std::string> Compiled;
  Space.Compile = [&](const codegen::KernelSource &Src) {
    std::lock_guard<std::mutex> G(Mutex);
    Compiled.push_back(Src.Key);
    return std::vector<KernelResources>(linearJudgedEntries(Src).size(),
                                        KernelResources{64, 0});
  };
  FakeRunner Runner;
  TuneOptions Opts;
  Opts.CompileThreads = 2;
  std::vector<CandidateResult> R = searchCandidates(Space, Runner, Opts, nullptr);
  for (const std::string &Key : Compiled)
    for (const std::string &C : OverLimit)
      CHECK(!llvm::StringRef(Key).endswith("." + C));
  for (const std::string &C : Runner.Timed)
    CHECK(!OverLimit.count(C));
  for (const CandidateResult &C : R)
    if (OverLimit.count(C.Config)) {
      CHECK(C.Status == CandidateStatus::Pruned);
      CHECK(!C.Compiled);
    }
  // Each surviving candidate compiles a forward and a backward.
  CHECK(Compiled.size() == 2 * (Space.Candidates.size() - OverLimit.size()));
  REQUIRE(R.front().Status == CandidateStatus::Timed);
  CHECK(codegen::LinearConfig::parse(R.front().Config).Chunk == 64);
}

TEST_CASE("the linear tune key", "[tuning][linear]") {
  CompiledDefinition Mamba = compile(examples::mamba2());
  CompiledDefinition Gla = compile(examples::simpleGla());
  LinearSignature Sig;
  Sig.HeadDim = 128;
  Sig.HeadDimV = 64;
  Sig.Dtype = DType::BF16;
  LinearShape S{8, 80, 1, 3000};
  TuneKey K = makeLinearTuneKey(Mamba, Sig, GpuArch::Sm90a, S, Device);
  CHECK(K.Skeleton == "linear_chunk");
  CHECK(K.Device == Device);
  CHECK(K.Arch == "sm_90a");
  CHECK(K.Variant == variantKey(Mamba));
  CHECK(K.Dtype == DType::BF16);
  CHECK(K.HeadDim == 128);
  CHECK(K.HeadDimV == 64);
  CHECK(K.Bucket == shapeBucket(8, 80, 4096, 4096));
  CHECK(K.Bucket.str() == "q4096.kv4096.bh1024");
  // Same bucket: the q/k head count and the exact length do not matter.
  CHECK(makeLinearTuneKey(Mamba, Sig, GpuArch::Sm90a, {8, 80, 80, 4096}, Device) ==
        K);
  CHECK_FALSE(makeLinearTuneKey(Mamba, Sig, GpuArch::Sm90a, {8, 80, 1, 5000},
                                Device) == K);
  CHECK_FALSE(makeLinearTuneKey(Gla, Sig, GpuArch::Sm90a, S, Device) == K);
}

TEST_CASE("the linear selector: explicit, tuned, stale, default",
          "[tuning][linear]") {
  CompiledDefinition Def = compile(examples::simpleGla());
  TempFile F;
  LinearSignature Sig;
  Sig.HeadDim = 128;
  Sig.HeadDimV = 128;
  Sig.TuneFile = F.Path;
  const GpuArch Arch = GpuArch::Sm90a;
  LinearShape S{8, 32, 32, 2048};
  const std::string Default =
      codegen::LinearConfig::defaultFor(128, 128, Arch).str();
  auto Select = [&](const LinearSignature &G, const LinearShape &Sh,
                    const std::string &Dev = Device) {
    KernelTarget T = linearKernelTarget(Def, G, Arch, Direction::Forward);
    KernelPolicy P =
        KernelPolicy::parse(T, G.Skeleton, G.Config, G.TuneFile, G.Tune);
    return chooseKernel(Def, T, P,
                        TuneShape{Sh.Batch, Sh.Heads, Sh.HeadsQK, Sh.Seq, Sh.Seq},
                        Dev, [&] {
                          return tuneLinear(Def, G, Arch, Sh, TuneOptions(),
                                            nullptr)
                              .Entry;
                        })
        .configText();
  };
  auto Entry = [&](const std::string &Config) {
    TuneEntry E;
    E.Key = makeLinearTuneKey(Def, Sig, Arch, S, Device);
    E.Definition = Def.Graph->name();
    E.Best = {Config, 1.0, 0.0};
    return E;
  };

  // A missing file: the default.
  CHECK(Select(Sig, S) == Default);

  // Stale entries, each with one key field of another device, toolchain,
  // variant or skeleton, are never applied.
  std::vector<TuneEntry> Stale(4, Entry("c32v64w4b4"));
  Stale[0].Key.Device = "Another GPU";
  Stale[1].Key.Nvrtc = "11.0";
  Stale[2].Key.Variant = std::string(64, '0');
  Stale[3].Key.Skeleton = "fwd_sm80";
  Stale[3].Best.Config = "m64n64w4s2";
  mergeIntoTuneFile(F.Path, Stale);
  CHECK(Select(Sig, S) == Default);

  // The matching entry is used, for every shape of its bucket, and only on
  // its device.
  mergeIntoTuneFile(F.Path, {Entry("c128v128w8b8")});
  CHECK(Select(Sig, S) == "c128v128w8b8");
  CHECK(Select(Sig, {4, 64, 1, 1500}) == "c128v128w8b8");
  CHECK(Select(Sig, {8, 32, 32, 4096}) == Default);
  CHECK(Select(Sig, S, "Another GPU") == "c32v64w4b4");
  CHECK(Select(Sig, S, "Third GPU") == Default);

  // An explicit configuration wins; without a file or Tune, the default.
  LinearSignature Explicit = Sig;
  Explicit.Config = "c32v64w4b4";
  CHECK(Select(Explicit, S) == "c32v64w4b4");
  LinearSignature NoFile = Sig;
  NoFile.TuneFile.clear();
  CHECK(Select(NoFile, S) == Default);

  // A hand-edited entry the kernels cannot run (chunks of 128 need a
  // multiple of 8 warps) is refused, not launched.
  mergeIntoTuneFile(F.Path, {Entry("c128v64w4b8")});
  CHECK_THROWS_AS(Select(Sig, S), InvalidArgument);
  CHECK_THROWS_WITH(Select(Sig, S), Contains("c128v64w4b8"));
}
