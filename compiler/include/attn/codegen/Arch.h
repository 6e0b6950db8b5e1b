// The GPU architectures attnc generates code for, as one enum: every
// arch-dependent rule (shared memory, Hopper features, which devices run a
// CUBIN) is a function of it, never a comparison of names.
#ifndef ATTN_CODEGEN_ARCH_H
#define ATTN_CODEGEN_ARCH_H

#include "attn/GpuArch.h"

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>

namespace attn {

/// "sm_80", "sm_86", "sm_89", "sm_90a": NVRTC's --gpu-architecture value
/// and the spelling of cache keys, tune files and messages.
llvm::StringRef archName(GpuArch A);
std::optional<GpuArch> archFromName(llvm::StringRef Name);
/// archFromName, or a UserError "<What> '<Name>': expected sm_80, sm_86,
/// sm_89 or sm_90a".
GpuArch parseArch(llvm::StringRef Name, llvm::StringRef What = "arch");
/// "sm_80, sm_86, sm_89 or sm_90a", for messages and help text.
llvm::StringRef archNamesText();

/// Dynamic shared memory a CTA may opt in to: 163 KiB on sm_80, 227 KiB on
/// sm_90a, 99 KiB on sm_86 and sm_89.
int archSharedLimit(GpuArch A);
/// True for the Hopper target, whose kernels may use wgmma and TMA.
inline bool archHasWgmma(GpuArch A) { return A == GpuArch::Sm90a; }
/// True when a CUBIN built for \p A runs on a device of compute capability
/// \p Major.\p Minor: the same major and at least the minor, and sm_90a
/// only on 9.0.
bool archRunsOn(GpuArch A, int Major, int Minor);
/// The arch to build for a device of compute capability \p Major.\p Minor
/// (the newest one that runs there), or none for a device attnc does not
/// build for.
std::optional<GpuArch> archForDevice(int Major, int Minor);

} // namespace attn

#endif
