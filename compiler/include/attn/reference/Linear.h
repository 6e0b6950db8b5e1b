// Reference (double-precision) linear attention from the IR: the token-by-
// token recurrence and the chunked algorithm.
#ifndef ATTN_REFERENCE_LINEAR_H
#define ATTN_REFERENCE_LINEAR_H

#include "attn/Pipeline.h"
#include "attn/reference/Tensor.h"

#include <optional>

namespace attn::reference {

/// q [B,Hq,T,D], k [B,Hk,T,D], v [B,H,T,DV], decay [B,H,T] (Hq and Hk divide
/// H, the seeds' ngroups), custom inputs, optional initial state [B,H,D,DV].
struct LinearInputs {
  Tensor Q, K, V, Decay;
  InputValues Inputs;
  std::optional<Tensor> InitialState;
};

/// o [B,H,T,DV] and the final state [B,H,D,DV].
struct LinearOutputs {
  Tensor O, FinalState;
};

/// UserError unless the tensors and inputs fit together and the definition:
/// q, k, v of rank 4 with every size at least 1, heads that divide, the
/// decay and initial state shapes, every declared input with its shape.
/// linearRecurrent and linearChunked call it before they read any size.
void validateLinearInputs(const ir::Graph &G, const LinearInputs &In);

/// S_t = exp(g_t)·S_{t−1} + k_tᵀ v_t, o_t = q_t S_t, one token at a time.
LinearOutputs linearRecurrent(const CompiledDefinition &Def,
                              const LinearInputs &In);

/// The chunked form with chunks of \p Chunk tokens (the last may be short):
/// within a chunk (Q Kᵀ ⊙ D) V with D_ij = exp(G_i − G_j), i ≥ j, plus
/// exp(G_i)·q_i S for the carried state; between chunks the state update.
LinearOutputs linearChunked(const CompiledDefinition &Def,
                            const LinearInputs &In, int64_t Chunk);

} // namespace attn::reference

#endif
