// The merge derivation: each example's classification, the reasons a
// near-miss of each form gives, and the double-precision merge rule.
#include "ExampleRegistry.h"
#include "TestDefs.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/analysis/Merge.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>

using namespace attn;
using analysis::MergeKind;
using dsl::Rowscales;
using dsl::SymbolScalar;

namespace {

using FwdFn = std::function<dsl::OnlineFwdResult(SymbolScalar,
                                                 const Rowscales &)>;

/// An online function given by its online_fwd alone (the epilogue passes o
/// through and keeps no finals): enough for the merge, which reads only
/// online_fwd and the rowscales' initial values.
class OnlineOf final : public dsl::OnlineFunc {
public:
  OnlineOf(std::vector<std::pair<std::string, dsl::Var>> Rs, FwdFn Fwd)
      : OnlineFunc(std::move(Rs), {}), Fwd(std::move(Fwd)) {}
  dsl::OnlineFwdResult online_fwd(SymbolScalar s, const Rowscales &rs,
                                  SymbolScalar, SymbolScalar,
                                  SymbolScalar) const override {
    return Fwd(s, rs);
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

private:
  FwdFn Fwd;
};

analysis::MergeInfo mergeOf(std::shared_ptr<const dsl::OnlineFunc> F) {
  dsl::AttentionDef Def("merge_case");
  Def.score_mod = [](SymbolScalar s, const dsl::CustomInputs &, SymbolScalar,
                     SymbolScalar, SymbolScalar, SymbolScalar) { return s; };
  Def.online_func = std::move(F);
  return analysis::analyzeMerge(*compile(Def).Graph);
}

analysis::MergeInfo mergeOf(std::vector<std::pair<std::string, dsl::Var>> Rs,
                            FwdFn Fwd) {
  return mergeOf(std::make_shared<OnlineOf>(std::move(Rs), std::move(Fwd)));
}

} // namespace

TEST_CASE("merge: each example's form", "[merge]") {
  struct Expect {
    const char *Name;
    MergeKind Kind;
  };
  const Expect All[] = {
      {"mha", MergeKind::LogSumExp},
      {"sigmoid_attn", MergeKind::Sum},
      {"relu_attn", MergeKind::Sum},
      {"retention", MergeKind::None},
      {"retention_combine", MergeKind::Combine},
      {"mha_prefix_lm", MergeKind::LogSumExp},
      {"mha_sliding_window", MergeKind::LogSumExp},
      {"mha_document", MergeKind::LogSumExp},
      {"alibi_learnable", MergeKind::LogSumExp},
      {"softcap_learnable", MergeKind::LogSumExp},
      {"mha_document_ids", MergeKind::LogSumExp},
      {"mha_chunked", MergeKind::LogSumExp},
  };
  size_t Transformers = 0;
  for (const dsl::DefinitionBase *D : testsupport::registry().all())
    Transformers += D->kind() == ir::DefinitionKind::Transformer;
  // A new transformer example must say here what its merge is.
  CHECK(Transformers == std::size(All));
  for (const Expect &E : All) {
    INFO(E.Name);
    analysis::MergeInfo M = analysis::analyzeMerge(
        *compile(testsupport::registry().get(E.Name)).Graph);
    CHECK(M.Kind == E.Kind);
    // A combine keeps the reason none was derived, for `attnc show`.
    CHECK(M.Reason.empty() == (E.Kind == MergeKind::Sum ||
                               E.Kind == MergeKind::LogSumExp));
    CHECK((M.MaxRowscale == 0) == (E.Kind == MergeKind::LogSumExp));
  }
  analysis::MergeInfo R = analysis::analyzeMerge(
      *compile(testsupport::registry().get("retention")).Graph);
  CHECK_THAT(R.str(), Catch::StartsWith("none (o_scale `") &&
                          Catch::Contains("is neither the constant 1"));
  analysis::MergeInfo L = analysis::analyzeMerge(
      *compile(testsupport::registry().get("mamba2")).Graph);
  CHECK(L.Kind == MergeKind::None);
  CHECK(L.Reason == "linear attention has no online states to merge");
}

TEST_CASE("merge: a sum of reductions, with abssum", "[merge]") {
  analysis::MergeInfo M =
      mergeOf({{"a", dsl::Var(0.0)}, {"b", dsl::Var(0.0)}},
              [](SymbolScalar s, const Rowscales &rs) -> dsl::OnlineFwdResult {
                return {s.tanh(),
                        {{"a", rs["a"] + s.get_reduce("abssum")},
                         {"b", s.exp().get_reduce("sum") + rs["b"]}},
                        1.0};
              });
  CHECK(M.Kind == MergeKind::Sum);
  CHECK(M.str() == "sum");
}

TEST_CASE("merge: the max rowscale found by name", "[merge]") {
  // The running max declared second: its index is what the kernels read.
  analysis::MergeInfo M = mergeOf(
      {{"r", dsl::Var(0.0)}, {"m", dsl::Var("-inf")}},
      [](SymbolScalar s, const Rowscales &rs) -> dsl::OnlineFwdResult {
        SymbolScalar m = rs["m"].max(s.get_reduce("max"));
        SymbolScalar sc = (rs["m"] - m).exp();
        SymbolScalar p = (s - m).exp();
        return {p, {{"r", rs["r"] * sc + p.get_reduce("sum")}, {"m", m}}, sc};
      });
  CHECK(M.Kind == MergeKind::LogSumExp);
  CHECK(M.MaxRowscale == 1);
}

TEST_CASE("merge: near misses say why", "[merge]") {
  auto Why = [](analysis::MergeInfo M) {
    CHECK(M.Kind == MergeKind::None);
    CHECK(M.MaxRowscale == -1);
    return M.Reason;
  };
  // Sum with a rowscale that does not start at 0.
  CHECK(Why(mergeOf({{"r", dsl::Var(1.0)}},
                    [](SymbolScalar s, const Rowscales &rs)
                        -> dsl::OnlineFwdResult {
                      return {s, {{"r", rs["r"] + s.get_reduce("sum")}}, 1.0};
                    })) ==
        "rowscale 'r' starts at 1, not 0: adding two parts would count it "
        "twice");
  // o_scale 1 but P scaled by a rowscale.
  CHECK_THAT(Why(mergeOf({{"r", dsl::Var(0.0)}},
                         [](SymbolScalar s, const Rowscales &rs)
                             -> dsl::OnlineFwdResult {
                           return {s * rs["r"],
                                   {{"r", rs["r"] + s.get_reduce("sum")}},
                                   1.0};
                         })),
             Catch::StartsWith("o_scale is 1 but P `") &&
                 Catch::EndsWith("reads a rowscale, so a part's P depends on "
                                 "the keys before it"));
  // o_scale 1 and a running max: not a sum.
  CHECK_THAT(Why(mergeOf({{"m", dsl::Var(0.0)}},
                         [](SymbolScalar s, const Rowscales &rs)
                             -> dsl::OnlineFwdResult {
                           return {s, {{"m", rs["m"].max(s.get_reduce("max"))}},
                                   1.0};
                         })),
             Catch::StartsWith("o_scale is 1 but the new rowscale 'm' `") &&
                 Catch::EndsWith("is not 'm' plus a sum over the keys of "
                                 "values free of rowscales"));
  // The softmax that forgets to rescale its running sum.
  CHECK_THAT(Why(mergeOf(std::make_shared<testdefs::OnlineSoftmax>(
                 /*RescaleSum=*/false))),
             Catch::StartsWith("the new rowscale 'r' `") &&
                 Catch::EndsWith("is not r·o_scale + get_reduce(\"sum\") of P "
                                 "or of exp(s - m_new)"));
  // A running max that starts at 0.
  CHECK(Why(mergeOf({{"m", dsl::Var(0.0)}},
                    [](SymbolScalar s, const Rowscales &rs)
                        -> dsl::OnlineFwdResult {
                      SymbolScalar m = rs["m"].max(s.get_reduce("max"));
                      SymbolScalar sc = (rs["m"] - m).exp();
                      return {(s - m).exp(), {{"m", m}}, sc};
                    })) == "the running max 'm' starts at 0, not -inf");
  // P not exp(s - m_new): its own max.
  CHECK_THAT(Why(mergeOf({{"m", dsl::Var("-inf")}},
                         [](SymbolScalar s, const Rowscales &rs)
                             -> dsl::OnlineFwdResult {
                           SymbolScalar m = rs["m"].max(s.get_reduce("max"));
                           SymbolScalar sc = (rs["m"] - m).exp();
                           return {(s - rs["m"]).exp(), {{"m", m}}, sc};
                         })),
             Catch::StartsWith("P `") &&
                 Catch::EndsWith("is not exp(s - m_new) of values s free of "
                                 "rowscales"));
  // exp of something else.
  CHECK_THAT(Why(mergeOf({{"m", dsl::Var("-inf")}},
                         [](SymbolScalar s, const Rowscales &rs)
                             -> dsl::OnlineFwdResult {
                           SymbolScalar m = rs["m"].max(s.get_reduce("max"));
                           return {(s - m).exp(), {{"m", m}},
                                   (m - rs["m"]).exp()};
                         })),
             Catch::StartsWith("o_scale `") &&
                 Catch::EndsWith("is exp of a difference that does not start "
                                 "with a rowscale"));
}

TEST_CASE("merge: the double-precision rule", "[merge]") {
  analysis::MergeInfo Lse;
  Lse.Kind = MergeKind::LogSumExp;
  Lse.MaxRowscale = 0;
  // Two parts of one row: m, r and o relative to each part's max.
  analysis::MergeState A{{1.0, 2.0}, {4.0, -2.0}, true};
  analysis::MergeState B{{3.0, 0.5}, {1.0, 1.0}, true};
  analysis::mergeStates(Lse, A, B);
  double FA = std::exp(1.0 - 3.0);
  CHECK(A.Rowscales[0] == 3.0);
  CHECK(A.Rowscales[1] == Approx(2.0 * FA + 0.5));
  CHECK(A.O[0] == Approx(4.0 * FA + 1.0));
  CHECK(A.O[1] == Approx(-2.0 * FA + 1.0));
  // A part with no unmasked key is the identity, on either side.
  analysis::MergeState Empty{{-INFINITY, 0.0}, {0.0, 0.0}, false};
  analysis::MergeState Before = A;
  analysis::mergeStates(Lse, A, Empty);
  CHECK(A.O == Before.O);
  analysis::mergeStates(Lse, Empty, A);
  CHECK(Empty.O == A.O);
  CHECK(Empty.Seen);

  analysis::MergeInfo Sum;
  Sum.Kind = MergeKind::Sum;
  analysis::MergeState C{{1.0}, {1.0, 2.0}, true};
  analysis::mergeStates(Sum, C, analysis::MergeState{{2.0}, {3.0, 5.0}, true});
  CHECK(C.Rowscales[0] == 3.0);
  CHECK(C.O == std::vector<double>{4.0, 7.0});

  CHECK_THROWS_AS(analysis::mergeStates(analysis::MergeInfo{}, C, C),
                  InternalError);
}
