// Graph: node uniquing, typed/spaced builders, functions and declarations.
#include "attn/ir/Graph.h"

#include "attn/Error.h"
#include "attn/ir/Limits.h"
#include "attn/ir/Printer.h"

#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Casting.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

namespace attn::ir {

/// The structural identity of a node: equal keys mean the same node.
struct NodeKey {
  NodeKey(NodeKind K, Type T, Space S) : Kind(K), Ty(T), Sp(S) {}
  NodeKind Kind;
  Type Ty;
  Space Sp;
  const Node *Ops[3] = {nullptr, nullptr, nullptr};
  uint64_t Attr = 0; ///< const bits, reduce op or param kind
  llvm::StringRef Name;
};

static uint64_t bitsOf(double V) {
  if (std::isnan(V))
    V = std::numeric_limits<double>::quiet_NaN(); // one NaN for uniquing
  uint64_t Bits;
  std::memcpy(&Bits, &V, sizeof Bits);
  return Bits;
}

static NodeKey keyOf(const Node *N) {
  NodeKey K{N->getKind(), N->getType(), N->getSpace()};
  for (unsigned I = 0; I < N->operands().size(); ++I)
    K.Ops[I] = N->operand(I);
  if (auto *C = llvm::dyn_cast<ConstNode>(N))
    K.Attr = bitsOf(C->getValue());
  else if (auto *P = llvm::dyn_cast<ParamNode>(N)) {
    K.Attr = static_cast<uint64_t>(P->getParamKind());
    K.Name = P->getName();
  } else if (auto *R = llvm::dyn_cast<ReduceNode>(N))
    K.Attr = static_cast<uint64_t>(R->getOp());
  return K;
}

static bool keysEqual(const NodeKey &A, const NodeKey &B) {
  return A.Kind == B.Kind && A.Ty == B.Ty && A.Sp == B.Sp &&
         A.Ops[0] == B.Ops[0] && A.Ops[1] == B.Ops[1] && A.Ops[2] == B.Ops[2] &&
         A.Attr == B.Attr && A.Name == B.Name;
}

struct Graph::KeyInfo {
  static const Node *getEmptyKey() {
    return llvm::DenseMapInfo<const Node *>::getEmptyKey();
  }
  static const Node *getTombstoneKey() {
    return llvm::DenseMapInfo<const Node *>::getTombstoneKey();
  }
  static unsigned getHashValue(const NodeKey &K) {
    return static_cast<unsigned>(llvm::hash_combine(
        static_cast<unsigned>(K.Kind), static_cast<unsigned>(K.Ty),
        static_cast<unsigned>(K.Sp), K.Ops[0], K.Ops[1], K.Ops[2], K.Attr,
        K.Name));
  }
  static unsigned getHashValue(const Node *N) { return getHashValue(keyOf(N)); }
  static bool isSpecial(const Node *N) {
    return N == getEmptyKey() || N == getTombstoneKey();
  }
  static bool isEqual(const NodeKey &K, const Node *N) {
    return !isSpecial(N) && keysEqual(K, keyOf(N));
  }
  static bool isEqual(const Node *A, const Node *B) {
    if (A == B)
      return true;
    if (isSpecial(A) || isSpecial(B))
      return false;
    return keysEqual(keyOf(A), keyOf(B));
  }
};

namespace {
/// The live graphs by serial (see Graph::fromSerial), and the last serial
/// handed out. Never destroyed, so that a graph destroyed during static
/// destruction still finds it.
struct LiveGraphs {
  std::mutex Mutex;
  uint64_t LastSerial = 0;
  llvm::DenseMap<uint64_t, Graph *> BySerial;
};
LiveGraphs &liveGraphs() {
  static LiveGraphs *L = new LiveGraphs;
  return *L;
}
} // namespace

Graph::Graph()
    : Uniquer(std::make_unique<llvm::DenseSet<const Node *, KeyInfo>>()) {
  LiveGraphs &L = liveGraphs();
  std::lock_guard<std::mutex> Lock(L.Mutex);
  Serial = ++L.LastSerial;
  L.BySerial[Serial] = this;
}

Graph::~Graph() {
  LiveGraphs &L = liveGraphs();
  std::lock_guard<std::mutex> Lock(L.Mutex);
  L.BySerial.erase(Serial);
}

Graph *Graph::fromSerial(uint64_t Serial) {
  LiveGraphs &L = liveGraphs();
  std::lock_guard<std::mutex> Lock(L.Mutex);
  return L.BySerial.lookup(Serial);
}

void Graph::fail(const std::string &Message) const {
  throw UserError(Context.empty() ? Message : Context + ": " + Message);
}

const Node *Graph::lookup(const NodeKey &Key) const {
  auto It = Uniquer->find_as(Key);
  return It == Uniquer->end() ? nullptr : *It;
}

void Graph::checkLimits(llvm::ArrayRef<const Node *> Ops) const {
  if (AllNodes.size() >= MaxGraphNodes)
    fail("the definition's IR reaches the limit of " +
         std::to_string(MaxGraphNodes) +
         " nodes (MaxGraphNodes, attn/ir/Limits.h); a loop in the "
         "definition builds too many operations");
  unsigned Depth = 0;
  for (const Node *Op : Ops)
    Depth = std::max(Depth, Op->getDepth() + 1);
  if (Depth > MaxNodeDepth)
    fail("an expression is more than " + std::to_string(MaxNodeDepth) +
         " operations deep, past the limit (MaxNodeDepth, "
         "attn/ir/Limits.h); a loop in the definition chains too many "
         "operations");
}

const Node *Graph::insert(Node *N) {
  Uniquer->insert(N);
  AllNodes.push_back(N);
  return N;
}

const Node **Graph::allocOperands(llvm::ArrayRef<const Node *> Ops) {
  if (Ops.empty())
    return nullptr;
  return Alloc.Allocate<const Node *>(Ops.size());
}

const Node *Graph::constant(double Value, Type T) {
  if (T == Type::I32 && Value != std::trunc(Value))
    throw InternalError("i32 constant with a fraction");
  NodeKey Key{NodeKind::Const, T, Space::Const};
  Key.Attr = bitsOf(Value);
  if (const Node *N = lookup(Key))
    return N;
  checkLimits({});
  return insert(new (Alloc.Allocate<ConstNode>())
                    ConstNode(T, Value, AllNodes.size()));
}

const Node *Graph::param(ParamKind K, llvm::StringRef Name, Type T, Space S) {
  NodeKey Key{NodeKind::Param, T, S};
  Key.Attr = static_cast<uint64_t>(K);
  Key.Name = Name;
  if (const Node *N = lookup(Key))
    return N;
  checkLimits({});
  llvm::StringRef Saved = Strings.save(Name);
  return insert(new (Alloc.Allocate<ParamNode>())
                    ParamNode(K, Saved, T, S, AllNodes.size()));
}

void Graph::requireNode(const Node *N, llvm::StringRef Op) const {
  if (!N)
    fail("'" + Op.str() +
         "' on an empty SymbolScalar (declared but never assigned)");
}

static bool isNumeric(Type T) { return T == Type::F32 || T == Type::I32; }

/// Space of a node over \p Ops, or an error naming the clash.
static Space joinAll(const Graph &G, llvm::StringRef Op,
                     llvm::ArrayRef<const Node *> Ops) {
  Space S = Space::Const;
  const Node *Widest = nullptr;
  for (const Node *N : Ops) {
    std::optional<Space> J = joinSpaces(S, N->getSpace());
    if (!J) {
      std::string Msg = "'" + Op.str() + "' combines " +
                        spaceDescription(Widest->getSpace()).str() + " `" +
                        shortExpr(Widest) + "` with " +
                        spaceDescription(N->getSpace()).str() + " `" +
                        shortExpr(N) +
                        "`; per-element and per-key values cannot meet the "
                        "output accumulator";
      throw UserError(G.context().empty() ? Msg : G.context() + ": " + Msg);
    }
    if (!Widest || *J != S)
      Widest = N;
    S = *J;
  }
  return S;
}

const Node *Graph::unary(NodeKind K, const Node *X) {
  requireNode(X, mnemonic(K));
  if (!isUnaryKind(K))
    throw InternalError("unary() with a non-unary kind");
  Type T;
  if (K == NodeKind::Not) {
    if (X->getType() != Type::Bool)
      fail("'not' needs a boolean, but `" + shortExpr(X) + "` is a number");
    T = Type::Bool;
  } else {
    if (!isNumeric(X->getType()))
      fail("'" + mnemonic(K).str() + "' needs a number, but `" + shortExpr(X) +
           "` is a boolean; turn it into a number with select(cond, a, b)");
    bool KeepsInt = K == NodeKind::Neg || K == NodeKind::Abs ||
                    K == NodeKind::Relu;
    T = KeepsInt ? X->getType() : Type::F32;
  }
  NodeKey Key{K, T, X->getSpace()};
  Key.Ops[0] = X;
  if (const Node *N = lookup(Key))
    return N;
  checkLimits({X});
  const Node **St = allocOperands({X});
  return insert(new (Alloc.Allocate<UnaryNode>())
                    UnaryNode(K, T, X->getSpace(), {X}, St, AllNodes.size()));
}

const Node *Graph::binary(NodeKind K, const Node *A, const Node *B) {
  requireNode(A, mnemonic(K));
  requireNode(B, mnemonic(K));
  Type T;
  if (isLogicKind(K)) {
    if (A->getType() != Type::Bool || B->getType() != Type::Bool)
      fail("'" + mnemonic(K).str() + "' needs booleans, but `" +
           shortExpr(A->getType() != Type::Bool ? A : B) + "` is a number");
    T = Type::Bool;
  } else if (isCompareKind(K) || isBinaryKind(K)) {
    for (const Node *X : {A, B})
      if (!isNumeric(X->getType()))
        fail("'" + mnemonic(K).str() + "' needs numbers, but `" +
             shortExpr(X) +
             "` is a boolean; turn it into a number with select(cond, a, b)");
    if (isCompareKind(K))
      T = Type::Bool;
    else if (A->getType() == Type::I32 && B->getType() == Type::I32 &&
             K != NodeKind::Div)
      T = Type::I32;
    else
      T = Type::F32;
  } else {
    throw InternalError("binary() with a non-binary kind");
  }
  Space S = joinAll(*this, mnemonic(K), {A, B});
  NodeKey Key{K, T, S};
  Key.Ops[0] = A;
  Key.Ops[1] = B;
  if (const Node *N = lookup(Key))
    return N;
  checkLimits({A, B});
  const Node **St = allocOperands({A, B});
  return insert(new (Alloc.Allocate<BinaryNode>())
                    BinaryNode(K, T, S, {A, B}, St, AllNodes.size()));
}

const Node *Graph::select(const Node *Cond, const Node *Then,
                          const Node *Else) {
  for (const Node *N : {Cond, Then, Else})
    requireNode(N, "select");
  if (Cond->getType() != Type::Bool)
    fail("select: the condition `" + shortExpr(Cond) +
         "` is a number; use a comparison such as q_idx >= kv_idx");
  Type T;
  if (Then->getType() == Type::Bool && Else->getType() == Type::Bool)
    T = Type::Bool;
  else if (isNumeric(Then->getType()) && isNumeric(Else->getType()))
    T = Then->getType() == Type::I32 && Else->getType() == Type::I32
            ? Type::I32
            : Type::F32;
  else
    fail("select: one branch is a boolean and the other a number (`" +
         shortExpr(Then) + "`, `" + shortExpr(Else) + "`)");
  Space S = joinAll(*this, "select", {Cond, Then, Else});
  NodeKey Key{NodeKind::Select, T, S};
  Key.Ops[0] = Cond;
  Key.Ops[1] = Then;
  Key.Ops[2] = Else;
  if (const Node *N = lookup(Key))
    return N;
  checkLimits({Cond, Then, Else});
  const Node **St = allocOperands({Cond, Then, Else});
  return insert(new (Alloc.Allocate<SelectNode>()) SelectNode(
      NodeKind::Select, T, S, {Cond, Then, Else}, St, AllNodes.size()));
}

const Node *Graph::reduce(ReduceOp Op, const Node *X) {
  requireNode(X, "get_reduce");
  std::string Call = "get_reduce(\"" + reduceOpName(Op).str() + "\")";
  if (!isNumeric(X->getType()))
    fail(Call + " needs a number, but `" + shortExpr(X) + "` is a boolean");
  if (X->getSpace() != Space::Tile && X->getSpace() != Space::Col)
    fail(Call + " reduces over keys, but `" + shortExpr(X) + "` is " +
         spaceDescription(X->getSpace()).str() +
         (isPerRowOrCoarser(X->getSpace())
              ? " (already reduced); use it directly"
              : "; reduce the scores instead"));
  NodeKey Key{NodeKind::Reduce, Type::F32, Space::Row};
  Key.Ops[0] = X;
  Key.Attr = static_cast<uint64_t>(Op);
  if (const Node *N = lookup(Key))
    return N;
  checkLimits({X});
  const Node **St = allocOperands({X});
  return insert(new (Alloc.Allocate<ReduceNode>())
                    ReduceNode(Op, X, St, AllNodes.size()));
}

const Node *Graph::rebuild(const Node *Like,
                           llvm::ArrayRef<const Node *> Ops) {
  NodeKind K = Like->getKind();
  if (Ops.size() != arity(K))
    throw InternalError("rebuild: wrong operand count for " +
                        mnemonic(K).str());
  if (isUnaryKind(K))
    return unary(K, Ops[0]);
  if (auto *R = llvm::dyn_cast<ReduceNode>(Like))
    return reduce(R->getOp(), Ops[0]);
  if (K == NodeKind::Select)
    return select(Ops[0], Ops[1], Ops[2]);
  if (llvm::isa<BinaryNode>(Like))
    return binary(K, Ops[0], Ops[1]);
  throw InternalError("rebuild: leaf kind " + mnemonic(K).str());
}

const Node *Graph::import(const Node *N,
                         llvm::DenseMap<const Node *, const Node *> &Memo) {
  // Operands before users with an explicit stack: a graph as deep as
  // MaxNodeDepth must not cost a stack frame a level.
  llvm::SmallVector<const Node *, 16> Stack{N};
  while (!Stack.empty()) {
    const Node *Cur = Stack.back();
    if (Memo.count(Cur)) {
      Stack.pop_back();
      continue;
    }
    // Pushed last to first so that the first operand is copied first, as
    // a recursive copy would: node ids (and so printed IR) keep their order.
    bool Ready = true;
    for (const Node *Op : llvm::reverse(Cur->operands()))
      if (!Memo.count(Op)) {
        Stack.push_back(Op);
        Ready = false;
      }
    if (!Ready)
      continue;
    Stack.pop_back();
    const Node *Copy;
    if (auto *C = llvm::dyn_cast<ConstNode>(Cur)) {
      Copy = constant(C->getValue(), C->getType());
    } else if (auto *P = llvm::dyn_cast<ParamNode>(Cur)) {
      Copy = param(P->getParamKind(), P->getName(), P->getType(),
                   P->getSpace());
    } else {
      llvm::SmallVector<const Node *, 3> Ops;
      for (const Node *Op : Cur->operands())
        Ops.push_back(Memo.lookup(Op));
      Copy = rebuild(Cur, Ops);
    }
    Memo[Cur] = Copy;
  }
  return Memo.lookup(N);
}

Function &Graph::addFunction(llvm::StringRef Name) {
  if (getFunction(Name))
    throw InternalError("function '" + Name.str() + "' added twice");
  Functions.push_back(Function{Name.str(), {}});
  return Functions.back();
}

const Function *Graph::getFunction(llvm::StringRef Name) const {
  for (const Function &F : Functions)
    if (F.Name == Name)
      return &F;
  return nullptr;
}

Function *Graph::getFunction(llvm::StringRef Name) {
  for (Function &F : Functions)
    if (F.Name == Name)
      return &F;
  return nullptr;
}

const Node *Function::result(llvm::StringRef N) const {
  for (const Result &R : Results)
    if (R.Name == N)
      return R.Value;
  return nullptr;
}

const InputDecl *Declarations::findInput(llvm::StringRef Name) const {
  for (const InputDecl &D : Inputs)
    if (D.Name == Name)
      return &D;
  return nullptr;
}

llvm::StringRef definitionKindName(DefinitionKind K) {
  switch (K) {
  case DefinitionKind::Transformer:
    return "attention";
  case DefinitionKind::Linear:
    return "linear";
  }
  return "?";
}

llvm::StringRef inputShapeName(InputShape S) {
  switch (S) {
  case InputShape::Scalar:
    return "scalar";
  case InputShape::PerHead:
    return "per_head";
  case InputShape::PerRow:
    return "per_row";
  case InputShape::PerKey:
    return "per_key";
  case InputShape::Full:
    return "full";
  case InputShape::PerQueryToken:
    return "per_query_token";
  case InputShape::PerKeyToken:
    return "per_key_token";
  }
  return "?";
}

std::optional<InputShape> inputShapeFromName(llvm::StringRef Name) {
  for (InputShape S : {InputShape::Scalar, InputShape::PerHead,
                       InputShape::PerRow, InputShape::PerKey,
                       InputShape::Full, InputShape::PerQueryToken,
                       InputShape::PerKeyToken})
    if (inputShapeName(S) == Name)
      return S;
  return std::nullopt;
}

Space inputShapeSpace(InputShape S) {
  switch (S) {
  case InputShape::Scalar:
    return Space::Const;
  case InputShape::PerHead:
    return Space::Head;
  case InputShape::PerRow:
    return Space::Row;
  case InputShape::PerKey:
    return Space::Col;
  case InputShape::Full:
    return Space::Tile;
  case InputShape::PerQueryToken:
    return Space::Row;
  case InputShape::PerKeyToken:
    return Space::Col;
  }
  return Space::Const;
}

bool inputVariesWithHead(InputShape S) {
  switch (S) {
  case InputShape::Scalar:
  case InputShape::PerQueryToken:
  case InputShape::PerKeyToken:
    return false;
  case InputShape::PerHead:
  case InputShape::PerRow:
  case InputShape::PerKey:
  case InputShape::Full:
    return true;
  }
  return true;
}

bool inputVariesWithBatch(InputShape S) {
  switch (S) {
  case InputShape::Scalar:
  case InputShape::PerHead:
    return false;
  case InputShape::PerRow:
  case InputShape::PerKey:
  case InputShape::Full:
  case InputShape::PerQueryToken:
  case InputShape::PerKeyToken:
    return true;
  }
  return true;
}

llvm::StringRef inputTypeName(InputType T) {
  switch (T) {
  case InputType::F32:
    return "f32";
  case InputType::I32:
    return "i32";
  }
  return "?";
}

std::optional<InputType> inputTypeFromName(llvm::StringRef Name) {
  for (InputType T : {InputType::F32, InputType::I32})
    if (inputTypeName(T) == Name)
      return T;
  return std::nullopt;
}

Type inputTypeIR(InputType T) {
  switch (T) {
  case InputType::F32:
    return Type::F32;
  case InputType::I32:
    return Type::I32;
  }
  return Type::F32;
}

} // namespace attn::ir
