// The selector: which skeleton and configuration a kernel runs with, chosen
// once per call shape before any backend is asked (named → tuned → default),
// for attention and linear attention alike.
#ifndef ATTN_RUNTIME_SELECTOR_H
#define ATTN_RUNTIME_SELECTOR_H

#include "attn/analysis/MaskBounds.h"
#include "attn/analysis/Merge.h"
#include "attn/runtime/Skeleton.h"
#include "attn/runtime/TuneFile.h"

#include <functional>
#include <map>
#include <optional>
#include <string>

namespace attn::runtime {

/// What the caller fixed about one direction's kernels, parsed once at the
/// edge (a signature, the CLI's options, a tune file).
struct KernelPolicy {
  /// The skeleton the caller named, or null: the table's first that
  /// serves the target.
  const Skeleton *Named = nullptr;
  /// The configuration the caller named, of the skeleton ConfigOf (Named,
  /// or the one whose written form the text is).
  std::optional<SkeletonConfig> Config;
  const Skeleton *ConfigOf = nullptr;
  /// A tune JSON file to read configurations from (docs/tuning.md), and
  /// whether a shape with no entry is tuned first.
  std::string TuneFile;
  bool Tune = false;

  /// The policy for \p T from names: \p SkeletonName ("" or a table name)
  /// and \p ConfigText ("" or a configuration in a serving skeleton's
  /// form). UserError naming the field: an unknown skeleton, one without
  /// kernels for T's kind and direction, a configuration of no serving
  /// skeleton (or of another than the one named).
  static KernelPolicy parse(const KernelTarget &T, llvm::StringRef SkeletonName,
                            llvm::StringRef ConfigText,
                            std::string TuneFile = "", bool Tune = false);
};

/// Where a choice came from.
enum class ChoiceOrigin : uint8_t { Named, TuneFile, TunedNow, Default };
llvm::StringRef choiceOriginName(ChoiceOrigin O);

/// A skeleton and its typed configuration.
struct KernelChoice {
  const Skeleton *Skel = nullptr;
  SkeletonConfig Config;
  ChoiceOrigin Origin = ChoiceOrigin::Default;

  /// The configuration's written form ("sm90.m128n128s3").
  std::string configText() const { return Skel->print(Config); }
  /// "fwd_sm90 sm90.m128n128s3 (default)", for people.
  std::string str() const;
  /// "fwd_sm90/sm90.m128n128s3": equal for equal kernels.
  std::string key() const;
};

/// The skeleton \p T runs under \p P: the named one (UserError with its
/// reason when it cannot serve T), else the first of the table that
/// serves T's kind and direction and supports T (UserError with each
/// skeleton's reason when none does).
const Skeleton &chooseSkeleton(const KernelTarget &T, const KernelPolicy &P);

/// The choice known without a call's shape: P's configuration (checked
/// against T: UserError with why), else the skeleton's default. What an
/// object compiles when it is made, and what `attnc emit` writes.
KernelChoice chooseWithoutShape(const KernelTarget &T, const KernelPolicy &P);

/// Tunes one shape and returns the entry to record (Attention and
/// LinearAttention pass their tuners; the selector stays generic).
using TuneNow = std::function<TuneEntry()>;

/// The choice for a call of shape \p S on the device named \p Device
/// ("" with no GPU: no tune entry matches then), in this order:
///  1. P's configuration;
///  2. with P.TuneFile, the file's entry whose key (device, arch, NVRTC
///     version, skeleton, variant, dtype, head dims, shape bucket) matches;
///     entries of other devices, toolchains, skeletons or variants never
///     apply. The file is read once per process and again when it changes;
///  3. with P.Tune and no entry, \p Tune is run now (one tuning at a time
///     per process) and its entry merged into P.TuneFile, or remembered for
///     the process without a file;
///  4. the skeleton's default.
/// No driver call and no lookup happen without a tune file or P.Tune.
KernelChoice chooseKernel(const CompiledDefinition &Def, const KernelTarget &T,
                          const KernelPolicy &P, const TuneShape &S,
                          const std::string &Device,
                          const TuneNow &Tune = nullptr);

/// The tune-file key of a call of \p Def on skeleton \p Skel.
TuneKey tuneKeyOf(const CompiledDefinition &Def, const Skeleton &Skel,
                  const KernelTarget &T, const TuneShape &S,
                  const std::string &Device);

/// The current device's name for tune keys, or "" where there is no driver.
std::string tuningDeviceName();

/// One object's selector for one direction: the choice known without a
/// shape is made once, when the object is made (so a bad name or an
/// unsupported target is reported then); a call asks the tune file, or
/// tunes, only where the policy has one or asks to.
class KernelSelector {
public:
  /// UserError as chooseWithoutShape. \p Def must outlive the selector.
  KernelSelector(const CompiledDefinition &Def, const KernelTarget &T,
                 KernelPolicy P);
  const KernelTarget &target() const { return Target; }
  const KernelPolicy &policy() const { return Policy; }
  /// The choice made when the selector was.
  const KernelChoice &initial() const { return Initial; }
  /// True when a call's shape can change the choice (a tune file, or Tune).
  bool dependsOnShape() const {
    return !Policy.Config && (!Policy.TuneFile.empty() || Policy.Tune);
  }
  /// The choice for a call of shape \p S: initial() unless
  /// dependsOnShape(), else chooseKernel on the current device.
  KernelChoice forShape(const TuneShape &S, const TuneNow &Tune) const;

private:
  const CompiledDefinition &Def;
  KernelTarget Target;
  KernelPolicy Policy;
  KernelChoice Initial;
};

/// The short-query rule (docs/runtime.md, "Decode"): a forward call of
/// \p Sq <= codegen::DecodeMaxQueries queries per sequence (a dense call's
/// Sq, a packed one's max_seqlen_q) runs on the decode skeleton (its
/// default configuration) where the policy names neither a skeleton nor a
/// configuration and the skeleton supports \p T; else none, and the
/// choice made without a shape stands.
std::optional<KernelChoice> decodeChoice(const KernelTarget &T,
                                         const KernelPolicy &P, int64_t Sq);

/// How a decode call splits each row's keys over CTAs.
struct DecodeSplit {
  int Splits = 1;         ///< CTAs over the keys of one row block
  int BlocksPerSplit = 1; ///< key blocks of each (the last may have fewer)
  bool operator==(const DecodeSplit &O) const {
    return Splits == O.Splits && BlocksPerSplit == O.BlocksPerSplit;
  }
};
/// The most key blocks a split of one CTA an SM takes (longer rows run
/// two CTAs an SM); the fewest a split of two an SM takes where the splits
/// then fill half the SMs or more, and where they do not; the most splits.
inline constexpr int DecodeOneWaveMaxBlocks = 16;
inline constexpr int DecodeMinBlocksPerSplit = 4;
inline constexpr int DecodeShortMinBlocksPerSplit = 2;
inline constexpr int DecodeMaxSplits = 128;

/// The split of a decode call with \p Ctas CTAs before splitting (batch x
/// KV heads x row blocks), \p Skv keys in blocks of \p BlockN, on a device
/// of \p MultiProcessors SMs: no split where the merge is None or there is
/// one block; else one split per SM's worth of CTAs (SMs / Ctas, at least
/// two, of at least DecodeShortMinBlocksPerSplit blocks) where each then
/// takes at most DecodeOneWaveMaxBlocks blocks; else as many splits as fit
/// one wave of two CTAs per SM (at least 1), at most DecodeMaxSplits and at
/// least DecodeMinBlocksPerSplit blocks each, or
/// DecodeShortMinBlocksPerSplit where those leave no more CTAs than half
/// the SMs; the blocks spread evenly.
DecodeSplit decodeSplit(int64_t Ctas, int64_t Skv, int BlockN,
                        int MultiProcessors, analysis::MergeKind Merge);

/// Whether a dense forward call that fwd_sm90 runs with its default
/// configuration takes the persistent kernel (Sm90Config::Persistent):
/// \p Tiles CTAs of the plain grid (query blocks x batch x heads) on
/// \p MultiProcessors SMs, visiting \p MeanVisits key blocks each on average
/// (nullopt where the host cannot know), of \p KeyBlocks a row. When each
/// CTA has little work and there are many: at least PersistentMinWaves tiles
/// per SM, and a mean of at most \p MaxMean key blocks a tile, or, the mean
/// unknown, at most PersistentMaxKeyBlocks key blocks a row. \p MaxMean is
/// PersistentMaxMeanVisits for a mean from the mask analysis (a mask that
/// reads no tensor), PersistentMaxListMeanVisits for one from a block mask's
/// own lists where the analysis has none (a mask reading tensors, such as
/// document ids). Measured on an H100 (2026-11-27, B·S = 16k, H32, D128,
/// f16, reused block masks): the persistent kernel is faster at means of 1.5
/// to 2.9 (chunked and sliding window masks at S = 1k and 4k, 5 to 17%) and
/// the document mask at S = 1k (13%), slower at 4.5 and more (causal and
/// prefix-LM at 1k, 35 to 38%). On an H200 (2026-11-28, same shapes, the
/// taken walk): the document mask at 4k (a mean of 3.53, 73% of its blocks
/// partial) 0.388 against 0.411 ms persistent, but plain causal at S = 768
/// (B21: a mean of 3.5, 29% partial) 0.319 against 0.310, prefix-LM at 1k
/// (4.62) 0.413 against 0.373, the document mask at 16k (9.97) 0.903
/// against 0.761: hence the two bounds.
bool persistentHeuristic(int64_t Tiles, std::optional<double> MeanVisits,
                         int64_t KeyBlocks, int MultiProcessors,
                         double MaxMean);
/// The tiles of fwd_sm90's forward grid in query blocks of \p BlockM: a
/// dense call's query blocks of \p Sq × \p B · \p H; a packed call's
/// (\p Packed: \p B sequences of \p TotalQ query tokens, the longest
/// \p Sq) plain grid, a CTA per query block a sequence has
/// (packed_block_bound) × \p H. What persistentHeuristic counts, and what
/// the persistent kernel walks.
int64_t forwardTiles(int64_t B, int64_t H, int64_t Sq, int64_t TotalQ, bool Packed,
                     int BlockM);
inline constexpr int PersistentMinWaves = 4;
inline constexpr double PersistentMaxMeanVisits = 3.0;
inline constexpr double PersistentMaxListMeanVisits = 4.0;
inline constexpr int PersistentMaxKeyBlocks = 8;
/// The mean number of key blocks of \p BlockN that a query block of
/// \p BlockM visits in a dense call of \p Sq x \p Skv (rows shifted
/// bottom-right, as the kernels see them) under the mask \p A, from the
/// analysis's box classes on the host (the kernels' classification finds
/// as many or fewer), \p Scalars giving the mask's scalar inputs: the key
/// blocks per row without a mask; nullopt where the host cannot know it (a
/// mask not analysed, reading a tensor input, depending on the batch or
/// head, or a scalar missing). The heaviest query blocks are counted first
/// and the count stops once the mean is past \p StopAbove (a mean above it
/// is then returned, not the exact one).
std::optional<double> meanVisitedBlocks(const analysis::MaskAnalysis &A, int64_t Sq,
                                        int64_t Skv, int BlockM, int BlockN,
                                        int HeadDim,
                                        const std::map<std::string, double> &Scalars,
                                        double StopAbove);
/// Whether meanVisitedBlocks counts \p A's visits from the analysis alone
/// (given the scalar inputs): no mask, or an analysed one that reads no
/// tensor input and is shared by every batch and head. Block masks copy
/// their lists' counts back to the host for the other masks only.
bool analysisCountsVisits(const analysis::MaskAnalysis &A);
/// persistentHeuristic, unless the environment's ATTNC_FWD_PERSISTENT says
/// "0" (never) or "1" (every dense call fwd_sm90 runs by default, and
/// every packed one whose mask's ranges come from box classes); a
/// measurement switch (docs/runtime.md). UserError on another value.
bool persistentWanted(int64_t Tiles, std::optional<double> MeanVisits,
                      int64_t KeyBlocks, int MultiProcessors,
                      double MaxMean = PersistentMaxMeanVisits);

/// Where \p Failed cannot launch a call after all (fwd_sm90, whose TMA
/// descriptors cannot describe some strides): the next skeleton of the
/// table that serves and supports \p T, with its default configuration.
/// InternalError if there is none.
KernelChoice fallbackChoice(const KernelTarget &T, const Skeleton &Failed);

} // namespace attn::runtime

#endif
