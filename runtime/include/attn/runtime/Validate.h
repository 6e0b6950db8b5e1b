// Argument validation for Attention calls: every check before any launch.
#ifndef ATTN_RUNTIME_VALIDATE_H
#define ATTN_RUNTIME_VALIDATE_H

#include "attn/Pipeline.h"
#include "attn/codegen/Codegen.h"
#include "attn/runtime/Attention.h"
#include "attn/runtime/KernelCache.h"
#include "attn/runtime/Selector.h"

namespace attn::runtime {

/// The problem a call describes, read from its tensors.
struct CallShape {
  int64_t B = 0, H = 0, Hkv = 0, Sq = 0, Skv = 0;
  /// Element strides (batch, head, seq) of q, k, v, o.
  int64_t Q[3] = {0, 0, 0}, K[3] = {0, 0, 0}, V[3] = {0, 0, 0},
          O[3] = {0, 0, 0};
  /// A packed variable-length call (Layout::THD, a VarlenBatch): B
  /// sequences, Sq and Skv the longest ones, every batch stride 0; the
  /// cu_seqlens device arrays and the tokens of q and of k.
  bool Packed = false;
  const int *CuQ = nullptr, *CuKv = nullptr;
  int64_t TotalQ = 0, TotalKv = 0;
};

/// A shape as the argument errors print it: "[2, 16, 4, 64]".
std::string shapeText(const std::vector<int64_t> &Shape);

/// A q/k/v/o-like tensor as validated: (B, S, H, D) and its element strides
/// (batch, head, seq).
struct SeqTensor {
  int64_t B = 0, S = 0, H = 0, D = 0;
  int64_t Strides[3] = {0, 0, 0};
};

/// Checks a [B,S,H,D] (BSHD), [B,H,S,D] (BHSD) or [T,H,D] (THD: B = 1,
/// S = T, batch stride 0) tensor of \p Dtype whose
/// last dimension is \p HeadDim: data non-null and 16-byte aligned, every
/// dimension at least 1, the last one contiguous, the other strides
/// non-negative multiples of 8 elements. InvalidArgument naming \p Name and
/// the expected value otherwise. Attention and linear attention share it.
SeqTensor checkSeqTensor(const char *Name, const TensorView &T, DType Dtype,
                         attn::Layout L, int64_t HeadDim);

/// Checks the custom inputs \p Inputs against the inputs \p G declares for a
/// call of B batches, H heads, Sq query and Skv key positions: each declared
/// input supplied (a number for a scalar; otherwise a float32 tensor of its
/// shape class, non-null, 4-byte aligned, the last stride 1, no negative
/// stride), and no undeclared one. Attention and linear attention (Sq = Skv
/// = T) share it.
void checkInputs(const ir::Graph &G, int64_t B, int64_t H, int64_t Sq, int64_t Skv,
                 const InputMap &Inputs);

/// checkInputs for a packed variable-length call of H heads over TotalQ
/// query and TotalKv key tokens: a per_row input is [H, TotalQ], per_key
/// [H, TotalKv], per_query_token [TotalQ], per_key_token [TotalKv] (the
/// value of each token, by its place in the packed q or k); the rest as in
/// checkInputs. NotSupportedYet for a full input.
void checkPackedInputs(const ir::Graph &G, int64_t H, int64_t TotalQ, int64_t TotalKv,
                       const InputMap &Inputs);

/// Checks q, k, v, out, finals and the custom inputs against the signature
/// and the definition; throws InvalidArgument naming the argument and the
/// expected value ("q: expected rank 4 [batch, seq, heads, head_dim], got
/// rank 3").
CallShape validateCall(const ir::Graph &G, const Signature &Sig,
                       const TensorView &Q, const TensorView &K,
                       const TensorView &V, const TensorView &Out,
                       const TensorView *Finals, const InputMap &Inputs);

/// validateCall for a packed variable-length call: the signature's layout
/// THD, q [Tq,H,D], k and v [Tkv,Hkv,D], out like q, finals [F,H,Tq]
/// float32, cu_seqlens_q and cu_seqlens_kv int32 [B+1] (B >= 1), the max
/// lengths between 1 and the token counts, and only scalar and per-head
/// custom inputs (NotSupportedYet naming any other).
CallShape validateVarlenCall(const ir::Graph &G, const Signature &Sig,
                             const TensorView &Q, const TensorView &K,
                             const TensorView &V, const TensorView &Out,
                             const TensorView *Finals, const VarlenBatch &VB,
                             const InputMap &Inputs);

/// The tensors of a backward call. dout, dq, dk, dv are like out, q, k, v;
/// out is needed only when the variant's backward reads doosum
/// (rowsum(dO∘O)), and may be null otherwise.
struct BackwardTensors {
  const TensorView &Q, &K, &V;
  const TensorView *Out;
  const TensorView &DOut;
  const TensorView *Finals;
  const TensorView &DQ, &DK, &DV;
};

/// A validated backward call: the forward's shape (out's strides are zero
/// when out is not given) and the element strides (batch, head, seq) of
/// dout, dq, dk, dv.
struct BackwardCallShape {
  CallShape Fwd;
  int64_t DOut[3] = {0, 0, 0}, DQ[3] = {0, 0, 0}, DK[3] = {0, 0, 0},
          DV[3] = {0, 0, 0};
};

/// Checks every argument of a backward call as validateCall does for the
/// forward (q, k, v, finals, custom inputs), and dout, out, dq, dk, dv and
/// the custom-input gradients (\p Grads: one for each input that requires
/// a gradient, none for any other); throws InvalidArgument naming the
/// argument and the expected value.
BackwardCallShape validateBackwardCall(const CompiledDefinition &Def,
                                       const Signature &Sig,
                                       const BackwardTensors &T,
                                       const InputMap &Inputs,
                                       const InputGradMap &Grads);

/// validateBackwardCall for a packed variable-length call, with the
/// batch's rules of validateVarlenCall.
BackwardCallShape validateVarlenBackwardCall(const CompiledDefinition &Def,
                                             const Signature &Sig,
                                             const BackwardTensors &T,
                                             const VarlenBatch &VB,
                                             const InputMap &Inputs,
                                             const InputGradMap &Grads);

} // namespace attn::runtime

#endif
