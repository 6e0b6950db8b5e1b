// Argument validation for LinearAttention calls: every check before any
// launch, each failure an InvalidArgument naming the argument.
#ifndef ATTN_RUNTIME_LINEARVALIDATE_H
#define ATTN_RUNTIME_LINEARVALIDATE_H

#include "attn/runtime/LinearAttention.h"

namespace attn::runtime {

/// A validated call's sizes and the element strides (batch, head, seq) of
/// its sequence tensors.
struct LinearCallShape {
  int64_t B = 0, H = 0, Hq = 0, Hk = 0, T = 0;
  int64_t Q[3] = {}, K[3] = {}, V[3] = {}, O[3] = {}, Decay[3] = {};
};

LinearCallShape validateLinearForward(const CompiledDefinition &Def,
                                      const LinearSignature &Sig,
                                      const TensorView &Q, const TensorView &K,
                                      const TensorView &V,
                                      const TensorView &Out,
                                      const TensorView *Decay,
                                      const InputMap &Inputs,
                                      const TensorView *InitialState,
                                      const TensorView *FinalState);

struct LinearBackwardShape {
  LinearCallShape Fwd;
  int64_t DO[3] = {}, DQ[3] = {}, DK[3] = {}, DV[3] = {};
};

LinearBackwardShape validateLinearBackward(const CompiledDefinition &Def,
                                           const LinearSignature &Sig,
                                           const LinearBackwardTensors &T,
                                           const InputMap &Inputs,
                                           const LinearInputGrads &Grads);

/// A validated decode step: q, k, v, out and the decay as a forward call of
/// T = the new tokens per sequence, and the pool's size.
struct LinearDecodeShape {
  LinearCallShape Call;
  int64_t Pool = 0;
};

/// Checks a decode step's arguments (LinearAttention::decodeStep); throws
/// InvalidArgument naming the argument.
LinearDecodeShape validateLinearDecode(const CompiledDefinition &Def,
                                       const LinearSignature &Sig,
                                       const LinearDecodeTensors &T,
                                       const InputMap &Inputs);

/// A validated packed forward: q, k, v, out, the decay and the inputs as a
/// call of batch 1 and T the packed tokens, and the number of sequences.
struct LinearVarlenShape {
  LinearCallShape Call;
  int64_t Seqs = 0;
};

/// Checks a packed forward's arguments (LinearAttention::forwardVarlen);
/// throws InvalidArgument naming the argument.
LinearVarlenShape validateLinearVarlen(const CompiledDefinition &Def,
                                       const LinearSignature &Sig,
                                       const LinearVarlenTensors &T,
                                       const InputMap &Inputs);

/// A validated packed backward: the backward's shapes as a call of batch 1
/// and T the packed tokens, and the number of sequences.
struct LinearVarlenBackwardShape {
  LinearBackwardShape Bwd;
  int64_t Seqs = 0;
};

/// Checks a packed backward's arguments (LinearAttention::backwardVarlen);
/// throws InvalidArgument naming the argument.
LinearVarlenBackwardShape
validateLinearVarlenBackward(const CompiledDefinition &Def,
                             const LinearSignature &Sig,
                             const LinearVarlenBackwardTensors &T,
                             const InputMap &Inputs,
                             const LinearInputGrads &Grads);

/// The packed linear forward's extra CTA rows (LinearArgs::seq_split): the
/// sequence count where the unsplit grid of \p Ctas is under one wave of
/// \p Slots, else 0; ATTNC_LINEAR_SPLIT=0|1 forces it (any other value is
/// a UserError).
int linearVarlenSplitRows(int64_t Seqs, int64_t Heads, int64_t Ctas, int64_t Slots);

} // namespace attn::runtime

#endif
