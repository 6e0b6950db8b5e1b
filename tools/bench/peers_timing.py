"""CUDA-event timing shared by the peers_*.py scripts: warm-up calls, then
the median of the timed ones; each call gets its iteration index (the
scripts rotate their input sets by it), and FlexAttention compiled the way
every script times it."""

import time

import torch


def event_median_ms(call, warmup, reps, settle_ms=1000.0):
    """The median of reps calls, each between two CUDA events, after at
    least warmup untimed calls lasting at least settle_ms of wall time in
    all: the GPU's clocks settle to the shape's own sustained load (an H200
    at its power cap runs about 1700 MHz, against 1980 after an idle gap).
    attnc's medianEventMs, runtime/include/attn/runtime/EventTiming.h, does
    the same."""
    start = time.perf_counter()
    i = 0
    while i < warmup or (time.perf_counter() - start) * 1e3 < settle_ms:
        call(i)
        if i % 8 == 7:
            torch.cuda.synchronize()
        i += 1
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


def compiled_flex(dynamic_default=False):
    """flex_attention under torch.compile with static shapes: one kernel per
    shape, Flex at its fastest. torch.compile's default recompiles a second
    shape with symbolic sizes, and those kernels are slower (on an H200 the
    document mask at S = 4k took 0.83 ms against 0.53 ms static, the window
    and chunked masks 1.5-1.7x longer), so a script timing several shapes
    in one process would understate Flex. dynamic_default: that default,
    for comparison."""
    from torch.nn.attention.flex_attention import flex_attention
    if dynamic_default:
        return torch.compile(flex_attention)
    return torch.compile(flex_attention, dynamic=False)
