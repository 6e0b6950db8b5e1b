// NVRTC compiles the generated forward kernel of every transformer example.
#include "Examples.h"

#include "attn/Pipeline.h"
#include "attn/codegen/Codegen.h"
#include "attn/dsl/Registry.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/Errors.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

using namespace attn;
using namespace attn::dsl;
using codegen::KernelSpec;

namespace {

bool isElf(const std::vector<char> &Cubin) {
  return Cubin.size() > 4 && std::memcmp(Cubin.data(), "\x7f"
                                                       "ELF",
                                         4) == 0;
}

/// Generates and compiles \p Spec for \p Def; a failure names the kernel key
/// and carries NVRTC's log, and the caller goes on with the next spec.
void compilesToCubin(const CompiledDefinition &Def, const KernelSpec &Spec) {
  codegen::KernelSource Src = codegen::generateForward(Def, Spec);
  INFO("kernel " << Src.Key);
  runtime::CompiledCubin C;
  try {
    C = runtime::compileToCubin(Src);
  } catch (const CompileError &E) {
    FAIL_CHECK(E.what());
    return;
  }
  CHECK(isElf(C.Cubin));
}

/// The matrix: f16/bf16 × five head-dim pairs × sm_80/sm_90a.
void compileMatrix(const DefinitionBase &D) {
  CompiledDefinition Def = compile(D);
  const std::pair<int, int> Dims[] = {
      {64, 64}, {128, 128}, {64, 128}, {128, 256}, {256, 256}};
  unsigned Compiled = 0;
  for (DType T : {DType::F16, DType::BF16})
    for (auto [HD, HDV] : Dims)
      for (GpuArch Arch : {GpuArch::Sm80, GpuArch::Sm90a}) {
        KernelSpec Spec;
        Spec.Dtype = T;
        Spec.HeadDim = HD;
        Spec.HeadDimV = HDV;
        Spec.Arch = Arch;
        compilesToCubin(Def, Spec);
        ++Compiled;
      }
  CHECK(Compiled == 20);
}

/// A softmax online function for the custom definitions below.
class Softmax final : public OnlineFunc {
public:
  Softmax()
      : OnlineFunc({{"m", Var("-inf")}, {"r", Var(0.0)}}, {{"lse", Var(0.0)}}) {}
  OnlineFwdResult online_fwd(SymbolScalar s, const Rowscales &rs, SymbolScalar,
                             SymbolScalar, SymbolScalar) const override {
    SymbolScalar m = rs["m"].max(s.get_reduce("max"));
    SymbolScalar scale = (rs["m"] - m).exp();
    SymbolScalar p = (s - m).exp();
    return {p, {{"m", m}, {"r", rs["r"] * scale + p.get_reduce("sum")}}, scale};
  }
  EpilogueResult online_fwd_epilogue(SymbolScalar o, const Rowscales &rs,
                                     SymbolScalar, SymbolScalar,
                                     SymbolScalar) const override {
    return {o / rs["r"], {{"lse", rs["r"].log() + rs["m"]}}};
  }
  SymbolScalar forward(SymbolScalar s, const Rowscales &fr, SymbolScalar,
                       SymbolScalar, SymbolScalar,
                       SymbolScalar) const override {
    return (s - fr["lse"]).exp();
  }
};

/// Every custom-input shape class in score_mod, and a document mask over
/// per-row/per-key ids in a five-argument mask_mod.
AttentionDef everyInputShape() {
  AttentionDef Def("every_input");
  Def.inputs.declare("temp", InputShape::Scalar)
      .declare("slopes", InputShape::PerHead)
      .declare("row_bias", InputShape::PerRow)
      .declare("key_bias", InputShape::PerKey)
      .declare("bias", InputShape::Full)
      .declare("doc_q", InputShape::PerRow, 0.0, 0.0)
      .declare("doc_k", InputShape::PerKey, 0.0, 0.0);
  Def.score_mod = [](SymbolScalar s, const CustomInputs &in, SymbolScalar,
                     SymbolScalar, SymbolScalar q, SymbolScalar kv) {
    return s * in["temp"] - in["slopes"] * (q - kv) + in["row_bias"] +
           in["key_bias"] + in["bias"];
  };
  Def.mask_mod = [](SymbolScalar, SymbolScalar, SymbolScalar q, SymbolScalar kv,
                    const CustomInputs &in) {
    return (q >= kv) & (in["doc_q"] == in["doc_k"]);
  };
  Def.online_func = std::make_shared<Softmax>();
  return Def;
}

} // namespace

TEST_CASE("nvrtc: the transformer examples are mha, sigmoid_attn, relu_attn, "
          "retention (and its combine twin), the two learnable ones, "
          "mha_document_ids and the three masks",
          "[nvrtc]") {
  // The per-example cases below must cover every registered transformer
  // example; a new one fails here until it gets its own case.
  Registry R;
  examples::registerExamples(R);
  std::set<std::string> Transformers;
  for (const DefinitionBase *D : R.all())
    if (D->kind() == ir::DefinitionKind::Transformer)
      Transformers.insert(D->name);
  CHECK(Transformers ==
        std::set<std::string>{"mha", "sigmoid_attn", "relu_attn", "retention",
                              "retention_combine",
                              "alibi_learnable", "softcap_learnable",
                              "mha_document_ids", "mha_prefix_lm",
                              "mha_sliding_window", "mha_document",
                              "mha_chunked"});
}

TEST_CASE("nvrtc: mha compiles for every dtype, head dims and arch",
          "[nvrtc][mha]") {
  compileMatrix(examples::mha());
}

TEST_CASE("nvrtc: sigmoid_attn compiles for every dtype, head dims and arch",
          "[nvrtc][sigmoid_attn]") {
  compileMatrix(examples::sigmoidAttn());
}

TEST_CASE("nvrtc: relu_attn compiles for every dtype, head dims and arch",
          "[nvrtc][relu_attn]") {
  compileMatrix(examples::reluAttn());
}

TEST_CASE("nvrtc: retention compiles for every dtype, head dims and arch",
          "[nvrtc][retention]") {
  compileMatrix(examples::retention());
}

TEST_CASE("nvrtc: retention_combine compiles for every dtype, head dims and arch",
          "[nvrtc][retention]") {
  compileMatrix(examples::retentionCombine());
}

TEST_CASE("nvrtc: alibi_learnable compiles for every dtype, head dims and "
          "arch",
          "[nvrtc][alibi_learnable]") {
  compileMatrix(examples::alibiLearnable());
}

TEST_CASE("nvrtc: softcap_learnable compiles for every dtype, head dims and "
          "arch",
          "[nvrtc][softcap_learnable]") {
  compileMatrix(examples::softcapLearnable());
}

TEST_CASE("nvrtc: mha_document_ids (int32 per-token inputs) compiles for "
          "every dtype, head dims and arch",
          "[nvrtc][mha_document_ids]") {
  compileMatrix(examples::mhaDocumentIds());
}

// The mask examples differ from mha only in the mask (and its block
// classifier): one kernel each, in both dtypes and archs between them, and
// without a warning (an unused variable of the classifier would give one).
TEST_CASE("nvrtc: the mask examples compile without warnings",
          "[nvrtc][masks]") {
  int I = 0;
  for (const AttentionDef &D : {examples::mhaPrefixLm(),
                                examples::mhaSlidingWindow(),
                                examples::mhaDocument(),
                                examples::mhaChunked()}) {
    KernelSpec Spec;
    Spec.Dtype = I % 2 ? DType::BF16 : DType::F16;
    Spec.Arch = I % 2 ? GpuArch::Sm90a : GpuArch::Sm80;
    ++I;
    codegen::KernelSource Src = codegen::generateForward(compile(D), Spec);
    INFO("kernel " << Src.Key);
    runtime::CompiledCubin C = runtime::compileToCubin(Src);
    CHECK(isElf(C.Cubin));
    INFO(C.Log);
    CHECK(C.Log.empty());
  }
}

TEST_CASE("nvrtc: every custom-input shape and a document mask compile",
          "[nvrtc][inputs]") {
  CompiledDefinition Def = compile(everyInputShape());
  REQUIRE(Def.Graph->decls().Inputs.size() == 7);
  KernelSpec Spec; // f16, d128, sm_80, default config
  compilesToCubin(Def, Spec);
}

TEST_CASE("nvrtc: the tile configurations compile", "[nvrtc][config]") {
  CompiledDefinition Def = compile(examples::mha());
  // m64n128w4s3 needs 208 KiB at d128, more than sm_80 has; d64 fits.
  // The last three are the runtime's default choices by head dim.
  const std::pair<const char *, int> Configs[] = {
      {"m64n64w4s2", 128}, {"m128n64w8s2", 128}, {"m64n128w4s3", 64},
      {"m128n32w8s2", 128}, {"m256n64w8s2", 128}, {"m128n32w4s2", 64},
      {"m64n32w4s2", 256}};
  for (auto [Config, D] : Configs) {
    KernelSpec Spec;
    Spec.HeadDim = Spec.HeadDimV = D;
    Spec.Config = codegen::FwdConfig::parse(Config);
    REQUIRE(Spec.Config.str() == Config);
    compilesToCubin(Def, Spec);
  }
}

// exp(a - b) becomes exp_diff(a, b); the subtraction must not be left
// behind as an unused variable (NVRTC would warn #177-D).
TEST_CASE("nvrtc: the generated mha compiles without warnings",
          "[nvrtc][warnings]") {
  codegen::KernelSource Src =
      codegen::generateForward(compile(examples::mha()), KernelSpec());
  runtime::CompiledCubin C = runtime::compileToCubin(Src);
  INFO(C.Log);
  CHECK(C.Log.empty());
}
