// reference::check passes the examples and catches wrong definitions.
#include "ExampleRegistry.h"
#include "TestDefs.h"

#include "Examples.h"

#include "attn/reference/Checker.h"

#include "llvm/ADT/StringRef.h"

#include <catch2/catch.hpp>

#include <functional>

using namespace attn;
using attn::testdefs::OnlineSoftmax;
using attn::testdefs::SoftmaxBackward;
using dsl::Rowscales;
using dsl::SymbolScalar;

using attn::testsupport::exampleNames;
using attn::testsupport::registry;

namespace {

size_t countRows(const reference::CheckReport &R, llvm::StringRef Prefix) {
  size_t N = 0;
  for (const reference::CheckRow &Row : R.Rows)
    N += llvm::StringRef(Row.Name).startswith(Prefix);
  return N;
}

/// True when some row starting with \p Prefix fails (and is not skipped).
bool someRowFails(const reference::CheckReport &R, llvm::StringRef Prefix) {
  for (const reference::CheckRow &Row : R.Rows)
    if (llvm::StringRef(Row.Name).startswith(Prefix) && !Row.Skipped &&
        !Row.passed())
      return true;
  return false;
}

std::string reportText(const reference::CheckReport &R) {
  std::string S;
  llvm::raw_string_ostream OS(S);
  reference::printReport(R, OS);
  return OS.str();
}

using BackwardFn = std::function<SymbolScalar(
    SymbolScalar dp, SymbolScalar p, const Rowscales &fr, SymbolScalar doosum)>;

/// Another online function with its backward replaced: the forward stays
/// right, so only the finite-difference row can notice.
class ReplaceBackward final : public dsl::OnlineFunc {
public:
  ReplaceBackward(std::shared_ptr<const dsl::OnlineFunc> Inner, BackwardFn Bwd)
      : OnlineFunc(Inner->onlineRowscales(), Inner->finalRowscales()),
        Inner(std::move(Inner)), Bwd(std::move(Bwd)) {}
  dsl::OnlineFwdResult online_fwd(SymbolScalar s, const Rowscales &rs,
                                  SymbolScalar b, SymbolScalar h,
                                  SymbolScalar q) const override {
    return Inner->online_fwd(s, rs, b, h, q);
  }
  dsl::EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &rs,
                                          SymbolScalar b, SymbolScalar h,
                                          SymbolScalar q) const override {
    return Inner->online_fwd_epilogue(o, rs, b, h, q);
  }
  SymbolScalar forward(SymbolScalar s, const Rowscales &fr, SymbolScalar b,
                       SymbolScalar h, SymbolScalar q,
                       SymbolScalar kv) const override {
    return Inner->forward(s, fr, b, h, q, kv);
  }
  std::optional<SymbolScalar> backward(SymbolScalar dp, SymbolScalar p,
                                       const Rowscales &fr, SymbolScalar doosum,
                                       SymbolScalar, SymbolScalar, SymbolScalar,
                                       SymbolScalar) const override {
    return Bwd(dp, p, fr, doosum);
  }

private:
  std::shared_ptr<const dsl::OnlineFunc> Inner;
  BackwardFn Bwd;
};

dsl::AttentionDef withBackward(dsl::AttentionDef Def, BackwardFn Bwd) {
  Def.online_func = std::make_shared<ReplaceBackward>(Def.online_func, Bwd);
  return Def;
}

} // namespace

TEST_CASE("check passes every example with the expected rows", "[checker]") {
  std::string Name = GENERATE(from_range(exampleNames()));
  INFO(Name);
  const dsl::DefinitionBase &Def = registry().get(Name);
  CompiledDefinition C = compile(Def);
  reference::CheckReport R = reference::check(C);
  INFO(reportText(R));
  CHECK(R.Definition == Name);
  CHECK(R.passed());
  for (const reference::CheckRow &Row : R.Rows) {
    CHECK_FALSE(Row.Skipped);
    CHECK(Row.MaxError <= Row.Tolerance);
  }
  if (Def.kind() == ir::DefinitionKind::Transformer) {
    // Three shapes, four block sizes each, each shape's mask statistics
    // when there is a mask; masked rows in the first shape; the real head
    // dims; score_mod's derivatives; a written backward, which the derived
    // one must match, or a derived one and (the learnable examples) the
    // gradients of the inputs that require them.
    bool Derived = C.Graph->decls().BackwardDerived;
    bool Learnable = Name == "alibi_learnable" || Name == "softcap_learnable";
    bool Masked = C.Graph->decls().HasMask;
    bool Combine = C.Graph->getFunction("combine") != nullptr;
    CHECK(Combine == (Name == "retention_combine"));
    CHECK(Derived == (Learnable || Name == "mha_document_ids"));
    CHECK(R.Rows.size() ==
          16 + (!Derived || Learnable) + 3 * Masked + 3 * Combine);
    CHECK(countRows(R, "combine: random splits of the keys merged vs "
                       "unsplit, ") == 3 * Combine);
    CHECK(countRows(R, "mask exercised, ") == 3 * Masked);
    CHECK(countRows(R, "head dims 64, 128, 192, 256: ") == 1);
    CHECK(countRows(R, "score_mod derivatives vs finite differences") == 1);
    CHECK(countRows(R, "derived backward vs written backward") == !Derived);
    CHECK(countRows(R, "input gradients vs finite differences") == Learnable);
    CHECK(countRows(R, "online (block ") == 12);
    for (const char *B : {"online (block 1) ", "online (block 3) ",
                          "online (block 4) ", "online (block 16) "})
      CHECK(countRows(R, B) == 3);
    CHECK(countRows(R, "fully masked rows: o = 0, finals = -inf") == 1);
    CHECK(countRows(R, Derived ? "derived backward vs finite differences"
                               : "backward vs finite differences") == 1);
  } else {
    // Three shapes, with and without an initial state, four chunk sizes.
    CHECK(R.Rows.size() == 24);
    CHECK(countRows(R, "chunked (chunk ") == 24);
    size_t WithState = 0;
    for (const reference::CheckRow &Row : R.Rows)
      WithState += llvm::StringRef(Row.Name).endswith(", initial state");
    CHECK(WithState == 12);
  }
}

TEST_CASE("check catches an online softmax that forgets to rescale the sum",
          "[checker][wrong]") {
  dsl::AttentionDef Def = testdefs::softmaxDef(
      "softmax_no_rescale", std::make_shared<OnlineSoftmax>(false));
  reference::CheckReport R = reference::check(compile(Def));
  INFO(reportText(R));
  CHECK_FALSE(R.passed());
  CHECK(someRowFails(R, "online (block 1) "));
  CHECK(reportText(R).find("FAIL") != std::string::npos);
  CHECK(reportText(R).find("CHECK FAILED") != std::string::npos);
  // One block of all keys never rescales, so the direct definition (and the
  // backward, computed from it) are still right.
  CHECK_FALSE(someRowFails(R, "backward vs finite differences"));

  // The same definition with the rescale passes: the failure is the bug's.
  dsl::AttentionDef Good =
      testdefs::softmaxDef("softmax", std::make_shared<OnlineSoftmax>());
  CHECK(reference::check(compile(Good)).passed());
}

TEST_CASE("check catches a softmax backward without doosum",
          "[checker][wrong]") {
  dsl::AttentionDef Def = testdefs::softmaxDef(
      "softmax_no_doosum",
      std::make_shared<OnlineSoftmax>(true, SoftmaxBackward::NoDoosum));
  reference::CheckReport R = reference::check(compile(Def));
  INFO(reportText(R));
  CHECK_FALSE(R.passed());
  CHECK(someRowFails(R, "backward vs finite differences"));
  CHECK_FALSE(someRowFails(R, "online (block"));
}

TEST_CASE("check catches mha's backward replaced by dp * p",
          "[checker][wrong]") {
  dsl::AttentionDef Def = withBackward(
      examples::mha(), [](SymbolScalar dp, SymbolScalar p, const Rowscales &,
                          SymbolScalar) { return dp * p; });
  reference::CheckReport R = reference::check(compile(Def));
  CHECK(someRowFails(R, "backward vs finite differences"));
  CHECK_FALSE(R.passed());
}

TEST_CASE("check catches retention's approximate backward dp / r",
          "[checker][wrong]") {
  // The seeds' approximation ignores that r = max(sum |s|, 1) depends on the
  // scores wherever the clamp is not active.
  dsl::AttentionDef Def =
      withBackward(examples::retention(),
                   [](SymbolScalar dp, SymbolScalar, const Rowscales &fr,
                      SymbolScalar) { return dp / fr["r"]; });
  reference::CheckReport R = reference::check(compile(Def));
  INFO(reportText(R));
  CHECK(someRowFails(R, "backward vs finite differences"));
  CHECK_FALSE(someRowFails(R, "online (block"));
  CHECK_FALSE(R.passed());
}

TEST_CASE("check catches a sigmoid attention whose backward doubles dp",
          "[checker][wrong]") {
  dsl::AttentionDef Def =
      withBackward(examples::sigmoidAttn(),
                   [](SymbolScalar dp, SymbolScalar, const Rowscales &,
                      SymbolScalar) { return dp * 2.0; });
  reference::CheckReport R = reference::check(compile(Def));
  CHECK(someRowFails(R, "backward vs finite differences"));
  CHECK_FALSE(R.passed());
}

TEST_CASE("a definition without backward gets a derived one, checked against "
          "finite differences",
          "[checker]") {
  dsl::AttentionDef Def = testdefs::softmaxDef(
      "softmax_fwd_only",
      std::make_shared<OnlineSoftmax>(true, SoftmaxBackward::None));
  CompiledDefinition C = compile(Def);
  REQUIRE(C.Graph->decls().BackwardDerived);
  reference::CheckReport R = reference::check(C);
  INFO(reportText(R));
  CHECK(R.passed());
  REQUIRE(countRows(R, "derived backward vs finite differences") == 1);
  const reference::CheckRow &Last = R.Rows.back();
  CHECK(llvm::StringRef(Last.Name)
            .startswith("derived backward vs finite differences"));
  CHECK_FALSE(Last.Skipped);
  // Every row ran.
  for (const reference::CheckRow &Row : R.Rows)
    CHECK_FALSE(Row.Skipped);
}

TEST_CASE("a report passes only with rows, all of them passing", "[checker]") {
  reference::CheckReport R;
  CHECK_FALSE(R.passed()); // nothing checked is not a pass
  R.Rows.push_back({"a", 1e-12, 1e-10});
  CHECK(R.passed());
  R.Rows.push_back({"b", 0.0, 0.0, /*Skipped=*/true, "why"});
  CHECK(R.passed());
  R.Rows.push_back({"c", 2e-10, 1e-10});
  CHECK_FALSE(R.passed());
  CHECK_FALSE(R.Rows.back().passed());
}

TEST_CASE("check uses the seed: a different seed gives different errors",
          "[checker]") {
  CompiledDefinition C = compile(registry().get("mha"));
  reference::CheckOptions A, B;
  B.Seed = A.Seed + 1;
  reference::CheckReport RA = reference::check(C, A),
                         RB = reference::check(C, A),
                         RC = reference::check(C, B);
  REQUIRE(RA.Rows.size() == RC.Rows.size());
  bool AnyDiffers = false;
  for (size_t I = 0; I < RA.Rows.size(); ++I) {
    CHECK(RA.Rows[I].MaxError == RB.Rows[I].MaxError); // deterministic
    AnyDiffers = AnyDiffers || RA.Rows[I].MaxError != RC.Rows[I].MaxError;
  }
  CHECK(AnyDiffers);
  CHECK(RC.passed());
}

TEST_CASE("check catches a score_mod that divides by zero at head dim 128",
          "[checker]") {
  // Fine at the small head dims of the main shapes, inf at D = 128.
  dsl::AttentionDef Def = examples::mha();
  Def.name = "bad_head_dim";
  Def.score_mod = [](SymbolScalar score, const dsl::CustomInputs &in,
                     SymbolScalar, SymbolScalar, SymbolScalar, SymbolScalar) {
    return score / (in.head_dim() - 128);
  };
  reference::CheckReport R = reference::check(compile(Def));
  INFO(reportText(R));
  CHECK_FALSE(R.passed());
  CHECK(someRowFails(R, "head dims 64, 128, 192, 256: "));
  CHECK_FALSE(someRowFails(R, "online (block "));
}

TEST_CASE("check verifies a definition's combine and catches a wrong one",
          "[checker][wrong][combine]") {
  using testdefs::UserCombine;
  auto Check = [](std::shared_ptr<const dsl::OnlineFunc> F) {
    return reference::check(compile(testdefs::softmaxDef("combine_case", F)));
  };
  // retention's normaliser: no derived merge, the combine is what decode
  // splits by. Adding the parts' o without rescaling them is wrong.
  reference::CheckReport Wrong =
      Check(std::make_shared<testdefs::OnlineAbsNorm>(UserCombine::NoRescale));
  INFO(reportText(Wrong));
  CHECK_FALSE(Wrong.passed());
  CHECK(someRowFails(Wrong, "combine: random splits of the keys merged"));
  CHECK_FALSE(someRowFails(Wrong, "online (block "));
  CHECK(reportText(Wrong).find("FAIL (the definition's combine does not give "
                               "the unsplit result") != std::string::npos);
  reference::CheckReport Good =
      Check(std::make_shared<testdefs::OnlineAbsNorm>(UserCombine::Exact));
  INFO(reportText(Good));
  CHECK(Good.passed());
  CHECK(countRows(Good, "combine: random splits") == 3);
  // A softmax whose merge is derived: its own combine is checked all the
  // same, so a wrong one fails although decode would not use it.
  reference::CheckReport Softmax = Check(
      std::make_shared<testdefs::OnlineSoftmaxCombine>(UserCombine::NoRescale));
  CHECK(someRowFails(Softmax, "combine: random splits"));
  CHECK(Check(std::make_shared<testdefs::OnlineSoftmaxCombine>(
                  UserCombine::Exact))
            .passed());
}
