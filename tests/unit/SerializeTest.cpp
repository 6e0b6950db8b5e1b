// Unit tests of the JSON form of the IR: save/load round trips.
#include "Examples.h"

#include "attn/Pipeline.h"
#include "attn/dsl/Registry.h"
#include "attn/dsl/Trace.h"
#include "attn/ir/Printer.h"
#include "attn/ir/Serialize.h"

#include "llvm/Support/Casting.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

using namespace attn;
using ir::NodeKind;
using ir::ParamKind;
using ir::Space;
using ir::Type;

namespace {

constexpr double Inf = std::numeric_limits<double>::infinity();
constexpr double NaN = std::numeric_limits<double>::quiet_NaN();

dsl::Registry exampleRegistry() {
  dsl::Registry R;
  examples::registerExamples(R);
  return R;
}

/// Both round trips the format promises: the loaded graph prints as the
/// original, and saving it again gives the same document.
void requireRoundTrip(const ir::Graph &G) {
  std::string Saved = ir::saveJSON(G);
  std::unique_ptr<ir::Graph> Loaded = ir::loadJSON(Saved);
  REQUIRE(Loaded);
  CHECK(ir::toText(*Loaded) == ir::toText(G));
  CHECK(ir::saveJSON(*Loaded) == Saved);
  CHECK(Loaded->name() == G.name());
  CHECK(Loaded->decls().HasMask == G.decls().HasMask);
  CHECK(Loaded->decls().HasBackward == G.decls().HasBackward);
  CHECK(Loaded->decls().DecaySampleLo == G.decls().DecaySampleLo);
  CHECK(Loaded->decls().DecaySampleHi == G.decls().DecaySampleHi);
  REQUIRE(Loaded->decls().Inputs.size() == G.decls().Inputs.size());
  for (size_t I = 0; I < G.decls().Inputs.size(); ++I) {
    CHECK(Loaded->decls().Inputs[I].SampleLo == G.decls().Inputs[I].SampleLo);
    CHECK(Loaded->decls().Inputs[I].SampleHi == G.decls().Inputs[I].SampleHi);
  }
}

/// Gives \p G, which has declarations and nodes, the functions the loader
/// requires of an attention definition, with online_fwd's scores \p Scores
/// and every other result a parameter.
void completeAttention(ir::Graph &G, const ir::Node *Scores) {
  const ir::Node *S =
      G.param(ParamKind::Scores, "scores", Type::F32, Space::Tile);
  G.addFunction("score_mod").Results = {{"score", S}};
  std::vector<ir::Result> Online{{"scores", Scores}};
  for (const ir::RowscaleDecl &R : G.decls().OnlineRowscales)
    Online.push_back({R.Name, S});
  Online.push_back({"o_scale", S});
  G.addFunction("online_fwd").Results = Online;
  std::vector<ir::Result> Epilogue{{"o", S}};
  for (const ir::RowscaleDecl &R : G.decls().FinalRowscales)
    Epilogue.push_back({R.Name, S});
  G.addFunction("online_fwd_epilogue").Results = Epilogue;
  G.addFunction("forward").Results = {{"p", S}};
}

} // namespace

TEST_CASE("every example's compiled graph survives a JSON round trip") {
  dsl::Registry R = exampleRegistry();
  REQUIRE(R.all().size() == 15);
  for (const dsl::DefinitionBase *D : R.all()) {
    INFO(D->name);
    CompiledDefinition C = compile(*D);
    requireRoundTrip(*C.Graph);
  }
}

TEST_CASE("every example's traced (unsimplified) graph survives a JSON round "
          "trip") {
  dsl::Registry R = exampleRegistry();
  for (const dsl::DefinitionBase *D : R.all()) {
    INFO(D->name);
    requireRoundTrip(*dsl::trace(*D));
  }
}

TEST_CASE("compileGraph accepts a loaded graph and gives the same result") {
  dsl::Registry R = exampleRegistry();
  for (const dsl::DefinitionBase *D : R.all()) {
    INFO(D->name);
    CompiledDefinition Direct = compile(*D);
    // From the traced graph saved as JSON: the whole pipeline after trace.
    CompiledDefinition FromTrace =
        compileGraph(ir::loadJSON(ir::saveJSON(*dsl::trace(*D))));
    CHECK(ir::toText(*FromTrace.Graph) == ir::toText(*Direct.Graph));
    CHECK(FromTrace.Info.Reductions.size() == Direct.Info.Reductions.size());
    CHECK(FromTrace.Info.BackwardUsesDoosum ==
          Direct.Info.BackwardUsesDoosum);
    CHECK(FromTrace.Info.OScaleIsOne == Direct.Info.OScaleIsOne);
    CHECK(FromTrace.Info.UsesDecayInput == Direct.Info.UsesDecayInput);
    // Compiling a compiled graph again changes nothing.
    CompiledDefinition Again =
        compileGraph(ir::loadJSON(ir::saveJSON(*Direct.Graph)));
    CHECK(ir::toText(*Again.Graph) == ir::toText(*Direct.Graph));
  }
}

TEST_CASE("non-finite and awkward constants survive a JSON round trip") {
  ir::Graph G;
  G.setName("consts");
  G.decls().OnlineRowscales = {{"m", -Inf}, {"big", Inf}};
  G.decls().FinalRowscales = {{"lse", 0.0}};
  G.decls().Inputs = {{"x", ir::InputShape::Full, -Inf, Inf}};
  G.decls().DecaySampleLo = -Inf;
  const ir::Node *S = G.param(ParamKind::Scores, "scores", Type::F32,
                              Space::Tile);
  const ir::Node *Acc = S;
  for (double V : {-Inf, Inf, NaN, 0.1, -0.0, 1e-300, 5e-324, 1.7976931348623157e308,
                   123456789.125})
    Acc = G.binary(NodeKind::Add, Acc, G.constant(V));
  Acc = G.binary(NodeKind::Mul, Acc, G.constant(-7.0, Type::I32));
  completeAttention(G, Acc);

  requireRoundTrip(G);

  // The values themselves come back, not just their printed form.
  std::unique_ptr<ir::Graph> L = ir::loadJSON(ir::saveJSON(G));
  std::vector<double> Values;
  for (const ir::Node *N : L->nodes())
    if (auto *C = llvm::dyn_cast<ir::ConstNode>(N))
      Values.push_back(C->getValue());
  REQUIRE(Values.size() == 10);
  CHECK(Values[0] == -Inf);
  CHECK(Values[1] == Inf);
  CHECK(std::isnan(Values[2]));
  CHECK(Values[3] == 0.1);
  CHECK(Values[4] == 0.0);
  CHECK(std::signbit(Values[4]));
  CHECK(Values[5] == 1e-300);
  CHECK(Values[6] == 5e-324);
  CHECK(Values[7] == 1.7976931348623157e308);
  CHECK(Values[8] == 123456789.125);
  CHECK(Values[9] == -7.0);
  CHECK(L->decls().OnlineRowscales.at(0).Init == -Inf);
  CHECK(L->decls().OnlineRowscales.at(1).Init == Inf);
  CHECK(L->decls().DecaySampleLo == -Inf);
}

// A NaN with the sign bit set is what x86 gives for inf - inf, so constant
// folding leaves one in a compiled graph. The printer writes it "-nan";
// JSON stores it as "-nan" too, so the loaded graph prints the same.
TEST_CASE("a folded (negative) NaN constant survives a JSON round trip") {
  dsl::AttentionDef Def = examples::reluAttn();
  Def.name = "nan_fold";
  Def.score_mod = [](dsl::SymbolScalar s, const dsl::CustomInputs &,
                     dsl::SymbolScalar, dsl::SymbolScalar, dsl::SymbolScalar,
                     dsl::SymbolScalar) {
    return s + (s.constant(Inf) - s.constant(Inf));
  };
  CompiledDefinition C = compile(Def);
  std::string Saved = ir::saveJSON(*C.Graph);
  CHECK(ir::toText(*ir::loadJSON(Saved)) == ir::toText(*C.Graph));

  // The same with the constant built directly.
  ir::Graph G;
  G.setName("negnan");
  const ir::Node *S = G.param(ParamKind::Scores, "scores", Type::F32,
                              Space::Tile);
  completeAttention(G, G.binary(NodeKind::Add, S, G.constant(-NaN)));
  CHECK(ir::toText(*ir::loadJSON(ir::saveJSON(G))) == ir::toText(G));
  // The sign bit itself comes back; a plain NaN stays plain.
  CHECK(ir::saveJSON(G).find("\"-nan\"") != std::string::npos);
  std::unique_ptr<ir::Graph> L = ir::loadJSON(ir::saveJSON(G));
  std::vector<double> NaNs;
  for (const ir::Node *N : L->nodes())
    if (auto *C = llvm::dyn_cast<ir::ConstNode>(N))
      if (std::isnan(C->getValue()))
        NaNs.push_back(C->getValue());
  REQUIRE(NaNs.size() == 1);
  CHECK(std::signbit(NaNs[0]));
  ir::Graph P;
  P.setName("posnan");
  const ir::Node *PS = P.param(ParamKind::Scores, "scores", Type::F32,
                               Space::Tile);
  completeAttention(P, P.binary(NodeKind::Add, PS, P.constant(NaN)));
  CHECK(ir::saveJSON(P).find("\"nan\"") != std::string::npos);
  CHECK(ir::saveJSON(P).find("\"-nan\"") == std::string::npos);
  CHECK(ir::toText(*ir::loadJSON(ir::saveJSON(P))) == ir::toText(P));
}
