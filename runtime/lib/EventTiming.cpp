// CUDA-event timing: warm-up, one call between two events, the median.
#include "attn/runtime/EventTiming.h"

#include "attn/runtime/CudaDriver.h"

#include <algorithm>
#include <vector>

namespace attn::runtime {

double medianEventMs(const std::function<void(int)> &Run, int Warmup,
                     int Repeats, double SettleMs) {
  CudaDriver &D = CudaDriver::get();
  // The wall clock follows the device only if the queue stays short: a
  // synchronize every few calls.
  WallTimer Settle;
  for (int I = 0; I < Warmup || Settle.seconds() * 1e3 < SettleMs; ++I) {
    Run(I);
    if (I % 8 == 7)
      D.check(D.cuCtxSynchronize(), "warm-up");
  }
  D.check(D.cuCtxSynchronize(), "warm-up");
  CUevent E0 = nullptr, E1 = nullptr;
  D.check(D.cuEventCreate(&E0, 0), "cuEventCreate");
  if (CUresult R = D.cuEventCreate(&E1, 0); R != CUDA_SUCCESS) {
    D.cuEventDestroy(E0);
    D.check(R, "cuEventCreate");
  }
  std::vector<float> Ms;
  try {
    for (int I = 0; I < std::max(1, Repeats); ++I) {
      D.check(D.cuEventRecord(E0, nullptr), "cuEventRecord");
      Run(I);
      D.check(D.cuEventRecord(E1, nullptr), "cuEventRecord");
      D.check(D.cuEventSynchronize(E1), "cuEventSynchronize");
      float X = 0;
      D.check(D.cuEventElapsedTime(&X, E0, E1), "cuEventElapsedTime");
      Ms.push_back(X);
    }
  } catch (...) {
    D.cuEventDestroy(E0);
    D.cuEventDestroy(E1);
    throw;
  }
  D.cuEventDestroy(E0);
  D.cuEventDestroy(E1);
  std::sort(Ms.begin(), Ms.end());
  return Ms[Ms.size() / 2];
}

} // namespace attn::runtime
