// NVRTC compiles the generated linear-attention kernels: every linear example
// x f16/bf16 x forward/backward/decode step/packed forward/packed backward,
// for sm_80 and sm_90a (one test case per example so that ctest -j spreads
// them).
#include "Examples.h"

#include "attn/Pipeline.h"
#include "attn/codegen/LinearCodegen.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/Errors.h"

#include <catch2/catch.hpp>

#include <cstring>

using namespace attn;
using codegen::LinearKernelSpec;

namespace {

/// The examples' head dims differ so that D64/128/256 and D != DV are all
/// compiled: mamba2 d128/64 (the shape), simple_gla d64/128,
/// retention_linear d256/128.
void compileLinear(const dsl::LinearAttentionDef &D, int HD, int HDV) {
  CompiledDefinition Def = compile(D);
  unsigned Compiled = 0;
  for (DType T : {DType::F16, DType::BF16})
    for (GpuArch Arch : {GpuArch::Sm80, GpuArch::Sm90a})
      for (int Dir : {0, 1, 2, 3, 4}) { // forward, backward, decode step, packed
        LinearKernelSpec S;
        S.Dtype = T;
        S.HeadDim = HD;
        S.HeadDimV = HDV;
        S.Arch = Arch;
        S.Config = codegen::LinearConfig::defaultFor(HD, HDV, Arch);
        codegen::KernelSource Src =
            Dir == 0   ? codegen::generateLinearForward(Def, S)
            : Dir == 1 ? codegen::generateLinearBackward(Def, S)
            : Dir == 2 ? codegen::generateLinearDecode(Def, S)
            : Dir == 3 ? codegen::generateLinearForwardVarlen(Def, S)
                       : codegen::generateLinearBackwardVarlen(Def, S);
        INFO("kernel " << Src.Key);
        try {
          runtime::CompiledCubin C = runtime::compileToCubin(Src);
          CHECK(C.Cubin.size() > 4);
          CHECK(std::memcmp(C.Cubin.data(), "\x7f" "ELF", 4) == 0);
        } catch (const CompileError &E) {
          FAIL_CHECK(E.what());
        }
        ++Compiled;
      }
  CHECK(Compiled == 20);
}

} // namespace

TEST_CASE("mamba2 linear kernels compile", "[nvrtc][linear]") {
  compileLinear(examples::mamba2(), 128, 64);
}

TEST_CASE("simple_gla linear kernels compile", "[nvrtc][linear]") {
  compileLinear(examples::simpleGla(), 64, 128);
}

// D = DV = 128 (the packed backward's issue shape): the chunk gradients
// with state pairs at 8 warps and slices of 128 on sm_90a, without on sm_80.
TEST_CASE("simple_gla d128 linear kernels compile", "[nvrtc][linear]") {
  compileLinear(examples::simpleGla(), 128, 128);
}

TEST_CASE("retention_linear linear kernels compile", "[nvrtc][linear]") {
  compileLinear(examples::retentionLinear(), 256, 128);
}
