// DeviceArena: region planning on the host and the one growing device
// allocation the regions are carved from.
#include "DeviceArena.h"

#include "attn/Error.h"
#include "attn/runtime/CudaDriver.h"

#include "llvm/Support/MathExtras.h"

#include <fmt/format.h>

#include <algorithm>

namespace attn::runtime {

unsigned ArenaLayout::add(size_t Bytes, size_t Align) {
  if (!llvm::isPowerOf2_64(Align) || Align > DefaultAlign)
    throw InternalError(fmt::format(
        "workspace region alignment {} is not a power of two up to {}", Align,
        DefaultAlign));
  // An empty region takes no space: it neither pads nor moves the end.
  size_t Offset = Bytes ? llvm::alignTo(End, Align) : End;
  Regions.push_back({Offset, Bytes});
  if (Bytes) {
    End = Offset + Bytes;
    MaxAlign = std::max(MaxAlign, Align);
  }
  return unsigned(Regions.size() - 1);
}

size_t ArenaLayout::bytes() const { return llvm::alignTo(End, MaxAlign); }

void *ArenaLayout::at(CUdeviceptr Base, unsigned Region) const {
  const ArenaLayout::Region &R = Regions[Region];
  return R.Bytes ? reinterpret_cast<void *>(Base + R.Offset) : nullptr;
}

DeviceArena::~DeviceArena() {
  CudaDriver &D = CudaDriver::get();
  if (Base && D.available())
    D.cuMemFree(Base);
}

bool DeviceArena::ensure(size_t N) {
  if (N <= Bytes)
    return false;
  CudaDriver &D = CudaDriver::get();
  D.require();
  if (Base)
    D.check(D.cuMemFree(Base), ("cuMemFree(" + What + ")").c_str());
  Base = 0;
  Bytes = 0;
  D.check(D.cuMemAlloc(&Base, N), ("cuMemAlloc(" + What + ")").c_str());
  Bytes = N;
  return true;
}

bool streamIsCapturing(CUstream Stream) {
  CudaDriver &D = CudaDriver::get();
  if (!D.available())
    return false;
  CUstreamCaptureStatus Status = CU_STREAM_CAPTURE_STATUS_NONE;
  D.check(D.cuStreamIsCapturing(Stream, &Status), "cuStreamIsCapturing");
  return Status != CU_STREAM_CAPTURE_STATUS_NONE;
}

unsigned *ZeroedCounters::get(size_t Count, CUstream Stream) {
  CudaDriver &D = CudaDriver::get();
  if (Mem.ensure(4 * Count))
    Zeroed = false;
  if (!Zeroed) {
    // The whole allocation: a later, smaller call uses its first counters.
    D.check(D.cuMemsetD32Async(Mem.base(), 0, Mem.capacity() / 4, Stream),
            ("cuMemsetD32Async(" + Mem.name() + ")").c_str());
    Zeroed = !streamIsCapturing(Stream);
  }
  return reinterpret_cast<unsigned *>(Mem.base());
}

} // namespace attn::runtime
