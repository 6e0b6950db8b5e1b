// attnc check: online vs direct, backward vs finite differences, chunked vs
// recurrent, all in double precision on random data.
#include "attn/reference/Checker.h"

#include "attn/Error.h"
#include "attn/analysis/Merge.h"
#include "attn/reference/Attention.h"
#include "attn/reference/InputBinding.h"
#include "attn/reference/Linear.h"
#include "attn/transforms/Autodiff.h"

#include <fmt/format.h>

#include <algorithm>
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

/// score_mod's derivatives (score_mod_grad and score_mod_input_grad, as the
/// kernels evaluate them) against central differences of score_mod itself,
/// at random scores, indices and input values.
double scoreModDerivativeError(const ir::Graph &G, std::mt19937_64 &Rng) {
  const int64_t B = 2, H = 4, S = 16, D = 8;
  InputValues Ins = sampleInputs(G, Rng, B, H, S, S);
  std::vector<const ir::InputDecl *> GradIns = transforms::gradInputDecls(G);
  const ir::Node *Mod = G.getFunction("score_mod")->result("score");
  const ir::Function *ModGrad = G.getFunction("score_mod_grad");
  const ir::Function *InGrad = G.getFunction("score_mod_input_grad");
  if (!ModGrad || (!GradIns.empty() && !InGrad))
    return Inf;
  std::normal_distribution<double> Score(0.0, 2.0);
  std::uniform_int_distribution<int64_t> Pick(0, 1 << 20);
  double Worst = 0;
  for (int Trial = 0; Trial < 64; ++Trial) {
    double X = Score(Rng);
    int64_t Bi = Pick(Rng) % B, Hi = Pick(Rng) % H, Qi = Pick(Rng) % S,
            Ki = Pick(Rng) % S;
    auto Eval = [&](const ir::Node *N, double At, const InputValues &V) {
      Evaluator E(
          [&](const ir::ParamNode &P) -> Values {
            switch (P.getParamKind()) {
            case ir::ParamKind::Score:
              return {Dual{At, 0.0}};
            case ir::ParamKind::Index: {
              llvm::StringRef Nm = P.getName();
              double I = Nm == "b" ? Bi : Nm == "h" ? Hi : Nm == "q_idx" ? Qi : Ki;
              return {Dual{I, 0.0}};
            }
            case ir::ParamKind::Input:
              return bindInput(G, V, P.getName(), Bi, Hi, Qi, Ki, Ki + 1);
            case ir::ParamKind::HeadDim:
              return {Dual{double(D), 0.0}};
            case ir::ParamKind::Scores:
            case ir::ParamKind::Output:
            case ir::ParamKind::Rowscale:
            case ir::ParamKind::FinalRowscale:
            case ir::ParamKind::Probs:
            case ir::ParamKind::GradProbs:
            case ir::ParamKind::Doosum:
            case ir::ParamKind::Element:
            case ir::ParamKind::OtherRowscale:
            case ir::ParamKind::Decay:
              break;
            }
            throw InternalError("check: score_mod reads '" +
                                P.getName().str() + "'");
          },
          {true});
      return E.at(N, 0).V;
    };
    auto Compare = [&](double Symbolic, double Up, double Down, double Step) {
      double Fd = (Up - Down) / (2 * Step);
      double E = std::isnan(Symbolic) != std::isnan(Fd)
                     ? Inf
                     : std::fabs(Symbolic - Fd) / (1.0 + std::fabs(Fd));
      Worst = std::max(Worst, std::isnan(E) ? 0.0 : E);
    };
    double Step = 1e-6 * std::max(1.0, std::fabs(X));
    Compare(Eval(ModGrad->result("dscore"), X, Ins), Eval(Mod, X + Step, Ins),
            Eval(Mod, X - Step, Ins), Step);
    for (const ir::InputDecl *In : GradIns) {
      InputValues Moved = Ins;
      Tensor &T = Moved.at(In->Name);
      int64_t Off = inputOffset(T, In->Shape, Bi, Hi, Qi, Ki);
      double Saved = T.Data[Off], H2 = 1e-6 * std::max(1.0, std::fabs(Saved));
      T.Data[Off] = Saved + H2;
      double Up = Eval(Mod, X, Moved);
      T.Data[Off] = Saved - H2;
      double Down = Eval(Mod, X, Moved);
      Compare(Eval(InGrad->result("d_" + In->Name), X, Ins), Up, Down, H2);
    }
  }
  return Worst;
}

/// The backward rows: the definition's backward (written or derived)
/// against finite differences of the direct definition, the custom-input
/// gradients likewise, score_mod's derivatives pointwise, and a written
/// backward against the derived one.
void checkGradients(const CompiledDefinition &Def, const CheckOptions &Opts,
                    CheckReport &Report, std::mt19937_64 &Rng) {
  const ir::Graph &G = *Def.Graph;
  const ir::Declarations &Dc = G.decls();
  std::vector<const ir::InputDecl *> GradIns = transforms::gradInputDecls(G);
  std::string Names = "dscore";
  for (const ir::InputDecl *In : GradIns)
    Names += ", d_" + In->Name;
  Report.Rows.push_back({"score_mod derivatives vs finite differences (" +
                             Names + ")",
                         scoreModDerivativeError(G, Rng),
                         Opts.GradientTolerance});

  const AttentionCase GradCase{1, 2, 1, 6, 7, 3, 2, {2}};
  std::string Which = Dc.BackwardDerived ? "derived backward" : "backward";
  std::string Name = Which + " vs finite differences, " + shapeName(GradCase);
  if (!G.getFunction("backward")) {
    Report.Rows.push_back({Name + " (dq, dk, dv)", Inf,
                           Opts.GradientTolerance, false,
                           Dc.BackwardUnavailable});
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
  if (!GradIns.empty()) {
    double EI = 0;
    std::string List;
    for (const ir::InputDecl *I : GradIns) {
      EI = std::max(EI, gradientError(Grads.DInputs.at(I->Name),
                                      finiteDifferences(Def, In,
                                                        In.Inputs.at(I->Name),
                                                        DO)));
      List += (List.empty() ? "" : ", ") + ("d_" + I->Name);
    }
    Report.Rows.push_back({"input gradients vs finite differences, " +
                               shapeName(GradCase) + " (" + List + ")",
                           EI, Opts.GradientTolerance});
  }
  if (Dc.BackwardDerived)
    return;
  // A written backward: the derived one must agree with it.
  std::string Agree =
      "derived backward vs written backward, " + shapeName(GradCase);
  CompiledDefinition Derived = withDerivedBackward(Def);
  if (!Derived.Graph->getFunction("backward")) {
    Report.Rows.push_back({Agree, 0, Opts.AlgorithmTolerance, true,
                           Derived.Graph->decls().BackwardUnavailable});
    return;
  }
  AttentionGrads Other = attentionBackward(Derived, In, DO);
  double EA = gradientError(Other.DQ, Grads.DQ);
  EA = std::max(EA, gradientError(Other.DK, Grads.DK));
  EA = std::max(EA, gradientError(Other.DV, Grads.DV));
  Report.Rows.push_back({Agree + " (dq, dk, dv)", EA, Opts.AlgorithmTolerance});
}

/// The shapes above use head dims 3 to 6, where a definition that reads
/// head_dim() may behave unlike at the dims the kernels run
/// (`score / (head_dim() - 128)`). One block of 2 queries by 3 keys at each
/// real dim keeps this cheap.
constexpr int64_t RealHeadDims[] = {64, 128, 192, 256};

double realHeadDimsError(const CompiledDefinition &Def, std::mt19937_64 &Rng) {
  double Worst = 0;
  for (int64_t D : RealHeadDims) {
    AttentionInputs In =
        makeInputs(*Def.Graph, AttentionCase{1, 1, 1, 2, 3, D, 4, {}}, Rng);
    Worst = std::max(Worst, outputsError(attentionOnline(Def, In, 2),
                                         attentionDirect(Def, In)));
  }
  return Worst;
}

/// How much mask_mod masks on the case's inputs, as a row: the checks of a
/// case compare nothing where every row is fully masked (o = 0 on both
/// sides), so such a case fails rather than passing vacuously.
CheckRow maskRow(const CompiledDefinition &Def, const AttentionInputs &In,
                 const AttentionCase &C) {
  MaskStats S = attentionMaskStats(Def, In);
  std::string Name = fmt::format(
      "mask exercised, {}: {:.1f}% of elements masked, {:.1f}% of rows fully "
      "masked",
      shapeName(C), 100 * S.maskedFraction(),
      100 * S.fullyMaskedRowFraction());
  if (S.Rows > 0 && S.FullyMaskedRows == S.Rows)
    return {Name, Inf, 0.0, false,
            "vacuous: every row is masked; the checks of this shape compare "
            "only zeros. Give the inputs the mask reads sample ranges "
            "where it keeps some keys (an int32 id input draws from its "
            "range's whole numbers)"};
  return {Name, 0.0, 0.0};
}

/// The definition's combine: the row's keys cut at random into 2, 3 and 5
/// parts (some may be empty) and into one key a part, each part's state
/// merged in order by the combine, against the unsplit online result.
CheckRow combineRow(const CompiledDefinition &Def, const AttentionInputs &In,
                    const AttentionCase &C, const CheckOptions &Opts,
                    std::mt19937_64 &Rng) {
  analysis::MergeInfo M = analysis::userCombine(*Def.Graph);
  AttentionOutputs Whole = attentionOnline(Def, In, 0);
  std::uniform_int_distribution<int64_t> Cut(0, C.Skv);
  std::vector<std::vector<int64_t>> Splits;
  for (int Parts : {2, 3, 5}) {
    std::vector<int64_t> B{0, C.Skv};
    for (int I = 1; I < Parts; ++I)
      B.push_back(Cut(Rng));
    std::sort(B.begin(), B.end());
    Splits.push_back(B);
  }
  std::vector<int64_t> EachKey;
  for (int64_t J = 0; J <= C.Skv; ++J)
    EachKey.push_back(J);
  Splits.push_back(EachKey);
  double E = 0;
  for (const std::vector<int64_t> &B : Splits)
    E = std::max(E, outputsError(attentionSplitMerged(Def, In, B, M), Whole));
  return {"combine: random splits of the keys merged vs unsplit, " +
              shapeName(C),
          E, Opts.AlgorithmTolerance, false,
          E <= Opts.AlgorithmTolerance
              ? ""
              : "the definition's combine does not give the unsplit "
                "result: o = o_scale_a*o_a + o_scale_b*o_b and the merged "
                "rowscales must equal the state of the union of the keys"};
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
    if (G.decls().HasMask)
      Report.Rows.push_back(maskRow(Def, In, C));
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
    if (G.getFunction("combine"))
      Report.Rows.push_back(combineRow(Def, In, C, Opts, Rng));
  }
  Report.Rows.push_back({"head dims 64, 128, 192, 256: online (block 2) vs "
                         "direct, b1 h1/1 s2x3 dv4",
                         realHeadDimsError(Def, Rng),
                         Opts.AlgorithmTolerance});

  checkGradients(Def, Opts, Report, Rng);
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
                         : Row.Note.empty() ? "FAIL"
                                            : "FAIL (" + Row.Note + ")";
    OS << fmt::format("  {:<{}}  {:>10.3g}  {:>9.3g}  {}\n", Row.Name, Width,
                      Row.MaxError, Row.Tolerance, Result);
  }
  OS << (R.passed() ? "  all checks passed\n" : "  CHECK FAILED\n");
}

} // namespace attn::reference
