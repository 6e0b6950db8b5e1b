// ListVisits: the forward block lists' mean visits a row on the host, from
// the lists' own counts (host lists at once, device lists by an async copy
// into pinned memory read once its event has completed).
#include "ListVisits.h"
#include "DeviceArena.h"

#include "attn/runtime/CudaDriver.h"

#include <algorithm>
#include <atomic>

namespace attn::runtime {

namespace {

std::atomic<uint64_t> PersistentLaunches{0};

double meanOf(const int32_t *Counts, int64_t Rows) {
  double Sum = 0;
  for (int64_t R = 0; R < Rows; ++R)
    Sum += Counts[R];
  return Sum / double(std::max<int64_t>(1, Rows));
}

} // namespace

uint64_t persistentForwardLaunches() { return PersistentLaunches.load(); }
void countPersistentForwardLaunch() { ++PersistentLaunches; }

ListVisits::~ListVisits() {
  CudaDriver &D = CudaDriver::get();
  if (!D.available())
    return;
  // A copy still in flight writes into Host: let it land before the memory
  // goes (a block mask is destroyed after the calls that use it, so this
  // rarely waits).
  if (Done && InFlight)
    D.cuEventSynchronize(Done);
  if (Done)
    D.cuEventDestroy(Done);
  if (Host)
    D.cuMemFreeHost(Host);
}

void ListVisits::setKnown(const std::vector<int32_t> &Counts) {
  std::lock_guard<std::mutex> G(Lock);
  Current = false;
  Mean = meanOf(Counts.data(), int64_t(Counts.size()));
}

void ListVisits::copyBack(const int *Count, int64_t Rows, CUstream Stream) {
  std::lock_guard<std::mutex> G(Lock);
  Mean.reset();
  Current = false;
  CudaDriver &D = CudaDriver::get();
  if (Rows <= 0 || !Count)
    return;
  if (streamIsCapturing(Stream))
    return;
  if (InFlight) {
    CUresult R = D.cuEventQuery(Done);
    if (R == CUDA_ERROR_NOT_READY)
      return;
    D.check(R, "cuEventQuery(block mask visits)");
    InFlight = false;
  }
  if (size_t(Rows) > Capacity) {
    if (Host)
      D.check(D.cuMemFreeHost(Host), "cuMemFreeHost(block mask visits)");
    Host = nullptr;
    Capacity = 0;
    void *P = nullptr;
    D.check(D.cuMemAllocHost(&P, size_t(Rows) * 4),
            "cuMemAllocHost(block mask visits)");
    Host = static_cast<int32_t *>(P);
    Capacity = size_t(Rows);
  }
  if (!Done)
    D.check(D.cuEventCreate(&Done, CU_EVENT_DISABLE_TIMING),
            "cuEventCreate(block mask visits)");
  D.check(D.cuMemcpyDtoHAsync(Host, CUdeviceptr(Count), size_t(Rows) * 4, Stream),
          "cuMemcpyDtoHAsync(block mask visits)");
  D.check(D.cuEventRecord(Done, Stream), "cuEventRecord(block mask visits)");
  this->Rows = Rows;
  InFlight = Current = true;
}

std::optional<double> ListVisits::mean() const {
  std::lock_guard<std::mutex> G(Lock);
  if (Mean || !InFlight)
    return Mean;
  CudaDriver &D = CudaDriver::get();
  CUresult R = D.cuEventQuery(Done);
  if (R == CUDA_ERROR_NOT_READY)
    return std::nullopt;
  D.check(R, "cuEventQuery(block mask visits)");
  InFlight = false;
  if (Current)
    Mean = meanOf(Host, Rows);
  return Mean;
}

} // namespace attn::runtime
