"""The eager call's pieces, host ns per call: attnc.torch.attention and
attnc.Attention.forward whole, the extension's packed call with fixed
arguments (their floor), the three ways to allocate the output, the plan
key with its lookup, and the capture query. Rows are interleaved: every
round times each row back to back (300 calls), so a drift of the host's
speed hits all rows alike; medians of 21 rounds, less the empty row.

Run (GPU machine): PYTHONPATH=python ATTNC_LIBRARY=.../libattnc_c.so
python tests/python/gpu/bench_overhead_parts.py"""

import statistics
import time

import torch

import attnc
import attnc.torch
from attnc import _lib, _torch_fast

CALLS, ROUNDS = 300, 21


def main():
    q, k, v = (torch.randn(1, 1, 128, 64, device="cuda",
                           dtype=torch.float16) for _ in range(3))
    out = torch.empty_like(q)
    finals = torch.empty(1, 1, 1, 128, device="cuda")
    att = attnc.Attention(attnc.example("mha"), head_dim=64, layout="bhsd")
    attnc.torch.attention(q, k, v, "mha")
    att.forward(q, k, v, out, finals)
    torch.cuda.synchronize()
    plans = _torch_fast._local.plans
    p = next(iter(plans.values()))
    shape, strides, device = p.out_shape, p.out_strides, q.device

    def key():
        return ("mha", q.dtype, k.dtype, v.dtype, q.get_device(),
                k.get_device(), v.get_device(), q.shape, q.stride(), k.shape,
                k.stride(), v.shape, v.stride(), False, None)

    floor = (p.call_at, q.data_ptr(), k.data_ptr(), v.data_ptr(),
             out.data_ptr(), finals.data_ptr(), 0)
    rows = {
        "empty": lambda: None,
        "attnc.torch.attention(q, k, v, 'mha')":
            lambda: attnc.torch.attention(q, k, v, "mha"),
        "attnc.Attention.forward": lambda: att.forward(q, k, v, out, finals),
        "packed call, fixed arguments": lambda: _lib.forward_call(*floor),
        "q.new_empty(shape)": lambda: q.new_empty(shape),
        "torch.empty_strided": lambda: torch.empty_strided(
            shape, strides, dtype=torch.float16, device=device),
        "torch.empty(shape, dtype, device)": lambda: torch.empty(
            shape, dtype=torch.float16, device=device),
        "plan key and lookup": lambda: plans.get(key()),
        "capture query": _torch_fast._capturing,
    }
    if _lib.forward_call is None:
        del rows["packed call, fixed arguments"]
    times = {name: [] for name in rows}
    for r in range(ROUNDS + 2):
        for name, fn in rows.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            for _ in range(CALLS):
                fn()
            t1 = time.perf_counter_ns()
            if r >= 2:
                times[name].append((t1 - t0) / CALLS)
    torch.cuda.synchronize()
    base = statistics.median(times["empty"])
    print(f"card: {torch.cuda.get_device_name()}, ns per call (median of "
          f"{ROUNDS} interleaved rounds, less the empty row):")
    for name, xs in times.items():
        if name != "empty":
            print(f"  {name:38s} {statistics.median(xs) - base:8.0f}")


if __name__ == "__main__":
    main()
