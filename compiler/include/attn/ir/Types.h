// The IR's enums and the declaration of a custom input, without the node
// classes: what the public DSL headers (attn/dsl/Symbol.h, Definition.h)
// name. attn/ir/Node.h and attn/ir/Graph.h build on it.
#ifndef ATTN_IR_TYPES_H
#define ATTN_IR_TYPES_H

#include <cstdint>
#include <iterator>
#include <string>

namespace attn::ir {

/// The groups of Nodes.def, in its order.
enum class KindGroup : uint8_t {
  Leaf,
  Unary,
  Binary,
  Compare,
  Logic,
  Select,
  Reduce
};

namespace detail {
/// The group of every kind, indexed by the kind's value; the enum below
/// derives its First/Last markers from it so they cannot drift from the .def.
inline constexpr KindGroup KindGroupTable[] = {
#define ATTN_LEAF(Name, Mnemonic) KindGroup::Leaf,
#define ATTN_UNARY(Name, Mnemonic) KindGroup::Unary,
#define ATTN_BINARY(Name, Mnemonic) KindGroup::Binary,
#define ATTN_COMPARE(Name, Mnemonic) KindGroup::Compare,
#define ATTN_LOGIC(Name, Mnemonic) KindGroup::Logic,
#define ATTN_SELECT(Name, Mnemonic) KindGroup::Select,
#define ATTN_REDUCE(Name, Mnemonic) KindGroup::Reduce,
#include "attn/ir/Nodes.def"
};
constexpr uint8_t firstOfGroup(KindGroup G) {
  for (uint8_t I = 0; I < std::size(KindGroupTable); ++I)
    if (KindGroupTable[I] == G)
      return I;
  return 0;
}
constexpr uint8_t lastOfGroup(KindGroup G) {
  uint8_t Last = 0;
  for (uint8_t I = 0; I < std::size(KindGroupTable); ++I)
    if (KindGroupTable[I] == G)
      Last = I;
  return Last;
}
/// Every kind between a group's first and last member belongs to it (and the
/// group is not empty), so the range checks below are exact.
constexpr bool groupIsContiguous(KindGroup G) {
  uint8_t First = firstOfGroup(G), Last = lastOfGroup(G);
  if (KindGroupTable[First] != G)
    return false;
  for (uint8_t I = First; I <= Last; ++I)
    if (KindGroupTable[I] != G)
      return false;
  return true;
}
} // namespace detail

/// The node kinds, one per entry of Nodes.def, followed by a First/Last
/// marker per group (aliases of member kinds, so switches need no case for
/// them).
enum class NodeKind : uint8_t {
#define ATTN_NODE(Name, Mnemonic, Arity) Name,
#include "attn/ir/Nodes.def"
#define ATTN_KIND_GROUP_MARKERS(Group)                                         \
  First##Group = detail::firstOfGroup(KindGroup::Group),                       \
  Last##Group = detail::lastOfGroup(KindGroup::Group),
  ATTN_KIND_GROUP_MARKERS(Leaf) ATTN_KIND_GROUP_MARKERS(Unary)
  ATTN_KIND_GROUP_MARKERS(Binary) ATTN_KIND_GROUP_MARKERS(Compare)
  ATTN_KIND_GROUP_MARKERS(Logic) ATTN_KIND_GROUP_MARKERS(Select)
  ATTN_KIND_GROUP_MARKERS(Reduce)
#undef ATTN_KIND_GROUP_MARKERS
};

/// How many node kinds Nodes.def lists.
inline constexpr unsigned NumNodeKinds = std::size(detail::KindGroupTable);

static_assert(detail::groupIsContiguous(KindGroup::Leaf) &&
                  detail::groupIsContiguous(KindGroup::Unary) &&
                  detail::groupIsContiguous(KindGroup::Binary) &&
                  detail::groupIsContiguous(KindGroup::Compare) &&
                  detail::groupIsContiguous(KindGroup::Logic) &&
                  detail::groupIsContiguous(KindGroup::Select) &&
                  detail::groupIsContiguous(KindGroup::Reduce),
              "Nodes.def must list the kinds of a group next to each other: "
              "the group predicates are range checks");

/// The group of a kind, as Nodes.def lists it.
constexpr KindGroup kindGroup(NodeKind K) {
  return detail::KindGroupTable[static_cast<uint8_t>(K)];
}

/// Kind-group predicates: range checks on the markers above.
constexpr bool isLeafKind(NodeKind K) {
  return K >= NodeKind::FirstLeaf && K <= NodeKind::LastLeaf;
}
constexpr bool isUnaryKind(NodeKind K) {
  return K >= NodeKind::FirstUnary && K <= NodeKind::LastUnary;
}
constexpr bool isBinaryKind(NodeKind K) {
  return K >= NodeKind::FirstBinary && K <= NodeKind::LastBinary;
}
constexpr bool isCompareKind(NodeKind K) {
  return K >= NodeKind::FirstCompare && K <= NodeKind::LastCompare;
}
constexpr bool isLogicKind(NodeKind K) {
  return K >= NodeKind::FirstLogic && K <= NodeKind::LastLogic;
}

/// The type of a node's values (attn/ir/Node.h says what each means).
enum class Type : uint8_t { F32, I32, Bool };

/// Where a value varies: one per point of its space (attn/ir/Node.h).
enum class Space : uint8_t { Const, Head, Row, Col, Tile, Out };

/// The reductions over the keys of a block (get_reduce).
enum class ReduceOp : uint8_t { Max, Sum, AbsSum };

/// What a parameter stands for. Each DSL function has a fixed set of them.
enum class ParamKind : uint8_t {
  Score,         ///< raw q·k before score_mod
  Scores,        ///< scores after score_mod (online_fwd, forward)
  Output,        ///< the output accumulator o (epilogue)
  Rowscale,      ///< an online rowscale
  FinalRowscale, ///< a final rowscale (forward, backward)
  Probs,         ///< P, the result of forward (backward)
  GradProbs,     ///< dP = dO·Vᵀ (backward)
  Doosum,        ///< rowsum(dO∘O) (backward)
  Index,         ///< b, h, q_idx, kv_idx, t
  Input,         ///< a user-declared custom input
  HeadDim,       ///< the problem's head dimension D (compile-time)
  Element,       ///< an element of q, k or v (linear-attention mods)
  Decay,         ///< the per-token decay input (decay_mod)
  OtherRowscale, ///< an online rowscale of the second state (combine)
};

/// Transformer-style (scores, online function) or linear (chunked state).
enum class DefinitionKind : uint8_t { Transformer, Linear };

/// The shape class of a custom input, as the seeds' CustomIO declares it.
enum class InputShape : uint8_t {
  Scalar,        ///< one runtime value (a kernel parameter; no recompilation)
  PerHead,       ///< [heads]
  PerRow,        ///< [batch, heads, seq_len]
  PerKey,        ///< [batch, heads, seq_len_kv]
  Full,          ///< [batch, heads, seq_len, seq_len_kv]
  PerQueryToken, ///< [batch, seq_len], shared by all heads
  PerKeyToken,   ///< [batch, seq_len_kv], shared by all heads
};

/// The element type of a custom input's values.
enum class InputType : uint8_t {
  F32, ///< float32 (the default)
  I32, ///< int32: ids, lengths, offsets; compared without float conversion
};

/// A custom input as the definition declares it (CustomInputs::declare).
struct InputDecl {
  std::string Name;
  InputShape Shape;
  /// The range `attnc check` draws test values from (uniformly; for an i32
  /// input, whole numbers in it).
  double SampleLo = -1.0, SampleHi = 1.0;
  /// The user asked for its gradient (CustomInputs::requiresGrad): the
  /// backward computes d_<name> through score_mod.
  bool RequiresGrad = false;
  InputType Elem = InputType::F32;
};

} // namespace attn::ir

#endif
