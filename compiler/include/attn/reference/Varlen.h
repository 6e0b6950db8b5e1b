// Reference attention over a packed variable-length batch: each sequence a
// dense call of one batch, with the bottom-right rule for q_idx.
#ifndef ATTN_REFERENCE_VARLEN_H
#define ATTN_REFERENCE_VARLEN_H

#include "attn/reference/Attention.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace attn::reference {

/// q [Tq,H,D], k [Tkv,Hkv,D], v [Tkv,Hkv,DV] packed; sequence b is tokens
/// [CuSeqlensQ[b], CuSeqlensQ[b+1]) of q and [CuSeqlensKv[b],
/// CuSeqlensKv[b+1]) of k and v. Custom inputs by token: per_row [H,Tq],
/// per_key [H,Tkv], per_query_token [Tq], per_key_token [Tkv] (a query row
/// reads its token's value, whatever q_idx it has); scalar and per-head as
/// in a dense call; no full input.
struct VarlenInputs {
  Tensor Q, K, V;
  std::vector<int64_t> CuSeqlensQ, CuSeqlensKv;
  InputValues Inputs;
  std::function<double(double)> RoundProbs;
};

/// UserError unless the tensors are packed [T, H, dim] with matching dims,
/// the cu_seqlens have the same B + 1 >= 2 entries, start at 0, never
/// decrease and end at most at the token counts, and a per-row, per-key or
/// per-token input of its packed shape (VarlenInputs); NotSupportedYet for a
/// full input.
void validateVarlenInputs(const ir::Graph &G, const VarlenInputs &In);

/// o [Tq,H,DV] and each final rowscale [H,Tq]: the online algorithm
/// (key blocks of \p BlockN) per sequence, whose i-th query has q_idx
/// i + Skv_b − Sq_b and b the sequence's index. Query tokens of no
/// sequence, and sequences without keys, give o = 0 and finals = -inf
/// (a fully masked row).
AttentionOutputs attentionVarlen(const CompiledDefinition &Def,
                                 const VarlenInputs &In, int64_t BlockN);

/// dq [Tq,H,D], dk, dv [Tkv,Hkv,·] and the custom-input gradients (summed
/// over the sequences) of L = sum(o ∘ DO), DO [Tq,H,DV].
AttentionGrads attentionVarlenBackward(const CompiledDefinition &Def,
                                       const VarlenInputs &In,
                                       const Tensor &DO);

} // namespace attn::reference

#endif
