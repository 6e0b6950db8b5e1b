// Attention's block masks: made from the mask (classified on the GPU) or
// from the user's lists (re-tiled on the host), and checked at each call.
#include "attn/runtime/Attention.h"

#include "AttentionState.h"

#include "BackwardRunner.h"
#include "BlockMaskData.h"
#include "MaskClassify.h"

#include "attn/Error.h"
#include "attn/analysis/MaskBounds.h"
#include "attn/ir/Printer.h"
#include "attn/runtime/Backend.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/Validate.h"

#include <fmt/format.h>

#include <algorithm>

namespace attn::runtime {

namespace {

std::string shapeOf(const MaskShape &S) {
  return fmt::format("[batch {}, heads {}, seq_q {}, seq_kv {}]", S.Batch,
                     S.Heads, S.SeqQ, S.SeqKv);
}

/// \p S with HeadsKv filled in, as the CallShape of a dense call, after
/// checking it (InvalidArgument naming the field).
CallShape maskCallShape(MaskShape &S, attn::Layout L) {
  if (L == attn::Layout::THD)
    throw UserError("block mask: a packed variable-length signature (THD) "
                    "takes no block mask");
  if (S.HeadsKv == 0)
    S.HeadsKv = S.Heads;
  const std::pair<const char *, int64_t> Fields[] = {
      {"Batch", S.Batch}, {"Heads", S.Heads}, {"SeqQ", S.SeqQ},
      {"SeqKv", S.SeqKv}, {"HeadsKv", S.HeadsKv}};
  for (const auto &[Name, V] : Fields)
    if (V < 1 || V > (int64_t(1) << 30))
      throw InvalidArgument(fmt::format(
          "block mask shape: {} is {}; expected 1 to 2^30", Name, V));
  if (S.Heads % S.HeadsKv)
    throw InvalidArgument(
        fmt::format("block mask shape: HeadsKv {} does not divide Heads {}",
                    S.HeadsKv, S.Heads));
  CallShape C;
  C.B = S.Batch;
  C.H = S.Heads;
  C.Hkv = S.HeadsKv;
  C.Sq = S.SeqQ;
  C.Skv = S.SeqKv;
  return C;
}

/// Copies \p Parts into regions of \p Mem; their device addresses in order.
std::vector<const int *>
upload(DeviceArena &Mem, const std::vector<const std::vector<int32_t> *> &Parts) {
  ArenaLayout W;
  std::vector<unsigned> At;
  for (const std::vector<int32_t> *P : Parts)
    At.push_back(W.add(P->size() * 4));
  CUdeviceptr Base = Mem.carve(W);
  CudaDriver &D = CudaDriver::get();
  std::vector<const int *> Out;
  for (size_t I = 0; I < Parts.size(); ++I) {
    int *Dst = W.at<int>(Base, At[I]);
    if (Dst)
      D.check(D.cuMemcpyHtoD(CUdeviceptr(Dst), Parts[I]->data(),
                             Parts[I]->size() * 4),
              "cuMemcpyHtoD(block mask)");
    Out.push_back(Dst);
  }
  // From pageable memory, cuMemcpyHtoD returns once the data is staged, not
  // once it has landed, and it runs on the legacy stream, which the
  // caller's non-blocking streams do not wait for: a call on one of them
  // could read the lists before they arrive. The mask is made once, so
  // one wait here costs no call anything.
  if (!Out.empty())
    D.check(D.cuStreamSynchronize(nullptr), "cuMemcpyHtoD(block mask) wait");
  return Out;
}

} // namespace

const analysis::MaskAnalysis &Attention::maskAnalysis() const {
  auto Lock = lockCalls();
  if (!MaskInfo)
    MaskInfo = std::make_unique<analysis::MaskAnalysis>(
        analysis::analyzeMask(*Def.Graph));
  return *MaskInfo;
}

const std::string &Attention::maskKey() const {
  auto Lock = lockCalls();
  const analysis::MaskAnalysis &A = maskAnalysis();
  if (!A.Mask)
    throw UserError("block mask: '" + Def.Graph->name() +
                    "' has no mask_mod; a block mask needs one");
  if (MaskKeyText.empty())
    MaskKeyText = ir::shortExpr(A.Mask, 1u << 16);
  return MaskKeyText;
}

const BlockMaskData &Attention::checkBlockMask(const BlockMask &B,
                                               const CallShape &Shape) const {
  const BlockMaskData &D = B.data();
  if (Shape.Packed)
    throw UserError("block mask: a packed variable-length call takes none");
  const std::string &Key = maskKey();
  if (D.MaskKey != Key)
    throw UserError(fmt::format("block mask: made for the mask {}; this "
                                "Attention's mask is {}",
                                D.MaskKey.empty() ? "(none: an empty BlockMask)"
                                                  : D.MaskKey,
                                Key));
  const MaskShape &S = D.Shape;
  if (S.Batch != Shape.B || S.Heads != Shape.H || S.SeqQ != Shape.Sq ||
      S.SeqKv != Shape.Skv)
    throw UserError(fmt::format(
        "block mask: made for {}; this call is [batch {}, heads {}, seq_q {}, "
        "seq_kv {}]",
        shapeOf(S), Shape.B, Shape.H, Shape.Sq, Shape.Skv));
  return D;
}

BlockMask Attention::makeBlockMask(const MaskShape &Shape,
                                   const InputMap &Inputs, CUstream Stream,
                                   bool ForBackward) {
  auto Lock = lockCalls();
  auto D = std::make_unique<BlockMaskData>();
  D->MaskKey = maskKey();
  D->Shape = Shape;
  maskCallShape(D->Shape, Sig.TensorLayout);
  D->HasBwd = ForBackward;
  classifyInto(*D, Inputs, Stream);
  return BlockMask(std::move(D));
}

void Attention::refreshBlockMask(BlockMask &B, const InputMap &Inputs,
                                 CUstream Stream) {
  auto Lock = lockCalls();
  BlockMaskData &D = *B.D;
  CallShape C = maskCallShape(D.Shape, Sig.TensorLayout);
  checkBlockMask(B, C);
  if (D.UserBlockQ)
    throw UserError("block mask: given as lists; only one made by "
                    "makeBlockMask is classified again");
  classifyInto(D, Inputs, Stream);
}

void Attention::classifyInto(BlockMaskData &D, const InputMap &Inputs,
                             CUstream Stream) {
  CallShape C = maskCallShape(D.Shape, Sig.TensorLayout);
  checkInputs(*Def.Graph, C.B, C.H, C.Sq, C.Skv, Inputs);
  auto Gen = std::find(Names.begin(), Names.end(), "generated");
  if (Gen == Names.end())
    throw UserError("block mask: backend '" + Sig.Backend +
                    "' has no block lists; use the generated backend");
  const analysis::MaskAnalysis &A = maskAnalysis();
  D.Grouping = int(A.Grouping);
  D.Groups = maskGroups(A, C.B, C.H);
  KernelChoice Choice = choiceFor(C);
  enterDevice();
  // A decode call reads no lists (it masks per element).
  if (!Choice.Skel->isDecode()) {
    BackendProblem P{Def, Sig, Fwd.target(), C, Choice};
    AttentionBackend &B = backendAt(size_t(Gen - Names.begin()));
    std::string Why = B.check(P);
    if (!Why.empty())
      throw InvalidArgument("block mask: " + Why);
    B.makeBlockLists(P, CallContext{Inputs, Stream}, D);
  }
  if (D.HasBwd)
    backwardRunner().makeBlockLists(C, Inputs, Stream, D);
}

BlockMask Attention::blockMaskFromLists(const MaskShape &Shape,
                                        const BlockLists &L, bool ForBackward) {
  auto Lock = lockCalls();
  auto D = std::make_unique<BlockMaskData>();
  D->MaskKey = maskKey();
  D->Shape = Shape;
  CallShape C = maskCallShape(D->Shape, Sig.TensorLayout);
  HostClasses U = checkBlockLists(L, D->Shape);
  D->Grouping = U.Grouping;
  D->Groups = U.Groups;
  D->UserBlockQ = L.BlockQ;
  D->UserBlockKv = L.BlockKv;
  KernelChoice Choice = choiceFor(C);
  if (!Choice.Skel->isDecode()) {
    LaunchShape T = Choice.Skel->launchShape(Choice.Config, Fwd.target());
    HostLists R = listRows(retile(U, C.Sq, C.Skv, T.BlockM, T.BlockN));
    std::vector<const int *> P = upload(D->FwdMem, {&R.Count, &R.List});
    D->FwdBlockM = T.BlockM;
    D->FwdBlockN = T.BlockN;
    D->FwdCount = P[0];
    D->FwdList = P[1];
    D->FwdVisits.setKnown(R.Count);
  }
  if (!ForBackward)
    return BlockMask(std::move(D));
  const BwdTiles T = backwardRunner().tiles();
  HostClasses QT = retile(U, C.Sq, C.Skv, T.QBlockM, T.QBlockN);
  HostClasses KvT = retile(U, C.Sq, C.Skv, T.KvBlockM, T.KvBlockN);
  HostLists Rows = listRows(QT), Cols = listColumns(KvT);
  // The fused dQ mode ranks the columns among the rows of the same tiling.
  std::vector<int32_t> Rank;
  if (T.Fused)
    Rank = columnRanks(listRows(KvT), Cols, U.Groups);
  std::vector<const int *> P = upload(
      D->BwdMem, {&Rows.Count, &Rows.List, &Cols.Count, &Cols.List, &Rank});
  D->HasBwd = true;
  D->Bwd = T;
  D->QCount = P[0];
  D->QList = P[1];
  D->KvCount = P[2];
  D->KvList = P[3];
  D->KvRank = P[4];
  return BlockMask(std::move(D));
}

} // namespace attn::runtime
