"""Host time per call: C++ Attention::forward (capi_call_overhead, run
here in the same process tree), the C interface's packed call from ctypes
alone (attnc_attention_forward_call on a struct packed once: the floor of
any ctypes path) and from the extension attnc._fastcall (its floor: five
pointers and the stream written, the same C call), attnc.Attention.forward and attnc.torch.attention
(eager: through the extension and through ctypes where the extension is
there, without and with autograd, and a forward and backward under
autograd beside SDPA's), the custom op torch.compile calls, SDPA, and a
replay of a captured CUDA graph. Batches of 200 calls never
fill the launch queue; median of 25 batches of the wall clock, and of CUDA
events around the same batches (the device's time per call: at this tiny
shape the launch rate, not the kernel). With --profile, the eager op's
cProfile (by own time) follows.

Run: ATTNC_OVERHEAD_BIN=path/to/capi_call_overhead python bench_overhead.py
[name] [--profile]"""

import cProfile
import ctypes
import os
import pstats
import subprocess
import sys
import time

import torch

import attnc
import attnc.torch

B, H, S, D = 1, 1, 128, 64
CALLS, ROUNDS = 200, 25


@torch.library.custom_op("attnc_bench::noop", mutates_args=())
def _noop(q: torch.Tensor, values: list[torch.Tensor]) -> torch.Tensor:
    return q.new_empty(q.shape)


EVENTS = {}


def per_call_us(fn, label=None):
    """The median host time per call; the CUDA events' median per call of
    the same batches goes to EVENTS[label]."""
    times, device = [], []
    for r in range(ROUNDS + 3):
        torch.cuda.synchronize()
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        t1 = time.perf_counter()
        end.record()
        if r >= 3:
            times.append((t1 - t0) / CALLS * 1e6)
            end.synchronize()
            device.append(start.elapsed_time(end) * 1e3 / CALLS)
    torch.cuda.synchronize()
    times.sort()
    device.sort()
    if label:
        EVENTS[label] = device[len(device) // 2]
    return times[len(times) // 2]


def _packed(att, q, k, v, out, finals):
    """An attnc_forward_call packed once for q, k, v, out and, where the
    definition has finals (mha's LSE, which the runtime requires), finals:
    (what keeps its buffers alive, the call's address)."""
    from attnc import _fastpack, _torch_fast

    tensors = [q, k, v, out] + ([finals] if att.final_names else [])
    p = _fastpack._build("bench", ("q", "k", "v", "out", "finals"), tensors,
                         (), (), 0)
    base = p.base
    call = _torch_fast._CallWords(
        att._handle, base, base + 32, base + 64, base + 96,
        base + 128 if att.final_names else 0, 0, 0, 0,
        torch.cuda.current_stream().cuda_stream)
    return (p, call), ctypes.addressof(call)


def packed_c_call(att, q, k, v, out, finals):
    """A thunk calling attnc_attention_forward_call on a struct packed
    once (q, k, v, out, finals fixed): ctypes' own cost plus the C++ call.
    A refused call raises (before, this row passed no finals for mha and
    timed the runtime's refusal)."""
    from attnc import _lib, _torch_fast

    keep, at = _packed(att, q, k, v, out, finals)
    fn = _torch_fast._call
    _lib.check(fn(at))

    def run():
        keep  # noqa: B018  (the structs live as long as the thunk)
        if fn(at):
            _lib.check(fn(at))
    return run


def extension_call(att, q, k, v, out, finals):
    """A thunk calling attnc._fastcall.forward_call on a struct packed once
    (its words rewritten with the same values each call), or None without
    the extension. A refused call raises."""
    from attnc import _lib

    ext = _lib.forward_call
    if ext is None:
        return None
    keep, at = _packed(att, q, k, v, out, finals)
    args = (at, q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
            finals.data_ptr() if att.final_names else 0,
            torch.cuda.current_stream().cuda_stream)
    _lib.check(ext(*args))

    def run():
        keep  # noqa: B018  (the structs live as long as the thunk)
        if ext(*args):
            _lib.check(ext(*args))
    return run


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    name = args[0] if args else "mha"
    inputs = {"softmax_bias": -1.0} if name == "sigmoid_attn" else {}
    binary = os.environ.get("ATTNC_OVERHEAD_BIN")
    cxx = c_call = None
    if binary:
        # "cxx_forward_us NAME T" then "c_forward_call_us NAME T" (the C
        # interface's packed call from C).
        run = subprocess.run([binary, name], text=True,
                             capture_output=True)
        if run.returncode:
            print(f"{binary}: exit {run.returncode}: {run.stderr.strip()}")
        times = {line.split()[0]: float(line.split()[-1])
                 for line in run.stdout.split("\n") if line.strip()}
        cxx = times["cxx_forward_us"]
        c_call = times.get("c_forward_call_us")
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.float16)
               for _ in range(3))
    out = torch.empty_like(q)
    finals = torch.empty(1, B, H, S, device="cuda")
    att = attnc.Attention(attnc.example(name), head_dim=D, layout="bhsd")
    stream = torch.cuda.current_stream().cuda_stream
    packed = per_call_us(packed_c_call(att, q, k, v, out, finals), "packed")
    ext_thunk = extension_call(att, q, k, v, out, finals)
    ext_call = ext_thunk and per_call_us(ext_thunk, "ext call")
    raw_stream = per_call_us(
        lambda: att.forward(q, k, v, out, finals, inputs, stream=stream))
    raw = per_call_us(lambda: att.forward(q, k, v, out, finals, inputs))
    scalar = {n: torch.tensor(x) for n, x in inputs.items()}
    op = per_call_us(lambda: attnc.torch.attention(q, k, v, name,
                                                   inputs=scalar), "op")
    from attnc import _lib, _torch_fast
    op_ctypes = None
    if _torch_fast._forward_call is not None:
        _torch_fast._forward_call = None  # the same path through ctypes
        op_ctypes = per_call_us(lambda: attnc.torch.attention(
            q, k, v, name, inputs=scalar), "op ctypes")
        _torch_fast._forward_call = _lib.forward_call
    op_finals = per_call_us(lambda: attnc.torch.attention(
        q, k, v, name, inputs=scalar, return_finals=True))
    names = "\n".join(scalar)
    values = list(scalar.values())
    custom_op = per_call_us(lambda: torch.ops.attnc.attention_fwd(
        q, k, v, name, "bhsd", names, values, None, None, 0, 0, 0))
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    op_grad = per_call_us(lambda: attnc.torch.attention(qg, kg, vg, name,
                                                        inputs=scalar))
    dout = torch.randn_like(q)
    fwd_bwd = per_call_us(lambda: torch.autograd.grad(
        attnc.torch.attention(qg, kg, vg, name, inputs=scalar), (qg, kg, vg),
        dout), "fwd+bwd")
    noop = per_call_us(lambda: _noop(q, [q, k]))
    sdpa = per_call_us(lambda: torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True), "sdpa")
    sdpa_fwd_bwd = per_call_us(lambda: torch.autograd.grad(
        torch.nn.functional.scaled_dot_product_attention(
            qg, kg, vg, is_causal=True), (qg, kg, vg), dout), "sdpa fwd+bwd")
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        attnc.torch.attention(q, k, v, name, inputs=scalar)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        attnc.torch.attention(q, k, v, name, inputs=scalar)
    replay = per_call_us(g.replay, "replay")
    empty = torch.cuda.CUDAGraph()
    with torch.cuda.graph(empty):
        torch.empty(1, device="cuda").zero_()
    replay_trivial = per_call_us(empty.replay)
    print(f"card: {torch.cuda.get_device_name()}  variant {name} "
          f"b{B} h{H} s{S} d{D} f16, host us per call (median):")
    if cxx is not None:
        print(f"  C++ Attention::forward            {cxx:7.2f}")
    if c_call is not None:
        print(f"  C interface packed call (from C)  {c_call:7.2f}"
              f"  (+{c_call - cxx:.2f} over C++)")
    print(f"  C interface packed call (ctypes)  {packed:7.2f}"
          + (f"  (+{packed - cxx:.2f} over C++)" if cxx else ""))
    if ext_call is not None:
        print(f"  C interface packed call (attnc._fastcall) {ext_call:7.2f}"
              + (f"  (+{ext_call - cxx:.2f} over C++)" if cxx else ""))
    else:
        print(f"  no attnc._fastcall: {_lib.fastcall_missing}")
    print(f"  attnc.Attention.forward (stream=) {raw_stream:7.2f}"
          + (f"  (+{raw_stream - cxx:.2f} over C++)" if cxx else ""))
    print(f"  attnc.Attention.forward           {raw:7.2f}"
          + (f"  (+{raw - cxx:.2f} over C++)" if cxx else ""))
    way = "attnc._fastcall" if op_ctypes is not None else "ctypes"
    print(f"  attnc.torch.attention (eager op, {way}) {op:7.2f}"
          + (f"  (+{op - cxx:.2f} over C++)" if cxx else ""))
    if op_ctypes is not None:
        print(f"  attnc.torch.attention (eager op, ctypes call) "
              f"{op_ctypes:7.2f}"
              + (f"  (+{op_ctypes - cxx:.2f} over C++)" if cxx else ""))
    print(f"  attnc.torch.attention (return_finals) {op_finals:7.2f}"
          + (f"  (+{op_finals - cxx:.2f} over C++)" if cxx else ""))
    print(f"  attnc.torch.attention (requires grad: autograd.Function) "
          f"{op_grad:7.2f}" + (f"  (+{op_grad - cxx:.2f} over C++)"
                               if cxx else ""))
    print(f"  forward + backward under autograd   {fwd_bwd:7.2f}"
          f"  (SDPA's {sdpa_fwd_bwd:.2f})")
    print(f"  torch.ops.attnc.attention_fwd (the custom op, compiled "
          f"graphs' call) {custom_op:7.2f}")
    print(f"  an empty torch custom op          {noop:7.2f}"
          "  (torch.library's own share of the op's time)")
    print(f"  torch SDPA (eager, reference)     {sdpa:7.2f}")
    print(f"  CUDA graph replay of the op       {replay:7.2f}"
          f"  (a one-kernel graph: {replay_trivial:.2f})")
    print("  CUDA events, us per call of the same batches: "
          + ", ".join(f"{k} {v:.2f}" for k, v in EVENTS.items()))
    if "--profile" in sys.argv:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(2000):
            attnc.torch.attention(q, k, v, name, inputs=scalar)
        prof.disable()
        torch.cuda.synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main()
