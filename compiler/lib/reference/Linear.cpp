// Reference linear attention: recurrence and chunked form.
#include "attn/reference/Linear.h"

#include "attn/Error.h"
#include "attn/reference/Evaluator.h"
#include "attn/reference/InputBinding.h"

#include <algorithm>
#include <cmath>

namespace attn::reference {

namespace {

struct Dims {
  int64_t B, H, Hq, Hk, T, D, DV;
};

Dims dimsOf(const LinearInputs &In) {
  return {In.V.dim(0), In.V.dim(1), In.Q.dim(1), In.K.dim(1),
          In.V.dim(2), In.Q.dim(3), In.V.dim(3)};
}

/// The modded q, k, v and log-decay g of one (batch, head): [T][dim], [T].
struct Modded {
  std::vector<std::vector<double>> Q, K, V;
  std::vector<double> G;
};

/// \p TOffset is added to the index t the mods see (the decode step's
/// position of its first token); inputs are read at the unshifted token.
Modded applyMods(const CompiledDefinition &Def, const LinearInputs &In,
                 int64_t B, int64_t H, int64_t TOffset = 0) {
  const ir::Graph &G = *Def.Graph;
  Dims Dm = dimsOf(In);
  int64_t HQ = H / (Dm.H / Dm.Hq), HK = H / (Dm.H / Dm.Hk);
  Modded M;
  for (int64_t T = 0; T < Dm.T; ++T) {
    struct {
      const char *Fn, *Result;
      const Tensor *Src;
      int64_t Head, Dim;
      std::vector<std::vector<double>> *Dst;
    } Mods[] = {{"q_mod", "q", &In.Q, HQ, Dm.D, &M.Q},
                {"k_mod", "k", &In.K, HK, Dm.D, &M.K},
                {"v_mod", "v", &In.V, H, Dm.DV, &M.V}};
    for (auto &Mod : Mods) {
      auto Bind = [&](const ir::ParamNode &P) -> Values {
        switch (P.getParamKind()) {
        case ir::ParamKind::Element: {
          Values V;
          for (int64_t X = 0; X < Mod.Dim; ++X)
            V.push_back({Mod.Src->at({B, Mod.Head, T, X}), 0.0});
          return V;
        }
        case ir::ParamKind::Index:
          return {Dual{double(P.getName() == "b"   ? B
                              : P.getName() == "h" ? H
                                                   : T + TOffset),
                       0.0}};
        case ir::ParamKind::Input:
          return bindInput(G, In.Inputs, P.getName(), B, H, T, 0, 0);
        case ir::ParamKind::HeadDim:
          return {Dual{double(Dm.D), 0.0}};
        case ir::ParamKind::Decay:
          return {Dual{In.Decay.at({B, H, T}), 0.0}};
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
      const ir::Node *R = G.getFunction(Mod.Fn)->result(Mod.Result);
      std::vector<double> Row(Mod.Dim);
      for (int64_t X = 0; X < Mod.Dim; ++X)
        Row[X] = E.at(R, X).V;
      Mod.Dst->push_back(std::move(Row));
      if (Mod.Dst == &M.V) {
        Evaluator ED(Bind, {});
        M.G.push_back(ED.at(G.getFunction("decay_mod")->result("g"), 0).V);
      }
    }
  }
  return M;
}

using State = std::vector<std::vector<double>>; // [D][DV]

State initialState(const LinearInputs &In, const Dims &Dm, int64_t B,
                   int64_t H) {
  State S(Dm.D, std::vector<double>(Dm.DV, 0.0));
  if (In.InitialState)
    for (int64_t X = 0; X < Dm.D; ++X)
      for (int64_t Y = 0; Y < Dm.DV; ++Y)
        S[X][Y] = In.InitialState->at({B, H, X, Y});
  return S;
}

/// Checks the definition's kind and validates the inputs, then returns their
/// sizes. Every entry point calls it before it reads a size, so that a
/// tensor of the wrong rank is a UserError, not an out-of-range read.
Dims validated(const CompiledDefinition &Def, const LinearInputs &In) {
  if (Def.Graph->decls().Kind != ir::DefinitionKind::Linear)
    throw UserError("'" + Def.Graph->name() +
                    "' is not linear attention; use the attention reference");
  validateLinearInputs(*Def.Graph, In);
  return dimsOf(In);
}

/// Runs \p PerHead for every (batch, head) of validated inputs of sizes
/// \p Dm.
template <typename Fn>
LinearOutputs run(const CompiledDefinition &Def, const LinearInputs &In,
                  const Dims &Dm, Fn &&PerHead) {
  LinearOutputs Out{Tensor({Dm.B, Dm.H, Dm.T, Dm.DV}),
                    Tensor({Dm.B, Dm.H, Dm.D, Dm.DV})};
  for (int64_t B = 0; B < Dm.B; ++B)
    for (int64_t H = 0; H < Dm.H; ++H) {
      Modded M = applyMods(Def, In, B, H);
      State S = initialState(In, Dm, B, H);
      PerHead(M, S, B, H, Out.O);
      for (int64_t X = 0; X < Dm.D; ++X)
        for (int64_t Y = 0; Y < Dm.DV; ++Y)
          Out.FinalState.at({B, H, X, Y}) = S[X][Y];
    }
  return Out;
}

} // namespace

LinearOutputs linearRecurrent(const CompiledDefinition &Def,
                              const LinearInputs &In) {
  Dims Dm = validated(Def, In);
  return run(Def, In, Dm, [&](const Modded &M, State &S, int64_t B, int64_t H,
                          Tensor &O) {
    for (int64_t T = 0; T < Dm.T; ++T) {
      double Decay = std::exp(M.G[T]);
      for (int64_t X = 0; X < Dm.D; ++X)
        for (int64_t Y = 0; Y < Dm.DV; ++Y)
          S[X][Y] = Decay * S[X][Y] + M.K[T][X] * M.V[T][Y];
      for (int64_t Y = 0; Y < Dm.DV; ++Y) {
        double Acc = 0;
        for (int64_t X = 0; X < Dm.D; ++X)
          Acc += M.Q[T][X] * S[X][Y];
        O.at({B, H, T, Y}) = Acc;
      }
    }
  });
}

LinearOutputs linearChunked(const CompiledDefinition &Def,
                            const LinearInputs &In, int64_t Chunk) {
  if (Chunk < 1)
    throw UserError("linear reference: chunk size must be at least 1");
  Dims Dm = validated(Def, In);
  return run(Def, In, Dm, [&](const Modded &M, State &S, int64_t B, int64_t H,
                          Tensor &O) {
    for (int64_t C0 = 0; C0 < Dm.T; C0 += Chunk) {
      int64_t C1 = std::min(C0 + Chunk, Dm.T);
      std::vector<double> Cum(C1 - C0); // G: chunk-local cumulative log-decay
      double Run = 0;
      for (int64_t T = C0; T < C1; ++T)
        Cum[T - C0] = Run += M.G[T];
      for (int64_t I = C0; I < C1; ++I) {
        double Carry = std::exp(Cum[I - C0]);
        for (int64_t Y = 0; Y < Dm.DV; ++Y) {
          double Acc = 0;
          for (int64_t X = 0; X < Dm.D; ++X)
            Acc += M.Q[I][X] * S[X][Y];
          Acc *= Carry;
          for (int64_t J = C0; J <= I; ++J) {
            double QK = 0;
            for (int64_t X = 0; X < Dm.D; ++X)
              QK += M.Q[I][X] * M.K[J][X];
            Acc += QK * std::exp(Cum[I - C0] - Cum[J - C0]) * M.V[J][Y];
          }
          O.at({B, H, I, Y}) = Acc;
        }
      }
      double Last = Cum.back();
      for (int64_t X = 0; X < Dm.D; ++X)
        for (int64_t Y = 0; Y < Dm.DV; ++Y) {
          double Acc = std::exp(Last) * S[X][Y];
          for (int64_t J = C0; J < C1; ++J)
            Acc += std::exp(Last - Cum[J - C0]) * M.K[J][X] * M.V[J][Y];
          S[X][Y] = Acc;
        }
    }
  });
}

void validateLinearInputs(const ir::Graph &G, const LinearInputs &In) {
  for (auto [T, Name] : {std::pair{&In.Q, "q"}, {&In.K, "k"}, {&In.V, "v"}})
    if (T->Shape.size() != 4)
      throw UserError(std::string("linear reference: ") + Name +
                      " must be [batch, heads, seq, dim], got " +
                      T->shapeString());
  // Every size at least 1 before any is used (the head counts divide below).
  for (auto [T, Name] : {std::pair{&In.Q, "q"}, {&In.K, "k"}, {&In.V, "v"}})
    for (int64_t Size : T->Shape)
      if (Size < 1)
        throw UserError(std::string("linear reference: ") + Name +
                        " must have every dimension at least 1, got " +
                        T->shapeString());
  Dims Dm = dimsOf(In);
  if (In.Q.dim(0) != Dm.B || In.K.dim(0) != Dm.B || In.Q.dim(2) != Dm.T ||
      In.K.dim(2) != Dm.T)
    throw UserError("linear reference: q, k, v must share batch and seq");
  if (Dm.H % Dm.Hq != 0 || Dm.H % Dm.Hk != 0)
    throw UserError("linear reference: q heads (" + std::to_string(Dm.Hq) +
                    ") and k heads (" + std::to_string(Dm.Hk) +
                    ") must divide v heads (" + std::to_string(Dm.H) + ")");
  if (In.K.dim(3) != Dm.D)
    throw UserError("linear reference: q and k must have the same head dim");
  if (In.Decay.Shape != std::vector<int64_t>{Dm.B, Dm.H, Dm.T})
    throw UserError("linear reference: decay must be [batch, heads, seq] = " +
                    Tensor({Dm.B, Dm.H, Dm.T}).shapeString() + ", got " +
                    In.Decay.shapeString());
  if (In.InitialState &&
      In.InitialState->Shape != std::vector<int64_t>{Dm.B, Dm.H, Dm.D, Dm.DV})
    throw UserError("linear reference: initial state must be " +
                    Tensor({Dm.B, Dm.H, Dm.D, Dm.DV}).shapeString() +
                    ", got " + In.InitialState->shapeString());
  validateInputValues(G, In.Inputs, Dm.B, Dm.H, Dm.T, Dm.T);
}

LinearDecodeOutputs linearDecodeStep(const CompiledDefinition &Def,
                                     const LinearDecodeInputs &In) {
  Dims Dm = validated(Def, In.Tokens);
  const Tensor &P = In.States;
  if (P.Shape.size() != 4 || P.dim(0) < 1 || P.dim(1) != Dm.H ||
      P.dim(2) != Dm.D || P.dim(3) != Dm.DV)
    throw UserError("linear reference: decode states must be [pool, " +
                    std::to_string(Dm.H) + ", " + std::to_string(Dm.D) + ", " +
                    std::to_string(Dm.DV) + "] with pool >= 1, got " +
                    P.shapeString());
  for (auto [V, Name] : {std::pair{&In.StateIndex, "state index"},
                         {&In.Positions, "positions"}})
    if (*V && int64_t((*V)->size()) != Dm.B)
      throw UserError(std::string("linear reference: ") + Name + " must have " +
                      std::to_string(Dm.B) + " entries, got " +
                      std::to_string((*V)->size()));
  if (!In.StateIndex && P.dim(0) != Dm.B)
    throw UserError("linear reference: without a state index the pool must "
                    "hold one state per sequence (" + std::to_string(Dm.B) +
                    "), got " + std::to_string(P.dim(0)));
  LinearDecodeOutputs Out{Tensor({Dm.B, Dm.H, Dm.T, Dm.DV}), P};
  for (int64_t B = 0; B < Dm.B; ++B) {
    int64_t Slot = In.StateIndex ? (*In.StateIndex)[B] : B;
    if (Slot < 0 || Slot >= P.dim(0))
      continue; // a padding row
    int64_t Pos = In.Positions ? (*In.Positions)[B] : 0;
    for (int64_t H = 0; H < Dm.H; ++H) {
      Modded M = applyMods(Def, In.Tokens, B, H, Pos);
      for (int64_t T = 0; T < Dm.T; ++T) {
        double Decay = std::exp(M.G[T]);
        for (int64_t X = 0; X < Dm.D; ++X)
          for (int64_t Y = 0; Y < Dm.DV; ++Y) {
            double &S = Out.States.at({Slot, H, X, Y});
            S = Decay * S + M.K[T][X] * M.V[T][Y];
          }
        for (int64_t Y = 0; Y < Dm.DV; ++Y) {
          double Acc = 0;
          for (int64_t X = 0; X < Dm.D; ++X)
            Acc += M.Q[T][X] * Out.States.at({Slot, H, X, Y});
          Out.O.at({B, H, T, Y}) = Acc;
        }
      }
    }
  }
  return Out;
}

namespace {

/// Tokens [T0, T0 + N) of \p X along dimension \p Dim (and along
/// \p Dim2 too when it is not -1: a full input's key dimension).
Tensor sliceDims(const Tensor &X, size_t Dim, int64_t T0, int64_t N,
                 int Dim2 = -1) {
  std::vector<int64_t> Shape = X.Shape;
  Shape[Dim] = N;
  if (Dim2 >= 0)
    Shape[Dim2] = N;
  Tensor Out(Shape);
  std::vector<int64_t> Idx(Shape.size(), 0);
  for (int64_t I = 0; I < Out.numel(); ++I) {
    int64_t Rest = I, Src = 0, Stride = 1;
    for (size_t D = Shape.size(); D-- > 0;) {
      Idx[D] = Rest % Shape[D];
      Rest /= Shape[D];
    }
    for (size_t D = Shape.size(); D-- > 0;) {
      int64_t At = Idx[D] + (D == Dim || int(D) == Dim2 ? T0 : 0);
      Src += At * Stride;
      Stride *= X.Shape[D];
    }
    Out.Data[I] = X.Data[Src];
  }
  return Out;
}

} // namespace

LinearInputs linearTokenSlice(const ir::Graph &G, const LinearInputs &In,
                              int64_t T0, int64_t N) {
  validateLinearInputs(G, In);
  if (T0 < 0 || N < 1 || T0 + N > In.V.dim(2))
    throw UserError("linear reference: tokens [" + std::to_string(T0) + ", " +
                    std::to_string(T0 + N) + ") are not inside the " +
                    std::to_string(In.V.dim(2)) + " tokens");
  LinearInputs Out;
  Out.Q = sliceDims(In.Q, 2, T0, N);
  Out.K = sliceDims(In.K, 2, T0, N);
  Out.V = sliceDims(In.V, 2, T0, N);
  Out.Decay = sliceDims(In.Decay, 2, T0, N);
  for (const ir::InputDecl &D : G.decls().Inputs) {
    const Tensor &X = In.Inputs.at(D.Name);
    switch (D.Shape) {
    case ir::InputShape::Scalar:
    case ir::InputShape::PerHead:
      Out.Inputs[D.Name] = X;
      break;
    case ir::InputShape::PerRow:
    case ir::InputShape::PerKey:
      Out.Inputs[D.Name] = sliceDims(X, 2, T0, N);
      break;
    case ir::InputShape::Full:
      Out.Inputs[D.Name] = sliceDims(X, 2, T0, N, 3);
      break;
    case ir::InputShape::PerQueryToken:
    case ir::InputShape::PerKeyToken:
      Out.Inputs[D.Name] = sliceDims(X, 1, T0, N);
      break;
    }
  }
  return Out;
}

namespace {

/// linearVarlen's argument checks; the validated sizes.
Dims validatedPacked(const CompiledDefinition &Def, const LinearInputs &In,
                     const std::vector<int64_t> &CuSeqlens,
                     const std::optional<Tensor> &Initial) {
  Dims Dm = validated(Def, In);
  if (Dm.B != 1)
    throw UserError("linear reference: a packed batch is batch 1, got " +
                    std::to_string(Dm.B));
  const int64_t S = int64_t(CuSeqlens.size()) - 1;
  if (S < 1 || CuSeqlens.front() != 0 || CuSeqlens.back() != Dm.T)
    throw UserError("linear reference: cu_seqlens must run from 0 to the " +
                    std::to_string(Dm.T) + " tokens with at least one sequence");
  for (int64_t I = 0; I < S; ++I)
    if (CuSeqlens[I + 1] < CuSeqlens[I])
      throw UserError("linear reference: cu_seqlens must not decrease");
  if (In.InitialState)
    throw UserError("linear reference: a packed batch's initial states are "
                    "given as [sequences, heads, D, DV] apart from the tokens");
  if (Initial && Initial->Shape != std::vector<int64_t>{S, Dm.H, Dm.D, Dm.DV})
    throw UserError("linear reference: initial states must be " +
                    Tensor({S, Dm.H, Dm.D, Dm.DV}).shapeString() + ", got " +
                    Initial->shapeString());
  return Dm;
}

/// Sequence \p Seq's initial state [1,H,D,DV] (zero without \p Initial).
Tensor initialOf(const Dims &Dm, const std::optional<Tensor> &Initial,
                 int64_t Seq) {
  const int64_t StateSize = Dm.H * Dm.D * Dm.DV;
  Tensor Init({1, Dm.H, Dm.D, Dm.DV});
  if (Initial)
    std::copy_n(Initial->Data.begin() + Seq * StateSize, StateSize,
                Init.Data.begin());
  return Init;
}

} // namespace

LinearOutputs linearVarlen(const CompiledDefinition &Def,
                           const LinearInputs &In,
                           const std::vector<int64_t> &CuSeqlens,
                           const std::optional<Tensor> &Initial, int64_t Chunk,
                           const RoundFn &Round) {
  Dims Dm = validatedPacked(Def, In, CuSeqlens, Initial);
  const int64_t S = int64_t(CuSeqlens.size()) - 1;
  LinearOutputs Out{Tensor({1, Dm.H, Dm.T, Dm.DV}),
                    Tensor({S, Dm.H, Dm.D, Dm.DV})};
  const int64_t StateSize = Dm.H * Dm.D * Dm.DV;
  for (int64_t Seq = 0; Seq < S; ++Seq) {
    const int64_t T0 = CuSeqlens[Seq], N = CuSeqlens[Seq + 1] - T0;
    Tensor Init = initialOf(Dm, Initial, Seq);
    if (N == 0) { // nothing to run: the state passes through
      std::copy_n(Init.Data.begin(), StateSize,
                  Out.FinalState.Data.begin() + Seq * StateSize);
      continue;
    }
    LinearInputs Sub = linearTokenSlice(*Def.Graph, In, T0, N);
    Sub.InitialState = Init;
    LinearOutputs R =
        Chunk > 0 ? linearChunkedModel(Def, Sub, Chunk,
                                       Round ? Round : [](double X) { return X; })
                  : linearRecurrent(Def, Sub);
    for (int64_t H = 0; H < Dm.H; ++H)
      for (int64_t T = 0; T < N; ++T)
        for (int64_t Y = 0; Y < Dm.DV; ++Y)
          Out.O.at({0, H, T0 + T, Y}) = R.O.at({0, H, T, Y});
    std::copy_n(R.FinalState.Data.begin(), StateSize,
                Out.FinalState.Data.begin() + Seq * StateSize);
  }
  return Out;
}

} // namespace attn::reference

namespace attn::reference {

LinearGrads linearVarlenBackward(const CompiledDefinition &Def,
                                 const LinearInputs &In,
                                 const std::vector<int64_t> &CuSeqlens,
                                 const std::optional<Tensor> &Initial,
                                 const Tensor &DO,
                                 const std::optional<Tensor> &DFinal,
                                 int64_t Chunk, const RoundFn &Round,
                                 unsigned Threads) {
  const ir::Graph &G = *Def.Graph;
  Dims Dm = validatedPacked(Def, In, CuSeqlens, Initial);
  const int64_t S = int64_t(CuSeqlens.size()) - 1;
  const std::vector<int64_t> State = {S, Dm.H, Dm.D, Dm.DV};
  if (DO.Shape != std::vector<int64_t>{1, Dm.H, Dm.T, Dm.DV})
    throw UserError("linear reference: dout must be " +
                    Tensor({1, Dm.H, Dm.T, Dm.DV}).shapeString() + ", got " +
                    DO.shapeString());
  if (DFinal && DFinal->Shape != State)
    throw UserError("linear reference: final-state gradients must be " +
                    Tensor(State).shapeString() + ", got " +
                    DFinal->shapeString());
  LinearGrads Out;
  Out.DQ = Tensor(In.Q.Shape);
  Out.DK = Tensor(In.K.Shape);
  Out.DV = Tensor(In.V.Shape);
  Out.DDecay = Tensor({1, Dm.H, Dm.T});
  Out.DInitialState = Tensor(State);
  for (const ir::InputDecl &D : G.decls().Inputs)
    Out.DInputs[D.Name] = Tensor(In.Inputs.at(D.Name).Shape);
  const int64_t StateSize = Dm.H * Dm.D * Dm.DV;
  // Token T of sequence-local [1, heads, N, dim] to the packed tensor.
  auto Place = [](const Tensor &Sub, Tensor &Dst, int64_t T0) {
    const int64_t Heads = Sub.dim(1), N = Sub.dim(2), W = Sub.dim(3);
    for (int64_t H = 0; H < Heads; ++H)
      for (int64_t T = 0; T < N; ++T)
        for (int64_t X = 0; X < W; ++X)
          Dst.at({0, H, T0 + T, X}) = Sub.at({0, H, T, X});
  };
  for (int64_t Seq = 0; Seq < S; ++Seq) {
    const int64_t T0 = CuSeqlens[Seq], N = CuSeqlens[Seq + 1] - T0;
    if (N == 0) { // the state passes through: so does its gradient
      if (DFinal)
        std::copy_n(DFinal->Data.begin() + Seq * StateSize, StateSize,
                    Out.DInitialState->Data.begin() + Seq * StateSize);
      continue;
    }
    LinearInputs Sub = linearTokenSlice(G, In, T0, N);
    Sub.InitialState = initialOf(Dm, Initial, Seq);
    Tensor SubDO({1, Dm.H, N, Dm.DV});
    for (int64_t H = 0; H < Dm.H; ++H)
      for (int64_t T = 0; T < N; ++T)
        for (int64_t Y = 0; Y < Dm.DV; ++Y)
          SubDO.at({0, H, T, Y}) = DO.at({0, H, T0 + T, Y});
    std::optional<Tensor> SubDF;
    if (DFinal) {
      SubDF = Tensor({1, Dm.H, Dm.D, Dm.DV});
      std::copy_n(DFinal->Data.begin() + Seq * StateSize, StateSize,
                  SubDF->Data.begin());
    }
    LinearGrads R =
        Chunk > 0
            ? linearChunkedModelBackward(
                  Def, Sub, SubDO, SubDF, Chunk,
                  Round ? Round : [](double X) { return X; }, Threads)
            : linearBackward(Def, Sub, SubDO, SubDF, Threads);
    Place(R.DQ, Out.DQ, T0);
    Place(R.DK, Out.DK, T0);
    Place(R.DV, Out.DV, T0);
    for (int64_t H = 0; H < Dm.H; ++H)
      for (int64_t T = 0; T < N; ++T)
        Out.DDecay.at({0, H, T0 + T}) = R.DDecay.at({0, H, T});
    std::copy_n(R.DInitialState->Data.begin(), StateSize,
                Out.DInitialState->Data.begin() + Seq * StateSize);
    // Per-token inputs' gradients to their tokens; the others summed over
    // the sequences in order.
    for (const ir::InputDecl &D : G.decls().Inputs) {
      const Tensor &Part = R.DInputs.at(D.Name);
      Tensor &Dst = Out.DInputs[D.Name];
      switch (D.Shape) {
      case ir::InputShape::Scalar:
      case ir::InputShape::PerHead:
        for (size_t I = 0; I < Dst.Data.size(); ++I)
          Dst.Data[I] += Part.Data[I];
        break;
      case ir::InputShape::PerRow:
      case ir::InputShape::PerKey:
        for (int64_t H = 0; H < Dm.H; ++H)
          for (int64_t T = 0; T < N; ++T)
            Dst.at({0, H, T0 + T}) = Part.at({0, H, T});
        break;
      case ir::InputShape::Full:
      case ir::InputShape::PerQueryToken:
      case ir::InputShape::PerKeyToken:
        throw UserError("linear reference: no gradient of the " +
                        ir::inputShapeName(D.Shape).str() + " input '" +
                        D.Name + "' over a packed batch");
      }
    }
  }
  return Out;
}

} // namespace attn::reference
