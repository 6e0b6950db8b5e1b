// The CUDA driver API, loaded from libcuda.so.1 on first use.
// Nothing links against libcuda: compiling works on machines without a GPU,
// and a launch there fails with a clear DriverError.
#ifndef ATTN_RUNTIME_CUDADRIVER_H
#define ATTN_RUNTIME_CUDADRIVER_H

#include <cuda.h> // types and enums only; no symbol of libcuda is linked

#include "attn/codegen/Arch.h"

#include <optional>
#include <string>

namespace attn::runtime {

class CudaDriver {
public:
  /// The process-wide driver; loading is attempted once, thread-safely.
  static CudaDriver &get();

  /// True when libcuda loaded and cuInit succeeded.
  bool available() const { return Loaded; }
  /// Why it is not available ("libcuda.so.1 not found: ...").
  const std::string &unavailableReason() const { return Reason; }
  /// Throws DriverError("no CUDA driver: <reason>") unless available.
  void require() const;
  /// Throws DriverError("<What>: <error name>: <error string>") unless
  /// \p R is CUDA_SUCCESS.
  void check(CUresult R, const char *What) const;

  // Entry points (null until loaded). Named as in cuda.h without the
  // version suffixes.
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDriverGetVersion)(int *) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice *, int) = nullptr;
  CUresult (*cuDeviceGetCount)(int *) = nullptr;
  CUresult (*cuDeviceGetName)(char *, int, CUdevice) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int *, CUdevice_attribute,
                                    CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxGetCurrent)(CUcontext *) = nullptr;
  CUresult (*cuCtxGetDevice)(CUdevice *) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
  CUresult (*cuModuleLoadData)(CUmodule *, const void *) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule,
                                  const char *) = nullptr;
  CUresult (*cuFuncSetAttribute)(CUfunction, CUfunction_attribute,
                                 int) = nullptr;
  CUresult (*cuFuncGetAttribute)(int *, CUfunction_attribute,
                                 CUfunction) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned,
                             unsigned, unsigned, unsigned, unsigned, CUstream,
                             void **, void **) = nullptr;
  /// A launch with attributes (paged decode's merge: programmatic
  /// dependent launch on sm_90).
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **,
                               void **) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t) = nullptr;
  CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t) = nullptr;
  /// Pinned host memory and copies into it behind a stream's work (the
  /// forward block lists' visit counts, ListVisits.h).
  CUresult (*cuMemAllocHost)(void **, size_t) = nullptr;
  CUresult (*cuMemFreeHost)(void *) = nullptr;
  CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream) = nullptr;
  /// A device copy (the decode bench's bandwidth reference).
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t) = nullptr;
  CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream) = nullptr;
  CUresult (*cuStreamSynchronize)(CUstream) = nullptr;
  CUresult (*cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus *) = nullptr;
  /// Streams and graphs: what a caller capturing paged decode needs.
  CUresult (*cuStreamCreate)(CUstream *, unsigned) = nullptr;
  CUresult (*cuStreamDestroy)(CUstream) = nullptr;
  CUresult (*cuStreamBeginCapture)(CUstream, CUstreamCaptureMode) = nullptr;
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph *) = nullptr;
  CUresult (*cuGraphInstantiate)(CUgraphExec *, CUgraph,
                                 unsigned long long) = nullptr;
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream) = nullptr;
  CUresult (*cuGraphExecDestroy)(CUgraphExec) = nullptr;
  CUresult (*cuGraphDestroy)(CUgraph) = nullptr;
  CUresult (*cuEventCreate)(CUevent *, unsigned) = nullptr;
  CUresult (*cuEventDestroy)(CUevent) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventQuery)(CUevent) = nullptr;
  CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char **) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char **) = nullptr;
  /// Tensor maps for TMA (the sm90 skeleton); host-side only, no launch.
  CUresult (*cuTensorMapEncodeTiled)(
      CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
      const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
      const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
      CUtensorMapL2promotion, CUtensorMapFloatOOBfill) = nullptr;

private:
  CudaDriver();
  bool Loaded = false;
  std::string Reason;
};

/// The device of a context.
struct DeviceInfo {
  /// The context the calls of a thread that asked run in, and its device.
  CUcontext Context = nullptr;
  int Ordinal = 0;
  std::string Name;         ///< "NVIDIA H100 80GB HBM3"
  int Major = 0, Minor = 0; ///< compute capability
  int SharedMemPerBlockOptin = 0;
  int MultiProcessors = 0;
  /// The arch to build for this device (9.0 gets sm_90a's features), or
  /// none for a device attnc does not build for (attn/codegen/Arch.h).
  std::optional<GpuArch> arch() const;
};

/// The context current on the calling thread and its device: the one the
/// caller made current (cudaSetDevice, torch.cuda.device, cuCtxSetCurrent),
/// or else device 0's primary context, retained and made current here.
/// DriverError if there is no driver or no device. Kernels loaded in one
/// context run only there: an Attention keeps to the context of its first
/// launching call (Attention.h).
const DeviceInfo &currentDevice();

/// currentDevice(), and the rule of an object bound to a context: the first
/// call binds \p Bound and \p Ordinal to the current context, a later call
/// in another context is an InvalidArgument naming both devices (\p What
/// names the object: "Attention").
void enterBoundContext(CUcontext &Bound, int &Ordinal, const char *What);

} // namespace attn::runtime

#endif
