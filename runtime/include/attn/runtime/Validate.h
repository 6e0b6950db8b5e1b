// Argument validation for Attention calls: every check before any launch.
#ifndef ATTN_RUNTIME_VALIDATE_H
#define ATTN_RUNTIME_VALIDATE_H

#include "attn/runtime/Attention.h"

namespace attn::runtime {

/// The problem a call describes, read from its tensors.
struct CallShape {
  int64_t B = 0, H = 0, Hkv = 0, Sq = 0, Skv = 0;
  /// Element strides (batch, head, seq) of q, k, v, o.
  int64_t Q[3] = {0, 0, 0}, K[3] = {0, 0, 0}, V[3] = {0, 0, 0},
          O[3] = {0, 0, 0};
};

/// Checks q, k, v, out, finals and the custom inputs against the signature
/// and the definition; throws InvalidArgument naming the argument and the
/// expected value ("q: expected rank 4 [batch, seq, heads, head_dim], got
/// rank 3").
CallShape validateCall(const ir::Graph &G, const Signature &Sig,
                       const TensorView &Q, const TensorView &K,
                       const TensorView &V, const TensorView &Out,
                       const TensorView *Finals, const InputMap &Inputs);

} // namespace attn::runtime

#endif
