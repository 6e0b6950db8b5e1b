// Row-reduce analysis: the spaces of the functions' results, the reductions
// each function needs, and the online-function contract.
#ifndef ATTN_ANALYSIS_ROWREDUCE_H
#define ATTN_ANALYSIS_ROWREDUCE_H

#include "attn/ir/Graph.h"

#include <string>
#include <vector>

namespace attn::analysis {

/// What later stages need to know about a definition's reductions.
struct RowReduceInfo {
  struct Reduction {
    std::string Function;       ///< "online_fwd"
    const ir::ReduceNode *Node; ///< the reduction (operand is per-element)
  };
  std::vector<Reduction> Reductions;
  /// backward reads doosum = rowsum(dO∘O), so a preprocess must compute it.
  bool BackwardUsesDoosum = false;
  /// o_scale is the constant 1: the skeleton may skip rescaling.
  bool OScaleIsOne = false;
  /// The linear decay_mod reads the decay input (else it needs no tensor).
  bool UsesDecayInput = false;
};

/// Checks the contract of \p G and collects what later stages need. Throws a
/// UserError naming the function and the symbol on the first violation:
///  * each function reads only its own arguments (scores in the epilogue, a
///    final rowscale in online_fwd, ... are errors);
///  * new online rowscales, o_scale and final rowscales are per-row (or
///    coarser), and final rowscales do not depend on o;
///  * the epilogue's o is per-output-feature or coarser;
///  * backward's dscores is per-element;
///  * linear mods: decay_mod per-token, q/k/v mods elementwise.
RowReduceInfo analyzeRowReduce(const ir::Graph &G);

} // namespace attn::analysis

#endif
