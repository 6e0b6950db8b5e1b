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
/// CuSeqlensKv[b+1]) of k and v. Custom inputs: scalar and per-head only.
struct VarlenInputs {
  Tensor Q, K, V;
  std::vector<int64_t> CuSeqlensQ, CuSeqlensKv;
  InputValues Inputs;
  std::function<double(double)> RoundProbs;
};

/// UserError unless the tensors are packed [T, H, dim] with matching dims,
/// the cu_seqlens have the same B + 1 >= 2 entries, start at 0, never
/// decrease and end at most at the token counts; NotSupportedYet for a
/// custom input that is not scalar or per-head.
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
