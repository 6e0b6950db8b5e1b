// Reference linear-attention gradients: the mods' derivatives by dual
// numbers, and the token recurrence run backwards in double precision.
#include "LinearMods.h"

#include "attn/Error.h"
#include "attn/reference/Evaluator.h"
#include "attn/reference/InputBinding.h"

#include "llvm/Support/ThreadPool.h"

#include <cmath>
#include <exception>

namespace attn::reference::linear {

Dims checkBackwardInputs(const CompiledDefinition &Def, const LinearInputs &In,
                         const Tensor *DO, const Tensor *DFinal) {
  if (Def.Graph->decls().Kind != ir::DefinitionKind::Linear)
    throw UserError("'" + Def.Graph->name() +
                    "' is not linear attention; use the attention reference");
  validateLinearInputs(*Def.Graph, In);
  Dims Dm{In.V.dim(0), In.V.dim(1), In.Q.dim(1), In.K.dim(1),
          In.V.dim(2), In.Q.dim(3), In.V.dim(3)};
  if (DO && DO->Shape != std::vector<int64_t>{Dm.B, Dm.H, Dm.T, Dm.DV})
    throw UserError("linear reference: dout must be " +
                    Tensor({Dm.B, Dm.H, Dm.T, Dm.DV}).shapeString() +
                    ", got " + DO->shapeString());
  if (DFinal && DFinal->Shape != std::vector<int64_t>{Dm.B, Dm.H, Dm.D, Dm.DV})
    throw UserError("linear reference: the final state's gradient must be " +
                    Tensor({Dm.B, Dm.H, Dm.D, Dm.DV}).shapeString() +
                    ", got " + DFinal->shapeString());
  return Dm;
}

namespace {

/// Evaluates \p R (a mod's result) at token \p T for \p Dim points, with
/// the dual part seeded on the element or decay (\p Seed 0) or on custom
/// input Seed − 1 (none when \p Seed is negative).
std::vector<Dual> evalAt(const ir::Graph &G, const ir::Node *R,
                         const LinearInputs &In, const Dims &Dm, int64_t B,
                         int64_t H, int64_t T, const Tensor *Src,
                         int64_t SrcHead, int64_t Dim, int Seed) {
  const auto &Decls = G.decls().Inputs;
  auto Bind = [&](const ir::ParamNode &P) -> Values {
    switch (P.getParamKind()) {
    case ir::ParamKind::Element: {
      Values V;
      for (int64_t X = 0; X < Dim; ++X)
        V.push_back({Src->at({B, SrcHead, T, X}), Seed == 0 ? 1.0 : 0.0});
      return V;
    }
    case ir::ParamKind::Decay:
      return {Dual{In.Decay.at({B, H, T}), Seed == 0 ? 1.0 : 0.0}};
    case ir::ParamKind::Index:
      return {Dual{double(P.getName() == "b"   ? B
                          : P.getName() == "h" ? H
                                               : T),
                   0.0}};
    case ir::ParamKind::HeadDim:
      return {Dual{double(Dm.D), 0.0}};
    case ir::ParamKind::Input: {
      Values V = bindInput(G, In.Inputs, P.getName(), B, H, T, 0, 0);
      int Index = 0;
      for (const ir::InputDecl &D : Decls) {
        if (D.Name == P.getName())
          break;
        ++Index;
      }
      for (Dual &X : V)
        X.D = Seed == Index + 1 ? 1.0 : 0.0;
      return V;
    }
    case ir::ParamKind::Score:
    case ir::ParamKind::Scores:
    case ir::ParamKind::Output:
    case ir::ParamKind::Rowscale:
    case ir::ParamKind::OtherRowscale:
    case ir::ParamKind::FinalRowscale:
    case ir::ParamKind::Probs:
    case ir::ParamKind::GradProbs:
    case ir::ParamKind::Doosum:
      break;
    }
    throw InternalError("reference: linear mods have no parameter '" +
                        P.getName().str() + "'");
  };
  Evaluator E(Bind, {});
  std::vector<Dual> Out;
  for (int64_t X = 0; X < Dim; ++X)
    Out.push_back(E.at(R, X));
  return Out;
}

} // namespace

HeadMods evalMods(const CompiledDefinition &Def, const LinearInputs &In,
                  const Dims &Dm, int64_t B, int64_t H, bool Derivs) {
  const ir::Graph &G = *Def.Graph;
  const int NumIn = int(G.decls().Inputs.size());
  HeadMods M;
  struct {
    const char *Fn, *Result;
    const Tensor *Src;
    int64_t Head, Dim;
    ModRows *Dst;
  } Mods[] = {{"q_mod", "q", &In.Q, H / (Dm.H / Dm.Hq), Dm.D, &M.Q},
              {"k_mod", "k", &In.K, H / (Dm.H / Dm.Hk), Dm.D, &M.K},
              {"v_mod", "v", &In.V, H, Dm.DV, &M.V},
              {"decay_mod", "g", nullptr, H, 1, &M.G}};
  for (auto &Mod : Mods) {
    const ir::Node *R = G.getFunction(Mod.Fn)->result(Mod.Result);
    ModRows &Rows = *Mod.Dst;
    Rows.DIn.resize(Derivs ? NumIn : 0);
    for (int64_t T = 0; T < Dm.T; ++T) {
      std::vector<double> Val, DX;
      for (const Dual &X : evalAt(G, R, In, Dm, B, H, T, Mod.Src, Mod.Head,
                                  Mod.Dim, Derivs ? 0 : -1)) {
        Val.push_back(X.V);
        DX.push_back(X.D);
      }
      Rows.Val.push_back(std::move(Val));
      if (!Derivs)
        continue;
      Rows.DX.push_back(std::move(DX));
      for (int I = 0; I < NumIn; ++I) {
        std::vector<double> DI;
        for (const Dual &X :
             evalAt(G, R, In, Dm, B, H, T, Mod.Src, Mod.Head, Mod.Dim, I + 1))
          DI.push_back(X.D);
        Rows.DIn[I].push_back(std::move(DI));
      }
    }
  }
  return M;
}

void forEachHead(const Dims &Dm, unsigned Threads,
                 const std::function<void(int64_t, int64_t)> &PerHead,
                 const std::function<void(int64_t, int64_t)> &Collect) {
  const int64_t Pairs = Dm.B * Dm.H;
  unsigned N = std::max(1u, std::min<unsigned>(Threads, unsigned(Pairs)));
  if (N == 1) {
    for (int64_t P = 0; P < Pairs; ++P)
      PerHead(P / Dm.H, P % Dm.H);
  } else {
    // N workers (hardware_concurrency(N) asks for exactly N), each taking
    // every N-th pair.
    llvm::ThreadPool Pool(llvm::hardware_concurrency(N));
    std::vector<std::exception_ptr> Errors(N);
    for (unsigned W = 0; W < N; ++W)
      Pool.async([&, W] {
        try {
          for (int64_t P = W; P < Pairs; P += N)
            PerHead(P / Dm.H, P % Dm.H);
        } catch (...) {
          Errors[W] = std::current_exception();
        }
      });
    Pool.wait();
    for (std::exception_ptr &E : Errors)
      if (E)
        std::rethrow_exception(E);
  }
  for (int64_t P = 0; P < Pairs; ++P)
    Collect(P / Dm.H, P % Dm.H);
}

LinearGrads zeroGrads(const CompiledDefinition &Def, const LinearInputs &In,
                      const Dims &Dm) {
  LinearGrads Out;
  Out.DQ = Tensor(In.Q.Shape);
  Out.DK = Tensor(In.K.Shape);
  Out.DV = Tensor(In.V.Shape);
  Out.DDecay = Tensor({Dm.B, Dm.H, Dm.T});
  if (In.InitialState)
    Out.DInitialState = Tensor(In.InitialState->Shape);
  for (const ir::InputDecl &D : Def.Graph->decls().Inputs)
    Out.DInputs[D.Name] =
        Tensor(expectedInputShape(D.Shape, Dm.B, Dm.H, Dm.T, Dm.T));
  return Out;
}

void chainRule(const CompiledDefinition &Def, const Dims &Dm, int64_t B,
               int64_t H, const HeadMods &M, const HeadGrads &HG,
               LinearGrads &Out) {
  const auto &Decls = Def.Graph->decls().Inputs;
  int64_t HQ = H / (Dm.H / Dm.Hq), HK = H / (Dm.H / Dm.Hk);
  for (int64_t T = 0; T < Dm.T; ++T) {
    std::vector<double> DIn(Decls.size(), 0.0);
    struct {
      const ModRows *Rows;
      const std::vector<std::vector<double>> *Grad;
      Tensor *Dst;
      int64_t Head, Dim;
    } Parts[] = {{&M.Q, &HG.DQ, &Out.DQ, HQ, Dm.D},
                 {&M.K, &HG.DK, &Out.DK, HK, Dm.D},
                 {&M.V, &HG.DV, &Out.DV, H, Dm.DV}};
    for (auto &P : Parts)
      for (int64_t X = 0; X < P.Dim; ++X) {
        double G = (*P.Grad)[T][X];
        P.Dst->at({B, P.Head, T, X}) += G * P.Rows->DX[T][X];
        for (size_t I = 0; I < Decls.size(); ++I)
          DIn[I] += G * P.Rows->DIn[I][T][X];
      }
    Out.DDecay.at({B, H, T}) = HG.DG[T] * M.G.DX[T][0];
    for (size_t I = 0; I < Decls.size(); ++I) {
      DIn[I] += HG.DG[T] * M.G.DIn[I][T][0];
      Tensor &Dst = Out.DInputs.at(Decls[I].Name);
      switch (Decls[I].Shape) {
      case ir::InputShape::Scalar:
        Dst.Data[0] += DIn[I];
        break;
      case ir::InputShape::PerHead:
        Dst.at({H}) += DIn[I];
        break;
      case ir::InputShape::PerRow:
        Dst.at({B, H, T}) += DIn[I];
        break;
      case ir::InputShape::PerKey:
      case ir::InputShape::Full:
      case ir::InputShape::PerQueryToken:
      case ir::InputShape::PerKeyToken:
        throw InternalError("reference: a linear mod reads a per-key, full "
                            "or per-token input");
      }
    }
  }
  if (Out.DInitialState)
    for (int64_t X = 0; X < Dm.D; ++X)
      for (int64_t Y = 0; Y < Dm.DV; ++Y)
        Out.DInitialState->at({B, H, X, Y}) = HG.DInit[X * Dm.DV + Y];
}

} // namespace attn::reference::linear

namespace attn::reference {

using namespace linear;

LinearGrads linearBackward(const CompiledDefinition &Def,
                           const LinearInputs &In, const Tensor &DO,
                           const std::optional<Tensor> &DFinalState,
                           unsigned Threads) {
  Dims Dm = checkBackwardInputs(Def, In, &DO, DFinalState ? &*DFinalState
                                                          : nullptr);
  const int64_t D = Dm.D, DV = Dm.DV, Seg = 64;
  LinearGrads Out = zeroGrads(Def, In, Dm);
  std::vector<HeadMods> Mods(Dm.B * Dm.H);
  std::vector<HeadGrads> Grads(Dm.B * Dm.H);
  using State = std::vector<double>; // [D][DV]
  auto PerHead = [&](int64_t B, int64_t H) {
    HeadMods &M = Mods[B * Dm.H + H];
    M = evalMods(Def, In, Dm, B, H, true);
    HeadGrads &HG = Grads[B * Dm.H + H];
    HG.DQ.assign(Dm.T, std::vector<double>(D, 0.0));
    HG.DK.assign(Dm.T, std::vector<double>(D, 0.0));
    HG.DV.assign(Dm.T, std::vector<double>(DV, 0.0));
    HG.DG.assign(Dm.T, 0.0);
    auto Step = [&](State &S, int64_t T) { // S_{T-1} -> S_T
      double A = std::exp(M.G.Val[T][0]);
      for (int64_t X = 0; X < D; ++X)
        for (int64_t Y = 0; Y < DV; ++Y)
          S[X * DV + Y] = A * S[X * DV + Y] + M.K.Val[T][X] * M.V.Val[T][Y];
    };
    State S(D * DV, 0.0);
    if (In.InitialState)
      for (int64_t X = 0; X < D; ++X)
        for (int64_t Y = 0; Y < DV; ++Y)
          S[X * DV + Y] = In.InitialState->at({B, H, X, Y});
    // Forward: dq_t = S_t do_tᵀ; the state before every Seg-th token kept.
    std::vector<State> Checkpoints;
    for (int64_t T = 0; T < Dm.T; ++T) {
      if (T % Seg == 0)
        Checkpoints.push_back(S);
      Step(S, T);
      for (int64_t X = 0; X < D; ++X) {
        double Acc = 0;
        for (int64_t Y = 0; Y < DV; ++Y)
          Acc += S[X * DV + Y] * DO.at({B, H, T, Y});
        HG.DQ[T][X] = Acc;
      }
    }
    // Backward: Carry is exp(g_{t+1}) dS_{t+1} (dL/dS_T at the start).
    State Carry(D * DV, 0.0);
    if (DFinalState)
      for (int64_t X = 0; X < D; ++X)
        for (int64_t Y = 0; Y < DV; ++Y)
          Carry[X * DV + Y] = DFinalState->at({B, H, X, Y});
    for (int64_t C = int64_t(Checkpoints.size()) - 1; C >= 0; --C) {
      int64_t T0 = C * Seg, T1 = std::min(Dm.T, T0 + Seg);
      std::vector<State> Prev; // Prev[t - T0] = S_{t-1}
      State R = Checkpoints[C];
      for (int64_t T = T0; T < T1; ++T) {
        Prev.push_back(R);
        Step(R, T);
      }
      for (int64_t T = T1 - 1; T >= T0; --T) {
        State Gt = Carry; // dL/dS_t
        for (int64_t X = 0; X < D; ++X)
          for (int64_t Y = 0; Y < DV; ++Y)
            Gt[X * DV + Y] += M.Q.Val[T][X] * DO.at({B, H, T, Y});
        for (int64_t X = 0; X < D; ++X)
          for (int64_t Y = 0; Y < DV; ++Y) {
            HG.DK[T][X] += Gt[X * DV + Y] * M.V.Val[T][Y];
            HG.DV[T][Y] += M.K.Val[T][X] * Gt[X * DV + Y];
          }
        double A = std::exp(M.G.Val[T][0]), Dot = 0;
        for (int64_t I = 0; I < D * DV; ++I)
          Dot += Prev[T - T0][I] * Gt[I];
        HG.DG[T] = A * Dot;
        for (int64_t I = 0; I < D * DV; ++I)
          Carry[I] = A * Gt[I];
      }
    }
    HG.DInit = Carry;
  };
  forEachHead(Dm, Threads, PerHead, [&](int64_t B, int64_t H) {
    chainRule(Def, Dm, B, H, Mods[B * Dm.H + H], Grads[B * Dm.H + H], Out);
    Mods[B * Dm.H + H] = HeadMods();
    Grads[B * Dm.H + H] = HeadGrads();
  });
  return Out;
}

} // namespace attn::reference
