// NVRTC to PTX for the tests that look for instructions in a generated
// kernel (the runtime itself only keeps CUBINs).
#ifndef ATTNC_TESTS_NVRTC_NVRTCPTX_H
#define ATTNC_TESTS_NVRTC_NVRTCPTX_H

#include "attn/GpuArch.h"
#include "attn/codegen/Codegen.h"
#include "attn/codegen/KernelSource.h"
#include "attn/dsl/Problem.h"
#include "attn/runtime/Compiler.h"
#include "attn/runtime/DeviceLibrary.h"

#include <catch2/catch.hpp>
#include <nvrtc.h>

#include <cstring>
#include <string>
#include <vector>

namespace attn::nvrtctest {

/// NVRTC to PTX with the runtime's options and the device library in
/// memory (the runtime itself only keeps CUBINs).
inline std::string compileToPtx(const codegen::KernelSource &Src) {
  // Embedded text is not NUL-terminated; NVRTC wants C strings.
  std::vector<std::string> NameStore, TextStore;
  for (const runtime::EmbeddedHeader &H : runtime::deviceLibrary()) {
    NameStore.push_back(H.Name.str());
    TextStore.push_back(H.Contents.str());
  }
  std::vector<const char *> Names, Texts;
  for (size_t I = 0; I < NameStore.size(); ++I) {
    Names.push_back(NameStore[I].c_str());
    Texts.push_back(TextStore[I].c_str());
  }
  nvrtcProgram Prog;
  REQUIRE(nvrtcCreateProgram(&Prog, Src.Source.c_str(), "sm90.cu",
                             int(Names.size()), Texts.data(),
                             Names.data()) == NVRTC_SUCCESS);
  std::vector<std::string> Opts = runtime::nvrtcOptions(Src.Arch);
  std::vector<const char *> OptPtrs;
  for (const std::string &O : Opts)
    OptPtrs.push_back(O.c_str());
  nvrtcResult R =
      nvrtcCompileProgram(Prog, int(OptPtrs.size()), OptPtrs.data());
  size_t LogSize = 0;
  nvrtcGetProgramLogSize(Prog, &LogSize);
  std::string Log(LogSize, '\0');
  nvrtcGetProgramLog(Prog, Log.data());
  INFO("kernel " << Src.Key << "\n" << Log);
  REQUIRE(R == NVRTC_SUCCESS);
  size_t PtxSize = 0;
  nvrtcGetPTXSize(Prog, &PtxSize);
  std::string Ptx(PtxSize, '\0');
  nvrtcGetPTX(Prog, Ptx.data());
  nvrtcDestroyProgram(&Prog);
  return Ptx;
}

/// The kernel spec most NVRTC tests start from: a dtype, the head dims and
/// an arch, everything else the default.
inline codegen::KernelSpec kernelSpec(DType T, int D, int DV,
                                      GpuArch Arch = GpuArch::Sm90a) {
  codegen::KernelSpec S;
  S.Dtype = T;
  S.HeadDim = D;
  S.HeadDimV = DV;
  S.Arch = Arch;
  return S;
}

inline bool has(const std::string &Text, const char *What) {
  return Text.find(What) != std::string::npos;
}

/// Src compiled to a CUBIN as the runtime compiles it, checked to be one
/// (an ELF image) and to keep its wgmma unserialised (ptxas says
/// "serialized" where it serialised them); the CUBIN and its log.
inline runtime::CompiledCubin checkedWgmmaCubin(const codegen::KernelSource &Src) {
  runtime::CompiledCubin Bin = runtime::compileToCubin(Src);
  INFO("kernel " << Src.Key << "\n" << Bin.Log);
  CHECK(Bin.Cubin.size() > 4);
  CHECK(std::memcmp(Bin.Cubin.data(),
                    "\x7f"
                    "ELF",
                    4) == 0);
  CHECK(!has(Bin.Log, "serialized"));
  return Bin;
}

} // namespace attn::nvrtctest

#endif
