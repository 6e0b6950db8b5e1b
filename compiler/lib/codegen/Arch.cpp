// GPU architectures: names and the rules that depend on them.
#include "attn/codegen/Arch.h"

#include "attn/Error.h"

#include <string>

namespace attn {

llvm::StringRef archName(GpuArch A) {
  switch (A) {
  case GpuArch::Sm80:
    return "sm_80";
  case GpuArch::Sm86:
    return "sm_86";
  case GpuArch::Sm89:
    return "sm_89";
  case GpuArch::Sm90a:
    return "sm_90a";
  }
  return "?";
}

std::optional<GpuArch> archFromName(llvm::StringRef Name) {
  for (GpuArch A : AllGpuArchs)
    if (archName(A) == Name)
      return A;
  return std::nullopt;
}

llvm::StringRef archNamesText() { return "sm_80, sm_86, sm_89 or sm_90a"; }

GpuArch parseArch(llvm::StringRef Name, llvm::StringRef What) {
  if (std::optional<GpuArch> A = archFromName(Name))
    return *A;
  throw UserError(What.str() + " '" + Name.str() + "' is not supported; expected " +
                  archNamesText().str());
}

int archSharedLimit(GpuArch A) {
  switch (A) {
  case GpuArch::Sm80:
    return 163 * 1024;
  case GpuArch::Sm90a:
    return 227 * 1024;
  case GpuArch::Sm86:
  case GpuArch::Sm89:
    return 99 * 1024;
  }
  return 0;
}

bool archRunsOn(GpuArch A, int Major, int Minor) {
  switch (A) {
  case GpuArch::Sm80:
    return Major == 8 && Minor >= 0;
  case GpuArch::Sm86:
    return Major == 8 && Minor >= 6;
  case GpuArch::Sm89:
    return Major == 8 && Minor >= 9;
  case GpuArch::Sm90a:
    return Major == 9 && Minor == 0;
  }
  return false;
}

std::optional<GpuArch> archForDevice(int Major, int Minor) {
  std::optional<GpuArch> Best;
  for (GpuArch A : AllGpuArchs)
    if (archRunsOn(A, Major, Minor))
      Best = A;
  return Best;
}

} // namespace attn
