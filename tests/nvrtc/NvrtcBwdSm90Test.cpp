// The Hopper backward skeleton (bwd_sm90) without a GPU: its configuration
// strings and checks, NVRTC compiles of every transformer example's
// backward for sm_90a carrying wgmma, and the choice between bwd_sm90 and
// bwd_sm80.
#include "Examples.h"
#include "NvrtcPtx.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/codegen/Codegen.h"
#include "attn/dsl/Registry.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/Selector.h"
#include "attn/runtime/Skeleton.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <set>
#include <string>

using namespace attn;
using namespace attn::nvrtctest;
using codegen::BwdSm90Config;
using codegen::KernelSpec;
using Catch::Matchers::Contains;

namespace {

KernelSpec spec(DType T, int D, int DV, GpuArch Arch = GpuArch::Sm90a) {
  KernelSpec S;
  S.Dtype = T;
  S.HeadDim = D;
  S.HeadDimV = DV;
  S.Arch = Arch;
  return S;
}

/// f16 and bf16 x D = DV in {64, 128} to PTX with the default
/// configuration, each with wgmma in the dtype and the proxy fence its
/// cp.async tiles need; and one CUBIN (\p CubinType, \p CubinDim) whose
/// NVRTC log has no wgmma serialisation warning.
void compileExample(const dsl::DefinitionBase &D, DType CubinType, int CubinDim) {
  CompiledDefinition Def = compile(D);
  unsigned Compiled = 0;
  for (DType T : {DType::F16, DType::BF16})
    for (int Dim : {64, 128}) {
      codegen::KernelSource Src = codegen::generateBackwardSm90(
          Def, spec(T, Dim, Dim), BwdSm90Config::defaultFor(Dim, Dim));
      std::string Ptx = compileToPtx(Src);
      INFO("kernel " << Src.Key);
      CHECK(has(Ptx, ".entry attnc_bwd_dkdv"));
      CHECK(has(Ptx, "wgmma.mma_async.sync.aligned.m64n64k16"));
      CHECK(has(Ptx, Dim == 128 ? "wgmma.mma_async.sync.aligned.m64n128k16"
                                : "wgmma.mma_async.sync.aligned.m64n64k16"));
      CHECK(has(Ptx, T == DType::F16 ? ".f32.f16.f16" : ".f32.bf16.bf16"));
      CHECK(has(Ptx, "fence.proxy.async.shared::cta"));
      CHECK(has(Ptx, ".entry attnc_bwd_dq"));
      ++Compiled;
    }
  CHECK(Compiled == 4);
  codegen::KernelSource Src = codegen::generateBackwardSm90(
      Def, spec(CubinType, CubinDim, CubinDim),
      BwdSm90Config::defaultFor(CubinDim, CubinDim));
  runtime::CompiledCubin Bin = runtime::compileToCubin(Src);
  INFO("kernel " << Src.Key << "\n" << Bin.Log);
  CHECK(std::memcmp(Bin.Cubin.data(),
                    "\x7f"
                    "ELF",
                    4) == 0);
  CHECK(!has(Bin.Log, "serialized"));
}

} // namespace

TEST_CASE("bwd_sm90: configuration strings", "[bwd90]") {
  BwdSm90Config C = BwdSm90Config::parse("bwd90.kv128x64s3.q64x32w4");
  CHECK(C.KvBlockM == 128);
  CHECK(C.KvBlockN == 64);
  CHECK(C.Stages == 3);
  CHECK(C.QBlockM == 64);
  CHECK(C.QBlockN == 32);
  CHECK(C.QWarps == 4);
  CHECK(C.dkdvThreads() == 128);
  CHECK(C.str() == "bwd90.kv128x64s3.q64x32w4");
  CHECK(BwdSm90Config::defaultFor(128, 128).str() == "bwd90.kv64x128s2.q128x64w8");
  for (const char *Bad : {"kv64x128w8.fused.s2", "bwd90.kv64x128s2", "bwd90.kv64x128s2.q128x64w8 ",
                          "sm90.m128n128s3"})
    CHECK_THROWS_WITH(BwdSm90Config::parse(Bad),
                      Contains("expected bwd90.kv<M>x<N>s<stages>.q<M>x<N>w<warps>"));
  // Shared memory: 1024 bytes of slack, K and V, then per stage Q, dO and
  // the rows' floats rounded to 1024 bytes.
  CHECK(C.dkdvSharedBytes(64, 64, 1, true) ==
        1024 + 2 * 64 * 128 + 3 * (2 * 128 * 128 + 1024));
  CHECK(BwdSm90Config{}.dkdvSharedBytes(128, 128, 1, false) ==
        1024 + 2 * 128 * 256 + 2 * (2 * 64 * 256 + 1024));
}

TEST_CASE("bwd_sm90: what the skeleton supports", "[bwd90]") {
  BwdSm90Config C;
  auto Why = [&](KernelSpec S, BwdSm90Config Cfg) {
    return codegen::bwdSm90Unsupported(S, Cfg, 1, false);
  };
  for (DType T : {DType::F16, DType::BF16})
    for (int D : {64, 128})
      CHECK(Why(spec(T, D, D), C).empty());
  CHECK_THAT(Why(spec(DType::F16, 128, 128, GpuArch::Sm80), C),
             Contains("needs arch sm_90a"));
  CHECK_THAT(Why(spec(DType::F16, 192, 128), C),
             Contains("head_dim 192 is not supported by bwd_sm90; expected 64 or 128"));
  CHECK_THAT(Why(spec(DType::F16, 128, 256), C),
             Contains("head_dim_v 256 is not supported by bwd_sm90"));
  BwdSm90Config Regs = C; // 128 query rows a step beside dK and dV of d128
  Regs.KvBlockM = 128;
  CHECK_THAT(Why(spec(DType::F16, 128, 128), Regs),
             Contains("256 accumulator floats"));
  CHECK(Why(spec(DType::F16, 64, 64), Regs).empty());
  BwdSm90Config Keys = C;
  Keys.KvBlockN = 192;
  CHECK_THAT(Why(spec(DType::F16, 64, 64), Keys), Contains("key block must be 64 or 128"));
  // Four stages fit at d128 with one final rowscale, not with 40.
  BwdSm90Config Shared = C;
  Shared.Stages = 4;
  CHECK(Why(spec(DType::F16, 128, 128), Shared).empty());
  CHECK_THAT(codegen::bwdSm90Unsupported(spec(DType::F16, 128, 128), Shared, 40, true),
             Contains("bytes of shared memory"));
  // The generator says the same as a UserError.
  CompiledDefinition Def = compile(examples::mha());
  CHECK_THROWS_AS(codegen::generateBackwardSm90(Def, spec(DType::F16, 128, 256), C),
                  UserError);
}

TEST_CASE("bwd_sm90: the selector picks it on sm_90a where it runs the head "
          "dims, bwd_sm80 elsewhere",
          "[bwd90][skeleton]") {
  using namespace attn::runtime;
  CompiledDefinition Def = compile(examples::mha());
  auto Choice = [&](int D, int DV, GpuArch A) {
    KernelTarget T = KernelTarget::of(Def, Direction::Backward, DType::BF16, D, DV, A);
    return chooseWithoutShape(T, KernelPolicy());
  };
  CHECK(Choice(128, 128, GpuArch::Sm90a).str() ==
        "bwd_sm90 bwd90.kv64x128s2.q128x64w8 (default)");
  CHECK(Choice(64, 64, GpuArch::Sm90a).Skel->name() == "bwd_sm90");
  CHECK(Choice(128, 128, GpuArch::Sm80).Skel->name() == "bwd_sm80");
  CHECK(Choice(64, 64, GpuArch::Sm86).Skel->name() == "bwd_sm80");
  CHECK(Choice(128, 256, GpuArch::Sm90a).Skel->name() == "bwd_sm80");
  CHECK(Choice(64, 128, GpuArch::Sm90a).Skel->name() == "bwd_sm80");
  // A bwd_sm80 configuration still names bwd_sm80 on sm_90a.
  KernelTarget T =
      KernelTarget::of(Def, Direction::Backward, DType::F16, 128, 128, GpuArch::Sm90a);
  CHECK(chooseWithoutShape(T, KernelPolicy::parse(T, "", "kv64x128w8.fused.s2")).str() ==
        "bwd_sm80 kv64x128w8.fused.s2 (named)");
  CHECK(chooseWithoutShape(T, KernelPolicy::parse(T, "", "bwd90.kv64x64s3.q128x64w8"))
            .str() == "bwd_sm90 bwd90.kv64x64s3.q128x64w8 (named)");
  // No backward skeleton at 192/128: each one's reason.
  KernelTarget T192 = T;
  T192.HeadDim = 192;
  CHECK_THROWS_WITH(chooseWithoutShape(T192, KernelPolicy()),
                    Contains("no skeleton runs backward f16 d192/128 sm_90a") &&
                        Contains("bwd_sm90: head_dim 192") &&
                        Contains("bwd_sm80: head_dim 192"));
}

TEST_CASE("bwd_sm90: mha compiles for sm_90a", "[nvrtc][bwd90][mha]") {
  compileExample(examples::mha(), DType::F16, 128);
}
TEST_CASE("bwd_sm90: sigmoid_attn compiles for sm_90a", "[nvrtc][bwd90][sigmoid_attn]") {
  compileExample(examples::sigmoidAttn(), DType::BF16, 64);
}
TEST_CASE("bwd_sm90: relu_attn compiles for sm_90a", "[nvrtc][bwd90][relu_attn]") {
  compileExample(examples::reluAttn(), DType::F16, 64);
}
TEST_CASE("bwd_sm90: retention compiles for sm_90a", "[nvrtc][bwd90][retention]") {
  compileExample(examples::retention(), DType::BF16, 128);
}
TEST_CASE("bwd_sm90: alibi_learnable compiles for sm_90a",
          "[nvrtc][bwd90][alibi_learnable]") {
  compileExample(examples::alibiLearnable(), DType::F16, 128);
}
TEST_CASE("bwd_sm90: softcap_learnable compiles for sm_90a",
          "[nvrtc][bwd90][softcap_learnable]") {
  compileExample(examples::softcapLearnable(), DType::BF16, 128);
}

TEST_CASE("bwd_sm90: every registered transformer example has a case above",
          "[bwd90]") {
  // A new example fails here until it gets its own compile case.
  dsl::Registry R;
  examples::registerExamples(R);
  std::set<std::string> Transformers;
  for (const dsl::DefinitionBase *D : R.all())
    if (D->kind() == ir::DefinitionKind::Transformer)
      Transformers.insert(D->name);
  CHECK(Transformers ==
        std::set<std::string>{"mha", "sigmoid_attn", "relu_attn", "retention",
                              "alibi_learnable", "softcap_learnable"});
}
