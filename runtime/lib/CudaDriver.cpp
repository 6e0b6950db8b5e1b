// The CUDA driver API loaded from libcuda.so.1 at run time, and the device
// of the calling thread's context.
#include "attn/runtime/CudaDriver.h"
#include "attn/codegen/Arch.h"

#include "attn/runtime/Errors.h"

#include "llvm/Support/DynamicLibrary.h"

#include <fmt/format.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include <string>
#include <type_traits>

namespace attn::runtime {

namespace {

// cuda.h #defines many entry points to versioned symbols (cuMemAlloc ->
// cuMemAlloc_v2, cuEventDestroy -> cuEventDestroy_v2, ...), and the member
// names in CudaDriver.h are expanded the same way. Stringifying the
// *expanded* name therefore gives exactly the symbol a program linked
// against libcuda would call, with no hand-kept table of suffixes.
#define ATTN_STRINGIFY_EXPANDED(Name) ATTN_STRINGIFY(Name)
#define ATTN_STRINGIFY(Name) #Name

// Every entry point CudaDriver exposes, in the header's order.
#define ATTN_CUDA_DRIVER_ENTRY_POINTS(X)                                       \
  X(cuInit)                                                                    \
  X(cuDriverGetVersion)                                                        \
  X(cuDeviceGet)                                                               \
  X(cuDeviceGetCount)                                                          \
  X(cuDeviceGetName)                                                           \
  X(cuDeviceGetAttribute)                                                      \
  X(cuDevicePrimaryCtxRetain)                                                  \
  X(cuCtxSetCurrent)                                                           \
  X(cuCtxGetCurrent)                                                           \
  X(cuCtxGetDevice)                                                            \
  X(cuCtxSynchronize)                                                          \
  X(cuModuleLoadData)                                                          \
  X(cuModuleUnload)                                                            \
  X(cuModuleGetFunction)                                                       \
  X(cuFuncSetAttribute)                                                        \
  X(cuFuncGetAttribute)                                                        \
  X(cuLaunchKernel)                                                            \
  X(cuLaunchKernelEx)                                                          \
  X(cuMemAlloc)                                                                \
  X(cuMemFree)                                                                 \
  X(cuMemcpyHtoD)                                                              \
  X(cuMemcpyDtoH)                                                              \
  X(cuMemAllocHost)                                                            \
  X(cuMemFreeHost)                                                             \
  X(cuMemcpyDtoHAsync)                                                         \
  X(cuMemcpyDtoDAsync)                                                         \
  X(cuMemsetD8)                                                                \
  X(cuMemsetD32Async)                                                          \
  X(cuStreamSynchronize)                                                       \
  X(cuStreamIsCapturing)                                                       \
  X(cuStreamCreate)                                                            \
  X(cuStreamDestroy)                                                           \
  X(cuStreamBeginCapture)                                                      \
  X(cuStreamEndCapture)                                                        \
  X(cuGraphInstantiate)                                                        \
  X(cuGraphLaunch)                                                             \
  X(cuGraphExecDestroy)                                                        \
  X(cuGraphDestroy)                                                            \
  X(cuEventCreate)                                                             \
  X(cuEventDestroy)                                                            \
  X(cuEventRecord)                                                             \
  X(cuEventSynchronize)                                                        \
  X(cuEventQuery)                                                              \
  X(cuEventElapsedTime)                                                        \
  X(cuGetErrorName)                                                            \
  X(cuGetErrorString)                                                          \
  X(cuTensorMapEncodeTiled)

/// Looks \p Symbol up in \p Lib into \p Fn; appends it to \p Missing
/// when absent.
template <typename FnPtr>
void resolve(llvm::sys::DynamicLibrary &Lib, FnPtr &Fn, const char *Symbol,
             std::string &Missing) {
  static_assert(std::is_pointer_v<FnPtr>, "entry points are pointers");
  void *Address = Lib.getAddressOfSymbol(Symbol);
  if (!Address) {
    Missing += Missing.empty() ? "" : ", ";
    Missing += Symbol;
    return;
  }
  Fn = reinterpret_cast<FnPtr>(Address);
}

/// "<error name>: <error string>", as far as the driver can tell.
std::string describe(const CudaDriver &D, CUresult R) {
  const char *Name = nullptr, *Text = nullptr;
  if (!D.cuGetErrorName || D.cuGetErrorName(R, &Name) != CUDA_SUCCESS)
    Name = nullptr;
  if (!D.cuGetErrorString || D.cuGetErrorString(R, &Text) != CUDA_SUCCESS)
    Text = nullptr;
  return (Name ? std::string(Name) : "CUresult " + std::to_string(R)) +
         ": " + (Text ? Text : "unknown error");
}

} // namespace

CudaDriver &CudaDriver::get() {
  // A function-local static: C++11 guarantees one thread loads, the others
  // wait for it.
  static CudaDriver Driver;
  return Driver;
}

CudaDriver::CudaDriver() {
  // A permanent library: it is never closed (nothing here calls
  // llvm_shutdown), as the driver must outlive every module and context, up
  // to process exit. Its symbols are looked up in it alone, by
  // getAddressOfSymbol, never through the process-wide search.
  // ATTNC_NO_GPU: behave as on a machine without a driver, so that the
  // no-GPU paths can be exercised (and tested) on a machine with one.
  if (const char *Off = std::getenv("ATTNC_NO_GPU");
      Off && *Off && std::string(Off) != "0") {
    Reason = "disabled by ATTNC_NO_GPU";
    return;
  }
  std::string Why;
  llvm::sys::DynamicLibrary Lib =
      llvm::sys::DynamicLibrary::getPermanentLibrary("libcuda.so.1", &Why);
  if (!Lib.isValid()) {
    Reason = "libcuda.so.1 not found: " + (Why.empty() ? "dlopen failed" : Why);
    return;
  }

  std::string Missing;
#define ATTN_RESOLVE(Name)                                                     \
  resolve(Lib, this->Name, ATTN_STRINGIFY_EXPANDED(Name), Missing);
  ATTN_CUDA_DRIVER_ENTRY_POINTS(ATTN_RESOLVE)
#undef ATTN_RESOLVE

  auto Fail = [&](std::string Why) {
    Reason = std::move(Why);
    // "Null until loaded": a half-loaded driver must not look usable.
#define ATTN_RESET(Name) this->Name = nullptr;
    ATTN_CUDA_DRIVER_ENTRY_POINTS(ATTN_RESET)
#undef ATTN_RESET
  };

  if (!Missing.empty()) {
    Fail("libcuda.so.1 is too old or not NVIDIA's driver: it lacks " +
         Missing);
    return;
  }

  // cuInit fails without a usable GPU (none present, driver/kernel module
  // mismatch, CUDA_VISIBLE_DEVICES empty): then there is no driver to speak
  // of either.
  CUresult R = cuInit(0);
  if (R != CUDA_SUCCESS) {
    Fail("libcuda.so.1 loaded but cuInit failed: " + describe(*this, R));
    return;
  }
  Loaded = true;
}

void CudaDriver::require() const {
  if (!Loaded)
    throw DriverError("no CUDA driver: " + Reason);
}

void CudaDriver::check(CUresult R, const char *What) const {
  if (R == CUDA_SUCCESS)
    return;
  throw DriverError(std::string(What) + ": " + describe(*this, R));
}

std::optional<GpuArch> DeviceInfo::arch() const {
  return archForDevice(Major, Minor);
}

namespace {

/// The primary context of device 0, retained once and never released (as
/// the CUDA runtime does): what a thread with no current context gets.
CUcontext primaryContext0() {
  // If retaining throws, the static stays uninitialised and the next call
  // tries again (and reports the same error).
  static const CUcontext Ctx = [] {
    CudaDriver &D = CudaDriver::get();
    D.require();
    int Count = 0;
    D.check(D.cuDeviceGetCount(&Count), "cuDeviceGetCount");
    if (Count == 0)
      throw DriverError("no CUDA device: the driver loaded but reports no GPU");
    CUdevice Handle = 0;
    D.check(D.cuDeviceGet(&Handle, 0), "cuDeviceGet");
    CUcontext C = nullptr;
    D.check(D.cuDevicePrimaryCtxRetain(&C, Handle), "cuDevicePrimaryCtxRetain");
    return C;
  }();
  return Ctx;
}

/// Describes the device of \p Ctx, which is current on this thread.
DeviceInfo describeCurrent(CUcontext Ctx) {
  CudaDriver &D = CudaDriver::get();
  DeviceInfo Info;
  Info.Context = Ctx;
  CUdevice Handle = 0;
  D.check(D.cuCtxGetDevice(&Handle), "cuCtxGetDevice");
  // A CUdevice is the device's ordinal (cuDeviceGet(&h, i) gives h == i).
  Info.Ordinal = int(Handle);
  char Name[256] = {};
  D.check(D.cuDeviceGetName(Name, sizeof(Name) - 1, Handle),
          "cuDeviceGetName");
  Info.Name = Name;
  auto Attribute = [&](CUdevice_attribute A, const char *What) {
    int Value = 0;
    D.check(D.cuDeviceGetAttribute(&Value, A, Handle), What);
    return Value;
  };
  Info.Major = Attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                         "cuDeviceGetAttribute(compute capability major)");
  Info.Minor = Attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                         "cuDeviceGetAttribute(compute capability minor)");
  Info.SharedMemPerBlockOptin =
      Attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                "cuDeviceGetAttribute(max shared memory per block opt-in)");
  Info.MultiProcessors =
      Attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                "cuDeviceGetAttribute(multiprocessor count)");
  return Info;
}

} // namespace

const DeviceInfo &currentDevice() {
  CudaDriver &D = CudaDriver::get();
  D.require();
  // A context is current per thread. Where the caller made one current
  // (the CUDA runtime's cudaSetDevice, PyTorch's device guard, its own),
  // calls run there; a thread with none gets device 0's primary context.
  CUcontext Current = nullptr;
  D.check(D.cuCtxGetCurrent(&Current), "cuCtxGetCurrent");
  if (!Current) {
    Current = primaryContext0();
    D.check(D.cuCtxSetCurrent(Current), "cuCtxSetCurrent");
  }
  // Described once per context (the table lives as long as the process:
  // a handful of contexts in practice); the thread's last answer is kept
  // so that a call costs one cuCtxGetCurrent.
  thread_local const DeviceInfo *Last = nullptr;
  if (Last && Last->Context == Current)
    return *Last;
  static std::mutex M;
  static std::map<CUcontext, std::unique_ptr<DeviceInfo>> Known;
  std::lock_guard<std::mutex> Lock(M);
  std::unique_ptr<DeviceInfo> &Info = Known[Current];
  if (!Info)
    Info = std::make_unique<DeviceInfo>(describeCurrent(Current));
  Last = Info.get();
  return *Info;
}

void enterBoundContext(CUcontext &Bound, int &Ordinal, const char *What) {
  const DeviceInfo &Dev = currentDevice();
  if (!Bound) {
    Bound = Dev.Context;
    Ordinal = Dev.Ordinal;
    return;
  }
  if (Dev.Context == Bound)
    return;
  std::string Now = Dev.Ordinal == Ordinal
                        ? fmt::format("another context of device {}", Ordinal)
                        : fmt::format("device {}'s", Dev.Ordinal);
  throw InvalidArgument(fmt::format(
      "device: this {} runs in the context of device {}, where its first "
      "call ran (its kernels are loaded there); this call's current context "
      "is {}. Make one {} per device, or make its context current for its "
      "calls",
      What, Ordinal, Now, What));
}

} // namespace attn::runtime
