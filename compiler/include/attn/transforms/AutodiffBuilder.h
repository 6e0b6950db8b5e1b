// Building derivative expressions: graph builders where nullptr is an exact
// zero, so that derivatives that vanish leave no x*0 behind.
#ifndef ATTN_TRANSFORMS_AUTODIFFBUILDER_H
#define ATTN_TRANSFORMS_AUTODIFFBUILDER_H

#include "attn/Error.h"
#include "attn/ir/Graph.h"

namespace attn::transforms {

/// A derivation that cannot go on (a reduction of a per-row tangent, a
/// backward the kernel could not compute). Raised as a UserError when it
/// reaches the user; the autodiff pass words it for the definition.
class CannotDerive : public UserError {
public:
  using UserError::UserError;
};

/// Builders over \p G in which nullptr stands for an exact zero and the
/// constant 1 is an identity: derivative expressions stay as small as the
/// rules make them. Everything else goes to the graph's own builders.
/// A constant 0 operand of a product is taken as zero too: derivative
/// graphs never propagate inf*0 from a factor that is identically zero.
class DerivBuilder {
public:
  explicit DerivBuilder(ir::Graph &G) : G(G) {}
  ir::Graph &graph() { return G; }

  const ir::Node *c(double V) { return G.constant(V); }
  const ir::Node *add(const ir::Node *A, const ir::Node *B);
  const ir::Node *sub(const ir::Node *A, const ir::Node *B);
  const ir::Node *mul(const ir::Node *A, const ir::Node *B);
  /// A / B; B must not be zero.
  const ir::Node *div(const ir::Node *A, const ir::Node *B);
  const ir::Node *neg(const ir::Node *A);
  /// select(Cond, A, B) with nullptr branches as 0; nullptr when both are.
  const ir::Node *select(const ir::Node *Cond, const ir::Node *A,
                         const ir::Node *B);
  /// sign(X): 1, -1, or 0 at 0 and NaN (abs's derivative).
  const ir::Node *sign(const ir::Node *X);
  /// A node of any kind over operands (G.binary / G.unary).
  const ir::Node *binary(ir::NodeKind K, const ir::Node *A,
                         const ir::Node *B);
  const ir::Node *unary(ir::NodeKind K, const ir::Node *A);

private:
  ir::Graph &G;
};

} // namespace attn::transforms

#endif
