// The paged prefill kernels (fwd_sm80 and fwd_sm90 over pages,
// paged_fwd.cuh) without a GPU: keys and entries, NVRTC compiles of every
// transformer example of the paged matrix for sm_80 (f16, fwd_sm80's) and
// sm_90a (bf16, fwd_sm90's with each load a page size takes by default;
// fwd_sm80's once), and the contiguous forwards' sources left as they were.
#include "ExampleRegistry.h"
#include "NvrtcPtx.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/codegen/Codegen.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/ResourceModel.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string>

using namespace attn;
using namespace attn::nvrtctest;
using codegen::FwdConfig;
using codegen::KernelSpec;

namespace {

KernelSpec spec(DType T, GpuArch Arch) {
  KernelSpec S;
  S.Dtype = T;
  S.HeadDim = 128;
  S.HeadDimV = 128;
  S.Arch = Arch;
  S.Config = FwdConfig::defaultFor(128, 128, Arch);
  return S;
}

/// CUBIN and PTX checks of one paged prefill kernel; its PTX, and its
/// CUBIN's stack frame in \p Frame if given.
std::string compileOne(const codegen::KernelSource &Src, bool Sm90, int *Frame = nullptr) {
  INFO("kernel " << Src.Key);
  REQUIRE(Src.Entries == std::vector<std::string>{"attnc_fwd_paged"});
  runtime::CompiledCubin C;
  try {
    C = runtime::compileToCubin(Src);
  } catch (const CompileError &E) {
    FAIL_CHECK(E.what());
    return "";
  }
  CHECK(C.Cubin.size() > 4);
  CHECK(std::memcmp(C.Cubin.data(), "\x7f" "ELF", 4) == 0);
  std::string Ptx = compileToPtx(Src);
  CHECK(has(Ptx, ".entry attnc_fwd_paged("));
  CHECK(!has(Ptx, ".entry attnc_fwd("));
  if (Sm90) {
    CHECK(has(Ptx, "wgmma.mma_async"));
    CHECK(has(Ptx, "cp.async.bulk.tensor.4d")); // Q, and K/V's boxes
  } else {
    CHECK(has(Ptx, "mma.sync.aligned.m16n8k16.row.col.f32"));
    CHECK(has(Ptx, "cp.async.cg.shared.global"));
  }
  if (Frame)
    *Frame = runtime::readCubinResources(llvm::StringRef(C.Cubin.data(), C.Cubin.size()),
                                         "attnc_fwd_paged")
                 .StackFrameBytes;
  return Ptx;
}

/// fwd_sm80's paged kernel for sm_80 (f16) and fwd_sm90's for sm_90a
/// (bf16) at d128, their default configurations, fwd_sm90's with each
/// PagedLoad a page size takes by default (the gather, the thread's boxes).
void compilePrefill(const std::string &Name) {
  CompiledDefinition Def = compile(testsupport::registry().get(Name));
  KernelSpec S80 = spec(DType::F16, GpuArch::Sm80);
  codegen::KernelSource Src = codegen::generatePagedPrefill(Def, S80);
  CHECK(Src.Key.find(".fwd_paged_sm80.") != std::string::npos);
  // Never the contiguous forward's cache entry.
  CHECK(Src.Key != codegen::generateForward(Def, S80).Key);
  compileOne(Src, false);
  KernelSpec S90 = spec(DType::BF16, GpuArch::Sm90a);
  codegen::Sm90Config C90 = codegen::Sm90Config::defaultFor(128, 128);
  std::vector<codegen::PagedLoad> Loads;
  for (int64_t PS : {1, 16, 64, 256})
    if (std::find(Loads.begin(), Loads.end(), codegen::defaultPagedLoad(PS)) == Loads.end())
      Loads.push_back(codegen::defaultPagedLoad(PS));
  for (codegen::PagedLoad L : Loads) {
    codegen::KernelSource Src90 = codegen::generatePagedPrefillSm90(Def, S90, C90, L);
    CHECK(Src90.Key.find(".fwd_paged_sm90.") != std::string::npos);
    CHECK(Src90.Key != codegen::generateForwardSm90(Def, S90, C90).Key);
    compileOne(Src90, true);
  }
}

} // namespace

TEST_CASE("paged prefill: the generated source", "[prefill]") {
  CompiledDefinition Def = compile(testsupport::registry().get("mha"));
  KernelSpec S = spec(DType::F16, GpuArch::Sm80);
  codegen::KernelSource Src = codegen::generatePagedPrefill(Def, S);
  CHECK(Src.Key == "mha.fwd_paged_sm80.f16.d128x128.sm_80.m128n64w4s2");
  CHECK(has(Src.Source, "attnc::PagedFwdArgs a"));
  CHECK(has(Src.Source, "::run_paged(a, in, smem)"));
  // The contiguous forward's text is not the paged one's: it has no paged
  // entry and no paged arguments.
  codegen::KernelSource Fwd = codegen::generateForward(Def, S);
  CHECK(!has(Fwd.Source, "PagedFwdArgs"));
  CHECK(has(Fwd.Source, "::run(a, in, smem)"));
  // Head dims and configurations follow the forward's rules.
  S.HeadDim = 96;
  CHECK_THROWS_AS(codegen::generatePagedPrefill(Def, S), UserError);
  CompiledDefinition Lin =
      compile(testsupport::registry().get("retention_linear"));
  CHECK_THROWS_AS(codegen::generatePagedPrefill(Lin, spec(DType::F16, GpuArch::Sm80)),
                  NotSupportedYet);
  // The Hopper kernel: sm_90a only; its paged entry and maps.
  codegen::Sm90Config C90 = codegen::Sm90Config::defaultFor(128, 128);
  CHECK_THROWS_AS(codegen::generatePagedPrefillSm90(Def, spec(DType::F16, GpuArch::Sm80),
                                                    C90),
                  UserError);
  codegen::KernelSource Src90 =
      codegen::generatePagedPrefillSm90(Def, spec(DType::F16, GpuArch::Sm90a), C90);
  CHECK(Src90.Key == "mha.fwd_paged_sm90.f16.d128x128.sm_90a." + C90.str());
  CHECK(has(Src90.Source, "::run_paged(a, in, maps, smem)"));
  CHECK(!has(codegen::generateForwardSm90(Def, spec(DType::F16, GpuArch::Sm90a), C90).Source,
             "PagedFwdArgs"));
}

TEST_CASE("paged prefill: fwd_sm90's page loads by a thread, a warp or a gather",
          "[prefill]") {
  using codegen::PagedLoad;
  CHECK(codegen::parsePagedLoad("thread") == PagedLoad::Thread);
  CHECK(codegen::parsePagedLoad("warp") == PagedLoad::Warp);
  CHECK(codegen::parsePagedLoad("gather") == PagedLoad::Gather);
  CHECK(std::string(codegen::pagedLoadName(PagedLoad::Warp)) == "warp");
  CHECK(std::string(codegen::pagedLoadName(PagedLoad::Gather)) == "gather");
  CHECK_THROWS_WITH(
      codegen::parsePagedLoad("Warp"),
      Catch::Contains("paged load 'Warp': expected 'thread', 'warp' or 'gather'"));
  CHECK_THROWS_AS(codegen::parsePagedLoad(""), UserError);
  CompiledDefinition Def = compile(testsupport::registry().get("mha"));
  KernelSpec S = spec(DType::F16, GpuArch::Sm90a);
  codegen::Sm90Config C90 = codegen::Sm90Config::defaultFor(128, 128);
  codegen::KernelSource Thread =
      codegen::generatePagedPrefillSm90(Def, S, C90, PagedLoad::Thread);
  codegen::KernelSource Warp = codegen::generatePagedPrefillSm90(Def, S, C90, PagedLoad::Warp);
  // The thread kernel is the one without a PagedLoad (its key and text).
  CHECK(Thread.Key == codegen::generatePagedPrefillSm90(Def, S, C90).Key);
  CHECK(Thread.Source == codegen::generatePagedPrefillSm90(Def, S, C90).Source);
  CHECK(Warp.Key == Thread.Key + ".warp");
  CHECK(has(Thread.Source, "::run_paged(a, in, maps, smem)"));
  CHECK(has(Warp.Source, "::run_paged_warp(a, in, maps, smem)"));
  CHECK(!has(Warp.Source, "::run_paged("));
  codegen::KernelSource Gather =
      codegen::generatePagedPrefillSm90(Def, S, C90, PagedLoad::Gather);
  CHECK(Gather.Key == Thread.Key + ".gather");
  CHECK(has(Gather.Source, "::run_paged_gather(a, in, maps, smem)"));
  // Pages under 8 tokens fit no TMA box: the gather by default (and up to
  // 32, as measured).
  for (int64_t PS : {1, 2, 4, 8, 16, 32})
    CHECK(codegen::defaultPagedLoad(PS) == PagedLoad::Gather);
  for (int64_t PS : {64, 256, 4096})
    CHECK(codegen::defaultPagedLoad(PS) == PagedLoad::Thread);
}

TEST_CASE("paged prefill: fwd_sm90's thread and warp loads compile (f16)",
          "[prefill][nvrtc]") {
  // The warp's lanes issue the boxes after lane 0 arms the stage's
  // barrier: one warp barrier more than the thread kernel has (the
  // consumers' own are in both).
  CompiledDefinition Def = compile(testsupport::registry().get("mha"));
  KernelSpec S = spec(DType::F16, GpuArch::Sm90a);
  codegen::Sm90Config C90 = codegen::Sm90Config::defaultFor(128, 128);
  int FT = -1, FW = -1;
  std::string PT = compileOne(
      codegen::generatePagedPrefillSm90(Def, S, C90, codegen::PagedLoad::Thread), true, &FT);
  std::string PW = compileOne(
      codegen::generatePagedPrefillSm90(Def, S, C90, codegen::PagedLoad::Warp), true, &FW);
  // No spills in either (the producer runs at 24 registers, setmaxnreg).
  CHECK(FT == 0);
  CHECK(FW == 0);
  auto Count = [](const std::string &Ptx, const std::string &What) {
    size_t N = 0;
    for (size_t At = Ptx.find(What); At != std::string::npos; At = Ptx.find(What, At + 1))
      ++N;
    return N;
  };
  CHECK(Count(PW, "bar.warp.sync") == Count(PT, "bar.warp.sync") + 1);
}

TEST_CASE("paged prefill: fwd_sm90's gather compiles (f16)", "[prefill][nvrtc]") {
  // K/V by cp.async, each thread arriving on the stage's barrier when its
  // copies land, the consumers fencing the async proxy; Q alone by TMA;
  // no spill at the producer's 24 registers.
  CompiledDefinition Def = compile(testsupport::registry().get("mha"));
  KernelSpec S = spec(DType::F16, GpuArch::Sm90a);
  codegen::Sm90Config C90 = codegen::Sm90Config::defaultFor(128, 128);
  int FG = -1;
  std::string PG = compileOne(
      codegen::generatePagedPrefillSm90(Def, S, C90, codegen::PagedLoad::Gather), true, &FG);
  CHECK(FG == 0);
  CHECK(has(PG, "cp.async.mbarrier.arrive.noinc.shared"));
  CHECK(has(PG, "cp.async.cg.shared.global"));
  CHECK(has(PG, "fence.proxy.async.shared::cta"));
  CHECK(has(PG, "shfl.sync.idx"));
}

TEST_CASE("paged prefill: fwd_sm80's kernel compiles for sm_90a", "[prefill][nvrtc]") {
  // The kernel sm_90a runs where the signature names fwd_sm80.
  CompiledDefinition Def = compile(testsupport::registry().get("mha"));
  compileOne(codegen::generatePagedPrefill(Def, spec(DType::F16, GpuArch::Sm90a)), false);
}

TEST_CASE("paged prefill: mha compiles", "[prefill][nvrtc]") { compilePrefill("mha"); }
TEST_CASE("paged prefill: sigmoid_attn compiles", "[prefill][nvrtc]") {
  compilePrefill("sigmoid_attn");
}
TEST_CASE("paged prefill: relu_attn compiles", "[prefill][nvrtc]") {
  compilePrefill("relu_attn");
}
TEST_CASE("paged prefill: retention compiles", "[prefill][nvrtc]") {
  compilePrefill("retention");
}
TEST_CASE("paged prefill: alibi_learnable compiles", "[prefill][nvrtc]") {
  compilePrefill("alibi_learnable");
}
TEST_CASE("paged prefill: softcap_learnable compiles", "[prefill][nvrtc]") {
  compilePrefill("softcap_learnable");
}
TEST_CASE("paged prefill: mha_document_ids compiles", "[prefill][nvrtc]") {
  compilePrefill("mha_document_ids");
}
TEST_CASE("paged prefill: mha_prefix_lm compiles", "[prefill][nvrtc]") {
  compilePrefill("mha_prefix_lm");
}
TEST_CASE("paged prefill: mha_sliding_window compiles", "[prefill][nvrtc]") {
  compilePrefill("mha_sliding_window");
}
TEST_CASE("paged prefill: mha_document compiles", "[prefill][nvrtc]") {
  compilePrefill("mha_document");
}
