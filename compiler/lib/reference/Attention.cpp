// Reference transformer-style attention, evaluated from the IR in double.
#include "attn/reference/Attention.h"

#include "attn/Error.h"
#include "attn/analysis/Merge.h"
#include "attn/reference/Evaluator.h"
#include "attn/reference/InputBinding.h"
#include "attn/transforms/Autodiff.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attn::reference {

namespace {

constexpr double NegInf = -std::numeric_limits<double>::infinity();

struct Dims {
  int64_t B, H, Hkv, Sq, Skv, D, DV;
};

Dims dimsOf(const AttentionInputs &In) {
  return {In.Q.dim(0), In.Q.dim(1), In.K.dim(1), In.Q.dim(2),
          In.K.dim(2), In.Q.dim(3), In.V.dim(3)};
}

const ir::Function &function(const ir::Graph &G, llvm::StringRef Name) {
  if (const ir::Function *F = G.getFunction(Name))
    return *F;
  throw InternalError("reference: no function '" + Name.str() + "'");
}

/// Everything about one query row the functions may read.
class Row {
public:
  Row(const CompiledDefinition &Def, const AttentionInputs &In, int64_t B,
      int64_t H, int64_t I)
      : G(*Def.Graph), In(In), Dm(dimsOf(In)), B(B), H(H), I(I),
        Hk(H / (Dm.H / Dm.Hkv)) {
    // Raw scores with d(raw)/d(raw) = 1, so that score_mod's evaluation
    // carries d(score)/d(raw) along.
    // Rows of q and k are contiguous: index them once per row (Tensor::at's
    // checked offset per element was most of the reference's time).
    Values Raw(Dm.Skv);
    const double *Qr = Dm.D ? In.Q.Data.data() + In.Q.offset({B, H, I, 0}) : nullptr;
    for (int64_t J = 0; J < Dm.Skv; ++J) {
      double S = 0;
      const double *Kr = Dm.D ? In.K.Data.data() + In.K.offset({B, Hk, J, 0}) : nullptr;
      for (int64_t X = 0; X < Dm.D; ++X)
        S += Qr[X] * Kr[X];
      Raw[J] = {S, 1.0};
    }
    RawScores = std::move(Raw);
    std::vector<bool> All(Dm.Skv, true);
    setColumns(0, Dm.Skv);
    {
      Evaluator E(binder(), All);
      Values S = E.eval(function(G, "score_mod").result("score"));
      ModScores.resize(Dm.Skv);
      for (int64_t J = 0; J < Dm.Skv; ++J)
        ModScores[J] = S.size() == 1 ? S[0] : S[J];
    }
    Mask.assign(Dm.Skv, !(I < (int64_t)In.MaskedRows.size() &&
                          In.MaskedRows[I]));
    if (const ir::Function *M = G.getFunction("mask_mod")) {
      Evaluator E(binder(), All);
      for (int64_t J = 0; J < Dm.Skv; ++J)
        Mask[J] = Mask[J] && E.at(M->result("mask"), J).V != 0.0;
    }
  }

  /// Restricts col/tile parameters to keys [C0, C1).
  void setColumns(int64_t C0, int64_t C1) {
    this->C0 = C0;
    this->C1 = C1;
  }
  int64_t width() const { return C1 - C0; }
  std::vector<bool> activeColumns() const {
    return std::vector<bool>(Mask.begin() + C0, Mask.begin() + C1);
  }

  Evaluator::Binder binder() {
    return [this](const ir::ParamNode &P) { return bind(P); };
  }

  Values bind(const ir::ParamNode &P) {
    switch (P.getParamKind()) {
    case ir::ParamKind::Score:
      return slice(RawScores);
    case ir::ParamKind::Scores:
      return slice(ModScores, /*Constant=*/true);
    case ir::ParamKind::Output:
      return Out;
    case ir::ParamKind::Rowscale:
      return {Dual{Rowscales.at(P.getName().str()), 0.0}};
    case ir::ParamKind::FinalRowscale:
      return {Dual{Finals.at(P.getName().str()), 0.0}};
    case ir::ParamKind::Probs:
      return slice(Probs, true);
    case ir::ParamKind::GradProbs:
      return slice(GradProbs, true);
    case ir::ParamKind::Doosum:
      return {Dual{Doosum, 0.0}};
    case ir::ParamKind::Index: {
      llvm::StringRef N = P.getName();
      if (N == "kv_idx") {
        Values V(width());
        for (int64_t J = C0; J < C1; ++J)
          V[J - C0] = {double(J + In.KvIndexOffset), 0.0};
        return V;
      }
      double X = N == "b"   ? B + In.BatchIndexOffset
                 : N == "h" ? H
                            : I + In.QIndexOffset;
      return {Dual{X, 0.0}};
    }
    case ir::ParamKind::Input:
      return bindInput(G, In.Inputs, P.getName(), B, H, I, C0, C1);
    case ir::ParamKind::HeadDim:
      return {Dual{double(Dm.D), 0.0}};
    case ir::ParamKind::Element:
    case ir::ParamKind::OtherRowscale:
    case ir::ParamKind::Decay:
      break;
    }
    throw InternalError("reference: attention has no parameter '" +
                        P.getName().str() + "'");
  }

  Values slice(const Values &All, bool Constant = false) const {
    Values V(All.begin() + C0, All.begin() + C1);
    if (Constant)
      for (Dual &X : V)
        X.D = 0.0;
    return V;
  }

  const ir::Graph &G;
  const AttentionInputs &In;
  Dims Dm;
  int64_t B, H, I, Hk;
  int64_t C0 = 0, C1 = 0;
  Values RawScores, ModScores, Probs, GradProbs, Out;
  std::vector<bool> Mask;
  std::map<std::string, double> Rowscales, Finals;
  double Doosum = 0.0;
};

/// The online state of one row over keys [K0, K1) in blocks of \p BlockN
/// (0: one block), from the declared initial rowscales.
analysis::MergeState onlineState(Row &R, int64_t K0, int64_t K1,
                                 int64_t BlockN) {
  const ir::Graph &G = R.G;
  const ir::Function &Fwd = function(G, "online_fwd");
  for (const ir::RowscaleDecl &D : G.decls().OnlineRowscales)
    R.Rowscales[D.Name] = D.Init;
  std::vector<double> Acc(R.Dm.DV, 0.0);
  bool Any = false;
  int64_t Step = BlockN > 0 ? BlockN : std::max<int64_t>(K1 - K0, 1);
  for (int64_t C0 = K0; C0 < K1; C0 += Step) {
    R.setColumns(C0, std::min(C0 + Step, K1));
    std::vector<bool> Active = R.activeColumns();
    bool BlockAny = false;
    for (bool A : Active)
      BlockAny = BlockAny || A;
    if (!BlockAny)
      continue; // the row keeps its rowscales; o_scale is 1
    Any = true;
    Evaluator E(R.binder(), Active);
    double OScale = E.at(Fwd.result("o_scale"), 0).V;
    for (double &X : Acc)
      X *= OScale;
    for (int64_t J = R.C0; J < R.C1; ++J) {
      if (!Active[J - R.C0])
        continue;
      double P = E.at(Fwd.result("scores"), J - R.C0).V;
      if (R.In.RoundProbs)
        P = R.In.RoundProbs(P);
      if (R.Dm.DV == 0)
        continue;
      const double *Vr = R.In.V.Data.data() + R.In.V.offset({R.B, R.Hk, J, 0});
      for (int64_t X = 0; X < R.Dm.DV; ++X)
        Acc[X] += P * Vr[X];
    }
    std::map<std::string, double> Next;
    for (const ir::RowscaleDecl &D : G.decls().OnlineRowscales)
      Next[D.Name] = E.at(Fwd.result(D.Name), 0).V;
    R.Rowscales = Next;
  }
  analysis::MergeState S;
  for (const ir::RowscaleDecl &D : G.decls().OnlineRowscales)
    S.Rowscales.push_back(R.Rowscales.at(D.Name));
  S.O = std::move(Acc);
  S.Seen = Any;
  return S;
}

/// The epilogue of one row's final state; a row with no unmasked key gives
/// O = 0 and finals = -inf. Returns whether the row had one.
bool finishRow(Row &R, const analysis::MergeState &S, std::vector<double> &O,
               std::map<std::string, double> &Finals) {
  const ir::Graph &G = R.G;
  if (!S.Seen) {
    O.assign(R.Dm.DV, 0.0);
    for (const ir::RowscaleDecl &D : G.decls().FinalRowscales)
      Finals[D.Name] = NegInf;
    return false;
  }
  const ir::Function &Epi = function(G, "online_fwd_epilogue");
  const auto &Decls = G.decls().OnlineRowscales;
  for (size_t I = 0; I < Decls.size(); ++I)
    R.Rowscales[Decls[I].Name] = S.Rowscales[I];
  R.setColumns(0, 0);
  R.Out.clear();
  for (double X : S.O)
    R.Out.push_back({X, 0.0});
  Evaluator E(R.binder(), {});
  O.resize(R.Dm.DV);
  for (int64_t X = 0; X < R.Dm.DV; ++X)
    O[X] = E.at(Epi.result("o"), X).V;
  for (const ir::RowscaleDecl &D : G.decls().FinalRowscales)
    Finals[D.Name] = E.at(Epi.result(D.Name), 0).V;
  return true;
}

/// Runs the online algorithm for one row; returns false for a row with no
/// unmasked key (whose outputs are then O = 0 and finals = -inf).
bool runOnline(Row &R, int64_t BlockN, std::vector<double> &O,
               std::map<std::string, double> &Finals) {
  return finishRow(R, onlineState(R, 0, R.Dm.Skv, BlockN), O, Finals);
}

AttentionOutputs emptyOutputs(const ir::Graph &G, const Dims &Dm) {
  AttentionOutputs Out;
  Out.O = Tensor({Dm.B, Dm.H, Dm.Sq, Dm.DV});
  for (const ir::RowscaleDecl &D : G.decls().FinalRowscales)
    Out.Finals[D.Name] = Tensor({Dm.B, Dm.H, Dm.Sq});
  return Out;
}

/// Checks the definition's kind and validates the inputs, then returns their
/// sizes. Every entry point calls it before it reads a size, so that a
/// tensor of the wrong rank is a UserError, not an out-of-range read.
Dims validated(const CompiledDefinition &Def, const AttentionInputs &In) {
  if (Def.Graph->decls().Kind != ir::DefinitionKind::Transformer)
    throw UserError("'" + Def.Graph->name() +
                    "' is linear attention; use the linear reference");
  validateAttentionInputs(*Def.Graph, In);
  return dimsOf(In);
}

/// Calls \p Fn(Row&) for every (b, h, query) of validated inputs of sizes
/// \p Dm.
template <typename Fn>
void forEachRow(const CompiledDefinition &Def, const AttentionInputs &In,
                const Dims &Dm, Fn &&Body) {
  for (int64_t B = 0; B < Dm.B; ++B)
    for (int64_t H = 0; H < Dm.H; ++H)
      for (int64_t I = 0; I < Dm.Sq; ++I) {
        Row R(Def, In, B, H, I);
        Body(R);
      }
}

} // namespace

MaskStats attentionMaskStats(const CompiledDefinition &Def,
                             const AttentionInputs &In) {
  AttentionInputs Unforced = In;
  Unforced.MaskedRows.assign(Unforced.MaskedRows.size(), false);
  Dims Dm = validated(Def, Unforced);
  MaskStats S;
  forEachRow(Def, Unforced, Dm, [&](Row &R) {
    int64_t Kept = 0;
    for (bool M : R.Mask)
      Kept += M;
    S.Elements += Dm.Skv;
    S.MaskedElements += Dm.Skv - Kept;
    S.Rows += 1;
    S.FullyMaskedRows += Kept == 0;
  });
  return S;
}

namespace {

/// Stores one row's outputs into \p Out.
void store(AttentionOutputs &Out, const Row &R, const std::vector<double> &O,
           const std::map<std::string, double> &Finals) {
  for (int64_t X = 0; X < R.Dm.DV; ++X)
    Out.O.at({R.B, R.H, R.I, X}) = O[X];
  for (const auto &[Name, V] : Finals)
    Out.Finals[Name].at({R.B, R.H, R.I}) = V;
}

/// The element of a custom input of class \p S that (b, h, i, j) reads.
double &inputSlot(Tensor &T, ir::InputShape S, int64_t B, int64_t H, int64_t I,
                  int64_t J) {
  return T.Data.at(inputOffset(T, S, B, H, I, J));
}

/// P for the whole row from the final rowscales (0 at masked keys).
Values recomputeProbs(Row &R) {
  const ir::Function &Fwd = function(R.G, "forward");
  R.setColumns(0, R.Dm.Skv);
  Evaluator E(R.binder(), R.activeColumns());
  Values P(R.Dm.Skv);
  for (int64_t J = 0; J < R.Dm.Skv; ++J)
    P[J] = {R.Mask[J] ? E.at(Fwd.result("p"), J).V : 0.0, 0.0};
  return P;
}

} // namespace

AttentionOutputs attentionOnline(const CompiledDefinition &Def,
                                 const AttentionInputs &In, int64_t BlockN) {
  Dims Dm = validated(Def, In);
  AttentionOutputs Out = emptyOutputs(*Def.Graph, Dm);
  forEachRow(Def, In, Dm, [&](Row &R) {
    std::vector<double> O;
    std::map<std::string, double> Finals;
    runOnline(R, BlockN, O, Finals);
    store(Out, R, O, Finals);
  });
  return Out;
}

AttentionOutputs attentionSplitMerged(const CompiledDefinition &Def,
                                      const AttentionInputs &In,
                                      const std::vector<int64_t> &Bounds,
                                      const analysis::MergeInfo &Merge) {
  Dims Dm = validated(Def, In);
  if (Bounds.size() < 2 || Bounds.front() != 0 || Bounds.back() != Dm.Skv ||
      !std::is_sorted(Bounds.begin(), Bounds.end()))
    throw UserError("attentionSplitMerged: the bounds must rise from 0 to "
                    "seq_kv (" + std::to_string(Dm.Skv) + ")");
  AttentionOutputs Out = emptyOutputs(*Def.Graph, Dm);
  forEachRow(Def, In, Dm, [&](Row &R) {
    analysis::MergeState S = onlineState(R, Bounds[0], Bounds[1], 0);
    for (size_t P = 1; P + 1 < Bounds.size(); ++P)
      analysis::mergeStates(Merge, S,
                            onlineState(R, Bounds[P], Bounds[P + 1], 0));
    std::vector<double> O;
    std::map<std::string, double> Finals;
    finishRow(R, S, O, Finals);
    store(Out, R, O, Finals);
  });
  return Out;
}

AttentionOutputs attentionDirect(const CompiledDefinition &Def,
                                 const AttentionInputs &In) {
  Dims Dm = validated(Def, In);
  AttentionOutputs Out = emptyOutputs(*Def.Graph, Dm);
  forEachRow(Def, In, Dm, [&](Row &R) {
    std::vector<double> O;
    std::map<std::string, double> Finals;
    if (runOnline(R, 0, O, Finals)) {
      R.Finals = Finals;
      Values P = recomputeProbs(R);
      O.assign(R.Dm.DV, 0.0);
      for (int64_t J = 0; J < R.Dm.Skv; ++J)
        for (int64_t X = 0; X < R.Dm.DV; ++X)
          O[X] += P[J].V * R.In.V.at({R.B, R.Hk, J, X});
    }
    store(Out, R, O, Finals);
  });
  return Out;
}

AttentionGrads attentionBackward(const CompiledDefinition &Def,
                                 const AttentionInputs &In, const Tensor &DO) {
  transforms::requireBackward(*Def.Graph);
  const ir::Function *Bwd = Def.Graph->getFunction("backward");
  const ir::Function *ModGrad = Def.Graph->getFunction("score_mod_grad");
  const ir::Function *InGrad = Def.Graph->getFunction("score_mod_input_grad");
  std::vector<const ir::InputDecl *> GradIns =
      transforms::gradInputDecls(*Def.Graph);
  if (!ModGrad || (!GradIns.empty() && !InGrad))
    throw InternalError("reference: '" + Def.Graph->name() +
                        "' has no score_mod gradients; run the pipeline");
  Dims Dm = validated(Def, In);
  if (DO.Shape != std::vector<int64_t>{Dm.B, Dm.H, Dm.Sq, Dm.DV})
    throw UserError("reference backward: dO must have shape " +
                    In.Q.shapeString() + " with DV last, got " +
                    DO.shapeString());
  AttentionGrads G{Tensor(In.Q.Shape), Tensor(In.K.Shape), Tensor(In.V.Shape),
                   {}};
  for (const ir::InputDecl *D : GradIns)
    G.DInputs[D->Name] = Tensor(In.Inputs.at(D->Name).Shape);
  forEachRow(Def, In, Dm, [&](Row &R) {
    std::vector<double> O;
    std::map<std::string, double> Finals;
    if (!runOnline(R, 0, O, Finals))
      return; // no unmasked key: no gradient flows through this row
    R.Finals = Finals;
    R.Probs = recomputeProbs(R);
    R.GradProbs.assign(Dm.Skv, Dual{});
    double Doosum = 0.0, Dot;
    std::vector<double> Direct(Dm.DV, 0.0);
    for (int64_t J = 0; J < Dm.Skv; ++J)
      for (int64_t X = 0; X < Dm.DV; ++X)
        Direct[X] += R.Probs[J].V * In.V.at({R.B, R.Hk, J, X});
    for (int64_t X = 0; X < Dm.DV; ++X)
      Doosum += DO.at({R.B, R.H, R.I, X}) * Direct[X];
    R.Doosum = Doosum;
    for (int64_t J = 0; J < Dm.Skv; ++J) {
      Dot = 0.0;
      for (int64_t X = 0; X < Dm.DV; ++X)
        Dot += DO.at({R.B, R.H, R.I, X}) * In.V.at({R.B, R.Hk, J, X});
      R.GradProbs[J] = {Dot, 0.0};
    }
    Evaluator E(R.binder(), R.activeColumns());
    for (int64_t J = 0; J < Dm.Skv; ++J) {
      if (!R.Mask[J])
        continue;
      double DScore = E.at(Bwd->result("dscores"), J).V;
      // The chain rule through score_mod, by its symbolic derivative.
      double DRaw = DScore * E.at(ModGrad->result("dscore"), J).V;
      for (const ir::InputDecl *D : GradIns)
        inputSlot(G.DInputs.at(D->Name), D->Shape, R.B, R.H, R.I, J) +=
            DScore * E.at(InGrad->result("d_" + D->Name), J).V;
      for (int64_t X = 0; X < Dm.D; ++X) {
        G.DQ.at({R.B, R.H, R.I, X}) += DRaw * In.K.at({R.B, R.Hk, J, X});
        G.DK.at({R.B, R.Hk, J, X}) += DRaw * In.Q.at({R.B, R.H, R.I, X});
      }
      for (int64_t X = 0; X < Dm.DV; ++X)
        G.DV.at({R.B, R.Hk, J, X}) +=
            R.Probs[J].V * DO.at({R.B, R.H, R.I, X});
    }
  });
  return G;
}

void validateAttentionInputs(const ir::Graph &G, const AttentionInputs &In) {
  auto Rank4 = [](const Tensor &T, const char *Name) {
    if (T.Shape.size() != 4)
      throw UserError(std::string("reference: ") + Name +
                      " must be [batch, heads, seq, dim], got " +
                      T.shapeString());
  };
  Rank4(In.Q, "q");
  Rank4(In.K, "k");
  Rank4(In.V, "v");
  Dims Dm = dimsOf(In);
  if (In.K.dim(0) != Dm.B || In.V.dim(0) != Dm.B)
    throw UserError("reference: q, k and v must have the same batch");
  if (In.V.dim(1) != Dm.Hkv || Dm.Hkv < 1 || Dm.H % Dm.Hkv != 0)
    throw UserError("reference: k and v must have the same heads, dividing "
                    "q's heads; got q " + In.Q.shapeString() + ", k " +
                    In.K.shapeString() + ", v " + In.V.shapeString());
  if (In.V.dim(2) != Dm.Skv)
    throw UserError("reference: k and v must have the same sequence length");
  if (In.K.dim(3) != Dm.D)
    throw UserError("reference: q and k must have the same head dim");
  validateInputValues(G, In.Inputs, Dm.B, Dm.H, Dm.Sq, Dm.Skv);
}

} // namespace attn::reference
