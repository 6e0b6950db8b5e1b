// The generated Variant members that classify a masked definition's blocks.
#ifndef ATTN_CODEGEN_MASKCLASSIFIER_H
#define ATTN_CODEGEN_MASKCLASSIFIER_H

#include "attn/analysis/MaskBounds.h"
#include "attn/codegen/CodeWriter.h"

namespace attn::codegen {

/// Writes, for a definition with a mask, the constants kMaskGrouping (0
/// shared, 1 per batch, 2 per batch·head), kMaskAnalysed and kMaskBounds
/// (how many inputs are bounded per block) and, when \p A is analysed, the
/// device functions the classification kernels call
/// (runtime/kernels/block_mask.cuh):
///  * mask_bound_by_key(i): bounded input i is per key (else per row);
///  * mask_bound_value(in, i, b, h, idx): its value at row or key idx;
///  * mask_block_class(in, b, h, q_lo, q_hi, kv_lo, kv_hi, lo, hi): the
///    block's class (0 empty, 1 partial, 2 full) from the box and the
///    inputs' bounds, by analyzeMask's interval rules
///    (runtime/kernels/mask_interval.cuh).
void emitMaskClassifier(CodeWriter &W, const ir::Graph &G,
                        const analysis::MaskAnalysis &A);

} // namespace attn::codegen

#endif
