// BackwardRunner: compile the bwd_sm90 or bwd_sm80 kernels, lay out the workspaces, and
// launch block lists, doosum, dK/dV, dQ (or, fused, the dQ semaphores'
// reset before dK/dV and the sums' conversion after) and the input-gradient
// reduction.
#include "BackwardRunner.h"
#include "ForwardLaunch.h"
#include "MaskClassify.h"
#include "TmaMaps.h"

#include "attn/codegen/InputLayout.h"
#include "attn/Error.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/KernelCache.h"

// The kernel-argument structs, shared with the device code so that the
// layouts agree by construction.
#include "../kernels/attention_args.cuh"
// The packed grids' size (packed_block_bound), shared with the kernels.
#include "../kernels/block_range.cuh"

#include <fmt/format.h>

#include <cstring>
#include <numeric>

namespace attn::runtime {

namespace {

int ceilDiv(int64_t A, int64_t B) { return int((A + B - 1) / B); }

} // namespace

namespace {

BackwardPlan planOf(const KernelChoice &C, const KernelTarget &T) {
  BackwardPlan P;
  if (const auto *B = std::get_if<codegen::BwdConfig>(&C.Config)) {
    P = {B->str(),
         B->KvBlockM,
         B->KvBlockN,
         32 * B->KvWarps,
         B->dkdvSharedBytes(T.HeadDim, T.HeadDimV, T.NumFinals,
                            T.BackwardUsesDoosum),
         B->QBlockM,
         B->QBlockN,
         32 * B->QWarps,
         B->FusedDq ? 0 : B->dqSharedBytes(T.HeadDim, T.HeadDimV),
         B->FusedDq};
    return P;
  }
  if (const auto *B = std::get_if<codegen::BwdSm90Config>(&C.Config)) {
    P = {B->str(),
         B->KvBlockM,
         B->KvBlockN,
         B->dkdvThreads(),
         B->dkdvSharedBytes(T.HeadDim, T.HeadDimV, T.NumFinals,
                            T.BackwardUsesDoosum),
         B->QBlockM,
         B->QBlockN,
         32 * B->QWarps,
         B->dqSharedBytes(T.HeadDim, T.HeadDimV),
         B->FusedDq,
         B->AtomicDq,
         B->WarpSpecialized,
         B->Varlen};
    return P;
  }
  throw InternalError("BackwardRunner: skeleton " + C.Skel->name().str() +
                      " is not one this runner launches");
}

} // namespace

std::optional<KernelChoice> packedBackwardChoice(const KernelChoice &Choice) {
  if (const auto *S = std::get_if<codegen::BwdSm90Config>(&Choice.Config)) {
    if (S->Varlen)
      return std::nullopt;
    // The packed kernel is the warp-specialised fused-dQ step's
    // (bwd_sm90_varlen.cuh); its dQ order needs no block lists. The lean
    // step with its turn warp (the dense default at d64 and d128) keeps its
    // level: the packed walk feeds the turn warp as it feeds the producer.
    // The turns taken ahead (.bulk2., .red2., .red.: the dense default at
    // d128) keep their form: the packed walk's stages tell its turn warps
    // the steps. The bulk dQ's one turn warp and the column split's turn
    // warp have no packed form: the first runs the lean step's turn warp,
    // the column split (the dense default at head dims 192 and 256, which
    // bwd_sm80 does not run) runs packed without its turn warp.
    if (S->WarpSpecialized && S->FusedDq && !S->PingPong && !S->DqWriter) {
      codegen::BwdSm90Config P = *S;
      P.Varlen = true;
      if (P.BulkForm == 0)
        P.BulkDq = false;
      if (P.SplitCols) {
        P.Lean = 0;
        P.SplitRoles = false; // (the roles form has no packed walk either)
      }
      KernelChoice Packed = Choice;
      Packed.Config = P;
      return Packed;
    }
  }
  const auto *B = std::get_if<codegen::BwdConfig>(&Choice.Config);
  if (B && !B->FusedDq)
    return std::nullopt;
  // The packed kernels exist in bwd_sm80's two-kernel mode only; keep the
  // dK/dV tiles where the choice is bwd_sm80's fused mode.
  codegen::BwdConfig Two;
  if (B) {
    Two = *B;
    Two.QBlockM = codegen::BwdConfig().QBlockM;
    Two.QBlockN = codegen::BwdConfig().QBlockN;
    Two.QWarps = codegen::BwdConfig().QWarps;
  }
  Two.FusedDq = false;
  KernelChoice TwoChoice = Choice;
  TwoChoice.Skel = &skeletonNamed("bwd_sm80", "BackwardRunner");
  TwoChoice.Config = Two;
  return TwoChoice;
}

std::optional<KernelChoice> longWalkBackwardChoice(const KernelChoice &Choice) {
  if (Choice.Origin != ChoiceOrigin::Default)
    return std::nullopt;
  // Exactly d64's default: no other default has 128-row steps, and the
  // slots leave no room for a third stage.
  const auto *S = std::get_if<codegen::BwdSm90Config>(&Choice.Config);
  if (!S || !(*S == codegen::BwdSm90Config::defaultFor(64, 64)))
    return std::nullopt;
  codegen::BwdSm90Config Ahead = *S;
  Ahead.BulkDq = true;
  Ahead.BulkForm = 2; // .red2.
  KernelChoice Long = Choice;
  Long.Config = Ahead;
  return Long;
}

KernelChoice denseBackwardChoice(const KernelChoice &Choice, bool Masked, int64_t Sq) {
  if (wantsLongWalkBackward(Masked, Sq))
    if (std::optional<KernelChoice> Long = longWalkBackwardChoice(Choice))
      return *Long;
  return Choice;
}

KernelChoice packedCallBackwardChoice(const KernelChoice &Choice, bool Masked, int64_t MaxSq) {
  KernelChoice Dense = denseBackwardChoice(Choice, Masked, MaxSq);
  if (std::optional<KernelChoice> Packed = packedBackwardChoice(Dense))
    return *Packed;
  return Dense;
}

BackwardRunner::BackwardRunner(const CompiledDefinition &D,
                               const KernelTarget &T, const KernelChoice &C)
    : Def(D), Mask(analysis::analyzeMask(*D.Graph)), Target(T),
      Spec(T.kernelSpec()), Choice(C), Plan(planOf(C, T)) {
  Source = C.Skel->generate(Def, T, C.Config);
  Cached = KernelCache::global().getOrCompile(Source);
}

BackwardRunner::~BackwardRunner() = default;

void BackwardRunner::ensureLoaded() {
  if (Module.loaded())
    return;
  Module.load(Cached, Spec.Arch);
  Pre = Module.function("attnc_bwd_preprocess");
  DkDv = Module.function("attnc_bwd_dkdv");
  if (Plan.FusedDq) {
    DqInit = Module.function("attnc_bwd_dq_init");
    DqConvert = Module.function("attnc_bwd_dq_convert");
  } else {
    Dq = Module.function("attnc_bwd_dq");
  }
  Grads = Module.function("attnc_bwd_input_grads");
  if (!Plan.Varlen) { // a packed form has no block lists
    Classify = Module.function("attnc_bwd_block_classify");
    Rows = Module.function("attnc_bwd_block_rows");
    Cols = Module.function("attnc_bwd_block_cols");
  }
  Module.allowSharedBytes(DkDv, Plan.KvShared,
                          "backward config " + Plan.Name + " (dK/dV kernel)");
  if (!Plan.FusedDq)
    Module.allowSharedBytes(Dq, Plan.QShared,
                            "backward config " + Plan.Name + " (dQ kernel)");
}

void BackwardRunner::run(const BackwardTensors &T,
                         const BackwardCallShape &Shape, const InputMap &Inputs,
                         const InputGradMap &GradOut, CUstream Stream,
                         const BlockMaskData *Blocks) {
  const ir::Graph &G = *Def.Graph;
  const CallShape &C = Shape.Fwd;
  const BackwardPlan &K = Plan;
  // The long-walk twin by the call's queries (a packed call's: its longest
  // sequence's, max_seqlen_q); the twin runs a packed call in its packed
  // form, as below (packedCallBackwardChoice says what runs).
  if (!K.Varlen && wantsLongWalkBackward(G.decls().HasMask, C.Sq)) {
    if (std::optional<KernelChoice> Long = longWalkBackwardChoice(Choice)) {
      if (!LongWalks)
        LongWalks = std::make_unique<BackwardRunner>(Def, Target, *Long);
      LongWalks->run(T, Shape, Inputs, GradOut, Stream, Blocks);
      return;
    }
  }
  if (C.Packed) {
    if (std::optional<KernelChoice> Two = packedBackwardChoice(Choice)) {
      if (!Unfused)
        Unfused = std::make_unique<BackwardRunner>(Def, Target, *Two);
      Unfused->run(T, Shape, Inputs, GradOut, Stream, Blocks);
      return;
    }
  } else if (K.Varlen) {
    throw UserError("backward config " + K.Name +
                    ": a .varlen configuration runs packed variable-length calls only");
  }
  // A packed call classifies nothing: its kernels mask per element over a
  // range of blocks of each sequence (varlen.cuh). A call given a block
  // mask classifies nothing either: it reads the mask's lists.
  const bool Masked = G.decls().HasMask && !C.Packed;
  if (Blocks && !(Blocks->Bwd == tiles()))
    throw UserError("block mask: made for the backward's blocks " +
                    Blocks->Bwd.str() + "; this backward runs " +
                    tiles().str() + " (" + K.Name + ")");
  const bool Doosum = Def.Info.BackwardUsesDoosum;
  // CUDA limits grid y and z to 65535: batch·heads (dQ, doosum) and
  // batch·kv heads (dK/dV).
  if (C.B * C.H > 65535)
    throw InvalidArgument(fmt::format(
        "q: batch x heads is {}; at most 65535 are supported", C.B * C.H));
  if (Masked && !Blocks)
    checkClassifyGrid(C);

  std::vector<codegen::GradInput> GradInputs = codegen::gradInputs(G);
  std::vector<uint64_t> Slots = inputSlots(G, C, Inputs);

  attnc::BwdArgs A{};
  A.q = T.Q.Data;
  A.k = T.K.Data;
  A.v = T.V.Data;
  A.o = T.Out ? T.Out->Data : nullptr;
  A.dout = T.DOut.Data;
  A.dq = T.DQ.Data;
  A.dk = T.DK.Data;
  A.dv = T.DV.Data;
  A.finals = T.Finals ? static_cast<const float *>(T.Finals->Data) : nullptr;
  copyStrides({{&A.q_sb, C.Q},
               {&A.k_sb, C.K},
               {&A.v_sb, C.V},
               {&A.o_sb, C.O},
               {&A.do_sb, Shape.DOut},
               {&A.dq_sb, Shape.DQ},
               {&A.dk_sb, Shape.DK},
               {&A.dv_sb, Shape.DV}});
  A.batch = int(C.B);
  A.heads = int(C.H);
  A.heads_kv = int(C.Hkv);
  A.seq_q = int(C.Sq);
  A.seq_kv = int(C.Skv);
  A.mask_grouping = int(Mask.Grouping);
  if (C.Packed) {
    A.cu_seqlens_q = C.CuQ;
    A.cu_seqlens_kv = C.CuKv;
    A.total_q = int(C.TotalQ);
  }
  A.q_m_blocks = ceilDiv(C.Sq, K.QBlockM);
  A.q_n_blocks = ceilDiv(C.Skv, K.QBlockN);
  // The packed form's dQ slots a head: sequence b's query blocks from
  // cu_seqlens_q[b] / KvBlockM + b (bwd_sm90_varlen.cuh), so no two
  // sequences share one.
  A.kv_m_blocks = K.Varlen ? int(C.TotalQ / K.KvBlockM + C.B) : ceilDiv(C.Sq, K.KvBlockM);
  A.kv_n_blocks = ceilDiv(C.Skv, K.KvBlockN);
  // The workspace's regions, each 256-byte aligned; an absent one is empty
  // and its pointer null.
  ArenaLayout W;
  // doosum is [batch·heads][seq_q], or [heads][total_q] in a packed call.
  const size_t DoosumRows = C.Packed ? size_t(C.H * C.TotalQ) : size_t(C.B * C.H * C.Sq);
  const unsigned DoosumAt = W.add(Doosum ? DoosumRows * 4 : 0);
  const unsigned PartialAt =
      W.add(GradInputs.size() * A.kv_n_blocks * size_t(C.B * C.H) * 4);
  // Fused dQ: fp32 partial sums per head over whole query blocks, one
  // semaphore per (batch·head, query block) and the column entries' ranks.
  // (The packed form: per head, its slots.)
  const bool Fused = K.FusedDq;
  const size_t SemCount = size_t(K.Varlen ? C.H : C.B * C.H) * A.kv_m_blocks;
  const size_t AccumFloats = SemCount * K.KvBlockM * size_t(Spec.HeadDim);
  const unsigned AccumAt = W.add(Fused ? AccumFloats * 4 : 0);
  const unsigned SemAt = W.add(Fused ? SemCount * 4 : 0);

  ensureLoaded();
  // The warp-specialised kernel's tensor maps, before anything is launched.
  // Validation already asks for what TMA needs (16-byte aligned pointers,
  // strides in 16-byte units), so a refusal is unexpected.
  attnc::Sm90BwdMaps Maps;
  if (K.WarpSpecialized)
    if (std::string Why = makeSm90BwdMaps(Shape, T, K.KvBlockM, Maps); !Why.empty())
      throw NotSupportedYet("backward config " + K.Name + ": " + Why +
                            "; name a bwd90. configuration (no TMA) for this layout");
  CudaDriver &D = CudaDriver::get();
  CUdeviceptr Base = Work.get(Stream).carve(W);
  A.doosum = W.at<float>(Base, DoosumAt);
  A.grad_partial = W.at<float>(Base, PartialAt);
  if (Fused) {
    A.dq_accum = W.at<float>(Base, AccumAt);
    A.dq_sem = W.at<int>(Base, SemAt);
    // Rotated walks make a CTA wait for one dispatched after it: safe only
    // where a whole grid row can be resident (at least a CTA an SM). They
    // also spread a head's live Q/dO tiles and sums over all its query
    // blocks at once, which cost 4% at S = 16384 on an H200 (128 key
    // blocks); rotation is used where at least two rows fit. The kernels
    // compare a row's key blocks with this bound, a packed call's per
    // sequence (bwd_sm90_varlen.cuh; 32 sequences in [64, 8192] took
    // 419-421 TFLOPS unrotated, 435-437 so and 433-435 with every
    // sequence rotated, H200 2026-11-30).
    A.dq_rotate = Masked ? 0 : currentDevice().MultiProcessors / 2;
  }
  for (size_t I = 0; I < GradInputs.size(); ++I) {
    A.grad_out[I] = static_cast<float *>(GradOut.at(GradInputs[I].Name).Data);
    A.grad_shape[I] = GradInputs[I].Shape == ir::InputShape::PerHead ? 1 : 0;
  }

  if (Blocks) {
    A.mask_grouping = Blocks->Grouping;
    A.q_count = Blocks->QCount;
    A.q_list = Blocks->QList;
    A.kv_count = Blocks->KvCount;
    A.kv_list = Blocks->KvList;
    if (Fused)
      A.kv_rank = Blocks->KvRank;
  } else if (Masked) {
    // The runner's tiles are fixed: the key's tile is the dK/dV kernel's.
    std::optional<MaskReuseKey> Key;
    if (mayReuse(Mask))
      Key = maskReuseKey(G, Mask, C.B, C.H, C.Sq, C.Skv, K.KvBlockM, K.KvBlockN,
                         Stream, Slots);
    const BwdLists &L =
        MaskWork.get(Stream).get(Key, Stream, [&](DeviceArena &Mem) {
          BwdLists Built = listBlocks(C, Slots.data(), Stream, Mem);
          countBackwardListBuild();
          return Built;
        });
    A.q_count = L.QCount;
    A.q_list = L.QList;
    A.kv_count = L.KvCount;
    A.kv_list = L.KvList;
    if (Fused)
      A.kv_rank = L.KvRank;
  }

  if (Doosum) {
    void *Params[] = {&A};
    // The packed form's rows are the packed tokens (bwd_doosum_packed).
    D.check(D.cuLaunchKernel(Pre, K.Varlen ? ceilDiv(C.TotalQ, 8) : ceilDiv(C.Sq, 8),
                             unsigned(K.Varlen ? C.H : C.B * C.H), 1, 256, 1, 1, 0, Stream,
                             Params, nullptr),
            "launch attnc_bwd_preprocess");
  }
  if (K.AtomicDq) {
    // Every contribution is an atomic add: the sums start at zero, and
    // the semaphores are not used.
    D.check(D.cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(A.dq_accum), 0, AccumFloats,
                               Stream),
            "cuMemsetD32Async (dq_accum)");
  } else if (Fused) {
    // The semaphores start at 0 on every call. dq_accum needs no zeroing:
    // the first contributor stores, the later ones add.
    void *InitParams[] = {&A};
    D.check(D.cuLaunchKernel(DqInit, ceilDiv(int64_t(SemCount), 256), 1, 1, 256,
                             1, 1, 0, Stream, InitParams, nullptr),
            "launch attnc_bwd_dq_init");
  }
  void *Params[] = {&A, Slots.data(), &Maps};
  // The packed form: a CTA per key block a sequence has, a row per kv head
  // (block_range.cuh's packed_block_of); elsewhere per block of the
  // longest sequence and (sequence, kv head).
  const unsigned DkDvX =
      K.Varlen ? unsigned(attnc::packed_block_bound(C.TotalKv, C.B, K.KvBlockN, C.Skv))
               : unsigned(A.kv_n_blocks);
  D.check(D.cuLaunchKernel(DkDv, DkDvX, unsigned(K.Varlen ? C.Hkv : C.B * C.Hkv), 1,
                           K.KvThreads, 1, 1, K.KvShared, Stream, Params, nullptr),
          "launch attnc_bwd_dkdv");
  if (Fused) {
    // dq from the sums; rows that no key block visits become zeros.
    void *ConvertParams[] = {&A};
    // Dense: whole rows a CTA; packed: a CTA per dQ slot a sequence has.
    const int Rows = 256 / (Spec.HeadDim / 4);
    const unsigned ConvertX =
        K.Varlen ? unsigned(attnc::packed_block_bound(C.TotalQ, C.B, K.KvBlockM, C.Sq))
                 : unsigned(ceilDiv(C.Sq, Rows));
    D.check(D.cuLaunchKernel(DqConvert, ConvertX, unsigned(K.Varlen ? C.H : C.B * C.H),
                             1, 256, 1, 1, 0, Stream, ConvertParams, nullptr),
            "launch attnc_bwd_dq_convert");
  } else {
    D.check(D.cuLaunchKernel(Dq, A.q_m_blocks, unsigned(C.B * C.H), 1,
                             K.QThreads, 1, 1, K.QShared, Stream, Params,
                             nullptr),
            "launch attnc_bwd_dq");
  }
  if (!GradInputs.empty()) {
    void *GradParams[] = {&A};
    D.check(D.cuLaunchKernel(Grads, unsigned(GradInputs.size()), 1, 1, 256, 1,
                             1, 0, Stream, GradParams, nullptr),
            "launch attnc_bwd_input_grads");
  }
}

BwdTiles BackwardRunner::tiles() const {
  return {Plan.QBlockM, Plan.QBlockN, Plan.KvBlockM, Plan.KvBlockN,
          Plan.FusedDq};
}

void BackwardRunner::checkClassifyGrid(const CallShape &C) const {
  // The classification's grid y carries its fine row blocks (65535 at most).
  const int FineM = std::gcd(Plan.KvBlockM, Plan.QBlockM);
  const int FineMBlocks = ceilDiv(C.Sq, FineM);
  if (FineMBlocks > 65535)
    throw InvalidArgument(fmt::format(
        "q: seq {} gives {} blocks of {} rows for the backward's mask "
        "classification; at most 65535 are supported",
        C.Sq, FineMBlocks, FineM));
}

BwdLists BackwardRunner::listBlocks(const CallShape &C, void *Slots,
                                    CUstream Stream, DeviceArena &Mem) {
  const BackwardPlan &K = Plan;
  const bool Fused = K.FusedDq;
  checkClassifyGrid(C);
  const int FineM = std::gcd(K.KvBlockM, K.QBlockM);
  const int FineN = std::gcd(K.KvBlockN, K.QBlockN);
  const int FineMBlocks = ceilDiv(C.Sq, FineM),
            FineNBlocks = ceilDiv(C.Skv, FineN);
  const int QM = ceilDiv(C.Sq, K.QBlockM), QN = ceilDiv(C.Skv, K.QBlockN);
  const int KvM = ceilDiv(C.Sq, K.KvBlockM), KvN = ceilDiv(C.Skv, K.KvBlockN);
  const size_t Groups = size_t(maskGroups(Mask, C.B, C.H));
  ArenaLayout W;
  const unsigned RankAt = W.add(Fused ? Groups * KvN * size_t(KvM) * 4 : 0);
  const unsigned BoundsAt = W.add(
      4 * maskBoundsFloats(Mask, int64_t(Groups), FineMBlocks, FineNBlocks));
  const unsigned ClassesAt = W.add(Groups * FineMBlocks * FineNBlocks);
  const unsigned QCountAt = W.add(Groups * QM * 4);
  const unsigned QListAt = W.add(Groups * QM * size_t(QN) * 4);
  const unsigned KvCountAt = W.add(Groups * KvN * 4);
  const unsigned KvListAt = W.add(Groups * KvN * size_t(KvM) * 4);

  ensureLoaded();
  CudaDriver &D = CudaDriver::get();
  CUdeviceptr Base = Mem.carve(W);
  attnc::MaskArgs M{};
  M.classes = W.at<unsigned char>(Base, ClassesAt);
  M.batch = int(C.B);
  M.heads = int(C.H);
  M.seq_q = int(C.Sq);
  M.seq_kv = int(C.Skv);
  M.m_blocks = FineMBlocks;
  M.n_blocks = FineNBlocks;
  M.mask_grouping = int(Mask.Grouping);
  M.bounds = W.at<float>(Base, BoundsAt);
  launchClassify(D, Classify, Mask, M, int64_t(Groups), Slots, Stream,
                 "launch attnc_bwd_block_classify");
  attnc::BwdListArgs L{};
  L.classes = M.classes;
  L.groups = int(Groups);
  L.fine_m = FineMBlocks;
  L.fine_n = FineNBlocks;
  // Rows: the dQ kernel's blocks.
  L.ratio_m = K.QBlockM / FineM;
  L.ratio_n = K.QBlockN / FineN;
  L.m_blocks = QM;
  L.n_blocks = QN;
  L.count = W.at<int>(Base, QCountAt);
  L.list = W.at<int>(Base, QListAt);
  // A warp a line (compact_coarse_blocks), the CTAs spread over the SMs.
  const int SMs = currentDevice().MultiProcessors;
  const int RowWarps = listWarpsPerCta(int64_t(Groups) * QM, SMs);
  void *RowParams[] = {&L};
  D.check(D.cuLaunchKernel(Rows, ceilDiv(Groups * QM, RowWarps), 1, 1, 32 * RowWarps,
                           1, 1, 0, Stream, RowParams, nullptr),
          "launch attnc_bwd_block_rows");
  // Columns: the dK/dV kernel's blocks.
  attnc::BwdListArgs LC = L;
  LC.ratio_m = K.KvBlockM / FineM;
  LC.ratio_n = K.KvBlockN / FineN;
  LC.m_blocks = KvM;
  LC.n_blocks = KvN;
  LC.count = W.at<int>(Base, KvCountAt);
  LC.list = W.at<int>(Base, KvListAt);
  if (Fused) { // same tiling as the rows (BwdConfig::fused)
    LC.row_count = L.count;
    LC.row_list = L.list;
    LC.rank = W.at<int>(Base, RankAt);
  }
  const int ColWarps = listWarpsPerCta(int64_t(Groups) * KvN, SMs);
  void *ColParams[] = {&LC};
  D.check(D.cuLaunchKernel(Cols, ceilDiv(Groups * KvN, ColWarps), 1, 1, 32 * ColWarps,
                           1, 1, 0, Stream, ColParams, nullptr),
          "launch attnc_bwd_block_cols");
  return {L.count, L.list, LC.count, LC.list, LC.rank};
}

void BackwardRunner::makeBlockLists(const CallShape &C, const InputMap &Inputs,
                                    CUstream Stream, BlockMaskData &Out) {
  std::vector<uint64_t> Slots = inputSlots(*Def.Graph, C, Inputs);
  BwdLists L = listBlocks(C, Slots.data(), Stream, Out.BwdMem);
  Out.HasBwd = true;
  Out.Bwd = tiles();
  Out.QCount = L.QCount;
  Out.QList = L.QList;
  Out.KvCount = L.KvCount;
  Out.KvList = L.KvList;
  Out.KvRank = L.KvRank;
}

} // namespace attn::runtime
