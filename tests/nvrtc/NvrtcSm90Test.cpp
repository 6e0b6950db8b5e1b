// The Hopper forward skeleton without a GPU: its configuration strings and
// checks, the generated source, NVRTC compiles of every transformer example
// for sm_90a with the PTX markers of TMA, mbarriers, wgmma and setmaxnreg,
// the tensor-map layouts, and the generated backend's choice of skeleton.
#include "Examples.h"
#include "NvrtcPtx.h"
#include "TmaMaps.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/codegen/Codegen.h"
#include "attn/runtime/Attention.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/DeviceLibrary.h"
#include "attn/runtime/Errors.h"

#include "llvm/Support/FileSystem.h"

#include <catch2/catch.hpp>
#include <nvrtc.h>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

using namespace attn;
using namespace attn::nvrtctest;
using codegen::KernelSpec;
using codegen::Sm90Config;

namespace {


/// f16 and bf16 x D = DV in {64, 128, 256} to PTX with the default
/// configuration, each carrying the Hopper instructions; and one CUBIN
/// (\p Cubin's dtype and head dim) whose NVRTC log has no wgmma
/// serialisation warning (ptxas serialises wgmma where it cannot prove the
/// accumulators untouched, a silent 2x slowdown).
void compileExample(const dsl::DefinitionBase &D, DType CubinType,
                    int CubinDim) {
  CompiledDefinition Def = compile(D);
  unsigned Compiled = 0;
  for (DType T : {DType::F16, DType::BF16})
    for (int Dim : {64, 128, 256}) {
      KernelSpec Spec = kernelSpec(T, Dim, Dim);
      Sm90Config C = Sm90Config::defaultFor(Dim, Dim);
      codegen::KernelSource Src = codegen::generateForwardSm90(Def, Spec, C);
      std::string Ptx = compileToPtx(Src);
      INFO("kernel " << Src.Key);
      CHECK(has(Ptx, "wgmma.mma_async.sync.aligned.m64n"));
      CHECK(has(Ptx, "cp.async.bulk.tensor.4d"));
      CHECK(has(Ptx, "mbarrier.try_wait.parity"));
      CHECK(has(Ptx, "setmaxnreg.inc.sync.aligned.u32 240"));
      CHECK(has(Ptx, T == DType::F16 ? ".f32.f16.f16" : ".f32.bf16.bf16"));
      ++Compiled;
    }
  CHECK(Compiled == 6);
  checkedWgmmaCubin(codegen::generateForwardSm90(
      Def, kernelSpec(CubinType, CubinDim, CubinDim),
      Sm90Config::defaultFor(CubinDim, CubinDim)));
}

} // namespace

TEST_CASE("sm90: configuration strings", "[sm90]") {
  Sm90Config C = Sm90Config::parse("sm90.m64n192s3");
  CHECK(C.BlockM == 64);
  CHECK(C.BlockN == 192);
  CHECK(C.Stages == 3);
  CHECK(C.str() == "sm90.m64n192s3");
  CHECK(C.threads() == 256);
  CHECK(Sm90Config{}.threads() == 384);
  for (const char *Bad : {"sm90", "m128n128w8s2", "sm90.m128n128",
                          "sm90.m128n128s2x", "sm90.m0128n128s2"})
    CHECK_THROWS_AS(Sm90Config::parse(Bad), UserError);
  CHECK(Sm90Config::names("sm90"));
  CHECK(Sm90Config::names("sm90.m128n128s2"));
  CHECK_FALSE(Sm90Config::names("sm80"));
  CHECK_FALSE(Sm90Config::names("m128n128w8s2"));
  CHECK_FALSE(Sm90Config::names(""));
  CHECK(Sm90Config::defaultFor(128, 128) == Sm90Config{128, 128, 3});
  CHECK(Sm90Config::defaultFor(64, 64) == Sm90Config{128, 128, 3});
  CHECK(Sm90Config::defaultFor(128, 256) == Sm90Config{128, 64, 3});
  // Three stages of 256/256 need 260 KiB: two.
  CHECK(Sm90Config::defaultFor(256, 256) == Sm90Config{128, 64, 2});
  CHECK(Sm90Config{} == Sm90Config::defaultFor(128, 128));
  // 1024 (alignment) + Q + stages x (K + V) + 256 (mbarriers), 2-byte elements.
  CHECK(Sm90Config{}.sharedBytes(128, 128) ==
        1024 + 2 * (128 * 128 + 3 * 128 * 256) + 256);
  CHECK(Sm90Config{128, 96, 2}.structuralError().find("block N") !=
        std::string::npos);
  CHECK(Sm90Config{192, 128, 2}.structuralError().find("block M") !=
        std::string::npos);
  CHECK(Sm90Config{128, 128, 5}.structuralError().find("stages") !=
        std::string::npos);
}

TEST_CASE("sm90: what the skeleton supports", "[sm90]") {
  CHECK(codegen::sm90Unsupported(kernelSpec(DType::F16, 128, 128), {}).empty());
  CHECK(codegen::sm90Unsupported(kernelSpec(DType::BF16, 192, 128),
                                 Sm90Config::defaultFor(192, 128))
            .empty());
  KernelSpec Sm80 = kernelSpec(DType::F16, 128, 128);
  Sm80.Arch = GpuArch::Sm80;
  CHECK(has(codegen::sm90Unsupported(Sm80, {}), "sm_90a"));
  CHECK(has(codegen::sm90Unsupported(kernelSpec(DType::F16, 96, 96), {}),
            "head_dim 96"));
  // 256/256 with 192-key blocks and 3 stages: far past 227 KiB.
  CHECK(has(codegen::sm90Unsupported(kernelSpec(DType::F16, 256, 256),
                                     Sm90Config{128, 192, 3}),
            "shared memory"));

  CompiledDefinition Mha = compile(examples::mha());
  codegen::KernelSource Src =
      codegen::generateForwardSm90(Mha, kernelSpec(DType::F16, 128, 128), {});
  CHECK(Src.Key == "mha.fwd_sm90.f16.d128x128.sm_90a.sm90.m128n128s3");
  CHECK(Src.Arch == GpuArch::Sm90a);
  CHECK(Src.Entries == std::vector<std::string>{"attnc_fwd",
                                                "attnc_block_classify",
                                                "attnc_block_compact"});
  CHECK(has(Src.Source, "attnc::FwdSm90<Variant, attnc::f16, 128, 128,\n"));
  CHECK(has(Src.Source, "__launch_bounds__(384, 1)"));
  CHECK(has(Src.Source, "const __grid_constant__ attnc::Sm90Maps maps"));
  CHECK(has(Src.Source, "static constexpr bool kHasMask = true;"));
  CHECK_THROWS_AS(codegen::generateForwardSm90(Mha, Sm80, {}), UserError);
  CompiledDefinition Linear = compile(examples::retentionLinear());
  CHECK_THROWS_AS(
      codegen::generateForwardSm90(Linear, kernelSpec(DType::F16, 128, 128), {}),
      NotSupportedYet);
}

TEST_CASE("sm90: tensor-map layouts order the outer dims by stride", "[sm90]") {
  // BSHD [2, 1000, 8, 128]: heads (stride 128) before seq (1024), then batch.
  runtime::TmaLayout L =
      runtime::tmaLayout(128, 1000, 8, 2, {1000 * 8 * 128, 128, 8 * 128}, 64);
  CHECK(L.Dims[0] == 128);
  CHECK(L.Dims[1] == 8);
  CHECK(L.Dims[2] == 1000);
  CHECK(L.Dims[3] == 2);
  CHECK(L.Strides[0] == 128 * 2);
  CHECK(L.Strides[1] == 8 * 128 * 2);
  CHECK(L.Strides[2] == 1000 * 8 * 128 * 2);
  CHECK(L.Box[0] == 64);
  CHECK(L.Box[1] == 1);
  CHECK(L.Box[2] == 64);
  CHECK(L.Box[3] == 1);
  CHECK(L.Pos == (2 | 1 << 2 | 3 << 4));
  // BHSD [2, 8, 1000, 64]: seq, heads, batch.
  L = runtime::tmaLayout(64, 1000, 8, 2, {8 * 1000 * 64, 1000 * 64, 64}, 128);
  CHECK(L.Dims[1] == 1000);
  CHECK(L.Box[1] == 128);
  CHECK(L.Pos == (1 | 2 << 2 | 3 << 4));
  // Extent-1 dims go last, with a stride past the others (any stride is
  // valid for them, even 0).
  L = runtime::tmaLayout(128, 300, 1, 1, {0, 0, 128}, 128);
  CHECK(L.Dims[1] == 300);
  CHECK(L.Pos == (1 | 2 << 2 | 3 << 4));
  CHECK(L.Strides[1] >= L.Strides[0] * 300);
  CHECK(L.Strides[2] >= L.Strides[0] * 300);
}

TEST_CASE("sm90: the generated backend picks the skeleton", "[sm90]") {
  char Path[] = "/tmp/attnc_sm90_cache_XXXXXX";
  REQUIRE(mkdtemp(Path) != nullptr);
  REQUIRE(setenv("ATTNC_CACHE_DIR", Path, 1) == 0);
  runtime::Signature Sig;
  Sig.HeadDim = Sig.HeadDimV = 64;
  Sig.Arch = GpuArch::Sm90a;
  auto KeyOf = [&](const runtime::Signature &S) {
    runtime::Attention A(examples::reluAttn(), S);
    return A.source().Key;
  };
  CHECK(KeyOf(Sig) == "relu_attn.fwd_sm90.f16.d64x64.sm_90a.sm90.m128n128s3");
  runtime::Signature S = Sig;
  S.Skeleton = "fwd_sm80";
  CHECK(KeyOf(S) == "relu_attn.fwd_sm80.f16.d64x64.sm_90a.m128n32w4s2");
  S.Skeleton.clear();
  S.Config = "m64n64w4s2";
  CHECK(KeyOf(S) == "relu_attn.fwd_sm80.f16.d64x64.sm_90a.m64n64w4s2");
  S.Config = "sm90.m64n64s3";
  CHECK(KeyOf(S) == "relu_attn.fwd_sm90.f16.d64x64.sm_90a.sm90.m64n64s3");
  S = Sig;
  S.Arch = GpuArch::Sm80;
  CHECK(KeyOf(S) == "relu_attn.fwd_sm80.f16.d64x64.sm_80.m128n32w4s2");
  S.Config = "sm90";
  CHECK_THROWS_AS(KeyOf(S), UserError);
  S = Sig;
  S.Config = "sm90.m128n192s4";
  S.HeadDim = S.HeadDimV = 256;
  CHECK_THROWS_AS(KeyOf(S), UserError);
  llvm::sys::fs::remove_directories(Path);
}

TEST_CASE(
    "sm90: mha compiles for sm_90a in both dtypes and head dims 64, 128, 256",
    "[nvrtc][sm90][mha]") {
  compileExample(examples::mha(), DType::F16, 128);
}

TEST_CASE("sm90: sigmoid_attn compiles for sm_90a",
          "[nvrtc][sm90][sigmoid_attn]") {
  compileExample(examples::sigmoidAttn(), DType::BF16, 128);
}

TEST_CASE("sm90: relu_attn compiles for sm_90a", "[nvrtc][sm90][relu_attn]") {
  compileExample(examples::reluAttn(), DType::F16, 64);
}

TEST_CASE("sm90: retention compiles for sm_90a", "[nvrtc][sm90][retention]") {
  compileExample(examples::retention(), DType::BF16, 256);
}

TEST_CASE("sm90: retention_combine compiles for sm_90a", "[nvrtc][sm90][retention]") {
  compileExample(examples::retentionCombine(), DType::F16, 128);
}

TEST_CASE("sm90: alibi_learnable compiles for sm_90a",
          "[nvrtc][sm90][alibi_learnable]") {
  compileExample(examples::alibiLearnable(), DType::F16, 128);
}

TEST_CASE("sm90: softcap_learnable compiles for sm_90a",
          "[nvrtc][sm90][softcap_learnable]") {
  compileExample(examples::softcapLearnable(), DType::BF16, 64);
}

TEST_CASE("sm90: mha_document_ids compiles for sm_90a",
          "[nvrtc][sm90][mha_document_ids]") {
  compileExample(examples::mhaDocumentIds(), DType::F16, 128);
}

TEST_CASE("sm90: the mask examples compile for sm_90a", "[nvrtc][sm90][masks]") {
  compileExample(examples::mhaDocument(), DType::F16, 128);
  compileExample(examples::mhaPrefixLm(), DType::BF16, 64);
  compileExample(examples::mhaSlidingWindow(), DType::F16, 256);
  compileExample(examples::mhaChunked(), DType::BF16, 128);
}

TEST_CASE("sm90: every registered transformer example has a case above",
          "[sm90]") {
  // A new example fails here until it gets its own compile case.
  dsl::Registry R;
  examples::registerExamples(R);
  std::set<std::string> Transformers;
  for (const dsl::DefinitionBase *D : R.all())
    if (D->kind() == ir::DefinitionKind::Transformer)
      Transformers.insert(D->name);
  CHECK(Transformers ==
        std::set<std::string>{"mha", "sigmoid_attn", "relu_attn", "retention",
                              "retention_combine", "alibi_learnable", "softcap_learnable",
                              "mha_document_ids", "mha_prefix_lm",
                              "mha_sliding_window", "mha_document",
                              "mha_chunked"});
}

TEST_CASE("sm90: head dims D != DV and every configuration shape compile",
          "[nvrtc][sm90]") {
  CompiledDefinition Def = compile(examples::mha());
  struct {
    int D, DV;
    const char *Config;
  } Cases[] = {{192, 128, "sm90.m128n128s2"},
               {128, 256, "sm90.m128n64s2"},
               {64, 128, "sm90.m64n192s2"},
               {128, 64, "sm90.m64n64s3"}};
  for (const auto &C : Cases) {
    checkedWgmmaCubin(codegen::generateForwardSm90(
        Def, kernelSpec(DType::F16, C.D, C.DV), Sm90Config::parse(C.Config)));
  }
}
