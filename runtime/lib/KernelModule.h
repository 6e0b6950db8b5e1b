// A loaded CUBIN and its entry points: the one place a module is loaded,
// checked against the device and unloaded.
#ifndef ATTN_RUNTIME_KERNELMODULE_H
#define ATTN_RUNTIME_KERNELMODULE_H

#include "attn/codegen/Arch.h"
#include "attn/runtime/KernelCache.h"

#include <cuda.h>

#include <string>

namespace attn::runtime {

class KernelModule {
public:
  KernelModule() = default;
  ~KernelModule();
  KernelModule(const KernelModule &) = delete;
  KernelModule &operator=(const KernelModule &) = delete;

  /// Loads \p Cubin (built for \p Arch) into the current context unless it
  /// is loaded already. InvalidArgument when the arch does not run on the
  /// device, DriverError when there is no driver.
  void load(const CacheResult &Cubin, GpuArch Arch);
  bool loaded() const { return Module != nullptr; }
  /// The extern "C" entry \p Name; DriverError if the module lacks it.
  CUfunction function(const char *Name) const;
  /// Lets \p F use \p Bytes of dynamic shared memory; InvalidArgument naming
  /// \p What when the device allows less.
  void allowSharedBytes(CUfunction F, int Bytes, const std::string &What) const;

private:
  CUmodule Module = nullptr;
};

} // namespace attn::runtime

#endif
