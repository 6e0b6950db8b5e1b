// The IR graph: owns uniqued nodes, the traced functions and the declarations.
#ifndef ATTN_IR_GRAPH_H
#define ATTN_IR_GRAPH_H

#include "attn/ir/Node.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Allocator.h"
#include "llvm/Support/StringSaver.h"

#include <memory>
#include <string>
#include <vector>

namespace attn::ir {

struct NodeKey;

llvm::StringRef definitionKindName(DefinitionKind K);

llvm::StringRef inputShapeName(InputShape S);
std::optional<InputShape> inputShapeFromName(llvm::StringRef Name);
/// The space a value of this shape class has when used.
Space inputShapeSpace(InputShape S);
/// Whether an input of class \p S may hold a different value for each head
/// (a per-token input does not: one value per token, for every head).
bool inputVariesWithHead(InputShape S);
/// Whether an input of class \p S may hold a different value for each batch
/// entry.
bool inputVariesWithBatch(InputShape S);

llvm::StringRef inputTypeName(InputType T);
std::optional<InputType> inputTypeFromName(llvm::StringRef Name);
/// The IR type a read of an input of element type \p T has.
Type inputTypeIR(InputType T);

struct RowscaleDecl {
  std::string Name;
  double Init; ///< initial value of an online rowscale (unused for finals)
};

/// One named result of a traced function.
struct Result {
  std::string Name;
  const Node *Value;
};

/// A traced DSL function (score_mod, online_fwd, ...): its named results.
struct Function {
  std::string Name;
  std::vector<Result> Results;
  const Node *result(llvm::StringRef Name) const;
};

/// Everything the definition declares besides its functions.
struct Declarations {
  DefinitionKind Kind = DefinitionKind::Transformer;
  std::vector<RowscaleDecl> OnlineRowscales;
  std::vector<RowscaleDecl> FinalRowscales;
  std::vector<InputDecl> Inputs;
  bool HasMask = false;
  bool HasBackward = false;
  /// The backward was derived by the autodiff pass, not written by the user
  /// (HasBackward is then true as well).
  bool BackwardDerived = false;
  /// Why the autodiff pass could not derive a backward (empty otherwise).
  std::string BackwardUnavailable;
  /// Linear attention: the range `attnc check` draws the decay input from.
  double DecaySampleLo = -1.0, DecaySampleHi = 0.0;
  const InputDecl *findInput(llvm::StringRef Name) const;
};

/// Owns nodes (bump-allocated, immutable, uniqued so that CSE is free), the
/// functions that name some of them as results, and the declarations.
/// Builders check types and spaces and throw UserError naming the function
/// being traced (see setContext) when a combination has no meaning.
class Graph {
public:
  Graph();
  ~Graph();
  Graph(const Graph &) = delete;
  Graph &operator=(const Graph &) = delete;

  // ---- builders (each returns the unique node for its key) ----
  const Node *constant(double Value, Type T = Type::F32);
  const Node *param(ParamKind K, llvm::StringRef Name, Type T, Space S);
  const Node *unary(NodeKind K, const Node *X);
  const Node *binary(NodeKind K, const Node *A, const Node *B);
  const Node *select(const Node *Cond, const Node *Then, const Node *Else);
  const Node *reduce(ReduceOp Op, const Node *X);
  /// Any non-leaf kind over \p Operands (passes use this to rebuild nodes).
  const Node *rebuild(const Node *Like, llvm::ArrayRef<const Node *> Operands);
  /// Copies \p N, which may belong to another graph, into this one.
  const Node *import(const Node *N,
                     llvm::DenseMap<const Node *, const Node *> &Memo);

  // ---- functions and declarations ----
  Function &addFunction(llvm::StringRef Name);
  const Function *getFunction(llvm::StringRef Name) const;
  Function *getFunction(llvm::StringRef Name);
  const std::vector<Function> &functions() const { return Functions; }
  std::vector<Function> &functions() { return Functions; }
  Declarations &decls() { return Decls; }
  const Declarations &decls() const { return Decls; }

  /// The definition's name ("mha").
  const std::string &name() const { return DefName; }
  void setName(llvm::StringRef N) { DefName = N.str(); }

  /// The function whose tracing is under way; builder errors name it.
  void setContext(llvm::StringRef FunctionName) { Context = FunctionName.str(); }
  const std::string &context() const { return Context; }
  /// Sets the context for a scope (a pass that builds nodes on behalf of a
  /// function) and restores the previous one when it ends.
  class ContextScope {
  public:
    ContextScope(Graph &G, llvm::StringRef Name) : G(G), Saved(G.Context) {
      G.setContext(Name);
    }
    ~ContextScope() { G.Context = Saved; }
    ContextScope(const ContextScope &) = delete;
    ContextScope &operator=(const ContextScope &) = delete;

  private:
    Graph &G;
    std::string Saved;
  };

  /// Every node in creation order (dead ones included until DCE).
  llvm::ArrayRef<const Node *> nodes() const { return AllNodes; }

  /// A number that no other graph of this process has had or will have (1,
  /// 2, ...). Unlike the graph's address, which a graph created after this
  /// one is destroyed may get, it names this graph for the whole run.
  uint64_t serial() const { return Serial; }
  /// The live graph whose serial is \p Serial, or nullptr if that graph has
  /// been destroyed (or there never was one). Graphs register themselves on
  /// construction and leave on destruction, so a handle that may outlive its
  /// graph (a SymbolScalar) finds it without touching freed memory.
  /// Thread-safe.
  static Graph *fromSerial(uint64_t Serial);

private:
  struct KeyInfo;
  const Node *lookup(const NodeKey &Key) const;
  const Node *insert(Node *N);
  const Node **allocOperands(llvm::ArrayRef<const Node *> Ops);
  [[noreturn]] void fail(const std::string &Message) const;
  /// UserError when one more node over \p Ops would pass MaxGraphNodes or
  /// MaxNodeDepth (attn/ir/Limits.h).
  void checkLimits(llvm::ArrayRef<const Node *> Ops) const;
  /// Checks an operand of builder \p Op: a null node (what an unassigned
  /// SymbolScalar holds) is a UserError "'<op>' on an empty SymbolScalar",
  /// prefixed by the function being traced like every builder error.
  void requireNode(const Node *N, llvm::StringRef Op) const;

  llvm::BumpPtrAllocator Alloc;
  llvm::UniqueStringSaver Strings{Alloc};
  std::unique_ptr<llvm::DenseSet<const Node *, KeyInfo>> Uniquer;
  std::vector<const Node *> AllNodes;
  std::vector<Function> Functions;
  Declarations Decls;
  std::string DefName;
  std::string Context;
  uint64_t Serial;
};

} // namespace attn::ir

#endif
