// Per-element double-precision backward of a definition: exact and plain
// (low-precision) gradients in one pass, for the GPU backward test.
#include "BackwardCheck.h"

#include "attn/Error.h"
#include "attn/reference/Evaluator.h"
#include "attn/reference/InputBinding.h"

#include <cmath>
#include <thread>

namespace attn::gputest {

using reference::Dual;
using reference::Tensor;
using reference::Values;

namespace {

/// The parameters of one query row's functions, over all keys.
struct RowBinding {
  RowBinding(const ir::Graph &G, const reference::AttentionInputs &In,
             int64_t B, int64_t H, int64_t I, int64_t Skv, int64_t D)
      : G(G), In(In), B(B), H(H), I(I), Skv(Skv), D(D) {}
  const ir::Graph &G;
  const reference::AttentionInputs &In;
  int64_t B, H, I, Skv, D;
  const std::vector<double> *Raw = nullptr;
  /// d(raw)/d(raw) for score_mod's Score parameter (1: the derivative of
  /// score_mod w.r.t. the score; 0: w.r.t. the seeded input).
  double ScoreSeed = 0.0;
  std::string SeedInput;
  Values Mod, Probs, GradProbs;
  std::map<std::string, double> Finals;
  double Doosum = 0.0;

  Values perKey(const std::vector<double> &X, double Seed) const {
    Values V(Skv);
    for (int64_t J = 0; J < Skv; ++J)
      V[J] = {X[J], Seed};
    return V;
  }

  Values bind(const ir::ParamNode &P) const {
    switch (P.getParamKind()) {
    case ir::ParamKind::Score:
      return perKey(*Raw, ScoreSeed);
    case ir::ParamKind::Scores:
      return Mod;
    case ir::ParamKind::Probs:
      return Probs;
    case ir::ParamKind::GradProbs:
      return GradProbs;
    case ir::ParamKind::FinalRowscale:
      return {Dual{Finals.at(P.getName().str()), 0.0}};
    case ir::ParamKind::Doosum:
      return {Dual{Doosum, 0.0}};
    case ir::ParamKind::Index: {
      llvm::StringRef N = P.getName();
      if (N == "kv_idx") {
        Values V(Skv);
        for (int64_t J = 0; J < Skv; ++J)
          V[J] = {double(J), 0.0};
        return V;
      }
      // A sequence of a packed batch run densely: its q_idx and b.
      return {Dual{double(N == "b"   ? B + In.BatchIndexOffset
                          : N == "h" ? H
                                     : I + In.QIndexOffset),
                   0.0}};
    }
    case ir::ParamKind::Input: {
      Values V = reference::bindInput(G, In.Inputs, P.getName(), B, H, I, 0, Skv);
      if (P.getName() == SeedInput)
        for (Dual &X : V)
          X.D = 1.0;
      return V;
    }
    case ir::ParamKind::HeadDim:
      return {Dual{double(D), 0.0}};
    case ir::ParamKind::Output:
    case ir::ParamKind::Rowscale:
    case ir::ParamKind::Element:
    case ir::ParamKind::OtherRowscale:
    case ir::ParamKind::Decay:
      break;
    }
    throw InternalError("backward check: no value for parameter '" +
                        P.getName().str() + "'");
  }

  reference::Evaluator evaluator(std::vector<bool> Active) const {
    return reference::Evaluator(
        [this](const ir::ParamNode &P) { return bind(P); }, std::move(Active));
  }
};

const ir::Node *result(const ir::Graph &G, const char *Fn, const char *R) {
  const ir::Function *F = G.getFunction(Fn);
  if (!F)
    throw InternalError(std::string("backward check: no function ") + Fn);
  return F->result(R);
}

} // namespace

namespace {

/// The rows of a [B,H,S,D] tensor as pointers.
struct Rows {
  const reference::Tensor &T;
  const double *at(int64_t B, int64_t H, int64_t S) const {
    return T.Data.data() + ((B * T.dim(1) + H) * T.dim(2) + S) * T.dim(3);
  }
  double *at(reference::Tensor &U, int64_t B, int64_t H, int64_t S) const {
    return U.Data.data() + ((B * U.dim(1) + H) * U.dim(2) + S) * U.dim(3);
  }
};

struct Problem {
  const CompiledDefinition &Def;
  const reference::AttentionInputs &In;
  const reference::AttentionOutputs &Fwd;
  const Tensor &DO;
  const std::function<double(double)> &Round;
  std::vector<std::string> GradNames;
};

/// Rows [R0, R1) of the flattened (b, h, i) into \p R: dq rows are its own,
/// dk, dv and input gradients are this share's partial sums.
void checkRows(const Problem &Pb, int64_t R0, int64_t R1, BackwardCheck &R) {
  const ir::Graph &G = *Pb.Def.Graph;
  const reference::AttentionInputs &In = Pb.In;
  const int64_t H = In.Q.dim(1), Hkv = In.K.dim(1), Sq = In.Q.dim(2),
                Skv = In.K.dim(2), D = In.Q.dim(3), DV = In.V.dim(3);
  const ir::Node *ModN = result(G, "score_mod", "score");
  const ir::Function *MaskFn = G.getFunction("mask_mod");
  const ir::Node *FwdN = result(G, "forward", "p");
  const ir::Node *BwdN = result(G, "backward", "dscores");
  Rows Q{In.Q}, K{In.K}, V{In.V}, DO{Pb.DO}, O{Pb.Fwd.O};

  std::vector<double> Raw(Skv), DRaw(Skv), Acc(DV);
  for (int64_t Row0 = R0; Row0 < R1; ++Row0) {
    const int64_t b = Row0 / (H * Sq), h = Row0 / Sq % H, i = Row0 % Sq;
    const int64_t hk = h / (H / Hkv);
    RowBinding Row(G, In, b, h, i, Skv, D);
    Row.Raw = &Raw;
    const double *Qi = Q.at(b, h, i), *DOi = DO.at(b, h, i);
    for (int64_t j = 0; j < Skv; ++j) {
      const double *Kj = K.at(b, hk, j);
      double S = 0;
      for (int64_t x = 0; x < D; ++x)
        S += Qi[x] * Kj[x];
      Raw[j] = S;
    }
    std::vector<bool> Mask(Skv, true);
    if (MaskFn) {
      auto E = Row.evaluator(Mask);
      for (int64_t j = 0; j < Skv; ++j)
        Mask[j] = E.at(MaskFn->result("mask"), j).V != 0.0;
    }
    bool Any = false;
    for (bool M : Mask)
      Any = Any || M;
    if (!Any)
      continue; // a row with no key: no gradient flows through it
    Row.ScoreSeed = 1.0;
    {
      auto E = Row.evaluator(Mask);
      Row.Mod.resize(Skv);
      for (int64_t j = 0; j < Skv; ++j) {
        Dual M = E.at(ModN, j);
        Row.Mod[j] = {M.V, 0.0};
        DRaw[j] = M.D;
      }
    }
    // ∂score_mod/∂input for each input that requires a gradient.
    std::map<std::string, std::vector<double>> DInput;
    Row.ScoreSeed = 0.0;
    for (const std::string &N : Pb.GradNames) {
      Row.SeedInput = N;
      auto E = Row.evaluator(Mask);
      std::vector<double> &X = DInput[N];
      X.resize(Skv);
      for (int64_t j = 0; j < Skv; ++j)
        X[j] = E.at(ModN, j).D;
    }
    Row.SeedInput.clear();
    for (const ir::RowscaleDecl &F : G.decls().FinalRowscales)
      Row.Finals[F.Name] = Pb.Fwd.Finals.at(F.Name).at({b, h, i});
    Row.Probs.assign(Skv, Dual{});
    {
      auto E = Row.evaluator(Mask);
      for (int64_t j = 0; j < Skv; ++j)
        Row.Probs[j] = {Mask[j] ? E.at(FwdN, j).V : 0.0, 0.0};
    }
    Row.GradProbs.resize(Skv);
    std::fill(Acc.begin(), Acc.end(), 0.0);
    for (int64_t j = 0; j < Skv; ++j) {
      const double *Vj = V.at(b, hk, j);
      double Dot = 0;
      for (int64_t x = 0; x < DV; ++x) {
        Dot += DOi[x] * Vj[x];
        Acc[x] += Row.Probs[j].V * Vj[x];
      }
      Row.GradProbs[j] = {Dot, 0.0};
    }
    double DoosumExact = 0, DoosumPlain = 0;
    const double *Oi = O.at(b, h, i);
    for (int64_t x = 0; x < DV; ++x) {
      DoosumExact += DOi[x] * Acc[x];
      DoosumPlain += DOi[x] * Pb.Round(Oi[x]);
    }
    for (int Pass = 0; Pass < 3; ++Pass) {
      const bool Plain = Pass == 1;
      Gradients &Out = Pass == 0 ? R.Exact : Pass == 1 ? R.Plain : R.PlainDoosum;
      Row.Doosum = Pass == 0 ? DoosumExact : DoosumPlain;
      auto E = Row.evaluator(Mask);
      double *DQi = Q.at(Out.DQ, b, h, i);
      for (int64_t j = 0; j < Skv; ++j) {
        if (!Mask[j])
          continue;
        double DS = E.at(BwdN, j).V;
        double DSRaw = DS * DRaw[j];
        double P = Row.Probs[j].V;
        if (Plain) {
          DSRaw = Pb.Round(DSRaw);
          P = Pb.Round(P);
          DS = Pb.Round(DS);
        }
        const double *Kj = K.at(b, hk, j);
        double *DKj = K.at(Out.DK, b, hk, j), *DVj = V.at(Out.DV, b, hk, j);
        for (int64_t x = 0; x < D; ++x) {
          DQi[x] += DSRaw * Kj[x];
          DKj[x] += DSRaw * Qi[x];
        }
        for (int64_t x = 0; x < DV; ++x)
          DVj[x] += P * DOi[x];
        for (const std::string &N : Pb.GradNames) {
          Tensor &T = Out.Inputs.at(N);
          (T.Shape.empty() ? T.Data[0] : T.at({h})) += DS * DInput[N][j];
        }
      }
    }
  }
}

BackwardCheck emptyCheck(const Problem &Pb) {
  const ir::Graph &G = *Pb.Def.Graph;
  BackwardCheck R;
  for (Gradients *Gr : {&R.Exact, &R.Plain, &R.PlainDoosum}) {
    Gr->DQ = Tensor(Pb.In.Q.Shape);
    Gr->DK = Tensor(Pb.In.K.Shape);
    Gr->DV = Tensor(Pb.In.V.Shape);
    for (const std::string &N : Pb.GradNames)
      Gr->Inputs[N] = Tensor(G.decls().findInput(N)->Shape ==
                                     ir::InputShape::PerHead
                                 ? std::vector<int64_t>{Pb.In.Q.dim(1)}
                                 : std::vector<int64_t>{});
  }
  return R;
}

void addInto(Tensor &Dst, const Tensor &Src) {
  for (size_t I = 0; I < Dst.Data.size(); ++I)
    Dst.Data[I] += Src.Data[I];
}

} // namespace

BackwardCheck checkBackward(const CompiledDefinition &Def,
                            const reference::AttentionInputs &In,
                            const reference::AttentionOutputs &Fwd,
                            const Tensor &DO,
                            const std::function<double(double)> &Round,
                            unsigned Threads) {
  Problem Pb{Def, In, Fwd, DO, Round, {}};
  for (const ir::InputDecl &Decl : Def.Graph->decls().Inputs) {
    if (!Decl.RequiresGrad)
      continue;
    if (Decl.Shape != ir::InputShape::Scalar &&
        Decl.Shape != ir::InputShape::PerHead)
      throw InternalError("backward check: only scalar and per-head inputs "
                          "have gradients here");
    Pb.GradNames.push_back(Decl.Name);
  }
  const int64_t Total = In.Q.dim(0) * In.Q.dim(1) * In.Q.dim(2);
  Threads = std::max(1u, std::min<unsigned>(Threads, unsigned(Total)));
  // Each share sums its own dk, dv and input gradients; the shares are then
  // added in order (dq rows belong to one share each).
  std::vector<BackwardCheck> Shares;
  for (unsigned T = 0; T < Threads; ++T)
    Shares.push_back(emptyCheck(Pb));
  std::vector<std::thread> Pool;
  std::vector<std::string> Errors(Threads);
  for (unsigned T = 0; T < Threads; ++T)
    Pool.emplace_back([&, T] {
      try {
        checkRows(Pb, Total * T / Threads, Total * (T + 1) / Threads, Shares[T]);
      } catch (const std::exception &E) {
        Errors[T] = E.what();
      }
    });
  for (std::thread &T : Pool)
    T.join();
  for (const std::string &E : Errors)
    if (!E.empty())
      throw InternalError(E);
  BackwardCheck R = std::move(Shares[0]);
  for (unsigned T = 1; T < Threads; ++T)
    for (auto [Dst, Src] : {std::pair{&R.Exact, &Shares[T].Exact},
                            {&R.Plain, &Shares[T].Plain},
                            {&R.PlainDoosum, &Shares[T].PlainDoosum}}) {
      addInto(Dst->DQ, Src->DQ);
      addInto(Dst->DK, Src->DK);
      addInto(Dst->DV, Src->DV);
      for (auto &[N, X] : Dst->Inputs)
        addInto(X, Src->Inputs.at(N));
    }
  return R;
}

} // namespace attn::gputest
