// The autodiff pass: score_mod gradients, custom-input gradients, and the
// online function's backward where the user left it out.
#include "attn/transforms/Autodiff.h"
#include "attn/transforms/AutodiffBuilder.h"

#include "attn/ir/Walk.h"

namespace attn::transforms {

using ir::Node;
using ir::ParamKind;

std::vector<const ir::InputDecl *> gradInputDecls(const ir::Graph &G) {
  std::vector<const ir::InputDecl *> Out;
  for (const ir::InputDecl &D : G.decls().Inputs)
    if (D.RequiresGrad)
      Out.push_back(&D);
  return Out;
}

namespace {

/// Replaces the results of function \p Name, adding the function if needed.
void setFunction(ir::Graph &G, const std::string &Name,
                 std::vector<ir::Result> Results) {
  ir::Function *F = G.getFunction(Name);
  if (!F)
    F = &G.addFunction(Name);
  F->Results = std::move(Results);
}

/// Inputs that require a gradient get it through score_mod only: a mask
/// selects keys and has no gradient, and the kernels do not differentiate
/// the online function with respect to inputs.
void checkGradInputUses(const ir::Graph &G) {
  for (const ir::Function &F : G.functions()) {
    bool IsMask = F.Name == "mask_mod";
    bool IsOnline = F.Name == "online_fwd" || F.Name == "online_fwd_epilogue" ||
                    F.Name == "forward";
    if (!IsMask && !IsOnline)
      continue;
    std::vector<const Node *> Roots;
    for (const ir::Result &R : F.Results)
      Roots.push_back(R.Value);
    for (const ir::ParamNode *P : ir::reachableParams(Roots)) {
      if (P->getParamKind() != ParamKind::Input)
        continue;
      const ir::InputDecl *D = G.decls().findInput(P->getName());
      if (!D || !D->RequiresGrad)
        continue;
      std::string In = "custom input '" + D->Name + "'";
      if (IsMask)
        throw UserError(G.name() + ": mask_mod reads " + In +
                        ", which requires a gradient; a mask only selects "
                        "keys and has no gradient. Declare a second input "
                        "without requiresGrad() for the mask");
      throw NotSupportedYet(G.name() + ": " + F.Name + " reads " + In +
                            ", which requires a gradient; gradients of "
                            "custom inputs flow through score_mod only");
    }
  }
}

} // namespace

void addScoreModGradients(ir::Graph &G) {
  const ir::Function *SM = G.getFunction("score_mod");
  if (!SM)
    throw InternalError("autodiff: '" + G.name() + "' has no score_mod");
  checkGradInputUses(G);
  // Limit errors (attn/ir/Limits.h) while differentiating name the function.
  ir::Graph::ContextScope Scope(G, "score_mod (its derivative)");
  const Node *Out = SM->result("score");
  const Node *One = G.constant(1.0);
  const Node *Zero = G.constant(0.0);
  const Node *Score =
      G.param(ParamKind::Score, "score", ir::Type::F32, ir::Space::Tile);
  const Node *DScore = tangent(G, Out, {{Score, One}});
  setFunction(G, "score_mod_grad", {{"dscore", DScore ? DScore : Zero}});

  std::vector<ir::Result> InputGrads;
  for (const ir::InputDecl *D : gradInputDecls(G)) {
    const Node *In = G.param(ParamKind::Input, D->Name, ir::Type::F32,
                             ir::inputShapeSpace(D->Shape));
    const Node *DIn = tangent(G, Out, {{In, One}});
    InputGrads.push_back({"d_" + D->Name, DIn ? DIn : Zero});
  }
  if (!InputGrads.empty())
    setFunction(G, "score_mod_input_grad", std::move(InputGrads));
}

void autodiff(ir::Graph &G) {
  if (G.decls().Kind != ir::DefinitionKind::Transformer)
    return;
  addScoreModGradients(G);
  if (G.getFunction("backward"))
    return; // written by the user (or derived by an earlier run)
  try {
    ir::Graph::ContextScope Scope(G, "backward (derived)");
    deriveBackward(G);
  } catch (const CannotDerive &E) {
    G.decls().BackwardUnavailable = E.what();
  }
}

void requireBackward(const ir::Graph &G) {
  if (G.getFunction("backward"))
    return;
  if (!G.decls().BackwardUnavailable.empty())
    throw UserError(G.decls().BackwardUnavailable);
  throw UserError("'" + G.name() +
                  "' has no backward; write OnlineFunc::backward");
}

} // namespace attn::transforms
