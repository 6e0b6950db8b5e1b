// The gradient hooks of the generated Variant: score_mod_grad, add_input_grads,
// kNumInputGrads, gradInputs, and NVRTC compiles them.
#include "Examples.h"

#include "attn/Pipeline.h"
#include "attn/codegen/Codegen.h"
#include "attn/dsl/Library.h"
#include "attn/codegen/InputLayout.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/Errors.h"

#include "llvm/ADT/StringRef.h"

#include <catch2/catch.hpp>

#include <cstring>

using namespace attn;
using codegen::KernelSource;
using codegen::KernelSpec;

namespace {

KernelSource generate(const dsl::DefinitionBase &D, KernelSpec Spec = {}) {
  return codegen::generateForward(compile(D), Spec);
}

/// The text of the device function whose signature starts with \p Head.
std::string functionText(const KernelSource &S, llvm::StringRef Head) {
  llvm::StringRef Src(S.Source);
  size_t At = Src.find(Head);
  if (At == llvm::StringRef::npos)
    return "";
  size_t End = Src.find("\n  }\n", At);
  return Src.slice(At, End).str();
}

} // namespace

TEST_CASE("hooks: mha has score_mod_grad = rsqrt(D) and no input grads",
          "[autodiff][codegen]") {
  KernelSource S = generate(examples::mha());
  CHECK_THAT(S.Source, Catch::Matchers::Contains(
                           "static constexpr int kNumInputGrads = 0;"));
  std::string G = functionText(
      S, "__device__ static __forceinline__ float score_mod_grad(const "
         "Inputs &in, float score, int b, int h, int q_idx, int kv_idx)");
  REQUIRE_FALSE(G.empty());
  CHECK_THAT(G, Catch::Matchers::Contains("rsqrtf((float)kHeadDim)"));
  std::string I = functionText(
      S, "__device__ static __forceinline__ void add_input_grads(const Inputs "
         "&in, float score, float ds, bool valid, int b, int h, int q_idx, "
         "int kv_idx, float *gacc)");
  REQUIRE_FALSE(I.empty());
  CHECK(I.find("gacc[") == std::string::npos);
}

TEST_CASE("hooks: learned ALiBi slopes and diagonal bias give two input "
          "grads",
          "[autodiff][codegen]") {
  CompiledDefinition Def = compile(examples::alibiLearnable());
  std::vector<codegen::GradInput> Grads = codegen::gradInputs(*Def.Graph);
  REQUIRE(Grads.size() == 2);
  CHECK(Grads[0].Name == "slopes");
  CHECK(Grads[0].Shape == ir::InputShape::PerHead);
  CHECK(Grads[0].InputIndex == 0);
  CHECK(Grads[1].Name == "head_bias");
  CHECK(Grads[1].InputIndex == 1);
  KernelSource S = codegen::generateForward(Def, KernelSpec());
  CHECK_THAT(S.Source, Catch::Matchers::Contains(
                           "static constexpr int kNumInputGrads = 2;"));
  std::string I = functionText(S, "__device__ static __forceinline__ void "
                                  "add_input_grads(");
  // d slopes = kv_idx - q_idx (an int, made a float), d head_bias = 1 on
  // the diagonal and 0 elsewhere: dS times the distance with one FMA, and
  // dS added on the diagonal only. Both factors are finite at every
  // element, so neither tests `valid` (dS is 0 there).
  CHECK_THAT(I, Catch::Matchers::Contains("const int v"));
  CHECK_THAT(I, Catch::Matchers::Contains(" = (kv_idx - q_idx);"));
  CHECK_THAT(I, Catch::Matchers::Contains(" = (kv_idx == q_idx);"));
  CHECK_THAT(I, Catch::Matchers::Contains("gacc[0] = fmaf(ds, v"));
  CHECK_THAT(I, Catch::Matchers::Contains("gacc[1] = v"));
  CHECK_THAT(I, Catch::Matchers::Contains(" ? gacc[1] + ds : gacc[1];"));
  CHECK(I.find("valid ?") == std::string::npos);
  CHECK(I.find("valid &&") == std::string::npos);
  CHECK(I.find(" ? 1.0f : 0.0f") == std::string::npos);
}

TEST_CASE("hooks: a select whose branch loads a per-head input loads it "
          "eagerly",
          "[autodiff][codegen]") {
  // ALiBi's diagonal bias is select(kv == q, head_bias, 0). As a C++
  // conditional the load would be predicated on every element; eagerly it
  // is one load a thread that all its elements share.
  KernelSource S = generate(examples::alibiLearnable());
  std::string M = functionText(
      S, "__device__ static __forceinline__ float score_mod(const Inputs &in, "
         "float score, int b, int h, int q_idx, int kv_idx)");
  REQUIRE_FALSE(M.empty());
  CHECK_THAT(M, Catch::Matchers::Contains(
                    "attnc::select_eager<float>(v9, in.load_in_1_head_bias("));
  CHECK(M.find("? in.load_in_") == std::string::npos);
  // A select of per-element values stays a conditional expression.
  KernelSource W = generate(examples::mhaSlidingWindow());
  CHECK(W.Source.find("select_eager<") == std::string::npos);
}

TEST_CASE("hooks: gradInputs skips inputs that need no gradient",
          "[autodiff][codegen]") {
  dsl::AttentionDef D = examples::softcapLearnable();
  D.inputs.declare("unused_scale", ir::InputShape::PerRow);
  D.inputs.declare("temp", ir::InputShape::Scalar).requiresGrad();
  auto Base = D.score_mod;
  D.score_mod = [Base](dsl::SymbolScalar s, const dsl::CustomInputs &in,
                       dsl::SymbolScalar b, dsl::SymbolScalar h,
                       dsl::SymbolScalar q, dsl::SymbolScalar k) {
    return Base(s * in["temp"], in, b, h, q, k);
  };
  CompiledDefinition Def = compile(D);
  std::vector<codegen::GradInput> Grads = codegen::gradInputs(*Def.Graph);
  REQUIRE(Grads.size() == 2);
  CHECK(Grads[0].Name == "cap");
  CHECK(Grads[1].Name == "temp");
  CHECK(Grads[1].InputIndex == 2);
  CHECK(Def.Graph->getFunction("score_mod_input_grad")->Results.size() == 2);
}

namespace {

bool compiles(const KernelSource &Src) {
  INFO("kernel " << Src.Key);
  try {
    runtime::CompiledCubin C = runtime::compileToCubin(Src);
    INFO(C.Log);
    CHECK(C.Log.empty()); // no warnings: no unused variables in the hooks
    return C.Cubin.size() > 4 && std::memcmp(C.Cubin.data(), "\x7f" "ELF", 4) == 0;
  } catch (const CompileError &E) {
    FAIL_CHECK(E.what());
    return false;
  }
}

} // namespace

TEST_CASE("hooks: the gradient hooks compile with NVRTC for sm_80 and sm_90a",
          "[autodiff][nvrtc]") {
  for (GpuArch Arch : {GpuArch::Sm80, GpuArch::Sm90a}) {
    KernelSpec Spec;
    Spec.Arch = Arch;
    Spec.HeadDim = Spec.HeadDimV = 64;
    CHECK(compiles(generate(examples::alibiLearnable(), Spec)));
    CHECK(compiles(generate(examples::softcapLearnable(), Spec)));
  }
}

TEST_CASE("hooks: eager selects of scalar and per-head inputs, float and "
          "int, compile with NVRTC",
          "[autodiff][nvrtc]") {
  // A float scalar on the diagonal, and an int per-head offset selected
  // by position then added to the score: select_eager<float> and
  // select_eager<int>, in the forward and the derived backward.
  dsl::AttentionDef D = examples::mha();
  D.name = "eager_selects";
  D.inputs.declare("pen", ir::InputShape::Scalar);
  D.inputs.declare("off", ir::InputShape::PerHead, ir::InputType::I32);
  D.score_mod = [](dsl::SymbolScalar s, const dsl::CustomInputs &in, dsl::SymbolScalar,
                   dsl::SymbolScalar, dsl::SymbolScalar q, dsl::SymbolScalar k) {
    return s * 0.125 + dsl::select(k == q, in["pen"], 0.0) +
           dsl::select(k < q, in["off"], k - k);
  };
  for (GpuArch Arch : {GpuArch::Sm80, GpuArch::Sm90a}) {
    KernelSpec Spec;
    Spec.Arch = Arch;
    Spec.HeadDim = Spec.HeadDimV = 64;
    KernelSource S = generate(D, Spec);
    CHECK_THAT(S.Source, Catch::Matchers::Contains("attnc::select_eager<float>("));
    CHECK_THAT(S.Source, Catch::Matchers::Contains("attnc::select_eager<int>("));
    CHECK(compiles(S));
  }
}

TEST_CASE("hooks: derived backwards compile with NVRTC without warnings",
          "[autodiff][nvrtc]") {
  // The seed examples with their written backward replaced by the derived
  // one (retention's has selects, comparisons and a NaN test).
  for (const dsl::AttentionDef &D : {examples::mha(), examples::retention()}) {
    CompiledDefinition Def = withDerivedBackward(compile(D));
    REQUIRE(Def.Graph->decls().BackwardDerived);
    for (GpuArch Arch : {GpuArch::Sm80, GpuArch::Sm90a}) {
      KernelSpec Spec;
      Spec.Arch = Arch;
      Spec.HeadDim = Spec.HeadDimV = 64;
      KernelSource S = codegen::generateForward(Def, Spec);
      CHECK_THAT(S.Source, Catch::Matchers::Contains("float backward("));
      CHECK(compiles(S));
    }
  }
}

TEST_CASE("hooks: factors that may be inf or NaN at a masked element are "
          "guarded by `valid`",
          "[autodiff][codegen][nvrtc]") {
  // w scales the raw score on the diagonal (its factor is the score: data,
  // unbounded) and p a log of the distance behind the query (NaN above the
  // diagonal, where the causal mask drops the element and dS is 0).
  using namespace dsl;
  AttentionDef D("guarded_grads");
  D.inputs.declare("w", ir::InputShape::PerHead).requiresGrad();
  D.inputs.declare("p", ir::InputShape::Scalar).requiresGrad();
  D.score_mod = [](SymbolScalar s, const CustomInputs &in, SymbolScalar,
                   SymbolScalar, SymbolScalar q, SymbolScalar k) {
    SymbolScalar scaled = s * in.head_dim().rsqrt();
    SymbolScalar own = k == q;
    SymbolScalar diag = select(own, in["w"] * s, 0.0);
    SymbolScalar behind = (q - k + 1.0).log();
    SymbolScalar far = in["p"] * behind;
    return scaled + diag + far;
  };
  D.mask_mod = masks::causal();
  D.online_func = onlineSoftmax(/*WrittenBackward=*/false);
  CompiledDefinition Def = compile(D);
  KernelSpec Spec;
  Spec.Arch = GpuArch::Sm90a;
  Spec.HeadDim = Spec.HeadDimV = 64;
  KernelSource S = codegen::generateForward(Def, Spec);
  std::string I = functionText(S, "__device__ static __forceinline__ void "
                                  "add_input_grads(");
  REQUIRE_FALSE(I.empty());
  CHECK_THAT(I, Catch::Matchers::Contains("gacc[0] = valid && v"));
  CHECK_THAT(I, Catch::Matchers::Contains("? fmaf(ds, score, gacc[0]) : gacc[0];"));
  CHECK_THAT(I, Catch::Matchers::Contains("gacc[1] = fmaf(ds, valid ? v"));
  for (GpuArch Arch : {GpuArch::Sm80, GpuArch::Sm90a}) {
    KernelSpec B;
    B.Arch = Arch;
    B.HeadDim = B.HeadDimV = 64;
    CHECK(compiles(codegen::generateBackward(Def, B)));
  }
  CHECK(compiles(codegen::generateBackwardSm90(
      Def, Spec, codegen::BwdSm90Config::defaultFor(64, 64))));
}
