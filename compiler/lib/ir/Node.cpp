// Node-kind tables generated from Nodes.def, and the space/type lattices.
#include "attn/ir/Node.h"

#include "llvm/ADT/StringSwitch.h"

#include <algorithm>

namespace attn::ir {

Node::Node(NodeKind K, Type T, Space S, llvm::ArrayRef<const Node *> Operands,
           const Node **Storage, unsigned Id)
    : Kind(K), Ty(T), Sp(S), NumOps(Operands.size()), Id(Id), Ops(Storage) {
  for (unsigned I = 0; I < NumOps; ++I) {
    Storage[I] = Operands[I];
    Depth = std::max(Depth, Operands[I]->getDepth() + 1);
  }
}

llvm::StringRef mnemonic(NodeKind K) {
  switch (K) {
#define ATTN_NODE(Name, Mnemonic, Arity)                                       \
  case NodeKind::Name:                                                         \
    return Mnemonic;
#include "attn/ir/Nodes.def"
  }
  return "?";
}

unsigned arity(NodeKind K) {
  switch (K) {
#define ATTN_NODE(Name, Mnemonic, Arity)                                       \
  case NodeKind::Name:                                                         \
    return Arity;
#include "attn/ir/Nodes.def"
  }
  return 0;
}

std::optional<NodeKind> kindFromMnemonic(llvm::StringRef Name) {
#define ATTN_NODE(Kind, Mnemonic, Arity)                                       \
  if (Name == Mnemonic)                                                        \
    return NodeKind::Kind;
#include "attn/ir/Nodes.def"
  return std::nullopt;
}

llvm::StringRef typeName(Type T) {
  switch (T) {
  case Type::F32:
    return "f32";
  case Type::I32:
    return "i32";
  case Type::Bool:
    return "i1";
  }
  return "?";
}

std::optional<Type> typeFromName(llvm::StringRef Name) {
  for (Type T : {Type::F32, Type::I32, Type::Bool})
    if (typeName(T) == Name)
      return T;
  return std::nullopt;
}

llvm::StringRef spaceName(Space S) {
  switch (S) {
  case Space::Const:
    return "const";
  case Space::Head:
    return "head";
  case Space::Row:
    return "row";
  case Space::Col:
    return "col";
  case Space::Tile:
    return "tile";
  case Space::Out:
    return "out";
  }
  return "?";
}

std::optional<Space> spaceFromName(llvm::StringRef Name) {
  for (Space S : {Space::Const, Space::Head, Space::Row, Space::Col,
                  Space::Tile, Space::Out})
    if (spaceName(S) == Name)
      return S;
  return std::nullopt;
}

llvm::StringRef spaceDescription(Space S) {
  switch (S) {
  case Space::Const:
    return "constant";
  case Space::Head:
    return "per-head";
  case Space::Row:
    return "per-row";
  case Space::Col:
    return "per-key";
  case Space::Tile:
    return "per-element";
  case Space::Out:
    return "per-output-feature (it depends on the accumulator o)";
  }
  return "?";
}

// Ranks of the chain const < head < {row, col} < tile; out stands apart.
static int rank(Space S) {
  switch (S) {
  case Space::Const:
    return 0;
  case Space::Head:
    return 1;
  case Space::Row:
  case Space::Col:
    return 2;
  case Space::Tile:
    return 3;
  case Space::Out:
    return 4;
  }
  return 0;
}

std::optional<Space> joinSpaces(Space A, Space B) {
  if (A == B)
    return A;
  if (A == Space::Out || B == Space::Out) {
    Space Other = A == Space::Out ? B : A;
    if (Other == Space::Col || Other == Space::Tile)
      return std::nullopt;
    return Space::Out;
  }
  if (rank(A) == 2 && rank(B) == 2) // row ⊔ col
    return Space::Tile;
  return rank(A) >= rank(B) ? A : B;
}

bool isPerRowOrCoarser(Space S) {
  return S == Space::Const || S == Space::Head || S == Space::Row;
}

llvm::StringRef reduceOpName(ReduceOp Op) {
  switch (Op) {
  case ReduceOp::Max:
    return "max";
  case ReduceOp::Sum:
    return "sum";
  case ReduceOp::AbsSum:
    return "abssum";
  }
  return "?";
}

std::optional<ReduceOp> reduceOpFromName(llvm::StringRef Name) {
  for (ReduceOp Op : {ReduceOp::Max, ReduceOp::Sum, ReduceOp::AbsSum})
    if (reduceOpName(Op) == Name)
      return Op;
  return std::nullopt;
}

static constexpr ParamKind AllParamKinds[] = {
    ParamKind::Score,  ParamKind::Scores,        ParamKind::Output,
    ParamKind::Rowscale, ParamKind::FinalRowscale, ParamKind::Probs,
    ParamKind::GradProbs, ParamKind::Doosum,     ParamKind::Index,
    ParamKind::Input,  ParamKind::HeadDim,       ParamKind::Element,
    ParamKind::Decay,  ParamKind::OtherRowscale};

llvm::StringRef paramKindName(ParamKind K) {
  switch (K) {
  case ParamKind::Score:
    return "score";
  case ParamKind::Scores:
    return "scores";
  case ParamKind::Output:
    return "acc";
  case ParamKind::Rowscale:
    return "rowscale";
  case ParamKind::FinalRowscale:
    return "final";
  case ParamKind::Probs:
    return "probs";
  case ParamKind::GradProbs:
    return "dprobs";
  case ParamKind::Doosum:
    return "doosum";
  case ParamKind::Index:
    return "index";
  case ParamKind::Input:
    return "input";
  case ParamKind::HeadDim:
    return "headdim";
  case ParamKind::Element:
    return "element";
  case ParamKind::Decay:
    return "decay";
  case ParamKind::OtherRowscale:
    return "rowscale_b";
  }
  return "?";
}

std::optional<ParamKind> paramKindFromName(llvm::StringRef Name) {
  for (ParamKind K : AllParamKinds)
    if (paramKindName(K) == Name)
      return K;
  return std::nullopt;
}

} // namespace attn::ir
