// NVRTC: generated CUDA text to CUBIN, with the device library in memory.
#ifndef ATTN_RUNTIME_COMPILER_H
#define ATTN_RUNTIME_COMPILER_H

#include "attn/codegen/KernelSource.h"

#include <string>
#include <vector>

namespace attn::runtime {

struct CompiledCubin {
  std::vector<char> Cubin;
  std::string Log;       ///< NVRTC's log (warnings), possibly empty
  double Seconds = 0;    ///< wall time of nvrtcCompileProgram
};

/// "13.0" — part of every cache key.
std::string nvrtcVersion();

/// The NVRTC options used for \p Arch (--gpu-architecture, -std=c++17,
/// include paths for the toolkit's cuda_fp16.h / cuda_bf16.h found from
/// $CUDA_HOME, /usr/local/cuda or next to libnvrtc, -default-device, ...).
/// Part of every cache key.
std::vector<std::string> nvrtcOptions(GpuArch Arch);

/// Compiles \p Src to CUBIN for Src.Arch. The device library headers
/// (DeviceLibrary.h) are passed as in-memory headers. On failure, writes the
/// source to a file in the temp directory and throws CompileError with the
/// log, the key and that path. Thread-safe (one NVRTC program per call).
CompiledCubin compileToCubin(const codegen::KernelSource &Src);

} // namespace attn::runtime

#endif
