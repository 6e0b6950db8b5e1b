// Device scratch: ArenaLayout plans aligned regions on the host (no GPU
// needed), DeviceArena owns the one allocation they are carved from and
// grows it on demand.
#ifndef ATTN_RUNTIME_DEVICEARENA_H
#define ATTN_RUNTIME_DEVICEARENA_H

#include "llvm/ADT/SmallVector.h"

#include <cuda.h>

#include <cstddef>
#include <string>

namespace attn::runtime {

/// Where the regions of one workspace lie: each starts at the first
/// multiple of its alignment at or after the end of the one before. A
/// region of zero bytes takes no space (no padding either) and has no
/// address (nullptr), so a kernel argument for an unused region is null
/// rather than a pointer into a neighbour.
class ArenaLayout {
public:
  /// What the runners' kernels expect of their scratch arrays: the driver's
  /// allocation granularity, so no region shares a 256-byte line.
  static constexpr size_t DefaultAlign = 256;

  /// Adds a region of \p Bytes starting at a multiple of \p Align (a power
  /// of two, at most DefaultAlign: cuMemAlloc aligns the base to 256);
  /// returns its index for offset() and at(). InternalError otherwise.
  unsigned add(size_t Bytes, size_t Align = DefaultAlign);

  size_t offset(unsigned Region) const { return Regions[Region].Offset; }
  size_t size(unsigned Region) const { return Regions[Region].Bytes; }
  unsigned regions() const { return unsigned(Regions.size()); }
  /// Bytes the allocation needs: the end of the last region rounded up to
  /// the largest alignment of a non-empty region (0 when all are empty).
  size_t bytes() const;

  /// The address of \p Region in an allocation at \p Base: nullptr for an
  /// empty region.
  void *at(CUdeviceptr Base, unsigned Region) const;
  template <typename T> T *at(CUdeviceptr Base, unsigned Region) const {
    return static_cast<T *>(at(Base, Region));
  }

private:
  struct Region {
    size_t Offset, Bytes;
  };
  llvm::SmallVector<Region, 16> Regions;
  size_t End = 0;
  size_t MaxAlign = 1;
};

/// One device allocation (cuMemAlloc), kept between calls and replaced by a
/// larger one when a call needs more; its contents do not survive growth.
/// Freed on destruction when the driver is still available (it is not at
/// process exit after the driver was unloaded). Not thread-safe: runners
/// keep one per stream (PerStream.h) and call it under their object's lock.
class DeviceArena {
public:
  /// \p What names the buffer in driver errors ("cuMemAlloc(<What>)").
  explicit DeviceArena(std::string What) : What(std::move(What)) {}
  ~DeviceArena();
  DeviceArena(const DeviceArena &) = delete;
  DeviceArena &operator=(const DeviceArena &) = delete;

  /// Makes the allocation at least \p Bytes long; returns true when it was
  /// (re)allocated, i.e. the old contents are gone. Never allocates for 0
  /// bytes. DriverError when there is no driver or the allocation fails.
  bool ensure(size_t Bytes);
  /// ensure(L.bytes()), then the base the regions of \p L are carved from.
  CUdeviceptr carve(const ArenaLayout &L) {
    ensure(L.bytes());
    return Base;
  }

  CUdeviceptr base() const { return Base; }
  size_t capacity() const { return Bytes; }
  const std::string &name() const { return What; }

private:
  std::string What;
  CUdeviceptr Base = 0;
  size_t Bytes = 0;
};

/// Whether \p Stream is being captured into a CUDA graph (what is enqueued
/// there runs only with the graph: nothing may be allocated, and nothing
/// it would set up may be remembered as done). False without a driver
/// (host-only tests capture nothing).
bool streamIsCapturing(CUstream Stream);

/// Counters that kernels leave at 0 when they finish (the persistent
/// forward's tile counters, the decode splits' last-CTA arrival counts):
/// one allocation, zeroed on the call's stream when new or regrown. A
/// zeroing captured into a CUDA graph happens only when the graph runs, so
/// the next call outside a capture zeroes again. Per stream, like the
/// arena.
class ZeroedCounters {
public:
  explicit ZeroedCounters(std::string What) : Mem(std::move(What)) {}
  /// \p Count zeroed 32-bit counters, ordered on \p Stream before what
  /// follows.
  unsigned *get(size_t Count, CUstream Stream);

private:
  DeviceArena Mem;
  bool Zeroed = false;
};

} // namespace attn::runtime

#endif
