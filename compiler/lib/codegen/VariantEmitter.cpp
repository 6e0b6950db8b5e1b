// Emits the generated Variant struct: each DSL function as CUDA over the
// skeleton's fragments, row-level values once per row and element-level
// values inside loops over the row's elements.
#include "attn/codegen/VariantEmitter.h"

#include "attn/Error.h"
#include "attn/analysis/Magnitude.h"
#include "attn/codegen/InputLayout.h"
#include "attn/ir/Eval.h"
#include "attn/ir/Printer.h"
#include "attn/ir/Walk.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/Casting.h"

#include <fmt/format.h>

#include <cmath>
#include <optional>

namespace attn::codegen {

using ir::Node;
using ir::NodeKind;
using ir::ParamKind;

namespace {

std::string cType(ir::Type T) {
  switch (T) {
  case ir::Type::F32:
    return "float";
  case ir::Type::I32:
    return "int";
  case ir::Type::Bool:
    return "bool";
  }
  return "float";
}

bool isElement(const Node *N) {
  ir::Space S = N->getSpace();
  return S == ir::Space::Tile || S == ir::Space::Col || S == ir::Space::Out;
}

} // namespace

std::string floatLiteral(double V) {
  if (std::isnan(V))
    return "__int_as_float(0x7fffffff)";
  if (std::isinf(V))
    return V > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  std::string S = fmt::format("{:.9g}", V);
  if (S.find_first_of(".e") == std::string::npos)
    S += ".0";
  return S + "f";
}

std::string ExprEmitter::operand(const Node *N, bool InLoop) const {
  if (auto *C = llvm::dyn_cast<ir::ConstNode>(N)) {
    switch (C->getType()) {
    case ir::Type::F32:
      return floatLiteral(C->getValue());
    case ir::Type::I32:
      return fmt::format("{}", static_cast<long long>(C->getValue()));
    case ir::Type::Bool:
      return C->getValue() != 0.0 ? "true" : "false";
    }
  }
  if (auto *P = llvm::dyn_cast<ir::ParamNode>(N))
    return Spell(*P);
  return (InLoop && isElement(N) ? "e" : "v") + std::to_string(N->getId());
}

std::string ExprEmitter::expr(const Node *N, bool InLoop) const {
  auto Op = [&](unsigned I) { return operand(N->operand(I), InLoop); };
  auto IsInt = [&](unsigned I) {
    return N->operand(I)->getType() == ir::Type::I32;
  };
  bool IntResult = N->getType() == ir::Type::I32;
  switch (N->getKind()) {
  case NodeKind::Const:
  case NodeKind::Param:
    return operand(N, InLoop);
  case NodeKind::Neg:
    return "(-" + Op(0) + ")";
  case NodeKind::Exp: {
    // exp(x - y) as one FMA into exp2: the log2(e) factor folds into both.
    const Node *X = N->operand(0);
    if (X->getKind() == NodeKind::Sub && X->operand(0) == FoldedScores)
      // x is the raw score; score_mod's factor c joins log2(e) in the FMA:
      // exp(c·x − y) = exp2(x·(c·log2 e) − y·log2 e).
      return "attnc::exp2_fast(fmaf(" + operand(X->operand(0), InLoop) +
             ", " + FoldedScaleLog2e + ", -" + operand(X->operand(1), InLoop) +
             " * attnc::kLog2e))";
    if (X->getKind() == NodeKind::Sub)
      return "attnc::exp_diff(" + operand(X->operand(0), InLoop) + ", " +
             operand(X->operand(1), InLoop) + ")";
    return "attnc::exp_via_exp2(" + Op(0) + ")";
  }
  case NodeKind::Exp2:
    return "exp2f(" + Op(0) + ")";
  case NodeKind::Log:
    return "logf(" + Op(0) + ")";
  case NodeKind::Log2:
    return "log2f(" + Op(0) + ")";
  case NodeKind::Abs:
    return (IntResult ? "abs(" : "fabsf(") + Op(0) + ")";
  case NodeKind::Tanh:
    return (ValueArithmetic ? "attnc::tanh_fast(" : "tanhf(") + Op(0) + ")";
  case NodeKind::Sigmoid:
    return "attnc::sigmoid(" + Op(0) + ")";
  case NodeKind::Relu:
    return IntResult ? "max(" + Op(0) + ", 0)" : "attnc::relu(" + Op(0) + ")";
  case NodeKind::Sqrt:
    return "sqrtf(" + Op(0) + ")";
  case NodeKind::Rsqrt:
    return "rsqrtf((float)" + Op(0) + ")";
  case NodeKind::Not:
    return "(!" + Op(0) + ")";
  case NodeKind::ToFloat:
    return "((float)" + Op(0) + ")";
  case NodeKind::Add:
    return "(" + Op(0) + " + " + Op(1) + ")";
  case NodeKind::Sub:
    return "(" + Op(0) + " - " + Op(1) + ")";
  case NodeKind::Mul:
    return "(" + Op(0) + " * " + Op(1) + ")";
  case NodeKind::Div: // true division, also of two integers
    if (ValueArithmetic && isElement(N) && !isElement(N->operand(1)))
      return "((float)" + Op(0) + " * (1.0f / (float)" + Op(1) + "))";
    return "((float)" + Op(0) + " / (float)" + Op(1) + ")";
  case NodeKind::Max:
    return IntResult ? "max(" + Op(0) + ", " + Op(1) + ")"
                     : "fmaxf(" + Op(0) + ", " + Op(1) + ")";
  case NodeKind::Min:
    return IntResult ? "min(" + Op(0) + ", " + Op(1) + ")"
                     : "fminf(" + Op(0) + ", " + Op(1) + ")";
  case NodeKind::FloorDiv:
  case NodeKind::Mod: {
    // attnc::floordiv/floormod (variant_support.cuh) have int and float
    // overloads: a mixed pair computes in float, as the IR's type says.
    std::string A = Op(0), B = Op(1);
    if (!IntResult) {
      if (IsInt(0))
        A = "(float)" + A;
      if (IsInt(1))
        B = "(float)" + B;
    }
    // By an int32 scalar input (a chunk length): its host-made multiplier,
    // a multiply-high in place of a division an element.
    if (IntResult)
      if (std::string M = scalarDivisorMultiplier(N->operand(1), B); !M.empty())
        return std::string(N->getKind() == NodeKind::FloorDiv ? "attnc::floordiv_by("
                                                              : "attnc::floormod_by(") +
               A + ", " + B + ", " + M + ")";
    return std::string(N->getKind() == NodeKind::FloorDiv
                           ? "attnc::floordiv("
                           : "attnc::floormod(") +
           A + ", " + B + ")";
  }
  case NodeKind::Lt:
    return "(" + Op(0) + " < " + Op(1) + ")";
  case NodeKind::Le:
    return "(" + Op(0) + " <= " + Op(1) + ")";
  case NodeKind::Gt:
    return "(" + Op(0) + " > " + Op(1) + ")";
  case NodeKind::Ge:
    return "(" + Op(0) + " >= " + Op(1) + ")";
  case NodeKind::Eq:
    return "(" + Op(0) + " == " + Op(1) + ")";
  case NodeKind::Ne:
    return "(" + Op(0) + " != " + Op(1) + ")";
  case NodeKind::And:
    return "(" + Op(0) + " && " + Op(1) + ")";
  case NodeKind::Or:
    return "(" + Op(0) + " || " + Op(1) + ")";
  case NodeKind::Select: {
    std::string T = Op(1), E = Op(2);
    if (N->getType() == ir::Type::F32) {
      if (IsInt(1))
        T = "(float)" + T;
      if (IsInt(2))
        E = "(float)" + E;
    }
    // A branch that loads an input uniform over the tile is evaluated
    // eagerly (attnc::select_eager): one load a thread, not one predicated
    // load an element.
    auto UniformInput = [](const Node *B) {
      auto *P = llvm::dyn_cast<ir::ParamNode>(B);
      return P && P->getParamKind() == ParamKind::Input &&
             (B->getSpace() == ir::Space::Const || B->getSpace() == ir::Space::Head);
    };
    if (UniformInput(N->operand(1)) || UniformInput(N->operand(2)))
      return "attnc::select_eager<" + cType(N->getType()) + ">(" + Op(0) + ", " + T +
             ", " + E + ")";
    return "(" + Op(0) + " ? " + T + " : " + E + ")";
  }
  case NodeKind::Reduce:
    break;
  }
  throw InternalError("codegen: no expression for " +
                      ir::mnemonic(N->getKind()).str());
}

/// The operands the expression for \p N spells (see ExprEmitter::expr).
static llvm::SmallVector<const Node *, 3> spelledOperands(const Node *N) {
  if (N->getKind() == NodeKind::Exp &&
      N->operand(0)->getKind() == NodeKind::Sub)
    return {N->operand(0)->operand(0), N->operand(0)->operand(1)};
  return llvm::SmallVector<const Node *, 3>(N->operands().begin(),
                                            N->operands().end());
}

void ExprEmitter::markNeeded(llvm::ArrayRef<const Node *> Roots) {
  std::vector<const Node *> Order = ir::topologicalOrder(Roots);
  for (const Node *R : Roots)
    Needed.insert(R);
  for (auto It = Order.rbegin(); It != Order.rend(); ++It)
    if (Needed.count(*It))
      for (const Node *Op : spelledOperands(*It))
        Needed.insert(Op);
}

void ExprEmitter::define(const Node *N, bool InLoop) {
  W.line("const " + cType(N->getType()) + " " + operand(N, InLoop) + " = " +
         expr(N, InLoop) + ";");
}

void ExprEmitter::emitScalarBody(llvm::ArrayRef<const Node *> Roots) {
  markNeeded(Roots);
  for (const Node *N : ir::topologicalOrder(Roots))
    if (!N->operands().empty() && needed(N))
      define(N, /*InLoop=*/false);
}

void ExprEmitter::emitElementCone(llvm::ArrayRef<const Node *> Roots,
                                  llvm::DenseSet<const Node *> &Done) {
  // Element-level nodes reachable without passing through a row-level node
  // (those are variables already).
  std::vector<const Node *> Cone, Stack(Roots.begin(), Roots.end());
  llvm::DenseSet<const Node *> Seen;
  while (!Stack.empty()) {
    const Node *N = Stack.back();
    Stack.pop_back();
    if (!isElement(N) || N->operands().empty() || Done.count(N) ||
        !Seen.insert(N).second)
      continue;
    Cone.push_back(N);
    for (const Node *Op : spelledOperands(N))
      Stack.push_back(Op);
  }
  std::sort(Cone.begin(), Cone.end(), [](const Node *A, const Node *B) {
    return A->getId() < B->getId();
  });
  for (const Node *N : Cone) {
    define(N, /*InLoop=*/true);
    Done.insert(N);
  }
}

namespace {

/// The value of a node of space const for head dim \p HeadDim, in double
/// precision; nullopt where it reads anything but literals and the head dim.
std::optional<double> evalConst(const Node *N, int HeadDim) {
  if (auto *C = llvm::dyn_cast<ir::ConstNode>(N))
    return C->getValue();
  if (auto *P = llvm::dyn_cast<ir::ParamNode>(N)) {
    if (P->getParamKind() == ParamKind::HeadDim)
      return double(HeadDim);
    return std::nullopt;
  }
  if (N->getSpace() != ir::Space::Const || llvm::isa<ir::ReduceNode>(N))
    return std::nullopt;
  double Ops[3];
  for (unsigned I = 0; I < N->operands().size(); ++I) {
    std::optional<double> V = evalConst(N->operand(I), HeadDim);
    if (!V)
      return std::nullopt;
    Ops[I] = *V;
  }
  if (llvm::isa<ir::SelectNode>(N))
    return ir::evalSelect(Ops[0], Ops[1], Ops[2]);
  if (N->operands().size() == 1)
    return ir::evalUnary(N->getKind(), Ops[0]);
  if (N->operands().size() == 2)
    return ir::evalBinary(N->getKind(), Ops[0], Ops[1]);
  return std::nullopt;
}

bool isScoreParam(const Node *N) {
  auto *P = llvm::dyn_cast<ir::ParamNode>(N);
  return P && P->getParamKind() == ParamKind::Score;
}

/// c when \p N is score · c (either operand order) with c a compile-time
/// constant, positive and normal at \p HeadDim; else null.
const Node *constantScoreFactor(const Node *N, int HeadDim) {
  if (N->getKind() != NodeKind::Mul)
    return nullptr;
  const Node *C = isScoreParam(N->operand(0))   ? N->operand(1)
                  : isScoreParam(N->operand(1)) ? N->operand(0)
                                                : nullptr;
  if (!C || C->getType() != ir::Type::F32)
    return nullptr;
  // c > 0 (a normal fp32 number): max(c·x) = c·max(x), and fl(c·x) is
  // monotone in x, so the row maximum is the same float either way.
  std::optional<double> V = evalConst(C, HeadDim);
  if (!V || !(*V >= 1e-30 && *V <= 1e30))
    return nullptr;
  return C;
}

/// score_mod's factor c when score_mod is score · c with c a compile-time
/// constant, positive and normal at \p HeadDim; else null.
const Node *scoreModFactor(const ir::Graph &G, int HeadDim) {
  const ir::Function *SM = G.getFunction("score_mod");
  const Node *R = SM ? SM->result("score") : nullptr;
  return R ? constantScoreFactor(R, HeadDim) : nullptr;
}

/// Whether the function with results \p Roots reads the Scores parameter
/// only through exp(scores − y) with y not per element (one FMA into exp2,
/// where c can join log2 e) and, with \p AllowMax, reduce.max(scores); and
/// returns neither the scores nor scores − y. False when it does not read
/// them at all (nothing to fold).
bool scoresOnlyInExpDiff(llvm::ArrayRef<const Node *> Roots, bool AllowMax) {
  const Node *Scores = nullptr;
  std::vector<const Node *> Order = ir::topologicalOrder(Roots);
  for (const Node *N : Order)
    if (auto *P = llvm::dyn_cast<ir::ParamNode>(N);
        P && P->getParamKind() == ParamKind::Scores)
      Scores = N;
  if (!Scores)
    return false;
  for (const Node *Root : Roots)
    if (Root == Scores ||
        (Root->getKind() == NodeKind::Sub && Root->operand(0) == Scores))
      return false;
  llvm::DenseSet<const Node *> ExpArgs; // the Subs each Exp spells
  for (const Node *N : Order)
    if (N->getKind() == NodeKind::Exp)
      ExpArgs.insert(N->operand(0));
  for (const Node *N : Order) {
    for (unsigned I = 0; I < N->operands().size(); ++I) {
      const Node *Op = N->operand(I);
      if (Op == Scores) {
        auto *Red = llvm::dyn_cast<ir::ReduceNode>(N);
        bool MaxOf = AllowMax && Red && Red->getOp() == ir::ReduceOp::Max;
        bool SubOf = N->getKind() == NodeKind::Sub && I == 0 &&
                     !isElement(N->operand(1)) && ExpArgs.count(N);
        if (!MaxOf && !SubOf)
          return false;
      }
      // a scores − y read by anything but exp would see the raw score
      if (Op->getKind() == NodeKind::Sub && Op->operand(0) == Scores &&
          N->getKind() != NodeKind::Exp)
        return false;
    }
  }
  return true;
}

} // namespace

const Node *foldableScoreScale(const ir::Graph &G, int HeadDim) {
  const Node *C = scoreModFactor(G, HeadDim);
  const ir::Function *OF = G.getFunction("online_fwd");
  if (!C || !OF)
    return nullptr;
  // online_fwd reads the scores only through reduce.max(scores) and
  // exp(scores − y) with y per row (emitted as one FMA into exp2).
  std::vector<const Node *> Roots;
  for (const ir::Result &Res : OF->Results)
    Roots.push_back(Res.Value);
  return scoresOnlyInExpDiff(Roots, /*AllowMax=*/true) ? C : nullptr;
}

const Node *foldableForwardScale(const ir::Graph &G, int HeadDim) {
  const Node *C = scoreModFactor(G, HeadDim);
  const ir::Function *F = G.getFunction("forward");
  if (!C || !F || !F->result("p"))
    return nullptr;
  // p reads the scores only as exp(scores − y), y from the finals, the
  // row or the head: exp(c·x − y) = exp2(x·(c·log2 e) − y·log2 e).
  return scoresOnlyInExpDiff({F->result("p")}, /*AllowMax=*/false) ? C : nullptr;
}

namespace {

/// The addends of \p N through its adds and subtractions, each with its
/// sign.
void collectTerms(const Node *N, bool Negated, std::vector<AffineScoreMod::Term> &Out) {
  if (N->getType() == ir::Type::F32 &&
      (N->getKind() == NodeKind::Add || N->getKind() == NodeKind::Sub)) {
    collectTerms(N->operand(0), Negated, Out);
    collectTerms(N->operand(1), N->getKind() == NodeKind::Sub ? !Negated : Negated, Out);
    return;
  }
  Out.push_back({N, Negated});
}

/// Whether \p N is the same over a tile (a constant, a scalar or per-head
/// input, or an expression of them).
bool tileUniform(const Node *N) {
  return N->getSpace() == ir::Space::Const || N->getSpace() == ir::Space::Head;
}

} // namespace

std::optional<AffineScoreMod> affineScoreMod(const ir::Graph &G, int HeadDim) {
  const ir::Function *SM = G.getFunction("score_mod");
  const ir::Function *F = G.getFunction("forward");
  if (!SM || !F || !SM->result("score") || !F->result("p"))
    return std::nullopt;
  // forward: exactly p = exp(scores − y), y not per element.
  const Node *P = F->result("p");
  if (P->getKind() != NodeKind::Exp || P->operand(0)->getKind() != NodeKind::Sub)
    return std::nullopt;
  const Node *Diff = P->operand(0);
  auto *Scores = llvm::dyn_cast<ir::ParamNode>(Diff->operand(0));
  if (!Scores || Scores->getParamKind() != ParamKind::Scores || isElement(Diff->operand(1)))
    return std::nullopt;
  std::vector<AffineScoreMod::Term> All;
  collectTerms(SM->result("score"), false, All);
  AffineScoreMod A;
  A.Y = Diff->operand(1);
  bool SawScore = false;
  for (const AffineScoreMod::Term &T : All) {
    if (!ir::dependsOn(T.Value, ParamKind::Score)) {
      A.Terms.push_back(T);
      continue;
    }
    // The one term of the score: score itself or score · c.
    if (SawScore || T.Negated)
      return std::nullopt;
    SawScore = true;
    if (isScoreParam(T.Value))
      continue;
    A.Factor = constantScoreFactor(T.Value, HeadDim);
    if (!A.Factor)
      return std::nullopt;
  }
  if (!SawScore || A.Terms.empty())
    return std::nullopt;
  return A;
}

void emitAffineForwardFolded(CodeWriter &W, const AffineScoreMod &A,
                             const ParamSpeller &Spell) {
  {
    // In its own scope: c's nodes may be the body's too (one graph).
    auto S = W.block("const float scale_log2e = [&]", "();");
    if (A.Factor) {
      ExprEmitter E(W, Spell);
      E.emitScalarBody({A.Factor});
      W.line("return " + E.operand(A.Factor, false) + " * attnc::kLog2e;");
    } else {
      W.line("return attnc::kLog2e;");
    }
  }
  // What each term spells: u·v (u the same over the tile) as v and u,
  // select(c, u, 0) as c and u, any other term as itself.
  enum class Form { Scaled, Select, Plain };
  struct Spelled {
    Form K;
    const Node *A, *B; ///< v, u (Scaled); c, u (Select); the term (Plain)
    bool Negated;
  };
  std::vector<Spelled> Parts;
  std::vector<const Node *> Roots{A.Y};
  for (const AffineScoreMod::Term &T : A.Terms) {
    const Node *N = T.Value;
    if (N->getKind() == NodeKind::Mul && N->getType() == ir::Type::F32 &&
        !tileUniform(N) && (tileUniform(N->operand(0)) || tileUniform(N->operand(1)))) {
      const bool First = tileUniform(N->operand(0));
      Parts.push_back({Form::Scaled, N->operand(First ? 1 : 0), N->operand(First ? 0 : 1),
                       T.Negated});
    } else if (N->getKind() == NodeKind::Select && tileUniform(N->operand(1)) &&
               llvm::isa<ir::ConstNode>(N->operand(2)) &&
               llvm::cast<ir::ConstNode>(N->operand(2))->getValue() == 0.0) {
      Parts.push_back({Form::Select, N->operand(0), N->operand(1), T.Negated});
    } else {
      Parts.push_back({Form::Plain, N, nullptr, T.Negated});
    }
    Roots.push_back(Parts.back().A);
    if (Parts.back().B)
      Roots.push_back(Parts.back().B);
  }
  ExprEmitter E(W, Spell);
  E.emitScalarBody(Roots);
  auto F = [&](const Node *N) {
    std::string S = E.operand(N, false);
    return N->getType() == ir::Type::F32 ? S : "(float)" + S;
  };
  W.line("float arg = -" + F(A.Y) + " * attnc::kLog2e;");
  for (const Spelled &P : Parts) {
    const char *Sign = P.Negated ? "-" : "";
    switch (P.K) {
    case Form::Scaled:
      W.line(fmt::format("arg = fmaf({}, {}({} * attnc::kLog2e), arg);", F(P.A), Sign, F(P.B)));
      break;
    case Form::Select: {
      // u is loaded and scaled first (eagerly: one load a thread); the
      // condition then picks between arg and arg ± u, which compiles to one
      // predicated add an element, not a select of u and an add.
      const std::string U = fmt::format("sel_{}", &P - Parts.data());
      W.line(fmt::format("const float {} = {} * attnc::kLog2e;", U, F(P.B)));
      W.line(fmt::format("arg = {} ? arg {} {} : arg;", E.operand(P.A, false),
                         P.Negated ? "-" : "+", U));
      break;
    }
    case Form::Plain:
      W.line(fmt::format("arg = fmaf({}, {}attnc::kLog2e, arg);", F(P.A), Sign));
      break;
    }
  }
  W.line("return attnc::exp2_fast(fmaf(score, scale_log2e, arg));");
}

/// online_fwd for one row of a fragment: reductions as loops over the row's
/// elements, then the new scores written back (fused into the last
/// reduction's loop when that computes them anyway), then the new rowscales.
void emitOnlineFwd(CodeWriter &W, const ir::Graph &G, const ParamSpeller &Spell,
                   const std::string &FoldedScale) {
  const ir::Function &F = *G.getFunction("online_fwd");
  ExprEmitter E(W, Spell);
  const Node *FoldedScores = nullptr;
  if (!FoldedScale.empty()) {
    for (const ir::Result &R : F.Results)
      for (const Node *N : ir::topologicalOrder({R.Value}))
        if (auto *P = llvm::dyn_cast<ir::ParamNode>(N);
            P && P->getParamKind() == ParamKind::Scores)
          FoldedScores = N;
    W.line("const float scale_log2e = " + FoldedScale + " * attnc::kLog2e;");
    E.foldScoreScale(FoldedScores, "scale_log2e");
  }
  std::vector<const Node *> Roots;
  for (const ir::Result &R : F.Results)
    Roots.push_back(R.Value);
  const Node *Scores = F.result("scores");
  E.markNeeded(Roots);
  std::vector<const Node *> Order = ir::topologicalOrder(Roots);
  const ir::ReduceNode *LastReduce = nullptr;
  for (const Node *N : Order)
    if (auto *R = llvm::dyn_cast<ir::ReduceNode>(N))
      LastReduce = R;
  // The scores are stored in the last reduction's loop if that loop
  // computes them: nothing reads the old scores after it.
  bool ScoresInLoop = false;
  if (LastReduce && isElement(Scores) && !Scores->operands().empty()) {
    for (const Node *N : ir::topologicalOrder({LastReduce->operand(0)}))
      ScoresInLoop = ScoresInLoop || N == Scores;
  }
  bool ScoresStored = false;
  for (const Node *N : Order) {
    if (isElement(N) || N->operands().empty() || !E.needed(N))
      continue;
    auto *R = llvm::dyn_cast<ir::ReduceNode>(N);
    if (!R) {
      E.define(N, false);
      continue;
    }
    std::string V = E.operand(R, false);
    const char *Identity = R->getOp() == ir::ReduceOp::Max
                               ? "__int_as_float(0xff800000)"
                               : "0.0f";
    W.line("float " + V + " = " + Identity + ";");
    {
      W.line("#pragma unroll");
      auto Loop = W.block("for (int c = 0; c < Frag::kCols; ++c)");
      llvm::DenseSet<const Node *> Done;
      E.emitElementCone({R->operand(0)}, Done);
      std::string X = E.operand(R->operand(0), true);
      if (R->operand(0)->getType() == ir::Type::I32)
        X = "(float)" + X;
      switch (R->getOp()) {
      case ir::ReduceOp::Max:
        W.line("if (f.active(r, c)) " + V + " = fmaxf(" + V + ", " + X + ");");
        break;
      case ir::ReduceOp::Sum:
        W.line("if (f.active(r, c)) " + V + " += " + X + ";");
        break;
      case ir::ReduceOp::AbsSum:
        W.line("if (f.active(r, c)) " + V + " += fabsf(" + X + ");");
        break;
      }
      if (R == LastReduce && ScoresInLoop) {
        E.emitElementCone({Scores}, Done);
        W.line("f.at(r, c) = f.active(r, c) ? " + E.operand(Scores, true) +
               " : 0.0f;");
        ScoresStored = true;
      }
    }
    W.line(V + " = Frag::allreduce_" +
           std::string(R->getOp() == ir::ReduceOp::Max ? "max" : "sum") + "(" +
           V + ");");
    if (FoldedScores && R->operand(0) == FoldedScores)
      W.line(V + " *= " + FoldedScale + "; // max of c·x is c·max(x), c > 0");
  }
  if (!ScoresStored) {
    W.line("#pragma unroll");
    auto Loop = W.block("for (int c = 0; c < Frag::kCols; ++c)");
    auto *P = llvm::dyn_cast<ir::ParamNode>(Scores);
    if (P && P->getParamKind() == ParamKind::Scores) {
      W.line("if (!f.active(r, c)) f.at(r, c) = 0.0f;");
    } else {
      llvm::DenseSet<const Node *> Done;
      E.emitElementCone({Scores}, Done);
      std::string X = E.operand(Scores, true);
      if (Scores->getType() == ir::Type::I32)
        X = "(float)" + X;
      W.line("f.at(r, c) = f.active(r, c) ? " + X + " : 0.0f;");
    }
  }
  // New rowscales through temporaries: a result may be another old rowscale.
  for (const ir::RowscaleDecl &D : G.decls().OnlineRowscales)
    W.line("const float n_" + rowscaleField(G, D.Name) + " = " +
           E.operand(F.result(D.Name), false) + ";");
  for (const ir::RowscaleDecl &D : G.decls().OnlineRowscales)
    W.line("st." + rowscaleField(G, D.Name) + " = n_" +
           rowscaleField(G, D.Name) + ";");
  W.line("o_scale = " + E.operand(F.result("o_scale"), false) + ";");
}

/// The epilogue for one row: row-level values, then o element by element,
/// then the final rowscales.
void emitEpilogue(CodeWriter &W, const ir::Graph &G, const ParamSpeller &Spell) {
  const ir::Function &F = *G.getFunction("online_fwd_epilogue");
  ExprEmitter E(W, Spell);
  E.spellValueArithmetic(); // o / r: one division a row
  std::vector<const Node *> Roots;
  for (const ir::Result &R : F.Results)
    Roots.push_back(R.Value);
  E.markNeeded(Roots);
  for (const Node *N : ir::topologicalOrder(Roots))
    if (!isElement(N) && !N->operands().empty() && E.needed(N))
      E.define(N, false);
  const Node *O = F.result("o");
  auto *P = llvm::dyn_cast<ir::ParamNode>(O);
  if (!P || P->getParamKind() != ParamKind::Output) {
    W.line("#pragma unroll");
    auto Loop = W.block("for (int c = 0; c < OFrag::kCols; ++c)");
    llvm::DenseSet<const Node *> Done;
    E.emitElementCone({O}, Done);
    W.line("of.at(r, c) = " + E.operand(O, true) + ";");
  }
  unsigned I = 0;
  for (const ir::RowscaleDecl &D : G.decls().FinalRowscales)
    W.line(fmt::format("finals[{}] = {};", I++,
                       E.operand(F.result(D.Name), false)));
}

namespace {

/// One input's term dS · g, g = ∂score_mod/∂input: g itself, or, for g =
/// select(c, a, 0) (a bias on part of the tile), c and a, so that the
/// term is added where c holds and nothing is multiplied by 0 elsewhere.
struct GradTerm {
  const Node *Cond = nullptr; ///< c, or null
  const Node *Factor;         ///< a (with Cond) or g
};

GradTerm gradTerm(const Node *G) {
  if (G->getKind() == ir::NodeKind::Select) {
    auto *Zero = llvm::dyn_cast<ir::ConstNode>(G->operand(2));
    if (Zero && Zero->getValue() == 0.0)
      return {G->operand(0), G->operand(1)};
  }
  return {nullptr, G};
}

} // namespace

void emitInputGrads(CodeWriter &W, const ir::Graph &G,
                    const ParamSpeller &Spell) {
  const ir::Function *F = G.getFunction("score_mod_input_grad");
  std::vector<GradTerm> Terms;
  std::vector<const Node *> Roots;
  for (const ir::InputDecl &D : G.decls().Inputs) {
    if (!D.RequiresGrad)
      continue;
    const Node *R = F ? F->result("d_" + D.Name) : nullptr;
    if (!R)
      throw InternalError("codegen: no gradient d_" + D.Name + " of '" +
                          G.name() + "'; the autodiff pass did not run");
    Terms.push_back(gradTerm(R));
    if (Terms.back().Cond)
      Roots.push_back(Terms.back().Cond);
    Roots.push_back(Terms.back().Factor);
  }
  if (Roots.empty())
    return;
  ExprEmitter E(W, Spell);
  // Spelled as score_mod_grad spells them (emitScalarFunction): the
  // backward calls both on the same raw score, one after the other, and
  // only identical expressions are computed once (a soft cap's tanh and
  // its division by the cap: three IEEE divisions and one tanh an element
  // fewer; gradients need not match a comparison's last bit).
  E.spellValueArithmetic();
  E.emitScalarBody(Roots);
  // dS is 0 at an element that is not valid, so a factor that is finite
  // everywhere (a distance, a constant, a select of them) adds 0 there with
  // no test; another may be inf or NaN where the mask excludes the element
  // (a pole, a log of a negative distance) and is replaced by 0 there.
  for (size_t I = 0; I < Terms.size(); ++I) {
    const GradTerm &T = Terms[I];
    std::string A = E.operand(T.Factor, false);
    if (T.Factor->getType() != ir::Type::F32)
      A = "(float)" + A;
    const bool Finite = analysis::isProvablyFinite(T.Factor);
    const std::string Acc = fmt::format("gacc[{}]", I);
    if (!T.Cond) {
      W.line(fmt::format("{0} = fmaf(ds, {1}, {0});", Acc,
                         Finite ? A : "valid ? " + A + " : 0.0f"));
      continue;
    }
    std::string C = E.operand(T.Cond, false);
    if (!Finite)
      C = "valid && " + C;
    auto *One = llvm::dyn_cast<ir::ConstNode>(T.Factor);
    W.line(One && One->getValue() == 1.0
               ? fmt::format("{0} = {1} ? {0} + ds : {0};", Acc, C)
               : fmt::format("{0} = {1} ? fmaf(ds, {2}, {0}) : {0};", Acc, C, A));
  }
}

} // namespace attn::codegen
