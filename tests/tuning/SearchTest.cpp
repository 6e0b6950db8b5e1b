// The tuner's search without a GPU: a stand-in compiler, register report and
// runner show what is pruned, what reaches timing, and what wins.
#include "Examples.h"
#include "attn/Pipeline.h"
#include "attn/codegen/Arch.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/Tuner.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

using namespace attn;
using namespace attn::runtime;
using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;

namespace {

/// Records every call; times are a made-up function of the configuration
/// (bigger tiles faster), so the expected winner is known.
class FakeRunner final : public CandidateRunner {
public:
  std::vector<std::string> Checked, Timed;
  std::set<std::string> Wrong;
  double SleepSeconds = 0;

  std::string check(const std::string &C) override {
    Checked.push_back(C);
    if (SleepSeconds > 0)
      std::this_thread::sleep_for(std::chrono::duration<double>(SleepSeconds));
    return Wrong.count(C) ? "max |o - reference| = 17 > 0.002" : "";
  }
  double time(const std::string &C) override {
    Timed.push_back(C);
    return codegen::Sm90Config::names(C)
               ? fakeMs(codegen::Sm90Config::parse(C))
               : fakeMs(codegen::FwdConfig::parse(C));
  }
  static double fakeMs(const codegen::FwdConfig &C) {
    return 1000.0 / (C.BlockM * C.BlockN) + 0.01 * C.Stages + 0.001 * C.Warps;
  }
  static double fakeMs(const codegen::Sm90Config &C) {
    return 1000.0 / (C.BlockM * C.BlockN) + 0.01 * C.Stages;
  }
};

struct Fixture {
  CompiledDefinition Def = compile(examples::mha());
  SearchPlan Plan;
  std::mutex Mutex;
  std::vector<std::string> Compiled;
  /// Configurations whose stand-in CUBIN reports a stack frame.
  std::map<std::string, int> Frames;
  /// The registers every stand-in CUBIN reports.
  int Registers = 200;

  Fixture() {
    Plan.Skel = &skeletonNamed("fwd_sm80");
    Plan.Target.HeadDim = 128;
    Plan.Target.HeadDimV = 128;
    Plan.Target.Arch = GpuArch::Sm80;
    Plan.Limits = ResourceLimits::forArch(GpuArch::Sm80);
    Plan.Default = codegen::FwdConfig::defaultFor(128, 128, GpuArch::Sm80).str();
    Plan.Flops = 1e12;
    // The compile step sees the generated source; the key names the config.
    Plan.Compile = [this](const codegen::KernelSource &Src) {
      std::lock_guard<std::mutex> G(Mutex);
      Compiled.push_back(Src.Key);
      CacheResult R;
      R.Cubin = std::make_shared<const std::vector<char>>(Src.Key.begin(),
                                                          Src.Key.end());
      R.Source = CacheSource::Compiled;
      R.FullKey = Src.Key;
      R.CompileSeconds = 0;
      R.LookupSeconds = 0;
      return R;
    };
    Plan.Resources = [this](const CacheResult &R, llvm::StringRef) {
      std::string Key(R.Cubin->begin(), R.Cubin->end());
      // The key ends with the configuration; fwd_sm90's carry a dot.
      std::string Config = Key.substr(Key.rfind('.') + 1);
      if (llvm::StringRef(Key).contains(".fwd_sm90."))
        Config = "sm90." + Config;
      auto It = Frames.find(Config);
      return KernelResources{Registers, It == Frames.end() ? 0 : It->second};
    };
  }

  bool compiled(const std::string &Config) const {
    for (const std::string &K : Compiled)
      if (llvm::StringRef(K).endswith("." + Config))
        return true;
    return false;
  }
};

const CandidateResult &find(const std::vector<CandidateResult> &Rs,
                            const std::string &Config) {
  for (const CandidateResult &R : Rs)
    if (R.Config == Config)
      return R;
  FAIL("no candidate " << Config);
  return Rs.front();
}

bool contains(const std::vector<std::string> &V, const std::string &S) {
  return std::find(V.begin(), V.end(), S) != V.end();
}

} // namespace

TEST_CASE("shared-memory overflow never reaches compiling or timing",
          "[tuning][search]") {
  Fixture F;
  FakeRunner Runner;
  std::string Log;
  llvm::raw_string_ostream OS(Log);
  std::vector<CandidateResult> Rs =
      searchSkeleton(F.Def, F.Plan, Runner, TuneOptions(), &OS);
  OS.flush();
  REQUIRE(Rs.size() == codegen::FwdConfig::enumerate().size());
  unsigned Overflow = 0;
  for (const CandidateResult &R : Rs) {
    const std::string &C = R.Config;
    if (codegen::FwdConfig::parse(C).sharedBytes(128, 128) > 163 * 1024) {
      ++Overflow;
      CHECK(R.Status == CandidateStatus::Pruned);
      CHECK_THAT(R.Reason, Contains("shared memory"));
      CHECK_FALSE(F.compiled(C));
      CHECK_FALSE(contains(Runner.Checked, C));
      CHECK_FALSE(contains(Runner.Timed, C));
    } else {
      CHECK(R.Status == CandidateStatus::Timed);
      CHECK(contains(Runner.Timed, C));
    }
  }
  // m64n128w4s3, m128n128w{4,8}s3, m256n128w{4,8}s{2,3} need more than
  // sm_80's 163 KiB at d128.
  CHECK(Overflow == 7);
  // The default is checked and timed first.
  REQUIRE_FALSE(Runner.Timed.empty());
  CHECK(Runner.Timed.front() == "m128n64w4s2");
  // Timed candidates come first, fastest first: the fake's winner.
  CHECK(Rs.front().Status == CandidateStatus::Timed);
  for (size_t I = 1; I < Rs.size() && Rs[I].Status == CandidateStatus::Timed;
       ++I)
    CHECK(Rs[I - 1].Ms <= Rs[I].Ms);
  codegen::FwdConfig Best = codegen::FwdConfig::parse(Rs.front().Config);
  CHECK(Best.BlockM * Best.BlockN >= 256 * 64);
  CHECK(Rs.front().Tflops == Approx(1.0 / (Rs.front().Ms * 1e-3)));
  // One progress line per candidate, numbered.
  CHECK_THAT(Log, Contains("[1/30] m64n128w4s3: pruned: needs 212992 bytes "
                           "of shared memory; 166912 allowed"));
  CHECK_THAT(Log, Contains("[30/30] "));
  CHECK_THAT(Log, Contains("(default)"));
  // Where the search is: kernels compiled, the best so far (the default
  // once it is timed, the winner by the last line) and the elapsed time.
  CHECK_THAT(Log, Contains("compiling: 23/23 kernels  | "));
  CHECK_THAT(Log, Contains("(default)  | best so far m128n64w4s2 "));
  std::string Last = Log.substr(Log.rfind("\n[", Log.size() - 2) + 1);
  CHECK_THAT(Last, Contains("  | best so far " + Rs.front().Config + " "));
  CHECK_THAT(Last, EndsWith(" s\n"));
}

TEST_CASE("a spilling candidate is pruned after compiling; the default is "
          "timed even if it spills",
          "[tuning][search]") {
  Fixture F;
  F.Frames["m128n128w4s2"] = 464; // as ptxas reports for d128 on sm_80
  F.Frames["m128n64w4s2"] = 72;   // the default
  FakeRunner Runner;
  std::vector<CandidateResult> Rs =
      searchSkeleton(F.Def, F.Plan, Runner, TuneOptions(), nullptr);
  const CandidateResult &Spill = find(Rs, "m128n128w4s2");
  CHECK(F.compiled("m128n128w4s2"));
  CHECK(Spill.Status == CandidateStatus::Pruned);
  CHECK_THAT(Spill.Reason, Contains("464 bytes stack frame"));
  CHECK_FALSE(contains(Runner.Checked, "m128n128w4s2"));
  CHECK_FALSE(contains(Runner.Timed, "m128n128w4s2"));
  const CandidateResult &Def = find(Rs, "m128n64w4s2");
  CHECK(Def.IsDefault);
  CHECK(Def.Status == CandidateStatus::Timed);
  CHECK(Def.Resources.StackFrameBytes == 72);

  // A candidate that spills no more than the default is timed: it risks
  // nothing the baseline does not.
  Fixture Light;
  Light.Frames["m128n128w4s2"] = 464;
  Light.Frames["m64n64w4s2"] = 72;
  Light.Frames["m64n32w4s2"] = 48;
  Light.Frames["m128n64w4s2"] = 72;
  FakeRunner Runner1;
  std::vector<CandidateResult> Rs1 =
      searchSkeleton(Light.Def, Light.Plan, Runner1, TuneOptions(), nullptr);
  CHECK(find(Rs1, "m64n64w4s2").Status == CandidateStatus::Timed);
  CHECK(find(Rs1, "m64n32w4s2").Status == CandidateStatus::Timed);
  CHECK(find(Rs1, "m128n128w4s2").Status == CandidateStatus::Pruned);
  CHECK_THAT(find(Rs1, "m128n128w4s2").Reason, Contains("limit 72"));

  // With a spill allowance the spilling candidate is timed.
  Fixture G;
  G.Frames["m128n128w4s2"] = 464;
  FakeRunner Runner2;
  TuneOptions Opts;
  Opts.MaxStackFrameBytes = 512;
  G.Plan.Limits.MaxStackFrameBytes = 512;
  std::vector<CandidateResult> Rs2 =
      searchSkeleton(G.Def, G.Plan, Runner2, Opts, nullptr);
  CHECK(find(Rs2, "m128n128w4s2").Status == CandidateStatus::Timed);
}

TEST_CASE("a wrong candidate is rejected and never timed, however fast",
          "[tuning][search]") {
  Fixture F;
  FakeRunner Runner;
  // The fake's fastest configuration that fits: make it wrong.
  std::vector<CandidateResult> First =
      searchSkeleton(F.Def, F.Plan, Runner, TuneOptions(), nullptr);
  std::string Fastest = First.front().Config;
  Fixture G;
  FakeRunner Wrong;
  Wrong.Wrong.insert(Fastest);
  std::vector<CandidateResult> Rs =
      searchSkeleton(G.Def, G.Plan, Wrong, TuneOptions(), nullptr);
  const CandidateResult &R = find(Rs, Fastest);
  CHECK(R.Status == CandidateStatus::Rejected);
  CHECK_THAT(R.Reason, Contains("reference"));
  CHECK(contains(Wrong.Checked, Fastest));
  CHECK_FALSE(contains(Wrong.Timed, Fastest));
  CHECK(Rs.front().Config != Fastest);
  CHECK(Rs.front().Status == CandidateStatus::Timed);
}

TEST_CASE("a compile failure is reported, not fatal", "[tuning][search]") {
  Fixture F;
  auto Real = F.Plan.Compile;
  F.Plan.Compile = [Real](const codegen::KernelSource &Src) {
    if (llvm::StringRef(Src.Key).endswith(".m128n64w4s3"))
      throw CompileError(Src.Key, "error: something\nmore", "/tmp/x.cu");
    return Real(Src);
  };
  FakeRunner Runner;
  std::vector<CandidateResult> Rs =
      searchSkeleton(F.Def, F.Plan, Runner, TuneOptions(), nullptr);
  const CandidateResult &R = find(Rs, "m128n64w4s3");
  CHECK(R.Status == CandidateStatus::CompileFailed);
  CHECK_THAT(R.Reason, Contains("NVRTC failed to compile"));
  CHECK_FALSE(contains(Runner.Checked, "m128n64w4s3"));
  CHECK(Rs.front().Status == CandidateStatus::Timed);
}

TEST_CASE("the budget stops timing new candidates; the default still runs",
          "[tuning][search]") {
  Fixture F;
  FakeRunner Runner;
  Runner.SleepSeconds = 0.02;
  TuneOptions Opts;
  Opts.BudgetSeconds = 0.05;
  std::string Log;
  llvm::raw_string_ostream OS(Log);
  std::vector<CandidateResult> Rs =
      searchSkeleton(F.Def, F.Plan, Runner, Opts, &OS);
  OS.flush();
  unsigned Skipped = 0, Timed = 0;
  for (const CandidateResult &R : Rs) {
    Skipped += R.Status == CandidateStatus::SkippedBudget;
    Timed += R.Status == CandidateStatus::Timed;
  }
  CHECK(Timed >= 1);
  CHECK(Timed < 10);
  CHECK(Skipped > 0);
  CHECK(find(Rs, "m128n64w4s2").Status == CandidateStatus::Timed);
  CHECK(Runner.Checked.size() == Timed);
  CHECK_THAT(Log, Contains("skipped: time budget spent"));
}

TEST_CASE("fwd_sm90's space: shared memory prunes, the default goes first",
          "[tuning][search]") {
  Fixture F;
  F.Plan.Target.Arch = GpuArch::Sm90a;
  F.Plan.Skel = &skeletonNamed("fwd_sm90");
  F.Plan.Limits = ResourceLimits::forArch(GpuArch::Sm90a);
  F.Plan.Default = codegen::Sm90Config::defaultFor(128, 128).str();
  // What ptxas gives fwd_sm90 at launch (setmaxnreg moves them later): 168
  // x 384 threads fit a block's 64K registers.
  F.Registers = 168;
  FakeRunner Runner;
  std::vector<CandidateResult> Rs =
      searchSkeleton(F.Def, F.Plan, Runner, TuneOptions(), nullptr);
  REQUIRE(Rs.size() == codegen::Sm90Config::enumerate().size());
  unsigned Overflow = 0;
  for (const CandidateResult &R : Rs) {
    REQUIRE(codegen::Sm90Config::names(R.Config));
    codegen::Sm90Config C = codegen::Sm90Config::parse(R.Config);
    if (C.sharedBytes(128, 128) > archSharedLimit(GpuArch::Sm90a)) {
      ++Overflow;
      CHECK(R.Status == CandidateStatus::Pruned);
      CHECK_THAT(R.Reason, Contains("shared memory"));
      CHECK_FALSE(F.compiled(R.Config));
      CHECK_FALSE(contains(Runner.Timed, R.Config));
    } else {
      INFO(R.Config << ": " << R.Reason);
      CHECK(R.Status == CandidateStatus::Timed);
    }
  }
  // 192-key blocks with four stages cannot fit 227 KiB at d128.
  CHECK(Overflow > 0);
  REQUIRE_FALSE(Runner.Timed.empty());
  CHECK(Runner.Timed.front() == "sm90.m128n128s3");
  CHECK(find(Rs, "sm90.m128n128s3").IsDefault);

  // 200 registers x 384 threads do not fit: the two-consumer configurations
  // are pruned after compiling, the one-consumer ones (256 threads) not.
  Fixture H;
  H.Plan.Target.Arch = GpuArch::Sm90a;
  H.Plan.Skel = &skeletonNamed("fwd_sm90");
  H.Plan.Limits = ResourceLimits::forArch(GpuArch::Sm90a);
  H.Plan.Default = F.Plan.Default;
  FakeRunner Runner200;
  for (const CandidateResult &R :
       searchSkeleton(H.Def, H.Plan, Runner200, TuneOptions(), nullptr)) {
    if (R.Status != CandidateStatus::Pruned ||
        R.Reason.find("shared memory") != std::string::npos)
      continue;
    CHECK(codegen::Sm90Config::parse(R.Config).BlockM == 128);
    CHECK_THAT(R.Reason, Contains("200 registers x 384 threads"));
  }
  CHECK(contains(Runner200.Timed, "sm90.m64n128s3"));
  CHECK_FALSE(contains(Runner200.Timed, "sm90.m128n128s2"));

  // fwd_sm90 on an arch without wgmma: nothing compiles, the reason says why.
  Fixture G;
  G.Plan.Skel = &skeletonNamed("fwd_sm90");
  G.Plan.Default = codegen::Sm90Config::defaultFor(128, 128).str();
  FakeRunner None;
  std::vector<CandidateResult> Rs80 =
      searchSkeleton(G.Def, G.Plan, None, TuneOptions(), nullptr);
  for (const CandidateResult &R : Rs80) {
    CHECK(R.Status == CandidateStatus::Pruned);
    CHECK_THAT(R.Reason, Contains("sm_90a"));
  }
  CHECK(G.Compiled.empty());
}
