// The GPU architectures attnc builds for, as one enum (public: signatures
// and bundles name them). The rules that depend on it are in
// attn/codegen/Arch.h.
#ifndef ATTN_GPUARCH_H
#define ATTN_GPUARCH_H

#include <cstdint>

namespace attn {

/// NVRTC's targets: sm_80 (A100), sm_86 and sm_89 (Ampere/Ada consumer
/// parts: less shared memory) and sm_90a (H100/H200, with the
/// arch-specific wgmma, TMA and setmaxnreg).
enum class GpuArch : uint8_t { Sm80, Sm86, Sm89, Sm90a };

/// Every GpuArch, oldest first.
inline constexpr GpuArch AllGpuArchs[] = {GpuArch::Sm80, GpuArch::Sm86,
                                          GpuArch::Sm89, GpuArch::Sm90a};

} // namespace attn

#endif
