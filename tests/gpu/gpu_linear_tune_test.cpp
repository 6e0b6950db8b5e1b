// GPU test of the linear autotuner: a LinearAttention with Tune on tunes one
// shape (forward + backward, every candidate checked against the fp64
// recurrence) and writes the tune file; a fresh LinearAttention with that
// file runs the tuned configuration without tuning again; a file entry
// naming a non-default configuration is what a call runs; a candidate whose
// checked output is corrupted is rejected. Exits 77 without a GPU.
#include "Examples.h"
#include "attn/Pipeline.h"
#include "attn/codegen/Arch.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/LinearProblem.h"
#include "attn/runtime/LinearTuner.h"
#include "attn/runtime/TuneFile.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"

#include <cstdio>
#include <string>

using namespace attn;
using namespace attn::runtime;

namespace {

int Failures = 0;

void expect(bool Ok, const std::string &What) {
  std::printf("%s: %s\n", Ok ? "pass" : "FAIL", What.c_str());
  if (!Ok)
    ++Failures;
}

} // namespace

int main() {
  CudaDriver &Drv = CudaDriver::get();
  if (!Drv.available()) {
    std::printf("skipped: %s\n", Drv.unavailableReason().c_str());
    return 77;
  }
  try {
    const DeviceInfo &Dev = currentDevice();
    std::printf("device: %s (%s)\n", Dev.Name.c_str(), archName(resolveArch(std::nullopt)).data());
    llvm::SmallString<128> Dir;
    if (llvm::sys::fs::createUniqueDirectory("attnc-linear-tune", Dir))
      throw std::runtime_error("cannot make a temporary directory");
    std::string Path = std::string(Dir) + "/tune.json";

    dsl::LinearAttentionDef UserDef = examples::simpleGla();
    LinearSignature Sig;
    Sig.HeadDim = 128;
    Sig.HeadDimV = 128;
    Sig.TuneFile = Path;
    Sig.Tune = true;
    LinearShape Shape{2, 8, 8, 1000};

    // 1. Tune through the runtime: the first call tunes and writes.
    unsigned Runs0 = linearTuneRunCount();
    std::string Tuned;
    {
      LinearAttention Lin(UserDef, Sig);
      LinearProblem P(Lin.definition(), Sig, Shape, 1, 3);
      P.forward(Lin, 0);
      P.backward(Lin, 0);
      Drv.check(Drv.cuCtxSynchronize(), "tuned calls");
      expect(linearTuneRunCount() == Runs0 + 1, "the first call tuned once");
      TuneFileData Data = readTuneFile(Path);
      expect(Data.Entries.size() == 1, "the tune file has one entry");
      if (Data.Entries.empty())
        throw std::runtime_error("no entry written");
      const TuneEntry &E = Data.Entries[0];
      Tuned = E.Best.Config;
      std::printf("tuned %s: %.3f ms (default %s: %.3f ms) in %.1f s\n",
                  Tuned.c_str(), E.Best.Ms, E.Default.Config.c_str(),
                  E.Default.Ms, E.TuneSeconds);
      expect(E.Key.Skeleton == "linear_chunk", "the entry's skeleton");
      expect(E.Key.Device == Dev.Name, "the entry's device");
      expect(!E.Default.Config.empty() && E.Best.Ms <= E.Default.Ms,
             "the default was timed and the best is no slower");
      expect(Lin.lastConfig().str() == Tuned,
             "the tuning object runs the tuned configuration");
    }

    // 2. A fresh object with the file (Tune still on): no tuning, the
    // tuned configuration, also for another shape of the bucket.
    {
      LinearAttention Lin(UserDef, Sig);
      LinearProblem P(Lin.definition(), Sig, {2, 8, 8, 1023}, 1, 4);
      P.forward(Lin, 0);
      P.backward(Lin, 0);
      Drv.check(Drv.cuCtxSynchronize(), "calls with the file");
      expect(linearTuneRunCount() == Runs0 + 1, "a fresh object did not tune");
      expect(Lin.lastConfig().str() == Tuned,
             "a fresh object runs the tuned configuration");
    }

    // 3. An entry naming a non-default configuration is what runs, and the
    // result is still right (the forward matches the default's).
    {
      CompiledDefinition Def = compile(UserDef);
      LinearSignature NoTune = Sig;
      NoTune.Tune = false;
      LinearShape Other{1, 4, 4, 333};
      std::string Default =
          codegen::LinearConfig::defaultFor(128, 128, resolveArch(std::nullopt)).str();
      std::string Pick = Default == "c32v64w4b4" ? "c64v128w4b4" : "c32v64w4b4";
      TuneEntry E;
      E.Key = makeLinearTuneKey(Def, NoTune, resolveArch(std::nullopt), Other, Dev.Name);
      E.Definition = "simple_gla";
      E.Best = {Pick, 1.0, 0.0};
      mergeIntoTuneFile(Path, {E});
      LinearAttention Lin(Def, NoTune);
      expect(Lin.configFor(Other).str() == Pick, "configFor reads the entry");
      LinearProblem P(Def, NoTune, Other, 1, 5);
      P.forward(Lin, 0);
      Drv.check(Drv.cuCtxSynchronize(), "forward with the entry");
      expect(Lin.lastConfig().str() == Pick, "the call ran the entry's " + Pick);
      expect(linearTuneRunCount() == Runs0 + 1, "no tuning for a file entry");
    }

    // 4. A candidate whose checked output is corrupted is rejected.
    {
      CompiledDefinition Def = compile(UserDef);
      LinearSignature Plain = Sig;
      Plain.TuneFile.clear();
      Plain.Tune = false;
      // The default: the one candidate always checked.
      std::string Victim =
          codegen::LinearConfig::defaultFor(128, 128, resolveArch(std::nullopt)).str();
      TuneOptions Opts;
      Opts.Repeats = 3;
      Opts.AfterCheckedRun = [&](const std::string &Config,
                                 const TensorView &Out) {
        if (Config != Victim)
          return;
        size_t Bytes = 2;
        for (int64_t X : Out.Shape)
          Bytes *= size_t(X);
        Drv.check(Drv.cuMemsetD8(reinterpret_cast<CUdeviceptr>(Out.Data), 0,
                                 Bytes / 2),
                  "corrupt");
      };
      TuneResult R =
          tuneLinear(Def, Plain, resolveArch(std::nullopt), {1, 4, 4, 600}, Opts, nullptr);
      bool Rejected = false;
      for (const CandidateResult &C : R.Candidates)
        if (C.Config == Victim) {
          Rejected = C.Status == CandidateStatus::Rejected;
          std::printf("%s: %s %s\n", Victim.c_str(),
                      candidateStatusName(C.Status), C.Reason.c_str());
        }
      expect(Rejected, "the corrupted candidate was rejected");
      expect(R.Entry.Best.Config != Victim, "and did not win");
    }
    llvm::sys::fs::remove_directories(Dir);
  } catch (const std::exception &E) {
    std::printf("FAIL: %s\n", E.what());
    return 1;
  }
  std::printf("%d failed\n", Failures);
  return Failures ? 1 : 0;
}
