// A normal form for derivative expressions (sums of products of powers,
// exponentials merged), used to recognise the multiples, cancellations and
// substitutions that deriving a backward needs.
#ifndef ATTN_TRANSFORMS_AUTODIFFALGEBRA_H
#define ATTN_TRANSFORMS_AUTODIFFALGEBRA_H

#include "attn/ir/Graph.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

#include <functional>
#include <map>
#include <memory>

namespace attn::transforms {

using NodeMap = llvm::DenseMap<const ir::Node *, const ir::Node *>;

/// Rebuilds the DAG of \p Root with every node of \p Map replaced by its
/// value (by pointer, before looking at operands).
const ir::Node *replaceNodes(ir::Graph &G, const ir::Node *Root,
                             const NodeMap &Map);

/// The normal form: Σ c·Π aᵏ·exp(E) over *atoms* a (parameters, reductions
/// and every node kind other than + - * / neg exp exp2 log log2, with their
/// operands in normal form), integer powers k, and at most one exponential
/// per product. exp(x)·exp(y) = exp(x + y), exp(k·log a + x) = aᵏ·exp(x),
/// log(c·exp(x)) = log c + x, a sum reduction is linear in its per-row
/// factors, and like terms are collected.
///
/// The form is for derivatives on rows where every value is finite and in
/// its function's domain (the rows a backward reaches): it takes 0·x = 0,
/// x − x = 0, x/x = 1, max(x, −inf) = x and min(x, inf) = x, which the
/// simplify pass may not. Equal normal
/// forms give the same node (the graph uniques them), so comparing
/// canonical(A) == canonical(B) decides equality of the forms.
class Algebra {
public:
  explicit Algebra(ir::Graph &G);
  ~Algebra();
  ir::Graph &graph() { return G; }

  /// \p N in normal form, as a node of the graph (the constant 0 for zero;
  /// nullptr stays nullptr).
  const ir::Node *canonical(const ir::Node *N);
  bool isZero(const ir::Node *N) { return !N || canonical(N) == Zero; }
  /// canonical(replaceNodes(canonical(N), Map)), repeated while it changes
  /// (a replacement may bring in nodes that are themselves replaced).
  const ir::Node *substitute(const ir::Node *N, const NodeMap &Map);
  /// \p A / \p B in normal form.
  const ir::Node *divide(const ir::Node *A, const ir::Node *B);
  /// When canonical(\p N) is a single atom (1·a¹), that atom.
  const ir::Node *asAtom(const ir::Node *N);

  /// Rewrites \p N term by term as Pᵏ·Q where \p Unit (a single product,
  /// e.g. forward's exp(s − lse)) divides the term k times and each
  /// division lowers \p Cost (how much of the term still depends on what
  /// \p P stands for); \p P is the node that stands for Unit.
  const ir::Node *factorUnit(const ir::Node *N, const ir::Node *Unit,
                             const ir::Node *P,
                             const std::function<bool(const ir::Node *)> &Uses);

  struct Mono;
  struct Poly;

private:
  const Poly &poly(const ir::Node *N);
  Poly compute(const ir::Node *N);
  Poly atom(const ir::Node *N);
  Poly expOf(const Poly &Arg);
  Poly logOf(const Poly &Arg);
  Poly reduceOf(const ir::ReduceNode *R);
  const ir::Node *build(const Poly &P);
  const ir::Node *buildTerm(const Mono &M, double Coef);
  Poly mul(const Poly &A, const Poly &B);
  Mono mulMono(const Mono &A, const Mono &B, int SignB);
  Poly inverse(const Poly &A, const ir::Node *Original);
  const ir::Node *expArg(const Poly &Arg);

  ir::Graph &G;
  const ir::Node *Zero;
  llvm::DenseMap<const ir::Node *, std::unique_ptr<Poly>> Memo;
};

} // namespace attn::transforms

#endif
