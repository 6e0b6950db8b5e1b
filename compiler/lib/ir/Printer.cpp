// IR printer: declarations, functions, and short expressions for messages.
#include "attn/ir/Printer.h"

#include "attn/ir/Walk.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/Casting.h"

#include <fmt/format.h>

namespace attn::ir {

std::string formatNumber(double V) { return fmt::format("{}", V); }

static void printDeclarations(const Graph &G, llvm::raw_ostream &OS) {
  const Declarations &D = G.decls();
  OS << definitionKindName(D.Kind) << " " << G.name() << "\n";
  for (const RowscaleDecl &R : D.OnlineRowscales)
    OS << "  rowscale " << R.Name << " = " << formatNumber(R.Init) << "\n";
  for (const RowscaleDecl &R : D.FinalRowscales)
    OS << "  final " << R.Name << "\n";
  for (const InputDecl &I : D.Inputs)
    // The element type only when it is not the default, float32.
    OS << "  input " << I.Name << " : " << inputShapeName(I.Shape)
       << (I.Elem == InputType::F32 ? "" : " " + inputTypeName(I.Elem).str())
       << (I.RequiresGrad ? " requires_grad" : "") << "\n";
  if (D.BackwardDerived)
    OS << "  backward derived\n";
}

void printFunction(const Graph &G, const Function &F, llvm::raw_ostream &OS) {
  (void)G;
  std::vector<const Node *> Roots;
  for (const Result &R : F.Results)
    Roots.push_back(R.Value);
  llvm::DenseMap<const Node *, unsigned> Number;
  OS << "func " << F.Name << " {\n";
  for (const Node *N : topologicalOrder(Roots)) {
    unsigned Id = Number.size();
    Number[N] = Id;
    OS << "  %" << Id << " = ";
    if (auto *C = llvm::dyn_cast<ConstNode>(N)) {
      OS << "const " << formatNumber(C->getValue());
    } else if (auto *P = llvm::dyn_cast<ParamNode>(N)) {
      OS << paramKindName(P->getParamKind());
      if (P->getName() != paramKindName(P->getParamKind()))
        OS << " " << P->getName();
    } else {
      OS << mnemonic(N->getKind());
      if (auto *R = llvm::dyn_cast<ReduceNode>(N))
        OS << "." << reduceOpName(R->getOp());
      const char *Sep = " ";
      for (const Node *Op : N->operands()) {
        OS << Sep << "%" << Number.lookup(Op);
        Sep = ", ";
      }
    }
    OS << " : " << typeName(N->getType()) << " " << spaceName(N->getSpace())
       << "\n";
  }
  for (const Result &R : F.Results)
    OS << "  return " << R.Name << " = %" << Number.lookup(R.Value) << "\n";
  OS << "}\n";
}

void printGraph(const Graph &G, llvm::raw_ostream &OS) {
  printDeclarations(G, OS);
  for (const Function &F : G.functions()) {
    OS << "\n";
    printFunction(G, F, OS);
  }
}

std::string toText(const Graph &G) {
  std::string S;
  llvm::raw_string_ostream OS(S);
  printGraph(G, OS);
  return OS.str();
}

static const char *infixOperator(NodeKind K) {
  static const std::pair<NodeKind, const char *> Table[] = {
      {NodeKind::Add, " + "},  {NodeKind::Sub, " - "}, {NodeKind::Mul, " * "},
      {NodeKind::Div, " / "},  {NodeKind::Lt, " < "},  {NodeKind::Le, " <= "},
      {NodeKind::Gt, " > "},   {NodeKind::Ge, " >= "}, {NodeKind::Eq, " == "},
      {NodeKind::Ne, " != "},  {NodeKind::And, " & "}, {NodeKind::Or, " | "}};
  for (const auto &[Kind, Text] : Table)
    if (Kind == K)
      return Text;
  return nullptr;
}

static std::string shortExprRec(const Node *N, unsigned Depth, bool Nested) {
  if (auto *C = llvm::dyn_cast<ConstNode>(N))
    return formatNumber(C->getValue());
  if (auto *P = llvm::dyn_cast<ParamNode>(N))
    return P->getName().str();
  if (Depth == 0)
    return "…";
  if (auto *R = llvm::dyn_cast<ReduceNode>(N))
    return "reduce_" + reduceOpName(R->getOp()).str() + "(" +
           shortExprRec(R->operand(0), Depth - 1, false) + ")";
  if (const char *Infix = infixOperator(N->getKind())) {
    std::string S = shortExprRec(N->operand(0), Depth - 1, true) + Infix +
                    shortExprRec(N->operand(1), Depth - 1, true);
    return Nested ? "(" + S + ")" : S;
  }
  if (N->getKind() == NodeKind::Neg)
    return "-" + shortExprRec(N->operand(0), Depth - 1, true);
  std::string S = mnemonic(N->getKind()).str() + "(";
  const char *Sep = "";
  for (const Node *Op : N->operands()) {
    S += Sep + shortExprRec(Op, Depth - 1, false);
    Sep = ", ";
  }
  return S + ")";
}

std::string shortExpr(const Node *N, unsigned Depth) {
  return shortExprRec(N, Depth, false);
}

} // namespace attn::ir
