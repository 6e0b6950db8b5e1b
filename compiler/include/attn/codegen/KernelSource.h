// What code generation hands to the runtime: generated CUDA text plus what
// is needed to compile, cache and launch it.
#ifndef ATTN_CODEGEN_KERNELSOURCE_H
#define ATTN_CODEGEN_KERNELSOURCE_H

#include "attn/GpuArch.h"

#include <string>
#include <vector>

namespace attn::codegen {

/// One generated translation unit. It #includes the device library by the
/// names in runtime/kernels ("attnc/fwd_sm80.cuh"); those headers are passed
/// to NVRTC in memory, or inlined by `attnc emit --standalone`.
struct KernelSource {
  /// Readable cache-key prefix, e.g.
  /// "mha.fwd_sm80.f16.d128x128.sm_90a.m128n64w4s2"; only [A-Za-z0-9._-].
  std::string Key;
  /// The __global__ entry points (extern "C" names) the source defines.
  std::vector<std::string> Entries;
  /// The CUDA C++ text.
  std::string Source;
  /// The target NVRTC compiles it for.
  GpuArch Arch = GpuArch::Sm80;
};

} // namespace attn::codegen

#endif
