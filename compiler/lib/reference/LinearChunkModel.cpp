// The linear_chunk kernels' algorithm in double precision, with a rounding
// hook wherever the kernels hold a value in 16 bits: the exact chunked form
// (identity) and the GPU tests' plain low-precision yardstick.
#include "LinearMods.h"

#include "attn/Error.h"

#include <cmath>

namespace attn::reference {

using namespace linear;

namespace {

using Matrix = std::vector<std::vector<double>>;

/// One chunk's decay terms: G (chunk-local cumulative log-decay), exp(G_i)
/// and exp(G_last − G_j), and exp(G_last).
struct ChunkDecay {
  std::vector<double> G, E, W;
  double Last = 0;
};

ChunkDecay chunkDecay(const HeadMods &M, int64_t C0, int64_t C1) {
  ChunkDecay Dc;
  double Run = 0;
  for (int64_t T = C0; T < C1; ++T)
    Dc.G.push_back(Run += M.G.Val[T][0]);
  for (double G : Dc.G) {
    Dc.E.push_back(std::exp(G));
    Dc.W.push_back(std::exp(Run - G));
  }
  Dc.Last = std::exp(Run);
  return Dc;
}

/// The modded q, k, v rounded as the kernels' tiles hold them.
struct Rounded {
  Matrix Q, K, V;
};

Rounded roundMods(const HeadMods &M, const RoundFn &R) {
  Rounded Out{M.Q.Val, M.K.Val, M.V.Val};
  for (Matrix *X : {&Out.Q, &Out.K, &Out.V})
    for (auto &Row : *X)
      for (double &V : Row)
        V = R(V);
  return Out;
}

double dot(const std::vector<double> &A, const std::vector<double> &B) {
  double S = 0;
  for (size_t I = 0; I < A.size(); ++I)
    S += A[I] * B[I];
  return S;
}

/// S ← exp(G_last)·S + Σ_j R(A_j[x]·scale_j)·Val_j[y] over the chunk.
void updateState(std::vector<double> &S, int64_t DV, const Matrix &A,
                 const Matrix &Val, const std::vector<double> &Scale,
                 int64_t C0, double Last, const RoundFn &R) {
  for (double &X : S)
    X *= Last;
  for (size_t J = 0; J < Scale.size(); ++J)
    for (size_t X = 0; X < A[C0 + J].size(); ++X) {
      double Ax = R(A[C0 + J][X] * Scale[J]);
      for (int64_t Y = 0; Y < DV; ++Y)
        S[X * DV + Y] += Ax * Val[C0 + J][Y];
    }
}

/// Rows [C0, C1) of out = diag(rs)·(A·St) + R((A·Bᵀ) ⊙ M)·Val with St
/// given as a function of (k, n), M the decay mask (lower: i ≥ j,
/// exp(G_i − G_j); else j ≥ i with exp(G_j − G_i)).
Matrix chunkOut(const Matrix &A, const Matrix &Bm, const Matrix &Val,
                const std::function<double(int64_t, int64_t)> &St, int64_t N,
                const std::vector<double> &Rs, const ChunkDecay &Dc,
                int64_t C0, bool Lower, const RoundFn &R) {
  const int64_t Len = int64_t(Rs.size());
  Matrix Out(Len, std::vector<double>(N, 0.0));
  for (int64_t I = 0; I < Len; ++I) {
    const auto &Ai = A[C0 + I];
    for (int64_t Y = 0; Y < N; ++Y) {
      double Acc = 0;
      for (size_t X = 0; X < Ai.size(); ++X)
        Acc += Ai[X] * St(int64_t(X), Y);
      Out[I][Y] = Rs[I] * Acc;
    }
    for (int64_t J = 0; J < Len; ++J) {
      if (Lower ? J > I : J < I)
        continue;
      double P = R(dot(Ai, Bm[C0 + J]) *
                   std::exp(Lower ? Dc.G[I] - Dc.G[J] : Dc.G[J] - Dc.G[I]));
      for (int64_t Y = 0; Y < N; ++Y)
        Out[I][Y] += P * Val[C0 + J][Y];
    }
  }
  return Out;
}

std::vector<double> initialState(const LinearInputs &In, const Dims &Dm,
                                 int64_t B, int64_t H) {
  std::vector<double> S(Dm.D * Dm.DV, 0.0);
  if (In.InitialState)
    for (int64_t X = 0; X < Dm.D; ++X)
      for (int64_t Y = 0; Y < Dm.DV; ++Y)
        S[X * Dm.DV + Y] = In.InitialState->at({B, H, X, Y});
  return S;
}

std::vector<double> rounded(std::vector<double> S, const RoundFn &R) {
  for (double &X : S)
    X = R(X);
  return S;
}

void checkChunk(int64_t Chunk) {
  if (Chunk < 1)
    throw UserError("linear reference: chunk size must be at least 1");
}

} // namespace

LinearOutputs linearChunkedModel(const CompiledDefinition &Def,
                                 const LinearInputs &In, int64_t Chunk,
                                 const RoundFn &Round, unsigned Threads) {
  checkChunk(Chunk);
  Dims Dm = checkBackwardInputs(Def, In, nullptr, nullptr);
  LinearOutputs Out{Tensor({Dm.B, Dm.H, Dm.T, Dm.DV}),
                    Tensor({Dm.B, Dm.H, Dm.D, Dm.DV})};
  const int64_t DV = Dm.DV;
  forEachHead(
      Dm, Threads,
      [&](int64_t B, int64_t H) {
        HeadMods M = evalMods(Def, In, Dm, B, H, false);
        Rounded Rd = roundMods(M, Round);
        std::vector<double> S = initialState(In, Dm, B, H);
        for (int64_t C0 = 0; C0 < Dm.T; C0 += Chunk) {
          int64_t C1 = std::min(C0 + Chunk, Dm.T);
          ChunkDecay Dc = chunkDecay(M, C0, C1);
          std::vector<double> Sr = rounded(S, Round);
          Matrix O = chunkOut(
              Rd.Q, Rd.K, Rd.V,
              [&](int64_t X, int64_t Y) { return Sr[X * DV + Y]; }, DV, Dc.E,
              Dc, C0, true, Round);
          for (int64_t I = C0; I < C1; ++I)
            for (int64_t Y = 0; Y < DV; ++Y)
              Out.O.at({B, H, I, Y}) = O[I - C0][Y];
          updateState(S, DV, Rd.K, Rd.V, Dc.W, C0, Dc.Last, Round);
        }
        for (int64_t X = 0; X < Dm.D; ++X)
          for (int64_t Y = 0; Y < DV; ++Y)
            Out.FinalState.at({B, H, X, Y}) = S[X * DV + Y];
      },
      [](int64_t, int64_t) {});
  return Out;
}

LinearGrads linearChunkedModelBackward(const CompiledDefinition &Def,
                                       const LinearInputs &In,
                                       const Tensor &DO,
                                       const std::optional<Tensor> &DFinalState,
                                       int64_t Chunk, const RoundFn &Round,
                                       unsigned Threads) {
  checkChunk(Chunk);
  Dims Dm = checkBackwardInputs(Def, In, &DO, DFinalState ? &*DFinalState
                                                          : nullptr);
  const int64_t D = Dm.D, DV = Dm.DV;
  LinearGrads Out = zeroGrads(Def, In, Dm);
  std::vector<HeadMods> Mods(Dm.B * Dm.H);
  std::vector<HeadGrads> Grads(Dm.B * Dm.H);
  auto PerHead = [&](int64_t B, int64_t H) {
    HeadMods &M = Mods[B * Dm.H + H];
    M = evalMods(Def, In, Dm, B, H, true);
    Rounded Rd = roundMods(M, Round);
    Matrix Do(Dm.T, std::vector<double>(DV));
    for (int64_t T = 0; T < Dm.T; ++T)
      for (int64_t Y = 0; Y < DV; ++Y)
        Do[T][Y] = DO.at({B, H, T, Y});
    HeadGrads &HG = Grads[B * Dm.H + H];
    HG.DQ.assign(Dm.T, std::vector<double>(D));
    HG.DK.assign(Dm.T, std::vector<double>(D));
    HG.DV.assign(Dm.T, std::vector<double>(DV));
    HG.DG.assign(Dm.T, 0.0);

    // dq of each chunk: dq = diag(exp G)·(dO·R(S)ᵀ) + R((dO·Vᵀ) ⊙ D)·K, and
    // the state after each chunk, rounded (the backward's <S_out, dS>).
    std::vector<double> S = initialState(In, Dm, B, H);
    std::vector<std::vector<double>> After;
    for (int64_t C0 = 0; C0 < Dm.T; C0 += Chunk) {
      int64_t C1 = std::min(C0 + Chunk, Dm.T);
      ChunkDecay Dc = chunkDecay(M, C0, C1);
      std::vector<double> Sr = rounded(S, Round);
      Matrix Dq = chunkOut(
          Do, Rd.V, Rd.K, [&](int64_t Y, int64_t X) { return Sr[X * DV + Y]; },
          D, Dc.E, Dc, C0, true, Round);
      for (int64_t I = C0; I < C1; ++I)
        HG.DQ[I] = Dq[I - C0];
      updateState(S, DV, Rd.K, Rd.V, Dc.W, C0, Dc.Last, Round);
      After.push_back(rounded(S, Round));
    }

    // The reverse scan with dS, the gradient of the state after the chunk.
    std::vector<double> DS(D * DV, 0.0);
    if (DFinalState)
      for (int64_t X = 0; X < D; ++X)
        for (int64_t Y = 0; Y < DV; ++Y)
          DS[X * DV + Y] = DFinalState->at({B, H, X, Y});
    std::vector<double> Z(After.size(), 0.0);
    for (int64_t C = int64_t(After.size()) - 1; C >= 0; --C) {
      int64_t C0 = C * Chunk, C1 = std::min(C0 + Chunk, Dm.T);
      ChunkDecay Dc = chunkDecay(M, C0, C1);
      std::vector<double> Sr = rounded(DS, Round);
      Z[C] = dot(After[C], DS);
      Matrix Dv = chunkOut(
          Rd.K, Rd.Q, Do, [&](int64_t X, int64_t Y) { return Sr[X * DV + Y]; },
          DV, Dc.W, Dc, C0, false, Round);
      Matrix Dk = chunkOut(
          Rd.V, Do, Rd.Q, [&](int64_t Y, int64_t X) { return Sr[X * DV + Y]; },
          D, Dc.W, Dc, C0, false, Round);
      for (int64_t I = C0; I < C1; ++I) {
        HG.DV[I] = Dv[I - C0];
        HG.DK[I] = Dk[I - C0];
      }
      updateState(DS, DV, Rd.Q, Do, Dc.E, C0, Dc.Last, Round);
    }
    HG.DInit = DS;

    // dg_s = Σ_{t ≥ s in the chunk} (q·dq − k·dk)_t + <S_out, dS_out>.
    for (int64_t C = 0; C * Chunk < Dm.T; ++C) {
      int64_t C0 = C * Chunk, C1 = std::min(C0 + Chunk, Dm.T);
      double Run = Z[C];
      for (int64_t T = C1 - 1; T >= C0; --T) {
        Run += dot(M.Q.Val[T], HG.DQ[T]) - dot(M.K.Val[T], HG.DK[T]);
        HG.DG[T] = Run;
      }
    }
  };
  forEachHead(Dm, Threads, PerHead, [&](int64_t B, int64_t H) {
    chainRule(Def, Dm, B, H, Mods[B * Dm.H + H], Grads[B * Dm.H + H], Out);
    Mods[B * Dm.H + H] = HeadMods();
    Grads[B * Dm.H + H] = HeadGrads();
  });
  return Out;
}

} // namespace attn::reference
