// Shared pieces of the GPU tests and benchmarks: device buffers through the
// dlopen'ed driver, fp16/bf16 conversion on the host, random tensors.
#ifndef ATTN_TESTS_GPU_SUPPORT_H
#define ATTN_TESTS_GPU_SUPPORT_H

#include "attn/Pipeline.h"
#include "attn/codegen/Arch.h"
#include "attn/codegen/Codegen.h"
#include "attn/runtime/Attention.h"
#include "attn/runtime/CudaDriver.h"
#include "attn/runtime/Errors.h"
#include "attn/runtime/KernelCache.h"
#include "attn/runtime/Selector.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace attn::gputest {

/// Round-to-nearest-even conversions between double and the 16-bit formats.
inline uint16_t toHalfBits(double X) {
  _Float16 H = static_cast<_Float16>(static_cast<float>(X));
  uint16_t B;
  std::memcpy(&B, &H, 2);
  return B;
}
inline double fromHalfBits(uint16_t B) {
  _Float16 H;
  std::memcpy(&H, &B, 2);
  return static_cast<double>(H);
}
inline uint16_t toBf16Bits(double X) {
  float F = static_cast<float>(X);
  uint32_t U;
  std::memcpy(&U, &F, 4);
  if ((U & 0x7fffffffu) > 0x7f800000u)
    return 0x7fc0; // NaN
  U += 0x7fffu + ((U >> 16) & 1u);
  return static_cast<uint16_t>(U >> 16);
}
inline double fromBf16Bits(uint16_t B) {
  uint32_t U = uint32_t(B) << 16;
  float F;
  std::memcpy(&F, &U, 4);
  return F;
}
inline uint16_t toBits(DType T, double X) {
  return T == DType::F16 ? toHalfBits(X) : toBf16Bits(X);
}
inline double fromBits(DType T, uint16_t B) {
  return T == DType::F16 ? fromHalfBits(B) : fromBf16Bits(B);
}
inline double roundTo(DType T, double X) { return fromBits(T, toBits(T, X)); }

/// A device allocation owned by the test.
class DeviceBuffer {
public:
  explicit DeviceBuffer(size_t Bytes) : Bytes(Bytes) {
    auto &D = runtime::CudaDriver::get();
    D.check(D.cuMemAlloc(&Ptr, Bytes ? Bytes : 1), "cuMemAlloc");
  }
  ~DeviceBuffer() { runtime::CudaDriver::get().cuMemFree(Ptr); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  void *get() const { return reinterpret_cast<void *>(Ptr); }
  /// Copies \p N bytes from \p Src and returns once they are on the device.
  /// cuMemcpyHtoD from pageable memory may return before its DMA has landed,
  /// and a kernel on a non-blocking stream (Stream below) is not ordered
  /// after the legacy stream that copy runs on: the wait makes the data
  /// visible to work on any stream.
  void upload(const void *Src, size_t N) {
    auto &D = runtime::CudaDriver::get();
    D.check(D.cuMemcpyHtoD(Ptr, Src, N), "cuMemcpyHtoD");
    D.check(D.cuStreamSynchronize(nullptr), "cuMemcpyHtoD (wait)");
  }
  void download(void *Dst, size_t N) const {
    auto &D = runtime::CudaDriver::get();
    D.check(D.cuMemcpyDtoH(Dst, Ptr, N), "cuMemcpyDtoH");
  }
  /// Fills every byte with \p Byte (0xff: NaN in every float format) and
  /// returns once it is done. cuMemsetD8 is asynchronous for device memory
  /// and runs on the legacy stream, which a non-blocking stream does not
  /// wait for: without the wait, a poison could land after the kernels it
  /// was meant to precede.
  void poison(unsigned char Byte = 0xff) {
    auto &D = runtime::CudaDriver::get();
    D.check(D.cuMemsetD8(Ptr, Byte, Bytes), "cuMemsetD8");
    D.check(D.cuStreamSynchronize(nullptr), "cuMemsetD8 (wait)");
  }
  /// Fills every byte with 0xff (NaN), ordered on \p S before what the
  /// caller enqueues there next, without waiting. The size must be a
  /// multiple of 4.
  void poisonOn(CUstream S) {
    auto &D = runtime::CudaDriver::get();
    if (Bytes % 4)
      throw DriverError("poisonOn: a size that is not a multiple of 4");
    D.check(D.cuMemsetD32Async(Ptr, 0xffffffffu, Bytes / 4, S),
            "cuMemsetD32Async (poison)");
  }
  size_t size() const { return Bytes; }

private:
  CUdeviceptr Ptr = 0;
  size_t Bytes;
};

/// \p Bits (fp16/bf16 values) in a new device allocation.
inline std::unique_ptr<DeviceBuffer> upload(const std::vector<uint16_t> &Bits) {
  auto Buf = std::make_unique<DeviceBuffer>(Bits.size() * 2);
  Buf->upload(Bits.data(), Bits.size() * 2);
  return Buf;
}

/// A tensor custom input on the device, as its declaration's element type
/// says (int32 ids as int32, everything else as float32), kept alive in
/// \p Keep; the view to pass.
inline runtime::TensorView
uploadInput(bool Int32, const std::vector<double> &Data,
            const std::vector<int64_t> &Shape,
            std::vector<std::unique_ptr<DeviceBuffer>> &Keep) {
  Keep.push_back(std::make_unique<DeviceBuffer>(Data.size() * 4));
  if (Int32) {
    std::vector<int32_t> I(Data.begin(), Data.end());
    Keep.back()->upload(I.data(), I.size() * 4);
  } else {
    std::vector<float> F(Data.begin(), Data.end());
    Keep.back()->upload(F.data(), F.size() * 4);
  }
  return runtime::TensorView::contiguous(
      Keep.back()->get(),
      Int32 ? DType::I32 : DType::F32, Shape);
}

/// The head every bench tool's command line shares: NAME DTYPE and then
/// integers (B H S D ...), \p MinInts of them at least.
struct BenchCommand {
  std::string Name;
  DType Dtype = DType::F16;
  std::vector<int> Ints;
};

/// How many times the backward tests run a case for their bitwise
/// comparison (the first run against the fp64 reference, every later one
/// against the first, outputs poisoned before each): 3, or
/// $ATTNC_GPU_TEST_RUNS (at least 2), so that a stress run can repeat a
/// case often enough to catch a rare race.
inline int bitwiseRuns() {
  if (const char *E = std::getenv("ATTNC_GPU_TEST_RUNS"); E && *E)
    return std::max(2, std::atoi(E));
  return 3;
}

/// Whether a case of configuration \p Config runs under \p Filter, the
/// value of $ATTNC_GPU_TEST_CONFIG (null: every case): "default" picks the
/// cases of the default configuration (an empty one), any other text the
/// cases whose configuration contains it.
inline bool configSelected(const char *Filter, const std::string &Config) {
  if (!Filter)
    return true;
  if (std::string(Filter) == "default")
    return Config.empty();
  return Config.find(Filter) != std::string::npos;
}

/// A GPU test's start: "skipped: <why>" and false (the test exits 77)
/// without a CUDA driver, else the line "device: <name> (<arch>)" and true.
inline bool announceDevice() {
  auto &Drv = runtime::CudaDriver::get();
  if (!Drv.available()) {
    std::printf("skipped: %s\n", Drv.unavailableReason().c_str());
    return false;
  }
  const runtime::DeviceInfo &Dev = runtime::currentDevice();
  std::printf("device: %s (%s)\n", Dev.Name.c_str(),
              archName(runtime::resolveArch(std::nullopt)).data());
  return true;
}

/// Parses the command line into \p Out and checks for a GPU. Returns 0 to go
/// on, else the exit status after saying why: 2 for bad usage (\p Usage is
/// printed), 77 where there is no GPU (ctest's "skipped").
inline int parseBenchCommand(int Argc, char **Argv, int MinInts,
                             const char *Usage, BenchCommand &Out,
                             bool NeedsGpu = true) {
  if (Argc < 3 + MinInts) {
    std::fprintf(stderr, "usage: %s\n", Usage);
    return 2;
  }
  std::optional<DType> T = dtypeFromName(Argv[2]);
  if (!T || !isAttentionDtype(*T)) {
    std::fprintf(stderr, "%s: dtype must be f16 or bf16\n", Argv[0]);
    return 2;
  }
  Out.Name = Argv[1];
  Out.Dtype = *T;
  for (int I = 3; I < Argc; ++I) {
    char *End = nullptr;
    long V = std::strtol(Argv[I], &End, 10);
    if (*End != '\0')
      break; // the first non-number starts the optional arguments
    Out.Ints.push_back(int(V));
  }
  if (int(Out.Ints.size()) < MinInts) {
    std::fprintf(stderr, "usage: %s\n", Usage);
    return 2;
  }
  auto &Drv = runtime::CudaDriver::get();
  if (NeedsGpu && !Drv.available()) {
    std::printf("skipped: %s\n", Drv.unavailableReason().c_str());
    return 77;
  }
  return 0;
}

} // namespace attn::gputest

#endif
