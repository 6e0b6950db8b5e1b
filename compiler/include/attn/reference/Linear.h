// Reference (double-precision) linear attention from the IR: the token-by-
// token recurrence and the chunked algorithm.
#ifndef ATTN_REFERENCE_LINEAR_H
#define ATTN_REFERENCE_LINEAR_H

#include "attn/Pipeline.h"
#include "attn/reference/Tensor.h"

#include <functional>
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

/// Tokens [T0, T0 + N) of validated inputs: q, k, v, the decay and every
/// per-token custom input cut along the token dimension, the others kept;
/// no initial state. UserError for a range outside the tokens.
LinearInputs linearTokenSlice(const ir::Graph &G, const LinearInputs &In,
                              int64_t T0, int64_t N);

/// A rounding applied where an implementation holds a value in 16 bits.
using RoundFn = std::function<double(double)>;

/// A packed batch: \p In, of batch 1, holds the tokens of every sequence
/// end to end (per-token inputs [1,H,T] likewise; no InitialState),
/// \p CuSeqlens the B + 1 offsets (from 0 to T, never decreasing),
/// \p Initial the initial states [B,H,D,DV] (none: zero). Each sequence
/// runs on its own, its mods seeing b = 0 and t counted from its start: by
/// the token recurrence when \p Chunk is 0, else by linearChunkedModel with
/// chunks of \p Chunk (never crossing a sequence's end) and \p Round. o
/// [1,H,T,DV] and the final states [B,H,D,DV] (an empty sequence's is its
/// initial state).
LinearOutputs linearVarlen(const CompiledDefinition &Def,
                           const LinearInputs &In,
                           const std::vector<int64_t> &CuSeqlens,
                           const std::optional<Tensor> &Initial,
                           int64_t Chunk = 0, const RoundFn &Round = nullptr);

/// One decode step over a pool of states: Tokens holds the call's N new
/// tokens of each of B sequences (q [B,Hq,N,D], k, v, decay [B,H,N],
/// per-token inputs [B,H,N]; its InitialState is not used), States the
/// pool [P,H,D,DV]. Row b runs the recurrence from pool entry
/// StateIndex[b] (b without an index, when P must be B) with the mods'
/// t = Positions[b] + i (0 + i without positions) and per-token inputs
/// read at i.
struct LinearDecodeInputs {
  LinearInputs Tokens;
  Tensor States;
  std::optional<std::vector<int64_t>> StateIndex, Positions;
};

/// o [B,H,N,DV] (zero for a row whose index is outside [0, P): such a row
/// is skipped) and the pool after the step (the entries of skipped rows
/// and those no row names unchanged). The index must not name an entry
/// twice (the later row would win).
struct LinearDecodeOutputs {
  Tensor O, States;
};
LinearDecodeOutputs linearDecodeStep(const CompiledDefinition &Def,
                                     const LinearDecodeInputs &In);

/// The chunked form with chunks of \p Chunk tokens (the last may be short):
/// within a chunk (Q Kᵀ ⊙ D) V with D_ij = exp(G_i − G_j), i ≥ j, plus
/// exp(G_i)·q_i S for the carried state; between chunks the state update.
LinearOutputs linearChunked(const CompiledDefinition &Def,
                            const LinearInputs &In, int64_t Chunk);

/// Gradients of a loss L given dL/dO = DO [B,H,T,DV] and, optionally,
/// dL/dFinalState [B,H,D,DV]: of the raw q, k, v (shaped like them), of the
/// decay [B,H,T] (zero where decay_mod ignores it), of the initial state
/// (when the inputs have one), and of every declared custom input (its own
/// shape: [] scalar, [H] per head, [B,H,T] per row).
struct LinearGrads {
  Tensor DQ, DK, DV, DDecay;
  std::optional<Tensor> DInitialState;
  InputValues DInputs;
};

/// The exact gradients in double precision, by the token recurrence run
/// backwards (dS_t = q_tᵀ do_t + exp(g_{t+1}) dS_{t+1}, dg_t = exp(g_t)
/// <S_{t−1}, dS_t>) and the mods' derivatives from the evaluator's dual
/// numbers. (Batch, head) pairs are shared out over \p Threads threads.
LinearGrads linearBackward(const CompiledDefinition &Def,
                           const LinearInputs &In, const Tensor &DO,
                           const std::optional<Tensor> &DFinalState,
                           unsigned Threads = 1);

/// The exact gradients of linearVarlen (its token recurrence) given dL/dO =
/// \p DO [1,H,T,DV] and optionally dL/dFinal [B,H,D,DV]: each sequence's
/// by linearBackward of that sequence alone, q, k, v, decay and per-token
/// input gradients at the sequence's tokens, per-head and scalar input
/// gradients summed over the sequences in order. DInitialState is always
/// given ([B,H,D,DV]; an empty sequence's is its dFinal, or zero). With
/// \p Chunk > 0 each sequence's gradients are linearChunkedModelBackward's
/// with chunks of \p Chunk and \p Round instead. UserError for
/// linearVarlen's bad arguments and for declared full or per-query/key
/// token inputs.
LinearGrads linearVarlenBackward(const CompiledDefinition &Def,
                                 const LinearInputs &In,
                                 const std::vector<int64_t> &CuSeqlens,
                                 const std::optional<Tensor> &Initial,
                                 const Tensor &DO,
                                 const std::optional<Tensor> &DFinal,
                                 int64_t Chunk = 0,
                                 const RoundFn &Round = nullptr,
                                 unsigned Threads = 1);

/// The chunked algorithm exactly as the linear_chunk kernels compute it
/// (docs/linear.md), in double precision except that \p Round is applied
/// to every value the kernels keep in 16 bits: the modded q, k, v, the
/// state as an mma operand, the decay-masked chunk products, the decay-
/// scaled k (forward) and q (backward). With the identity it is exact; with
/// a dtype's rounding it is the tests' "plain low-precision
/// implementation". The output is not rounded (the caller does).
LinearOutputs linearChunkedModel(const CompiledDefinition &Def,
                                 const LinearInputs &In, int64_t Chunk,
                                 const RoundFn &Round, unsigned Threads = 1);

/// The backward of the same model: per chunk dq from the rounded state
/// before it, dk and dv from the rounded gradient of the state after it
/// (the products of linear_chunk_grads, here in scan order), the decay
/// gradient as a chunk-local reverse sum of q·dq − k·dk plus <S_out,
/// dS_out> per chunk (the kernel forms the same value as exp(G_last)·<H,
/// dH> + Σ k·dk_inter), and the mods' derivatives. Gradients are not
/// rounded.
LinearGrads linearChunkedModelBackward(const CompiledDefinition &Def,
                                       const LinearInputs &In,
                                       const Tensor &DO,
                                       const std::optional<Tensor> &DFinalState,
                                       int64_t Chunk, const RoundFn &Round,
                                       unsigned Threads = 1);

} // namespace attn::reference

#endif
