// The derived backward of the online function: equal to the hand-written
// one of each seed example, right against finite differences, doosum only
// where the normaliser depends on the scores, and a UserError where it
// cannot be derived.
#include "AutodiffTestDefs.h"
#include "Examples.h"
#include "TestDefs.h"

#include "attn/codegen/Codegen.h"
#include "attn/dsl/Trace.h"
#include "attn/ir/Printer.h"
#include "attn/ir/Walk.h"
#include "attn/reference/Attention.h"
#include "attn/reference/Checker.h"
#include "attn/transforms/Autodiff.h"

#include "llvm/Support/Casting.h"
#include "llvm/Support/raw_ostream.h"

#include <catch2/catch.hpp>

using namespace attn;
using Catch::Matchers::Contains;

namespace {

std::string reportText(const reference::CheckReport &R) {
  std::string S;
  llvm::raw_string_ostream OS(S);
  reference::printReport(R, OS);
  return OS.str();
}

const reference::CheckRow *findRow(const reference::CheckReport &R,
                                   llvm::StringRef Prefix) {
  for (const reference::CheckRow &Row : R.Rows)
    if (llvm::StringRef(Row.Name).startswith(Prefix))
      return &Row;
  return nullptr;
}

/// max |a − b| / (1 + max |b|).
double relError(const reference::Tensor &A, const reference::Tensor &B) {
  double Scale = 0, E = 0;
  for (double V : B.Data)
    Scale = std::max(Scale, std::fabs(V));
  for (size_t I = 0; I < A.Data.size(); ++I)
    E = std::max(E, std::isnan(A.Data[I]) ? INFINITY
                                          : std::fabs(A.Data[I] - B.Data[I]));
  return E / (1.0 + Scale);
}

} // namespace

TEST_CASE("derived backward: equals each seed example's hand-written one",
          "[autodiff][backward]") {
  for (const dsl::AttentionDef &Def :
       {examples::mha(), examples::sigmoidAttn(), examples::reluAttn(),
        examples::retention()}) {
    INFO(Def.name);
    CompiledDefinition Written = compile(Def);
    REQUIRE_FALSE(Written.Graph->decls().BackwardDerived);
    CompiledDefinition Derived = withDerivedBackward(Written);
    REQUIRE(Derived.Graph->getFunction("backward"));
    CHECK(Derived.Graph->decls().BackwardDerived);
    CHECK(Derived.Graph->decls().HasBackward);
    // kBackwardUsesDoosum follows the derived function as it follows a
    // written one.
    CHECK(Derived.Info.BackwardUsesDoosum == Written.Info.BackwardUsesDoosum);
    for (auto [Sq, Skv] : {std::pair{9, 9}, std::pair{5, 12}}) {
      std::mt19937_64 Rng(Sq * 100 + Skv);
      reference::AttentionInputs In =
          testdefs::randomInputs(Written, Rng, 2, 4, 2, Sq, Skv, 5, 3);
      In.MaskedRows.assign(Sq, false);
      In.MaskedRows[1] = true;
      reference::Tensor DO = reference::Tensor::normal({2, 4, Sq, 3}, Rng);
      reference::AttentionGrads A =
          reference::attentionBackward(Written, In, DO);
      reference::AttentionGrads B =
          reference::attentionBackward(Derived, In, DO);
      CHECK(relError(B.DQ, A.DQ) < 1e-12);
      CHECK(relError(B.DK, A.DK) < 1e-12);
      CHECK(relError(B.DV, A.DV) < 1e-12);
    }
  }
}

TEST_CASE("derived backward: softmax's is P*(dP - doosum), sigmoid's and "
          "relu's are dP",
          "[autodiff][backward]") {
  CompiledDefinition Mha = withDerivedBackward(compile(examples::mha()));
  const ir::Node *D = Mha.Graph->getFunction("backward")->result("dscores");
  // mul(p, sub(dp, doosum)), in either operand order.
  REQUIRE(D->getKind() == ir::NodeKind::Mul);
  const ir::Node *P = D->operand(0), *Diff = D->operand(1);
  if (P->getKind() != ir::NodeKind::Param)
    std::swap(P, Diff);
  auto IsParam = [](const ir::Node *N, ir::ParamKind K) {
    auto *Prm = llvm::dyn_cast<ir::ParamNode>(N);
    return Prm && Prm->getParamKind() == K;
  };
  CHECK(IsParam(P, ir::ParamKind::Probs));
  REQUIRE(Diff->getKind() == ir::NodeKind::Sub);
  CHECK(IsParam(Diff->operand(0), ir::ParamKind::GradProbs));
  CHECK(IsParam(Diff->operand(1), ir::ParamKind::Doosum));
  CHECK(Mha.Info.BackwardUsesDoosum);

  for (const dsl::AttentionDef &Def :
       {examples::sigmoidAttn(), examples::reluAttn()}) {
    INFO(Def.name);
    CompiledDefinition C = withDerivedBackward(compile(Def));
    const ir::Node *R = C.Graph->getFunction("backward")->result("dscores");
    CHECK(IsParam(R, ir::ParamKind::GradProbs));
    CHECK_FALSE(C.Info.BackwardUsesDoosum);
  }
  // Retention's normaliser depends on the scores where it is not clamped.
  CHECK(withDerivedBackward(compile(examples::retention()))
            .Info.BackwardUsesDoosum);
}

TEST_CASE("derived backward: the generated Variant has it, with "
          "kBackwardUsesDoosum",
          "[autodiff][backward][codegen]") {
  dsl::AttentionDef Def = testdefs::softmaxDef(
      "softmax_no_bwd", std::make_shared<testdefs::OnlineSoftmax>(
                            true, testdefs::SoftmaxBackward::None));
  CompiledDefinition C = compile(Def);
  REQUIRE(C.Graph->decls().BackwardDerived);
  CHECK_THAT(ir::toText(*C.Graph), Contains("\n  backward derived\n"));
  std::string Src = codegen::generateForward(C, codegen::KernelSpec()).Source;
  CHECK_THAT(Src, Contains("static constexpr bool kHasBackward = true;"));
  CHECK_THAT(Src, Contains("static constexpr bool kBackwardUsesDoosum = true;"));
  CHECK_THAT(Src, Contains("float backward(const Inputs &in, float dp, float "
                           "p, const float *finals, float doosum"));
  CHECK_THAT(Src, Contains("(dp - doosum)"));
}

TEST_CASE("derived backward: online functions without one pass the "
          "finite-difference check",
          "[autodiff][backward]") {
  struct Case {
    const char *Name;
    std::shared_ptr<const dsl::OnlineFunc> OF;
    bool UsesDoosum;
  };
  const Case Cases[] = {
      {"softmax_lse", std::make_shared<testdefs::OnlineSoftmax>(
                          true, testdefs::SoftmaxBackward::None),
       true},
      {"softmax_m_r", autodifftest::softmaxMR(), true},
      {"exp_minus_max", autodifftest::expMinusMax(), true},
      {"l2_normalised", autodifftest::l2Normalised(), true},
  };
  for (const Case &K : Cases) {
    INFO(K.Name);
    CompiledDefinition C = compile(autodifftest::defWith(K.Name, K.OF));
    INFO(C.Graph->decls().BackwardUnavailable);
    REQUIRE(C.Graph->getFunction("backward"));
    CHECK(C.Graph->decls().BackwardDerived);
    CHECK(C.Info.BackwardUsesDoosum == K.UsesDoosum);
    reference::CheckReport R = reference::check(C);
    INFO(reportText(R));
    CHECK(R.passed());
    const reference::CheckRow *Row =
        findRow(R, "derived backward vs finite differences");
    REQUIRE(Row);
    CHECK_FALSE(Row->Skipped);
    CHECK(Row->MaxError < 1e-6);
  }
}

TEST_CASE("derived backward: the softmax with finals m and r has no term "
          "from the max",
          "[autodiff][backward]") {
  // m is a stabiliser: P = exp(s − m)/Σ exp(s − m) ignores it, so its
  // gradient terms are left out, not built to cancel in floating point.
  CompiledDefinition C =
      compile(autodifftest::defWith("softmax_m_r", autodifftest::softmaxMR()));
  const ir::Node *D = C.Graph->getFunction("backward")->result("dscores");
  std::string Text = ir::shortExpr(D);
  INFO(Text);
  for (const ir::ParamNode *P : ir::reachableParams({D}))
    CHECK(P->getName() != "m");
  CHECK(Text.find("==") == std::string::npos);
}

TEST_CASE("derived backward: a written backward that is wrong disagrees "
          "with the derived one in attnc check",
          "[autodiff][backward]") {
  // dp * p forgets the normaliser: the finite-difference row and the
  // derived-vs-written row both fail.
  CompiledDefinition C = compile(testdefs::softmaxDef(
      "softmax_wrong", std::make_shared<testdefs::OnlineSoftmax>(
                           true, testdefs::SoftmaxBackward::NoDoosum)));
  reference::CheckReport R = reference::check(C);
  INFO(reportText(R));
  const reference::CheckRow *Row =
      findRow(R, "derived backward vs written backward");
  REQUIRE(Row);
  CHECK_FALSE(Row->Skipped);
  CHECK_FALSE(Row->passed());
  CHECK_FALSE(R.passed());
}

TEST_CASE("derived backward: an online function it cannot differentiate "
          "gives a UserError saying what to write",
          "[autodiff][backward][errors]") {
  struct Case {
    const char *Name;
    std::shared_ptr<const dsl::OnlineFunc> OF;
    std::vector<std::string> Says;
  };
  const Case Cases[] = {
      {"sigmoid_minus_max", autodifftest::sigmoidMinusMax(),
       {"sigmoid_minus_max: cannot derive backward: final rowscale 'm'",
        "is not a per-row multiple of forward", "doosum"}},
      {"abs_forward", autodifftest::absForward(),
       {"abs_forward: cannot derive backward: forward `abs(scores)`",
        "cannot be solved for the score from P"}},
      {"constant_forward", autodifftest::constantForward(),
       {"constant_forward: cannot derive backward: forward",
        "does not depend on the scores"}},
      {"variance", autodifftest::varianceNormalised(),
       {"variance: cannot derive backward: final rowscale 'v'",
        "cannot be recovered from the final rowscales"}},
  };
  for (const Case &K : Cases) {
    INFO(K.Name);
    // The pass records the reason; the forward still compiles.
    CompiledDefinition C;
    REQUIRE_NOTHROW(C = compile(autodifftest::defWith(K.Name, K.OF, false)));
    CHECK(C.Graph->getFunction("backward") == nullptr);
    CHECK_FALSE(C.Graph->decls().HasBackward);
    const std::string &Why = C.Graph->decls().BackwardUnavailable;
    INFO(Why);
    for (const std::string &S : K.Says)
      CHECK_THAT(Why, Contains(S));
    CHECK_THAT(Why, Contains("; write OnlineFunc::backward"));
    // Asking for the backward raises it.
    CHECK_THROWS_AS(transforms::requireBackward(*C.Graph), UserError);
    std::mt19937_64 Rng(5);
    reference::AttentionInputs In =
        testdefs::randomInputs(C, Rng, 1, 1, 1, 3, 3, 2, 2);
    CHECK_THROWS_WITH(
        reference::attentionBackward(C, In, reference::Tensor({1, 1, 3, 2})),
        Contains(Why));
    // So does generating the backward kernel.
    codegen::KernelSpec Spec;
    Spec.HeadDim = Spec.HeadDimV = 64;
    CHECK_THROWS_WITH(codegen::generateBackward(C, Spec), Contains(Why));
    // attnc check fails the backward row with the reason.
    reference::CheckReport R = reference::check(C);
    CHECK_FALSE(R.passed());
    CHECK_THAT(reportText(R), Contains("FAIL (" + Why + ")"));
  }
  // deriveBackward itself throws the same UserError.
  std::unique_ptr<ir::Graph> G =
      dsl::trace(autodifftest::defWith("again", autodifftest::absForward()));
  transforms::addScoreModGradients(*G);
  CHECK_THROWS_AS(transforms::deriveBackward(*G), UserError);
}
