// Structural verifier.
#include "attn/ir/Verifier.h"

#include "attn/Error.h"
#include "attn/ir/Walk.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Casting.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace attn::ir {

namespace {

[[noreturn]] void broken(const Graph &G, const std::string &Msg) {
  throw InternalError("verifier: " + G.name() + ": " + Msg);
}

bool isNumeric(Type T) { return T == Type::F32 || T == Type::I32; }

/// The type a node of kind \p K over \p Ops must have.
Type expectedType(const Node *N) {
  auto Ops = N->operands();
  if (isUnaryKind(N->getKind())) {
    NodeKind K = N->getKind();
    if (K == NodeKind::Not)
      return Type::Bool;
    bool Keeps = K == NodeKind::Neg || K == NodeKind::Abs || K == NodeKind::Relu;
    return Keeps ? Ops[0]->getType() : Type::F32;
  }
  if (isCompareKind(N->getKind()) || isLogicKind(N->getKind()))
    return Type::Bool;
  if (isBinaryKind(N->getKind()))
    return Ops[0]->getType() == Type::I32 && Ops[1]->getType() == Type::I32 &&
                   N->getKind() != NodeKind::Div
               ? Type::I32
               : Type::F32;
  if (N->getKind() == NodeKind::Select) {
    if (Ops[1]->getType() == Type::Bool)
      return Type::Bool;
    return Ops[1]->getType() == Type::I32 && Ops[2]->getType() == Type::I32
               ? Type::I32
               : Type::F32;
  }
  return Type::F32; // reduce
}

void verifyNode(const Graph &G, const Node *N) {
  if (N->operands().size() != arity(N->getKind()))
    broken(G, "node %" + std::to_string(N->getId()) + " (" +
                  mnemonic(N->getKind()).str() + ") has " +
                  std::to_string(N->operands().size()) + " operands");
  for (const Node *Op : N->operands())
    if (!Op || Op->getId() >= N->getId())
      broken(G, "node %" + std::to_string(N->getId()) +
                    " uses an operand created after it");
  if (auto *P = llvm::dyn_cast<ParamNode>(N);
      P && P->getParamKind() == ParamKind::Input) {
    // A read of an input has the type and space of its declaration: the
    // kernels' loads and the runtime's checks go by the declaration.
    const InputDecl *D = G.decls().findInput(P->getName());
    if (!D)
      broken(G, "input '" + P->getName().str() + "' is not declared");
    if (P->getType() != inputTypeIR(D->Elem) ||
        P->getSpace() != inputShapeSpace(D->Shape))
      broken(G, "input '" + D->Name + "' is read as " +
                    typeName(P->getType()).str() + " " +
                    spaceName(P->getSpace()).str() + ", but declared " +
                    inputTypeName(D->Elem).str() + " " +
                    inputShapeName(D->Shape).str());
  }
  if (N->operands().empty())
    return;
  if (auto *R = llvm::dyn_cast<ReduceNode>(N)) {
    Space S = R->operand(0)->getSpace();
    if (R->getSpace() != Space::Row || (S != Space::Tile && S != Space::Col))
      broken(G, "reduce %" + std::to_string(N->getId()) +
                    " is not per-row over a per-element value");
    if (!isNumeric(R->operand(0)->getType()))
      broken(G, "reduce over a boolean");
    return;
  }
  std::optional<Space> S = Space::Const;
  for (const Node *Op : N->operands())
    S = S ? joinSpaces(*S, Op->getSpace()) : S;
  if (!S || *S != N->getSpace())
    broken(G, "node %" + std::to_string(N->getId()) + " has space " +
                  spaceName(N->getSpace()).str() +
                  ", not the join of its operands'");
  if (expectedType(N) != N->getType())
    broken(G, "node %" + std::to_string(N->getId()) + " has type " +
                  typeName(N->getType()).str());
}

const std::set<std::string> &knownFunctions(DefinitionKind K) {
  static const std::set<std::string> Transformer = {
      "score_mod", "mask_mod", "online_fwd", "online_fwd_epilogue", "forward",
      "backward", "score_mod_grad", "score_mod_input_grad", "combine"};
  static const std::set<std::string> Linear = {"q_mod", "k_mod", "v_mod",
                                               "decay_mod"};
  return K == DefinitionKind::Transformer ? Transformer : Linear;
}

/// The result names function \p F must have, in the order the tracer
/// records them.
std::vector<std::string> expectedResults(const Graph &G, const Function &F) {
  const Declarations &D = G.decls();
  auto WithRowscales = [](std::string First,
                          const std::vector<RowscaleDecl> &Rowscales,
                          const char *Last) {
    std::vector<std::string> Names{std::move(First)};
    for (const RowscaleDecl &R : Rowscales)
      Names.push_back(R.Name);
    if (Last)
      Names.push_back(Last);
    return Names;
  };
  if (F.Name == "online_fwd")
    return WithRowscales("scores", D.OnlineRowscales, "o_scale");
  if (F.Name == "online_fwd_epilogue")
    return WithRowscales("o", D.FinalRowscales, nullptr);
  if (F.Name == "combine") {
    std::vector<std::string> Names;
    for (const RowscaleDecl &R : D.OnlineRowscales)
      Names.push_back(R.Name);
    Names.push_back("o_scale_a");
    Names.push_back("o_scale_b");
    return Names;
  }
  if (F.Name == "score_mod_input_grad") { // autodiff: one per grad input
    std::vector<std::string> Names;
    for (const InputDecl &I : D.Inputs)
      if (I.RequiresGrad)
        Names.push_back("d_" + I.Name);
    return Names;
  }
  static const std::map<std::string, std::string> Single = {
      {"score_mod", "score"}, {"mask_mod", "mask"},   {"forward", "p"},
      {"backward", "dscores"}, {"score_mod_grad", "dscore"},
      {"q_mod", "q"},          {"k_mod", "k"},
      {"v_mod", "v"},          {"decay_mod", "g"}};
  return {Single.at(F.Name)};
}

std::string joinNames(const std::vector<std::string> &Names) {
  return "{" + llvm::join(Names, ", ") + "}";
}

/// The results of \p F must be named as its kind requires, each once.
void verifyResultNames(const Graph &G, const Function &F) {
  std::vector<std::string> Expected = expectedResults(G, F), Actual;
  for (const Result &R : F.Results)
    Actual.push_back(R.Name);
  std::vector<std::string> SortedExpected = Expected, SortedActual = Actual;
  std::sort(SortedExpected.begin(), SortedExpected.end());
  std::sort(SortedActual.begin(), SortedActual.end());
  if (SortedActual != SortedExpected)
    broken(G, "function '" + F.Name + "' has results " + joinNames(Actual) +
                  "; expected " + joinNames(Expected));
}

} // namespace

void verify(const Graph &G) {
  std::vector<const Node *> Roots;
  for (const Function &F : G.functions()) {
    if (!knownFunctions(G.decls().Kind).count(F.Name))
      broken(G, "unexpected function '" + F.Name + "'");
    if (F.Results.empty())
      broken(G, "function '" + F.Name + "' has no results");
    for (const Result &R : F.Results) {
      if (!R.Value)
        broken(G, "function '" + F.Name + "' result '" + R.Name +
                      "' is empty");
      Roots.push_back(R.Value);
    }
    verifyResultNames(G, F);
  }
  for (const Node *N : topologicalOrder(Roots))
    verifyNode(G, N);
  std::set<std::string> Inputs;
  for (const InputDecl &D : G.decls().Inputs) {
    if (!Inputs.insert(D.Name).second)
      broken(G, "input '" + D.Name + "' declared twice");
    if (D.Elem != InputType::F32 && D.RequiresGrad)
      broken(G, "input '" + D.Name + "' is " + inputTypeName(D.Elem).str() +
                    " and requires a gradient");
  }
}

} // namespace attn::ir
