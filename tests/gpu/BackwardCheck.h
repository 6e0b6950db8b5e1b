// The GPU backward test's second opinion: a per-element double-precision
// evaluation of a definition's backward that gives, in one pass, the exact
// gradients and those of a plain low-precision implementation (the
// FlashAttention tolerance rule's yardstick), custom-input gradients
// included.
#ifndef ATTN_TESTS_GPU_BACKWARDCHECK_H
#define ATTN_TESTS_GPU_BACKWARDCHECK_H

#include "attn/Pipeline.h"
#include "attn/reference/Attention.h"

#include <functional>
#include <map>
#include <string>

namespace attn::gputest {

/// dq, dk, dv and each custom-input gradient d_<name> ([] for a scalar
/// input, [H] for a per-head one), as [B,H,S,D] tensors like the reference.
struct Gradients {
  reference::Tensor DQ, DK, DV;
  std::map<std::string, reference::Tensor> Inputs;
};

struct BackwardCheck {
  /// Exact: P, dS and sums in double, doosum from the exact output.
  Gradients Exact;
  /// Plain: what an implementation in the dtype computes. P and dS (w.r.t.
  /// the raw score) rounded by Round before the products they feed, dS
  /// rounded before it multiplies ∂score_mod/∂input, doosum from the output
  /// rounded by Round. The sums are exact; the caller rounds the results.
  Gradients Plain;
  /// Plain's doosum alone: doosum from the rounded output, nothing else
  /// rounded. Its error is the part of plain's that comes from the output's
  /// rounding; on a gradient of a few elements (a scalar or per-head input)
  /// the dS roundings can cancel that part by chance, so the test's
  /// yardstick there is the larger of the two errors.
  Gradients PlainDoosum;
};

/// Evaluates score_mod (with its derivative), mask_mod, forward and
/// backward of \p Def for every element, with the final rowscales and the
/// output of \p Fwd (the reference forward of \p In). Only scalar and
/// per-head inputs may require gradients. Query rows are shared out over
/// \p Threads threads.
BackwardCheck checkBackward(const CompiledDefinition &Def,
                            const reference::AttentionInputs &In,
                            const reference::AttentionOutputs &Fwd,
                            const reference::Tensor &DO,
                            const std::function<double(double)> &Round,
                            unsigned Threads = 1);

} // namespace attn::gputest

#endif
