// Driver entry points the runtime does not use but the GPU tests and bench
// tools do (streams, CUDA-graph capture and replay, device-to-device copy),
// looked up in libcuda.so.1 on first use like runtime::CudaDriver's.
#ifndef ATTN_TESTS_GPU_DRIVEREXTRAS_H
#define ATTN_TESTS_GPU_DRIVEREXTRAS_H

#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"

#include <cuda.h>
#include <dlfcn.h>

namespace attn::gputest {

// cuda.h #defines versioned names (cuStreamDestroy -> cuStreamDestroy_v2);
// stringifying the expanded name gives the symbol to look up.
#define ATTN_EXTRA_STR2(Name) #Name
#define ATTN_EXTRA_STR(Name) ATTN_EXTRA_STR2(Name)
#define ATTN_EXTRA_ENTRY_POINTS(X)                                             \
  X(cuStreamCreate)                                                            \
  X(cuStreamDestroy)                                                           \
  X(cuStreamBeginCapture)                                                      \
  X(cuStreamEndCapture)                                                        \
  X(cuGraphInstantiateWithFlags)                                               \
  X(cuGraphLaunch)                                                             \
  X(cuGraphExecDestroy)                                                        \
  X(cuGraphDestroy)                                                            \
  X(cuMemcpyDtoDAsync)                                                         \
  X(cuCtxCreate)                                                               \
  X(cuCtxDestroy)                                                              \
  X(cuCtxPopCurrent)

struct DriverExtras {
#define ATTN_EXTRA_MEMBER(Name) decltype(&::Name) Name = nullptr;
  ATTN_EXTRA_ENTRY_POINTS(ATTN_EXTRA_MEMBER)
#undef ATTN_EXTRA_MEMBER

  /// Loads them; DriverError naming one that is missing. The caller has
  /// made a context current (runtime::currentDevice()).
  static const DriverExtras &get() {
    static const DriverExtras E = [] {
      DriverExtras X;
      void *Lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
      if (!Lib)
        throw DriverError("dlopen libcuda.so.1 failed");
#define ATTN_EXTRA_LOAD(Name)                                                  \
  X.Name = reinterpret_cast<decltype(X.Name)>(                                 \
      dlsym(Lib, ATTN_EXTRA_STR(Name)));                                       \
  if (!X.Name)                                                                 \
    throw DriverError(std::string("libcuda.so.1 has no ") +          \
                               ATTN_EXTRA_STR(Name));
      ATTN_EXTRA_ENTRY_POINTS(ATTN_EXTRA_LOAD)
#undef ATTN_EXTRA_LOAD
      return X;
    }();
    return E;
  }
};

/// A non-blocking stream (a graph cannot be captured on the legacy one).
class Stream {
public:
  Stream() {
    runtime::CudaDriver::get().check(
        DriverExtras::get().cuStreamCreate(&S, CU_STREAM_NON_BLOCKING),
        "cuStreamCreate");
  }
  ~Stream() { DriverExtras::get().cuStreamDestroy(S); }
  Stream(const Stream &) = delete;
  Stream &operator=(const Stream &) = delete;
  CUstream get() const { return S; }

private:
  CUstream S = nullptr;
};

} // namespace attn::gputest

#endif
