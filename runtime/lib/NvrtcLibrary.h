// NVRTC loaded at run time, on first use: a program that runs only bundled
// kernels starts and runs without the CUDA toolkit.
#ifndef ATTN_RUNTIME_NVRTCLIBRARY_H
#define ATTN_RUNTIME_NVRTCLIBRARY_H

#include <nvrtc.h>

#include <string>

namespace attn::runtime {

/// The NVRTC entry points attnc calls, resolved from one library. Declared
/// from nvrtc.h's prototypes, so a signature change fails to compile here
/// instead of misbehaving at run time.
struct NvrtcLibrary {
#define ATTN_NVRTC_ENTRY_POINTS(X)                                             \
  X(nvrtcVersion)                                                              \
  X(nvrtcGetErrorString)                                                       \
  X(nvrtcCreateProgram)                                                        \
  X(nvrtcDestroyProgram)                                                       \
  X(nvrtcCompileProgram)                                                       \
  X(nvrtcGetProgramLogSize)                                                    \
  X(nvrtcGetProgramLog)                                                        \
  X(nvrtcGetCUBINSize)                                                         \
  X(nvrtcGetCUBIN)
#define ATTN_NVRTC_MEMBER(Name) decltype(&::Name) Name = nullptr;
  ATTN_NVRTC_ENTRY_POINTS(ATTN_NVRTC_MEMBER)
#undef ATTN_NVRTC_MEMBER

  /// The file the entry points came from (for the CUDA headers next to it).
  std::string Path;
};

/// The loaded library; the first call loads it (thread-safe, once per
/// process). CompilerUnavailable, with every path tried and why it failed,
/// when no NVRTC can be loaded: $ATTNC_NVRTC_LIBRARY when set (only it),
/// else libnvrtc.so.<major> from the folders the build found it in, then
/// the system's search path.
const NvrtcLibrary &nvrtc();

/// Whether nvrtc() would succeed; \p Why gets its reason when not.
bool nvrtcAvailable(std::string *Why = nullptr);

} // namespace attn::runtime

#endif
