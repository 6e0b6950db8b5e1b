// The host side of the block classification (runtime/kernels/block_mask.cuh):
// how many groups a call classifies, the bounds scratch an analysed mask
// needs, the launches, and when a classification may be reused.
#ifndef ATTN_RUNTIME_MASKCLASSIFY_H
#define ATTN_RUNTIME_MASKCLASSIFY_H

#include "attn/analysis/MaskBounds.h"
#include "attn/runtime/CudaDriver.h"

#include "DeviceArena.h"

#include "../kernels/attention_args.cuh"

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
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
/// "What a mask costs"), over a few slots of lists: lists are reused only
/// by a call whose key equals the one they were built for, never without a
/// key (a mask that reads a tensor), and lists launched into a stream being
/// captured into a CUDA graph are not remembered (they exist only once the
/// graph runs). Up to MaxKeys keys are kept, so that calls alternating
/// between a few keys (a ring's steps: other offsets and lengths a step)
/// build each key's lists once; a build for a new key overwrites a slot
/// never built for a key, else the least recently used one (its key is
/// forgotten first). KeptLists holds the lists of each slot.
class ListReuse {
public:
  /// The keys one stream keeps lists of. Each slot's memory is laid out
  /// from its last key's shapes (a forward's classes and lists are about
  /// 5 bytes a block pair a classification group: 80 KiB for one group at
  /// 16k x 16k tokens in 128 x 128 blocks; a backward's about four times
  /// that), and is allocated only once a
  /// distinct key needs it: calls that repeat one key keep one slot.
  static constexpr unsigned MaxKeys = 8;

  /// The slot whose lists were built for \p Key, now the most recently
  /// used; -1 where there is none (no key, never built, or evicted).
  int find(const std::optional<MaskReuseKey> &Key) {
    if (!Key)
      return -1;
    for (unsigned I = 0; I < MaxKeys; ++I)
      if (Slots[I].For && *Slots[I].For == *Key) {
        Slots[I].Used = ++Clock;
        return int(I);
      }
    return -1;
  }
  /// Whether a call of key \p Key may use kept lists as they are.
  bool reusable(const std::optional<MaskReuseKey> &Key) const {
    return Key && std::any_of(Slots.begin(), Slots.end(), [&](const Entry &E) {
             return E.For && *E.For == *Key;
           });
  }
  /// Before a build's launches: the slot whose lists it overwrites (the
  /// first one holding no key's lists, else the least recently used), its
  /// key forgotten until built() names the new one. A build into a stream
  /// being captured (\p Capturing) takes the most recently used slot
  /// instead: nothing may be allocated during a capture, and that slot's
  /// memory is the one the warm-up call before the capture sized (a fresh
  /// slot has none).
  unsigned building(bool Capturing = false) {
    unsigned Pick = 0;
    if (Capturing && Clock > 0) {
      for (unsigned I = 1; I < MaxKeys; ++I)
        if (Slots[I].Used > Slots[Pick].Used)
          Pick = I;
      Slots[Pick].For.reset();
      Slots[Pick].Used = ++Clock;
      return Pick;
    }
    for (unsigned I = 0; I < MaxKeys; ++I) {
      if (!Slots[I].For) {
        Pick = I;
        break;
      }
      if (Slots[I].Used < Slots[Pick].Used)
        Pick = I;
    }
    Slots[Pick].For.reset();
    Slots[Pick].Used = ++Clock;
    return Pick;
  }
  /// After a build into \p Slot for \p Key was enqueued, on a stream that
  /// was being captured (\p Captured) or not.
  void built(unsigned Slot, const std::optional<MaskReuseKey> &Key,
             bool Captured) {
    if (Key && !Captured)
      Slots[Slot].For = Key;
  }
  /// How many slots hold lists of a key.
  unsigned kept() const {
    return unsigned(std::count_if(Slots.begin(), Slots.end(),
                                  [](const Entry &E) { return bool(E.For); }));
  }

private:
  struct Entry {
    std::optional<MaskReuseKey> For;
    uint64_t Used = 0;
  };
  std::array<Entry, MaxKeys> Slots;
  uint64_t Clock = 0;
};

/// The block lists of one stream's calls without a BlockMask, by
/// ListReuse's rule: per slot, its device memory and where its last build
/// put the lists (\p ListsT: the forward's or the backward's pointers).
template <typename ListsT> class KeptLists {
public:
  explicit KeptLists(const char *What) : What(What) {}

  /// The lists of a call of key \p Key on \p Stream: a slot's whose key
  /// equals it, else those \p Build (ListsT(DeviceArena &)) enqueues on
  /// \p Stream into the memory of the slot ListReuse picks.
  template <typename BuildFn>
  const ListsT &get(const std::optional<MaskReuseKey> &Key, CUstream Stream,
                    BuildFn &&Build) {
    if (int Found = Reuse.find(Key); Found >= 0)
      return Slots[unsigned(Found)]->Lists;
    const bool Capturing = streamIsCapturing(Stream);
    // Until every launch is enqueued, the slot holds no key's lists.
    const unsigned At = Reuse.building(Capturing);
    if (!Slots[At])
      Slots[At] = std::make_unique<Slot>(What);
    Slot &S = *Slots[At];
    S.Lists = Build(S.Mem);
    Reuse.built(At, Key, Capturing);
    return S.Lists;
  }
  const ListReuse &reuse() const { return Reuse; }

private:
  struct Slot {
    explicit Slot(const char *What) : Mem(What) {}
    DeviceArena Mem;
    ListsT Lists{};
  };
  const char *What;
  ListReuse Reuse;
  std::array<std::unique_ptr<Slot>, ListReuse::MaxKeys> Slots;
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
