#!/usr/bin/env python3
"""Times the packed (varlen) backward of PyTorch's peers on the batch that
gpu_varlen_test --bench times (it prints the lengths), in the same run:
FlashAttention's varlen kernels through flash_attn.flash_attn_varlen_func
where the package is installed, else through PyTorch's own
torch.nn.attention.varlen.varlen_attn; with --flex also FlexAttention over
the tokens as one sequence under a document mask (compiled, block mask made
outside the timing; the tokens padded to a multiple of 128 with one more
document that the TFLOPS do not count). f16, unmasked and causal (per
sequence, top-left: the lengths of q and k are equal). Only the backward is
timed (torch.autograd.grad of one forward, retain_graph), CUDA events,
warm-up, median of 30. FLOPs: 2.5 x the forward's 4 * H * D * pairs.

    python3 tools/bench/peers_varlen_bwd.py H D[,D...] L1,L2,... [--flex]
"""
import sys

import torch

from peers_timing import compiled_flex, event_median_ms


def pairs(lengths, causal):
    return sum(n * (n + 1) // 2 if causal else n * n for n in lengths)


def flash_call():
    """(name, fn(q, k, v, cu, max_len, causal)) of the varlen peer found."""
    try:
        from flash_attn import flash_attn_varlen_func

        def fa(q, k, v, cu, mx, causal):
            return flash_attn_varlen_func(q, k, v, cu, cu, mx, mx, causal=causal)
        return "flash_attn varlen", fa
    except ImportError:
        pass
    from torch.nn.attention.varlen import varlen_attn

    def tv(q, k, v, cu, mx, causal):
        # window_size=(-1, 0) is causal (the newer signature); older ones
        # take is_causal.
        try:
            return varlen_attn(q, k, v, cu, cu, mx, mx,
                               window_size=(-1, 0) if causal else (-1, -1))
        except TypeError:
            return varlen_attn(q, k, v, cu, cu, mx, mx, is_causal=causal)
    return "torch varlen_attn", tv


def time_flash(H, D, lengths, dt):
    try:
        name, fn = flash_call()
    except Exception as err:  # no varlen peer at all
        print(f"peer varlen: unavailable ({str(err).splitlines()[0][:200]})", flush=True)
        return
    total = sum(lengths)
    cu = torch.tensor([0] + lengths, device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32)
    q, k, v = (torch.randn(total, H, D, device="cuda", dtype=dt, requires_grad=True)
               for _ in range(3))
    dout = torch.randn(total, H, D, device="cuda", dtype=dt)
    for causal in (False, True):
        try:
            out = fn(q, k, v, cu, max(lengths), causal)
            if isinstance(out, tuple):
                out = out[0]

            def bwd(i, out=out):
                torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
            ms = event_median_ms(bwd, 5, 30)
        except Exception as err:
            print(f"peer {name} causal={causal}: unavailable "
                  f"({(str(err).splitlines() or [''])[0][:200]})", flush=True)
            continue
        flops = 2.5 * 4.0 * H * D * pairs(lengths, causal)
        print(f"peer  {name:18s} {'mha' if causal else 'mha_full':8s} H{H} D{D} varlen "
              f"bwd {ms:.3f} ms {flops / (ms * 1e-3) / 1e12:.0f} TFLOPS", flush=True)


def time_flex(H, D, lengths, dt):
    from torch.nn.attention.flex_attention import create_block_mask
    flex = compiled_flex()
    total = sum(lengths)
    padded = (total + 127) // 128 * 128
    sizes = lengths + ([padded - total] if padded > total else [])
    doc = torch.repeat_interleave(
        torch.arange(len(sizes), device="cuda", dtype=torch.int32),
        torch.tensor(sizes, device="cuda"))
    q, k, v = (torch.randn(1, H, padded, D, device="cuda", dtype=dt, requires_grad=True)
               for _ in range(3))
    dout = torch.randn(1, H, padded, D, device="cuda", dtype=dt)
    for causal in (False, True):
        if causal:
            def fn(b, h, qi, kv):
                return (doc[qi] == doc[kv]) & (qi >= kv)
        else:
            def fn(b, h, qi, kv):
                return doc[qi] == doc[kv]
        try:
            bm = create_block_mask(fn, None, None, padded, padded, _compile=True)
            out = flex(q, k, v, block_mask=bm)

            def bwd(i, out=out):
                torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
            ms = event_median_ms(bwd, 5, 30)
        except Exception as err:
            print(f"peer flex document causal={causal}: unavailable "
                  f"({(str(err).splitlines() or [''])[0][:200]})", flush=True)
            continue
        flops = 2.5 * 4.0 * H * D * pairs(lengths, causal)
        print(f"peer  {'flex document':18s} {'mha' if causal else 'mha_full':8s} H{H} D{D} "
              f"varlen bwd {ms:.3f} ms {flops / (ms * 1e-3) / 1e12:.0f} TFLOPS", flush=True)


def main():
    args = sys.argv[1:]
    use_flex = "--flex" in args
    if use_flex:
        args.remove("--flex")
    H = int(args[0])
    dims = [int(x) for x in args[1].split(",")]
    lengths = [int(x) for x in args[2].split(",")]
    for D in dims:
        time_flash(H, D, lengths, torch.float16)
        if use_flex:
            time_flex(H, D, lengths, torch.float16)


if __name__ == "__main__":
    main()
