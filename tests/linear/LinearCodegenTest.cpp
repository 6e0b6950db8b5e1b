// Linear-attention code generation: configurations and their checks, keys
// and entries, and the mods' derivatives the autodiff rules generate.
#include "Examples.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/codegen/Arch.h"
#include "attn/codegen/LinearCodegen.h"

#include <catch2/catch.hpp>

using namespace attn;
using codegen::LinearConfig;
using codegen::LinearKernelSpec;

namespace {

LinearKernelSpec spec(int D, int DV, GpuArch Arch = GpuArch::Sm80) {
  LinearKernelSpec S;
  S.HeadDim = D;
  S.HeadDimV = DV;
  S.Arch = Arch;
  S.Config = LinearConfig::defaultFor(D, DV, Arch);
  return S;
}

} // namespace

TEST_CASE("linear configs print, parse and check", "[linear]") {
  LinearConfig C = LinearConfig::parse("c32v128w8b16");
  CHECK(C.Chunk == 32);
  CHECK(C.SliceV == 128);
  CHECK(C.Warps == 8);
  CHECK(C.BwdWarps == 16);
  CHECK(C.str() == "c32v128w8b16");
  CHECK_THROWS_WITH(LinearConfig::parse("m64n64w4s2"),
                    Catch::Contains("expected c<chunk>v<value slice>"));
  CHECK_THROWS_WITH(LinearConfig::parse("c64v64w4b8x"),
                    Catch::Contains("expected c<chunk>"));
  // Every default is valid for every supported pair of head dims and arch.
  for (int D : {64, 128, 256})
    for (int DV : {64, 128, 192, 256, 512})
      for (GpuArch Arch : {GpuArch::Sm80, GpuArch::Sm90a}) {
        INFO("d" << D << "/" << DV << " " << archName(Arch).str());
        CHECK_NOTHROW(spec(D, DV, Arch).validate());
      }
}

TEST_CASE("linear kernel specs name what is wrong", "[linear]") {
  LinearKernelSpec S = spec(96, 64);
  CHECK_THROWS_WITH(S.validate(), Catch::Contains("head_dim 96"));
  S = spec(64, 96);
  CHECK_THROWS_WITH(S.validate(), Catch::Contains("head_dim_v 96"));
  S = spec(64, 64);
  S.Config = LinearConfig::parse("c48v64w4b4");
  CHECK_THROWS_WITH(S.validate(), Catch::Contains("chunk 48"));
  S.Config = LinearConfig::parse("c128v64w4b8");
  CHECK_THROWS_WITH(S.validate(),
                    Catch::Contains("must be a multiple of the chunk's m16 "
                                    "row tiles (8)"));
  S.Config = LinearConfig::parse("c64v64w8b4");
  CHECK_THROWS_WITH(S.validate(),
                    Catch::Contains("forward warps (8) must split head_dim 64"));
  S = spec(128, 192);
  S.Config.SliceV = 128;
  CHECK_THROWS_WITH(S.validate(),
                    Catch::Contains("not a multiple of the value slice 128"));
  // Shared memory: head dim 256 on an sm_86 does not fit the forward.
  S = spec(256, 256, GpuArch::Sm86);
  CHECK_THROWS_WITH(S.validate(), Catch::Contains("bytes of shared memory"));
}

TEST_CASE("linear shared memory and staging follow the arch", "[linear]") {
  // d128: the staged forward fits twice in an sm_90a's 227 KiB (the
  // default there: chunks of 32, slices of 128).
  codegen::LinearSmem S = codegen::linearSharedBytes(spec(128, 128, GpuArch::Sm90a));
  CHECK(S.FwdStaged);
  CHECK(S.Fwd == 2 * 2 * 32 * (2 * 128 + 128) + 2 * 128 * 128 + 4 * (3 * 32 + 4));
  LinearKernelSpec Narrow = spec(128, 128, GpuArch::Sm90a);
  Narrow.Config = LinearConfig::parse("c64v64w4b8");
  S = codegen::linearSharedBytes(Narrow);
  CHECK(S.Fwd == 2 * 2 * 64 * (2 * 128 + 64) + 2 * 128 * 64 + 4 * (3 * 64 + 4));
  // The backward at d128 (c32v128w4b8): state passes over 64 rows, staged;
  // the chunk gradients hold H and dH and the state pairs' neighbour tiles
  // (115248 bytes: two CTAs an SM on sm_90a, with 1 KiB reserved each, in
  // 233472) and cap their registers for two CTAs.
  S = codegen::linearSharedBytes(spec(128, 128, GpuArch::Sm90a));
  CHECK(S.States == 2 * 2 * 32 * (64 + 128) + 2 * 64 * 128 + 4 * (3 * 32 + 4));
  CHECK(S.GradsTwoStates);
  CHECK(S.GradsPairs);
  CHECK(S.Grads == 2 * (2 * 32 * 128 + 2 * 32 * 128 + 2 * 128 * 128) + 4 * 32 +
                       2 * (32 * 128 + 32 * 128) + 4 * (3 * 32 + 4 + 8));
  CHECK(2 * (S.Grads + 1024) <= 233472);
  CHECK(S.GradsMinBlocks == 2);
  // No state pairs with several value slices (d128/256 at slices of 128)
  // or where a warp owns more than 16 state rows (d256 at 8 warps).
  CHECK_FALSE(codegen::linearSharedBytes(spec(128, 256, GpuArch::Sm90a)).GradsPairs);
  CHECK_FALSE(codegen::linearSharedBytes(spec(256, 128, GpuArch::Sm90a)).GradsPairs);
  // On sm_80 the d128 chunk gradients keep one state tile: no pairs.
  CHECK_FALSE(codegen::linearSharedBytes(spec(128, 128, GpuArch::Sm80)).GradsPairs);
  // d256 on sm_80 (c64v128w8b8): one state tile, H then dH, 164912 bytes
  // of the 166912 there.
  S = codegen::linearSharedBytes(spec(256, 256, GpuArch::Sm80));
  CHECK_FALSE(S.GradsTwoStates);
  CHECK(S.Grads ==
        2 * (2 * 64 * 256 + 2 * 64 * 128 + 256 * 128) + 4 * 64 + 4 * (3 * 64 + 4 + 8));
  CHECK(S.GradsMinBlocks == 1);
}

TEST_CASE("linear defaults: 128-wide value slices where DV and shared memory allow",
          "[linear]") {
  CHECK(LinearConfig::defaultFor(128, 128, GpuArch::Sm90a).str() == "c32v128w4b8");
  CHECK(LinearConfig::defaultFor(64, 256, GpuArch::Sm86).str() == "c32v128w4b4");
  CHECK(LinearConfig::defaultFor(256, 512, GpuArch::Sm90a).str() == "c64v128w8b8");
  // 164912 bytes for the chunk gradients: within sm_80's 163 KiB, not
  // sm_86's 99 KiB.
  CHECK(LinearConfig::defaultFor(256, 512, GpuArch::Sm80).str() == "c64v128w8b8");
  CHECK(LinearConfig::defaultFor(256, 512, GpuArch::Sm86).str() == "c64v64w8b8");
  // DV = 64 or 192: no 128-wide slices.
  CHECK(LinearConfig::defaultFor(128, 64, GpuArch::Sm90a).str() == "c32v64w4b8");
  CHECK(LinearConfig::defaultFor(128, 192, GpuArch::Sm90a).str() == "c32v64w4b8");
}

TEST_CASE("linear kernels have keys, entries and the mods", "[linear]") {
  CompiledDefinition C = compile(examples::mamba2());
  LinearKernelSpec S = spec(128, 64, GpuArch::Sm90a);
  S.Dtype = DType::BF16;
  codegen::KernelSource F = codegen::generateLinearForward(C, S);
  CHECK(F.Key == "mamba2.linear_fwd.bf16.d128x64.sm_90a.c32v64w4b8");
  CHECK(F.Entries == std::vector<std::string>{"attnc_linear_fwd"});
  CHECK(F.Arch == GpuArch::Sm90a);
  CHECK_THAT(F.Source, Catch::Contains("#include \"attnc/linear_chunk_scan.cuh\""));
  CHECK_THAT(F.Source, Catch::Contains("(x * in.load_in_1_dt(b, h, t, 0))"));
  CHECK_THAT(F.Source, Catch::Contains("kReadsDecay = false"));
  CHECK_THAT(F.Source, Catch::Contains("kVModReadsInputs = true"));
  CHECK_THAT(F.Source, Catch::Contains("attnc::bf16, 128, 64,"));
  CHECK_THAT(F.Source, !Catch::Contains("v_mod_dx"));
  codegen::KernelSource B = codegen::generateLinearBackward(C, S);
  CHECK(B.Key == "mamba2.linear_bwd.bf16.d128x64.sm_90a.c32v64w4b8");
  CHECK(B.Entries.size() == 7);
  CHECK(B.Entries[1] == "attnc_linear_bwd_chunk");
  // v = x·dt: ∂v/∂x = dt, ∂v/∂A = 0, ∂v/∂dt = x; g = dt·A: ∂g/∂A = dt,
  // ∂g/∂dt = A (inputs in declaration order: A, dt).
  CHECK_THAT(B.Source, Catch::Contains("v_mod_dx(const Inputs &in, float x, "
                                       "int b, int h, int t) {\n    (void)in; "
                                       "(void)x; (void)b; (void)h; (void)t;\n"
                                       "    return in.load_in_1_dt(b, h, t, 0);"));
  CHECK_THAT(B.Source, Catch::Contains("d[0] = 0.0f;\n    d[1] = x;"));
  CHECK_THAT(B.Source, Catch::Contains("d[0] = in.load_in_1_dt(b, h, t, 0);\n    "
                                       "d[1] = in.load_in_0_A(b, h, t, 0);"));
}

TEST_CASE("linear code generation refuses attention definitions", "[linear]") {
  CompiledDefinition C = compile(examples::mha());
  CHECK_THROWS_AS(codegen::generateLinearForward(C, spec(64, 64)), UserError);
  CHECK_THROWS_WITH(codegen::generateLinearBackward(C, spec(64, 64)),
                    Catch::Contains("is not linear attention"));
}
