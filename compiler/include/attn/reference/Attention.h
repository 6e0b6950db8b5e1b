// Reference (double-precision) transformer-style attention from the IR:
// the online algorithm over key blocks, the direct definition, and the
// gradient through the user's backward.
#ifndef ATTN_REFERENCE_ATTENTION_H
#define ATTN_REFERENCE_ATTENTION_H

#include "attn/Pipeline.h"
#include "attn/analysis/Merge.h"
#include "attn/reference/Tensor.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace attn::reference {

/// q [B,H,Sq,D], k [B,Hkv,Skv,D], v [B,Hkv,Skv,DV] (Hkv divides H), and the
/// custom inputs. MaskedRows (optional, length Sq) masks whole query rows
/// on top of mask_mod, to exercise the fully-masked-row rule.
struct AttentionInputs {
  Tensor Q, K, V;
  InputValues Inputs;
  std::vector<bool> MaskedRows;
  /// Optional rounding of P before it multiplies v in attentionOnline: a
  /// "plain" low-precision implementation for the FlashAttention tolerance
  /// rule (P rounded to fp16/bf16 as a kernel feeds it to the tensor cores).
  std::function<double(double)> RoundProbs;
  /// Added to the query row's index and to the batch index where score_mod
  /// and mask_mod read q_idx and b: a sequence of a packed variable-length
  /// batch run as a dense call of one batch (reference/Varlen.h).
  int64_t QIndexOffset = 0;
  int64_t BatchIndexOffset = 0;
  /// Added to the key's index where score_mod and mask_mod read kv_idx: a
  /// part of the keys run alone (a partial result, merged by
  /// analysis::mergeResults). Per-key inputs are the part's own (sliced
  /// like k).
  int64_t KvIndexOffset = 0;
};

/// o [B,H,Sq,DV] and each final rowscale [B,H,Sq].
struct AttentionOutputs {
  Tensor O;
  std::map<std::string, Tensor> Finals;
};

struct AttentionGrads {
  Tensor DQ, DK, DV;
  /// d_<input> for each custom input that requires a gradient, by name, in
  /// the input's own shape: Σ over the unmasked (b, h, i, j) that read it of
  /// dS_ij · ∂score_mod/∂input (dS the gradient of the modified score).
  std::map<std::string, Tensor> DInputs;
};

/// How much of a problem mask_mod masks (AttentionInputs::MaskedRows not
/// counted): elements (b, h, i, j) and rows (b, h, i) with no key left.
struct MaskStats {
  int64_t Elements = 0, MaskedElements = 0;
  int64_t Rows = 0, FullyMaskedRows = 0;
  double maskedFraction() const {
    return Elements ? double(MaskedElements) / double(Elements) : 0.0;
  }
  double fullyMaskedRowFraction() const {
    return Rows ? double(FullyMaskedRows) / double(Rows) : 0.0;
  }
};
MaskStats attentionMaskStats(const CompiledDefinition &Def,
                             const AttentionInputs &In);

/// UserError unless the tensors and custom inputs match the definition:
/// ranks, matching dims, every declared input supplied with its shape.
void validateAttentionInputs(const ir::Graph &G, const AttentionInputs &In);

/// The online algorithm as a kernel runs it: key blocks of \p BlockN keys
/// (0 = one block of all keys), online_fwd per block, then the epilogue.
AttentionOutputs attentionOnline(const CompiledDefinition &Def,
                                 const AttentionInputs &In, int64_t BlockN);

/// The online algorithm run separately over the parts [Bounds[p],
/// Bounds[p+1]) of the keys (each part one block, from the declared
/// initial rowscales), the parts' states merged in order by \p Merge's rule
/// (analysis::mergeStates), then the epilogue: what a split-KV kernel
/// computes. UserError unless \p Bounds rise from 0 to seq_kv;
/// InternalError for MergeKind::None.
AttentionOutputs attentionSplitMerged(const CompiledDefinition &Def,
                                      const AttentionInputs &In,
                                      const std::vector<int64_t> &Bounds,
                                      const analysis::MergeInfo &Merge);

/// The direct definition: final rowscales from one block of all keys, then
/// P = forward(scores, final rowscales) and o = P·v.
AttentionOutputs attentionDirect(const CompiledDefinition &Def,
                                 const AttentionInputs &In);

/// dq, dk, dv (and the custom-input gradients) of L = sum(o ∘ dO) through
/// the definition's backward (written or derived) and the chain rule
/// through score_mod, with the symbolic score_mod_grad and
/// score_mod_input_grad the kernels use. UserError if the definition has
/// no backward (the autodiff pass's reason when it could not derive one).
AttentionGrads attentionBackward(const CompiledDefinition &Def,
                                 const AttentionInputs &In, const Tensor &DO);

} // namespace attn::reference

#endif
