// The host side of the block classification (runtime/kernels/block_mask.cuh):
// how many groups a call classifies, the bounds scratch an analysed mask
// needs, the launches, and when a classification may be reused.
#ifndef ATTN_RUNTIME_MASKCLASSIFY_H
#define ATTN_RUNTIME_MASKCLASSIFY_H

#include "attn/analysis/MaskBounds.h"
#include "attn/runtime/CudaDriver.h"

#include "../kernels/attention_args.cuh"

#include <cstdint>
#include <optional>
#include <vector>

namespace attn::runtime {

/// The number of classifications a call of \p B batches and \p H heads
/// makes: 1, B or B·H (MaskGrouping).
int64_t maskGroups(const analysis::MaskAnalysis &A, int64_t B, int64_t H);

/// Floats of bounds scratch (MaskArgs::bounds) for \p Groups groups of an
/// \p MBlocks x \p NBlocks classification: 0 unless the mask is analysed and
/// bounds an input.
size_t maskBoundsFloats(const analysis::MaskAnalysis &A, int64_t Groups,
                        int MBlocks, int NBlocks);

/// Launches attnc_block_classify (\p Classify) for \p M (classes, bounds,
/// shape and grouping filled in; bound_lines and phase are set here): the
/// two phases of an analysed mask, or the element evaluation. \p Slots are
/// the call's input slots. Returns whether the lists are written too: with
/// \p Lists (M's block_count and block_list filled in), an analysed mask's
/// second phase is phase 2, which writes the lists and no classes, and the
/// caller launches no attnc_block_compact.
bool launchClassify(CudaDriver &D, CUfunction Classify,
                    const analysis::MaskAnalysis &A, attnc::MaskArgs M,
                    int64_t Groups, void *Slots, CUstream Stream,
                    const char *What, bool Lists = false);

/// How many classifications launchClassify has launched in this process
/// (a test's proof that a call given a BlockMask launches none).
uint64_t classifyLaunches();

/// What a classification depends on besides the definition and the tile,
/// where it can be reused: the shapes and the bits of the scalar inputs the
/// mask reads. A mask reading a tensor input depends on device data, which
/// no key can follow: it has no key (mayReuse false) and is classified on
/// every call.
struct MaskReuseKey {
  int64_t B = -1, H = -1, Sq = -1, Skv = -1;
  int BlockM = 0, BlockN = 0;
  CUstream Stream = nullptr;
  std::vector<uint64_t> Scalars;
  bool operator==(const MaskReuseKey &O) const {
    return B == O.B && H == O.H && Sq == O.Sq && Skv == O.Skv &&
           BlockM == O.BlockM && BlockN == O.BlockN && Stream == O.Stream &&
           Scalars == O.Scalars;
  }
  bool operator!=(const MaskReuseKey &O) const { return !(*this == O); }
};

/// True when \p A's classification may be reused by a later call with an
/// equal MaskReuseKey: the mask reads no tensor input.
inline bool mayReuse(const analysis::MaskAnalysis &A) {
  return !A.ReadsTensorInput;
}

/// The reuse rule of the block lists kept for one stream (docs/runtime.md,
/// "What a mask costs"): lists are reused only by a call whose key equals
/// the one they were built for, never without a key (a mask that reads a
/// tensor), and lists launched into a stream being captured into a CUDA
/// graph are not remembered (they exist only once the graph runs). The
/// backward keeps one per stream beside its lists' memory; the memory is
/// laid out from the key's shapes alone, so a reusing call never grows it.
class ListReuse {
public:
  /// Whether a call of key \p Key may use the kept lists as they are.
  bool reusable(const std::optional<MaskReuseKey> &Key) const {
    return Key && For && *For == *Key;
  }
  /// Before a build's launches: the old lists are being overwritten.
  void building() { For.reset(); }
  /// After a build for \p Key was enqueued, on a stream that was being
  /// captured (\p Captured) or not.
  void built(const std::optional<MaskReuseKey> &Key, bool Captured) {
    if (Key && !Captured)
      For = Key;
  }

private:
  std::optional<MaskReuseKey> For;
};

/// How many times a backward has built its block lists (a classification
/// and the list kernels) for a call without a BlockMask in this process:
/// the tests' proof that a call whose key repeats builds none and one whose
/// key differs builds them again.
uint64_t backwardListBuilds();
/// Counts one (BackwardRunner, as it enqueues a build).
void countBackwardListBuild();

/// The warps of one CTA of the list kernels (compact_line, a warp a line)
/// for \p Lines lines on \p SMs multiprocessors: 4 where that still gives a
/// CTA to every SM, else fewer, down to 1, so that a short grid (128 lines
/// at S = 16k) spreads over the SMs instead of filling a few.
int listWarpsPerCta(int64_t Lines, int SMs);

/// The key of a call: its shapes, tile and stream, and the slots (from
/// inputSlots) of the scalar inputs \p A's mask reads.
MaskReuseKey maskReuseKey(const ir::Graph &G, const analysis::MaskAnalysis &A,
                          int64_t B, int64_t H, int64_t Sq, int64_t Skv,
                          int BlockM, int BlockN, CUstream Stream,
                          const std::vector<uint64_t> &Slots);

} // namespace attn::runtime

#endif
