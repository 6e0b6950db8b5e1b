// KernelModule: cuModuleLoadData with the arch check, entry lookup, unload.
#include "KernelModule.h"

#include "attn/codegen/Arch.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"

#include <fmt/format.h>

namespace attn::runtime {

KernelModule::~KernelModule() {
  CudaDriver &D = CudaDriver::get();
  if (Module && D.available())
    D.cuModuleUnload(Module);
}

void KernelModule::load(const CacheResult &Cubin, GpuArch Arch) {
  if (Module)
    return;
  CudaDriver &D = CudaDriver::get();
  D.require();
  const DeviceInfo &Dev = currentDevice();
  if (!archRunsOn(Arch, Dev.Major, Dev.Minor))
    throw InvalidArgument(fmt::format(
        "the kernel was built for {}, which does not run on the device ({}, "
        "compute capability {}.{})",
        archName(Arch).str(), Dev.Name, Dev.Major, Dev.Minor));
  D.check(D.cuModuleLoadData(&Module, Cubin.Cubin->data()),
          "cuModuleLoadData");
}

CUfunction KernelModule::function(const char *Name) const {
  CudaDriver &D = CudaDriver::get();
  CUfunction F = nullptr;
  std::string What = fmt::format("cuModuleGetFunction({})", Name);
  D.check(D.cuModuleGetFunction(&F, Module, Name), What.c_str());
  return F;
}

void KernelModule::allowSharedBytes(CUfunction F, int Bytes,
                                    const std::string &What) const {
  const DeviceInfo &Dev = currentDevice();
  if (Bytes > Dev.SharedMemPerBlockOptin)
    throw InvalidArgument(fmt::format(
        "{} needs {} bytes of shared memory; the device allows {}", What,
        Bytes, Dev.SharedMemPerBlockOptin));
  CudaDriver &D = CudaDriver::get();
  D.check(D.cuFuncSetAttribute(
              F, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, Bytes),
          "cuFuncSetAttribute(max dynamic shared memory)");
}

} // namespace attn::runtime
