// CudaDriver: loading libcuda at run time, and what happens without it.
#include "attn/runtime/Compiler.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"

#include <catch2/catch.hpp>

#include <dlfcn.h>

using namespace attn;
using namespace attn::runtime;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

/// Whether this machine has a driver library at all; the tests check the
/// behaviour that fits.
bool driverLibraryPresent() {
  void *H = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!H)
    return false;
  dlclose(H);
  return true;
}

} // namespace

TEST_CASE("CudaDriver without libcuda is unavailable with a reason",
          "[runtime][driver]") {
  if (driverLibraryPresent()) {
    WARN("libcuda.so.1 is present here; the no-driver checks do not apply");
    return;
  }
  CudaDriver &D = CudaDriver::get();
  CHECK(&D == &CudaDriver::get());
  CHECK_FALSE(D.available());
  // The reason carries the loader's own message (dlerror's, through
  // llvm::sys::DynamicLibrary).
  CHECK_THAT(D.unavailableReason(),
             StartsWith("libcuda.so.1 not found: libcuda.so.1: cannot open "
                        "shared object file"));
  CHECK(D.cuInit == nullptr);
  CHECK(D.cuLaunchKernel == nullptr);
  CHECK(D.cuMemAlloc == nullptr);
  CHECK_THROWS_AS(D.require(), DriverError);
  CHECK_THROWS_WITH(D.require(), StartsWith("no CUDA driver: ") &&
                                     Contains("libcuda"));
  // currentDevice() reports the same, and keeps reporting it.
  CHECK_THROWS_AS(currentDevice(), DriverError);
  CHECK_THROWS_WITH(currentDevice(), Contains("no CUDA driver"));
}

TEST_CASE("CudaDriver::check names the call", "[runtime][driver]") {
  CudaDriver &D = CudaDriver::get();
  CHECK_NOTHROW(D.check(CUDA_SUCCESS, "cuFoo"));
  CHECK_THROWS_AS(D.check(CUDA_ERROR_INVALID_VALUE, "cuFoo"), DriverError);
  CHECK_THROWS_WITH(D.check(CUDA_ERROR_INVALID_VALUE, "cuFoo"),
                    StartsWith("cuFoo: "));
  if (!D.available())
    CHECK_THROWS_WITH(D.check(CUDA_ERROR_INVALID_VALUE, "cuFoo"),
                      Contains("CUresult 1"));
}

TEST_CASE("DeviceInfo::arch gives Hopper its 'a' target", "[runtime][driver]") {
  auto Arch = [](int Major, int Minor) {
    DeviceInfo I;
    I.Major = Major;
    I.Minor = Minor;
    return I.arch();
  };
  CHECK(Arch(8, 0) == GpuArch::Sm80);
  CHECK(Arch(8, 6) == GpuArch::Sm86);
  CHECK(Arch(8, 9) == GpuArch::Sm89);
  CHECK(Arch(9, 0) == GpuArch::Sm90a);
  CHECK_FALSE(Arch(10, 0)); // no arch attnc builds runs there
  CHECK(Arch(8, 7) == GpuArch::Sm86);
}

// Runs only where a GPU is: the whole path from source to a launched kernel.
TEST_CASE("A compiled kernel runs on the device, where there is one",
          "[runtime][driver][gpu]") {
  CudaDriver &D = CudaDriver::get();
  if (!D.available()) {
    WARN("no CUDA driver (" << D.unavailableReason() << "); skipped");
    return;
  }
  const DeviceInfo &Dev = currentDevice();
  CHECK(&Dev == &currentDevice());
  CHECK_FALSE(Dev.Name.empty());
  CHECK(Dev.Major >= 7);
  CHECK(Dev.MultiProcessors > 0);
  CHECK(Dev.SharedMemPerBlockOptin >= 48 * 1024);
  INFO(Dev.Name << " " << Dev.Major << "." << Dev.Minor);

  codegen::KernelSource Src;
  Src.Key = "driver_smoke";
  REQUIRE(Dev.arch());
  Src.Arch = *Dev.arch();
  Src.Entries = {"fill"};
  Src.Source = "#include \"attnc/common.cuh\"\n"
               "extern \"C\" __global__ void fill(float *X, float V) {\n"
               "  X[blockIdx.x * blockDim.x + threadIdx.x] = V;\n"
               "}\n";
  CompiledCubin C = compileToCubin(Src);

  CUmodule Module = nullptr;
  D.check(D.cuModuleLoadData(&Module, C.Cubin.data()), "cuModuleLoadData");
  CUfunction Fill = nullptr;
  D.check(D.cuModuleGetFunction(&Fill, Module, "fill"), "cuModuleGetFunction");

  constexpr unsigned N = 256;
  CUdeviceptr X = 0;
  D.check(D.cuMemAlloc(&X, N * sizeof(float)), "cuMemAlloc");
  D.check(D.cuMemsetD8(X, 0, N * sizeof(float)), "cuMemsetD8");
  float V = 2.5f;
  void *Args[] = {&X, &V};
  D.check(D.cuLaunchKernel(Fill, 2, 1, 1, N / 2, 1, 1, 0, nullptr, Args,
                           nullptr),
          "cuLaunchKernel");
  D.check(D.cuCtxSynchronize(), "cuCtxSynchronize");
  std::vector<float> Host(N, 0.0f);
  D.check(D.cuMemcpyDtoH(Host.data(), X, N * sizeof(float)), "cuMemcpyDtoH");
  D.check(D.cuMemFree(X), "cuMemFree");
  D.check(D.cuModuleUnload(Module), "cuModuleUnload");
  for (float F : Host)
    REQUIRE(F == 2.5f);

  // A failing call is reported with the driver's own names.
  CHECK_THROWS_WITH(D.check(CUDA_ERROR_INVALID_VALUE, "cuFoo"),
                    Contains("CUDA_ERROR_INVALID_VALUE"));
}
