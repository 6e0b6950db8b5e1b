// Automatic differentiation over the IR: local derivative rules, tangents,
// score_mod gradients, and the online function's backward where the user
// left it out.
#ifndef ATTN_TRANSFORMS_AUTODIFF_H
#define ATTN_TRANSFORMS_AUTODIFF_H

#include "attn/ir/Graph.h"

#include "llvm/ADT/DenseMap.h"

#include <string>
#include <vector>

namespace attn::transforms {

/// ∂N/∂(operand \p Operand of N) as a node of \p G, or nullptr where that
/// derivative is zero everywhere. One rule per node kind (AutodiffRules.cpp,
/// a switch with no default); docs/ir-semantics.md lists them. Rules are
/// written in terms of N's own value where that is natural (exp' = N,
/// tanh' = 1 - N², sigmoid' = N(1 - N), relu' = [N > 0]), so that a
/// derivative of forward() can be recognised as a multiple of P.
/// Conventional subgradients where an op is not differentiable: abs' and
/// relu' are 0 at 0; max/min send the whole gradient to the operand they
/// return (the first one on a tie; the number, not the NaN); comparisons,
/// logic, and every i32 or boolean value have zero derivative.
/// Reduce: sum → 1, abssum → sign(x_j), max → [x_j == R] (every tied key).
const ir::Node *localDerivative(ir::Graph &G, const ir::Node *N,
                                unsigned Operand);

/// Where a tangent starts: node → its tangent (nullptr = zero). A node in
/// the map is not looked through.
using TangentSeeds = llvm::DenseMap<const ir::Node *, const ir::Node *>;

/// Forward-mode derivative of \p Root: Σ over the paths from a seeded node
/// to Root of the product of local derivatives, built symbolically in \p G.
/// Parameters and constants that are not seeded have tangent zero; so do
/// i32 and boolean nodes. A reduction that is not seeded gets the tangent
/// of its operand reduced (sum of tangents; of sign·tangent for abssum; the
/// tangent at the maximal keys for max). Returns nullptr for zero.
const ir::Node *tangent(ir::Graph &G, const ir::Node *Root,
                        const TangentSeeds &Seeds);

/// The custom inputs that require a gradient, in declaration order (the
/// order of score_mod_input_grad's results and of Variant::input_grads).
std::vector<const ir::InputDecl *> gradInputDecls(const ir::Graph &G);

/// Adds (or rebuilds) `score_mod_grad` with result `dscore` =
/// ∂score_mod/∂score, and, when some input requires a gradient,
/// `score_mod_input_grad` with one result `d_<input>` per such input =
/// ∂score_mod/∂input, all at (score, b, h, q_idx, kv_idx, inputs).
/// UserError when mask_mod reads an input that requires a gradient;
/// NotSupportedYet when an online function does.
void addScoreModGradients(ir::Graph &G);

/// Derives the online function's backward from `forward` and the final
/// rowscales (docs/ir-semantics.md, "Derived backward") and adds it as the
/// function `backward` (params dp, p, final rowscales, doosum; result
/// dscores), exactly as a user-written one, marking decls().HasBackward and
/// BackwardDerived. Throws CannotDerive (a UserError) naming the
/// definition, the final rowscale and the reason, ending "write
/// OnlineFunc::backward", when the derivation is impossible. The graph must
/// have passed verify and row-reduce analysis and have no backward yet.
void deriveBackward(ir::Graph &G);

/// The pipeline pass (transformer-style definitions): addScoreModGradients,
/// then deriveBackward when the user wrote no backward. A derivation that
/// fails leaves the graph without a backward and records the message in
/// decls().BackwardUnavailable: the forward still compiles, and asking for
/// the backward raises that UserError (requireBackward).
void autodiff(ir::Graph &G);

/// Throws the UserError recorded by autodiff (or a generic one) when \p G
/// has no backward function.
void requireBackward(const ir::Graph &G);

} // namespace attn::transforms

#endif
