// score_mod gradients (score_mod_grad) and custom-input gradients
// (score_mod_input_grad, requiresGrad), pointwise and through the whole
// attention against finite differences; where inputs that require a
// gradient may not be read.
#include "AutodiffTestDefs.h"
#include "Examples.h"
#include "TestDefs.h"

#include "attn/ir/Printer.h"
#include "attn/ir/Serialize.h"
#include "attn/reference/Attention.h"
#include "attn/reference/Checker.h"
#include "attn/transforms/Autodiff.h"

#include "llvm/Support/raw_ostream.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <random>

using namespace attn;
using autodifftest::evalAt;
using Catch::Matchers::Contains;
using dsl::SymbolScalar;

namespace {

std::string reportText(const reference::CheckReport &R) {
  std::string S;
  llvm::raw_string_ostream OS(S);
  reference::printReport(R, OS);
  return OS.str();
}

/// At random points: score_mod_grad against a central difference of
/// score_mod in the score, and each d_<input> against one in the input.
void checkPointwise(const dsl::AttentionDef &Def, unsigned Seed) {
  CompiledDefinition C = compile(Def);
  const ir::Graph &G = *C.Graph;
  const ir::Node *Mod = G.getFunction("score_mod")->result("score");
  const ir::Node *DScore = G.getFunction("score_mod_grad")->result("dscore");
  std::vector<const ir::InputDecl *> Grads = transforms::gradInputDecls(G);
  const ir::Function *InGrad = G.getFunction("score_mod_input_grad");
  REQUIRE((Grads.empty() || InGrad));
  std::mt19937_64 Rng(Seed);
  std::normal_distribution<double> Score(0.0, 2.0);
  std::uniform_int_distribution<int> Index(0, 31);
  for (int T = 0; T < 50; ++T) {
    std::map<std::string, double> At = {
        {"score", Score(Rng)}, {"b", double(Index(Rng) % 2)},
        {"h", double(Index(Rng) % 4)}, {"q_idx", double(Index(Rng))},
        {"kv_idx", double(Index(Rng))}};
    for (const ir::InputDecl &D : G.decls().Inputs)
      At[D.Name] = std::uniform_real_distribution<double>(D.SampleLo,
                                                          D.SampleHi)(Rng);
    auto Fd = [&](const std::string &Var) {
      std::map<std::string, double> Up = At, Down = At;
      double H = 1e-6 * std::max(1.0, std::fabs(At[Var]));
      Up[Var] += H;
      Down[Var] -= H;
      return (evalAt(Mod, Up) - evalAt(Mod, Down)) / (2 * H);
    };
    INFO("score " << At["score"] << " q " << At["q_idx"] << " kv "
                  << At["kv_idx"] << " h " << At["h"]);
    double Want = Fd("score");
    CHECK(std::fabs(evalAt(DScore, At) - Want) <= 1e-6 * (1 + std::fabs(Want)));
    for (const ir::InputDecl *D : Grads) {
      INFO("d_" << D->Name);
      double W = Fd(D->Name);
      double Got = evalAt(InGrad->result("d_" + D->Name), At);
      CHECK(std::fabs(Got - W) <= 1e-6 * (1 + std::fabs(W)));
    }
  }
}

dsl::AttentionDef withScoreMod(const std::string &Name, dsl::ScoreMod M) {
  dsl::AttentionDef D = testdefs::softmaxDef(
      Name, std::make_shared<testdefs::OnlineSoftmax>());
  D.score_mod = std::move(M);
  return D;
}

} // namespace

TEST_CASE("score_mod_grad: ALiBi with fixed slopes and a tanh softcap",
          "[autodiff][score_mod]") {
  checkPointwise(
      withScoreMod("alibi_fixed",
                   [](SymbolScalar s, const dsl::CustomInputs &in,
                      SymbolScalar, SymbolScalar h, SymbolScalar q,
                      SymbolScalar kv) {
                     SymbolScalar slope = (-(h + 1)).exp2();
                     return s * in.head_dim().rsqrt() + slope * (kv - q);
                   }),
      1);
  checkPointwise(
      withScoreMod("softcap_fixed",
                   [](SymbolScalar s, const dsl::CustomInputs &, SymbolScalar,
                      SymbolScalar, SymbolScalar, SymbolScalar) {
                     return 5.0 * (s / 5.0).tanh();
                   }),
      2);
  // ALiBi's score_mod_grad is the constant scale; softcap's is 1 − tanh².
  CompiledDefinition C = compile(withScoreMod(
      "softcap_fixed", [](SymbolScalar s, const dsl::CustomInputs &,
                          SymbolScalar, SymbolScalar, SymbolScalar,
                          SymbolScalar) { return 5.0 * (s / 5.0).tanh(); }));
  CHECK(evalAt(C.Graph->getFunction("score_mod_grad")->result("dscore"),
               {{"score", 0.0}}) == Approx(1.0).epsilon(1e-12));
}

TEST_CASE("score_mod_grad: a score_mod using every op",
          "[autodiff][score_mod]") {
  // neg, sub, exp, abs, exp2, log, log2, sqrt, rsqrt, tanh, sigmoid, relu,
  // max, min, div, select and comparisons, with index-dependent terms.
  checkPointwise(
      withScoreMod(
          "every_op",
          [](SymbolScalar s, const dsl::CustomInputs &in, SymbolScalar,
             SymbolScalar h, SymbolScalar q, SymbolScalar kv) {
            SymbolScalar a = (-s).exp() - s.abs() + (0.5 * s).exp2();
            SymbolScalar b = (s * s + 1.0).log() + (s * s + 2.0).log2();
            SymbolScalar c = (s * s + 1.0).sqrt() * (s * s + 3.0).rsqrt();
            SymbolScalar d = s.tanh() + s.sigmoid() + (s - 0.5).relu();
            SymbolScalar e = s.max(0.3 * s) - s.min(-0.2 * s);
            SymbolScalar f = dsl::select(q >= kv, s / (h + 2), -s);
            return a + b + c + d + e + f + s * in.head_dim().rsqrt();
          }),
      3);
}

TEST_CASE("score_mod_input_grad: learned ALiBi slopes, head bias and softcap "
          "cap",
          "[autodiff][inputs]") {
  checkPointwise(examples::alibiLearnable(), 4);
  checkPointwise(examples::softcapLearnable(), 5);
  // ∂/∂slopes = kv − q, ∂/∂head_bias = [kv = q] (the bias is added on the
  // diagonal only).
  CompiledDefinition C = compile(examples::alibiLearnable());
  const ir::Function &F = *C.Graph->getFunction("score_mod_input_grad");
  REQUIRE(F.Results.size() == 2);
  CHECK(F.Results[0].Name == "d_slopes");
  CHECK(F.Results[1].Name == "d_head_bias");
  CHECK(evalAt(F.result("d_slopes"), {{"q_idx", 7}, {"kv_idx", 3}}) == -4.0);
  CHECK(evalAt(F.result("d_head_bias"), {{"q_idx", 7}, {"kv_idx", 3}}) == 0.0);
  CHECK(evalAt(F.result("d_head_bias"), {{"q_idx", 5}, {"kv_idx", 5}}) == 1.0);
}

TEST_CASE("input gradients: the reference backward against finite "
          "differences, every shape class",
          "[autodiff][inputs]") {
  dsl::AttentionDef D = withScoreMod(
      "every_shape",
      [](SymbolScalar s, const dsl::CustomInputs &in, SymbolScalar,
         SymbolScalar, SymbolScalar q, SymbolScalar kv) {
        return s * in["temp"] + in["slopes"] * (kv - q) * 0.1 +
               in["row_bias"] + in["key_bias"] * in["bias"];
      });
  D.inputs.declare("temp", ir::InputShape::Scalar, 0.5, 1.5).requiresGrad();
  D.inputs.declare("slopes", ir::InputShape::PerHead).requiresGrad();
  D.inputs.declare("row_bias", ir::InputShape::PerRow).requiresGrad();
  D.inputs.declare("key_bias", ir::InputShape::PerKey).requiresGrad();
  D.inputs.declare("bias", ir::InputShape::Full); // read, no gradient
  D.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q,
                  SymbolScalar kv) { return q >= kv; };
  CompiledDefinition C = compile(D);
  reference::CheckReport R = reference::check(C);
  INFO(reportText(R));
  CHECK(R.passed());
  CHECK_THAT(reportText(R),
             Contains("input gradients vs finite differences, b1 h2/1 s6x7 "
                      "d3/2 (d_temp, d_slopes, d_row_bias, d_key_bias)"));
  // The gradients have the inputs' shapes.
  std::mt19937_64 Rng(9);
  reference::AttentionInputs In =
      testdefs::randomInputs(C, Rng, 1, 2, 1, 4, 5, 3, 2);
  reference::AttentionGrads G =
      reference::attentionBackward(C, In, reference::Tensor({1, 2, 4, 2}, 1.0));
  REQUIRE(G.DInputs.size() == 4);
  CHECK(G.DInputs.at("temp").Shape.empty());
  CHECK(G.DInputs.at("slopes").Shape == std::vector<int64_t>{2});
  CHECK(G.DInputs.at("row_bias").Shape == std::vector<int64_t>{1, 2, 4});
  CHECK(G.DInputs.at("key_bias").Shape == std::vector<int64_t>{1, 2, 5});
  CHECK(G.DInputs.count("bias") == 0);
}

TEST_CASE("input gradients: the learnable examples pass attnc check",
          "[autodiff][inputs]") {
  for (const dsl::AttentionDef &D :
       {examples::alibiLearnable(), examples::softcapLearnable()}) {
    INFO(D.name);
    CompiledDefinition C = compile(D);
    CHECK(C.Graph->decls().BackwardDerived);
    reference::CheckReport R = reference::check(C);
    INFO(reportText(R));
    CHECK(R.passed());
    CHECK_THAT(reportText(R), Contains("input gradients vs finite differences"));
    CHECK_THAT(reportText(R),
               Contains("derived backward vs finite differences"));
  }
}

TEST_CASE("input gradients: mask_mod and the online function may not read "
          "an input that requires a gradient",
          "[autodiff][inputs][errors]") {
  dsl::AttentionDef D = examples::alibiLearnable();
  D.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q, SymbolScalar kv,
                  const dsl::CustomInputs &in) {
    return (q >= kv) & (in["head_bias"] > 0.0);
  };
  CHECK_THROWS_AS(compile(D), UserError);
  CHECK_THROWS_WITH(compile(D),
                    Contains("alibi_learnable: mask_mod reads custom input "
                             "'head_bias', which requires a gradient; a mask "
                             "only selects keys and has no gradient"));

  class ReadsInput final : public dsl::OnlineFunc {
  public:
    ReadsInput() : OnlineFunc({}, {}) {}
    dsl::OnlineFwdResult online_fwd(SymbolScalar s, const dsl::Rowscales &,
                                    SymbolScalar, SymbolScalar,
                                    SymbolScalar) const override {
      return {s, {}, 1.0};
    }
    dsl::EpilogueResult online_fwd_epilogue(SymbolScalar o,
                                            const dsl::Rowscales &,
                                            SymbolScalar, SymbolScalar,
                                            SymbolScalar) const override {
      return {o, {}};
    }
    SymbolScalar forward(SymbolScalar s, const dsl::Rowscales &, SymbolScalar,
                         SymbolScalar, SymbolScalar,
                         SymbolScalar) const override {
      return s * inputs()["gain"];
    }
  };
  dsl::AttentionDef E("reads_gain");
  E.inputs.declare("gain", ir::InputShape::Scalar).requiresGrad();
  E.online_func = std::make_shared<ReadsInput>();
  CHECK_THROWS_AS(compile(E), NotSupportedYet);
  CHECK_THROWS_WITH(compile(E), Contains("reads_gain: forward reads custom "
                                         "input 'gain', which requires a "
                                         "gradient"));

  dsl::CustomInputs None;
  CHECK_THROWS_WITH(None.requiresGrad(),
                    Contains("no custom input declared yet"));
}

TEST_CASE("input gradients: requires_grad and backward_derived survive the "
          "IR's JSON form",
          "[autodiff][inputs]") {
  CompiledDefinition C = compile(examples::alibiLearnable());
  std::unique_ptr<ir::Graph> L = ir::loadJSON(ir::saveJSON(*C.Graph));
  REQUIRE(L->decls().Inputs.size() == 2);
  CHECK(L->decls().Inputs[0].RequiresGrad);
  CHECK(L->decls().Inputs[1].RequiresGrad);
  CHECK(L->decls().BackwardDerived);
  // Compiling the loaded graph again rebuilds the gradients, once.
  CompiledDefinition Again = compileGraph(std::move(L));
  CHECK(ir::toText(*Again.Graph) == ir::toText(*C.Graph));
  CHECK_THAT(ir::toText(*C.Graph), Contains("input slopes : per_head "
                                            "requires_grad"));
}
