// Per-token and int32 custom inputs through the frontend, the IR (printer,
// JSON, verifier), the reference and `attnc check`; and the i32/f32
// comparison rule with its explicit conversion.
#include "Examples.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/ir/Printer.h"
#include "attn/ir/Serialize.h"
#include "attn/reference/Attention.h"
#include "attn/reference/Checker.h"
#include "attn/reference/InputBinding.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <random>

using namespace attn;
using namespace attn::dsl;
using Catch::Contains;
using Catch::Equals;
using Catch::StartsWith;
using nlohmann::json;

namespace {

/// The message compiling \p Def gives (it must be refused).
std::string compileError(const DefinitionBase &Def) {
  try {
    compile(Def);
  } catch (const UserError &E) {
    return E.what();
  }
  FAIL("the definition compiled");
  return "";
}

/// mha_document_ids with its mask replaced.
AttentionDef documentWithMask(MaskMod Mask) {
  AttentionDef Def = examples::mhaDocumentIds();
  Def.name = "doc";
  Def.mask_mod = std::move(Mask);
  return Def;
}

/// The online softmax of mha_document_ids with the accumulator never
/// rescaled (o_scale = 1): right only when every row has its unmasked keys
/// in one key block.
class NoRescaleSoftmax final : public OnlineFunc {
public:
  NoRescaleSoftmax()
      : OnlineFunc({{"m", Var("-inf")}, {"r", Var(0.0)}}, {{"lse", Var(0.0)}}) {}
  OnlineFwdResult online_fwd(SymbolScalar scores, const Rowscales &rs,
                             SymbolScalar, SymbolScalar,
                             SymbolScalar) const override {
    SymbolScalar m_new = rs["m"].max(scores.get_reduce("max"));
    SymbolScalar r = rs["r"] * (rs["m"] - m_new).exp();
    scores = (scores - m_new).exp();
    return {scores, {{"m", m_new}, {"r", r + scores.get_reduce("sum")}}, 1.0};
  }
  EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &rs,
                                     SymbolScalar, SymbolScalar,
                                     SymbolScalar) const override {
    return {o / rs["r"], {{"lse", rs["r"].log() + rs["m"]}}};
  }
  SymbolScalar forward(SymbolScalar scores, const Rowscales &f, SymbolScalar,
                       SymbolScalar, SymbolScalar,
                       SymbolScalar) const override {
    return (scores - f["lse"]).exp();
  }
};

const reference::CheckRow *findRow(const reference::CheckReport &R,
                                   llvm::StringRef Prefix) {
  for (const reference::CheckRow &Row : R.Rows)
    if (llvm::StringRef(Row.Name).startswith(Prefix))
      return &Row;
  return nullptr;
}

} // namespace

TEST_CASE("input classes: head and batch dependence", "[inputs]") {
  using ir::InputShape;
  CHECK_FALSE(ir::inputVariesWithHead(InputShape::Scalar));
  CHECK_FALSE(ir::inputVariesWithHead(InputShape::PerQueryToken));
  CHECK_FALSE(ir::inputVariesWithHead(InputShape::PerKeyToken));
  for (InputShape S : {InputShape::PerHead, InputShape::PerRow,
                       InputShape::PerKey, InputShape::Full})
    CHECK(ir::inputVariesWithHead(S));
  CHECK_FALSE(ir::inputVariesWithBatch(InputShape::Scalar));
  CHECK_FALSE(ir::inputVariesWithBatch(InputShape::PerHead));
  for (InputShape S : {InputShape::PerRow, InputShape::PerKey,
                       InputShape::Full, InputShape::PerQueryToken,
                       InputShape::PerKeyToken})
    CHECK(ir::inputVariesWithBatch(S));
  CHECK(ir::inputShapeName(InputShape::PerQueryToken) == "per_query_token");
  CHECK(ir::inputShapeFromName("per_key_token") == InputShape::PerKeyToken);
  CHECK(ir::inputShapeSpace(InputShape::PerQueryToken) == ir::Space::Row);
  CHECK(ir::inputShapeSpace(InputShape::PerKeyToken) == ir::Space::Col);
  CHECK(ir::inputTypeFromName("i32") == ir::InputType::I32);
  CHECK_FALSE(ir::inputTypeFromName("f64"));
}

TEST_CASE("int32 per-token inputs: read as i32, printed, compared as "
          "integers",
          "[inputs]") {
  CompiledDefinition C = compile(examples::mhaDocumentIds());
  std::string Text = ir::toText(*C.Graph);
  CHECK_THAT(Text, Contains("  input doc_q : per_query_token i32\n"
                            "  input doc_k : per_key_token i32\n"));
  CHECK_THAT(Text, Contains("input doc_q : i32 row"));
  CHECK_THAT(Text, Contains("input doc_k : i32 col"));
  // The ids meet in an integer comparison: no conversion node.
  CHECK_THAT(Text, Contains("eq "));
  CHECK_THAT(Text, !Contains("to_float"));
  // A float32 input prints no type, as before.
  CHECK_THAT(ir::toText(*compile(examples::sigmoidAttn()).Graph),
             Contains("  input softmax_bias : scalar\n"));
}

TEST_CASE("comparing i32 with f32 is a trace-time error; to_float() "
          "converts",
          "[inputs][errors]") {
  AttentionDef Def = documentWithMask(
      [](SymbolScalar, SymbolScalar, SymbolScalar, SymbolScalar kv_idx,
         const CustomInputs &in) { return kv_idx < in["P"]; });
  Def.inputs.declare("P", InputShape::Scalar, 0.0, 8.0);
  CHECK_THAT(compileError(Def),
             Equals("mask_mod: 'lt' compares i32 `kv_idx` with f32 `P`; "
                    "convert explicitly: `kv_idx.to_float()` compares as f32 "
                    "(or declare input 'P' InputType::I32 to compare "
                    "integers)"));
  // Either order, and an int32 input against a float32 one.
  Def.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar, SymbolScalar,
                    const CustomInputs &in) { return in["P"] == in["doc_k"]; };
  CHECK_THAT(compileError(Def),
             Equals("mask_mod: 'eq' compares f32 `P` with i32 `doc_k`; "
                    "convert explicitly: `doc_k.to_float()` compares as f32 "
                    "(or declare input 'P' InputType::I32 to compare "
                    "integers)"));
  // A computed operand is parenthesised; no input hint without an input.
  Def.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q, SymbolScalar kv,
                    const CustomInputs &) { return q - kv > q / 2; };
  CHECK_THAT(compileError(Def),
             Equals("mask_mod: 'gt' compares i32 `q_idx - kv_idx` with f32 "
                    "`q_idx / 2`; convert explicitly: "
                    "`(q_idx - kv_idx).to_float()` compares as f32"));
  // The explicit conversion compiles, and its IR holds it.
  Def.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar, SymbolScalar kv,
                    const CustomInputs &in) { return kv.to_float() < in["P"]; };
  CompiledDefinition C = compile(Def);
  CHECK_THAT(ir::toText(*C.Graph), Contains("to_float"));
  // A C++ number is compared as written; arithmetic mixing stays implicit.
  Def.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q, SymbolScalar kv,
                    const CustomInputs &in) {
    return (q < 2.5) & ((kv - q) * in["P"] < 1.0);
  };
  CHECK_NOTHROW(compile(Def));
}

TEST_CASE("to_float: the value as f32, identity on f32", "[inputs]") {
  AttentionDef Def = examples::mha();
  Def.name = "tf";
  Def.score_mod = [](SymbolScalar s, const CustomInputs &, SymbolScalar,
                     SymbolScalar, SymbolScalar q, SymbolScalar) {
    return s.to_float() + q.to_float() / 4;
  };
  CompiledDefinition C = compile(Def);
  std::string Text = ir::toText(*C.Graph);
  CHECK_THAT(Text, Contains("to_float %")); // of q_idx
  // of the f32 score: simplified away, only q_idx's conversion is left.
  size_t First = Text.find("to_float"), Last = Text.rfind("to_float");
  CHECK(First == Last);
  // The reference evaluates it: scores shift by q/4 along each row.
  reference::AttentionInputs In;
  In.Q = reference::Tensor({1, 1, 3, 2}, 0.0);
  In.K = reference::Tensor({1, 1, 3, 2}, 0.0);
  In.V = reference::Tensor({1, 1, 3, 1}, 1.0);
  reference::AttentionOutputs O = reference::attentionDirect(C, In);
  // lse of row 2 over keys 0..2 of equal score 2/4: log(3) + 0.5.
  CHECK(O.Finals.at("lse").at({0, 0, 2}) ==
        Approx(std::log(3.0) + 0.5).epsilon(1e-12));
}

TEST_CASE("int32 inputs: declaration mistakes", "[inputs][errors]") {
  AttentionDef Def = examples::mha();
  CHECK_THROWS_WITH(
      Def.inputs.declare("ids", InputShape::PerQueryToken, InputType::I32)
          .requiresGrad(),
      Equals("requiresGrad(): custom input 'ids' is int32, and an integer "
             "has no gradient; declare it InputType::F32 to learn it"));
  CHECK_THROWS_WITH(
      Def.inputs.declare("w", InputShape::Scalar, InputType::I32, 0.2, 0.8),
      Equals("custom input 'w': an int32 input's sample range must hold a "
             "whole number within int32"));
  // A key-side input where there is no key dimension.
  struct F : OnlineFunc {
    F() : OnlineFunc({{"r", Var(0.0)}}, {}) {}
    OnlineFwdResult online_fwd(SymbolScalar s, const Rowscales &rs,
                               SymbolScalar, SymbolScalar,
                               SymbolScalar) const override {
      return {s, {{"r", rs["r"]}}, 1.0};
    }
    EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &,
                                       SymbolScalar, SymbolScalar,
                                       SymbolScalar) const override {
      return {o + inputs()["kt"] + inputs()["qt"], {}};
    }
    SymbolScalar forward(SymbolScalar s, const Rowscales &, SymbolScalar,
                         SymbolScalar, SymbolScalar,
                         SymbolScalar) const override {
      return s;
    }
  };
  AttentionDef E("epi");
  E.inputs.declare("qt", InputShape::PerQueryToken)
      .declare("kt", InputShape::PerKeyToken);
  E.online_func = std::make_shared<F>();
  CHECK_THAT(compileError(E),
             Equals("online_fwd_epilogue: custom input 'kt' is "
                    "per_key_token, but online_fwd_epilogue has no key "
                    "dimension; it accepts scalar, per_head, per_row, "
                    "per_query_token inputs"));
}

TEST_CASE("IR JSON: int32 and per-token inputs round-trip; the loader "
          "checks them",
          "[inputs][serialize]") {
  CompiledDefinition C = compile(examples::mhaDocumentIds());
  std::string Saved = ir::saveJSON(*C.Graph);
  CHECK(ir::toText(*ir::loadJSON(Saved)) == ir::toText(*C.Graph));
  json J = json::parse(Saved);
  REQUIRE(J["inputs"][0]["type"] == "i32");
  REQUIRE(J["inputs"][0]["shape"] == "per_query_token");
  auto LoadError = [](const json &Doc) -> std::string {
    try {
      ir::loadJSON(Doc.dump());
    } catch (const UserError &E) {
      return E.what();
    }
    return "accepted";
  };
  // Declared f32 while the nodes read i32.
  json F = J;
  F["inputs"][0]["type"] = "f32";
  CHECK_THAT(LoadError(F), Contains("input 'doc_q' is declared f32"));
  json G = J;
  G["inputs"][0]["type"] = "i64";
  CHECK_THAT(LoadError(G), StartsWith("IR JSON: /inputs/0/type: "));
  json H = J;
  H["inputs"][1]["shape"] = "per_query_token";
  CHECK_THAT(LoadError(H),
             Contains("input 'doc_k' is declared per_query_token, whose "
                      "space is row"));
  json R = J;
  R["inputs"][0]["requires_grad"] = true;
  CHECK_THAT(LoadError(R),
             Equals("IR JSON: /inputs/0/requires_grad: input 'doc_q' is "
                    "i32, and an integer has no gradient"));
  // A file without "type" (written before int32 inputs) holds f32 inputs.
  json Old = json::parse(ir::saveJSON(*compile(examples::sigmoidAttn()).Graph));
  Old["inputs"][0].erase("type");
  CHECK(LoadError(Old) == "accepted");
}

TEST_CASE("reference: per-token inputs are shared by heads; int32 values "
          "are checked",
          "[inputs][reference]") {
  CompiledDefinition C = compile(examples::mhaDocumentIds());
  reference::AttentionInputs In;
  In.Q = reference::Tensor({1, 2, 4, 2}, 0.0);
  In.K = reference::Tensor({1, 1, 4, 2}, 0.0);
  In.V = reference::Tensor({1, 1, 4, 1}, 0.0);
  for (int64_t J = 0; J < 4; ++J)
    In.V.at({0, 0, J, 0}) = double(J);
  // Two documents: tokens 0-1 and 2-3.
  reference::Tensor Ids({1, 4});
  Ids.Data = {7, 7, 9, 9};
  In.Inputs["doc_q"] = Ids;
  In.Inputs["doc_k"] = Ids;
  reference::AttentionOutputs O = reference::attentionDirect(C, In);
  for (int64_t H = 0; H < 2; ++H) {
    // Equal scores: o is the mean of v over the row's document prefix.
    CHECK(O.O.at({0, H, 1, 0}) == Approx(0.5));
    CHECK(O.O.at({0, H, 2, 0}) == Approx(2.0)); // key 2 only, not 0, 1
    CHECK(O.O.at({0, H, 3, 0}) == Approx(2.5));
  }
  reference::MaskStats S = reference::attentionMaskStats(C, In);
  CHECK(S.Elements == 32);
  CHECK(S.MaskedElements == 2 * (6 + 4)); // causal 6, other document 4
  CHECK(S.FullyMaskedRows == 0);

  In.Inputs["doc_q"].Data[1] = 7.5;
  CHECK_THROWS_WITH(reference::attentionDirect(C, In),
                    StartsWith("custom input 'doc_q' is int32, but holds "
                               "7.5"));
  In.Inputs["doc_q"] = reference::Tensor({1, 2, 4}); // a per_row shape
  CHECK_THROWS_WITH(reference::attentionDirect(C, In),
                    Equals("custom input 'doc_q' (per_query_token) must have "
                           "shape [1, 4], got [1, 2, 4]"));
}

TEST_CASE("sampleInputs: int32 ids are whole, sorted runs shared by the "
          "query and key side",
          "[inputs][reference]") {
  CompiledDefinition C = compile(examples::mhaDocumentIds());
  std::mt19937_64 Rng(7);
  reference::InputValues V = reference::sampleInputs(*C.Graph, Rng, 2, 3, 5, 9);
  const reference::Tensor &Q = V.at("doc_q"), &K = V.at("doc_k");
  REQUIRE(Q.Shape == std::vector<int64_t>{2, 5});
  REQUIRE(K.Shape == std::vector<int64_t>{2, 9});
  for (int64_t B = 0; B < 2; ++B) {
    for (int64_t J = 0; J < 9; ++J) {
      double X = K.at({B, J});
      CHECK(X == std::trunc(X));
      CHECK(X >= 0);
      CHECK(X <= 3);
      if (J > 0)
        CHECK(X >= K.at({B, J - 1}));
      if (J < 5)
        CHECK(Q.at({B, J}) == X); // the query side is the key side's prefix
    }
  }
}

TEST_CASE("attnc check: the document mask is exercised, not vacuous",
          "[inputs][check]") {
  reference::CheckReport R = reference::check(compile(examples::mhaDocumentIds()));
  CHECK(R.passed());
  int Shapes = 0;
  for (const reference::CheckRow &Row : R.Rows) {
    if (!llvm::StringRef(Row.Name).startswith("mask exercised"))
      continue;
    ++Shapes;
    CHECK(Row.passed());
  }
  CHECK(Shapes == 3);
  // On the large shape, the fractions printed are strictly between 0 and 1
  // (causal alone masks 78 of 169 elements; the diagonal is always kept).
  const reference::CheckRow *Big = findRow(R, "mask exercised, b2 h2/2 s13x13");
  REQUIRE(Big);
  double Elements = -1, Rows = -1;
  size_t At = Big->Name.find(": ");
  REQUIRE(At != std::string::npos);
  REQUIRE(std::sscanf(Big->Name.c_str() + At,
                      ": %lf%% of elements masked, %lf%% of rows fully masked",
                      &Elements, &Rows) == 2);
  CHECK(Elements > 100.0 * 78 / 169);
  CHECK(Elements < 100.0);
  CHECK(Rows == 0.0);
  std::string Text;
  llvm::raw_string_ostream OS(Text);
  reference::printReport(R, OS);
  OS.flush();
  CHECK_THAT(Text, Contains(Big->Name));
}

TEST_CASE("attnc check: a wrong online function under the document mask is "
          "caught",
          "[inputs][check]") {
  AttentionDef Def = examples::mhaDocumentIds();
  Def.name = "doc_no_rescale";
  Def.online_func = std::make_shared<NoRescaleSoftmax>();
  reference::CheckReport R = reference::check(compile(Def));
  CHECK_FALSE(R.passed());
  const reference::CheckRow *Online =
      findRow(R, "online (block 1) vs direct, b2 h2/2 s13x13");
  REQUIRE(Online);
  CHECK_FALSE(Online->passed());
}

TEST_CASE("attnc check: a mask that masks every row fails as vacuous",
          "[inputs][check]") {
  // Ids compared with a shift: never equal on the drawn ids.
  AttentionDef Def = documentWithMask(
      [](SymbolScalar, SymbolScalar, SymbolScalar, SymbolScalar,
         const CustomInputs &in) { return in["doc_q"] == in["doc_k"] + 100; });
  reference::CheckReport R = reference::check(compile(Def));
  CHECK_FALSE(R.passed());
  const reference::CheckRow *Row = findRow(R, "mask exercised, b2 h2/2 s13x13");
  REQUIRE(Row);
  CHECK_FALSE(Row->passed());
  CHECK_THAT(Row->Name, Contains("100.0% of elements masked, 100.0% of rows "
                                 "fully masked"));
  CHECK_THAT(Row->Note, StartsWith("vacuous: every row is masked; "));
  std::string Text;
  llvm::raw_string_ostream OS(Text);
  reference::printReport(R, OS);
  OS.flush();
  CHECK_THAT(Text, Contains("FAIL (vacuous: every row is masked;"));
  CHECK_THAT(Text, Contains("CHECK FAILED"));
}
