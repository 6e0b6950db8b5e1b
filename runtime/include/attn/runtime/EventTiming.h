// Timing kernels with CUDA events: warm-up, then each call alone between
// two events on the default stream, the median of the repeats.
#ifndef ATTN_RUNTIME_EVENTTIMING_H
#define ATTN_RUNTIME_EVENTTIMING_H

#include <functional>

namespace attn::runtime {

/// The median time in milliseconds of \p Run(i) for i = 0..Repeats-1 (at
/// least one), each call between two CUDA events on the default stream,
/// after \p Warmup untimed calls and a synchronize.
double medianEventMs(const std::function<void(int)> &Run, int Warmup,
                     int Repeats);

} // namespace attn::runtime

#endif
