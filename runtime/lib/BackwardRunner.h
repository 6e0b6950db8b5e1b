// The backward launcher: the bwd_sm90 or bwd_sm80 kernels of one definition
// and kernel spec, compiled through the kernel cache, run on validated
// device tensors.
#ifndef ATTN_RUNTIME_BACKWARDRUNNER_H
#define ATTN_RUNTIME_BACKWARDRUNNER_H

#include "BlockMaskData.h"
#include "DeviceArena.h"
#include "PerStream.h"
#include "KernelModule.h"
#include "MaskClassify.h"

#include "attn/analysis/MaskBounds.h"
#include "attn/codegen/Codegen.h"
#include "attn/runtime/Selector.h"
#include "attn/runtime/Validate.h"

#include <cuda.h>

#include <memory>
#include <optional>


namespace attn::runtime {

/// What the launcher needs of a backward configuration, whichever skeleton
/// it is of (both have the same entry points): the dK/dV and dQ kernels'
/// tiles (the block lists' too), threads and dynamic shared memory.
struct BackwardPlan {
  std::string Name; ///< the configuration's written form, for messages
  int KvBlockM = 0, KvBlockN = 0, KvThreads = 0, KvShared = 0;
  int QBlockM = 0, QBlockN = 0, QThreads = 0, QShared = 0;
  /// bwd_sm80's fused dQ mode (no dQ kernel).
  bool FusedDq = false;
  /// bwd_sm90's opt-in modes: dQ added with atomics (the sums zeroed
  /// first, no semaphores); the dK/dV kernel warp-specialised (its third
  /// argument the TMA maps of q and dout).
  bool AtomicDq = false;
  bool WarpSpecialized = false;
  /// bwd_sm90's packed form (.varlen): packed calls only; dQ's sums and
  /// semaphores per (head, packed query block); no block-list kernels.
  bool Varlen = false;
};

/// The backward's block lists in the kernels' format (BwdArgs): the dQ
/// kernel's rows, the dK/dV kernel's columns and, in the fused dQ mode,
/// the columns' ranks (else null).
struct BwdLists {
  const int *QCount, *QList, *KvCount, *KvList;
  int *KvRank;
};

/// Gradients dq, dk, dv (and of custom inputs that require them) of
/// L = Σ out ∘ dout, from q, k, v, dout, the forward's final rowscales and,
/// for a backward that reads doosum, its output. Deterministic: the same
/// inputs give the same bits on every run (docs/runtime.md, "Backward").
/// The configuration a packed variable-length backward runs for the dense
/// choice \p Choice: a warp-specialised fused-dQ bwd_sm90 configuration
/// (not ping-pong or the dQ writer) in its packed form (.varlen, the same
/// tiles and lean step; the bulk dQ and the column split's turn warp
/// dropped, which have no packed form); any other choice, bwd_sm80's two-kernel mode with the same dK/dV
/// tiles (bwd_sm80's) or its defaults. None when \p Choice is already a
/// packed form or that mode.
std::optional<KernelChoice> packedBackwardChoice(const KernelChoice &Choice);

/// The configuration a dense call with long walks runs for the default
/// choice \p Choice, where it has one: at head dim 64 bwd_sm90's default
/// (bwd90ws.kv128x128s2.lean2.fused) with dQ through the shared slots and
/// the turns taken ahead (.lean2.red2.). The turn warps overlap the wait for
/// a turn with the step, which pays where walks are long and ranked by a
/// mask, and costs where walks are short or staggered without one. None for
/// a named or tuned choice, another head dim or a packed form.
std::optional<KernelChoice> longWalkBackwardChoice(const KernelChoice &Choice);

/// Whether a dense call of \p Sq queries of a definition with (\p Masked)
/// or without a mask runs longWalkBackwardChoice's configuration. H200,
/// d64 f16, B·S = 16k, `.red2.` against `.lean2.fused`: causal -3% / -1% /
/// +3% / +9% / +18% at S = 1k / 2k / 4k / 8k / 16k, unmasked -10% / -7% /
/// -4% / -4% / +6% (docs/performance-log.md, 2026-11-29).
inline bool wantsLongWalkBackward(bool Masked, int64_t Sq) {
  return Masked ? Sq >= 4096 : Sq >= 16384;
}

/// What a dense call of \p Sq queries runs for \p Choice (of a definition
/// with or without a mask): its long-walk twin where there is one and
/// wantsLongWalkBackward says so, else \p Choice.
KernelChoice denseBackwardChoice(const KernelChoice &Choice, bool Masked, int64_t Sq);

/// What a packed call whose longest sequence has \p MaxSq queries runs for
/// \p Choice: the packed form of denseBackwardChoice's (the long-walk rule
/// by the longest sequence; H200, d64 f16, 32 sequences in [64, 8192]:
/// causal +3%, unmasked -3.5% on the twin, 2026-11-29), or \p Choice itself
/// where it has no packed form (already one, or run as it is).
KernelChoice packedCallBackwardChoice(const KernelChoice &Choice, bool Masked, int64_t MaxSq);

class BackwardRunner {
public:
  /// Generates the backward of \p Def for target \p T with the selector's
  /// \p Choice (a bwd_sm90 or bwd_sm80 configuration: InternalError
  /// otherwise) and
  /// compiles it through KernelCache::global(). \p Def must outlive
  /// the runner. UserError / NotSupportedYet from the
  /// code generator.
  BackwardRunner(const CompiledDefinition &Def, const KernelTarget &T,
                 const KernelChoice &Choice);
  ~BackwardRunner();
  BackwardRunner(const BackwardRunner &) = delete;
  BackwardRunner &operator=(const BackwardRunner &) = delete;

  /// Checks the grid limits of a call validateBackwardCall accepted as
  /// \p Shape (InvalidArgument and nothing launched on a bad one), loads
  /// the module on the first call, and launches on \p Stream without
  /// synchronising.
  /// Workspaces (doosum, block lists, input-gradient partials; in the fused
  /// dQ mode dQ's fp32 partial sums and semaphores) belong to the runner
  /// and are reused: do not run one runner concurrently. A packed
  /// variable-length call (Shape.Fwd.Packed) runs packedBackwardChoice's
  /// configuration, a second runner made on the first such call (on sm_90a
  /// bwd_sm90's packed form, else bwd_sm80's two-kernel mode); a dense call
  /// on a runner of a packed form is a UserError.
  /// With \p Blocks (a BlockMask made for this runner's tiles: UserError
  /// otherwise), no classification is launched: the kernels read its lists.
  /// Without, a masked call builds its block lists, except where the mask
  /// reads no tensor input and the last build on \p Stream was for the same
  /// shapes and scalar inputs (ListReuse).
  void run(const BackwardTensors &T, const BackwardCallShape &Shape,
           const InputMap &Inputs = {},
           const InputGradMap &Grads = {}, CUstream Stream = nullptr,
           const BlockMaskData *Blocks = nullptr);

  /// Classifies a masked definition's blocks for a call of shape \p C
  /// with \p Inputs and writes the lists into \p Out (BwdMem, HasBwd,
  /// Bwd and the list pointers), launched on \p Stream.
  void makeBlockLists(const CallShape &C, const InputMap &Inputs,
                      CUstream Stream, BlockMaskData &Out);
  /// The tiles its block lists are for.
  BwdTiles tiles() const;

  const codegen::KernelSource &source() const { return Source; }
  const CacheResult &cacheResult() const { return Cached; }
  const KernelChoice &choice() const { return Choice; }
  const BackwardPlan &plan() const { return Plan; }

private:
  void ensureLoaded();
  /// InvalidArgument where the classification's grid would pass CUDA's
  /// limits.
  void checkClassifyGrid(const CallShape &C) const;
  /// Launches the classification and the list kernels for \p C into
  /// regions of \p Mem.
  BwdLists listBlocks(const CallShape &C, void *Slots, CUstream Stream,
                      DeviceArena &Mem);

  const CompiledDefinition &Def;
  analysis::MaskAnalysis Mask;
  KernelTarget Target;
  /// bwd_sm80's two-kernel mode for packed calls when this runner's choice
  /// cannot run them (the fused dQ mode, bwd_sm90); made on the first one.
  std::unique_ptr<BackwardRunner> Unfused;
  /// longWalkBackwardChoice's runner for the calls that want it (dense
  /// ones by their queries, packed ones by their longest sequence, which it
  /// runs through its own packed runner); made on the first one.
  std::unique_ptr<BackwardRunner> LongWalks;
  codegen::KernelSpec Spec;
  KernelChoice Choice;
  BackwardPlan Plan;
  codegen::KernelSource Source;
  CacheResult Cached;
  KernelModule Module;
  CUfunction Pre = nullptr, DkDv = nullptr, Dq = nullptr, DqInit = nullptr,
             DqConvert = nullptr, Grads = nullptr, Classify = nullptr,
             Rows = nullptr, Cols = nullptr;
  /// Per stream: calls on different streams may run at once.
  PerStream<DeviceArena> Work =
      perStream<DeviceArena>(std::string("backward workspace"));
  /// The block lists of the calls without a BlockMask on one stream, per
  /// kept key (KeptLists: their memory, with the classification's scratch,
  /// and where the build put them). A mask that reads no tensor input
  /// builds them once per MaskReuseKey (as the forward's classification):
  /// a call repeating one of the kept keys on the same stream, which
  /// orders it after the build, launches none.
  using MaskLists = KeptLists<BwdLists>;
  PerStream<MaskLists> MaskWork{
      [] { return std::make_unique<MaskLists>("backward block lists"); }};
};

} // namespace attn::runtime

#endif
