// The resource model: shared-memory pruning, registers and spills read from
// real NVRTC CUBINs and checked against ptxas's own -v report (no GPU).
#include "Examples.h"
#include "attn/Pipeline.h"
#include "attn/codegen/Codegen.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/DeviceLibrary.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/ResourceModel.h"

#include <catch2/catch.hpp>

#include <nvrtc.h>

using namespace attn;
using namespace attn::runtime;
using Catch::Matchers::Contains;

namespace {

struct VerboseCompile {
  std::vector<char> Cubin;
  std::string Log;
};

/// NVRTC with the runtime's own options plus --ptxas-options=-v, so that
/// the log carries ptxas's register and spill report for the same CUBIN.
VerboseCompile compileVerbose(const codegen::KernelSource &Src) {
  std::vector<std::string> Names, Texts;
  for (const EmbeddedHeader &H : deviceLibrary()) {
    Names.push_back(H.Name.str());
    Texts.push_back(H.Contents.str());
  }
  std::vector<const char *> NamePtrs, TextPtrs;
  for (size_t I = 0; I < Names.size(); ++I) {
    NamePtrs.push_back(Names[I].c_str());
    TextPtrs.push_back(Texts[I].c_str());
  }
  nvrtcProgram Prog = nullptr;
  REQUIRE(nvrtcCreateProgram(&Prog, Src.Source.c_str(), "tune_test.cu",
                             int(Names.size()), TextPtrs.data(),
                             NamePtrs.data()) == NVRTC_SUCCESS);
  std::vector<std::string> Options = nvrtcOptions(Src.Arch);
  Options.push_back("--ptxas-options=-v");
  std::vector<const char *> OptionPtrs;
  for (const std::string &O : Options)
    OptionPtrs.push_back(O.c_str());
  nvrtcResult R =
      nvrtcCompileProgram(Prog, int(OptionPtrs.size()), OptionPtrs.data());
  VerboseCompile Out;
  size_t LogSize = 0;
  nvrtcGetProgramLogSize(Prog, &LogSize);
  Out.Log.resize(LogSize);
  nvrtcGetProgramLog(Prog, Out.Log.data());
  INFO(Out.Log);
  REQUIRE(R == NVRTC_SUCCESS);
  size_t Size = 0;
  nvrtcGetCUBINSize(Prog, &Size);
  Out.Cubin.resize(Size);
  nvrtcGetCUBIN(Prog, Out.Cubin.data());
  nvrtcDestroyProgram(&Prog);
  return Out;
}

codegen::KernelSource mhaSource(const std::string &Config, int D,
                                GpuArch Arch) {
  static const CompiledDefinition Def = compile(examples::mha());
  codegen::KernelSpec Spec;
  Spec.HeadDim = D;
  Spec.HeadDimV = D;
  Spec.Arch = Arch;
  Spec.Config = codegen::FwdConfig::parse(Config);
  return codegen::generateForward(Def, Spec);
}

} // namespace

TEST_CASE("the search space is what the skeleton accepts",
          "[tuning][resources]") {
  std::vector<codegen::FwdConfig> Space = codegen::FwdConfig::enumerate();
  // 3 x 3 x 2 x 2 = 36, less the 6 with BlockM 64 over 8 warps (one m16
  // tile per warp needs BlockM >= 16 x warps).
  CHECK(Space.size() == 30);
  for (const codegen::FwdConfig &C : Space) {
    CHECK(C.structuralError().empty());
    CHECK(C.BlockM >= 16 * C.Warps);
  }
  CHECK(std::find(Space.begin(), Space.end(),
                  codegen::FwdConfig{256, 64, 8, 2}) != Space.end());
  CHECK(std::find(Space.begin(), Space.end(),
                  codegen::FwdConfig{64, 64, 8, 2}) == Space.end());
}

TEST_CASE("shared memory beyond the arch's limit is pruned before compiling",
          "[tuning][resources]") {
  ResourceLimits L = ResourceLimits::forArch(GpuArch::Sm90a);
  CHECK(L.SharedBytesPerBlock == 227 * 1024);
  // m256n128 with 3 stages at d128: 2·(256·128 + 3·128·256) = 262144 bytes.
  codegen::FwdConfig Big{256, 128, 8, 3};
  REQUIRE(Big.sharedBytes(128, 128) == 262144);
  CHECK_THAT(pruneBeforeCompile(Big, 128, 128, L),
             Contains("needs 262144 bytes of shared memory; 232448 allowed"));
  CHECK(pruneBeforeCompile(codegen::FwdConfig{128, 64, 4, 2}, 128, 128, L)
            .empty());
  // The device's limit counts when it is lower than the arch's.
  DeviceInfo Small;
  Small.SharedMemPerBlockOptin = 64 * 1024;
  ResourceLimits LD = ResourceLimits::forDevice(GpuArch::Sm90a, Small);
  CHECK(LD.SharedBytesPerBlock == 64 * 1024);
  CHECK_THAT(pruneBeforeCompile(codegen::FwdConfig{128, 64, 4, 2}, 128, 128,
                                LD),
             Contains("65536 allowed"));
  // A configuration the skeleton cannot take at all.
  CHECK_THAT(pruneBeforeCompile(codegen::FwdConfig{64, 64, 8, 2}, 64, 64, L),
             Contains("block M must be a multiple of 16 x warps"));
}

TEST_CASE("registers and spills after compiling", "[tuning][resources]") {
  ResourceLimits L = ResourceLimits::forArch(GpuArch::Sm80);
  codegen::FwdConfig C{128, 64, 4, 2};
  CHECK(pruneAfterCompile(C, KernelResources{255, 0}, L).empty());
  CHECK_THAT(pruneAfterCompile(C, KernelResources{255, 72}, L),
             Contains("spills: 255 registers, 72 bytes stack frame"));
  L.MaxStackFrameBytes = 72;
  CHECK(pruneAfterCompile(C, KernelResources{255, 72}, L).empty());
  // 8 warps x 32 threads x 264 registers cannot fit 64K registers.
  CHECK_THAT(pruneAfterCompile(codegen::FwdConfig{256, 64, 8, 2},
                               KernelResources{257, 0}, L),
             Contains("exceed the 65536 registers of a block"));
}

TEST_CASE("ptxas -v report parsing", "[tuning][resources]") {
  const char *Log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'other' for 'sm_80'\n"
      "ptxas info    : Function properties for other\n"
      "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 32 registers, 360 bytes cmem[0]\n"
      "ptxas info    : Compiling entry function 'attnc_fwd' for 'sm_80'\n"
      "ptxas info    : Function properties for attnc_fwd\n"
      "    72 bytes stack frame, 80 bytes spill stores, 116 bytes spill "
      "loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 72 bytes "
      "cumulative stack size, 552 bytes cmem[0]\n";
  std::optional<PtxasReport> R = parsePtxasReport(Log, "attnc_fwd");
  REQUIRE(R);
  CHECK(R->Registers == 255);
  CHECK(R->StackFrameBytes == 72);
  CHECK(R->SpillStoreBytes == 80);
  CHECK(R->SpillLoadBytes == 116);
  std::optional<PtxasReport> O = parsePtxasReport(Log, "other");
  REQUIRE(O);
  CHECK(O->Registers == 32);
  CHECK(O->SpillStoreBytes == 0);
  CHECK_FALSE(parsePtxasReport(Log, "missing"));
}

TEST_CASE("the CUBIN's attributes agree with ptxas, and a spilling "
          "configuration is pruned",
          "[tuning][resources][nvrtc]") {
  // m128n128 over 4 warps at d128 keeps a 128x128 score tile and a 32-row
  // O accumulator per warp in registers: ptxas spills it on sm_80.
  VerboseCompile Spill = compileVerbose(mhaSource("m128n128w4s2", 128, GpuArch::Sm80));
  std::optional<PtxasReport> Report = parsePtxasReport(Spill.Log, "attnc_fwd");
  INFO(Spill.Log);
  REQUIRE(Report);
  KernelResources R = readCubinResources(
      llvm::StringRef(Spill.Cubin.data(), Spill.Cubin.size()), "attnc_fwd");
  CHECK(R.Registers == Report->Registers);
  CHECK(R.StackFrameBytes == Report->StackFrameBytes);
  REQUIRE(Report->SpillStoreBytes > 0);
  CHECK(R.StackFrameBytes > 0);
  CHECK_THAT(pruneAfterCompile(codegen::FwdConfig{128, 128, 4, 2}, R,
                               ResourceLimits::forArch(GpuArch::Sm80)),
             Contains("spills"));

  // A small tile does not spill: frame 0, and the model lets it through.
  VerboseCompile Small = compileVerbose(mhaSource("m64n64w4s2", 64, GpuArch::Sm80));
  std::optional<PtxasReport> SmallReport =
      parsePtxasReport(Small.Log, "attnc_fwd");
  REQUIRE(SmallReport);
  KernelResources RS = readCubinResources(
      llvm::StringRef(Small.Cubin.data(), Small.Cubin.size()), "attnc_fwd");
  CHECK(RS.Registers == SmallReport->Registers);
  CHECK(RS.StackFrameBytes == 0);
  CHECK(SmallReport->SpillStoreBytes == 0);
  CHECK(pruneAfterCompile(codegen::FwdConfig{64, 64, 4, 2}, RS,
                          ResourceLimits::forArch(GpuArch::Sm80))
            .empty());
  // The other entries of the same CUBIN are found by name.
  KernelResources Classify = readCubinResources(
      llvm::StringRef(Small.Cubin.data(), Small.Cubin.size()),
      "attnc_block_classify");
  CHECK(Classify.Registers > 0);
  CHECK(Classify.Registers < RS.Registers);
}

TEST_CASE("a CUBIN that is not one is an internal error",
          "[tuning][resources]") {
  CHECK_THROWS_AS(readCubinResources("not an elf file at all", "attnc_fwd"),
                  InternalError);
  std::string Truncated = "\x7f"
                          "ELF";
  Truncated.resize(80, '\0');
  Truncated[4] = 2;
  Truncated[5] = 1;
  Truncated[0x28] = char(0xf0); // section headers past the end
  Truncated[0x3a] = 64;
  Truncated[0x3c] = 3;
  CHECK_THROWS_AS(readCubinResources(Truncated, "attnc_fwd"), InternalError);
}

TEST_CASE("linear shared memory, threads and structure before compiling",
          "[tuning][resources][linear]") {
  // D = 128, DV = 512 on sm_86 (99 KiB a block): chunks of 128 with slices
  // of 128 do not fit; the default does.
  codegen::LinearKernelSpec Base;
  Base.HeadDim = 128;
  Base.HeadDimV = 512;
  Base.Arch = GpuArch::Sm86;
  Base.Config = codegen::LinearConfig::defaultFor(128, 512, GpuArch::Sm86);
  ResourceLimits L = ResourceLimits::forArch(GpuArch::Sm86);
  codegen::LinearKernelSpec Big = Base;
  Big.Config = codegen::LinearConfig::parse("c128v128w8b8");
  CHECK_THAT(linearPruneBeforeCompile(Big, L),
             Contains("bytes of shared memory; 101376 allowed"));
  CHECK(linearPruneBeforeCompile(Base, L).empty());
  // 16 warps are 512 threads: over a block of 256.
  codegen::LinearKernelSpec Wide = Base;
  Wide.Config = codegen::LinearConfig::parse("c64v64w4b16");
  ResourceLimits Narrow = L;
  Narrow.MaxThreadsPerBlock = 256;
  CHECK_THAT(linearPruneBeforeCompile(Wide, Narrow),
             Contains("512 threads exceed the 256 of a block"));
  // The structure comes first: D = 64 cannot give 8 forward warps whole
  // tiles of state rows.
  codegen::LinearKernelSpec Bad = Base;
  Bad.HeadDim = 64;
  Bad.Config = codegen::LinearConfig::parse("c64v64w8b8");
  CHECK(linearPruneBeforeCompile(Bad, L) ==
        Bad.Config.structuralError(64, 512));
  CHECK_FALSE(linearPruneBeforeCompile(Bad, L).empty());
}

TEST_CASE("linear judged entries", "[tuning][resources][linear]") {
  codegen::KernelSource Fwd, Bwd;
  Fwd.Entries = {"attnc_linear_fwd"};
  Bwd.Entries = {"attnc_linear_bwd_states", "attnc_linear_bwd_chunk",
                 "attnc_linear_bwd_chunk_grouped", "attnc_linear_bwd_decay"};
  CHECK(linearJudgedEntries(Fwd) == std::vector<std::string>{"attnc_linear_fwd"});
  CHECK(linearJudgedEntries(Bwd) ==
        std::vector<std::string>{"attnc_linear_bwd_states",
                                 "attnc_linear_bwd_chunk"});
}

TEST_CASE("linear registers and spills after compiling", "[tuning][resources][linear]") {
  ResourceLimits L = ResourceLimits::forArch(GpuArch::Sm90a);
  codegen::LinearConfig C = codegen::LinearConfig::parse("c64v64w4b16");
  CHECK(linearPruneAfterCompile(C, {{255, 0}, {128, 0}, {128, 0}}, L).empty());
  // 16 backward warps of 136 registers: 512 x 136 > 64 Ki; the state
  // passes have 4 warps, so 255 registers fit there.
  CHECK_THAT(linearPruneAfterCompile(C, {{64, 0}, {64, 0}, {136, 0}}, L),
             Contains("chunk gradients: 136 registers x 512 threads exceed"));
  CHECK(linearPruneAfterCompile(C, {{64, 0}, {255, 0}, {64, 0}}, L).empty());
  CHECK_THAT(linearPruneAfterCompile(C, {{64, 0}, {64, 0}, {96, 24}}, L),
             Contains("chunk gradients spills: 96 registers, 24 bytes stack frame"));
  L.MaxStackFrameBytes = 32;
  CHECK(linearPruneAfterCompile(C, {{64, 0}, {64, 0}, {96, 24}}, L).empty());
}
