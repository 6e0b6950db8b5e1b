// The host side of the block classification (runtime/kernels/block_mask.cuh):
// how many groups a call classifies, the bounds scratch an analysed mask
// needs, the launches, and when a classification may be reused.
#ifndef ATTN_RUNTIME_MASKCLASSIFY_H
#define ATTN_RUNTIME_MASKCLASSIFY_H

#include "attn/analysis/MaskBounds.h"
#include "attn/runtime/CudaDriver.h"

#include "../kernels/attention_args.cuh"

#include <cstdint>
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

/// The key of a call: its shapes, tile and stream, and the slots (from
/// inputSlots) of the scalar inputs \p A's mask reads.
MaskReuseKey maskReuseKey(const ir::Graph &G, const analysis::MaskAnalysis &A,
                          int64_t B, int64_t H, int64_t Sq, int64_t Skv,
                          int BlockM, int BlockN, CUstream Stream,
                          const std::vector<uint64_t> &Slots);

} // namespace attn::runtime

#endif
