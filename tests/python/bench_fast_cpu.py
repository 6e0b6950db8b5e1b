"""The one-call eager forward's own Python cost, without PyTorch or a GPU:
attnc/_torch_fast.forward on the stand-in tensors of test_torch_fast.py
with the C call stubbed (the ctypes call and the extension
attnc._fastcall's, each in its own rows), (a) as they are (their methods are Python, so
slower than torch's C ones) and (b) with methods that cost next to nothing
and no allocation, which leaves attnc's own work: the key, the lookup, the
words written; plus the Python-level calls per op (cProfile). Last, the
two ways into the real C function on a call it refuses at once (a NULL
call: no GPU needed): ctypes' own cost against the extension's.

Run: PYTHONPATH=python ATTNC_LIBRARY=build/capi/libattnc_c.so \\
  python tests/python/bench_fast_cpu.py"""

import cProfile
import ctypes
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import attnc  # noqa: E402
from test_torch_fast import StandInTorch, Tensor  # noqa: E402


class Quick(Tensor):
    """Tensor methods as cheap as Python allows, new_empty allocating
    nothing: what is left of a call is attnc's."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        strides = Tensor.stride(self)
        self.stride = lambda: strides
        self.data_ptr = int(self._data).__int__
        self.get_device = int(self._device).__int__

    def new_empty(self, shape, dtype=None):
        return self


def median_us(fn, calls=20000, rounds=9):
    fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    times.sort()
    return times[len(times) // 2]


def main():
    with StandInTorch() as stand_in:
        fast = stand_in.fast
        objects = {}

        def resolve(q, v, name):
            if name not in objects:
                objects[name] = attnc.Attention(
                    attnc.example(name), head_dim=64, layout="bhsd",
                    arch="sm_80")
            return objects[name]

        cases = (("mha", None), ("sigmoid_attn", {"softmax_bias": -1.0}))
        ways = (("ctypes", None),
                ("ext", lambda call, q, k, v, out, finals, stream: 0))
        for kind in (Tensor, Quick):
            stand_in.module.Tensor = fast._Tensor = kind
            q, k, v = (kind((1, 1, 128, 64)) for _ in range(3))
            # The outputs' allocation (torch.empty_strided): the stand-in's
            # own Tensor (Python, unrecorded), or none for Quick.
            fast._empty_strided = (
                (lambda shape, strides, dtype=None, device=None:
                 Tensor(shape, device.index, dtype, strides=strides))
                if kind is Tensor else
                (lambda shape, strides, dtype=None, device=None: q))
            for way, stub in ways:
                fast._call = lambda address: 0
                fast._forward_call = stub
                for name, inputs in cases:
                    def call():
                        fast.forward(name, q, k, v, inputs, False, resolve)
                    us = median_us(call)
                    prof = cProfile.Profile()
                    prof.enable()
                    call()
                    prof.disable()
                    print(f"{kind.__name__:6} {way:6} {name:12} {us:6.2f} "
                          f"us a call, {pstats.Stats(prof).total_calls} "
                          "Python-level calls")
        print(f"an empty Python call: {median_us(lambda: None):.2f} us")
        c_call = attnc._lib.declare("attnc_attention_forward_call",
                                    [ctypes.c_void_p])
        print("a refused C call (NULL): ctypes "
              f"{median_us(lambda: c_call(None)):.2f} us")
        ext = attnc._lib.forward_call
        if ext is None:
            print(f"  no extension ({attnc._lib.fastcall_missing})")
        else:
            print("  attnc._fastcall "
                  f"{median_us(lambda: ext(0, 0, 0, 0, 0, 0, 0)):.2f} us")


if __name__ == "__main__":
    main()
