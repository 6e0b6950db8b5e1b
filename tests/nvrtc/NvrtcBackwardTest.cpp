// The generated backward (bwd_sm80) of every transformer example compiles
// with NVRTC; its configuration and spec checks (CPU only).
#include "Examples.h"
#include "NvrtcPtx.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/codegen/Arch.h"
#include "attn/codegen/Codegen.h"
#include "attn/dsl/Registry.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/Errors.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

using namespace attn;
using namespace attn::dsl;
using attn::nvrtctest::kernelSpec;
using codegen::BwdConfig;
using codegen::KernelSpec;
using Catch::Matchers::Contains;

namespace {

/// Generates and compiles the backward; a failure names the key and carries
/// NVRTC's log. Returns the log (warnings).
std::string compilesToCubin(const CompiledDefinition &Def, const KernelSpec &Spec,
                            std::optional<BwdConfig> Config = std::nullopt) {
  codegen::KernelSource Src =
      Config ? codegen::generateBackward(Def, Spec, *Config)
             : codegen::generateBackward(Def, Spec);
  INFO("kernel " << Src.Key);
  runtime::CompiledCubin C;
  try {
    C = runtime::compileToCubin(Src);
  } catch (const CompileError &E) {
    FAIL_CHECK(E.what());
    return "";
  }
  CHECK(C.Cubin.size() > 4);
  CHECK(std::memcmp(C.Cubin.data(), "\x7f"
                                    "ELF",
                    4) == 0);
  return C.Log;
}

/// Each example: sm_90a in f16 and sm_80 in bf16, head dims 64 and 128 —
/// every dtype, head dim and arch appears while CI (two cores) compiles
/// four kernels an example rather than eight. The default there is the
/// fused dQ mode; the two-kernel mode twice more: f16 d128 on sm_90a and
/// bf16 d64 on sm_80.
void compileMatrix(const DefinitionBase &D) {
  CompiledDefinition Def = compile(D);
  for (auto [T, Arch] : {std::pair{DType::F16, GpuArch::Sm90a}, {DType::BF16, GpuArch::Sm80}})
    for (int HD : {64, 128})
      compilesToCubin(Def, kernelSpec(T, HD, HD, Arch));
  BwdConfig TwoKernels = BwdConfig::parse("kv64x128w8.q128x32w4.s2");
  compilesToCubin(Def, kernelSpec(DType::F16, 128, 128, GpuArch::Sm90a), TwoKernels);
  compilesToCubin(Def, kernelSpec(DType::BF16, 64, 64, GpuArch::Sm80), TwoKernels);
}

} // namespace

TEST_CASE("nvrtc bwd: mha's backward compiles", "[nvrtc][bwd][mha]") {
  compileMatrix(examples::mha());
}

TEST_CASE("nvrtc bwd: sigmoid_attn's backward compiles",
          "[nvrtc][bwd][sigmoid_attn]") {
  compileMatrix(examples::sigmoidAttn());
}

TEST_CASE("nvrtc bwd: relu_attn's backward compiles", "[nvrtc][bwd][relu_attn]") {
  compileMatrix(examples::reluAttn());
}

TEST_CASE("nvrtc bwd: retention's backward compiles",
          "[nvrtc][bwd][retention]") {
  compileMatrix(examples::retention());
}

// One kernel a mask example (they differ from mha only in the mask): the
// fused and the two-kernel modes, both archs and dtypes between them.
TEST_CASE("nvrtc bwd: the mask examples' backward compiles without warnings",
          "[nvrtc][bwd][masks]") {
  CHECK(compilesToCubin(compile(examples::mhaDocument()),
                        kernelSpec(DType::F16, 128, 128, GpuArch::Sm80))
            .empty());
  CHECK(compilesToCubin(compile(examples::mhaPrefixLm()),
                        kernelSpec(DType::BF16, 64, 64, GpuArch::Sm90a))
            .empty());
  CHECK(compilesToCubin(compile(examples::mhaSlidingWindow()),
                        kernelSpec(DType::F16, 128, 128, GpuArch::Sm80),
                        BwdConfig::parse("kv64x128w8.q128x32w4.s2"))
            .empty());
  CHECK(compilesToCubin(compile(examples::mhaChunked()),
                        kernelSpec(DType::BF16, 128, 128, GpuArch::Sm80))
            .empty());
}

TEST_CASE("nvrtc bwd: head dims 64/128 and 128/256, and the 99 KiB archs",
          "[nvrtc][bwd][dims]") {
  CompiledDefinition Def = compile(examples::mha());
  compilesToCubin(Def, kernelSpec(DType::F16, 64, 128, GpuArch::Sm90a));
  compilesToCubin(Def, kernelSpec(DType::BF16, 128, 256, GpuArch::Sm80));
  compilesToCubin(Def, kernelSpec(DType::F16, 128, 128, GpuArch::Sm86));
  // The two-kernel mode at 64/128, the fused dQ mode with 32-row steps
  // (Pᵀ and dSᵀ in registers, dSᵀ stored for dQ), and the 99 KiB archs'
  // tiles.
  compilesToCubin(Def, kernelSpec(DType::F16, 64, 128, GpuArch::Sm90a),
                  BwdConfig::parse("kv64x128w8.q128x32w4.s2"));
  compilesToCubin(Def, kernelSpec(DType::BF16, 128, 256, GpuArch::Sm80),
                  BwdConfig::parse("kv32x128w8.fused.s2"));
  compilesToCubin(Def, kernelSpec(DType::F16, 128, 128, GpuArch::Sm86),
                  BwdConfig::parse("kv32x64w4.fused.s2"));
}

TEST_CASE("nvrtc bwd: learnable inputs (input gradients) compile without "
          "warnings",
          "[nvrtc][bwd][inputs]") {
  for (const AttentionDef &D :
       {examples::alibiLearnable(), examples::softcapLearnable()}) {
    CompiledDefinition Def = compile(D);
    for (std::optional<BwdConfig> C :
         {std::optional<BwdConfig>{},
          std::optional{BwdConfig::parse("kv64x128w8.q128x32w4.s2")}}) {
      std::string Log = compilesToCubin(Def, kernelSpec(DType::F16, 128, 128, GpuArch::Sm80), C);
      INFO(Log);
      CHECK(Log.empty());
    }
  }
}

TEST_CASE("nvrtc bwd: the source has the entries and the host's constants",
          "[nvrtc][bwd][source]") {
  CompiledDefinition Def = compile(examples::alibiLearnable());
  KernelSpec S = kernelSpec(DType::BF16, 128, 128, GpuArch::Sm90a);
  // The two-kernel mode: a dQ kernel with its own tiles.
  BwdConfig C = BwdConfig::parse("kv64x128w8.q128x32w4.s2");
  codegen::KernelSource Src = codegen::generateBackward(Def, S, C);
  CHECK(Src.Key == "alibi_learnable.bwd_sm80.bf16.d128x128.sm_90a."
                   "kv64x128w8.q128x32w4.s2");
  for (const std::string &E : Src.Entries)
    CHECK_THAT(Src.Source, Contains("attnc_bwd") && Contains(E + "("));
  CHECK_THAT(Src.Source,
             Contains("DkDv::kSmemBytes == " +
                      std::to_string(C.dkdvSharedBytes(128, 128, 1, true))));
  CHECK_THAT(Src.Source, Contains("Dq::kSmemBytes == " +
                                  std::to_string(C.dqSharedBytes(128, 128))));
  CHECK_THAT(Src.Source, Contains("kNumInputGrads == 2"));
  CHECK_THAT(Src.Source, Contains("#define ATTNC_BWD_FUSED_DQ 0"));
  CHECK_THAT(Src.Source, Contains("kSplitQueries = true"));

  // The fused dQ mode, the default for DV <= 128 on sm_80 and sm_90a: no dQ
  // kernel, a semaphore reset and the sums' conversion instead.
  BwdConfig F = BwdConfig::parse("kv64x128w8.fused.s2");
  CHECK(BwdConfig::defaultFor(128, 128, GpuArch::Sm90a).str() == F.str());
  CHECK(BwdConfig::defaultFor(64, 64, GpuArch::Sm80).str() == F.str());
  codegen::KernelSource FS = codegen::generateBackward(Def, S);
  CHECK(FS.Key == "alibi_learnable.bwd_sm80.bf16.d128x128.sm_90a.kv64x128w8.fused.s2");
  for (const std::string &E : FS.Entries)
    CHECK_THAT(FS.Source, Contains("attnc_bwd") && Contains(E + "("));
  CHECK(std::find(FS.Entries.begin(), FS.Entries.end(), "attnc_bwd_dq") ==
        FS.Entries.end());
  for (const char *E : {"attnc_bwd_dq_init", "attnc_bwd_dq_convert"})
    CHECK(std::find(FS.Entries.begin(), FS.Entries.end(), E) != FS.Entries.end());
  CHECK_THAT(FS.Source, Contains("#define ATTNC_BWD_FUSED_DQ 1"));
  CHECK_THAT(FS.Source,
             Contains("DkDv::kSmemBytes == " +
                      std::to_string(F.dkdvSharedBytes(128, 128, 1, true))));
  // 64-row steps use the split layout, whose dSᵀ tile the fused mode
  // reads: no more shared memory. With 32-row steps (Pᵀ and dSᵀ in
  // registers) the fused mode adds the dSᵀ tile.
  CHECK(F.dkdvSharedBytes(128, 128, 1, true) == C.dkdvSharedBytes(128, 128, 1, true));
  BwdConfig C32{32, 128, 8, 64, 64, 4, 2}, F32 = BwdConfig::fused(32, 128, 8, 2);
  CHECK_FALSE(C32.splitsQueries());
  CHECK(F32.dkdvSharedBytes(128, 256, 1, true) ==
        C32.dkdvSharedBytes(128, 256, 1, true) + 32 * 128 * 2);
}

TEST_CASE("bwd config: str and parse round-trip; bad text is refused",
          "[bwd][config]") {
  BwdConfig C{32, 64, 4, 64, 32, 4, 3};
  CHECK(C.str() == "kv32x64w4.q64x32w4.s3");
  BwdConfig P = BwdConfig::parse(C.str());
  CHECK(P.str() == C.str());
  CHECK_THROWS_WITH(BwdConfig::parse("m64n64w4s2"),
                    Contains("expected kv<M>x<N>w<warps>"));
  CHECK_THROWS_WITH(BwdConfig::parse("kv64x128w8.q128x64w8.s2 "),
                    Contains("backward config"));

  BwdConfig F = BwdConfig::parse("kv32x128w4.fused.s3");
  CHECK(F.FusedDq);
  CHECK(F.str() == "kv32x128w4.fused.s3");
  // The dQ partial sums use the dK/dV tiles.
  CHECK((F.QBlockM == 32 && F.QBlockN == 128 && F.QWarps == 4 && F.Stages == 3));
  CHECK(BwdConfig::parse(F.str()).str() == F.str());
  CHECK_FALSE(BwdConfig::parse("kv32x64w4.q64x32w4.s3").FusedDq);
  for (const char *Bad : {"kv64x128w8.fused.s2 ", "kv64x128w8.fused", "kv64x128w8.fused.",
                          "kv64x128w8.fusedq.s2", "kv64x128w8.fused.s02"})
    CHECK_THROWS_WITH(BwdConfig::parse(Bad),
                      Contains("or kv<M>x<N>w<warps>.fused.s<stages>"));
}

TEST_CASE("bwd config: shared memory formulas", "[bwd][config]") {
  BwdConfig C; // kv64x128w8.q128x64w8.s2
  CHECK(C.splitsQueries());
  // K, V (128 x 128 each) + 2 x (Q, dO 64 x 128 each + 64 rows x 2 floats)
  // + the split layout's Pᵀ and dSᵀ (128 x 64 each).
  CHECK(C.dkdvSharedBytes(128, 128, 1, true) ==
        2 * 128 * 128 * 2 + 2 * (2 * 64 * 128 * 2 + 512) + 2 * 128 * 64 * 2);
  // Without finals or doosum (sigmoid, relu) there is no row data.
  CHECK(C.dkdvSharedBytes(64, 64, 0, false) ==
        2 * 128 * 64 * 2 + 2 * (2 * 64 * 64 * 2) + 2 * 128 * 64 * 2);
  // 32-row steps keep Pᵀ and dSᵀ in registers.
  BwdConfig C32{32, 128, 8, 64, 64, 4, 2};
  CHECK_FALSE(C32.splitsQueries());
  CHECK(C32.dkdvSharedBytes(64, 64, 0, false) == 2 * 128 * 64 * 2 + 2 * (2 * 32 * 64 * 2));
  CHECK(C.dqSharedBytes(128, 256) == 128 * 128 * 2 + 128 * 256 * 2 +
                                         2 * (64 * 128 * 2 + 64 * 256 * 2));
}

TEST_CASE("bwd spec: the defaults are valid for every supported head dim "
          "and arch",
          "[bwd][config]") {
  for (GpuArch Arch : {GpuArch::Sm80, GpuArch::Sm86, GpuArch::Sm89, GpuArch::Sm90a})
    for (auto [D, DV] : {std::pair{64, 64}, {128, 128}, {64, 128}, {128, 256}}) {
      INFO(archName(Arch).str() << " d" << D << "/" << DV);
      BwdConfig C = BwdConfig::defaultFor(D, DV, Arch);
      CHECK_NOTHROW(codegen::validateBackward(kernelSpec(DType::F16, D, DV, Arch), C,
                                              2, true));
    }
}

TEST_CASE("bwd spec: unsupported head dims and configurations are refused",
          "[bwd][config]") {
  BwdConfig C;
  auto Refused = [](KernelSpec S, BwdConfig C) {
    try {
      codegen::validateBackward(S, C, 1, true);
    } catch (const UserError &E) {
      return std::string(E.what());
    }
    return std::string("accepted");
  };
  CHECK_THAT(Refused(kernelSpec(DType::F16, 256, 256, GpuArch::Sm90a), C),
             Contains("head_dim 256 is not supported by bwd_sm80; expected 64 or 128"));
  CHECK_THAT(Refused(kernelSpec(DType::F16, 128, 192, GpuArch::Sm90a), C),
             Contains("head_dim_v 192"));
  CHECK_THAT(Refused(kernelSpec(DType::F16, 64, 256, GpuArch::Sm90a),
                     BwdConfig::defaultFor(64, 256, GpuArch::Sm90a)),
             Contains("head_dim_v 256 is supported by bwd_sm80 with head_dim 128"));
  BwdConfig Warps = C;
  Warps.QWarps = 2;
  CHECK_THAT(Refused(kernelSpec(DType::F16, 128, 128, GpuArch::Sm90a), Warps),
             Contains("q warps must be 4 or 8"));
  BwdConfig Keys = C;
  Keys.KvBlockN = 64; // 8 warps need 128 keys
  CHECK_THAT(Refused(kernelSpec(DType::F16, 128, 128, GpuArch::Sm90a), Keys),
             Contains("multiple of 16 x warps (128)"));
  BwdConfig Regs = C; // 128/256 with 64-row steps: 256 accumulator floats
  CHECK_THAT(Refused(kernelSpec(DType::F16, 128, 256, GpuArch::Sm90a), Regs),
             Contains("256 accumulator floats"));
  // The default 128/128 tiles need 161 KiB: more than sm_86 has.
  CHECK_THAT(Refused(kernelSpec(DType::F16, 128, 128, GpuArch::Sm86), C),
             Contains("dK/dV kernel needs 164864 bytes of shared memory"));
  BwdConfig Stages = C;
  Stages.Stages = 5;
  CHECK_THAT(Refused(kernelSpec(DType::F16, 64, 64, GpuArch::Sm90a), Stages),
             Contains("stages must be 2, 3 or 4"));

  // The fused dQ mode.
  CHECK(Refused(kernelSpec(DType::F16, 128, 128, GpuArch::Sm90a),
                BwdConfig::parse("kv64x128w8.fused.s2")) == "accepted");
  CHECK(Refused(kernelSpec(DType::F16, 128, 128, GpuArch::Sm80),
                BwdConfig::parse("kv64x128w8.fused.s2")) == "accepted");
  // 48 rows are three m16 tiles: they split (one row group), but the
  // transposed dS tile's rows are 32 or whole 64s.
  CHECK_THAT(Refused(kernelSpec(DType::F16, 128, 128, GpuArch::Sm90a),
                     BwdConfig::parse("kv48x128w8.fused.s2")),
             Contains("a query step of 32 or a multiple of 64"));
  // 16 rows x d64 over 8 warps: one n8 tile a warp, not a pair.
  CHECK_THAT(Refused(kernelSpec(DType::F16, 64, 64, GpuArch::Sm90a),
                     BwdConfig::parse("kv16x128w8.fused.s2")),
             Contains("16 x 64 dQ tile over 8 warps"));
  BwdConfig Mixed = BwdConfig::parse("kv64x128w8.fused.s2");
  Mixed.QBlockM = 128;
  CHECK_THAT(Refused(kernelSpec(DType::F16, 128, 128, GpuArch::Sm90a), Mixed),
             Contains("the dQ tiles are the dK/dV kernel's"));
  // 161 KiB with the Pᵀ and dSᵀ tiles: more than the 99 KiB archs have.
  CHECK_THAT(Refused(kernelSpec(DType::F16, 128, 128, GpuArch::Sm86),
                     BwdConfig::parse("kv64x128w8.fused.s2")),
             Contains("dK/dV kernel needs 164864 bytes"));
  // 64 rows x d128 over 4 warps: 64 dQ floats a thread in place of Sᵀ and
  // dPᵀ (the sum is added, never loaded back), 192 in all.
  CHECK(Refused(kernelSpec(DType::F16, 128, 128, GpuArch::Sm90a),
                BwdConfig::parse("kv64x64w4.fused.s2")) == "accepted");
  // 128-row steps at d128: Sᵀ and dPᵀ of 128 rows beside dK and dV.
  CHECK_THAT(Refused(kernelSpec(DType::F16, 128, 128, GpuArch::Sm90a),
                     BwdConfig::parse("kv128x128w8.fused.s2")),
             Contains("256 accumulator floats"));
}

TEST_CASE("bwd codegen: what it cannot generate", "[bwd][config]") {
  Registry R;
  examples::registerExamples(R);
  CHECK_THROWS_AS(codegen::generateBackward(compile(R.get("mamba2")),
                                            kernelSpec(DType::F16, 64, 64, GpuArch::Sm80)),
                  NotSupportedYet);
  // A learnable per-row input: its gradient is not computed by bwd_sm80.
  AttentionDef D = examples::mha();
  D.name = "row_bias_learnable";
  D.inputs.declare("row_bias", InputShape::PerRow).requiresGrad();
  D.score_mod = [](SymbolScalar s, const CustomInputs &in, SymbolScalar,
                   SymbolScalar, SymbolScalar, SymbolScalar) {
    return s * in.head_dim().rsqrt() + in["row_bias"];
  };
  CHECK_THROWS_WITH(
      codegen::generateBackward(compile(D), kernelSpec(DType::F16, 64, 64, GpuArch::Sm80)),
      Contains("the gradient of per_row input 'row_bias'"));
}
