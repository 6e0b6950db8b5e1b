// Reusable block masks: the block classification of a masked Attention,
// made once and passed to any number of forward and backward calls.
#ifndef ATTN_RUNTIME_BLOCKMASK_H
#define ATTN_RUNTIME_BLOCKMASK_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attn::runtime {

/// The problem a block mask is made for: batch, heads, query and key
/// lengths. HeadsKv (0: Heads) only picks the forward's tuned configuration
/// where a tune file has one per shape; the mask does not depend on it.
struct MaskShape {
  int64_t Batch = 1, Heads = 1, SeqQ = 0, SeqKv = 0, HeadsKv = 0;
};

/// A block mask given by the user (FlexAttention's layout): for each
/// (batch, head) and query block of BlockQ rows, the key blocks of BlockKv
/// keys to visit, as partial ones (the mask is evaluated per element) and
/// full ones (every element kept; no mask evaluation). Host int32 data;
/// Batch and Heads are either the call's or 1 (the same lists for every
/// batch or head). QBlocks = ceil(SeqQ / BlockQ), KvBlocks = ceil(SeqKv /
/// BlockKv) of the MaskShape it is made for.
///
///   KvNumBlocks      [Batch][Heads][QBlocks]            in [0, KvBlocks]
///   KvIndices        [Batch][Heads][QBlocks][KvBlocks]  the first
///                    KvNumBlocks entries of a row name distinct blocks in
///                    [0, KvBlocks); the rest are ignored
///   FullKvNumBlocks  like KvNumBlocks, or empty (no full blocks)
///   FullKvIndices    like KvIndices, or empty with FullKvNumBlocks
///
/// A block named in neither list is skipped; one named in both is an error.
/// Partial and full must be what the Attention's mask_mod gives (a block
/// listed full is not masked; one left out is not computed): attnc cannot
/// check that without classifying, which is what a given mask avoids.
struct BlockLists {
  int64_t Batch = 1, Heads = 1;
  int BlockQ = 128, BlockKv = 128;
  std::vector<int32_t> KvNumBlocks, KvIndices;
  std::vector<int32_t> FullKvNumBlocks, FullKvIndices;
};

/// What a BlockMask holds on the device, for the runtime's launchers.
struct BlockMaskData;
class Attention;

/// A block classification made by Attention::makeBlockMask (from the mask
/// and its inputs, on the GPU) or Attention::blockMaskFromLists (from
/// BlockLists). It holds the block lists of the Attention's forward
/// kernel for its shape and, when made for the backward, of the backward's
/// kernels; a call given one launches no classification. It must outlive
/// the calls that use it (they read it on their streams), and a call on
/// another stream than the one it was made on must be ordered after its
/// making (an event). Movable, not copyable.
class BlockMask {
public:
  BlockMask();
  explicit BlockMask(std::unique_ptr<BlockMaskData> D);
  BlockMask(BlockMask &&);
  BlockMask &operator=(BlockMask &&);
  ~BlockMask();

  const MaskShape &shape() const;
  /// Whether it holds the backward's lists (Attention::backward accepts it).
  bool forBackward() const;
  /// The forward kernel's block size its forward lists are for
  /// ("128x128"), and for a given one the user's block size.
  std::string describe() const;

  const BlockMaskData &data() const { return *D; }

private:
  friend class Attention; // refreshBlockMask writes into it
  std::unique_ptr<BlockMaskData> D;
};

} // namespace attn::runtime

#endif
