#!/usr/bin/env python3
"""Times flash-linear-attention's chunk kernels on a packed batch
(cu_seqlens, initial states in, final states out) with the sequence lengths
attnc_bench_linear_varlen takes, and on the padded batch at the same token
count, in the same run: chunk_simple_gla for simple_gla, chunk_retention for
retention_linear, and for mamba2 chunk_simple_gla with v = x*dt and
g = A*dt, that prologue included in its time, as in peers_linear.py.
CUDA-event timing, warm-up (Triton's compile and autotuning are paid
there), median of 20. The backward is the packed call's gradients of q, k,
v, the decay inputs and the initial states given dout and the final
states' gradient (torch.autograd.grad on a retained graph, the mamba2
prologue's backward included), against the padded batch's (no states).

    python3 tools/bench/peers_linear_varlen.py [--unguarded] [--lock FILE]
        [--ready FILE] [--packed-only]
        NAME f16|bf16 H D DV L1,L2,... [forward|backward|both]

The direction defaults to forward. --unguarded switches off fla 0.6's
refusal of its gated backward (chunk_simple_gla: simple_gla and mamba2)
with Triton >= 3.4 and < 3.7.1 on Hopper, as peers_linear.py's
--bwd-unguarded does; those rows say "fla-unguarded" (a kernel fla itself
calls incorrect on that Triton: indicative only). --lock FILE: every
compile and warm-up runs first, then the timing holds an exclusive flock on
FILE, so several of these processes can compile at once and still time
one at a time (attnc's benches take the same lock with flock(1)).
--ready FILE: the file is created once the compile and warm-up are done
(before the lock is taken), so that a caller can start its own timings
only then. --packed-only: the packed calls alone, no padded batch (half
of Triton's compile and autotuning on a cold cache).
"""
import os
import fcntl
import sys

import torch

from peers_timing import event_median_ms


def median_ms(fn, n=20):
    return event_median_ms(lambda i: fn(), 2, n)


def parse(argv):
    unguarded, lock, ready, packed_only = False, None, None, False
    while argv and argv[0].startswith("--"):
        if argv[0] == "--unguarded":
            unguarded, argv = True, argv[1:]
        elif argv[0] == "--packed-only":
            packed_only, argv = True, argv[1:]
        elif argv[0] == "--lock" and len(argv) > 1:
            lock, argv = argv[1], argv[2:]
        elif argv[0] == "--ready" and len(argv) > 1:
            ready, argv = argv[1], argv[2:]
        else:
            sys.exit(f"peers_linear_varlen.py: unknown option {argv[0]}")
    if len(argv) not in (6, 7):
        sys.exit(__doc__)
    direction = argv[6] if len(argv) > 6 else "forward"
    if direction not in ("forward", "backward", "both"):
        sys.exit(f"peers_linear_varlen.py: direction {direction!r}")
    return unguarded, lock, ready, packed_only, argv, direction


def main():
    unguarded, lock, ready, packed_only, argv, direction = parse(sys.argv[1:])
    name, dts = argv[0], argv[1]
    H, D, DV = map(int, argv[2:5])
    lengths = [int(x) for x in argv[5].split(",")]
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[dts]
    if unguarded:
        import fla.ops.common.chunk_o as chunk_o
        chunk_o.TRITON_ABOVE_3_7_1 = True
    from fla.ops.retention import chunk_retention
    from fla.ops.simple_gla import chunk_simple_gla
    import triton
    dev = "cuda"
    S, T = len(lengths), sum(lengths)
    cu = torch.tensor([0] + lengths, device=dev).cumsum(0)
    mean = T // S
    gated = name != "retention_linear"
    label = "fla-unguarded" if unguarded and gated else "fla"

    def inputs(B, L, states):
        q = torch.randn(B, L, H, D, device=dev, dtype=dt)
        k = torch.randn(B, L, H, D, device=dev, dtype=dt)
        v = torch.randn(B, L, H, DV, device=dev, dtype=dt)
        g = -0.1 * torch.rand(B, L, H, device=dev, dtype=torch.float32)
        A = -0.2 - 1.8 * torch.rand(H, device=dev, dtype=torch.float32)
        dtv = 0.05 + 0.95 * torch.rand(B, L, H, device=dev, dtype=torch.float32)
        h0 = (torch.randn(S, H, D, DV, device=dev, dtype=torch.float32)
              if states else None)
        return q, k, v, g, A, dtv, h0

    def call(x, cu_seqlens):
        q, k, v, g, A, dtv, h0 = x
        states = dict(initial_state=h0, output_final_state=h0 is not None,
                      cu_seqlens=cu_seqlens)
        if name == "retention_linear":
            return chunk_retention(q, k, v, scale=D ** -0.5, **states)
        if name == "mamba2":
            v = (v.float() * dtv[..., None]).to(dt)
            g = A * dtv
            scale = 1.0
        else:
            scale = D ** -0.5
        return chunk_simple_gla(q, k, v, g=g, scale=scale, **states)

    def leaves(x):
        q, k, v, g, A, dtv, h0 = x
        ls = [q, k, v] + ([g] if name == "simple_gla" else []) + \
             ([A, dtv] if name == "mamba2" else []) + ([h0] if h0 is not None else [])
        return [t.requires_grad_() for t in ls]

    def grads(x, cu_seqlens):
        # The graph is built once; each timed call is its backward alone.
        ls = leaves(x)
        o, ht = call(x, cu_seqlens)
        outs, douts = [o], [torch.randn_like(o)]
        if ht is not None:
            outs.append(ht)
            douts.append(torch.randn_like(ht))
        return lambda: torch.autograd.grad(outs, ls, douts, retain_graph=True,
                                           allow_unused=True)

    # Every call first (compiles, autotuning), then the timing.
    calls = {}
    packed = inputs(1, T, True)
    padded = None if packed_only else inputs(S, mean, False)
    if direction in ("forward", "both"):
        calls["forward"] = (lambda: call(packed, cu),
                            None if packed_only else lambda: call(padded, None))
    if direction in ("backward", "both"):
        calls["backward"] = (grads(packed, cu),
                             None if packed_only else grads(padded, None))
    with torch.no_grad():
        if "forward" in calls:
            for f in calls["forward"]:
                for _ in range(3 if f else 0):
                    f()
    if "backward" in calls:
        for f in calls["backward"]:
            for _ in range(3 if f else 0):
                f()
    torch.cuda.synchronize()
    if ready:
        open(ready, "w").close()
    held = open(lock, "a") if lock else None
    if held:
        fcntl.flock(held, fcntl.LOCK_EX)
    try:
        for what, (var, fix) in calls.items():
            def both():
                return median_ms(var), (median_ms(fix) if fix else None)
            if what == "forward":
                with torch.no_grad():
                    var_ms, fix_ms = both()
            else:
                var_ms, fix_ms = both()
            tail = "" if what == "forward" else " backward"
            fixed = ("padded: not timed" if fix_ms is None else
                     f"padded B{S} T{mean}: {fix_ms:.3f} ms "
                     f"({S * mean / fix_ms / 1e3:.1f} Mtok/s)")
            print(f"{label} {name} {dts} H{H} D{D} DV{DV}{tail}: packed {S} "
                  f"sequences, {T} tokens: {var_ms:.3f} ms ({T / var_ms / 1e3:.1f} "
                  f"Mtok/s); {fixed} [fla 0.6, triton "
                  f"{triton.__version__}, torch {torch.__version__}]", flush=True)
    finally:
        if held:
            fcntl.flock(held, fcntl.LOCK_UN)


if __name__ == "__main__":
    main()
