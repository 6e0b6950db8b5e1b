// Mask analysis: which batch and head a mask depends on, and whether its
// value over a whole block of queries and keys can be bounded from the
// block's box (interval arithmetic) instead of evaluated element by element.
#ifndef ATTN_ANALYSIS_MASKBOUNDS_H
#define ATTN_ANALYSIS_MASKBOUNDS_H

#include "attn/ir/Graph.h"

#include "llvm/ADT/StringMap.h"

#include <cstdint>
#include <string>
#include <vector>

namespace attn::analysis {

/// How many block classifications a call needs: one shared by every batch
/// and head, one per batch, or one per (batch, head). The kernels' group of
/// batch·head bh is 0, bh / heads and bh (attnc::mask_group).
enum class MaskGrouping : uint8_t {
  Shared = 0,
  PerBatch = 1,
  PerBatchHead = 2
};
/// "shared", "per batch", "per batch*head".
llvm::StringRef maskGroupingName(MaskGrouping G);

/// A custom input that the block classification bounds by its minimum and
/// maximum over the rows (per-row inputs) or the keys (per-key inputs) of a
/// block. Its position in MaskAnalysis::Bounded is its index in the bound
/// arrays (MaskBox::Lo/Hi, the kernels' bounds buffer).
struct BoundedInput {
  std::string Name;
  bool ByKey = false; ///< bounded over the block's keys, else its rows
};

/// What analyzeMask finds about a definition's mask.
struct MaskAnalysis {
  /// The mask's value (mask_mod's result), or null without a mask.
  const ir::Node *Mask = nullptr;
  MaskGrouping Grouping = MaskGrouping::Shared;
  /// Blocks are classified from box bounds; else element by element.
  bool Analysed = false;
  /// Why the mask is not analysed, naming the node (empty when analysed or
  /// without a mask).
  std::string Reason;
  /// The inputs bounded per block, in the order of the bound arrays.
  std::vector<BoundedInput> Bounded;
  /// The scalar inputs the mask reads, in declaration order: with the
  /// shapes, all that a classification of a mask reading no tensor input
  /// depends on.
  std::vector<std::string> ScalarInputs;
  /// The mask reads a custom input that is a tensor (per head, row, key or
  /// full): its classes depend on device data and are never reused.
  bool ReadsTensorInput = false;
};

/// Analyses the mask of \p G (a traced and simplified transformer
/// definition).
///
/// Grouping: per batch·head when the mask reads h or an input that varies
/// with the head, per batch when it reads b (or an input that varies with
/// the batch only), shared otherwise; a scalar input never groups.
///
/// Analysable: every node of the mask has an interval rule over a box
/// (q_idx in [q_lo, q_hi], kv_idx in [kv_lo, kv_hi], b, h, head_dim,
/// constants, scalar and per-head inputs exact, per-row and per-key inputs
/// by their minimum and maximum over the box's rows or keys): arithmetic
/// (add, sub, mul, div, floordiv, mod), min, max, abs, neg, relu,
/// comparisons (false, true
/// or unknown), and, or, not and select. Transcendental nodes (the device's
/// fast exp, log, ... are not proven monotone) and full [B,H,Sq,Skv] inputs
/// make the mask element-evaluated, with a Reason naming the node.
///
/// The class derived from the box is sound: EMPTY only if the mask is false
/// at every point of the box, FULL only if it is true at every point (see
/// MaskBounds.cpp for why each rule is).
MaskAnalysis analyzeMask(const ir::Graph &G);

/// Whether a packed call's range of key blocks for a query block comes from
/// box classes alone, found by one warp's votes (varlen.cuh's
/// key_block_range without a CTA-wide scan): no mask, or an analysed one
/// that bounds no input per block. fwd_sm90's persistent packed walk needs
/// it (the kernels' kPackedWalk says the same).
inline bool packedRangeFromBoxes(const MaskAnalysis &A) {
  return !A.Mask || (A.Analysed && A.Bounded.empty());
}

/// A block's class, as the kernels' classes array stores it.
enum class BlockClass : uint8_t { Empty = 0, Partial = 1, Full = 2 };

/// A box of (query, key) points, inclusive ends, at one batch and head.
struct MaskBox {
  int64_t B = 0, H = 0, HeadDim = 128;
  int64_t QLo = 0, QHi = 0, KvLo = 0, KvHi = 0;
  /// Per MaskAnalysis::Bounded entry: its minimum and maximum over the box's
  /// rows (or keys).
  std::vector<double> Lo, Hi;
  /// The values of the scalar and per-head inputs (at head H) by name.
  llvm::StringMap<double> Exact;
};

/// The host evaluator of analyzeMask's rules, in the reference
/// interpreter's double precision: the class of \p Box for the analysed
/// mask \p A (InternalError when A is not analysed). Partial where the
/// rules cannot decide.
BlockClass classifyBox(const MaskAnalysis &A, const MaskBox &Box);

} // namespace attn::analysis

#endif
