// The selector: skeleton and configuration of a kernel, named, tuned or
// default, asked of the skeleton table.
#include "attn/runtime/Selector.h"

#include "EnvSwitch.h"

#include "../kernels/block_range.cuh"

#include "attn/Error.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/Tuner.h"

#include "llvm/ADT/StringExtras.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

namespace attn::runtime {

namespace {

/// Configurations tuned in this process for calls without a tune file.
std::mutex MemoMutex;
std::vector<std::pair<TuneKey, std::string>> Memo;

/// One tuning run at a time: they would time each other otherwise.
std::mutex TuneMutex;

bool servesKind(const Skeleton &S, const KernelTarget &T) {
  return S.kind() == T.Kind && S.serves(T.Dir);
}

std::string what(const KernelTarget &T) {
  return fmt::format("{} {}", ir::definitionKindName(T.Kind).str(),
                     directionName(T.Dir).str());
}

/// The tuned configuration of \p K, if the file (or, without one, this
/// process) has one.
std::optional<std::string> lookup(const KernelPolicy &P, const TuneKey &K) {
  if (!P.TuneFile.empty()) {
    std::shared_ptr<const TuneFileData> Data = cachedTuneFile(P.TuneFile);
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

} // namespace

llvm::StringRef choiceOriginName(ChoiceOrigin O) {
  switch (O) {
  case ChoiceOrigin::Named:
    return "named";
  case ChoiceOrigin::TuneFile:
    return "tune file";
  case ChoiceOrigin::TunedNow:
    return "tuned now";
  case ChoiceOrigin::Default:
    return "default";
  }
  return "?";
}

std::string KernelChoice::str() const {
  return fmt::format("{} {} ({})", Skel->name().str(), configText(),
                     choiceOriginName(Origin).str());
}

std::string KernelChoice::key() const {
  return Skel->name().str() + "/" + configText();
}

KernelPolicy KernelPolicy::parse(const KernelTarget &T,
                                 llvm::StringRef SkeletonName,
                                 llvm::StringRef ConfigText,
                                 std::string TuneFile, bool Tune) {
  KernelPolicy P;
  P.TuneFile = std::move(TuneFile);
  P.Tune = Tune;
  if (!SkeletonName.empty()) {
    P.Named = &skeletonNamed(SkeletonName);
    if (!servesKind(*P.Named, T))
      throw UserError(fmt::format(
          "skeleton '{}' has no {} kernels; those that do: {}",
          SkeletonName.str(),
          what(T), skeletonNames(T.Kind, T.Dir)));
  }
  if (ConfigText.empty())
    return P;
  if (P.Named) {
    P.Config = P.Named->parse(ConfigText);
    P.ConfigOf = P.Named;
    return P;
  }
  std::vector<const Skeleton *> Serving;
  for (const Skeleton *S : skeletonTable())
    if (servesKind(*S, T))
      Serving.push_back(S);
  if (Serving.size() == 1) {
    // One candidate: its own message says best what is wrong.
    P.Config = Serving.front()->parse(ConfigText);
    P.ConfigOf = Serving.front();
    return P;
  }
  std::vector<std::string> Forms;
  for (const Skeleton *S : skeletonTable()) {
    if (!servesKind(*S, T))
      continue;
    if (std::optional<SkeletonConfig> C = S->tryParse(ConfigText)) {
      P.Config = *C;
      P.ConfigOf = S;
      return P;
    }
    Forms.push_back(fmt::format("{} for {}", S->configForm().str(),
                                S->name().str()));
  }
  throw UserError(fmt::format("config '{}' is not a configuration of any "
                              "skeleton with {} kernels; expected {}",
                              ConfigText.str(), what(T),
                              llvm::join(Forms, ", or ")));
}

const Skeleton &chooseSkeleton(const KernelTarget &T, const KernelPolicy &P) {
  if (const Skeleton *S = P.Named ? P.Named : P.ConfigOf) {
    // A configuration named may run head dims its skeleton's default does
    // not (bwd_sm90's column split at 128/256).
    if (P.Config && S->configError(*P.Config, T).empty())
      return *S;
    if (std::string Why = S->unsupported(T); !Why.empty())
      throw UserError(fmt::format("skeleton {} cannot run {}: {}",
                                  S->name().str(), T.str(), Why));
    return *S;
  }
  std::vector<std::string> Reasons;
  for (const Skeleton *S : skeletonTable()) {
    // A decode skeleton runs only where named or by the short-query rule.
    if (!servesKind(*S, T) || S->isDecode())
      continue;
    std::string Why = S->unsupported(T);
    if (Why.empty())
      return *S;
    Reasons.push_back(S->name().str() + ": " + Why);
  }
  if (Reasons.size() == 1)
    throw UserError(llvm::StringRef(Reasons.front()).split(": ").second.str());
  throw UserError(fmt::format("no skeleton runs {}: {}", T.str(),
                              llvm::join(Reasons, "; ")));
}

KernelChoice chooseWithoutShape(const KernelTarget &T, const KernelPolicy &P) {
  const Skeleton &S = chooseSkeleton(T, P);
  if (!P.Config)
    return {&S, S.defaultFor(T), ChoiceOrigin::Default};
  if (std::string Why = S.configError(*P.Config, T); !Why.empty())
    throw UserError(Why);
  return {&S, *P.Config, ChoiceOrigin::Named};
}

TuneKey tuneKeyOf(const CompiledDefinition &Def, const Skeleton &Skel,
                  const KernelTarget &T, const TuneShape &S,
                  const std::string &Device) {
  return tuneKeyFor(Def, Skel.name().str(), T.Dtype, T.HeadDim, T.HeadDimV,
                    T.Arch, shapeBucket(S.Batch, S.Heads, S.SeqQ, S.SeqKv),
                    Device);
}

KernelChoice chooseKernel(const CompiledDefinition &Def, const KernelTarget &T,
                          const KernelPolicy &P, const TuneShape &S,
                          const std::string &Device, const TuneNow &Tune) {
  KernelChoice Static = chooseWithoutShape(T, P);
  if (P.Config || (P.TuneFile.empty() && !P.Tune))
    return Static;
  const Skeleton &Skel = *Static.Skel;
  TuneKey K = tuneKeyOf(Def, Skel, T, S, Device);
  // A tuned entry was checked against its skeleton when the file was read.
  auto Tuned = [&](const std::string &Text, ChoiceOrigin O) {
    return KernelChoice{&Skel, Skel.parse(Text), O};
  };
  if (std::optional<std::string> C = lookup(P, K))
    return Tuned(*C, ChoiceOrigin::TuneFile);
  if (!P.Tune || !Tune)
    return Static;

  std::lock_guard<std::mutex> Guard(TuneMutex);
  // Another thread may have tuned this key while we waited.
  if (std::optional<std::string> C = lookup(P, K))
    return Tuned(*C, ChoiceOrigin::TuneFile);
  TuneEntry E = Tune();
  if (!P.TuneFile.empty()) {
    mergeIntoTuneFile(P.TuneFile, {E});
  } else {
    std::lock_guard<std::mutex> MemoGuard(MemoMutex);
    Memo.push_back({E.Key, E.Best.Config});
  }
  return Tuned(E.Best.Config, ChoiceOrigin::TunedNow);
}

std::string tuningDeviceName() {
  return CudaDriver::get().available() ? currentDevice().Name : std::string();
}

KernelSelector::KernelSelector(const CompiledDefinition &Def,
                               const KernelTarget &T, KernelPolicy P)
    : Def(Def), Target(T), Policy(std::move(P)),
      Initial(chooseWithoutShape(Target, Policy)) {}

KernelChoice KernelSelector::forShape(const TuneShape &S,
                                      const TuneNow &Tune) const {
  if (!dependsOnShape())
    return Initial;
  return chooseKernel(Def, Target, Policy, S, tuningDeviceName(), Tune);
}

std::optional<KernelChoice> decodeChoice(const KernelTarget &T,
                                         const KernelPolicy &P, int64_t Sq) {
  if (P.Named || P.Config || Sq > codegen::DecodeMaxQueries ||
      T.Kind != ir::DefinitionKind::Transformer || T.Dir != Direction::Forward)
    return std::nullopt;
  for (const Skeleton *S : skeletonTable())
    if (S->isDecode() && S->unsupported(T).empty())
      return KernelChoice{S, S->defaultFor(T), ChoiceOrigin::Default};
  return std::nullopt;
}

DecodeSplit decodeSplit(int64_t Ctas, int64_t Skv, int BlockN,
                        int MultiProcessors, analysis::MergeKind Merge) {
  const int64_t Blocks = (Skv + BlockN - 1) / BlockN;
  if (Merge == analysis::MergeKind::None || Blocks <= 1)
    return {1, int(std::max<int64_t>(Blocks, 1))};
  // One CTA an SM where the splits then take at most
  // DecodeOneWaveMaxBlocks key blocks each: a CTA's prologue, epilogue and
  // part to merge cost about as much as a few blocks, so short splits are
  // slow, and one CTA an SM streams a short split as fast as two do (H200,
  // 2026-11-29, 8 KV heads, pages of 16, in one process: batch 1 at 8k
  // keys 16 splits of 8 blocks 23.7-23.9 us against 32 of 4 25.3-25.4;
  // batch 2 at 8k 8 of 16 31.3-32.8 against 16 of 8 32.1-33.7; batch 4 at
  // 2k 4 of 8 23.4-23.9 against 8 of 4 24.1-24.8). Splits of at least two
  // blocks.
  const int64_t PerSm = int64_t(MultiProcessors) / Ctas;
  const int64_t OneWave = std::min({PerSm, Blocks / DecodeShortMinBlocksPerSplit,
                                    int64_t(DecodeMaxSplits)});
  int64_t Splits = 1;
  if (OneWave >= 2 && (Blocks + OneWave - 1) / OneWave <= DecodeOneWaveMaxBlocks) {
    Splits = OneWave;
  } else {
    // Longer rows: two CTAs an SM (decode_sm80's default holds about 100
    // KiB of shared memory, so two fit), whose loads in flight stream a long
    // split faster (batch 4 at 8k keys 8 splits of 16 48.8-48.9 us against 4
    // of 32 49.5-50.0; at 32k 8 of 64 137.9 against 4 of 128 146.6), and no
    // more: a second, partial wave nearly doubles the time of the first
    // (batch 8 at 32k: 5 splits of 64 CTAs, 1.2 waves, read K/V at 3050
    // GB/s, 4 splits, one wave, at 4170). At least DecodeMinBlocksPerSplit
    // blocks a split where those splits fill half the SMs, else
    // DecodeShortMinBlocksPerSplit.
    const int64_t Want = 2 * PerSm;
    for (int MinBlocks : {DecodeMinBlocksPerSplit, DecodeShortMinBlocksPerSplit}) {
      Splits = std::max({Splits, int64_t(1),
                         std::min({Want, Blocks / MinBlocks, int64_t(DecodeMaxSplits)})});
      if (2 * Ctas * Splits > MultiProcessors)
        break;
    }
  }
  const int64_t PerSplit = (Blocks + Splits - 1) / Splits;
  return {int((Blocks + PerSplit - 1) / PerSplit), int(PerSplit)};
}

bool persistentHeuristic(int64_t Tiles, std::optional<double> MeanVisits,
                         int64_t KeyBlocks, int MultiProcessors,
                         double MaxMean) {
  if (MultiProcessors <= 0 || Tiles < int64_t(PersistentMinWaves) * MultiProcessors)
    return false;
  if (MeanVisits)
    return *MeanVisits <= MaxMean;
  return KeyBlocks <= PersistentMaxKeyBlocks;
}

int64_t forwardTiles(int64_t B, int64_t H, int64_t Sq, int64_t TotalQ, bool Packed,
                     int BlockM) {
  if (Packed)
    return attnc::packed_block_bound(TotalQ, B, BlockM, Sq) * H;
  return (Sq + BlockM - 1) / BlockM * B * H;
}

std::optional<double> meanVisitedBlocks(const analysis::MaskAnalysis &A, int64_t Sq,
                                        int64_t Skv, int BlockM, int BlockN,
                                        int HeadDim,
                                        const std::map<std::string, double> &Scalars,
                                        double StopAbove) {
  const int64_t MBlocks = (Sq + BlockM - 1) / BlockM;
  const int64_t NBlocks = (Skv + BlockN - 1) / BlockN;
  if (!A.Mask)
    return double(NBlocks);
  if (!analysisCountsVisits(A))
    return std::nullopt;
  analysis::MaskBox Box;
  Box.HeadDim = HeadDim;
  for (const std::string &Name : A.ScalarInputs) {
    auto It = Scalars.find(Name);
    if (It == Scalars.end())
      return std::nullopt;
    Box.Exact[Name] = It->second;
  }
  const int64_t Shift = Skv - Sq;
  const double Stop = StopAbove * double(MBlocks);
  int64_t Visited = 0;
  for (int64_t M = MBlocks - 1; M >= 0 && double(Visited) <= Stop; --M) {
    Box.QLo = M * BlockM + Shift;
    Box.QHi = std::min<int64_t>(M * BlockM + BlockM, Sq) - 1 + Shift;
    for (int64_t N = 0; N < NBlocks; ++N) {
      Box.KvLo = N * BlockN;
      Box.KvHi = std::min<int64_t>(N * BlockN + BlockN, Skv) - 1;
      if (analysis::classifyBox(A, Box) != analysis::BlockClass::Empty)
        ++Visited;
    }
  }
  return double(Visited) / double(std::max<int64_t>(1, MBlocks));
}

bool analysisCountsVisits(const analysis::MaskAnalysis &A) {
  return !A.Mask || (A.Analysed && !A.ReadsTensorInput &&
                     A.Grouping == analysis::MaskGrouping::Shared);
}

bool persistentWanted(int64_t Tiles, std::optional<double> MeanVisits,
                      int64_t KeyBlocks, int MultiProcessors, double MaxMean) {
  if (std::optional<bool> Forced = envSwitch(
          "ATTNC_FWD_PERSISTENT", "plain fwd_sm90 grid", "persistent"))
    return *Forced;
  return persistentHeuristic(Tiles, MeanVisits, KeyBlocks, MultiProcessors, MaxMean);
}

KernelChoice fallbackChoice(const KernelTarget &T, const Skeleton &Failed) {
  bool After = false;
  for (const Skeleton *S : skeletonTable()) {
    if (S == &Failed) {
      After = true;
      continue;
    }
    if (After && servesKind(*S, T) && !S->isDecode() &&
        S->unsupported(T).empty())
      return {S, S->defaultFor(T), ChoiceOrigin::Default};
  }
  throw InternalError("no skeleton after " + Failed.name().str() +
                      " runs " + T.str());
}

} // namespace attn::runtime
