// Building blocks a definition would otherwise copy: the online softmax,
// the everyday masks and the common score_mods, as DSL values.
#ifndef ATTN_DSL_LIBRARY_H
#define ATTN_DSL_LIBRARY_H

#include "attn/dsl/Definition.h"

#include <memory>
#include <string>

namespace attn::dsl {

/// The FlashAttention online softmax: a running max `m` and a running sum
/// `r` per row, the final rowscale `lse` = log(r) + m. With
/// \p WrittenBackward its backward is written, dS = (dP − doosum)·P;
/// without, the autodiff pass derives the same from `forward` (a definition
/// with learnable custom inputs needs no more than that).
std::shared_ptr<const OnlineFunc> onlineSoftmax(bool WrittenBackward = true);

/// Masks (FlexAttention's everyday ones). Each reads only q_idx and kv_idx
/// and the inputs it names, so the mask analysis classifies its blocks from
/// block bounds (`attnc show` says so). A mask that names an input needs the
/// definition to declare it: `def.inputs.declare("prefix_len",
/// InputShape::Scalar, InputType::I32)`.
namespace masks {
/// q_idx >= kv_idx.
MaskMod causal();
/// Causal within the last \p Window keys: q_idx >= kv_idx and
/// q_idx − kv_idx < Window. UserError unless Window >= 1.
MaskMod slidingWindow(long long Window);
/// Prefix-LM: bidirectional over the first P keys, causal after; P the
/// scalar input \p PrefixInput (an int32 scalar, read at run time).
MaskMod prefixLm(const std::string &PrefixInput);
/// Causal within documents: ids per query token and per key token
/// (\p QueryIds, \p KeyIds: int32 PerQueryToken / PerKeyToken inputs, or
/// float PerRow / PerKey ones) must be equal.
MaskMod document(const std::string &QueryIds, const std::string &KeyIds);
/// Causal within chunks of C tokens, C the int32 scalar input
/// \p ChunkInput: floordiv(q_idx, C) == floordiv(kv_idx, C).
MaskMod chunked(const std::string &ChunkInput);
/// Keeps an element where both masks keep it.
MaskMod both(MaskMod A, MaskMod B);
/// Keeps an element where either mask keeps it.
MaskMod either(MaskMod A, MaskMod B);
} // namespace masks

/// score_mods. Each is a function of the score as the previous one left it,
/// so they chain: `then(scaled(), softcap(30))`.
namespace score_mods {
/// score / sqrt(D), D the head dimension.
ScoreMod scaled();
/// Cap · tanh(score / Cap). UserError unless Cap is finite and > 0.
ScoreMod softcap(double Cap);
/// ALiBi: score + slope_h · (kv_idx − q_idx), the slopes the PerHead input
/// \p SlopesInput (learnable if the definition declares it so).
ScoreMod alibi(const std::string &SlopesInput);
/// \p Second applied to what \p First returns.
ScoreMod then(ScoreMod First, ScoreMod Second);
} // namespace score_mods

} // namespace attn::dsl

#endif
