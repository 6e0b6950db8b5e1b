// User-chosen names that are not usable C++ identifiers (keywords, names the
// generated code uses itself, reserved and non-ASCII names) compile with
// NVRTC in every generated kernel, and the banner still shows them.
#include "attn/Pipeline.h"
#include "attn/codegen/Codegen.h"
#include "attn/codegen/LinearCodegen.h"
#include "attn/dsl/Definition.h"
#include "attn/dsl/Trace.h"
#include "attn/ir/Serialize.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/Errors.h"

#include <catch2/catch.hpp>

#include <memory>
#include <string>

using namespace attn;
using namespace attn::dsl;
using codegen::KernelSource;
using codegen::KernelSpec;
using Catch::Matchers::Contains;

namespace {

/// Softmax with online rowscales 'float' (the max) and 'q__' (the sum) and
/// the final rowscale 'return'.
class AwkwardSoftmax final : public OnlineFunc {
public:
  AwkwardSoftmax()
      : OnlineFunc({{"float", Var("-inf")}, {"q__", Var(0.0)}},
                   {{"return", Var(0.0)}}) {}
  OnlineFwdResult online_fwd(SymbolScalar s, const Rowscales &rs, SymbolScalar,
                             SymbolScalar, SymbolScalar) const override {
    SymbolScalar m = rs["float"].max(s.get_reduce("max"));
    SymbolScalar scale = (rs["float"] - m).exp();
    SymbolScalar p = (s - m).exp();
    return {p,
            {{"float", m}, {"q__", rs["q__"] * scale + p.get_reduce("sum")}},
            scale};
  }
  EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &rs,
                                     SymbolScalar, SymbolScalar,
                                     SymbolScalar) const override {
    return {o / rs["q__"], {{"return", rs["q__"].log() + rs["float"]}}};
  }
  SymbolScalar forward(SymbolScalar s, const Rowscales &fr, SymbolScalar,
                       SymbolScalar, SymbolScalar,
                       SymbolScalar) const override {
    return (s - fr["return"]).exp();
  }
};

/// Inputs named after keywords, after the generated code's own names (the
/// accessors' q, k, b parameters) and reserved ones, in every shape class.
AttentionDef awkwardNames() {
  AttentionDef Def("awkward_names");
  Def.inputs.declare("float", InputShape::Scalar)
      .declare("int", InputShape::PerHead)
      .declare("return", InputShape::PerRow)
      .declare("q", InputShape::PerKey)
      .declare("k", InputShape::Full)
      .declare("b", InputShape::PerRow)
      .declare("a__b", InputShape::Scalar)
      .declare("_Upper", InputShape::PerHead);
  Def.score_mod = [](SymbolScalar s, const CustomInputs &in, SymbolScalar,
                     SymbolScalar, SymbolScalar q, SymbolScalar kv) {
    return s * in["float"] - in["int"] * (q - kv) + in["return"] + in["q"] +
           in["k"] + in["b"] + in["a__b"] + in["_Upper"];
  };
  Def.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q, SymbolScalar kv,
                    const CustomInputs &in) {
    return (q >= kv) & (in["b"] >= in["q"]);
  };
  Def.online_func = std::make_shared<AwkwardSoftmax>();
  return Def;
}

/// \p Def traced, saved as IR JSON with every `"From"` string replaced by
/// `"To"`, loaded and compiled: names the DSL would refuse (non-ASCII) can
/// come from an IR file.
CompiledDefinition renamedThroughJson(
    const DefinitionBase &Def,
    std::initializer_list<std::pair<std::string, std::string>> Renames) {
  std::string Json = ir::saveJSON(*trace(Def));
  for (const auto &[From, To] : Renames) {
    std::string F = "\"" + From + "\"", T = "\"" + To + "\"";
    size_t Count = 0;
    for (size_t P = Json.find(F); P != std::string::npos;
         P = Json.find(F, P + T.size())) {
      Json.replace(P, F.size(), T);
      ++Count;
    }
    INFO("renaming " << From);
    REQUIRE(Count >= 2); // the declaration and at least one use
  }
  return compileGraph(ir::loadJSON(Json));
}

void compiles(const KernelSource &Src) {
  INFO("kernel " << Src.Key);
  try {
    runtime::CompiledCubin C = runtime::compileToCubin(Src);
    CHECK(C.Cubin.size() > 4);
  } catch (const CompileError &E) {
    FAIL_CHECK(E.what());
  }
}

/// The banner (the IR as a comment) shows each of \p Decls, declarations
/// with the user's names.
void bannerShows(const KernelSource &Src,
                 std::initializer_list<const char *> Decls) {
  std::string Banner = Src.Source.substr(0, Src.Source.find("\n#"));
  for (const char *D : Decls)
    CHECK_THAT(Banner, Contains(std::string("//     ") + D + "\n"));
}

KernelSpec spec(GpuArch Arch) {
  KernelSpec S;
  S.HeadDim = S.HeadDimV = 64;
  S.Arch = Arch;
  return S;
}

} // namespace

TEST_CASE("nvrtc: keyword and reserved input and rowscale names compile in "
          "fwd_sm80, fwd_sm90, bwd_sm80, bwd_sm90 and the reference",
          "[nvrtc][names]") {
  CompiledDefinition Def = compile(awkwardNames());
  KernelSource Fwd = codegen::generateForward(Def, spec(GpuArch::Sm80));
  bannerShows(Fwd, {"input float : scalar", "input int : per_head",
                    "input return : per_row", "input q : per_key",
                    "input k : full", "input b : per_row", "input a__b : scalar",
                    "input _Upper : per_head", "rowscale float = -inf",
                    "rowscale q__ = 0", "final return"});
  // The Inputs and RowState fields name the user's declarations in comments.
  CHECK_THAT(Fwd.Source, Contains("// input 'return' (per_row)"));
  CHECK_THAT(Fwd.Source, Contains("// rowscale 'q__'"));
  compiles(Fwd);
  compiles(codegen::generateForwardSm90(Def, spec(GpuArch::Sm90a),
                                        codegen::Sm90Config::defaultFor(64, 64)));
  compiles(codegen::generateBackward(Def, spec(GpuArch::Sm80)));
  compiles(codegen::generateBackwardSm90(Def, spec(GpuArch::Sm90a),
                                         codegen::BwdSm90Config::defaultFor(64, 64)));
  compiles(codegen::generateReference(Def, spec(GpuArch::Sm80)));
}

TEST_CASE("nvrtc: non-ASCII input and rowscale names from an IR file compile",
          "[nvrtc][names]") {
  CompiledDefinition Def = renamedThroughJson(
      awkwardNames(), {{"a__b", "\xce\xb1__\xce\xb2"}, {"q__", "\xce\xbb"}});
  KernelSource Fwd = codegen::generateForward(Def, spec(GpuArch::Sm80));
  bannerShows(Fwd, {"input \xce\xb1__\xce\xb2 : scalar",
                    "rowscale \xce\xbb = 0"});
  CHECK_THAT(Fwd.Source, Contains("// rowscale '\xce\xbb'"));
  compiles(Fwd);
}

TEST_CASE("nvrtc: linear kernels with keyword input names compile",
          "[nvrtc][names][linear]") {
  LinearAttentionDef Def("awkward_linear");
  Def.inputs.declare("float", InputShape::PerHead, -2.0, -0.2)
      .declare("b", InputShape::PerRow, 0.05, 1.0);
  Def.decay_mod = [](SymbolScalar, const CustomInputs &in) {
    return in["b"] * in["float"];
  };
  Def.v_mod = [](SymbolScalar v, const CustomInputs &in) {
    return v * in["b"];
  };
  CompiledDefinition C = compile(Def);
  codegen::LinearKernelSpec Spec;
  Spec.HeadDim = Spec.HeadDimV = 64;
  KernelSource Fwd = codegen::generateLinearForward(C, Spec);
  bannerShows(Fwd, {"input float : per_head", "input b : per_row"});
  compiles(Fwd);
  compiles(codegen::generateLinearBackward(C, Spec));
}
