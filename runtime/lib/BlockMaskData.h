// What a BlockMask holds (device block lists in the kernels' format, the
// tiles they are for) and the host side of a user's BlockLists: checking
// every field, and re-tiling its classes to the kernels' blocks.
#ifndef ATTN_RUNTIME_BLOCKMASKDATA_H
#define ATTN_RUNTIME_BLOCKMASKDATA_H

#include "DeviceArena.h"
#include "ListVisits.h"

#include "attn/runtime/BlockMask.h"

#include <cstdint>
#include <string>
#include <vector>

namespace attn::runtime {

/// The backward's block tiles: the dQ kernel's (query block of QBlockM
/// rows, key blocks of QBlockN) and the dK/dV kernel's; in the fused dQ
/// mode the columns also carry their ranks.
struct BwdTiles {
  int QBlockM = 0, QBlockN = 0, KvBlockM = 0, KvBlockN = 0;
  bool Fused = false;
  bool operator==(const BwdTiles &O) const {
    return QBlockM == O.QBlockM && QBlockN == O.QBlockN &&
           KvBlockM == O.KvBlockM && KvBlockN == O.KvBlockN &&
           Fused == O.Fused;
  }
  std::string str() const;
};

struct BlockMaskData {
  MaskShape Shape;
  /// The mask it classifies (its expression; ir::shortExpr of the mask):
  /// an Attention of another mask refuses it.
  std::string MaskKey;
  /// mask_grouping of the lists (0 one group, 1 per batch, 2 per
  /// batch·head) and the number of groups.
  int Grouping = 0;
  int64_t Groups = 1;
  /// A given mask's block size; 0 for one made from the mask.
  int UserBlockQ = 0, UserBlockKv = 0;
  /// The forward's lists (FwdArgs::block_count, block_list) for blocks of
  /// FwdBlockM x FwdBlockN.
  int FwdBlockM = 0, FwdBlockN = 0;
  const int *FwdCount = nullptr, *FwdList = nullptr;
  /// The forward lists' mean visits a query block, for the choice of
  /// fwd_sm90's persistent form where the mask reads tensors (the host's
  /// analysis cannot count those).
  ListVisits FwdVisits;
  /// The backward's lists (BwdArgs), when HasBwd.
  bool HasBwd = false;
  BwdTiles Bwd;
  const int *QCount = nullptr, *QList = nullptr, *KvCount = nullptr,
            *KvList = nullptr, *KvRank = nullptr;
  /// The forward's and the backward's lists (and, for one made from the
  /// mask, the classification's scratch).
  DeviceArena FwdMem{"block mask (forward)"}, BwdMem{"block mask (backward)"};
};

/// Block classes on the host: [Groups][MBlocks][NBlocks], 0 empty, 1
/// partial, 2 full, for blocks of BlockM x BlockN.
struct HostClasses {
  int Grouping = 0;
  int64_t Groups = 1;
  int BlockM = 0, BlockN = 0, MBlocks = 0, NBlocks = 0;
  std::vector<uint8_t> C;
  uint8_t at(int64_t G, int M, int N) const {
    return C[(size_t(G) * MBlocks + M) * NBlocks + N];
  }
};

/// The classes \p L describes for \p S, after checking every field
/// (InvalidArgument "block lists: <field> ...: expected ...").
HostClasses checkBlockLists(const BlockLists &L, const MaskShape &S);

/// \p U's classes for blocks of \p BlockM x \p BlockN of a SeqQ x SeqKv
/// problem: a block is empty where every block of \p U it meets is, full
/// where every one is and no key lies past SeqKv, else partial.
HostClasses retile(const HostClasses &U, int64_t SeqQ, int64_t SeqKv,
                   int BlockM, int BlockN);

/// Lists in the kernels' format: per line, the count and the line's
/// entries (the block index, bit 30 for a full one) padded to Len.
struct HostLists {
  int Len = 0;
  std::vector<int32_t> Count, List;
};

/// Per query block, the key blocks to visit (FwdArgs, BwdArgs::q_list).
HostLists listRows(const HostClasses &C);
/// Per key block, the query blocks to visit (BwdArgs::kv_list).
HostLists listColumns(const HostClasses &C);
/// The fused dQ mode's ranks of \p Cols' entries (column_ranks of
/// bwd_block_mask.cuh): for query block m of key block n's column, how many
/// key blocks after n visit m. \p Rows and \p Cols are of the same classes.
std::vector<int32_t> columnRanks(const HostLists &Rows, const HostLists &Cols,
                                 int64_t Groups);

} // namespace attn::runtime

#endif
