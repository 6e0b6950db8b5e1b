// The definition's own combine (OnlineFunc::combine): how it is traced into
// IR, the merge the analysis then reports, its double-precision meaning on
// states and on results, and the errors a bad combine gives.
#include "ExampleRegistry.h"
#include "TestDefs.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/analysis/Merge.h"
#include "attn/ir/Printer.h"
#include "attn/ir/Walk.h"

#include <catch2/catch.hpp>

#include <functional>

using namespace attn;
using analysis::MergeKind;
using dsl::Rowscales;
using dsl::SymbolScalar;
using testdefs::UserCombine;

namespace {

CompiledDefinition compileWith(std::shared_ptr<const dsl::OnlineFunc> F) {
  return compile(testdefs::softmaxDef("combine_case", std::move(F)));
}

using CombineFn = std::function<std::optional<dsl::CombineResult>(
    const Rowscales &, const Rowscales &, const dsl::OnlineFunc &)>;

/// retention's online function with a combine given as a lambda, for the
/// errors of a bad one.
class AbsNormWith final : public dsl::OnlineFunc {
public:
  explicit AbsNormWith(CombineFn C)
      : OnlineFunc({{"r_raw", dsl::Var(0.0)}, {"r", dsl::Var(0.0)}}, {}),
        C(std::move(C)) {}
  dsl::OnlineFwdResult online_fwd(SymbolScalar s, const Rowscales &rs,
                                  SymbolScalar, SymbolScalar,
                                  SymbolScalar) const override {
    SymbolScalar r_raw = rs["r_raw"] + s.get_reduce("abssum");
    SymbolScalar r_new = r_raw.max(1.0);
    SymbolScalar o_scale = rs["r"] / r_new;
    return {s / r_new, {{"r_raw", r_raw}, {"r", r_new}}, o_scale};
  }
  dsl::EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &,
                                          SymbolScalar, SymbolScalar,
                                          SymbolScalar) const override {
    return {o, {}};
  }
  SymbolScalar forward(SymbolScalar s, const Rowscales &, SymbolScalar,
                       SymbolScalar, SymbolScalar,
                       SymbolScalar) const override {
    return s;
  }
  std::optional<dsl::CombineResult>
  combine(const Rowscales &a, const Rowscales &b) const override {
    return C(a, b, *this);
  }

private:
  CombineFn C;
};

std::string errorOf(CombineFn C) {
  dsl::AttentionDef Def("bad_combine");
  Def.inputs.declare("x", ir::InputShape::Scalar);
  Def.online_func = std::make_shared<AbsNormWith>(std::move(C));
  try {
    compile(Def);
  } catch (const UserError &E) {
    return E.what();
  }
  return "no error";
}

} // namespace

TEST_CASE("combine: traced into its own IR function", "[merge][combine]") {
  CompiledDefinition C =
      compile(testsupport::registry().get("retention_combine"));
  const ir::Function *F = C.Graph->getFunction("combine");
  REQUIRE(F);
  std::vector<std::string> Names;
  for (const ir::Result &R : F->Results)
    Names.push_back(R.Name);
  CHECK(Names == std::vector<std::string>{"r_raw", "r", "o_scale_a",
                                          "o_scale_b"});
  // State b's rowscales are parameters of their own kind: the merged r
  // reads both states, each o_scale both (a's or b's r over the merged r).
  for (const char *R : {"r_raw", "r", "o_scale_a", "o_scale_b"}) {
    INFO(R);
    CHECK(ir::dependsOn(F->result(R), ir::ParamKind::Rowscale));
    CHECK(ir::dependsOn(F->result(R), ir::ParamKind::OtherRowscale));
  }
  CHECK(ir::shortExpr(F->result("r_raw")) == "r_raw + r_raw");
  // Without a combine there is no function (retention).
  CHECK_FALSE(compile(testsupport::registry().get("retention"))
                  .Graph->getFunction("combine"));
}

TEST_CASE("combine: used where no merge is derived, and said so",
          "[merge][combine]") {
  analysis::MergeInfo M = analysis::analyzeMerge(
      *compile(testsupport::registry().get("retention_combine")).Graph);
  CHECK(M.Kind == MergeKind::Combine);
  CHECK(M.CombineGraph);
  CHECK_FALSE(M.CombineUnused);
  CHECK_THAT(M.str(),
             Catch::StartsWith("combine (the definition's own; derived: "
                               "none, o_scale `") &&
                 Catch::Contains("is neither the constant 1"));
}

TEST_CASE("combine: a derived merge is preferred; the combine is still "
          "there to check",
          "[merge][combine]") {
  CompiledDefinition C = compileWith(
      std::make_shared<testdefs::OnlineSoftmaxCombine>(UserCombine::Exact));
  analysis::MergeInfo M = analysis::analyzeMerge(*C.Graph);
  CHECK(M.Kind == MergeKind::LogSumExp);
  CHECK(M.CombineUnused);
  CHECK(M.str() ==
        "log-sum-exp (derived; the definition's combine is checked, not used)");
  CHECK(analysis::userCombine(*C.Graph).Kind == MergeKind::Combine);
  CompiledDefinition Plain = compileWith(
      std::make_shared<testdefs::OnlineSoftmaxCombine>(UserCombine::None));
  CHECK(analysis::analyzeMerge(*Plain.Graph).str() == "log-sum-exp");
  CHECK(analysis::userCombine(*Plain.Graph).Kind == MergeKind::None);
}

TEST_CASE("combine: its fp64 meaning on two states", "[merge][combine]") {
  CompiledDefinition C =
      compile(testsupport::registry().get("retention_combine"));
  analysis::MergeInfo M = analysis::analyzeMerge(*C.Graph);
  // Rowscales in declaration order: r_raw, r.
  analysis::MergeState A{{2.0, 2.0}, {1.0, 2.0}, true};
  analysis::MergeState B{{0.5, 1.0}, {4.0, 6.0}, true};
  analysis::mergeStates(M, A, B);
  CHECK(A.Rowscales == std::vector<double>{2.5, 2.5});
  CHECK(A.O[0] == Approx(2.0 / 2.5 * 1.0 + 1.0 / 2.5 * 4.0));
  CHECK(A.O[1] == Approx(2.0 / 2.5 * 2.0 + 1.0 / 2.5 * 6.0));
  // An empty part (no unmasked key) is the identity either side.
  analysis::MergeState Empty{{0.0, 0.0}, {0.0, 0.0}, false};
  analysis::MergeState Keep = A;
  analysis::mergeStates(M, A, Empty);
  CHECK(A.O == Keep.O);
  analysis::mergeStates(M, Empty, A);
  CHECK(Empty.O == Keep.O);
  CHECK(Empty.Rowscales == Keep.Rowscales);
  // A Combine without its graph is an internal error, not a crash.
  analysis::MergeInfo Lost;
  Lost.Kind = MergeKind::Combine;
  analysis::MergeState X{{1.0, 1.0}, {1.0}, true};
  CHECK_THROWS_AS(analysis::mergeStates(Lost, X, X), InternalError);
}

TEST_CASE("combine: results whose epilogue returns the state merge by it",
          "[merge][combine]") {
  CompiledDefinition C =
      compile(testsupport::registry().get("retention_combine"));
  analysis::ResultMergeInfo R = analysis::analyzeResultMerge(*C.Graph);
  REQUIRE(R.Kind == MergeKind::Combine);
  // Finals are declared r, r_raw; online rowscales r_raw, r.
  CHECK(R.FinalOfRowscale == std::vector<int>{1, 0});
  analysis::ResultState A{{1.0, 2.0}, {2.0, 2.0}};
  analysis::mergeResults(R, A, {{4.0, 6.0}, {1.0, 0.5}});
  CHECK(A.Finals == std::vector<double>{2.5, 2.5});
  CHECK(A.O[0] == Approx(2.0 / 2.5 * 1.0 + 1.0 / 2.5 * 4.0));
  // retention itself has none, and says why.
  analysis::ResultMergeInfo N = analysis::analyzeResultMerge(
      *compile(testsupport::registry().get("retention")).Graph);
  CHECK(N.Kind == MergeKind::None);
  // The test definition's epilogue returns the state as well.
  CompiledDefinition S = compileWith(
      std::make_shared<testdefs::OnlineAbsNorm>(UserCombine::Exact));
  CHECK(analysis::analyzeResultMerge(*S.Graph).Kind == MergeKind::Combine);
}

TEST_CASE("combine: errors name the function and the fix", "[merge][combine]") {
  CHECK(errorOf([](const Rowscales &a, const Rowscales &b,
                   const dsl::OnlineFunc &F) {
          return dsl::CombineResult{
              {{"r_raw", a["r_raw"] + F.inputs()["x"]}, {"r", b["r"]}},
              1.0,
              1.0};
        }) == "combine: custom input 'x' cannot be read here; combine sees "
              "only its arguments");
  CHECK(errorOf([](const Rowscales &a, const Rowscales &,
                   const dsl::OnlineFunc &) {
          return dsl::CombineResult{{{"r_raw", a["r_raw"]}}, 1.0, 1.0};
        }) == "combine: rowscale 'r' is never produced; return it in the "
              "rowscales");
  CHECK(errorOf([](const Rowscales &a, const Rowscales &,
                   const dsl::OnlineFunc &) {
          return dsl::CombineResult{
              {{"r_raw", a["r_raw"]}, {"r", a["r"]}, {"m", a["r"]}},
              1.0,
              1.0};
        }) == "combine: returns unknown rowscale 'm'; declared: r_raw, r");
  CHECK_THAT(errorOf([](const Rowscales &a, const Rowscales &,
                        const dsl::OnlineFunc &) {
               return dsl::CombineResult{{{"r_raw", a["nope"]}, {"r", a["r"]}},
                                         1.0, 1.0};
             }),
             Catch::StartsWith("combine: unknown rowscale of state a 'nope'"));
  CHECK_THAT(errorOf([](const Rowscales &a, const Rowscales &,
                        const dsl::OnlineFunc &F) {
               return dsl::CombineResult{
                   {{"r_raw", a["r_raw"]}, {"r", a["r"]}},
                   F.inputs().head_dim().to_float(),
                   1.0};
             }),
             Catch::StartsWith("combine: uses 'D' (headdim), which is not an "
                               "argument of combine"));
  CHECK(errorOf([](const Rowscales &a, const Rowscales &,
                   const dsl::OnlineFunc &) {
          SymbolScalar Empty;
          return dsl::CombineResult{{{"r_raw", a["r_raw"]}, {"r", a["r"]}},
                                    Empty, 1.0};
        }) == "combine: result 'o_scale_a' is an empty SymbolScalar (never "
              "assigned)");
}
