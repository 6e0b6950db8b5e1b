// Merge derivation: how two partial online states (o, rowscales) of
// disjoint key ranges of one query row combine into the state of their
// union, derived from what the IR of online_fwd proves.
#ifndef ATTN_ANALYSIS_MERGE_H
#define ATTN_ANALYSIS_MERGE_H

#include "attn/ir/Graph.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace attn::analysis {

enum class MergeKind : uint8_t {
  None,      ///< no merge is proven: the keys of a row stay in one pass
  Sum,       ///< o and every rowscale add up (o_scale ≡ 1)
  LogSumExp, ///< the max/exp form: rescale both to the larger running max
  Combine,   ///< the definition's own combine (OnlineFunc::combine)
};
llvm::StringRef mergeKindName(MergeKind K);

/// The merge of a definition's online states.
struct MergeInfo {
  MergeKind Kind = MergeKind::None;
  /// Why there is no merge (Kind == None), for `attnc show` and messages.
  std::string Reason;
  /// LogSumExp: the index, in the declared online rowscales, of the running
  /// max m; every other rowscale is a sum scaled like o by exp(m - m_new).
  int MaxRowscale = -1;
  /// Combine: the graph whose function "combine" merges (it outlives this).
  const ir::Graph *CombineGraph = nullptr;
  /// A derived merge that a combine of the definition's also exists for:
  /// the derived one is used; `attnc check` verifies the combine too.
  bool CombineUnused = false;

  /// "log-sum-exp", "sum", "combine (...)" or "none (why)".
  std::string str() const;
};

/// Classifies the online function of \p G (a transformer definition after
/// the pipeline) by its merge. A state is (o, rowscales) after online_fwd
/// has run over a set of keys, before the epilogue; merging the states of
/// two disjoint key sets gives the state of their union, exactly in real
/// arithmetic, when:
///  * Sum: o_scale is the constant 1, P does not read a rowscale, and each
///    new rowscale is `r + get_reduce("sum"|"abssum")(z)` with z free of
///    rowscales and r initially 0: o = o1 + o2, r = r1 + r2.
///  * LogSumExp: one rowscale m starts at -inf and becomes
///    m' = max(m, get_reduce("max")(x)); o_scale = exp(m - m'); P =
///    exp(y - m'); each other rowscale starts at 0 and becomes
///    r·o_scale + get_reduce("sum")(z) with z = P or exp(w - m') (x, y, w
///    free of rowscales): m = max(m1, m2), a_i = exp(m_i - m) (0 where m_i
///    is -inf), o = a1·o1 + a2·o2, r = a1·r1 + a2·r2.
/// Anything else is None with the first reason found, unless the
/// definition supplies a combine (OnlineFunc::combine, the IR function
/// "combine"): then Combine, with o = o_scale_a·o1 + o_scale_b·o2 and the
/// rowscales it returns. A derived merge wins over the definition's
/// combine (it is exact by construction; CombineUnused is set and `attnc
/// check` verifies the combine all the same). Linear definitions have no
/// online states: None.
MergeInfo analyzeMerge(const ir::Graph &G);

/// The definition's own combine as a merge (Kind Combine), whether or not
/// a merge is derived; Kind None where the definition has none.
MergeInfo userCombine(const ir::Graph &G);

/// One partial state of a query row in double precision: the rowscales in
/// declaration order, o, and whether any key of the part was unmasked
/// (a part with none is the identity of the merge).
struct MergeState {
  std::vector<double> Rowscales;
  std::vector<double> O;
  bool Seen = false;
};

/// Merges \p B into \p A by \p M's rule (the reference semantics the
/// generated merge kernels implement). InternalError for MergeKind::None.
void mergeStates(const MergeInfo &M, MergeState &A, const MergeState &B);

/// How two final *results* (o and the finals, after the epilogue) of
/// disjoint key sets of a query row combine into the result of their union,
/// where the epilogue lets them (a public merge: a prefix cache and new
/// tokens, shards of the keys):
///  * Sum (the state merge is Sum): the epilogue returns o as it is and
///    each final is an online rowscale as it is: o = o1 + o2, finals add.
///  * LogSumExp (the state merge is LogSumExp): the epilogue returns o / r
///    with r one of the summed rowscales, the definition has one final,
///    log(r) + m with m the running max: lse = log(e^lse1 + e^lse2), o =
///    e^(lse1 - lse) o1 + e^(lse2 - lse) o2.
///  * Combine (the state merge is the definition's combine): the epilogue
///    returns o as it is and each online rowscale as a final as it is (the
///    result is the state): the combine merges them.
/// A part whose finals are -inf (no unmasked key) is the identity.
struct ResultMergeInfo {
  MergeKind Kind = MergeKind::None;
  std::string Reason; ///< why results cannot be merged (Kind == None)
  int LseFinal = -1;  ///< LogSumExp: the final holding the log-sum-exp
  /// Combine: the state merge, and for each online rowscale the index of
  /// the final that holds it.
  MergeInfo State;
  std::vector<int> FinalOfRowscale;
};
ResultMergeInfo analyzeResultMerge(const ir::Graph &G);

/// One query row's result in double precision: o and the finals.
struct ResultState {
  std::vector<double> O;
  std::vector<double> Finals;
};

/// Merges \p B into \p A by \p M's rule (what the public merge kernel
/// computes). InternalError for MergeKind::None.
void mergeResults(const ResultMergeInfo &M, ResultState &A,
                  const ResultState &B);

} // namespace attn::analysis

#endif
