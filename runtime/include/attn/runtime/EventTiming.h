// Timing: kernels with CUDA events (warm-up, then each call alone between two
// events on the default stream, the median of the repeats), host work with
// one wall-clock timer.
#ifndef ATTN_RUNTIME_EVENTTIMING_H
#define ATTN_RUNTIME_EVENTTIMING_H

#include <chrono>
#include <functional>

namespace attn::runtime {

/// The median time in milliseconds of \p Run(i) for i = 0..Repeats-1 (at
/// least one), each call between two CUDA events on the default stream,
/// after \p Warmup untimed calls and a synchronize.
double medianEventMs(const std::function<void(int)> &Run, int Warmup,
                     int Repeats);

/// Wall-clock seconds on the steady clock since construction, for the
/// compile, lookup and tuning times the runtime reports.
class WallTimer {
public:
  double seconds() const {
    return std::chrono::duration<double>(Clock::now() - Start).count();
  }

private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point Start = Clock::now();
};

} // namespace attn::runtime

#endif
