// GPU autotuner test: tuning through Attention writes a tune file; a fresh
// process (this program again, as a child) uses it without tuning; a
// deliberately corrupted candidate is rejected by the reference check. On
// sm_90a the default cases tune fwd_sm90 and the "fwd_sm80" case fwd_sm80.
// Exits 77 (ctest: skipped) where there is no GPU.
#include "Examples.h"
#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/codegen/Arch.h"
#include "attn/runtime/Attention.h"
#include "attn/runtime/Selector.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/RandomProblem.h"
#include "attn/runtime/TuneFile.h"
#include "attn/runtime/Tuner.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace attn;
using namespace attn::runtime;

namespace {

constexpr const char *ChildEnv = "ATTNC_TUNE_TEST_CHILD";

struct Case {
  std::string Def;
  int B, H, S, D;
  /// Signature::Skeleton: "" (the skeleton a call runs) or "fwd_sm80".
  std::string Skeleton;
};

/// mha (causal softmax) and relu_attn (no mask), two shapes each, and mha
/// on the portable skeleton (on sm_90a its own tune key).
const std::vector<Case> &cases() {
  static const std::vector<Case> Cs = {
      {"mha", 2, 8, 1000, 64, ""},
      {"mha", 1, 16, 2048, 128, ""},
      {"relu_attn", 2, 8, 1000, 64, ""},
      {"relu_attn", 1, 16, 2048, 128, ""},
      {"mha", 1, 16, 2048, 128, "fwd_sm80"},
  };
  return Cs;
}

dsl::AttentionDef definition(const std::string &Name) {
  return Name == "mha" ? examples::mha() : examples::reluAttn();
}

Signature signature(const Case &C, const std::string &File) {
  Signature Sig;
  Sig.HeadDim = Sig.HeadDimV = C.D;
  Sig.TuneFile = File;
  Sig.Tune = true;
  Sig.Backend = "generated";
  Sig.Skeleton = C.Skeleton;
  return Sig;
}

TuneShape shapeOf(const Case &C, int Seq) {
  return TuneShape{C.B, C.H, C.H, Seq, Seq};
}

/// Runs one forward of \p Att on random inputs of \p S and synchronises.
void runForward(Attention &Att, const Signature &Sig, const TuneShape &S) {
  RandomProblem P(Att.definition(), Sig, S, 1, 11);
  RandomProblem::Call C = P.call();
  Att.forward(C.Q[0], C.K[0], C.V[0], C.Out, C.finals(), C.Inputs);
  CudaDriver &D = CudaDriver::get();
  D.check(D.cuCtxSynchronize(), "forward");
}

/// The configuration the selector picks for a call of \p S (no tuning).
std::string selected(const CompiledDefinition &Def, const Signature &Sig,
                     const TuneShape &S) {
  KernelTarget T =
      kernelTarget(Def, Sig, resolveArch(std::nullopt), Direction::Forward);
  KernelPolicy P =
      KernelPolicy::parse(T, Sig.Skeleton, Sig.Config, Sig.TuneFile, false);
  return chooseKernel(Def, T, P, S, currentDevice().Name).configText();
}

/// The skeleton the selector picks for \p Sig on this device.
std::string skeletonFor(const CompiledDefinition &Def, const Signature &Sig) {
  KernelTarget T =
      kernelTarget(Def, Sig, resolveArch(std::nullopt), Direction::Forward);
  return chooseSkeleton(T, KernelPolicy::parse(T, Sig.Skeleton, Sig.Config))
      .name()
      .str();
}

/// The file's configuration for \p C at sequence length \p Seq, or "".
std::string fileConfig(const std::string &File, const CompiledDefinition &Def,
                        const Signature &Sig, const TuneShape &S) {
  TuneFileData Data = readTuneFile(File);
  TuneKey K = makeTuneKey(Def, Sig, resolveArch(std::nullopt), S,
                          currentDevice().Name);
  const TuneEntry *E = Data.find(K);
  return E ? E->Best.Config : "";
}

int Failures = 0;
void expect(bool Ok, const std::string &What) {
  std::printf("%s: %s\n", Ok ? "pass" : "FAIL", What.c_str());
  std::fflush(stdout);
  Failures += !Ok;
}

/// The child: every case again, with the same file and Tune on; nothing may
/// be tuned, and each call must get the file's configuration.
int child(const std::string &File) {
  for (const Case &C : cases()) {
    Signature Sig = signature(C, File);
    Attention Att(definition(C.Def), Sig);
    // The same shape, and another one of the same bucket.
    for (int Seq : {C.S, C.S - 7}) {
      TuneShape S = shapeOf(C, Seq);
      runForward(Att, Sig, S);
      std::string Want = fileConfig(File, Att.definition(), Sig, S);
      std::string Got = selected(Att.definition(), Sig, S);
      expect(!Want.empty() && Got == Want,
             fmt::format("child: {} d{} s{} uses the file's {} (got {})",
                         C.Def, C.D, Seq, Want, Got));
    }
  }
  expect(tuneRunCount() == 0,
         fmt::format("child: no tuning ran (count {})", tuneRunCount()));
  return Failures ? 1 : 0;
}

int runChild(const std::string &File) {
  std::fflush(stdout);
  pid_t Pid = fork();
  if (Pid == 0) {
    setenv(ChildEnv, File.c_str(), 1);
    char Self[] = "/proc/self/exe";
    char *Argv[] = {Self, nullptr};
    execv(Self, Argv);
    _exit(127);
  }
  int Status = 0;
  waitpid(Pid, &Status, 0);
  return WIFEXITED(Status) ? WEXITSTATUS(Status) : 128;
}

} // namespace

int main() {
  CudaDriver &Drv = CudaDriver::get();
  if (!Drv.available()) {
    std::printf("skipped: %s\n", Drv.unavailableReason().c_str());
    return 77;
  }
  try {
    if (const char *File = std::getenv(ChildEnv))
      return child(File);

    const DeviceInfo &Dev = currentDevice();
    std::printf("device: %s (%s)\n", Dev.Name.c_str(), archName(resolveArch(std::nullopt)).data());
    llvm::SmallString<128> Dir;
    if (llvm::sys::fs::createUniqueDirectory("attnc-gpu-tune", Dir))
      throw Error("cannot create a temporary directory");
    std::string File = std::string(Dir) + "/tune.json";

    // 1. Tuning through Attention: the first call of each shape tunes it
    // and merges an entry into the file.
    for (const Case &C : cases()) {
      Signature Sig = signature(C, File);
      Attention Att(definition(C.Def), Sig);
      unsigned Before = tuneRunCount();
      auto Start = std::chrono::steady_clock::now();
      runForward(Att, Sig, shapeOf(C, C.S));
      double Secs = std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - Start)
                        .count();
      std::string Entry = fileConfig(File, Att.definition(), Sig,
                                     shapeOf(C, C.S));
      std::string Skeleton = skeletonFor(Att.definition(), Sig);
      expect(tuneRunCount() == Before + 1 && !Entry.empty() &&
                 selected(Att.definition(), Sig, shapeOf(C, C.S)) == Entry &&
                 codegen::Sm90Config::names(Entry) ==
                     (Skeleton == "fwd_sm90"),
             fmt::format("{} b{} h{} s{} d{} ({}): tuned in {:.1f} s -> {}",
                         C.Def, C.B, C.H, C.S, C.D, Skeleton, Secs, Entry));
      // A second call does not tune again.
      runForward(Att, Sig, shapeOf(C, C.S));
      expect(tuneRunCount() == Before + 1,
             fmt::format("{} s{} d{}: second call uses the entry", C.Def,
                         C.S, C.D));
    }
    TuneFileData Data = readTuneFile(File);
    // Where a call's skeleton is fwd_sm80 anyway, the "fwd_sm80" case shares
    // the key of the default case of its shape.
    size_t Want = cases().size();
    if (skeletonFor(compile(examples::mha()), signature(cases()[1], File)) ==
        "fwd_sm80")
      --Want;
    expect(Data.Entries.size() == Want,
           fmt::format("the file has {} entries", Data.Entries.size()));
    for (const TuneEntry &E : Data.Entries)
      expect(E.Best.Ms > 0 && E.Best.Tflops > 0 && !E.Default.Config.empty(),
             fmt::format("entry {} s{}: best {} {:.3f} ms, default {} {:.3f} "
                         "ms, {} runners-up",
                         E.Definition, E.SeqQ, E.Best.Config, E.Best.Ms,
                         E.Default.Config, E.Default.Ms, E.RunnersUp.size()));

    // 2. A fresh process uses the file without tuning.
    expect(runChild(File) == 0, "a fresh process uses the file");

    // 3. A corrupted candidate — the configuration that won above — is
    // rejected by the check, and another one wins.
    const Case &C = cases()[1];
    Signature Sig = signature(C, "");
    CompiledDefinition Def = compile(definition(C.Def));
    std::string Winner = fileConfig(File, Def, signature(C, File),
                                    shapeOf(C, C.S));
    TuneOptions Opts;
    Opts.Repeats = 5;
    Opts.AfterCheckedRun = [&](const std::string &Cfg, const TensorView &Out) {
      if (Cfg != Winner)
        return;
      // 0x4c4c is 17.19 in f16: finite, plausible-looking, wrong.
      Drv.check(Drv.cuMemsetD8(reinterpret_cast<CUdeviceptr>(Out.Data), 0x4c,
                               4096),
                "cuMemsetD8");
    };
    TuneResult R = tuneForward(Def, Sig, resolveArch(std::nullopt), shapeOf(C, C.S), Opts,
                               nullptr);
    const CandidateResult *Broken = nullptr;
    for (const CandidateResult &Cand : R.Candidates)
      if (Cand.Config == Winner)
        Broken = &Cand;
    expect(Broken && Broken->Status == CandidateStatus::Rejected &&
               R.Entry.Best.Config != Winner,
           fmt::format("corrupted {} is rejected ({}); {} wins", Winner,
                       Broken ? Broken->Reason : "not found",
                       R.Entry.Best.Config));

    // 4. If every candidate is wrong, tuning fails instead of picking one.
    Opts.AfterCheckedRun = [&](const std::string &, const TensorView &Out) {
      Drv.check(Drv.cuMemsetD8(reinterpret_cast<CUdeviceptr>(Out.Data), 0x4c,
                               4096),
                "cuMemsetD8");
    };
    bool Threw = false;
    try {
      tuneForward(Def, Sig, resolveArch(std::nullopt), shapeOf(C, C.S), Opts, nullptr);
    } catch (const InternalError &E) {
      Threw = std::string(E.what()).find("no configuration passed") !=
              std::string::npos;
    }
    expect(Threw, "all candidates corrupted: tuning fails");

    llvm::sys::fs::remove_directories(Dir);
    std::printf("%d failed\n", Failures);
    return Failures ? 1 : 0;
  } catch (const std::exception &E) {
    std::printf("ERROR: %s\n", E.what());
    return 1;
  }
}
