// Merge derivation: the combine of two partial online states, proven from
// the structure of online_fwd (see Merge.h for the two forms).
#include "attn/analysis/Merge.h"

#include "attn/Error.h"
#include "attn/ir/Printer.h"
#include "attn/ir/Walk.h"
// The fp64 meaning of a combine is the IR's, evaluated as the reference
// evaluates every other function (one compiler library).
#include "attn/reference/Evaluator.h"

#include "llvm/Support/Casting.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace attn::analysis {

using ir::Node;
using ir::NodeKind;
using ir::ParamKind;

namespace {

std::string quoted(const Node *N) { return "`" + ir::shortExpr(N) + "`"; }

bool freeOfRowscales(const Node *N) {
  return !ir::dependsOn(N, ParamKind::Rowscale);
}

/// The rowscale parameter named \p Name that online_fwd reads, or null.
const ir::ParamNode *rowscaleParam(const ir::Function &F,
                                   llvm::StringRef Name) {
  std::vector<const Node *> Roots;
  for (const ir::Result &R : F.Results)
    Roots.push_back(R.Value);
  for (const ir::ParamNode *P : ir::reachableParams(Roots))
    if (P->getParamKind() == ParamKind::Rowscale && P->getName() == Name)
      return P;
  return nullptr;
}

/// Where \p N is `K(X, Y)` or `K(Y, X)` for a commutative \p K: Y. Null
/// otherwise (or where X is null).
const Node *otherOperand(const Node *N, NodeKind K, const Node *X) {
  if (!X || N->getKind() != K)
    return nullptr;
  if (N->operand(0) == X)
    return N->operand(1);
  if (N->operand(1) == X)
    return N->operand(0);
  return nullptr;
}

/// Where \p N is `exp(y - Sub)` with y free of rowscales: y. Else null.
const Node *expMinus(const Node *N, const Node *Sub) {
  if (N->getKind() != NodeKind::Exp)
    return nullptr;
  const Node *D = N->operand(0);
  if (D->getKind() != NodeKind::Sub || D->operand(1) != Sub ||
      !freeOfRowscales(D->operand(0)))
    return nullptr;
  return D->operand(0);
}

/// Where \p N is get_reduce(op) with op one of \p Ops (of values free of
/// rowscales unless \p AnyOperand): the reduction. Else null.
const ir::ReduceNode *reductionOf(const Node *N,
                                  std::initializer_list<ir::ReduceOp> Ops,
                                  bool AnyOperand = false) {
  const auto *R = llvm::dyn_cast_or_null<ir::ReduceNode>(N);
  if (!R || (!AnyOperand && !freeOfRowscales(R->operand(0))))
    return nullptr;
  for (ir::ReduceOp Op : Ops)
    if (R->getOp() == Op)
      return R;
  return nullptr;
}

std::string initText(double V) {
  return std::isinf(V) ? (V < 0 ? "-inf" : "inf") : fmt::format("{}", V);
}

/// Why the Sum form does not hold, or empty.
std::string sumReason(const ir::Graph &G, const ir::Function &F) {
  const Node *P = F.result("scores");
  if (!freeOfRowscales(P))
    return "o_scale is 1 but P " + quoted(P) +
           " reads a rowscale, so a part's P depends on the keys before it";
  for (const ir::RowscaleDecl &D : G.decls().OnlineRowscales) {
    const Node *New = F.result(D.Name);
    if (D.Init != 0.0)
      return fmt::format("rowscale '{}' starts at {}, not 0: adding two parts "
                         "would count it twice",
                         D.Name, initText(D.Init));
    if (!reductionOf(otherOperand(New, NodeKind::Add, rowscaleParam(F, D.Name)),
                     {ir::ReduceOp::Sum, ir::ReduceOp::AbsSum}))
      return "o_scale is 1 but the new rowscale '" + D.Name + "' " +
             quoted(New) + " is not '" + D.Name +
             "' plus a sum over the keys of values free of rowscales";
  }
  return "";
}

/// Why the log-sum-exp form does not hold, or empty; sets \p MaxIndex.
std::string logSumExpReason(const ir::Graph &G, const ir::Function &F,
                            int &MaxIndex) {
  const Node *OScale = F.result("o_scale");
  const Node *Diff = OScale->operand(0);
  const auto *M = llvm::dyn_cast<ir::ParamNode>(Diff->operand(0));
  const auto &Decls = G.decls().OnlineRowscales;
  MaxIndex = -1;
  if (M && M->getParamKind() != ParamKind::Rowscale)
    M = nullptr; // a custom input of the same name is not the running max
  for (size_t I = 0; M && I < Decls.size(); ++I)
    if (Decls[I].Name == M->getName())
      MaxIndex = int(I);
  if (MaxIndex < 0)
    return "o_scale " + quoted(OScale) +
           " is exp of a difference that does not start with a rowscale";
  const ir::RowscaleDecl &MD = Decls[MaxIndex];
  const Node *MNew = F.result(MD.Name);
  if (Diff->operand(1) != MNew)
    return "o_scale " + quoted(OScale) + " is not exp(" + MD.Name + " - " +
           MD.Name + "_new) with " + MD.Name + "_new the new rowscale '" +
           MD.Name + "'";
  if (!(std::isinf(MD.Init) && MD.Init < 0))
    return fmt::format("the running max '{}' starts at {}, not -inf", MD.Name,
                       initText(MD.Init));
  if (!reductionOf(otherOperand(MNew, NodeKind::Max, M), {ir::ReduceOp::Max}))
    return "the new rowscale '" + MD.Name + "' " + quoted(MNew) +
           " is not max('" + MD.Name +
           "', get_reduce(\"max\") of values free of rowscales)";
  const Node *P = F.result("scores");
  if (!expMinus(P, MNew))
    return "P " + quoted(P) + " is not exp(s - " + MD.Name +
           "_new) of values s free of rowscales";
  for (size_t I = 0; I < Decls.size(); ++I) {
    if (int(I) == MaxIndex)
      continue;
    const ir::RowscaleDecl &D = Decls[I];
    if (D.Init != 0.0)
      return fmt::format("rowscale '{}' starts at {}, not 0", D.Name,
                         initText(D.Init));
    const Node *New = F.result(D.Name);
    const Node *Scaled = nullptr;
    if (New->getKind() == NodeKind::Add)
      for (int Side : {0, 1})
        if (otherOperand(New->operand(Side), NodeKind::Mul,
                         rowscaleParam(F, D.Name)) == OScale)
          Scaled = New->operand(1 - Side);
    // Its operand reads m_new: P, or exp(w - m_new), checked here.
    const auto *R = reductionOf(Scaled, {ir::ReduceOp::Sum}, /*AnyOperand=*/true);
    if (!R || (R->operand(0) != P && !expMinus(R->operand(0), MNew)))
      return "the new rowscale '" + D.Name + "' " + quoted(New) +
             " is not " + D.Name + "·o_scale + get_reduce(\"sum\") of P or "
             "of exp(s - " + MD.Name + "_new)";
  }
  return "";
}

} // namespace

llvm::StringRef mergeKindName(MergeKind K) {
  switch (K) {
  case MergeKind::None:
    return "none";
  case MergeKind::Sum:
    return "sum";
  case MergeKind::LogSumExp:
    return "log-sum-exp";
  case MergeKind::Combine:
    return "combine";
  }
  return "?";
}

std::string MergeInfo::str() const {
  if (Kind == MergeKind::None)
    return "none (" + Reason + ")";
  if (Kind == MergeKind::Combine)
    return "combine (the definition's own; derived: none, " + Reason + ")";
  if (CombineUnused)
    return mergeKindName(Kind).str() +
           " (derived; the definition's combine is checked, not used)";
  return mergeKindName(Kind).str();
}

MergeInfo userCombine(const ir::Graph &G) {
  MergeInfo Info;
  if (!G.getFunction("combine") ||
      G.decls().Kind != ir::DefinitionKind::Transformer) {
    Info.Reason = "the definition has no combine";
    return Info;
  }
  Info.Kind = MergeKind::Combine;
  Info.CombineGraph = &G;
  return Info;
}

static MergeInfo deriveMerge(const ir::Graph &G) {
  MergeInfo Info;
  const ir::Function *F = G.getFunction("online_fwd");
  if (G.decls().Kind != ir::DefinitionKind::Transformer || !F) {
    Info.Reason = "linear attention has no online states to merge";
    return Info;
  }
  const Node *OScale = F->result("o_scale");
  const auto *One = llvm::dyn_cast<ir::ConstNode>(OScale);
  if (One && One->getValue() == 1.0) {
    Info.Reason = sumReason(G, *F);
    if (Info.Reason.empty())
      Info.Kind = MergeKind::Sum;
    return Info;
  }
  if (OScale->getKind() == NodeKind::Exp &&
      OScale->operand(0)->getKind() == NodeKind::Sub) {
    Info.Reason = logSumExpReason(G, *F, Info.MaxRowscale);
    if (Info.Reason.empty())
      Info.Kind = MergeKind::LogSumExp;
    else
      Info.MaxRowscale = -1;
    return Info;
  }
  Info.Reason = "o_scale " + quoted(OScale) +
                " is neither the constant 1 (a sum) nor exp(m - m_new) of a "
                "running max m (log-sum-exp)";
  return Info;
}

MergeInfo analyzeMerge(const ir::Graph &G) {
  MergeInfo Derived = deriveMerge(G);
  MergeInfo User = userCombine(G);
  if (User.Kind == MergeKind::None)
    return Derived;
  if (Derived.Kind != MergeKind::None) {
    Derived.CombineUnused = true;
    return Derived;
  }
  User.Reason = Derived.Reason;
  return User;
}

namespace {

/// A becomes the merge of A and B (both seen) by the definition's combine,
/// evaluated in double precision.
void combineStates(const ir::Graph &G, const ir::Function &F, MergeState &A,
                   const MergeState &B) {
  const auto &Decls = G.decls().OnlineRowscales;
  auto Slot = [&](llvm::StringRef Name) {
    for (size_t I = 0; I < Decls.size(); ++I)
      if (Decls[I].Name == Name)
        return I;
    throw InternalError("combine reads an undeclared rowscale '" +
                        Name.str() + "'");
  };
  reference::Evaluator E(
      [&](const ir::ParamNode &P) -> reference::Values {
        switch (P.getParamKind()) {
        case ParamKind::Rowscale:
          return {reference::Dual{A.Rowscales[Slot(P.getName())], 0.0}};
        case ParamKind::OtherRowscale:
          return {reference::Dual{B.Rowscales[Slot(P.getName())], 0.0}};
        case ParamKind::HeadDim: // RowReduce refuses it in combine
        case ParamKind::Score:
        case ParamKind::Scores:
        case ParamKind::Output:
        case ParamKind::FinalRowscale:
        case ParamKind::Probs:
        case ParamKind::GradProbs:
        case ParamKind::Doosum:
        case ParamKind::Index:
        case ParamKind::Input:
        case ParamKind::Element:
        case ParamKind::Decay:
          break;
        }
        throw InternalError("combine reads '" + P.getName().str() +
                            "', which the merge does not bind");
      },
      {});
  std::vector<double> Merged(Decls.size());
  for (size_t I = 0; I < Decls.size(); ++I)
    Merged[I] = E.at(F.result(Decls[I].Name), 0).V;
  double FA = E.at(F.result("o_scale_a"), 0).V;
  double FB = E.at(F.result("o_scale_b"), 0).V;
  A.Rowscales = std::move(Merged);
  for (size_t I = 0; I < A.O.size(); ++I)
    A.O[I] = FA * A.O[I] + FB * B.O[I];
}

} // namespace

void mergeStates(const MergeInfo &M, MergeState &A, const MergeState &B) {
  if (M.Kind == MergeKind::None)
    throw InternalError("mergeStates: the definition has no merge");
  if (A.Rowscales.size() != B.Rowscales.size() || A.O.size() != B.O.size())
    throw InternalError("mergeStates: states of different sizes");
  if (!B.Seen)
    return;
  if (!A.Seen) {
    A = B;
    return;
  }
  if (M.Kind == MergeKind::Combine) {
    const ir::Function *F =
        M.CombineGraph ? M.CombineGraph->getFunction("combine") : nullptr;
    if (!F)
      throw InternalError("mergeStates: a combine merge without its function");
    combineStates(*M.CombineGraph, *F, A, B);
    return;
  }
  double FA = 1.0, FB = 1.0;
  if (M.Kind == MergeKind::LogSumExp) {
    double MA = A.Rowscales[M.MaxRowscale], MB = B.Rowscales[M.MaxRowscale];
    double Max = std::max(MA, MB);
    constexpr double NegInf = -std::numeric_limits<double>::infinity();
    // A part whose max is still -inf has nothing to add (and exp(-inf -
    // -inf) would be NaN).
    FA = MA == NegInf ? 0.0 : std::exp(MA - Max);
    FB = MB == NegInf ? 0.0 : std::exp(MB - Max);
    A.Rowscales[M.MaxRowscale] = Max;
  }
  for (size_t I = 0; I < A.Rowscales.size(); ++I)
    if (int(I) != M.MaxRowscale)
      A.Rowscales[I] = FA * A.Rowscales[I] + FB * B.Rowscales[I];
  for (size_t I = 0; I < A.O.size(); ++I)
    A.O[I] = FA * A.O[I] + FB * B.O[I];
}

namespace {

/// Where \p N is the parameter of kind \p K: its name. Else empty.
llvm::StringRef paramName(const Node *N, ParamKind K) {
  const auto *P = llvm::dyn_cast<ir::ParamNode>(N);
  return P && P->getParamKind() == K ? P->getName() : llvm::StringRef();
}

/// Why the epilogue \p E does not return its results in the Sum form.
std::string sumResultReason(const ir::Graph &G, const ir::Function &E) {
  const Node *O = E.result("o");
  if (paramName(O, ParamKind::Output).empty())
    return "the epilogue's o " + quoted(O) + " is not o as it is";
  for (const ir::RowscaleDecl &D : G.decls().FinalRowscales)
    if (paramName(E.result(D.Name), ParamKind::Rowscale).empty())
      return "the final '" + D.Name + "' " + quoted(E.result(D.Name)) +
             " is not an online rowscale as it is";
  return "";
}

/// Why the epilogue \p E does not return its results in the LogSumExp form;
/// sets \p Lse.
std::string lseResultReason(const ir::Graph &G, const ir::Function &E,
                            const MergeInfo &M, int &Lse) {
  const auto &Finals = G.decls().FinalRowscales;
  if (Finals.size() != 1)
    return fmt::format("{} finals; a log-sum-exp merge of results needs one, "
                       "the log-sum-exp",
                       Finals.size());
  const Node *O = E.result("o");
  llvm::StringRef R =
      O->getKind() == NodeKind::Div && !paramName(O->operand(0), ParamKind::Output).empty()
          ? paramName(O->operand(1), ParamKind::Rowscale)
          : llvm::StringRef();
  const std::string MaxName =
      G.decls().OnlineRowscales[M.MaxRowscale].Name;
  if (R.empty() || R == MaxName)
    return "the epilogue's o " + quoted(O) +
           " is not o divided by a summed rowscale";
  const Node *F = E.result(Finals[0].Name);
  bool Ok = false;
  if (F->getKind() == NodeKind::Add)
    for (int Side : {0, 1}) {
      const Node *L = F->operand(Side), *Mx = F->operand(1 - Side);
      Ok = Ok || (L->getKind() == NodeKind::Log &&
                  paramName(L->operand(0), ParamKind::Rowscale) == R &&
                  paramName(Mx, ParamKind::Rowscale) == MaxName);
    }
  if (!Ok)
    return "the final '" + Finals[0].Name + "' " + quoted(F) + " is not log(" +
           R.str() + ") + " + MaxName;
  Lse = 0;
  return "";
}

/// Why the epilogue \p E does not return the state itself (o as it is,
/// each online rowscale as some final as it is); fills \p FinalOf.
std::string combineResultReason(const ir::Graph &G, const ir::Function &E,
                                std::vector<int> &FinalOf) {
  const Node *O = E.result("o");
  if (paramName(O, ParamKind::Output).empty())
    return "the epilogue's o " + quoted(O) +
           " is not o as it is, so a result is not a state the combine "
           "can merge";
  const auto &Finals = G.decls().FinalRowscales;
  for (const ir::RowscaleDecl &D : G.decls().OnlineRowscales) {
    int Found = -1;
    for (size_t I = 0; I < Finals.size() && Found < 0; ++I)
      if (paramName(E.result(Finals[I].Name), ParamKind::Rowscale) == D.Name)
        Found = int(I);
    if (Found < 0)
      return "no final is the online rowscale '" + D.Name +
             "' as it is, so a result is not a state the combine can merge";
    FinalOf.push_back(Found);
  }
  if (Finals.size() != FinalOf.size())
    return fmt::format("{} finals for {} online rowscales: a final beyond "
                       "the state would need the epilogue again",
                       Finals.size(), FinalOf.size());
  return "";
}

} // namespace

ResultMergeInfo analyzeResultMerge(const ir::Graph &G) {
  ResultMergeInfo Info;
  MergeInfo M = analyzeMerge(G);
  const ir::Function *E = G.getFunction("online_fwd_epilogue");
  if (M.Kind == MergeKind::None || !E) {
    Info.Reason = "its partial states have no merge: " + M.Reason;
    return Info;
  }
  switch (M.Kind) {
  case MergeKind::None:
    break;
  case MergeKind::Sum:
    Info.Reason = sumResultReason(G, *E);
    break;
  case MergeKind::LogSumExp:
    Info.Reason = lseResultReason(G, *E, M, Info.LseFinal);
    break;
  case MergeKind::Combine:
    Info.Reason = combineResultReason(G, *E, Info.FinalOfRowscale);
    break;
  }
  if (Info.Reason.empty()) {
    Info.Kind = M.Kind;
    Info.State = M;
  } else {
    Info.LseFinal = -1;
    Info.FinalOfRowscale.clear();
  }
  return Info;
}

void mergeResults(const ResultMergeInfo &M, ResultState &A,
                  const ResultState &B) {
  if (M.Kind == MergeKind::None)
    throw InternalError("mergeResults: the definition's results do not merge");
  constexpr double NegInf = -std::numeric_limits<double>::infinity();
  auto Empty = [](const ResultState &S) {
    return !S.Finals.empty() && S.Finals.front() == NegInf;
  };
  if (Empty(B))
    return;
  if (Empty(A)) {
    A = B;
    return;
  }
  if (M.Kind == MergeKind::Combine) {
    // The result is the state: finals are the rowscales, o is o.
    auto State = [&](const ResultState &R) {
      MergeState S{{}, R.O, true};
      for (int F : M.FinalOfRowscale)
        S.Rowscales.push_back(R.Finals.at(F));
      return S;
    };
    MergeState SA = State(A);
    mergeStates(M.State, SA, State(B));
    A.O = SA.O;
    for (size_t I = 0; I < M.FinalOfRowscale.size(); ++I)
      A.Finals[M.FinalOfRowscale[I]] = SA.Rowscales[I];
    return;
  }
  if (M.Kind == MergeKind::Sum) {
    for (size_t I = 0; I < A.O.size(); ++I)
      A.O[I] += B.O[I];
    for (size_t I = 0; I < A.Finals.size(); ++I)
      A.Finals[I] += B.Finals[I];
    return;
  }
  double LA = A.Finals[M.LseFinal], LB = B.Finals[M.LseFinal];
  double Max = std::max(LA, LB);
  double Lse = Max + std::log(std::exp(LA - Max) + std::exp(LB - Max));
  double WA = std::exp(LA - Lse), WB = std::exp(LB - Lse);
  for (size_t I = 0; I < A.O.size(); ++I)
    A.O[I] = WA * A.O[I] + WB * B.O[I];
  A.Finals[M.LseFinal] = Lse;
}

} // namespace attn::analysis
