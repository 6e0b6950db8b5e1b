// NVRTC: generated CUDA text to CUBIN, with the device library in memory.
#include "attn/runtime/Compiler.h"
#include "attn/codegen/Arch.h"

#include "AtomicFile.h"
#include "NvrtcLibrary.h"
#include "attn/runtime/DeviceLibrary.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/EventTiming.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <dlfcn.h>

#include <cstdlib>

namespace attn::runtime {

namespace {

/// An NVRTC failure outside compilation proper (out of memory, a bad
/// program handle): not the generated code's fault, so an internal error.
void checkNvrtc(nvrtcResult R, const char *What) {
  if (R != NVRTC_SUCCESS)
    throw InternalError(std::string(What) + ": " +
                        nvrtc().nvrtcGetErrorString(R));
}

bool hasFp16Header(const std::string &Root) {
  return llvm::sys::fs::exists(Root + "/include/cuda_fp16.h");
}

/// The CUDA toolkit whose headers NVRTC should see. NVRTC 13 has no built-in
/// cuda_fp16.h / cuda_bf16.h, so they come from a toolkit on disk:
/// $CUDA_HOME, else /usr/local/cuda, else the folder above the one libnvrtc
/// was loaded from (a pip-installed NVRTC ships include/ next to lib/).
std::string findCudaRoot() {
  std::vector<std::string> Candidates;
  if (const char *Home = std::getenv("CUDA_HOME"); Home && *Home)
    Candidates.push_back(Home);
  Candidates.push_back("/usr/local/cuda");
  Dl_info Info;
  if (nvrtcAvailable() &&
      dladdr(reinterpret_cast<void *>(nvrtc().nvrtcVersion), &Info) &&
      Info.dli_fname) {
    llvm::SmallString<256> Lib(Info.dli_fname);
    llvm::sys::path::remove_filename(Lib); // .../lib64
    llvm::sys::path::remove_filename(Lib); // ...
    if (!Lib.empty())
      Candidates.push_back(std::string(Lib));
  }
  for (const std::string &Root : Candidates)
    if (hasFp16Header(Root))
      return Root;
  // None has the headers: keep the first guess, so the compile error names
  // a path the user can act on.
  return Candidates.front();
}

const std::string &cudaRoot() {
  // Fixed for the process: the options are part of every cache key.
  static const std::string Root = findCudaRoot();
  return Root;
}

/// Where a failing source is dumped: $TMPDIR, else /tmp.
std::string dumpPath(const std::string &Key) {
  std::string Dir = "/tmp";
  if (const char *Tmp = std::getenv("TMPDIR"); Tmp && *Tmp)
    Dir = Tmp;
  // Keys are documented as [A-Za-z0-9._-]; enforce it so a key can never
  // name a path outside the directory.
  std::string Stem = Key.empty() ? "kernel" : Key;
  for (char &C : Stem)
    if (!(llvm::isAlnum(C) || C == '.' || C == '_' || C == '-'))
      C = '_';
  return Dir + "/attnc-" + Stem + ".cu";
}

/// Destroys the program on every path out of compileToCubin.
struct ProgramGuard {
  nvrtcProgram Prog = nullptr;
  ~ProgramGuard() {
    if (Prog)
      nvrtc().nvrtcDestroyProgram(&Prog);
  }
};

} // namespace

std::string nvrtcVersion() {
  int Major = 0, Minor = 0;
  checkNvrtc(nvrtc().nvrtcVersion(&Major, &Minor), "nvrtcVersion");
  return std::to_string(Major) + "." + std::to_string(Minor);
}

std::vector<std::string> nvrtcOptions(GpuArch Arch) {
  const std::string &Cuda = cudaRoot();
  return {
      "--gpu-architecture=" + archName(Arch).str(),
      "-std=c++17",
      // Functions without __host__/__device__ are device code: the device
      // library and generated code are device-only.
      "-default-device",
      // No --use_fast_math: it flushes denormals and approximates division
      // and exp everywhere, which moves results away from the reference
      // checker. Kernels that want a fast intrinsic call it explicitly.
      // Line info costs nothing at run time and makes profiles readable.
      "-lineinfo",
      "-I" + Cuda + "/include",
      "-I" + Cuda + "/include/cccl",
  };
}

CompiledCubin compileToCubin(const codegen::KernelSource &Src) {
  const NvrtcLibrary &Nvrtc = nvrtc(); // CompilerUnavailable first
  // NVRTC wants NUL-terminated strings; the embedded headers are StringRefs.
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

  ProgramGuard Guard;
  std::string ProgramName = Src.Key + ".cu";
  checkNvrtc(Nvrtc.nvrtcCreateProgram(&Guard.Prog, Src.Source.c_str(),
                                ProgramName.c_str(),
                                static_cast<int>(Names.size()),
                                TextPtrs.data(), NamePtrs.data()),
             "nvrtcCreateProgram");

  std::vector<std::string> Options = nvrtcOptions(Src.Arch);
  std::vector<const char *> OptionPtrs;
  for (const std::string &O : Options)
    OptionPtrs.push_back(O.c_str());

  WallTimer Timer;
  nvrtcResult R = Nvrtc.nvrtcCompileProgram(
      Guard.Prog, static_cast<int>(OptionPtrs.size()), OptionPtrs.data());
  CompiledCubin Out;
  Out.Seconds = Timer.seconds();
  size_t LogSize = 0;
  checkNvrtc(Nvrtc.nvrtcGetProgramLogSize(Guard.Prog, &LogSize),
             "nvrtcGetProgramLogSize");
  if (LogSize > 1) { // the size counts the terminating NUL
    Out.Log.resize(LogSize);
    checkNvrtc(Nvrtc.nvrtcGetProgramLog(Guard.Prog, Out.Log.data()),
               "nvrtcGetProgramLog");
    Out.Log.resize(LogSize - 1);
  }

  if (R != NVRTC_SUCCESS) {
    // Anything nvrtcCompileProgram rejects (bad code, a bad option) is a
    // compile failure: report it with the log and keep the source around.
    std::string Log = Out.Log.empty()
                          ? std::string(Nvrtc.nvrtcGetErrorString(R))
                          : Out.Log;
    std::string Path = dumpPath(Src.Key);
    if (std::error_code EC = writeFileAtomically(Path, {Src.Source}))
      Path = "nowhere: writing " + Path + " failed: " + EC.message();
    throw CompileError(Src.Key, Log, Path);
  }

  size_t Size = 0;
  checkNvrtc(Nvrtc.nvrtcGetCUBINSize(Guard.Prog, &Size), "nvrtcGetCUBINSize");
  if (Size == 0)
    // No CUBIN for a virtual architecture (compute_XX): a caller's mistake.
    throw InvalidArgument("compileToCubin: Arch \"" + archName(Src.Arch).str() +
                          "\" yields no CUBIN; expected a real "
                          "architecture such as sm_80 or sm_90a");
  Out.Cubin.resize(Size);
  checkNvrtc(Nvrtc.nvrtcGetCUBIN(Guard.Prog, Out.Cubin.data()), "nvrtcGetCUBIN");
  return Out;
}

} // namespace attn::runtime
