// The head-dim compile matrix: fwd_sm80's default kernel for every pair of
// codegen::ForwardHeadDimPairs, compiled with NVRTC for sm_80 and sm_90a.
#include "Examples.h"

#include "attn/Pipeline.h"
#include "attn/codegen/Codegen.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/Errors.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <utility>

using namespace attn;
using codegen::ForwardHeadDimPairs;
using codegen::FwdConfig;
using codegen::KernelSpec;

namespace {

/// Generates mha's fwd_sm80 kernel with the default configuration for
/// \p D / \p DV and compiles it to a CUBIN; a failure names the kernel key
/// and carries NVRTC's log, and the caller goes on with the next pair.
void compilesDefault(const CompiledDefinition &Def, DType T, int D, int DV,
                     GpuArch Arch) {
  KernelSpec Spec;
  Spec.Dtype = T;
  Spec.HeadDim = D;
  Spec.HeadDimV = DV;
  Spec.Arch = Arch;
  Spec.Config = FwdConfig::defaultFor(D, DV, Arch);
  codegen::KernelSource Src = codegen::generateForward(Def, Spec);
  INFO("kernel " << Src.Key);
  try {
    runtime::CompiledCubin C = runtime::compileToCubin(Src);
    CHECK(C.Cubin.size() > 4);
    CHECK(std::memcmp(C.Cubin.data(), "\x7f"
                                      "ELF",
                      4) == 0);
  } catch (const CompileError &E) {
    FAIL_CHECK(E.what());
  }
}

/// Every pair of the table in f16 for \p Arch (16 compiles).
void compileAllPairs(GpuArch Arch) {
  CompiledDefinition Def = compile(examples::mha());
  for (auto [D, DV] : ForwardHeadDimPairs)
    compilesDefault(Def, DType::F16, D, DV, Arch);
}

} // namespace

TEST_CASE("nvrtc: fwd_sm80 compiles every supported head-dim pair for sm_80",
          "[nvrtc][head_dims]") {
  compileAllPairs(GpuArch::Sm80);
}

TEST_CASE("nvrtc: fwd_sm80 compiles every supported head-dim pair for sm_90a",
          "[nvrtc][head_dims]") {
  compileAllPairs(GpuArch::Sm90a);
}

// bf16 differs from f16 only in the mma and conversion instructions; a few
// pairs with the 24-chunk rows of head dim 192 (the ragged tile loads) on
// each arch keep the matrix at 36 compiles.
TEST_CASE("nvrtc: fwd_sm80 compiles head dim 192 in bf16",
          "[nvrtc][head_dims]") {
  CompiledDefinition Def = compile(examples::mha());
  compilesDefault(Def, DType::BF16, 192, 192, GpuArch::Sm80);
  compilesDefault(Def, DType::BF16, 192, 64, GpuArch::Sm90a);
  compilesDefault(Def, DType::BF16, 128, 192, GpuArch::Sm80);
  compilesDefault(Def, DType::BF16, 256, 192, GpuArch::Sm90a);
}
