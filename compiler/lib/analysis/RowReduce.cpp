// Row-reduce analysis and the online-function contract.
#include "attn/analysis/RowReduce.h"

#include "attn/Error.h"
#include "attn/ir/Printer.h"
#include "attn/ir/Walk.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Casting.h"

#include <algorithm>

namespace attn::analysis {

using ir::Node;
using ir::ParamKind;
using ir::Space;

namespace {

/// The parameter kinds each function may read, and which index arguments
/// it has (online_fwd has no kv_idx).
struct FunctionRule {
  const char *Name;
  std::vector<ParamKind> Params;
  std::vector<llvm::StringRef> Indices;
};

const std::vector<llvm::StringRef> TileIndices = {"b", "h", "q_idx", "kv_idx"};
const std::vector<llvm::StringRef> RowIndices = {"b", "h", "q_idx"};
const std::vector<llvm::StringRef> TokenIndices = {"b", "h", "t"};

const FunctionRule Rules[] = {
    {"score_mod", {ParamKind::Score, ParamKind::Index, ParamKind::Input,
                   ParamKind::HeadDim}, TileIndices},
    {"mask_mod", {ParamKind::Index, ParamKind::Input, ParamKind::HeadDim},
     TileIndices},
    {"online_fwd", {ParamKind::Scores, ParamKind::Rowscale, ParamKind::Index,
                    ParamKind::Input, ParamKind::HeadDim}, RowIndices},
    {"online_fwd_epilogue", {ParamKind::Output, ParamKind::Rowscale,
                             ParamKind::Index, ParamKind::Input,
                             ParamKind::HeadDim}, RowIndices},
    {"forward", {ParamKind::Scores, ParamKind::FinalRowscale, ParamKind::Index,
                 ParamKind::Input, ParamKind::HeadDim}, TileIndices},
    {"backward", {ParamKind::GradProbs, ParamKind::Probs,
                  ParamKind::FinalRowscale, ParamKind::Doosum,
                  ParamKind::Index, ParamKind::Input, ParamKind::HeadDim},
     TileIndices},
    // Two states of one row, nothing else (Merge.h).
    {"combine", {ParamKind::Rowscale, ParamKind::OtherRowscale}, {}},
    // Added by the autodiff pass: derivatives of score_mod.
    {"score_mod_grad", {ParamKind::Score, ParamKind::Index, ParamKind::Input,
                        ParamKind::HeadDim}, TileIndices},
    {"score_mod_input_grad", {ParamKind::Score, ParamKind::Index,
                              ParamKind::Input, ParamKind::HeadDim},
     TileIndices},
    {"q_mod", {ParamKind::Element, ParamKind::Index, ParamKind::Input,
               ParamKind::HeadDim}, TokenIndices},
    {"k_mod", {ParamKind::Element, ParamKind::Index, ParamKind::Input,
               ParamKind::HeadDim}, TokenIndices},
    {"v_mod", {ParamKind::Element, ParamKind::Index, ParamKind::Input,
               ParamKind::HeadDim}, TokenIndices},
    {"decay_mod", {ParamKind::Decay, ParamKind::Index, ParamKind::Input,
                   ParamKind::HeadDim}, TokenIndices},
};

const FunctionRule &ruleFor(const ir::Function &F) {
  for (const FunctionRule &R : Rules)
    if (F.Name == R.Name)
      return R;
  throw InternalError("no contract rule for function '" + F.Name + "'");
}

[[noreturn]] void violation(const ir::Function &F, const std::string &Msg) {
  throw UserError(F.Name + ": " + Msg);
}

std::string quoted(const Node *N) { return "`" + ir::shortExpr(N) + "`"; }

/// Whether \p P is an argument of the function \p Rule is for.
bool isArgument(const FunctionRule &Rule, const ir::ParamNode *P) {
  ParamKind K = P->getParamKind();
  if (std::find(Rule.Params.begin(), Rule.Params.end(), K) ==
      Rule.Params.end())
    return false;
  return K != ParamKind::Index ||
         std::find(Rule.Indices.begin(), Rule.Indices.end(), P->getName()) !=
             Rule.Indices.end();
}

/// The functions of \p G traced before \p F that have \p P as an argument,
/// "score_mod" or "score_mod or mask_mod": where a symbol that reads \p P
/// and is used in \p F was made (a later function's symbols did not exist
/// yet when F was traced). Empty when there is none.
std::string madeIn(const ir::Graph &G, const ir::Function &F,
                   const ir::ParamNode *P) {
  llvm::SmallVector<llvm::StringRef, 4> Names;
  for (const ir::Function &Earlier : G.functions()) {
    if (&Earlier == &F)
      break;
    if (isArgument(ruleFor(Earlier), P))
      Names.push_back(Earlier.Name);
  }
  if (Names.size() < 2)
    return llvm::join(Names, "");
  return llvm::join(llvm::makeArrayRef(Names).drop_back(), ", ") + " or " +
         Names.back().str();
}

/// Each function reads only its own arguments: a symbol captured from
/// another function's trace would have no value where this one runs. The
/// message names both functions: the one that uses the symbol and the one
/// (or the ones it may be) that made it.
void checkParams(const ir::Graph &G, const ir::Function &F,
                 const FunctionRule &Rule) {
  std::vector<const Node *> Roots;
  for (const ir::Result &R : F.Results)
    Roots.push_back(R.Value);
  for (const ir::ParamNode *P : ir::reachableParams(Roots)) {
    if (isArgument(Rule, P))
      continue;
    ParamKind K = P->getParamKind();
    if (K == ParamKind::Scores && F.Name == "online_fwd_epilogue")
      violation(F, "uses the per-element scores, which the epilogue cannot "
                   "see; carry what it needs in an online rowscale");
    std::string Maker = madeIn(G, F, P);
    violation(F, "uses '" + P->getName().str() + "' (" +
                     ir::paramKindName(K).str() +
                     "), which is not an argument of " + F.Name +
                     (Maker.empty() ? ""
                                    : ": the symbol was made in " + Maker) +
                     "; a symbol cannot be carried from one function to "
                     "another");
  }
}

void requirePerRow(const ir::Function &F, const ir::Result &R,
                   const std::string &What, const char *Hint) {
  Space S = R.Value->getSpace();
  if (ir::isPerRowOrCoarser(S))
    return;
  violation(F, What + " is " + ir::spaceDescription(S).str() + " " +
                   quoted(R.Value) + "; " + Hint);
}

void checkOnlineFwd(const ir::Function &F, const ir::Graph &G) {
  for (const ir::RowscaleDecl &D : G.decls().OnlineRowscales)
    requirePerRow(F, {D.Name, F.result(D.Name)},
                  "new rowscale '" + D.Name + "'",
                  "a rowscale holds one value per row; reduce per-element "
                  "values with get_reduce(\"max\"), get_reduce(\"sum\") or "
                  "get_reduce(\"abssum\")");
  requirePerRow(F, {"o_scale", F.result("o_scale")}, "o_scale",
                "o_scale multiplies each row of the accumulator; build it "
                "from rowscales and reductions");
}

void checkEpilogue(const ir::Function &F, const ir::Graph &G) {
  const Node *O = F.result("o");
  if (O->getSpace() == Space::Tile || O->getSpace() == Space::Col)
    violation(F, "o is " + ir::spaceDescription(O->getSpace()).str() + " " +
                     quoted(O) + "; the epilogue maps o and rowscales to o");
  for (const ir::RowscaleDecl &D : G.decls().FinalRowscales) {
    const Node *V = F.result(D.Name);
    if (V->getSpace() == Space::Out)
      violation(F, "final rowscale '" + D.Name + "' depends on o " +
                       quoted(V) +
                       "; final rowscales are per-row, built from the online "
                       "rowscales");
    requirePerRow(F, {D.Name, V}, "final rowscale '" + D.Name + "'",
                  "final rowscales are per-row, built from the online "
                  "rowscales");
  }
}

void checkCombine(const ir::Function &F, const ir::Graph &G) {
  const char *Hint = "combine merges per-row states; build it from the "
                     "two states' rowscales";
  for (const ir::RowscaleDecl &D : G.decls().OnlineRowscales)
    requirePerRow(F, {D.Name, F.result(D.Name)},
                  "merged rowscale '" + D.Name + "'", Hint);
  for (const char *S : {"o_scale_a", "o_scale_b"})
    requirePerRow(F, {S, F.result(S)}, S, Hint);
}

void checkBackward(const ir::Function &F) {
  const Node *D = F.result("dscores");
  if (D->getSpace() != Space::Tile && D->getSpace() != Space::Col)
    violation(F, "dscores is " + ir::spaceDescription(D->getSpace()).str() +
                     " " + quoted(D) +
                     "; it must be per-element (one gradient per score), "
                     "built from dp and scores");
}

void checkLinearMod(const ir::Function &F) {
  const ir::Result &R = F.Results.front();
  if (F.Name == "decay_mod")
    requirePerRow(F, R, "the log-decay g",
                  "decay_mod gives one value per token");
}

} // namespace

RowReduceInfo analyzeRowReduce(const ir::Graph &G) {
  RowReduceInfo Info;
  for (const ir::Function &F : G.functions()) {
    checkParams(G, F, ruleFor(F));
    if (F.Name == "online_fwd")
      checkOnlineFwd(F, G);
    else if (F.Name == "online_fwd_epilogue")
      checkEpilogue(F, G);
    else if (F.Name == "backward")
      checkBackward(F);
    else if (F.Name == "combine")
      checkCombine(F, G);
    else if (G.decls().Kind == ir::DefinitionKind::Linear)
      checkLinearMod(F);

    std::vector<const Node *> Roots;
    for (const ir::Result &R : F.Results)
      Roots.push_back(R.Value);
    for (const Node *N : ir::topologicalOrder(Roots))
      if (auto *R = llvm::dyn_cast<ir::ReduceNode>(N)) {
        if (F.Name != "online_fwd")
          violation(F, "get_reduce(\"" + ir::reduceOpName(R->getOp()).str() +
                           "\") is only available in online_fwd, where the "
                           "scores of a key block are at hand");
        Info.Reductions.push_back({F.Name, R});
      }
  }
  if (const ir::Function *B = G.getFunction("backward"))
    Info.BackwardUsesDoosum = ir::dependsOn(B->result("dscores"),
                                            ParamKind::Doosum);
  if (const ir::Function *F = G.getFunction("online_fwd")) {
    auto *C = llvm::dyn_cast<ir::ConstNode>(F->result("o_scale"));
    Info.OScaleIsOne = C && C->getValue() == 1.0;
  }
  if (const ir::Function *F = G.getFunction("decay_mod"))
    Info.UsesDecayInput = ir::dependsOn(F->result("g"), ParamKind::Decay);
  return Info;
}

} // namespace attn::analysis
