// The "generated" backend: the forward skeleton the selector chose,
// instantiated with the definition's Variant, one kernel per choice, with
// the block classification that lets it skip masked key blocks. A skeleton
// reading through TMA falls back to the next one of the table where the
// strides defeat its descriptors.
#include "attn/runtime/Backend.h"

#include "BlockMaskData.h"
#include "DeviceArena.h"
#include "ForwardLaunch.h"
#include "KernelModule.h"
#include "MaskClassify.h"
#include "PagedDecode.h"
#include "PerStream.h"
#include "TmaMaps.h"

#include "../kernels/decode_args.cuh"
// The packed grid's size (packed_block_bound), shared with the kernels.
#include "../kernels/block_range.cuh"

#include "attn/Error.h"
#include "attn/analysis/MaskBounds.h"
#include "attn/analysis/Merge.h"
#include "attn/runtime/Selector.h"
#include "attn/runtime/CudaDriver.h"

#include <fmt/format.h>
#include <llvm/ADT/STLExtras.h>

#include <algorithm>
#include <climits>
#include <map>
#include <optional>

namespace attn::runtime {

namespace {

/// One kernel (a skeleton and its configuration), compiled and (once a
/// call needs it) loaded.
struct ForwardKernel {
  KernelChoice Choice;
  LaunchShape Launch;
  GpuArch Arch = GpuArch::Sm80;
  codegen::KernelSource Source;
  CacheResult Cached;
  KernelModule Module;
  CUfunction Fwd = nullptr, Classify = nullptr, Compact = nullptr;
  /// fwd_sm90's persistent module: its walk over a packed call's tiles,
  /// where the definition's mask allows it (codegen::PackedPersistentEntry).
  CUfunction FwdPacked = nullptr;
  /// Its tiles' facts, launched before it (codegen::PackedTilesEntry).
  CUfunction FwdPackedTiles = nullptr;
  /// A decode skeleton's entries: the split kernel and, where the
  /// definition has a merge, the merge of the splits.
  CUfunction Decode = nullptr, DecodeMerge = nullptr;
  /// fwd_sm90's persistent kernel: a grid of at most one CTA per SM.
  bool Persistent = false;

  void load() {
    if (Module.loaded())
      return;
    Module.load(Cached, Arch);
    if (Choice.Skel->isDecode()) {
      Decode = Module.function("attnc_decode");
      if (Source.Entries.size() > 1)
        DecodeMerge = Module.function("attnc_decode_merge");
      Module.allowSharedBytes(Decode, Launch.SharedBytes,
                              "config " + Choice.configText());
      return;
    }
    Fwd = Module.function("attnc_fwd");
    Classify = Module.function("attnc_block_classify");
    Compact = Module.function("attnc_block_compact");
    Module.allowSharedBytes(Fwd, Launch.SharedBytes,
                            "config " + Choice.configText());
    if (llvm::is_contained(Source.Entries, codegen::PackedPersistentEntry)) {
      FwdPacked = Module.function(codegen::PackedPersistentEntry);
      FwdPackedTiles = Module.function(codegen::PackedTilesEntry);
      Module.allowSharedBytes(FwdPacked, Launch.SharedBytes,
                              "config " + Choice.configText());
    }
  }
};

class GeneratedBackend final : public AttentionBackend {
public:
  explicit GeneratedBackend(const BackendSetup &S)
      : Def(S.Def), Mask(analysis::analyzeMask(*S.Def.Graph)) {
    Initial = &kernelFor(S.Target, S.Initial);
  }

  const std::string &name() const override { return Name; }
  const codegen::KernelSource &source() const override {
    return Initial->Source;
  }
  const CacheResult &cacheResult() const override { return Initial->Cached; }

  std::string check(const BackendProblem &P) const override {
    if (P.Choice.Skel->isDecode()) {
      // Grid y carries KV heads x row blocks, z the batch.
      int BlockM = P.Choice.Skel->launchShape(P.Choice.Config, P.Target).BlockM;
      int64_t Rows = P.Shape.H / P.Shape.Hkv * P.Shape.Sq;
      int64_t Y = P.Shape.Hkv * ((Rows + BlockM - 1) / BlockM);
      if (Y > 65535)
        return fmt::format("decode_sm80: KV heads x row blocks is {}; at most "
                           "65535 are supported",
                           Y);
      if (P.Shape.B > 65535)
        return fmt::format(
            "decode_sm80: batch is {}; at most 65535 are supported",
            P.Shape.B);
      return "";
    }
    int BlockM = P.Choice.Skel->launchShape(P.Choice.Config, P.Target).BlockM;
    // Grid y (and z of the classification) carry batch·heads, grid x the
    // query blocks of the classification's y: CUDA limits both to 65535.
    if (P.Shape.B * P.Shape.H > 65535)
      return fmt::format("batch x heads is {}; at most 65535 are supported",
                         P.Shape.B * P.Shape.H);
    int64_t MBlocks = (P.Shape.Sq + BlockM - 1) / BlockM;
    if (MBlocks > 65535)
      return fmt::format(
          "seq_q {} gives {} query blocks of {}; at most 65535 are supported",
          P.Shape.Sq, MBlocks, BlockM);
    return "";
  }

  void forward(const BackendProblem &P, const ForwardTensors &T,
               const CallContext &Ctx) override;
  void makeBlockLists(const BackendProblem &P, const CallContext &Ctx,
                      BlockMaskData &Out) override;

private:
  /// The kernel of one choice, compiled on first use.
  ForwardKernel &kernelFor(const KernelTarget &T, const KernelChoice &C) {
    std::unique_ptr<ForwardKernel> &K = Kernels[C.key()];
    if (K)
      return *K;
    auto New = std::make_unique<ForwardKernel>();
    New->Choice = C;
    New->Arch = T.Arch;
    New->Launch = C.Skel->launchShape(C.Config, T);
    if (const auto *S90 = std::get_if<codegen::Sm90Config>(&C.Config))
      New->Persistent = S90->Persistent;
    New->Source = C.Skel->generate(Def, T, C.Config);
    New->Cached = KernelCache::global().getOrCompile(New->Source);
    K = std::move(New);
    return *K;
  }
  /// The kernel that runs \p P on fwd_sm90 chosen as \p K: its persistent
  /// form where persistentWanted says so, its plain form for a packed call
  /// given a persistent one, else \p K.
  ForwardKernel &sm90KernelFor(ForwardKernel &K, const BackendProblem &P,
                               const CallContext &Ctx);
  /// meanVisitedBlocks of \p P (a dense call) with the call's scalar
  /// inputs, kept per shape and scalar values (the scan stops past
  /// PersistentMaxMeanVisits, all the choice needs).
  std::optional<double> meanVisits(const BackendProblem &P,
                                   const CallContext &Ctx, int BlockM,
                                   int BlockN);
  std::map<std::vector<double>, std::optional<double>> MeanVisits;
  void launch(ForwardKernel &K, const BackendProblem &P,
              const ForwardTensors &T, const CallContext &Ctx,
              const attnc::Sm90Maps *Maps);
  void launchDecode(ForwardKernel &K, const BackendProblem &P,
                    const ForwardTensors &T, const CallContext &Ctx);
  /// The forward's block lists (FwdArgs::block_count, block_list).
  struct FwdLists {
    const int *Count = nullptr, *List = nullptr;
  };
  /// Launches \p K's classification and compaction for \p A's geometry
  /// (batch, heads, lengths, blocks) into regions of \p Mem.
  FwdLists classify(ForwardKernel &K, const attnc::FwdArgs &A, void *Slots,
                    CUstream Stream, DeviceArena &Mem);

  const std::string Name = "generated";
  const CompiledDefinition &Def;
  const analysis::MaskAnalysis Mask;
  std::map<std::string, std::unique_ptr<ForwardKernel>> Kernels;
  ForwardKernel *Initial = nullptr;
  /// The block classifications of the calls on one stream: per kept key
  /// (ListReuse), the bounds of an analysed mask, the block classes, then
  /// the per-row counts and lists of visited key blocks that
  /// attnc_block_compact writes. A mask that reads no tensor input is a
  /// function of the shapes, the tile and the scalar inputs it reads alone
  /// (MaskReuseKey), so a call that repeats all of them on the same
  /// stream, which orders it after the computing call, reuses the lists
  /// instead of launching the classification again; the backward keeps its
  /// lists by the same rule.
  using MaskState = KeptLists<FwdLists>;
  /// Per stream: calls on different streams may run at once.
  PerStream<MaskState> MaskStates{
      [] { return std::make_unique<MaskState>("block mask"); }};
  /// The persistent kernel's tile counters (FwdArgs::tile_counter), per
  /// stream: the launches of one stream run one after another, and each
  /// leaves them at 0 for the next.
  PerStream<ZeroedCounters> Counters{[] {
    return std::make_unique<ZeroedCounters>("persistent tile counters");
  }};
  /// The packed walk's tile facts (FwdArgs::packed_tiles), per stream:
  /// written by attnc_fwd_packed_tiles and read by the walk after it.
  PerStream<DeviceArena> PackedTiles =
      perStream<DeviceArena>(std::string("packed walk tiles"));
  /// The decode splits' partial o and states (DecodeArgs::part_o, part_st),
  /// per stream.
  PerStream<DeviceArena> DecodeBufs =
      perStream<DeviceArena>(std::string("decode splits"));
  /// The last-CTA merge's arrival counts (DecodeArgs::counters), per
  /// stream.
  PerStream<ZeroedCounters> DecodeCounts{[] {
    return std::make_unique<ZeroedCounters>("decode arrival counters");
  }};
  /// The definition's merge, which decides whether decode may split.
  const analysis::MergeKind Merge =
      analysis::analyzeMerge(*Def.Graph).Kind;
};

void GeneratedBackend::forward(const BackendProblem &P, const ForwardTensors &T,
                               const CallContext &Ctx) {
  ForwardKernel &K = kernelFor(P.Target, P.Choice);
  if (K.Choice.Skel->isDecode()) {
    launchDecode(K, P, T, Ctx);
    return;
  }
  if (!K.Choice.Skel->usesTensorMaps()) {
    launch(K, P, T, Ctx, nullptr);
    return;
  }
  attnc::Sm90Maps Maps;
  std::string Why =
      makeSm90Maps(P.Shape, T, K.Launch.BlockM, K.Launch.BlockN, Maps);
  if (Why.empty()) {
    launch(sm90KernelFor(K, P, Ctx), P, T, Ctx, &Maps);
    return;
  }
  // TMA cannot describe these strides: the next skeleton of the table can.
  launch(kernelFor(P.Target, fallbackChoice(P.Target, *K.Choice.Skel)), P, T,
         Ctx, nullptr);
}

ForwardKernel &GeneratedBackend::sm90KernelFor(ForwardKernel &K,
                                               const BackendProblem &P,
                                               const CallContext &Ctx) {
  const auto *C = std::get_if<codegen::Sm90Config>(&K.Choice.Config);
  if (!C)
    return K;
  KernelChoice Other = K.Choice;
  codegen::Sm90Config &O = std::get<codegen::Sm90Config>(Other.Config);
  // A packed call walks persistently where its mask's key-block ranges
  // come from box classes (the module's packed entry).
  const bool PackedWalk = analysis::packedRangeFromBoxes(Mask);
  if (C->Persistent) {
    if (!P.Shape.Packed || PackedWalk)
      return K;
    // The same blocks and stages without it.
    O.Persistent = false;
    return kernelFor(P.Target, Other);
  }
  if (K.Choice.Origin != ChoiceOrigin::Default || (P.Shape.Packed && !PackedWalk))
    return K;
  // A packed call's visits are counted below over a sequence of the
  // longest lengths (its Sq and Skv), which for the masks that keep a band
  // of key blocks (windows, chunks) is about every sequence's mean, and for
  // the others an overestimate.
  const int64_t NBlocks = (P.Shape.Skv + K.Launch.BlockN - 1) / K.Launch.BlockN;
  const int64_t Tiles = forwardTiles(P.Shape.B, P.Shape.H, P.Shape.Sq, P.Shape.TotalQ,
                                     P.Shape.Packed, K.Launch.BlockM);
  const int SMs = currentDevice().MultiProcessors;
  // The mean visits are looked for only where the tiles could choose it:
  // from the analysis, or, where it cannot count them (a mask that reads
  // tensors), from a given block mask's lists once their counts are back
  // on the host, under that source's bound (persistentHeuristic).
  std::optional<double> Mean;
  double MaxMean = PersistentMaxMeanVisits;
  if (Tiles >= int64_t(PersistentMinWaves) * SMs) {
    Mean = meanVisits(P, Ctx, K.Launch.BlockM, K.Launch.BlockN);
    if (!Mean && Ctx.Blocks) {
      Mean = Ctx.Blocks->FwdVisits.mean();
      MaxMean = PersistentMaxListMeanVisits;
    }
  }
  if (!persistentWanted(Tiles, Mean, NBlocks, SMs, MaxMean))
    return K;
  std::optional<codegen::Sm90Config> Persist =
      C->persistentFor(P.Target.HeadDim, P.Target.HeadDimV);
  if (!Persist)
    return K;
  O = *Persist;
  return kernelFor(P.Target, Other);
}

std::optional<double> GeneratedBackend::meanVisits(const BackendProblem &P,
                                                  const CallContext &Ctx,
                                                  int BlockM, int BlockN) {
  const CallShape &C = P.Shape;
  std::map<std::string, double> Scalars;
  for (const std::string &Name : Mask.ScalarInputs) {
    auto It = Ctx.Inputs.find(Name);
    if (It == Ctx.Inputs.end())
      return std::nullopt;
    if (const int32_t *I = std::get_if<int32_t>(&It->second))
      Scalars[Name] = *I;
    else if (const float *F = std::get_if<float>(&It->second))
      Scalars[Name] = *F;
    else
      return std::nullopt;
  }
  std::vector<double> Key = {double(C.Sq), double(C.Skv), double(BlockM),
                             double(BlockN), double(P.Target.HeadDim)};
  for (const auto &[Name, X] : Scalars)
    Key.push_back(X);
  if (auto It = MeanVisits.find(Key); It != MeanVisits.end())
    return It->second;
  return MeanVisits[Key] =
             meanVisitedBlocks(Mask, C.Sq, C.Skv, BlockM, BlockN,
                               P.Target.HeadDim, Scalars, PersistentMaxMeanVisits);
}

void GeneratedBackend::launch(ForwardKernel &K, const BackendProblem &P,
                              const ForwardTensors &T, const CallContext &Ctx,
                              const attnc::Sm90Maps *Maps) {
  ForwardLaunch L = makeForwardLaunch(*Def.Graph, P.Shape, T, Ctx.Inputs,
                                      K.Launch.BlockM, K.Launch.BlockN);
  K.load();
  CudaDriver &D = CudaDriver::get();
  attnc::FwdArgs &A = L.Args;
  // A packed call classifies nothing: its kernels mask per element over a
  // range of blocks of each sequence (varlen.cuh). A call given a block
  // mask reads its lists.
  if (Ctx.Blocks) {
    const BlockMaskData &B = *Ctx.Blocks;
    if (B.FwdBlockM != K.Launch.BlockM || B.FwdBlockN != K.Launch.BlockN)
      throw UserError(fmt::format(
          "block mask: made for forward blocks of {}x{}; this call runs {} "
          "with blocks of {}x{} (a tune file's choice for its shape, or q/k/v "
          "strides that TMA cannot describe); make the block mask for "
          "tensors like the call's",
          B.FwdBlockM, B.FwdBlockN, K.Choice.str(), K.Launch.BlockM,
          K.Launch.BlockN));
    A.block_count = B.FwdCount;
    A.block_list = B.FwdList;
    A.mask_grouping = B.Grouping;
  } else if (Def.Graph->decls().HasMask && !P.Shape.Packed) {
    std::optional<MaskReuseKey> Key;
    if (mayReuse(Mask))
      Key = maskReuseKey(*Def.Graph, Mask, A.batch, A.heads, A.seq_q, A.seq_kv,
                         K.Launch.BlockM, K.Launch.BlockN, Ctx.Stream,
                         L.InputSlots);
    const FwdLists &Lists = MaskStates.get(Ctx.Stream).get(
        Key, Ctx.Stream, [&](DeviceArena &Mem) {
          return classify(K, A, L.InputSlots.data(), Ctx.Stream, Mem);
        });
    A.block_count = Lists.Count;
    A.block_list = Lists.List;
  }
  void *Params[] = {&A, L.InputSlots.data(),
                    const_cast<attnc::Sm90Maps *>(Maps)};
  // A packed call: a CTA per query block a sequence has, a row per head
  // (block_range.cuh's packed_block_of); a dense one: per query block and
  // batch·head.
  const CallShape &C = P.Shape;
  unsigned GridX =
      C.Packed ? unsigned(attnc::packed_block_bound(C.TotalQ, C.B, K.Launch.BlockM, C.Sq))
               : unsigned(A.m_blocks);
  unsigned GridY = unsigned(C.Packed ? A.heads : A.batch * A.heads);
  CUfunction Entry = K.Fwd;
  if (K.Persistent) {
    // One CTA per SM (one fits an SM), each walking tiles of the grid's
    // stride or taken from the counters (fwd_sm90_persist.cuh); a packed
    // call's tiles are its plain grid's.
    if (C.Packed && !K.FwdPacked)
      throw InternalError("fwd_sm90: a packed call on a persistent module without "
                          "its packed walk");
    if (C.Packed)
      Entry = K.FwdPacked;
    const int64_t Tiles = int64_t(GridX) * GridY;
    if (Tiles > INT32_MAX)
      throw InternalError("fwd_sm90: the persistent kernel's tiles overflow int");
    if (C.Packed) {
      // The walk's tiles' facts first (FwdSm90Persist::find_packed_tiles),
      // a warp a tile in CTAs of 128 threads (the entry's launch bounds),
      // on the same stream. The kernels index them by int in 16-byte units.
      constexpr int64_t TileVectors = attnc::kPackedTileInts / 4, TilesPerCta = 128 / 32;
      if (Tiles > INT32_MAX / TileVectors)
        throw InternalError("fwd_sm90: the packed walk's tile facts overflow int");
      ArenaLayout Layout;
      const unsigned Facts = Layout.add(size_t(Tiles) * attnc::kPackedTileInts * 4, 16);
      A.packed_tiles = Layout.at<int>(PackedTiles.get(Ctx.Stream).carve(Layout), Facts);
      void *TileParams[] = {&A, L.InputSlots.data()};
      D.check(D.cuLaunchKernel(K.FwdPackedTiles, unsigned((Tiles + TilesPerCta - 1) / TilesPerCta),
                               1, 1, 128, 1, 1, 0, Ctx.Stream, TileParams, nullptr),
              "launch attnc_fwd_packed_tiles");
    }
    GridX = unsigned(std::min<int64_t>(Tiles, currentDevice().MultiProcessors));
    GridY = 1;
    countPersistentForwardLaunch();
  }
  // A masked variant's persistent kernel, and any packed walk, take their
  // tiles from counters.
  if (K.Persistent && (Def.Graph->decls().HasMask || C.Packed))
    A.tile_counter =
        reinterpret_cast<int *>(Counters.get(Ctx.Stream).get(2, Ctx.Stream));
  D.check(D.cuLaunchKernel(Entry, GridX, GridY, 1, unsigned(K.Launch.Threads), 1, 1,
                           unsigned(K.Launch.SharedBytes), Ctx.Stream,
                           Params, nullptr),
          "launch attnc_fwd");
}

GeneratedBackend::FwdLists
GeneratedBackend::classify(ForwardKernel &K, const attnc::FwdArgs &A,
                           void *Slots, CUstream Stream, DeviceArena &Mem) {
  CudaDriver &D = CudaDriver::get();
  const int64_t Groups = maskGroups(Mask, A.batch, A.heads);
  size_t Cells = size_t(Groups) * A.m_blocks * A.n_blocks;
  size_t Rows = size_t(Groups) * A.m_blocks;
  ArenaLayout Layout;
  unsigned Bounds = Layout.add(
      4 * maskBoundsFloats(Mask, Groups, A.m_blocks, A.n_blocks), 16);
  unsigned Classes = Layout.add(Cells, 1);
  unsigned Counts = Layout.add(4 * Rows, 16);
  unsigned Lists = Layout.add(4 * Cells, 4);
  Mem.ensure(Layout.bytes());
  attnc::MaskArgs M{};
  M.classes = Layout.at<unsigned char>(Mem.base(), Classes);
  M.block_count = Layout.at<int>(Mem.base(), Counts);
  M.block_list = Layout.at<int>(Mem.base(), Lists);
  M.bounds = Layout.at<float>(Mem.base(), Bounds);
  M.batch = A.batch;
  M.heads = A.heads;
  M.seq_q = A.seq_q;
  M.seq_kv = A.seq_kv;
  M.m_blocks = A.m_blocks;
  M.n_blocks = A.n_blocks;
  M.mask_grouping = int(Mask.Grouping);
  // An analysed mask's lists come from the classification's last phase.
  if (launchClassify(D, K.Classify, Mask, M, Groups, Slots, Stream,
                     "launch attnc_block_classify", /*Lists=*/true))
    return {M.block_count, M.block_list};
  void *CompactParams[] = {&M};
  D.check(D.cuLaunchKernel(K.Compact, unsigned((Rows + 127) / 128), 1, 1, 128,
                           1, 1, 0, Stream, CompactParams, nullptr),
          "launch attnc_block_compact");
  return {M.block_count, M.block_list};
}

void GeneratedBackend::makeBlockLists(const BackendProblem &P,
                                      const CallContext &Ctx,
                                      BlockMaskData &Out) {
  ForwardKernel &K = kernelFor(P.Target, P.Choice);
  if (K.Choice.Skel->isDecode())
    throw InternalError("block mask: lists for a decode skeleton");
  K.load();
  std::vector<uint64_t> Slots = inputSlots(*Def.Graph, P.Shape, Ctx.Inputs);
  attnc::FwdArgs A{};
  A.batch = int(P.Shape.B);
  A.heads = int(P.Shape.H);
  A.seq_q = int(P.Shape.Sq);
  A.seq_kv = int(P.Shape.Skv);
  A.m_blocks = int((P.Shape.Sq + K.Launch.BlockM - 1) / K.Launch.BlockM);
  A.n_blocks = int((P.Shape.Skv + K.Launch.BlockN - 1) / K.Launch.BlockN);
  FwdLists L = classify(K, A, Slots.data(), Ctx.Stream, Out.FwdMem);
  Out.FwdBlockM = K.Launch.BlockM;
  Out.FwdBlockN = K.Launch.BlockN;
  Out.FwdCount = L.Count;
  Out.FwdList = L.List;
  // The lists' mean serves the persistent choice where the analysis cannot
  // count the visits (sm90KernelFor); the copy costs the stream a few
  // microseconds, so other masks make none.
  if (!analysisCountsVisits(Mask))
    Out.FwdVisits.copyBack(L.Count, maskGroups(Mask, A.batch, A.heads) * A.m_blocks,
                           Ctx.Stream);
}

void GeneratedBackend::launchDecode(ForwardKernel &K, const BackendProblem &P,
                                    const ForwardTensors &T,
                                    const CallContext &Ctx) {
  const CallShape &C = P.Shape;
  K.load();
  CudaDriver &D = CudaDriver::get();
  attnc::DecodeArgs A{};
  fillCallArgs(A, C, T);
  if (C.Packed) {
    // Sq and Skv are the max lengths: the rows, row blocks and splits of
    // the bound; each CTA reads its sequence's own from cu_seqlens.
    A.cu_q = C.CuQ;
    A.cu_kv = C.CuKv;
    A.total_q = int(C.TotalQ);
    A.total_kv = int(C.TotalKv);
  }
  A.group = int(C.H / C.Hkv);
  A.rows = A.group * A.seq_q;
  A.row_blocks = (A.rows + K.Launch.BlockM - 1) / K.Launch.BlockM;
  DecodeSplit S = decodeSplit(int64_t(A.batch) * A.heads_kv * A.row_blocks,
                              C.Skv, K.Launch.BlockN,
                              currentDevice().MultiProcessors, Merge);
  A.splits = S.Splits;
  A.blocks_per_split = S.BlocksPerSplit;
  if (A.splits > 1) {
    size_t Rows = size_t(A.splits) * C.B * C.H * C.Sq;
    ArenaLayout Layout;
    unsigned O = Layout.add(4 * Rows * size_t(P.Target.HeadDimV), 16);
    unsigned St = Layout.add(4 * Rows * attnc::kDecodeStateFloats, 16);
    CUdeviceptr Base = DecodeBufs.get(Ctx.Stream).carve(Layout);
    A.part_o = Layout.at<float>(Base, O);
    A.part_st = Layout.at<float>(Base, St);
    if (decodeMergeInSplits())
      A.counters = DecodeCounts.get(Ctx.Stream)
                       .get(size_t(A.batch) * A.heads_kv * A.row_blocks, Ctx.Stream);
  }
  std::vector<uint64_t> Slots = inputSlots(*Def.Graph, C, Ctx.Inputs);
  void *Params[] = {&A, Slots.data()};
  const bool Dependent =
      A.splits > 1 && !A.counters && decodeMergeDependent(P.Target.Arch);
  D.check(D.cuLaunchKernel(K.Decode, unsigned(A.splits),
                           unsigned(A.heads_kv * A.row_blocks),
                           unsigned(A.batch), unsigned(K.Launch.Threads), 1, 1,
                           unsigned(K.Launch.SharedBytes), Ctx.Stream, Params,
                           nullptr),
          "launch attnc_decode");
  if (A.splits == 1 || A.counters)
    return;
  if (!K.DecodeMerge)
    throw InternalError("decode split without a merge kernel");
  launchDecodeMerge(K.DecodeMerge, Dependent, unsigned(C.B * C.H * C.Sq),
                    P.Target.HeadDimV, Ctx.Stream, Params);
}

} // namespace

std::unique_ptr<AttentionBackend> makeGeneratedBackend(const BackendSetup &S) {
  return std::make_unique<GeneratedBackend>(S);
}

} // namespace attn::runtime
