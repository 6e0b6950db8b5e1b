// NVRTC compilation and the embedded device library (no GPU needed).
#include "attn/codegen/Arch.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/DeviceLibrary.h"
#include "attn/runtime/Errors.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <set>

using namespace attn;
using namespace attn::runtime;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

std::string readFile(const std::string &Path) {
  auto Buffer = llvm::MemoryBuffer::getFile(Path);
  REQUIRE(Buffer);
  return (*Buffer)->getBuffer().str();
}

codegen::KernelSource tinyKernel(GpuArch Arch) {
  codegen::KernelSource Src;
  Src.Key = "tiny." + archName(Arch).str();
  Src.Arch = Arch;
  Src.Entries = {"k"};
  Src.Source = "#include \"attnc/common.cuh\"\n"
               "#include <cuda_fp16.h>\n"
               "extern \"C\" __global__ void k(float *x) {\n"
               "  x[threadIdx.x] = 1.0f;\n"
               "  // Uses cuda_fp16.h, so the toolkit include path is live.\n"
               "  x[threadIdx.x + 32] = __half2float(__float2half(1.0f));\n"
               "}\n";
  return Src;
}

bool hasOption(const std::vector<std::string> &Options, llvm::StringRef O) {
  return std::find(Options.begin(), Options.end(), O) != Options.end();
}

} // namespace

TEST_CASE("The device library embeds every runtime/kernels header",
          "[runtime][devicelib]") {
  llvm::ArrayRef<EmbeddedHeader> Lib = deviceLibrary();
  REQUIRE_FALSE(Lib.empty());
  // Every file on disk is embedded, byte for byte, under "attnc/<name>".
  std::set<std::string> OnDisk;
  std::error_code EC;
  for (llvm::sys::fs::directory_iterator I(ATTNC_TEST_KERNELS_DIR, EC), End;
       !EC && I != End; I.increment(EC)) {
    llvm::StringRef Name = llvm::sys::path::filename(I->path());
    if (!Name.endswith(".cuh"))
      continue;
    OnDisk.insert(Name.str());
    const EmbeddedHeader *H = findDeviceHeader(("attnc/" + Name).str());
    INFO(Name.str());
    REQUIRE(H != nullptr);
    CHECK(H->Contents == readFile(I->path()));
  }
  REQUIRE_FALSE(EC);
  CHECK(OnDisk.size() == Lib.size());
  CHECK(OnDisk.count("common.cuh") == 1);
  // Sorted by name, so the order (and anything hashed over it) is stable.
  for (size_t I = 1; I < Lib.size(); ++I)
    CHECK(Lib[I - 1].Name < Lib[I].Name);
  CHECK(findDeviceHeader("common.cuh") == nullptr);
  CHECK(findDeviceHeader("attnc/no_such_header.cuh") == nullptr);
}

TEST_CASE("NVRTC version and options", "[runtime][nvrtc]") {
  CHECK_THAT(nvrtcVersion(), StartsWith("13"));
  CHECK(nvrtcVersion().find('.') != std::string::npos);

  std::vector<std::string> O = nvrtcOptions(GpuArch::Sm90a);
  CHECK(hasOption(O, "--gpu-architecture=sm_90a"));
  CHECK(hasOption(O, "-std=c++17"));
  CHECK(hasOption(O, "-default-device"));
  CHECK(hasOption(O, "-lineinfo"));
  CHECK_FALSE(hasOption(O, "--use_fast_math"));
  // The include path that provides cuda_fp16.h, and CCCL next to it.
  std::string Include;
  for (const std::string &Opt : O)
    if (llvm::StringRef(Opt).startswith("-I") &&
        llvm::StringRef(Opt).endswith("/include"))
      Include = Opt.substr(2);
  REQUIRE_FALSE(Include.empty());
  CHECK(llvm::sys::fs::exists(Include + "/cuda_fp16.h"));
  CHECK(hasOption(O, "-I" + Include + "/cccl"));
  CHECK(nvrtcOptions(GpuArch::Sm80) != O);
}

TEST_CASE("A tiny kernel compiles to CUBIN for sm_80 and sm_90a",
          "[runtime][nvrtc]") {
  for (GpuArch Arch : {GpuArch::Sm80, GpuArch::Sm90a}) {
    INFO(archName(Arch).str());
    CompiledCubin C = compileToCubin(tinyKernel(Arch));
    REQUIRE(C.Cubin.size() > 4);
    CHECK(llvm::StringRef(C.Cubin.data(), 4) == "\x7f"
                                                "ELF");
    CHECK(C.Seconds > 0);
  }
}

TEST_CASE("A syntax error throws CompileError with log and dumped source",
          "[runtime][nvrtc]") {
  codegen::KernelSource Src = tinyKernel(GpuArch::Sm80);
  // The pid keeps concurrent test runs from sharing a dump file.
  Src.Key = "syntax_error_test." + std::to_string(getpid());
  Src.Source = "extern \"C\" __global__ void k(float *x) {\n"
               "  x[threadIdx.x] = 1.0f\n" // missing ';'
               "}\n";
  bool Threw = false;
  try {
    compileToCubin(Src);
  } catch (const CompileError &E) {
    Threw = true;
    CHECK(E.Key == Src.Key);
    CHECK_THAT(E.Log, Contains("error"));
    CHECK_THAT(E.Log, Contains(Src.Key + ".cu"));
    CHECK_THAT(std::string(E.what()), Contains(Src.Key) && Contains(E.Log));
    CHECK_THAT(E.DumpPath, Contains("attnc-" + Src.Key + ".cu"));
    REQUIRE(llvm::sys::fs::exists(E.DumpPath));
    CHECK(readFile(E.DumpPath) == Src.Source);
    llvm::sys::fs::remove(E.DumpPath);
  }
  CHECK(Threw);
}

TEST_CASE("A missing device header is a CompileError",
          "[runtime][nvrtc]") {
  codegen::KernelSource Src = tinyKernel(GpuArch::Sm80);
  Src.Key = "missing_header_test." + std::to_string(getpid());
  Src.Source = "#include \"attnc/no_such_header.cuh\"\n" + Src.Source;
  try {
    compileToCubin(Src);
    FAIL("compiled despite a missing header");
  } catch (const CompileError &E) {
    CHECK_THAT(E.Log, Contains("no_such_header.cuh"));
    llvm::sys::fs::remove(E.DumpPath);
  }
}
