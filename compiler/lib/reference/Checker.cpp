// attnc check: online vs direct, backward vs finite differences, chunked vs
// recurrent, all in double precision on random data.
#include "attn/reference/Checker.h"

#include "attn/reference/Attention.h"
#include "attn/reference/InputBinding.h"
#include "attn/reference/Linear.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <random>

namespace attn::reference {

namespace {

constexpr double Inf = std::numeric_limits<double>::infinity();

struct AttentionCase {
  int64_t B, H, Hkv, Sq, Skv, D, DV;
  std::vector<int64_t> MaskedRows;
};

std::string shapeName(const AttentionCase &C) {
  return fmt::format("b{} h{}/{} s{}x{} d{}/{}", C.B, C.H, C.Hkv, C.Sq, C.Skv,
                     C.D, C.DV);
}

AttentionInputs makeInputs(const ir::Graph &G, const AttentionCase &C,
                           std::mt19937_64 &Rng) {
  AttentionInputs In;
  In.Q = Tensor::normal({C.B, C.H, C.Sq, C.D}, Rng);
  In.K = Tensor::normal({C.B, C.Hkv, C.Skv, C.D}, Rng);
  In.V = Tensor::normal({C.B, C.Hkv, C.Skv, C.DV}, Rng);
  In.Inputs = sampleInputs(G, Rng, C.B, C.H, C.Sq, C.Skv);
  In.MaskedRows.assign(C.Sq, false);
  for (int64_t R : C.MaskedRows)
    In.MaskedRows[R] = true;
  return In;
}

double outputsError(const AttentionOutputs &A, const AttentionOutputs &B) {
  double E = maxMixedError(A.O, B.O);
  for (const auto &[Name, T] : B.Finals)
    E = std::max(E, maxMixedError(A.Finals.at(Name), T));
  return E;
}

/// Fully masked rows: o exactly 0 and every final rowscale -inf.
double maskedRowsError(const AttentionOutputs &Out, const AttentionInputs &In) {
  double E = 0;
  const Tensor &O = Out.O;
  for (int64_t B = 0; B < O.dim(0); ++B)
    for (int64_t H = 0; H < O.dim(1); ++H)
      for (int64_t I = 0; I < O.dim(2); ++I) {
        if (!In.MaskedRows[I])
          continue;
        for (int64_t X = 0; X < O.dim(3); ++X) {
          double V = O.at({B, H, I, X});
          E = std::max(E, std::isnan(V) ? Inf : std::fabs(V));
        }
        for (const auto &[Name, T] : Out.Finals)
          if (T.at({B, H, I}) != -Inf)
            E = Inf;
      }
  return E;
}

/// Central differences of sum(o ∘ dO) in every element of \p X.
Tensor finiteDifferences(const CompiledDefinition &Def, AttentionInputs &In,
                         Tensor &X, const Tensor &DO) {
  Tensor Grad(X.Shape);
  auto Loss = [&] {
    AttentionOutputs Out = attentionDirect(Def, In);
    double L = 0;
    for (int64_t I = 0; I < Out.O.numel(); ++I)
      L += Out.O.Data[I] * DO.Data[I];
    return L;
  };
  for (int64_t I = 0; I < X.numel(); ++I) {
    double Saved = X.Data[I];
    double Step = 1e-6 * std::max(1.0, std::fabs(Saved));
    X.Data[I] = Saved + Step;
    double Up = Loss();
    X.Data[I] = Saved - Step;
    double Down = Loss();
    X.Data[I] = Saved;
    Grad.Data[I] = (Up - Down) / (2 * Step);
  }
  return Grad;
}

/// max |a - b| / (1 + max |b|): gradients are compared on the scale of the
/// largest entry, since finite differences carry absolute, not relative,
/// error.
double gradientError(const Tensor &A, const Tensor &B) {
  double Scale = 0, E = 0;
  for (double V : B.Data)
    Scale = std::max(Scale, std::fabs(V));
  for (size_t I = 0; I < A.Data.size(); ++I) {
    if (std::isnan(A.Data[I]) || std::isnan(B.Data[I]))
      return Inf;
    E = std::max(E, std::fabs(A.Data[I] - B.Data[I]));
  }
  return E / (1.0 + Scale);
}

void checkAttention(const CompiledDefinition &Def, const CheckOptions &Opts,
                    CheckReport &Report) {
  const ir::Graph &G = *Def.Graph;
  std::mt19937_64 Rng(Opts.Seed);
  const AttentionCase Cases[] = {
      {2, 2, 2, 13, 13, 4, 3, {0, 6}},
      {1, 4, 2, 7, 17, 5, 6, {}},
      {1, 2, 1, 1, 1, 4, 4, {}},
  };
  for (const AttentionCase &C : Cases) {
    AttentionInputs In = makeInputs(G, C, Rng);
    AttentionOutputs Direct = attentionDirect(Def, In);
    for (int64_t Block : {int64_t(1), int64_t(3), int64_t(4), int64_t(16)}) {
      AttentionOutputs Online = attentionOnline(Def, In, Block);
      Report.Rows.push_back({fmt::format("online (block {}) vs direct, {}",
                                         Block, shapeName(C)),
                             outputsError(Online, Direct),
                             Opts.AlgorithmTolerance});
    }
    if (!C.MaskedRows.empty())
      Report.Rows.push_back(
          {"fully masked rows: o = 0, finals = -inf, " + shapeName(C),
           maskedRowsError(attentionOnline(Def, In, 4), In), 0.0});
  }

  const AttentionCase GradCase{1, 2, 1, 6, 7, 3, 2, {2}};
  std::string Name = "backward vs finite differences, " + shapeName(GradCase);
  if (!G.decls().HasBackward) {
    CheckRow Row{Name, 0, Opts.GradientTolerance, true,
                 "no backward written; automatic derivation is planned"};
    Report.Rows.push_back(Row);
    return;
  }
  AttentionInputs In = makeInputs(G, GradCase, Rng);
  Tensor DO = Tensor::normal({GradCase.B, GradCase.H, GradCase.Sq,
                              GradCase.DV}, Rng);
  AttentionGrads Grads = attentionBackward(Def, In, DO);
  double E = gradientError(Grads.DQ, finiteDifferences(Def, In, In.Q, DO));
  E = std::max(E, gradientError(Grads.DK, finiteDifferences(Def, In, In.K, DO)));
  E = std::max(E, gradientError(Grads.DV, finiteDifferences(Def, In, In.V, DO)));
  Report.Rows.push_back({Name + " (dq, dk, dv)", E, Opts.GradientTolerance});
}

void checkLinear(const CompiledDefinition &Def, const CheckOptions &Opts,
                 CheckReport &Report) {
  const ir::Graph &G = *Def.Graph;
  std::mt19937_64 Rng(Opts.Seed);
  struct Case {
    int64_t B, H, Hq, Hk, T, D, DV;
  };
  for (const Case &C : {Case{2, 2, 2, 2, 13, 4, 3}, Case{1, 4, 1, 2, 9, 3, 5},
                        Case{1, 1, 1, 1, 1, 2, 2}}) {
    std::string Shape = fmt::format("b{} h{} hq{} hk{} t{} d{}/{}", C.B, C.H,
                                    C.Hq, C.Hk, C.T, C.D, C.DV);
    for (bool WithState : {false, true}) {
      LinearInputs In;
      In.Q = Tensor::normal({C.B, C.Hq, C.T, C.D}, Rng);
      In.K = Tensor::normal({C.B, C.Hk, C.T, C.D}, Rng);
      In.V = Tensor::normal({C.B, C.H, C.T, C.DV}, Rng);
      In.Decay = Tensor::uniform({C.B, C.H, C.T}, Rng,
                                 G.decls().DecaySampleLo,
                                 G.decls().DecaySampleHi);
      In.Inputs = sampleInputs(G, Rng, C.B, C.H, C.T, C.T);
      if (WithState)
        In.InitialState = Tensor::normal({C.B, C.H, C.D, C.DV}, Rng);
      LinearOutputs Rec = linearRecurrent(Def, In);
      for (int64_t Chunk : {int64_t(1), int64_t(4), int64_t(5), int64_t(16)}) {
        LinearOutputs Ch = linearChunked(Def, In, Chunk);
        double E = std::max(maxMixedError(Ch.O, Rec.O),
                            maxMixedError(Ch.FinalState, Rec.FinalState));
        Report.Rows.push_back(
            {fmt::format("chunked (chunk {}) vs recurrent, {}{}", Chunk, Shape,
                         WithState ? ", initial state" : ""),
             E, Opts.AlgorithmTolerance});
      }
    }
  }
}

} // namespace

bool CheckReport::passed() const {
  for (const CheckRow &R : Rows)
    if (!R.passed())
      return false;
  return !Rows.empty();
}

CheckReport check(const CompiledDefinition &Def, const CheckOptions &Opts) {
  CheckReport Report;
  Report.Definition = Def.Graph->name();
  switch (Def.Graph->decls().Kind) {
  case ir::DefinitionKind::Transformer:
    checkAttention(Def, Opts, Report);
    break;
  case ir::DefinitionKind::Linear:
    checkLinear(Def, Opts, Report);
    break;
  }
  return Report;
}

void printReport(const CheckReport &R, llvm::raw_ostream &OS) {
  size_t Width = 5;
  for (const CheckRow &Row : R.Rows)
    Width = std::max(Width, Row.Name.size());
  OS << fmt::format("{}\n  {:<{}}  {:>10}  {:>9}  {}\n", R.Definition,
                    "check", Width, "max error", "tolerance", "result");
  for (const CheckRow &Row : R.Rows) {
    std::string Result = Row.Skipped ? "skipped (" + Row.Note + ")"
                         : Row.passed() ? "pass"
                                        : "FAIL";
    OS << fmt::format("  {:<{}}  {:>10.3g}  {:>9.3g}  {}\n", Row.Name, Width,
                      Row.MaxError, Row.Tolerance, Result);
  }
  OS << (R.passed() ? "  all checks passed\n" : "  CHECK FAILED\n");
}

} // namespace attn::reference
