// Forward skeleton and configuration choice: explicit, tuned (from a tune
// file, or tuned on the spot), or the default heuristic.
#include "attn/runtime/ConfigSelect.h"

#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/TuneFile.h"
#include "attn/runtime/Tuner.h"

#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace attn::runtime {

namespace {

/// Configurations tuned in this process for signatures without a tune file.
std::mutex MemoMutex;
std::vector<std::pair<TuneKey, std::string>> Memo;

/// One tuning run at a time: they would time each other otherwise.
std::mutex TuneMutex;

std::optional<std::string> lookup(const Signature &Sig, const TuneKey &K) {
  if (!Sig.TuneFile.empty()) {
    std::shared_ptr<const TuneFileData> Data = cachedTuneFile(Sig.TuneFile);
    // Entries were checked against their skeleton when the file was read.
    if (const TuneEntry *E = Data->find(K))
      return E->Best.Config;
    return std::nullopt;
  }
  std::lock_guard<std::mutex> Guard(MemoMutex);
  for (const auto &[Key, Config] : Memo)
    if (Key == K)
      return Config;
  return std::nullopt;
}

/// Sig.Config names a configuration, not only a skeleton.
bool namesConfig(const Signature &Sig) {
  return !Sig.Config.empty() && Sig.Config != "sm80" && Sig.Config != "sm90";
}

} // namespace

std::string chooseForwardSkeleton(const Signature &Sig,
                                  const std::string &Arch) {
  if (codegen::Sm90Config::names(Sig.Config))
    return "fwd_sm90";
  if (!Sig.Config.empty())
    return "fwd_sm80";
  codegen::KernelSpec Spec;
  Spec.Dtype = Sig.Dtype;
  Spec.HeadDim = Sig.HeadDim;
  Spec.HeadDimV = Sig.HeadDimV;
  Spec.Arch = Arch;
  codegen::Sm90Config C =
      codegen::Sm90Config::defaultFor(Sig.HeadDim, Sig.HeadDimV);
  return codegen::sm90Unsupported(Spec, C).empty() ? "fwd_sm90" : "fwd_sm80";
}

std::string defaultForwardConfig(const std::string &Skeleton,
                                 const Signature &Sig,
                                 const std::string &Arch) {
  if (Skeleton == "fwd_sm90")
    return codegen::Sm90Config::defaultFor(Sig.HeadDim, Sig.HeadDimV).str();
  return codegen::FwdConfig::defaultFor(Sig.HeadDim, Sig.HeadDimV, Arch).str();
}

std::string initialForwardConfig(const Signature &Sig,
                                 const std::string &Arch) {
  if (namesConfig(Sig))
    return Sig.Config;
  return defaultForwardConfig(chooseForwardSkeleton(Sig, Arch), Sig, Arch);
}

std::string selectForwardConfig(const BackendProblem &P) {
  const Signature &Sig = P.Sig;
  // The common cases stay free of driver calls and hashing: every forward
  // call (twice: check() and forward()) comes through here.
  if (namesConfig(Sig) || (Sig.TuneFile.empty() && !Sig.Tune))
    return initialForwardConfig(Sig, P.Arch);
  std::string Device;
  if (CudaDriver::get().available())
    Device = currentDevice().Name;
  return selectForwardConfig(P, Device);
}

std::string selectForwardConfig(const BackendProblem &P,
                                const std::string &Device) {
  const Signature &Sig = P.Sig;
  if (namesConfig(Sig) || (Sig.TuneFile.empty() && !Sig.Tune))
    return initialForwardConfig(Sig, P.Arch);

  TuneShape S{P.Shape.B, P.Shape.H, P.Shape.Hkv, P.Shape.Sq, P.Shape.Skv};
  TuneKey K = makeTuneKey(P.Def, Sig, P.Arch, S, Device);
  if (std::optional<std::string> C = lookup(Sig, K))
    return *C;
  if (!Sig.Tune)
    return initialForwardConfig(Sig, P.Arch);

  std::lock_guard<std::mutex> Guard(TuneMutex);
  // Another thread may have tuned this key while we waited.
  if (std::optional<std::string> C = lookup(Sig, K))
    return *C;
  TuneResult R = tuneForward(P.Def, Sig, P.Arch, S, TuneOptions(),
                             /*Progress=*/nullptr);
  std::string Best = R.Entry.Best.Config;
  if (!Sig.TuneFile.empty()) {
    mergeIntoTuneFile(Sig.TuneFile, {R.Entry});
  } else {
    std::lock_guard<std::mutex> MemoGuard(MemoMutex);
    Memo.push_back({R.Entry.Key, Best});
  }
  return Best;
}

} // namespace attn::runtime
