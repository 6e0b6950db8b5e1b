"""CUDA-event timing shared by the peers_*.py scripts: warm-up calls, then
the median of the timed ones; each call gets its iteration index (the
scripts rotate their input sets by it)."""

import torch


def event_median_ms(call, warmup, reps):
    for i in range(warmup):
        call(i)
    torch.cuda.synchronize()
    times = []
    for i in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        call(i)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]
