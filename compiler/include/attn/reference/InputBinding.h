// Custom-input values for the reference: validation and per-row binding.
#ifndef ATTN_REFERENCE_INPUTBINDING_H
#define ATTN_REFERENCE_INPUTBINDING_H

#include "attn/ir/Graph.h"
#include "attn/reference/Evaluator.h"
#include "attn/reference/Tensor.h"

namespace attn::reference {

/// The shape a custom input of class \p S must have.
std::vector<int64_t> expectedInputShape(ir::InputShape S, int64_t B,
                                        int64_t H, int64_t Sq, int64_t Skv);

/// The flat offset in \p T, an input of class \p S, of the element that
/// (b, h, query i, key j) reads.
int64_t inputOffset(const Tensor &T, ir::InputShape S, int64_t B, int64_t H,
                    int64_t I, int64_t J);

/// UserError for a declared input with no value ("custom input 'x' is
/// declared but no value was supplied"), a value of the wrong shape, a
/// value for an input that is not declared, or an int32 input holding a
/// value that is not a whole number in int32's range.
void validateInputValues(const ir::Graph &G, const InputValues &Values,
                         int64_t B, int64_t H, int64_t Sq, int64_t Skv);

/// Draws a value for every declared input, uniformly in its sample range.
/// An int32 input gets whole numbers of its range, non-decreasing along the
/// sequence for a per-token, per-row or per-key input (document ids come
/// as runs). The int32 per-token inputs with the same range share one id
/// sequence per batch entry (each takes its length's prefix), so that
/// `doc_q == doc_k` holds near the diagonal and fails away from it, as in
/// real use.
InputValues sampleInputs(const ir::Graph &G, std::mt19937_64 &Rng, int64_t B,
                         int64_t H, int64_t Sq, int64_t Skv);

/// The values of input \p Name at row \p I of (\p B, \p H): one value, or
/// one per key in [C0, C1) for per-key and full inputs.
Values bindInput(const ir::Graph &G, const InputValues &Values,
                 llvm::StringRef Name, int64_t B, int64_t H, int64_t I,
                 int64_t C0, int64_t C1);

} // namespace attn::reference

#endif
