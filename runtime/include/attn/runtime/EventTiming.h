// Timing: kernels with CUDA events (warm-up, then each call alone between two
// events on the default stream, the median of the repeats), host work with
// one wall-clock timer.
#ifndef ATTN_RUNTIME_EVENTTIMING_H
#define ATTN_RUNTIME_EVENTTIMING_H

#include <chrono>
#include <functional>

namespace attn::runtime {

/// How long the untimed calls before a measurement last at least, in
/// milliseconds of wall time. A GPU's clocks follow its recent load: an
/// H200 boosts to 1980 MHz after an idle gap and, once a heavy kernel has
/// run for a while, holds its 700 W cap at about 1700 MHz. A short kernel
/// timed after five warm-up calls therefore measured what ran before it
/// (2026-11-29: causal S = 1k took 0.36 ms in a fresh process, 0.43 ms right
/// after 0.26 s of S = 16k calls), and 100 ms of warm-up lands in the
/// transition; after a second of its own calls each shape is timed at the
/// clocks its sustained load settles to, as in training. peers_timing.py
/// (tools/bench) warms the peers up the same way.
inline constexpr double SettleWarmupMs = 1000.0;

/// The median time in milliseconds of \p Run(i) for i = 0..Repeats-1 (at
/// least one), each call between two CUDA events on the default stream,
/// after at least \p Warmup untimed calls that take at least \p SettleMs
/// of wall time in all, and a synchronize. \p Run gets increasing indices
/// during the warm-up too (callers rotate their inputs by it).
double medianEventMs(const std::function<void(int)> &Run, int Warmup,
                     int Repeats, double SettleMs = SettleWarmupMs);

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
