// IR nodes: immutable, hash-consed scalar expressions with a type and a space.
//
// IR semantics (docs/ir-semantics.md says the same at more length):
//  * A node denotes a family of scalars, one per point of its *space*:
//    const (one value), head (one per batch·head), row (one per query, or per
//    token in linear attention), col (one per key), tile (one per query·key,
//    or per token·feature in linear attention), out (one per query·value
//    feature, the output accumulator). Binary operations broadcast: their
//    space is the join of their operands' spaces (row ⊔ col = tile). Joining
//    tile or col with out has no meaning and is rejected.
//  * Types: f32 (real numbers; fp32 on the GPU, double in the reference
//    interpreter), i32 (indices), i1 (booleans). i32 op i32 stays i32 for
//    add/sub/mul/max/min/neg/abs/relu; div and every transcendental give f32;
//    mixing i32 and f32 gives f32. Booleans take part only in not/and/or and
//    as the condition of select.
//  * Floating point is IEEE: exp(-inf) = 0, log(0) = -inf, NaN propagates.
//    Passes never rewrite an expression in a way that changes a result for
//    inf or NaN operands (so x*0 is not folded to 0, nor x-x to 0).
//  * reduce max|sum|abssum runs over the *unmasked* keys of the current key
//    block; its identities are -inf, 0 and 0. Masked elements take no part in
//    reductions and contribute P = 0 to the output. A row with no unmasked key
//    in a block keeps its rowscales, and o_scale is 1, for that block; a row
//    with no unmasked key at all has O = 0 and every final rowscale -inf.
//  * max/min of a NaN and a number give the number (fmax/fmin); the gradient
//    of max goes to the larger operand (to the first one on a tie).
#ifndef ATTN_IR_NODE_H
#define ATTN_IR_NODE_H

#include "attn/ir/Types.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <iterator>
#include <optional>

namespace attn::ir {

/// The mnemonic of a node kind ("exp", "add", ...), as the printer writes it.
llvm::StringRef mnemonic(NodeKind K);
/// The number of operands a node of this kind has.
unsigned arity(NodeKind K);
/// The kind whose mnemonic is \p Name, if any.
std::optional<NodeKind> kindFromMnemonic(llvm::StringRef Name);

llvm::StringRef typeName(Type T);
std::optional<Type> typeFromName(llvm::StringRef Name);

llvm::StringRef spaceName(Space S);
std::optional<Space> spaceFromName(llvm::StringRef Name);
/// Words for error messages: "per-row", "per-element", ...
llvm::StringRef spaceDescription(Space S);
/// The space of a broadcast of \p A and \p B; nullopt where they do not meet
/// (tile or col with out).
std::optional<Space> joinSpaces(Space A, Space B);
/// True when a value of space \p S is constant along the key dimension
/// (const, head, row): what a rowscale must be.
bool isPerRowOrCoarser(Space S);

llvm::StringRef reduceOpName(ReduceOp Op);
std::optional<ReduceOp> reduceOpFromName(llvm::StringRef Name);

llvm::StringRef paramKindName(ParamKind K);
std::optional<ParamKind> paramKindFromName(llvm::StringRef Name);

/// Base of every node. Nodes are created only by a Graph, which uniques them:
/// two structurally equal nodes are the same pointer.
class Node {
public:
  NodeKind getKind() const { return Kind; }
  Type getType() const { return Ty; }
  Space getSpace() const { return Sp; }
  /// Creation order within the owning graph; stable for printing.
  unsigned getId() const { return Id; }
  /// The longest operand chain down to a leaf (0 for a leaf); bounded by
  /// MaxNodeDepth (attn/ir/Limits.h).
  unsigned getDepth() const { return Depth; }
  llvm::ArrayRef<const Node *> operands() const { return {Ops, NumOps}; }
  const Node *operand(unsigned I) const { return Ops[I]; }

protected:
  Node(NodeKind K, Type T, Space S, llvm::ArrayRef<const Node *> Operands,
       const Node **Storage, unsigned Id);

private:
  NodeKind Kind;
  Type Ty;
  Space Sp;
  unsigned NumOps;
  unsigned Id;
  unsigned Depth = 0;
  const Node *const *Ops;
};

class ConstNode : public Node {
public:
  double getValue() const { return Value; }
  static bool classof(const Node *N) { return N->getKind() == NodeKind::Const; }

private:
  friend class Graph;
  ConstNode(Type T, double V, unsigned Id)
      : Node(NodeKind::Const, T, Space::Const, {}, nullptr, Id), Value(V) {}
  double Value;
};

class ParamNode : public Node {
public:
  ParamKind getParamKind() const { return PKind; }
  llvm::StringRef getName() const { return Name; }
  static bool classof(const Node *N) { return N->getKind() == NodeKind::Param; }

private:
  friend class Graph;
  ParamNode(ParamKind PK, llvm::StringRef Name, Type T, Space S, unsigned Id)
      : Node(NodeKind::Param, T, S, {}, nullptr, Id), PKind(PK), Name(Name) {}
  ParamKind PKind;
  llvm::StringRef Name;
};

class UnaryNode : public Node {
public:
  static bool classof(const Node *N) { return isUnaryKind(N->getKind()); }

private:
  friend class Graph;
  using Node::Node;
};

/// Arithmetic, comparison and logic nodes with two operands.
class BinaryNode : public Node {
public:
  const Node *lhs() const { return operand(0); }
  const Node *rhs() const { return operand(1); }
  static bool classof(const Node *N) {
    return isBinaryKind(N->getKind()) || isCompareKind(N->getKind()) ||
           isLogicKind(N->getKind());
  }

private:
  friend class Graph;
  using Node::Node;
};

class SelectNode : public Node {
public:
  const Node *condition() const { return operand(0); }
  const Node *thenValue() const { return operand(1); }
  const Node *elseValue() const { return operand(2); }
  static bool classof(const Node *N) { return N->getKind() == NodeKind::Select; }

private:
  friend class Graph;
  using Node::Node;
};

class ReduceNode : public Node {
public:
  ReduceOp getOp() const { return Op; }
  static bool classof(const Node *N) { return N->getKind() == NodeKind::Reduce; }

private:
  friend class Graph;
  ReduceNode(ReduceOp Op, const Node *Operand, const Node **Storage,
             unsigned Id)
      : Node(NodeKind::Reduce, Type::F32, Space::Row, {Operand}, Storage, Id),
        Op(Op) {}
  ReduceOp Op;
};

} // namespace attn::ir

#endif
