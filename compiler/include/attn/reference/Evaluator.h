// Forward-mode evaluation of IR functions in double precision.
#ifndef ATTN_REFERENCE_EVALUATOR_H
#define ATTN_REFERENCE_EVALUATOR_H

#include "attn/ir/Graph.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <functional>
#include <memory>
#include <vector>

namespace attn::reference {

/// A value and its derivative with respect to one chosen input (forward-mode
/// automatic differentiation). The local derivative rules live with the
/// evaluation rules in Evaluator.cpp, one per node kind.
struct Dual {
  double V = 0.0;
  double D = 0.0;
};

/// The values of a node at the points of a row: one entry for const, head
/// and row values (broadcast), one per key of the block for col and tile
/// values, one per output feature for out values.
using Values = llvm::SmallVector<Dual, 16>;

/// Evaluates IR nodes for one query row (or one token) with memoisation.
/// The binder supplies each parameter's values; \p Active marks the keys of
/// the block that take part in reductions (masked keys do not).
class Evaluator {
public:
  using Binder = std::function<Values(const ir::ParamNode &)>;
  Evaluator(Binder Bind, std::vector<bool> Active)
      : Bind(Bind), Active(std::move(Active)) {}

  const Values &eval(const ir::Node *N);
  /// The value at point \p I of \p N (broadcasting a single value).
  Dual at(const ir::Node *N, size_t I) {
    const Values &Vs = eval(N);
    return Vs.size() == 1 ? Vs[0] : Vs[I];
  }

private:
  Values compute(const ir::Node *N);
  Binder Bind;
  std::vector<bool> Active;
  // Boxed so that references stay valid while the map grows.
  llvm::DenseMap<const ir::Node *, std::unique_ptr<Values>> Memo;
};

/// The local rules, exposed for tests: value and derivative of each
/// elementwise kind.
Dual applyUnary(ir::NodeKind K, Dual X);
Dual applyBinary(ir::NodeKind K, Dual A, Dual B);

} // namespace attn::reference

#endif
