// Forward configuration choice: explicit, tuned (from a tune file, or tuned
// on the spot), or the default heuristic.
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
std::vector<std::pair<TuneKey, codegen::FwdConfig>> Memo;

/// One tuning run at a time: they would time each other otherwise.
std::mutex TuneMutex;

std::optional<codegen::FwdConfig> lookup(const Signature &Sig,
                                         const TuneKey &K) {
  if (!Sig.TuneFile.empty()) {
    std::shared_ptr<const TuneFileData> Data = cachedTuneFile(Sig.TuneFile);
    if (const TuneEntry *E = Data->find(K))
      return codegen::FwdConfig::parse(E->Best.Config);
    return std::nullopt;
  }
  std::lock_guard<std::mutex> Guard(MemoMutex);
  for (const auto &[Key, Config] : Memo)
    if (Key == K)
      return Config;
  return std::nullopt;
}

} // namespace

codegen::FwdConfig initialForwardConfig(const Signature &Sig,
                                        const std::string &Arch) {
  if (!Sig.Config.empty())
    return codegen::FwdConfig::parse(Sig.Config);
  return codegen::FwdConfig::defaultFor(Sig.HeadDim, Sig.HeadDimV, Arch);
}

codegen::FwdConfig selectForwardConfig(const BackendProblem &P) {
  const Signature &Sig = P.Sig;
  // The common cases stay free of driver calls and hashing: every forward
  // call (twice: check() and forward()) comes through here.
  if (!Sig.Config.empty() || (Sig.TuneFile.empty() && !Sig.Tune))
    return initialForwardConfig(Sig, P.Arch);
  std::string Device;
  if (CudaDriver::get().available())
    Device = currentDevice().Name;
  return selectForwardConfig(P, Device);
}

codegen::FwdConfig selectForwardConfig(const BackendProblem &P,
                                       const std::string &Device) {
  const Signature &Sig = P.Sig;
  if (!Sig.Config.empty() || (Sig.TuneFile.empty() && !Sig.Tune))
    return initialForwardConfig(Sig, P.Arch);

  TuneShape S{P.Shape.B, P.Shape.H, P.Shape.Hkv, P.Shape.Sq, P.Shape.Skv};
  TuneKey K = makeTuneKey(P.Def, Sig, P.Arch, S, Device);
  if (std::optional<codegen::FwdConfig> C = lookup(Sig, K))
    return *C;
  if (!Sig.Tune)
    return initialForwardConfig(Sig, P.Arch);

  std::lock_guard<std::mutex> Guard(TuneMutex);
  // Another thread may have tuned this key while we waited.
  if (std::optional<codegen::FwdConfig> C = lookup(Sig, K))
    return *C;
  TuneResult R = tuneForward(P.Def, Sig, P.Arch, S, TuneOptions(),
                             /*Progress=*/nullptr);
  codegen::FwdConfig Best = codegen::FwdConfig::parse(R.Entry.Best.Config);
  if (!Sig.TuneFile.empty()) {
    mergeIntoTuneFile(Sig.TuneFile, {R.Entry});
  } else {
    std::lock_guard<std::mutex> MemoGuard(MemoMutex);
    Memo.push_back({R.Entry.Key, Best});
  }
  return Best;
}

} // namespace attn::runtime
