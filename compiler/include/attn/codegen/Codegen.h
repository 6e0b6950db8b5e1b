// Code generation: an analysed transformer-style definition to CUDA text
// that instantiates a hand-written skeleton.
#ifndef ATTN_CODEGEN_CODEGEN_H
#define ATTN_CODEGEN_CODEGEN_H

#include "attn/Pipeline.h"
#include "attn/codegen/Arch.h"
#include "attn/codegen/KernelSource.h"
#include "attn/dsl/Problem.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace attn::codegen {

/// Tile configuration of the sm80 forward skeleton.
struct FwdConfig {
  int BlockM = 64;
  int BlockN = 64;
  int Warps = 4;
  int Stages = 2;
  /// "m64n64w4s2"
  std::string str() const;
  /// Parses what str() writes; UserError on anything else.
  static FwdConfig parse(const std::string &Text);
  /// Dynamic shared memory the skeleton needs for head dims \p D, \p DV.
  int sharedBytes(int D, int DV) const;
  /// The configuration used when none is given (see docs/performance.md for
  /// the measurements behind it): 128x64 tiles over 4 warps (two m16 tiles
  /// per warp, so each K/V tile read from shared memory feeds twice the
  /// math, and 96 KiB of shared memory at d128, so two CTAs share an SM) for
  /// head dims up to 128 where shared memory allows; 128x32 over 4 warps
  /// for head dim 64; 64x32 over 4 warps for head dims above 128 (the O
  /// accumulator alone is then 128 registers a thread).
  static FwdConfig defaultFor(int D, int DV, GpuArch Arch);
  /// The autotuner's search space for this skeleton: BlockM {64,128,256} x
  /// BlockN {32,64,128} x Warps {4,8} x Stages {2,3}, keeping only what
  /// structuralError() accepts. Shared memory is not checked: it depends on
  /// the head dims and the device, and is the resource model's job
  /// (runtime/ResourceModel.h).
  static std::vector<FwdConfig> enumerate();
  /// Why the skeleton cannot be instantiated with these warps, block sizes
  /// and stages (KernelSpec::validate's message), or empty. Shared memory is
  /// not checked here.
  std::string structuralError() const;
  bool operator==(const FwdConfig &O) const {
    return BlockM == O.BlockM && BlockN == O.BlockN && Warps == O.Warps &&
           Stages == O.Stages;
  }
  bool operator!=(const FwdConfig &O) const { return !(*this == O); }
};

/// The (head_dim, head_dim_v) pairs the forward skeletons (fwd_sm80 and
/// fwd_sm90) accept: the one table KernelSpec::validate, sm90Unsupported,
/// the NVRTC compile matrix (tests/nvrtc) and docs/codegen.md's "Supported
/// head dims" table follow (a test compares the docs with it).
inline constexpr std::pair<int, int> ForwardHeadDimPairs[] = {
    {64, 64},   {64, 128},   {64, 192},   {64, 256},
    {128, 64},  {128, 128},  {128, 192},  {128, 256},
    {192, 64},  {192, 128},  {192, 192},  {192, 256},
    {256, 64},  {256, 128},  {256, 192},  {256, 256},
};

/// Why the forward skeleton \p Skeleton ("fwd_sm80", "fwd_sm90") cannot
/// take head dims \p D / \p DV (a UserError message naming the field), or
/// empty when ForwardHeadDimPairs holds the pair.
std::string forwardHeadDimError(const char *Skeleton, int D, int DV);

/// Everything that selects one kernel besides the definition.
struct KernelSpec {
  DType Dtype = DType::F16;
  int HeadDim = 128;
  int HeadDimV = 128;
  GpuArch Arch = GpuArch::Sm80;
  FwdConfig Config;           ///< see FwdConfig::defaultFor
  /// UserError naming the field when a value is unsupported.
  void validate() const;
};

/// The sm80 forward kernel for \p Def: a banner (key, attnc version, the IR),
/// the Inputs struct for custom inputs, the Variant struct (score_mod, mask,
/// online_fwd, epilogue, forward, backward) and the extern "C" entry points
/// attnc_fwd, attnc_block_classify and attnc_block_compact.
KernelSource generateForward(const CompiledDefinition &Def,
                             const KernelSpec &Spec);

/// The paged prefill kernel for \p Def (fwd_sm80 over a paged KV cache,
/// runtime/kernels/paged_fwd.cuh): the same banner, Inputs and Variant as
/// generateForward, one entry attnc_fwd_paged taking attnc::PagedFwdArgs.
/// Key NAME.fwd_paged_sm80.DTYPE.dDxDV.ARCH.CONFIG. Runs on every arch
/// (sm_90a included).
KernelSource generatePagedPrefill(const CompiledDefinition &Def,
                                  const KernelSpec &Spec);

/// The reference forward (skeleton ref_fwd): one CTA per (query row,
/// batch·head) holding the row's scores in shared memory, following the
/// direct definition in fp32 without tensor cores. Obviously correct and
/// slow; the tests' and the autotuner's oracle. Entry: attnc_ref_fwd.
/// Spec.Config is not used.
KernelSource generateReference(const CompiledDefinition &Def,
                               const KernelSpec &Spec);

/// Threads of a reference CTA, the keys it can hold (so the longest key
/// sequence it serves) and its dynamic shared memory for head dim \p D.
constexpr int ReferenceThreads = 256;
constexpr int ReferenceMaxKeys = 16384;
int referenceSharedBytes(int D);

/// The `{{key}}` name of the forward kernel, without the hash part.
std::string forwardKey(const CompiledDefinition &Def, const KernelSpec &Spec);

/// Tile configuration of the sm80 backward skeleton, written
/// kv{KvBlockM}x{KvBlockN}w{KvWarps}.q{QBlockM}x{QBlockN}w{QWarps}.s{Stages},
/// or kv{KvBlockM}x{KvBlockN}w{KvWarps}.fused.s{Stages} in the fused dQ mode.
struct BwdConfig {
  /// dK/dV kernel: KvBlockN keys per CTA, split over KvWarps warps (whole
  /// m16 key tiles per warp); KvBlockM query rows per step of its loop.
  int KvBlockM = 64;
  int KvBlockN = 128;
  int KvWarps = 8;
  /// dQ kernel: QBlockM query rows per CTA over QWarps warps; QBlockN keys
  /// per step of its loop.
  int QBlockM = 128;
  int QBlockN = 64;
  int QWarps = 8;
  /// Depth of both kernels' shared-memory rings, 2 to 4.
  int Stages = 2;
  /// Fused dQ mode: the dK/dV kernel also sums dQ (ordered by per-query-
  /// block semaphores) and there is no dQ kernel; the Q fields then equal
  /// the Kv ones (fused() sets them), the tiling of dQ's partial sums.
  bool FusedDq = false;
  /// The fused dQ mode with these dK/dV tiles.
  static BwdConfig fused(int KvBlockM, int KvBlockN, int KvWarps, int Stages);
  /// "kv64x128w8.q128x64w8.s2", "kv64x128w8.fused.s2"
  std::string str() const;
  /// Parses what str() writes; UserError on anything else.
  static BwdConfig parse(const std::string &Text);
  /// The dK/dV kernel's split warp layout (bwd_sm80_dkdv.cuh): Sᵀ and dPᵀ
  /// over KvWarps / 2 key groups x 2 query halves, Pᵀ and dSᵀ through
  /// shared memory to dK and dV. Where each half has at least 32 rows
  /// (KvBlockM a multiple of 64) and each key group whole m16 tiles.
  bool splitsQueries() const;
  /// Dynamic shared memory of the dK/dV kernel (K, V, then a ring of Q, dO
  /// and the rows' \p NumFinals final rowscales plus doosum when \p Doosum,
  /// then the Pᵀ tile in the split layout and the dSᵀ tile in the split
  /// layout or the fused mode) and of the dQ kernel (Q, dO, then a ring of
  /// K and V; not launched in the fused mode), in bytes.
  int dkdvSharedBytes(int D, int DV, int NumFinals, bool Doosum) const;
  int dqSharedBytes(int D, int DV) const;
  /// The configuration used when none is given (docs/codegen.md).
  static BwdConfig defaultFor(int D, int DV, GpuArch Arch);
};

/// UserError naming the field when bwd_sm80 cannot be instantiated for
/// \p Spec's dtype, head dims and arch with \p Config (Spec.Config, the
/// forward's, is not looked at): head_dim 64 or 128, head_dim_v 64, 128 or
/// 256 (256 with head_dim 128 and at most 32 query rows per dK/dV step,
/// the register budget), the tile rules, shared memory within the arch.
void validateBackward(const KernelSpec &Spec, const BwdConfig &Config,
                      int NumFinals, bool Doosum);

/// The sm80 backward kernels for \p Def with \p Config (default:
/// BwdConfig::defaultFor): the same banner, Inputs and Variant as the
/// forward, and the entry points attnc_bwd_preprocess (doosum),
/// attnc_bwd_dkdv, attnc_bwd_dq (attnc_bwd_dq_init in the fused dQ mode),
/// attnc_bwd_input_grads, attnc_bwd_block_classify, attnc_bwd_block_rows and
/// attnc_bwd_block_cols.
/// NotSupportedYet for linear definitions and for gradients of per_row,
/// per_key and full inputs; UserError without a backward.
KernelSource generateBackward(const CompiledDefinition &Def,
                              const KernelSpec &Spec);
KernelSource generateBackward(const CompiledDefinition &Def,
                              const KernelSpec &Spec, const BwdConfig &Config);

/// NAME.bwd_sm80.DTYPE.dDxDV.ARCH.CONFIG, the backward's readable key.
std::string backwardKey(const CompiledDefinition &Def, const KernelSpec &Spec,
                        const BwdConfig &Config);

/// Tile configuration of the sm90 (Hopper) backward skeleton, written
/// bwd90.kv{KvBlockM}x{KvBlockN}s{Stages}.q{QBlockM}x{QBlockN}w{QWarps}, or
/// bwd90.kv{KvBlockM}x{KvBlockN}s{Stages}.fused in the fused dQ mode
/// (.atomic: fused with atomic dQ adds; the prefix bwd90ws: warp-specialised,
/// bwd90ws2: warp-specialised with the element work in two passes)
/// (docs/codegen.md, "The bwd_sm90 skeleton"). Its dK/dV kernel has
/// KvBlockN / 64 warpgroups, each owning 64 keys (the M of its wgmma);
/// its dQ kernel is bwd_sm80's, with the Q tiles, or, fused, the dK/dV
/// kernel computes dQ with wgmma too.
struct BwdSm90Config {
  /// Query rows per step of the dK/dV kernel (the N of Sᵀ's wgmma): 64 or
  /// 128 (128 only where D + DV <= 128: the accumulators).
  int KvBlockM = 64;
  /// Keys per dK/dV CTA: 64 or 128 (one or two warpgroups).
  int KvBlockN = 128;
  /// Depth of the Q/dO ring (and of the dQ kernel's K/V ring): 2 to 4.
  int Stages = 2;
  /// The dQ kernel (bwd_sm80's BwdDqSm80): query rows per CTA, keys per
  /// step, warps.
  int QBlockM = 128;
  int QBlockN = 64;
  int QWarps = 8;
  /// Fused dQ mode: the dK/dV kernel also sums dQ (ordered by per-query-
  /// block semaphores, as bwd_sm80's fused mode) and there is no dQ
  /// kernel; the Q fields then equal the Kv ones (fused() sets them).
  bool FusedDq = false;
  /// With FusedDq, opt-in (written .atomic instead of .fused): dQ's partial
  /// products are added with fp32 atomics in whatever order they arrive,
  /// no semaphores: dq's bits may differ from run to run.
  bool AtomicDq = false;
  /// With FusedDq (written bwd90ws. instead of bwd90.): a producer
  /// warpgroup streams Q and dO by TMA and the rows by cp.async into an
  /// mbarrier ring; the KvBlockN / 64 consumer warpgroups take registers
  /// from it (setmaxnreg).
  bool WarpSpecialized = false;
  /// Warp-specialised only (written bwd90ws2. instead of bwd90ws.): the
  /// element work in two passes, P while dPᵀ's GEMM runs and dS while
  /// dV's runs, instead of one after both Sᵀ and dPᵀ (more registers: the
  /// scores are kept for the second pass).
  bool TwoPass = false;
  /// Warp-specialised with fused dQ and 64 keys a CTA (written .split.
  /// before .fused or .atomic): two consumer warpgroups over the same keys,
  /// each computing Sᵀ and dPᵀ and owning part of dK's, dV's and dQ's
  /// columns, for head dims whose dK and dV rows are too many registers
  /// for one warpgroup (256/256, 192/128; any of 128 or 256 each). With
  /// Lean 2 (written .split.tw. before .fused; the default there): the
  /// lean step's turn warp waits for and publishes the dQ turns, nothing
  /// else of the lean step.
  bool SplitCols = false;
  /// The column split's roles form (written .split.ro. before .fused;
  /// with the turn warp, Lean 2; head dims 128/128 and 192/128): instead
  /// of both warpgroups computing the same Sᵀ and dPᵀ, warpgroup 0 computes
  /// them, P and dS, stores Pᵀ and dSᵀ into one of two shared slots and
  /// computes and adds dQ's product (all columns); warpgroup 1 holds all of
  /// dK and dV and multiplies the slots' tiles (A from shared memory), a
  /// step behind. No GEMM or element is computed twice.
  bool SplitRoles = false;
  /// Warp-specialised with fused dQ, two warpgroups of 64 keys and 64-row
  /// steps, d64 or d128 (written .pp. before .fused or .atomic): the warpgroups take
  /// turns at the tensor cores instead of meeting at a barrier every step,
  /// each computes dQ's partial over its own keys, and a warp of the
  /// producer warpgroup adds the step's sum to dQ's (bulk copies, in the
  /// semaphore turns), off the consumers' path.
  bool PingPong = false;
  /// The same constraints (written .dqw. before .fused or .atomic): the
  /// lockstep step of bwd90ws., with only the dQ turn and adds moved to the
  /// producer warpgroup's writer warp (each warpgroup's dQ columns through
  /// shared memory).
  bool DqWriter = false;
  /// Warp-specialised with fused dQ, the lockstep step (written .lean.
  /// before .fused or .atomic, 1): dV's and dK's products are issued before
  /// the dSᵀ tile is stored (they run while the warpgroups meet) and dQ's
  /// is queued behind them with no wait between; tiles wholly inside the
  /// sequences skip the per-element bounds and (without a mask) selects.
  /// 2 (written .lean2.): also a turn warp in the producer warpgroup waits
  /// for the dQ turns and publishes them (with .fused), so that no compute
  /// thread spins or fences at gpu scope (the default at d128). 3 (written
  /// .lean3.): also the dQ adds 16 bytes a lane (lanes trade pairs), half
  /// the instructions; measured slower than 2. 0: none of these.
  int Lean = 0;
  /// With Lean 2, a query step of 64 (written .lean2.bulk.fused or .atomic):
  /// the compute threads store the step's dQ into one of two fp32 slots in
  /// shared memory instead of adding it, and the turn warp adds the slot to
  /// dQ's sum with bulk reductions (cp.reduce.async.bulk) in the turns'
  /// order, so the sums keep their order and no compute thread waits for a
  /// turn (.atomic: into the zeroed sum at once, no turns).
  bool BulkDq = false;
  /// With BulkDq, how the slots reach dQ's sum: 0 (.lean2.bulk.) the one
  /// turn warp above; 1 (.lean2.bulk2.) two turn warps taking alternate
  /// steps and a slot each, acquiring a turn before its slot is full,
  /// bulk reductions; 2 (.lean2.red2.) the same two warps adding a slot
  /// with their own red.global.add.v4; 3 (.lean2.red.) one such warp
  /// (bwd_sm90_dq_slots.cuh).
  int BulkForm = 0;
  /// Packed variable-length calls (written .varlen after .fused or
  /// .atomic): the warp-specialised fused-dQ kernel over cu_seqlens, one
  /// CTA per (key block of one sequence, kv head), dQ's sums per (head,
  /// packed query block) (bwd_sm90_varlen.cuh), with the lean step and its
  /// turn warp where Lean is set (.lean2.fused.varlen). Not for the
  /// ping-pong, dQ-writer or bulk dQ steps, nor the column split's turn
  /// warp. The runner picks it for packed calls (packedBackwardChoice); a
  /// dense call refuses it.
  bool Varlen = false;
  /// The fused dQ mode with these dK/dV tiles.
  static BwdSm90Config fused(int KvBlockM, int KvBlockN, int Stages);
  /// "bwd90.kv64x128s2.q128x64w8", "bwd90.kv64x128s2.fused",
  /// "bwd90.kv64x128s2.atomic", "bwd90ws.kv64x128s2.fused",
  /// "bwd90ws.kv64x64s2.split.fused", "bwd90ws.kv64x64s2.split.tw.fused",
  /// "bwd90ws.kv64x64s2.split.ro.fused",
  /// "bwd90ws.kv64x128s2.pp.fused",
  /// "bwd90ws.kv64x128s2.dqw.fused", "bwd90ws.kv64x128s2.lean.fused",
  /// "bwd90ws.kv64x128s2.lean2.fused", "bwd90ws.kv64x128s2.lean2.bulk.fused",
  /// "bwd90ws.kv64x128s2.fused.varlen"
  std::string str() const;
  /// Parses what str() writes; UserError on anything else.
  static BwdSm90Config parse(const std::string &Text);
  /// Consumer warpgroups: of 64 keys each, or two over the same 64 keys
  /// when SplitCols.
  int dkdvWarpgroups() const { return SplitCols ? 2 : KvBlockN / 64; }
  /// Threads of a dK/dV CTA: 128 per warpgroup, and the producer's 128
  /// when warp-specialised.
  int dkdvThreads() const {
    return 128 * (dkdvWarpgroups() + (WarpSpecialized ? 1 : 0));
  }
  /// Dynamic shared memory of the dK/dV kernel: 1024 bytes of alignment
  /// slack, K, V, then Stages x (Q, dO, the rows' \p NumFinals final
  /// rowscales and doosum when \p Doosum, rounded to 1024 bytes), then in
  /// the fused mode the dSᵀ tile; with PingPong, DqWriter or BulkDq two fp32 dQ slots of
  /// KvBlockM rows of 4·D + 32 bytes; warp-specialised, 256 bytes of
  /// mbarriers after them.
  int dkdvSharedBytes(int D, int DV, int NumFinals, bool Doosum) const;
  /// The dQ kernel's (BwdConfig::dqSharedBytes with the Q tiles); 0 in the
  /// fused mode, which has none.
  int dqSharedBytes(int D, int DV) const;
  /// The configuration used when none is given (docs/codegen.md).
  static BwdSm90Config defaultFor(int D, int DV);
  bool operator==(const BwdSm90Config &O) const { return str() == O.str(); }
};

/// Why bwd_sm90 cannot serve \p Spec's dtype, head dims and arch with
/// \p Config, or empty: sm_90a, head_dim 64 or 128 with head_dim_v equal,
/// the tile rules, registers, shared memory within 227 KiB.
std::string bwdSm90Unsupported(const KernelSpec &Spec, const BwdSm90Config &Config,
                               int NumFinals, bool Doosum);

/// The Hopper backward kernels for \p Def: the same banner, Inputs and
/// Variant as generateBackward and the same entry points as its two-kernel
/// mode (attnc_bwd_preprocess, attnc_bwd_dkdv with wgmma, attnc_bwd_dq,
/// attnc_bwd_input_grads, attnc_bwd_block_classify, attnc_bwd_block_rows,
/// attnc_bwd_block_cols). UserError with bwdSm90Unsupported's reason and
/// generateBackward's errors.
KernelSource generateBackwardSm90(const CompiledDefinition &Def,
                                  const KernelSpec &Spec,
                                  const BwdSm90Config &Config);

/// What every backward generator checks of the definition: transformer
/// kind, a backward (derived or written), input gradients only of scalar
/// and per-head inputs and at most 8 of them; \p Skeleton names the
/// generator in the messages.
void checkBackwardDefinition(const CompiledDefinition &Def, const char *Skeleton);

/// The persistent fwd_sm90 module's entry for packed calls, present where
/// analysis::packedRangeFromBoxes holds for the definition's mask.
inline constexpr const char *PackedPersistentEntry = "attnc_fwd_packed";
/// Its tiles' facts, found before the walk (FwdArgs::packed_tiles), a warp
/// of 128-thread CTAs a tile; in the same modules.
inline constexpr const char *PackedTilesEntry = "attnc_fwd_packed_tiles";

/// Tile configuration of the sm90 (Hopper) forward skeleton, written
/// sm90.m{BlockM}n{BlockN}s{Stages} (docs/codegen.md, "The fwd_sm90
/// skeleton"). A CTA is one producer warpgroup (TMA loads) and BlockM / 64
/// consumer warpgroups (wgmma), each owning 64 query rows.
struct Sm90Config {
  int BlockM = 128; ///< 64 or 128: one or two consumer warpgroups
  int BlockN = 128; ///< keys per block: 64, 128 or 192
  int Stages = 3;   ///< depth of the K/V ring: 2 to 4 (defaultFor(128, 128))
  /// The persistent kernel (fwd_sm90_persist.cuh): one CTA per SM walking
  /// the dense call's tiles, the next tile's loads under the current one's
  /// end; O staged in a shared-memory tile of its own. Written "p" after
  /// the stages. A packed call walks its tiles too (PackedPersistentEntry)
  /// where the mask's ranges come from box classes
  /// (analysis::packedRangeFromBoxes); other packed calls run the same
  /// blocks and stages without it.
  bool Persistent = false;
  /// The persistent kernel's Q tiles: 2 (written "p"), Q and O in tiles of
  /// their own (the taken walks: two Q tiles, each tile's O staged in its
  /// own), so that the next tile's Q lands while this one's O is stored; or
  /// 1 (written "p1"), O staged in Q's tile as in the plain kernel and the
  /// next Q loaded after the epilogue, which leaves room for a third stage
  /// at d128.
  int QTiles = 2;
  /// "sm90.m128n128s2", "sm90.m128n128s2p", "sm90.m128n128s3p1"
  std::string str() const;
  /// Parses what str() writes; UserError on anything else.
  static Sm90Config parse(const std::string &Text);
  /// True for a configuration string naming this skeleton ("sm90" or
  /// "sm90.<config>").
  static bool names(const std::string &Text);
  /// Threads of a CTA: 128 per warpgroup, the producer included.
  int threads() const { return 128 * (BlockM / 64 + 1); }
  /// Dynamic shared memory for head dims \p D, \p DV: 1024 bytes of
  /// alignment slack, Q (and O when persistent with two Q tiles), Stages x
  /// (K + V), 256 bytes of mbarriers.
  int sharedBytes(int D, int DV) const;
  /// This configuration's persistent form for head dims \p D, \p DV: the
  /// same blocks (the same block lists), as many of its stages as fit
  /// beside the O tile, at least 2; nullopt where none fit.
  std::optional<Sm90Config> persistentFor(int D, int DV) const;
  /// The configuration used when none is given: 128 x 128 (two consumers)
  /// for head dims up to 128, 128 x 64 above (the O accumulator of DV 256
  /// alone is 128 registers a thread); 3 stages where shared memory allows,
  /// else 2 (docs/performance.md has the measurements).
  static Sm90Config defaultFor(int D, int DV);
  /// The autotuner's search space: every block M, block N and stage count
  /// structuralError() accepts (shared memory is the resource model's).
  static std::vector<Sm90Config> enumerate();
  /// Why the skeleton cannot be instantiated with these blocks and stages,
  /// or empty. Shared memory is not checked here.
  std::string structuralError() const;
  bool operator==(const Sm90Config &O) const {
    return BlockM == O.BlockM && BlockN == O.BlockN && Stages == O.Stages &&
           Persistent == O.Persistent && (!Persistent || QTiles == O.QTiles);
  }
};

/// Why fwd_sm90 cannot serve \p Spec's dtype, head dims and arch with
/// \p Config (Spec.Config, the sm80 one, is not looked at), or empty: the
/// arch must be sm_90a, head dims 64, 128, 192 or 256, the tile rules, the
/// shared memory within 227 KiB.
std::string sm90Unsupported(const KernelSpec &Spec, const Sm90Config &Config);

/// The Hopper forward kernel for \p Def: the same banner, Inputs and
/// Variant as generateForward, instantiating fwd_sm90 (TMA, mbarriers,
/// wgmma, warp specialisation), with the same entry points attnc_fwd (which
/// takes an attnc::Sm90Maps of tensor maps as a third parameter),
/// attnc_block_classify and attnc_block_compact. UserError with
/// sm90Unsupported's reason; NotSupportedYet for linear definitions.
KernelSource generateForwardSm90(const CompiledDefinition &Def,
                                 const KernelSpec &Spec,
                                 const Sm90Config &Config);

/// How fwd_sm90's paged kernel loads a K/V block: as TMA boxes (one box a
/// page, kBlockN / page size of them for pages smaller than the block;
/// pages of 8 tokens and more), issued by a thread or a warp, or gathered
/// row by row (any page size).
enum class PagedLoad {
  /// One producer thread reads each page index of the block, then issues
  /// that page's boxes, page after page (a load's latency per page).
  Thread,
  /// The producer's first warp: lane i reads the index of the block's page
  /// i one block ahead (in flight while the warp waits for a free stage)
  /// and issues that page's boxes.
  Warp,
  /// The producer warpgroup's 128 threads copy the block's rows with
  /// cp.async into the swizzled layout the boxes would have written, one
  /// page lookup a row (a lane's index shared by shuffles), no TMA for
  /// K/V: the only load of pages under 8 tokens.
  Gather,
};

/// "thread", "warp" or "gather".
const char *pagedLoadName(PagedLoad L);
/// The PagedLoad named \p Text (pagedLoadName's words); UserError on
/// anything else.
PagedLoad parsePagedLoad(const std::string &Text);
/// The PagedLoad paged prefill uses for pages of \p PageSize tokens when
/// none is named (docs/runtime.md has the measurements).
PagedLoad defaultPagedLoad(int64_t PageSize);

/// The Hopper paged prefill kernel for \p Def: fwd_sm90 with its K/V
/// loads one TMA box per page (runtime/kernels/paged_fwd.cuh) issued as
/// \p Load says, one entry attnc_fwd_paged taking attnc::PagedFwdArgs and
/// attnc::Sm90Maps (q packed, k and v the caches as [pages][slots][heads]).
/// Key NAME.fwd_paged_sm90.DTYPE.dDxDV.sm_90a.CONFIG, with ".warp" or
/// ".gather" after it for PagedLoad::Warp and Gather. UserError with
/// sm90Unsupported's reason.
KernelSource generatePagedPrefillSm90(const CompiledDefinition &Def,
                                      const KernelSpec &Spec,
                                      const Sm90Config &Config,
                                      PagedLoad Load = PagedLoad::Thread);

/// NAME.fwd_sm90.DTYPE.dDxDV.sm_90a.CONFIG, the sm90 kernel's readable key.
std::string forwardKeySm90(const CompiledDefinition &Def,
                           const KernelSpec &Spec, const Sm90Config &Config);

/// attnc's version string.
const char *attncVersion();

} // namespace attn::codegen

#endif
